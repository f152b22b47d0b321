"""Credentials for mutual TLS between a job's IMEX daemons (``imex.auth``; docs/security.md).

``"site"``: the site's CA, this tray's certificate and key (PEM files named in the
config) are checked here before a daemon is pointed at them: root's, not writable by
others, no symbolic link, the key owner-only, the certificate matching the key, issued by
the CA and not expired. ``"job"``: every tray of a domain derives the same per-job CA key
from the root-only site secret with HKDF-SHA256 (salt and info: the cluster, the job id,
its restart count and the domain's group), signs a certificate of its own under it and
writes the three files into the job's directory. A tray of another job, a process without
the secret, or the same job after a requeue derives another CA: its peers refuse it.

Keys are EC P-256 with ECDSA-SHA256 signatures: the curve every TLS stack accepts for
certificate and handshake signatures (nvidia-imex's is not documented; gRPC's OpenSSL and
BoringSSL both take it), and the one whose private key is a plain scalar that HKDF output
can be reduced to (FIPS 186-5 A.2.1: 64 bits more than the order, mod n-1, plus 1).

Only this module imports ``cryptography``, and only hooks with ``imex.auth`` on import it.
Every failure is an :class:`AuthError` whose text names the file and what is wrong.
"""

from __future__ import annotations

import datetime
import os
import re
import stat
import time
from pathlib import Path

try:
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    MISSING = ""
except ImportError as exc:   # an install without the auth extra: one line, not a traceback
    MISSING = (f"imex.auth needs the Python package cryptography, which this imexctl cannot "
               f"import ({exc}); install imexctl's auth extra (constraints-auth.txt, "
               "docs/install.md)")

from imexctl.base.dataclass import dataclass
from imexctl.base.fsutil import UnsafePathError, atomic_write, open_regular

TYPE_CHECKING = False
if TYPE_CHECKING:
    from imexctl.config import Imex

MIN_SECRET_BYTES = 32
MAX_CN = 64                  # X.509's upper bound on a common name (RFC 5280)
MAKE_SECRET = "umask 077; head -c 64 /dev/urandom > FILE"
MAX_PEM_BYTES = 1 << 20
# "job": files in the job's directory (0600 root, directory 0700).
JOB_CA, JOB_CERT, JOB_KEY = "imex-auth-ca.pem", "imex-auth-cert.pem", "imex-auth-key.pem"
# "job": the certificate is valid from CLOCK_SKEW_S before the job was submitted (by
# slurmctld's clock) until the job's end plus a margin (an epilog that runs late). A tray
# whose clock runs more than CLOCK_BEHIND_S behind slurmctld's is drained (prolog).
CLOCK_SKEW_S = 600
CLOCK_BEHIND_S = CLOCK_SKEW_S // 2   # past it, half the margin is gone: drained
END_MARGIN_S = 3600
HKDF_SALT = b"imexctl imex-auth job-ca v1"
# In the job's directory: the site files' contents (fingerprint) the job's daemon loaded,
# written by the prolog that started it and by health after each SIGUSR1.
SITE_LOADED = "imex-auth-site.json"
# P-256's group order n.
P256_ORDER = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551


class AuthError(ValueError):
    """A credential file that cannot be used; the text names it and says why."""


def _need_cryptography() -> None:
    if MISSING:
        raise AuthError(MISSING)


@dataclass(frozen=True)
class CertInfo:
    """What status, health, doctor and metrics report of one certificate."""
    path: Path
    not_after: float          # epoch seconds
    subject: str

    def seconds_left(self, now: float | None = None) -> float:
        return self.not_after - (time.time() if now is None else now)


@dataclass(frozen=True)
class SiteCredentials:
    ca: CertInfo
    cert: CertInfo
    key: Path


@dataclass(frozen=True)
class JobCredentials:
    ca: Path
    cert: Path
    key: Path
    target: str
    not_after: float


