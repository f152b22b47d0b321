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

KEY = b"imexctl unit tests only"


def munge(args):
    payload = args[args.index("--string") + 1] if "--string" in args else sys.stdin.read()
    uid = int(os.environ.get("FAKEMUNGE_UID", os.getuid()))
    body = json.dumps({"uid": uid, "p": payload}).encode()
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
    sys.stdout.write(f"STATUS:          0\nUID:             {inner['uid']}\n\n{inner['p']}")
    return 0


if __name__ == "__main__":
    tool = os.path.basename(sys.argv[0])
    sys.exit(munge(sys.argv[1:]) if tool == "munge" else unmunge(sys.argv[1:]))
