#!/bin/sh
# Runs every reproduction against a checkout with a venv: AUDIT_CHECKOUT (default: the
# repository this copy lives in), scratch worlds under AUDIT_WORK (default /tmp/imexctl-audit), outputs in $AUDIT_WORK/out.
# Needs root. Each script prints what it observed; compare with the expected column of the review (README.md).
here=$(cd "$(dirname "$0")" && pwd)
export AUDIT_CHECKOUT=$(cd "${AUDIT_CHECKOUT:-$here/../../..}" && pwd)
export AUDIT_WORK=${AUDIT_WORK:-/tmp/imexctl-audit}
mkdir -p "$AUDIT_WORK/out"
cd "$here"
for f in r*.py; do
  timeout 600 "$AUDIT_CHECKOUT/.venv/bin/python" "$f" > "$AUDIT_WORK/out/${f%.py}.txt" 2>&1
  echo "$f rc=$?"
done
