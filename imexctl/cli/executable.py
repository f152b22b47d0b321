"""``python -m imexctl.cli.executable [DEST]``: write the fast ``imexctl`` executable
(imexctl.base.executable says what it is) and print where it went."""

from __future__ import annotations

import sys
from pathlib import Path

from imexctl.base.executable import ExecutableError, write_executable


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) > 1 or (args and args[0].startswith("-")):
        print("usage: python -m imexctl.cli.executable [DEST]   (default: imexctl beside python)",
              file=sys.stderr)
        return 2
    try:
        print(write_executable(Path(args[0]) if args else None))
    except ExecutableError as exc:
        print(f"imexctl executable: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
