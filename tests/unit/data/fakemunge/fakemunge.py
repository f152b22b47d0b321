"""A stand-in for MUNGE's ``munge`` and ``unmunge`` (the system boundary imexctl's seal
talks to), for unit tests: the same command line, output shape and exit statuses, with
an HMAC under a fixed test key in place of munged. The credential names the caller's uid
(FAKEMUNGE_UID overrides it, to make credentials "from" another user)."""

import base64
import hashlib
import hmac
import json
import os
import sys
import time

KEY = b"imexctl unit tests only"


def munge(args):
    payload = args[args.index("--string") + 1] if "--string" in args else sys.stdin.read()
    uid = int(os.environ.get("FAKEMUNGE_UID", os.getuid()))
    # FAKEMUNGE_TIME: the encode time (epoch s) a credential claims, for replay tests
    when = int(os.environ.get("FAKEMUNGE_TIME") or time.time())
    body = json.dumps({"uid": uid, "p": payload, "t": when}).encode()
    mac = hmac.new(KEY, body, hashlib.sha256).hexdigest()
    print("MUNGE:" + base64.b64encode(json.dumps({"b": body.decode(), "m": mac}).encode()).decode() + ":")
    return 0


def unmunge(args):
    cred = sys.stdin.read().strip()
    if not (cred.startswith("MUNGE:") and cred.endswith(":")):
        print("unmunge: Error: Invalid credential format", file=sys.stderr)
        return 8
    try:
        outer = json.loads(base64.b64decode(cred[6:-1], validate=True))
        body = outer["b"].encode()
        ok = hmac.compare_digest(hmac.new(KEY, body, hashlib.sha256).hexdigest(), outer["m"])
    except Exception:  # noqa: BLE001
        print("unmunge: Error: Invalid credential version", file=sys.stderr)
        return 9
    if not ok:
        print("unmunge: Error: Invalid message authentication code", file=sys.stderr)
        return 11
    inner = json.loads(body)
    # --keys as unmunge prints them (--numeric: ENCODE_TIME as epoch seconds)
    keys = next((a.split("=", 1)[1] for a in args if a.startswith("--keys=")), "STATUS,UID")
    lines = {"STATUS": "0", "UID": str(inner["uid"]), "ENCODE_TIME": str(inner.get("t", 0))}
    head = "".join(f"{k + ':':17}{lines[k]}\n" for k in keys.split(",") if k in lines)
    sys.stdout.write(f"{head}\n{inner['p']}")
    return 0


if __name__ == "__main__":
    tool = os.path.basename(sys.argv[0])
    sys.exit(munge(sys.argv[1:]) if tool == "munge" else unmunge(sys.argv[1:]))