# ------------------------------------------------------------------------- file checks
def read_private(path: Path, *, what: str, owner_only: bool) -> bytes:
    """The bytes of a root-owned credential file, never through a symbolic link or a
    FIFO; refused when others can write it (or, ``owner_only``, read it)."""
    try:
        fd = open_regular(path)
    except FileNotFoundError:
        raise AuthError(f"{what} {path}: no such file") from None
    except PermissionError:
        raise AuthError(f"{what} {path}: permission denied") from None
    except UnsafePathError:
        raise AuthError(f"{what} {path}: not a regular file") from None
    except OSError as exc:
        if os.path.islink(path):
            raise AuthError(f"{what} {path}: is a symbolic link; name the file itself") \
                from None
        raise AuthError(f"{what} {path}: cannot open: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        mode = stat.S_IMODE(st.st_mode)
        if st.st_uid != os.geteuid():
            raise AuthError(f"{what} {path}: owned by uid {st.st_uid}, not root")
        if mode & 0o022:
            raise AuthError(f"{what} {path}: writable by group or others (mode {mode:04o}); "
                            "fix with chmod go-w")
        if owner_only and mode & 0o077:
            raise AuthError(f"{what} {path}: readable by group or others (mode {mode:04o}); "
                            "it must be 0600")
        data = handle.read(MAX_PEM_BYTES + 1)
    if len(data) > MAX_PEM_BYTES:
        raise AuthError(f"{what} {path}: larger than {MAX_PEM_BYTES} bytes")
    return data


def read_secret(path: Path) -> bytes:
    """The site secret of ``auth = "job"`` (root's, 0600, at least 32 random bytes).

    Any peer of a job's daemon receives a certificate whose key identifier checks a
    guess of the secret offline in a fraction of a millisecond (audit F4-11), so only
    what a random source made is taken: raw bytes (``head -c 64 /dev/urandom``: the
    chance that 64 random bytes are all printable is about 1e-28) or at least 64 hex
    digits (``openssl rand -hex 32``). Text of any other kind is a passphrase."""
    data = read_private(path, what="auth secret", owner_only=True)
    if len(data) < MIN_SECRET_BYTES:
        raise AuthError(f"auth secret {path}: {len(data)} bytes; it needs at least "
                        f"{MIN_SECRET_BYTES} ({MAKE_SECRET})")
    why = _passphrase(data)
    if why:
        raise AuthError(f"auth secret {path}: {why}; a peer can test guesses of it offline: "
                        f"make it from random bytes ({MAKE_SECRET})")
    return data


def _passphrase(data: bytes) -> str:
    """Why ``data`` looks typed rather than drawn from a random source ("" when not)."""
    text = data.strip()
    if any(b < 0x20 or b > 0x7E for b in text):
        return ""                       # raw random bytes
    hexdigits = set(b"0123456789abcdefABCDEF")
    if len(text) >= 2 * MIN_SECRET_BYTES and set(text) <= hexdigits:
        return "" if len(set(text.lower())) >= 10 else "hex text with too few distinct digits"
    return (f"printable text ({len(text)} characters), not random bytes or at least "
            f"{2 * MIN_SECRET_BYTES} hex digits")


def _load_cert(path: Path, what: str) -> x509.Certificate:
    return _load_certs(path, what)[0]


def _load_certs(path: Path, what: str) -> list[x509.Certificate]:
    """Every certificate of a PEM file, in its order: a CA file may be a bundle (old and
    new CA during a rotation), a certificate file may carry its intermediates after it,
    as gRPC (the real daemon's TLS) takes them (fidelity N8)."""
    _need_cryptography()
    data = read_private(path, what=what, owner_only=False)
    try:
        certs = x509.load_pem_x509_certificates(data)
    except ValueError:
        certs = []
    if not certs:
        raise AuthError(f"{what} {path}: not a PEM certificate")
    return certs


def _load_key(path: Path) -> ec.EllipticCurvePrivateKey | object:
    _need_cryptography()
    data = read_private(path, what="auth key", owner_only=True)
    try:
        return serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError):
        raise AuthError(f"auth key {path}: not an unencrypted PEM private key") from None


def _info(path: Path, cert: x509.Certificate) -> CertInfo:
    return CertInfo(path=path, not_after=cert.not_valid_after_utc.timestamp(),
                    subject=cert.subject.rfc4514_string())


