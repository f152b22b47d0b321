"""Mutual TLS between simulated peers, driven by the real config keys (stdlib ``ssl`` only).

What NVIDIA documents (the packaged config.cfg's comments; IMEX guide "signals"):

- ``IMEX_ENABLE_AUTH_ENCRYPTION=1`` turns it on; ``IMEX_AUTH_ENCRYPTION_MODE`` must then be
  ``SSL_TLS`` (the default), ``GSS_AUTH_ENCRYPT`` or ``GSS_AUTH_ONLY``: "An empty or
  unexpected value will prevent initialization". The same holds for ``IMEX_AUTH_SOURCE``
  (``FILE`` | ``ENV_PATH`` | ``ENV_VAL``) in SSL_TLS mode.
- ``IMEX_SERVER_KEY`` / ``IMEX_SERVER_CERT`` / ``IMEX_SERVER_CERT_AUTH`` and the three
  ``IMEX_CLIENT_*`` keys, interpreted per ``IMEX_AUTH_SOURCE``: file paths (FILE), names of
  environment variables holding paths (ENV_PATH) or holding the PEM text (ENV_VAL).
- ``IMEX_SECURITY_TARGET_OVERRIDE``: the host name the client checks the server's
  certificate against instead of the node's address.
- SIGUSR1 reloads the credentials and restarts the outgoing connections (the daemon
  rate-limits it, :mod:`imexctl_sim.daemon`).

Assumed (docs/simulator.md, "TLS"): GSS modes are refused at init (not simulated); the
server requires a client certificate signed by ``IMEX_SERVER_CERT_AUTH``, the client checks
the server's against ``IMEX_CLIENT_CERT_AUTH`` and the target name (subject alternative
names; the common name only when the certificate has none, as gRPC's OpenSSL check does);
TLS 1.2 or newer; the command port stays plaintext; the wording of every log line.
"""

from __future__ import annotations

import hashlib
import os
import re
import selectors
import ssl
import stat
import tempfile

MODES = ("SSL_TLS", "GSS_AUTH_ENCRYPT", "GSS_AUTH_ONLY")
SOURCES = ("FILE", "ENV_PATH", "ENV_VAL")
KEYS = ("IMEX_SERVER_KEY", "IMEX_SERVER_CERT", "IMEX_SERVER_CERT_AUTH",
        "IMEX_CLIENT_KEY", "IMEX_CLIENT_CERT", "IMEX_CLIENT_CERT_AUTH")
MAX_PEM = 1 << 20
_CERT_RE = re.compile(r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.S)


class AuthError(Exception):
    """Authentication cannot be initialised (or reloaded): the message names key and file."""


class Credentials:
    """The two contexts built from the config: ``server`` for accepted peer connections,
    ``client`` for the daemon's outgoing channels; ``target`` overrides the name checked."""

    def __init__(self, server: ssl.SSLContext, client: ssl.SSLContext, target: str,
                 summary: str):
        self.server = server
        self.client = client
        self.target = target
        self.summary = summary

    # The daemon reaches the helpers below through its credentials, so that it imports
    # this module (and ssl, ~10 ms of every start) only when auth is on.
    def reloaded(self, raw: dict[str, str]) -> "tuple[Credentials | None, str]":
        """SIGUSR1: new credentials from the same keys, or (None, why they did not load)."""
        try:
            return load(raw), ""
        except AuthError as exc:
            return None, str(exc)

    @staticmethod
    def handshake(sock: ssl.SSLSocket) -> int | None:
        return handshake(sock)

    @staticmethod
    def recv(sock: ssl.SSLSocket) -> tuple[bytes | None, BaseException | None]:
        return recv(sock)

    @staticmethod
    def reason(exc: BaseException) -> str:
        return reason(exc)


def enabled(raw: dict[str, str]) -> bool:
    """IMEX_ENABLE_AUTH_ENCRYPTION: 0 (default) or 1; anything else is an AuthError."""
    value = raw.get("IMEX_ENABLE_AUTH_ENCRYPTION", "").strip() or "0"
    if value not in ("0", "1"):
        raise AuthError(f"Invalid value '{value}' for IMEX_ENABLE_AUTH_ENCRYPTION "
                        "(0 or 1).")
    return value == "1"


