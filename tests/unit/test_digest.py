"""imexctl.base.digest gives hashlib's SHA-256 without loading OpenSSL."""

import hashlib
import subprocess
import sys

from imexctl.base.digest import sha256, sha256_hex


def test_same_digest_as_hashlib():
    for data in (b"", b"tray01,tray02", bytes(range(256)) * 100):
        assert sha256_hex(data) == hashlib.sha256(data).hexdigest()
        h = sha256()
        h.update(data[:7])
        h.update(data[7:])
        assert h.hexdigest() == hashlib.sha256(data).hexdigest()


def test_the_decision_record_does_not_load_openssl():
    code = ("import sys, imexctl.rules.decision, imexctl.imex.render; "
            "print(imexctl.rules.decision.nodes_hash(['tray01']), '_hashlib' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == [hashlib.sha256(b"tray01").hexdigest()[:12], "False"]
