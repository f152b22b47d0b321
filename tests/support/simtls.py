"""Certificates for tests of the simulated daemons' mutual TLS (``cryptography``).

``TestCA(dir, "a").issue("tray0", ["127.1.2.3"])`` writes a CA and a tray's key and
certificate as PEM files; ``auth_keys(...)`` gives the config.cfg keys that point a tray
at them (IMEX_AUTH_SOURCE=FILE, one key/certificate for both the server and the client
side, as imexctl renders them).
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["Issued", "TestCA", "auth_keys"]


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


class Issued:
    """A tray's files: ``key``, ``cert`` and its CA's ``ca`` (paths)."""

    def __init__(self, key: Path, cert: Path, ca: Path):
        self.key = key
        self.cert = cert
        self.ca = ca


class TestCA:
    __test__ = False        # not a pytest class

    def __init__(self, root: Path, name: str):
        self.root = Path(root) / f"ca-{name}"
        self.root.mkdir(parents=True, exist_ok=True)
        self.key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"test CA {name}")])
        self.name = subject
        ski = x509.SubjectKeyIdentifier.from_public_key(self.key.public_key())
        self.cert = (
            x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(_now() - datetime.timedelta(days=1))
            .not_valid_after(_now() + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(ski, critical=False)
            .sign(self.key, hashes.SHA256()))
        self.ca_path = self.root / "ca.pem"
        self.ca_path.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, name: str, addresses: Sequence[str] = (), dns: Sequence[str] = (),
              expired: bool = False, days: float = 1.0, out: Path | None = None) -> Issued:
        """A key and a certificate for ``name`` with these SANs (IP addresses, DNS names),
        for both server and client use; ``expired``: valid until yesterday."""
        key = ec.generate_private_key(ec.SECP256R1())
        start = _now() - datetime.timedelta(days=3 if expired else 0, hours=1)
        end = _now() - datetime.timedelta(days=1) if expired else \
            _now() + datetime.timedelta(days=days)
        sans: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address(a))
                                        for a in addresses]
        sans += [x509.DNSName(d) for d in dns]
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(self.name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                self.key.public_key()), critical=False))
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        out = Path(out) if out is not None else self.root / name
        out.mkdir(parents=True, exist_ok=True)
        key_path, cert_path = out / "key.pem", out / "cert.pem"
        key_path.write_bytes(_key_pem(key))
        key_path.chmod(0o600)
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return Issued(key_path, cert_path, self.ca_path)


def auth_keys(issued: Issued, **extra: str) -> dict[str, str]:
    """config.cfg keys for SSL_TLS from files with one key/certificate on both sides."""
    keys = {"IMEX_ENABLE_AUTH_ENCRYPTION": "1", "IMEX_AUTH_ENCRYPTION_MODE": "SSL_TLS",
            "IMEX_AUTH_SOURCE": "FILE",
            "IMEX_SERVER_KEY": str(issued.key), "IMEX_SERVER_CERT": str(issued.cert),
            "IMEX_SERVER_CERT_AUTH": str(issued.ca),
            "IMEX_CLIENT_KEY": str(issued.key), "IMEX_CLIENT_CERT": str(issued.cert),
            "IMEX_CLIENT_CERT_AUTH": str(issued.ca)}
    keys.update(extra)
    return keys
