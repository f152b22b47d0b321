"""SHA-256 without OpenSSL's start-up cost: ``import hashlib`` loads libcrypto
(``_hashlib``) in every prolog on every tray, while CPython's own C
implementation gives the same digest. hashlib is the fallback where that module is absent."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:   # the private modules have no stubs: type checkers see hashlib's
    from hashlib import sha256
else:
    try:
        from _sha2 import sha256  # CPython 3.12+
    except ImportError:
        try:
            from _sha256 import sha256  # CPython 3.11
        except ImportError:  # another interpreter
            from hashlib import sha256

__all__ = ["sha256", "sha256_hex"]


def sha256_hex(data: bytes) -> str:
    return sha256(data).hexdigest()