def _check_dates(path: Path, cert: x509.Certificate, what: str, now: float) -> None:
    stamp = datetime.datetime.fromtimestamp(now, datetime.timezone.utc)
    if cert.not_valid_after_utc <= stamp:
        raise AuthError(f"{what} {path}: expired on "
                        f"{cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC")
    if cert.not_valid_before_utc > stamp:
        raise AuthError(f"{what} {path}: not valid before "
                        f"{cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC")


def _public_bytes(key: object) -> bytes:
    return key.public_bytes(serialization.Encoding.DER,  # type: ignore[attr-defined]
                            serialization.PublicFormat.SubjectPublicKeyInfo)


def load_site(imex: Imex, now: float | None = None, address: str | None = None
              ) -> SiteCredentials:
    """Check ``auth = "site"``'s three files (see the module text); AuthError naming the
    file and the fault otherwise. ``address``: this tray's entry in nodes_config.cfg (the
    prolog's), which the certificate must name when no ``auth_target`` is set."""
    now = time.time() if now is None else now
    if imex.auth_ca_file is None or imex.auth_cert_file is None or imex.auth_key_file is None:
        raise AuthError('imex.auth = "site" needs imex.auth_ca_file, imex.auth_cert_file '
                        "and imex.auth_key_file")
    roots = _load_certs(imex.auth_ca_file, "auth CA")
    chain = _load_certs(imex.auth_cert_file, "auth certificate")
    cert = chain[0]
    key = _load_key(imex.auth_key_file)
    _check_dates(imex.auth_cert_file, cert, "auth certificate", now)
    if _public_bytes(key.public_key()) != _public_bytes(cert.public_key()):  # type: ignore[attr-defined]
        raise AuthError(f"auth key {imex.auth_key_file}: does not match the certificate "
                        f"{imex.auth_cert_file}")
    ca = _issuing_root(imex, cert, chain[1:], roots, now)
    _check_usage(imex.auth_cert_file, cert)
    names = _dns_names(cert)
    if imex.auth_target and imex.auth_target.lower() not in names:
        raise AuthError(f"auth certificate {imex.auth_cert_file}: has no DNS name "
                        f"{imex.auth_target!r} (imex.auth_target) in its subjectAltName")
    if not imex.auth_target and address and not _names_address(cert, address):
        raise AuthError(f"auth certificate {imex.auth_cert_file}: does not name this tray's "
                        f"address {address} in its subjectAltName (peers check it against "
                        "nodes_config.cfg; or set imex.auth_target)")
    return SiteCredentials(ca=_info(imex.auth_ca_file, ca), cert=_info(imex.auth_cert_file, cert),
                           key=imex.auth_key_file)


MAX_CHAIN = 8


def _issuing_root(imex: Imex, cert: x509.Certificate, intermediates: list[x509.Certificate],
                  roots: list[x509.Certificate], now: float) -> x509.Certificate:
    """The CA of ``auth_ca_file`` that vouches for ``cert``, directly or through the
    intermediates that follow it in ``auth_cert_file``; each link a CA, in its dates."""
    current = cert
    for _ in range(MAX_CHAIN):
        for candidate, is_root in [*((r, True) for r in roots),
                                   *((i, False) for i in intermediates)]:
            if candidate.subject != current.issuer or not _signed_by(current, candidate):
                continue
            where = imex.auth_ca_file if is_root else imex.auth_cert_file
            what = "auth CA" if is_root else "auth intermediate CA"
            if not _is_ca(candidate):
                raise AuthError(f"{what} {where}: {candidate.subject.rfc4514_string()} is not "
                                "a CA (basicConstraints)")
            _check_dates(Path(str(where)), candidate, what, now)
            if is_root:
                return candidate
            current = candidate
            break
        else:
            via = " (directly or through the intermediates after it)" if intermediates else ""
            raise AuthError(f"auth certificate {imex.auth_cert_file}: not issued by the CA "
                            f"{imex.auth_ca_file}{via}")
    raise AuthError(f"auth certificate {imex.auth_cert_file}: chain longer than {MAX_CHAIN}")