def load(raw: dict[str, str], environ: dict[str, str] | None = None) -> Credentials:
    """Validate the auth keys and build both contexts; raises :class:`AuthError`.

    An absent ``IMEX_AUTH_ENCRYPTION_MODE`` is its documented default ``SSL_TLS``; a
    present but empty one fails, as the config file's comment says."""
    env = os.environ if environ is None else environ
    mode = raw["IMEX_AUTH_ENCRYPTION_MODE"].strip() if "IMEX_AUTH_ENCRYPTION_MODE" in raw \
        else "SSL_TLS"
    if mode not in MODES:
        raise AuthError(f"Invalid value '{mode}' for IMEX_AUTH_ENCRYPTION_MODE: expected "
                        "one of SSL_TLS, GSS_AUTH_ENCRYPT, GSS_AUTH_ONLY.")
    if mode != "SSL_TLS":
        raise AuthError(f"IMEX_AUTH_ENCRYPTION_MODE={mode} is not simulated (GSSAPI/"
                        "Kerberos); the simulator implements SSL_TLS only.")
    source = raw.get("IMEX_AUTH_SOURCE", "").strip()
    if source not in SOURCES:
        raise AuthError(f"Invalid value '{source}' for IMEX_AUTH_SOURCE: expected one of "
                        "FILE, ENV_PATH, ENV_VAL.")
    pem = {key: _read(key, raw.get(key, "").strip(), source, env) for key in KEYS}
    server = _context(ssl.PROTOCOL_TLS_SERVER, pem, "SERVER")
    server.verify_mode = ssl.CERT_REQUIRED
    client = _context(ssl.PROTOCOL_TLS_CLIENT, pem, "CLIENT")
    client.check_hostname = True
    client.hostname_checks_common_name = True
    summary = (f"server certificate sha256:{_fingerprint(pem['IMEX_SERVER_CERT'])}, "
               f"client certificate sha256:{_fingerprint(pem['IMEX_CLIENT_CERT'])}")
    target = raw.get("IMEX_SECURITY_TARGET_OVERRIDE", "").strip()
    return Credentials(server, client, target,
                       f"mode SSL_TLS, source {source}, {summary}")


def _read(key: str, value: str, source: str, env) -> str:
    """The PEM text a key names under ``source``."""
    if not value:
        raise AuthError(f"{key} is empty (IMEX_AUTH_SOURCE={source}).")
    where = f"{key} '{value}'"
    if source != "FILE":
        if value not in env:
            raise AuthError(f"{key} names environment variable {value}, which is not set "
                            f"(IMEX_AUTH_SOURCE={source}).")
        if source == "ENV_VAL":
            return env[value]
        where = f"{key} (environment variable {value}) '{env[value]}'"
        value = env[value]
    try:
        fd = os.open(value, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise AuthError(f"Cannot read {where}: {exc.strerror}.") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise AuthError(f"Cannot read {where}: not a regular file.")
        data = os.read(fd, MAX_PEM + 1)
    except OSError as exc:
        raise AuthError(f"Cannot read {where}: {exc.strerror}.") from None
    finally:
        os.close(fd)
    if len(data) > MAX_PEM:
        raise AuthError(f"Cannot read {where}: larger than {MAX_PEM} bytes.")
    return data.decode("ascii", errors="replace")


def _context(protocol: int, pem: dict[str, str], side: str) -> ssl.SSLContext:
    key, cert, auth = (f"IMEX_{side}_KEY", f"IMEX_{side}_CERT", f"IMEX_{side}_CERT_AUTH")
    if not _CERT_RE.search(pem[cert]):
        raise AuthError(f"{cert} holds no PEM certificate.")
    if "PRIVATE KEY-----" not in pem[key]:
        raise AuthError(f"{key} holds no PEM private key.")
    if "ENCRYPTED" in pem[key]:
        raise AuthError(f"{key} is encrypted: a passphrase-protected key cannot be used.")
    if not _CERT_RE.search(pem[auth]):
        raise AuthError(f"{auth} holds no PEM certificate.")
    ctx = ssl.SSLContext(protocol)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    # load_cert_chain reads files only: the pair goes through a private file that is
    # removed at once (ENV_VAL has no file at all)
    with tempfile.TemporaryDirectory(prefix="imexctl-sim-tls-") as tmp:
        path = os.path.join(tmp, "chain.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="ascii", errors="replace") as f:
            f.write(pem[cert].rstrip("\n") + "\n" + pem[key])
        try:
            ctx.load_cert_chain(path, password=lambda: b"")
        except ssl.SSLError as exc:
            if exc.reason == "KEY_VALUES_MISMATCH":
                raise AuthError(f"{key} does not match the certificate in {cert}.") from None
            raise AuthError(f"Cannot load {cert} / {key}: {_ssl_text(exc)}.") from None
    try:
        ctx.load_verify_locations(cadata="\n".join(_CERT_RE.findall(pem[auth])) + "\n")
    except ssl.SSLError as exc:
        raise AuthError(f"Cannot load {auth}: {_ssl_text(exc)}.") from None
    return ctx


def _fingerprint(pem: str) -> str:
    first = _CERT_RE.search(pem)
    assert first is not None      # checked by _context
    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(first.group(0))).hexdigest()[:16]


def _ssl_text(exc: ssl.SSLError) -> str:
    return (exc.reason or exc.strerror or str(exc)).lower().replace("_", " ")


# The alerts and errors a refusal is named by, in the log of the side that sees them.
_REASONS = {
    "PEER_DID_NOT_RETURN_A_CERTIFICATE": "the peer presented no certificate",
    "TLSV13_ALERT_CERTIFICATE_REQUIRED": "the peer requires a certificate and got none",
    "TLSV1_ALERT_UNKNOWN_CA": "the peer does not trust our certificate (unknown CA)",
    "SSLV3_ALERT_CERTIFICATE_EXPIRED": "the peer refused our certificate as expired",
    "SSLV3_ALERT_BAD_CERTIFICATE": "the peer refused our certificate (bad certificate)",
    "SSLV3_ALERT_CERTIFICATE_UNKNOWN": "the peer refused our certificate",
    "TLSV1_ALERT_DECRYPT_ERROR": "the peer refused our certificate (decrypt error)",
    "WRONG_VERSION_NUMBER": "not a TLS handshake (a peer without authentication?)",
    "HTTP_REQUEST": "not a TLS handshake (a peer without authentication?)",
    "UNEXPECTED_EOF_WHILE_READING": "connection closed during the TLS handshake",
    "EOF": "connection closed during the TLS handshake",
}


def reason(exc: BaseException) -> str:
    """A one-line reason for a failed handshake or a TLS alert received."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"certificate verify failed: {exc.verify_message}"
    if isinstance(exc, ssl.SSLEOFError):
        return "connection closed during the TLS handshake"
    if isinstance(exc, ssl.SSLError):
        return _REASONS.get(exc.reason or "", _ssl_text(exc))
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return str(exc)


def handshake(sock: ssl.SSLSocket) -> int | None:
    """One non-blocking handshake step: None when done, else the selector event to wait
    for. Raises ``ssl.SSLError`` / ``OSError`` when the handshake fails."""
    try:
        sock.do_handshake()
    except ssl.SSLWantReadError:
        return selectors.EVENT_READ
    except ssl.SSLWantWriteError:
        return selectors.EVENT_WRITE
    return None


def recv(sock: ssl.SSLSocket) -> tuple[bytes | None, BaseException | None]:
    """Application data a readable TLS socket holds: (data, None); (None, None) when only
    TLS records arrived (a session ticket); (b"", None) at EOF; (b"", exc) on an error or
    an alert (the reason a peer refused us)."""
    chunks = []
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                break
            chunks.append(data)
            if not sock.pending():
                break
    except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
        if not chunks:
            return None, None
    except OSError as exc:
        if not chunks:
            return b"", exc
    return b"".join(chunks), None