def _signed_by(cert: x509.Certificate, issuer: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _is_ca(cert: x509.Certificate) -> bool:
    try:
        return bool(cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
    except x509.ExtensionNotFound:
        return cert.version == x509.Version.v1   # an old v1 root carries no extensions


def _check_usage(path: Path, cert: x509.Certificate) -> None:
    """One certificate serves as server and client (IMEX_SERVER_CERT and IMEX_CLIENT_CERT):
    with an extended key usage, it must allow both (fidelity N15)."""
    try:
        usage = set(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)
    except x509.ExtensionNotFound:
        return
    missing = [name for oid, name in ((ExtendedKeyUsageOID.SERVER_AUTH, "serverAuth"),
                                      (ExtendedKeyUsageOID.CLIENT_AUTH, "clientAuth"))
               if oid not in usage]
    if missing:
        raise AuthError(f"auth certificate {path}: its extended key usage lacks "
                        f"{' and '.join(missing)}; the daemon uses it as server and client")


def _names_address(cert: x509.Certificate, address: str) -> bool:
    import ipaddress

    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address.lower() in {n.lower() for n in san.get_values_for_type(x509.DNSName)}
    return ip in san.get_values_for_type(x509.IPAddress)


def _dns_names(cert: x509.Certificate) -> set[str]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    return {name.lower() for name in san.get_values_for_type(x509.DNSName)}


def site_fingerprint(imex: Imex) -> str:
    """A digest of the site files' contents, read without following a link: it changes
    whenever what a daemon would load does, whatever the copy did to the files' times
    (``rsync -a``, ``cp -p``, ``install -p`` and ``scp -p`` keep the source's mtime:
    audit F4-7). An absent or unreadable file counts as its own value."""
    from imexctl.base.digest import sha256

    digest = sha256()
    for path in (imex.auth_ca_file, imex.auth_cert_file, imex.auth_key_file):
        try:
            fd = open_regular(path) if path is not None else None
        except (OSError, UnsafePathError):
            fd = None
        if fd is None:
            digest.update(b"-;")
            continue
        with os.fdopen(fd, "rb") as handle:
            data = handle.read(MAX_PEM_BYTES + 1)
        digest.update(len(data).to_bytes(8, "big") + data)
    return digest.hexdigest()[:32]


def remember_site_loaded(jdir: Path, fingerprint: str) -> None:
    """Record in the job's directory which site files' contents its daemon has loaded
    (health compares; the file goes with the job)."""
    from imexctl.base.fsutil import write_json

    write_json(jdir / SITE_LOADED, {"fingerprint": fingerprint, "loaded": time.time()},
               0o600, durable=False)


# ------------------------------------------------------------------------ job credentials
def cluster_label(name: str | None) -> str:
    """The cluster's name as a DNS label (the target name's last part)."""
    label = re.sub(r"[^a-z0-9-]+", "-", (name or "").lower()).strip("-")[:40].strip("-")
    return label or "cluster"


def job_target(cluster: str, job_id: int, restart: int, group: str) -> str:
    """The per-job TLS name (IMEX_SECURITY_TARGET_OVERRIDE and the certificates' DNS SAN):
    one per job run and domain; the group key is shortened to a hash (it is not a label)."""
    from imexctl.base.digest import sha256
    tag = sha256(group.encode()).hexdigest()[:10]
    first = f"imexctl-j{job_id}-r{restart}-g{tag}"
    # At most 64 characters: it is the job certificates' common name too (fidelity N10).
    label = cluster_label(cluster)[:MAX_CN - 1 - len(first)].strip("-") or "cluster"
    return f"{first}.{label}"


def ca_common_name(target: str) -> str:
    """The job CA's common name: the target's first label (job, restart and group), at
    most 50 characters whatever the cluster's name (X.509 allows 64: a cluster label in
    it drained every tray of clusters named over ~24 characters, fidelity N9)."""
    return f"job CA {target.split('.', 1)[0]}"


def _hkdf_info(cluster: str, job_id: int, restart: int, group: str,
               incarnation: int = 0) -> bytes:
    # Length-prefixed fields: no two inputs encode alike. ``incarnation`` (the domain job's
    # SubmitTime) tells this job from an earlier one that had the same id (audit S4-1).
    fields = [cluster.encode(), str(job_id).encode(), str(restart).encode(), group.encode(),
              str(incarnation).encode()]
    return b"".join(len(f).to_bytes(2, "big") + f for f in fields)


def derive_ca_key(secret: bytes, cluster: str, job_id: int, restart: int,
                  group: str, incarnation: int = 0) -> ec.EllipticCurvePrivateKey:
    """The job's CA key: equal on every tray given the same inputs, unrelated otherwise."""
    _need_cryptography()
    okm = HKDF(algorithm=hashes.SHA256(), length=40, salt=HKDF_SALT,
               info=_hkdf_info(cluster, job_id, restart, group, incarnation)).derive(secret)
    scalar = int.from_bytes(okm, "big") % (P256_ORDER - 1) + 1
    return ec.derive_private_key(scalar, ec.SECP256R1())


def _when(epoch: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(int(epoch), datetime.timezone.utc)


def issue_job_credentials(jdir: Path, secret_file: Path, *, cluster: str, job_id: int,
                          restart: int, group: str, node: str, end_time: float | None,
                          lifetime_h: float, now: float | None = None,
                          addresses: tuple[str, ...] = (),
                          incarnation: int = 0) -> JobCredentials:
    """Derive the job's CA, sign this tray's certificate under it and write CA, certificate
    and key into ``jdir`` (0600; the directory is the prolog's, 0700).

    The certificate names the target in its common name and its DNS subjectAltName (gRPC
    checks the SAN; NVIDIA's text speaks of the common name: fidelity N10), and this
    tray's own ``addresses`` (its nodes_config.cfg entry and command address) as further
    SANs, in case the command service checks the address it dials (N11)."""
    now = time.time() if now is None else now
    secret = read_secret(secret_file)
    target = job_target(cluster, job_id, restart, group)
    # Slurm gives an unlimited job an end a year away: the configured lifetime caps it.
    cap = now + lifetime_h * 3600
    not_after = (min(end_time, cap) if end_time and end_time > now else cap) + END_MARGIN_S
    # Valid from before the job was submitted by slurmctld's clock (``incarnation``), not
    # this tray's: every tray of the job then issues the same start, and a peer whose
    # clock runs up to CLOCK_SKEW_S behind still accepts it.
    begin, end = _when(min(now, incarnation or now) - CLOCK_SKEW_S), _when(not_after)
    ca_key = derive_ca_key(secret, cluster, job_id, restart, group, incarnation)
    ca_name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "imexctl"),
                         x509.NameAttribute(NameOID.COMMON_NAME, ca_common_name(target))])
    ca_pub = ca_key.public_key()
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_pub).serial_number(int.from_bytes(_public_bytes(ca_pub)[-16:], "big") >> 1 or 1)
          .not_valid_before(begin).not_valid_after(end)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                       key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, key_cert_sign=True, crl_sign=True,
                                       encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_pub), critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "imexctl"),
                *([x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, node[:MAX_CN])]
                  if node else []),
                x509.NameAttribute(NameOID.COMMON_NAME, target)]))
            .issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(begin).not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=True, key_cert_sign=False, crl_sign=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .add_extension(x509.SubjectAlternativeName(_alt_names(target, addresses)),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_pub),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    paths = JobCredentials(ca=jdir / JOB_CA, cert=jdir / JOB_CERT, key=jdir / JOB_KEY,
                           target=target, not_after=float(int(not_after)))
    atomic_write(paths.key, key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                              serialization.NoEncryption()), 0o600, durable=False)
    atomic_write(paths.cert, cert.public_bytes(pem), 0o600, durable=False)
    atomic_write(paths.ca, ca.public_bytes(pem), 0o600, durable=False)
    return paths


def _alt_names(target: str, addresses: tuple[str, ...]) -> list[x509.GeneralName]:
    import ipaddress

    names: list[x509.GeneralName] = [x509.DNSName(target)]
    for entry in dict.fromkeys(addresses):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(entry)))
        except ValueError:
            if entry and entry.lower() != target:
                names.append(x509.DNSName(entry))
    return names


def read_cert_info(path: Path, what: str = "auth certificate") -> CertInfo:
    """When a file's certificates start to fail: the earliest end of any in it (a CA
    bundle's oldest CA, a chain's first to expire); AuthError when unreadable."""
    return _info(path, min(_load_certs(path, what), key=lambda c: c.not_valid_after_utc))
