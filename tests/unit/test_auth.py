"""imex.auth: the config, the site files' checks and the per-job credentials (HKDF)."""

from __future__ import annotations

import datetime
import os
import socket
import ssl
import stat
import threading
import time

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from imexctl.config import AuthMode, parse_config
from imexctl.ops.settings import inert_settings
from imexctl.errors import ConfigError
from imexctl.imex import auth
from imexctl.imex.render import Ports, auth_settings, load_template, render_daemon_config

JOB = dict(cluster="rack", job_id=42, restart=0, group="0f1e-uuid.7")


def secret(tmp_path, name="secret", data=None):
    path = tmp_path / name
    path.write_bytes(data if data is not None else os.urandom(64))
    path.chmod(0o600)
    return path


def issue(tmp_path, tray, secret_file, **over):
    jdir = tmp_path / tray
    jdir.mkdir(mode=0o700, exist_ok=True)
    args = {**JOB, **over}
    return auth.issue_job_credentials(jdir, secret_file, node=tray, end_time=None,
                                      lifetime_h=1, **args)


def handshake(server, client, target):
    """A real mutual-TLS handshake (Python's ssl, OpenSSL) between two trays' files:
    None when both accept, else the error text."""
    sctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    sctx.load_cert_chain(server.cert, server.key)
    sctx.load_verify_locations(server.ca)
    sctx.verify_mode = ssl.CERT_REQUIRED
    cctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    cctx.load_cert_chain(client.cert, client.key)
    cctx.load_verify_locations(client.ca)
    a, b = socket.socketpair()
    errors = []

    def serve():
        try:
            with sctx.wrap_socket(a, server_side=True) as s:
                s.recv(1)
        except (ssl.SSLError, OSError) as exc:
            errors.append(f"server: {exc}")

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        with cctx.wrap_socket(b, server_hostname=target) as c:
            c.sendall(b"x")
    except (ssl.SSLError, OSError) as exc:
        errors.append(f"client: {exc}")
    t.join(10)
    a.close()
    return "; ".join(errors) or None


# ---------------------------------------------------------------------------- job mode
def test_two_trays_derive_the_same_ca_and_accept_each_other(tmp_path):
    key = secret(tmp_path)
    one, two = issue(tmp_path, "tray01", key), issue(tmp_path, "tray02", key)
    assert one.target == two.target == "imexctl-j42-r0-g" + one.target.split("-g")[1]
    assert one.target.endswith(".rack")
    assert handshake(one, two, two.target) is None
    assert handshake(two, one, one.target) is None
    ca1 = x509.load_pem_x509_certificate(one.ca.read_bytes())
    ca2 = x509.load_pem_x509_certificate(two.ca.read_bytes())
    assert ca1.public_key().public_numbers() == ca2.public_key().public_numbers()


@pytest.mark.parametrize("change", [{"job_id": 43}, {"restart": 1}, {"group": "0f1e-uuid.8"},
                                    {"cluster": "other"}, "secret"])
def test_another_job_restart_group_or_secret_gives_a_ca_that_does_not_verify(tmp_path, change):
    key = secret(tmp_path)
    mine = issue(tmp_path, "tray01", key)
    if change == "secret":
        theirs = issue(tmp_path, "tray02", secret(tmp_path, "other-secret"))
    else:
        theirs = issue(tmp_path, "tray02", key, **change)
    ca = x509.load_pem_x509_certificate(mine.ca.read_bytes())
    cert = x509.load_pem_x509_certificate(theirs.cert.read_bytes())
    with pytest.raises((ValueError, Exception)):
        cert.verify_directly_issued_by(ca)
    # and a real handshake fails both ways, whatever name the stranger claims
    assert handshake(mine, theirs, mine.target) is not None
    assert handshake(theirs, mine, mine.target) is not None


def test_job_files_are_root_only_and_the_certificate_is_short_lived(tmp_path):
    now = time.time()
    (tmp_path / "j").mkdir(mode=0o700)
    creds = auth.issue_job_credentials(tmp_path / "j", secret(tmp_path), node="tray01",
                                       end_time=int(now) + 7200, lifetime_h=168, **JOB)
    for path in (creds.ca, creds.cert, creds.key):
        st = os.lstat(path)
        assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
        assert st.st_uid == os.geteuid()
    cert = x509.load_pem_x509_certificate(creds.cert.read_bytes())
    # from a bit before now to the job's end plus the margin (not the 168 h default)
    assert cert.not_valid_before_utc.timestamp() <= now - 60
    assert abs(cert.not_valid_after_utc.timestamp() - (now + 7200 + auth.END_MARGIN_S)) < 5
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == [creds.target]
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert {o._name for o in eku} == {"serverAuth", "clientAuth"}
    assert isinstance(cert.public_key(), ec.EllipticCurvePublicKey)
    assert cert.public_key().curve.name == "secp256r1"


def test_without_an_end_time_the_configured_lifetime_bounds_the_certificate(tmp_path):
    now = time.time()
    creds = issue(tmp_path, "tray01", secret(tmp_path))
    assert abs(creds.not_after - (now + 3600 + auth.END_MARGIN_S)) < 5


def test_a_file_in_the_way_is_never_followed(tmp_path):
    jdir = tmp_path / "j"
    jdir.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (jdir / auth.JOB_KEY).symlink_to(victim)
    with pytest.raises(OSError):
        auth.issue_job_credentials(jdir, secret(tmp_path), node="t", end_time=None,
                                   lifetime_h=1, **JOB)
    assert victim.read_text() == "keep"


@pytest.mark.parametrize("case, expect", [
    ("missing", "auth secret {p}: no such file"),
    ("short", "auth secret {p}: 16 bytes; it needs at least 32"),
    ("passphrase", "auth secret {p}: printable text (39 characters), not random bytes or at "
                   "least 64 hex digits; a peer can test guesses of it offline"),
    ("few-digits", "auth secret {p}: hex text with too few distinct digits"),
    ("mode", "auth secret {p}: readable by group or others (mode 0640); it must be 0600"),
    ("link", "auth secret {p}: is a symbolic link"),
])
def test_a_bad_secret_is_named_with_what_is_wrong(tmp_path, case, expect):
    path = tmp_path / "secret"
    if case == "short":
        secret(tmp_path, data=b"x" * 16)
    elif case == "mode":
        secret(tmp_path).chmod(0o640)
    elif case == "link":
        path.symlink_to(secret(tmp_path, "real"))
    elif case == "passphrase":   # the review's oracle case: words a list of guesses finds
        secret(tmp_path, data=b"imex cluster secret for the racks 2026!")
    elif case == "few-digits":
        secret(tmp_path, data=b"deadbeef" * 8 + b"\n")
    with pytest.raises(auth.AuthError) as err:
        auth.read_secret(path)
    assert str(err.value).startswith(expect.format(p=path))


def test_a_long_cluster_name_and_job_id_still_make_valid_certificates(tmp_path):
    """A 46-character cluster name, the largest job id and a tenth requeue: the CA's
    common name stays within X.509's 64 characters (it used to raise ValueError)."""
    name = "gb200-production-east-cluster-01-hall-b-row-07"
    assert len(name) == 46
    creds = issue(tmp_path, "tray01", secret(tmp_path), cluster=name, job_id=4294967293,
                  restart=10)
    ca = x509.load_pem_x509_certificate(creds.ca.read_bytes())
    (cn,) = ca.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    assert len(cn.value) <= 64 and cn.value.startswith("job CA imexctl-j4294967293-r10-g")
    # the target, the leaf's common name too (fidelity N10), keeps within 64 characters
    assert creds.target == "imexctl-j4294967293-r10-g1be4e0992c.gb200-production-east-cluste"
    leaf = x509.load_pem_x509_certificate(creds.cert.read_bytes())
    (leaf_cn,) = leaf.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    assert leaf_cn.value == creds.target


@pytest.mark.parametrize("make", [
    lambda: os.urandom(64),                          # head -c 64 /dev/urandom
    lambda: os.urandom(32).hex().encode() + b"\n",   # openssl rand -hex 32
])
def test_a_secret_from_a_random_source_is_taken(tmp_path, make):
    data = make()
    assert auth.read_secret(secret(tmp_path, data=data)) == data


# --------------------------------------------------------------------------- site mode
def _key():
    return ec.generate_private_key(ec.SECP256R1())


def _cert(subject_key, issuer_key, name, issuer_name, *, ca=False, days=(-1, 30), san=None):
    now = datetime.datetime.now(datetime.timezone.utc)
    b = (x509.CertificateBuilder()
         .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
         .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer_name)]))
         .public_key(subject_key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(now + datetime.timedelta(days=days[0]))
         .not_valid_after(now + datetime.timedelta(days=days[1]))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if san:
        b = b.add_extension(x509.SubjectAlternativeName([x509.DNSName(san)]), critical=False)
    return b.sign(issuer_key, hashes.SHA256())


def _write(path, data, mode=0o600):
    path.write_bytes(data)
    path.chmod(mode)
    return str(path)


def site(tmp_path, *, cert_days=(-1, 30), ca_days=(-1, 3650), key=None, ca_key=None,
         key_mode=0o600, target="imex.example"):
    """A site's CA, tray certificate and key under tmp_path, and the Imex section naming them."""
    ca_k, tray_k = _key(), _key()
    ca = _cert(ca_k, ca_k, "site CA", "site CA", ca=True, days=ca_days)
    cert = _cert(tray_k, ca_key or ca_k, "tray01", "site CA", days=cert_days, san=target)
    pem = serialization.Encoding.PEM
    raw = {"auth": "site",
           "auth_ca_file": _write(tmp_path / "ca.pem", ca.public_bytes(pem), 0o644),
           "auth_cert_file": _write(tmp_path / "tray.pem", cert.public_bytes(pem), 0o644),
           "auth_key_file": _write(tmp_path / "tray.key", (key or tray_k).private_bytes(
               pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()), key_mode),
           "auth_target": target}
    return parse_config({"imex": raw}, None, "tray01").imex


def test_good_site_files_pass_and_report_their_expiry(tmp_path):
    got = auth.load_site(site(tmp_path))
    assert 29 * 86400 < got.cert.seconds_left() < 30 * 86400
    assert got.ca.seconds_left() > 3000 * 86400


@pytest.mark.parametrize("case, expect", [
    ("expired", "auth certificate {d}/tray.pem: expired on "),
    ("ca-expired", "auth CA {d}/ca.pem: expired on "),
    ("future", "auth certificate {d}/tray.pem: not valid before "),
    ("mismatch", "auth key {d}/tray.key: does not match the certificate {d}/tray.pem"),
    ("wrong-ca", "auth certificate {d}/tray.pem: not issued by the CA {d}/ca.pem"),
    ("key-mode", "auth key {d}/tray.key: readable by group or others (mode 0644)"),
    ("unreadable", "auth certificate {d}/tray.pem: no such file"),
    ("not-pem", "auth CA {d}/ca.pem: not a PEM certificate"),
    ("group-writable", "auth CA {d}/ca.pem: writable by group or others (mode 0664)"),
    ("no-target", "auth certificate {d}/tray.pem: has no DNS name 'other.example'"),
])
def test_each_bad_site_file_is_a_precise_reason(tmp_path, case, expect):
    kw = {"expired": dict(cert_days=(-30, -1)), "ca-expired": dict(ca_days=(-30, -1)),
          "future": dict(cert_days=(2, 30)), "mismatch": dict(key=_key()),
          "wrong-ca": dict(ca_key=_key()), "key-mode": dict(key_mode=0o644)}.get(case, {})
    imex = site(tmp_path, **kw)
    if case == "unreadable":
        (tmp_path / "tray.pem").unlink()
    elif case == "not-pem":
        (tmp_path / "ca.pem").write_text("hello\n")
    elif case == "group-writable":
        (tmp_path / "ca.pem").chmod(0o664)
    elif case == "no-target":
        from imexctl.base.dataclass import replace
        imex = replace(imex, auth_target="other.example")
    with pytest.raises(auth.AuthError) as err:
        auth.load_site(imex)
    assert str(err.value).startswith(expect.format(d=tmp_path)), str(err.value)


def _pem(*certs):
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)


def _site_files(tmp_path, ca_certs, chain, key, **over):
    raw = {"auth": "site",
           "auth_ca_file": _write(tmp_path / "ca.pem", _pem(*ca_certs), 0o644),
           "auth_cert_file": _write(tmp_path / "tray.pem", _pem(*chain), 0o644),
           "auth_key_file": _write(tmp_path / "tray.key", key.private_bytes(
               serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
               serialization.NoEncryption()), 0o600),
           "auth_target": "imex.example", **over}
    return parse_config({"imex": raw}, None, "tray01").imex


@pytest.mark.parametrize("order", ["old-first", "new-first"])
def test_a_ca_bundle_of_two_cas_serves_trays_of_either(tmp_path, order):
    """Fidelity N8: during a CA rotation the CA file holds both CAs (docs/security.md);
    a tray certificate from either passes, whatever the order, and the bundle's expiry is
    its oldest CA's."""
    old_k, new_k, tray_k = _key(), _key(), _key()
    old = _cert(old_k, old_k, "old CA", "old CA", ca=True, days=(-300, 20))
    new = _cert(new_k, new_k, "new CA", "new CA", ca=True, days=(-1, 3650))
    cas = [old, new] if order == "old-first" else [new, old]
    for issuer_k, issuer in ((new_k, "new CA"), (old_k, "old CA")):
        leaf = _cert(tray_k, issuer_k, "tray01", issuer, san="imex.example")
        got = auth.load_site(_site_files(tmp_path, cas, [leaf], tray_k))
        assert got.ca.subject == f"CN={issuer}"
    assert 19 * 86400 < auth.read_cert_info(tmp_path / "ca.pem").seconds_left() < 20 * 86400


def test_an_intermediate_ca_after_the_tray_certificate_is_followed(tmp_path):
    root_k, mid_k, tray_k = _key(), _key(), _key()
    root = _cert(root_k, root_k, "root CA", "root CA", ca=True, days=(-1, 3650))
    mid = _cert(mid_k, root_k, "issuing CA", "root CA", ca=True, days=(-1, 365))
    leaf = _cert(tray_k, mid_k, "tray01", "issuing CA", san="imex.example")
    got = auth.load_site(_site_files(tmp_path, [root], [leaf, mid], tray_k))
    assert got.ca.subject == "CN=root CA"
    with pytest.raises(auth.AuthError, match=r"tray.pem: not issued by the CA .*ca.pem$"):
        auth.load_site(_site_files(tmp_path, [root], [leaf], tray_k))   # no intermediate
    fake = _cert(mid_k, root_k, "issuing CA", "root CA", ca=False, days=(-1, 365))
    with pytest.raises(auth.AuthError, match=r"intermediate CA .*tray.pem: CN=issuing CA is "
                                             r"not a CA"):
        auth.load_site(_site_files(tmp_path, [root], [leaf, fake], tray_k))


def _leaf(tray_k, ca_k, *, eku=None, sans=()):
    import ipaddress
    now = datetime.datetime.now(datetime.timezone.utc)
    b = (x509.CertificateBuilder()
         .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tray01")]))
         .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "site CA")]))
         .public_key(tray_k.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(now - datetime.timedelta(days=1))
         .not_valid_after(now + datetime.timedelta(days=30)))
    names = []
    for n in sans:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            names.append(x509.DNSName(n))
    if names:
        b = b.add_extension(x509.SubjectAlternativeName(names), critical=False)
    if eku:
        b = b.add_extension(x509.ExtendedKeyUsage(eku), critical=False)
    return b.sign(ca_k, hashes.SHA256())


def test_site_certificates_real_tls_refuses_are_refused_here_first(tmp_path):
    """Fidelity N15: a serverAuth-only certificate, or one without the tray's address
    when no auth_target is set, fails every handshake; the tray's check names it."""
    from cryptography.x509.oid import ExtendedKeyUsageOID as EKU

    ca_k, tray_k = _key(), _key()
    ca = _cert(ca_k, ca_k, "site CA", "site CA", ca=True, days=(-1, 3650))
    web = _leaf(tray_k, ca_k, eku=[EKU.SERVER_AUTH], sans=["imex.example"])
    with pytest.raises(auth.AuthError, match=r"tray.pem: its extended key usage lacks "
                                             r"clientAuth; the daemon uses it as server and"):
        auth.load_site(_site_files(tmp_path, [ca], [web], tray_k))
    both = _leaf(tray_k, ca_k, eku=[EKU.SERVER_AUTH, EKU.CLIENT_AUTH], sans=["imex.example"])
    auth.load_site(_site_files(tmp_path, [ca], [both], tray_k))
    # no auth_target: peers check the address nodes_config.cfg lists for this tray
    named = _leaf(tray_k, ca_k, sans=["tray01.example", "10.0.0.7"])
    imex = _site_files(tmp_path, [ca], [named], tray_k, auth_target="")
    auth.load_site(imex, address="10.0.0.7")
    auth.load_site(imex, address="tray01.example")
    with pytest.raises(auth.AuthError, match=r"tray.pem: does not name this tray's address "
                                             r"10.0.0.8 in its subjectAltName"):
        auth.load_site(imex, address="10.0.0.8")


def test_a_job_certificate_names_the_target_and_the_trays_own_address(tmp_path):
    """Fidelity N10/N11: CN = target as well as the DNS SAN, and the tray's own entry and
    command address as SANs, in case the command service checks the address it dials."""
    import ipaddress
    creds = issue(tmp_path, "tray01", secret(tmp_path), addresses=("tray01.example", "10.0.0.7"))
    leaf = x509.load_pem_x509_certificate(creds.cert.read_bytes())
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == [creds.target, "tray01.example"]
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("10.0.0.7")]
    (cn,) = leaf.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    (ou,) = leaf.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)
    assert (cn.value, ou.value) == (creds.target, "tray01")


def test_a_linked_site_file_is_refused(tmp_path):
    imex = site(tmp_path)
    (tmp_path / "real.key").write_bytes((tmp_path / "tray.key").read_bytes())
    (tmp_path / "real.key").chmod(0o600)
    (tmp_path / "tray.key").unlink()
    (tmp_path / "tray.key").symlink_to(tmp_path / "real.key")
    with pytest.raises(auth.AuthError, match=r"tray.key: is a symbolic link"):
        auth.load_site(imex)


def test_site_fingerprint_follows_contents_not_times(tmp_path):
    imex = site(tmp_path)
    before = auth.site_fingerprint(imex)
    data = (tmp_path / "tray.pem").read_bytes()
    (tmp_path / "new.pem").write_bytes(data)
    os.replace(tmp_path / "new.pem", tmp_path / "tray.pem")
    os.utime(tmp_path / "tray.pem", (1, 1))
    assert auth.site_fingerprint(imex) == before           # same bytes: nothing to reload
    st = os.lstat(tmp_path / "tray.pem")
    with open(tmp_path / "tray.pem", "ab") as out:          # cp -p over the file: new bytes,
        out.write(b"\n")                                    # same inode and mtime
    os.utime(tmp_path / "tray.pem", ns=(st.st_atime_ns, st.st_mtime_ns))
    assert auth.site_fingerprint(imex) != before


# ------------------------------------------------------------------------------ config
def test_auth_defaults_off_and_site_needs_its_files():
    assert parse_config({}, None, "t").imex.auth == "off"
    with pytest.raises(ConfigError) as err:
        parse_config({"imex": {"auth": "site"}}, None, "t")
    assert ('imex.auth = "site" needs imex.auth_ca_file, imex.auth_cert_file, '
            "imex.auth_key_file") in str(err.value)


def test_a_misspelt_mode_gets_a_suggestion():
    with pytest.raises(ConfigError) as err:
        parse_config({"imex": {"auth": "sight"}}, None, "t")
    assert "imex.auth = 'sight' is not allowed; use one of: off, site, job " \
           "(did you mean 'site'?)" in str(err.value)


def test_bad_names_are_refused():
    with pytest.raises(ConfigError) as err:
        parse_config({"imex": {"auth": "job", "auth_target": "bad name",
                               "auth_cluster": "a.b"}}, None, "t")
    assert "imex.auth_target = 'bad name' is not a DNS name" in str(err.value)
    assert "imex.auth_cluster = 'a.b' must be letters, digits and '-'" in str(err.value)


def test_config_check_warns_of_auth_keys_the_mode_does_not_read():
    cfg = parse_config({"imex": {"auth": "off", "auth_ca_file": "/etc/ca.pem",
                                 "auth_secret_file": "/etc/s"}}, None, "t")
    warnings = inert_settings(cfg)
    assert any(w.startswith("imex.auth_ca_file is set but imex.auth = 'off'") for w in warnings)
    assert any(w.startswith("imex.auth_secret_file is set but imex.auth = 'off'")
               for w in warnings)


# ------------------------------------------------------------------------------ render
def test_rendered_config_points_at_the_files_and_names_the_target(tmp_path):
    keys = auth_settings(key=tmp_path / "k", cert=tmp_path / "c", ca=tmp_path / "a",
                         target="imexctl-j1-r0-gx.rack")
    text = render_daemon_config(load_template(None, auth=True), nodes_config=tmp_path / "n",
                                ports=Ports(1, 2), log_file=tmp_path / "l",
                                wait_for_quorum="RECOVERY", cmd_bind_ip="10.0.0.1", auth=keys)
    lines = text.splitlines()
    assert "IMEX_ENABLE_AUTH_ENCRYPTION=0" not in lines
    for line in ("IMEX_ENABLE_AUTH_ENCRYPTION=1", "IMEX_AUTH_ENCRYPTION_MODE=SSL_TLS",
                 "IMEX_AUTH_SOURCE=FILE", f"IMEX_SERVER_KEY={tmp_path}/k",
                 f"IMEX_SERVER_CERT={tmp_path}/c", f"IMEX_SERVER_CERT_AUTH={tmp_path}/a",
                 f"IMEX_CLIENT_KEY={tmp_path}/k", f"IMEX_CLIENT_CERT={tmp_path}/c",
                 f"IMEX_CLIENT_CERT_AUTH={tmp_path}/a",
                 "IMEX_SECURITY_TARGET_OVERRIDE=imexctl-j1-r0-gx.rack"):
        assert lines.count(line) == 1, line
    off = render_daemon_config(load_template(None), nodes_config=tmp_path / "n",
                               ports=Ports(1, 2), log_file=tmp_path / "l",
                               wait_for_quorum="RECOVERY", cmd_bind_ip="10.0.0.1")
    assert "IMEX_ENABLE_AUTH_ENCRYPTION=0" in off.splitlines() and "IMEX_SERVER_KEY" not in off


def test_a_template_may_not_set_auth_keys_when_imexctl_renders_them(tmp_path):
    tpl = tmp_path / "tpl.cfg"
    tpl.write_text("LOG_LEVEL=4\nIMEX_ENABLE_AUTH_ENCRYPTION=0\n")
    assert load_template(tpl) == tpl.read_text()       # auth off: the site's own business
    with pytest.raises(ConfigError) as err:
        load_template(tpl, auth=True)
    assert str(err.value) == (f"{tpl}:2: IMEX_ENABLE_AUTH_ENCRYPTION is set by imexctl when "
                              "imex.auth is on; remove it from the template")


# ------------------------------------------------------------------------------ prolog
@pytest.mark.parametrize("case", ["expired", "missing-secret"])
def test_a_bad_credential_in_the_prolog_is_a_node_fault_naming_the_file(tmp_path, world, case):
    from imexctl.base.dataclass import replace
    from imexctl.lifecycle.prolog import run_prolog
    from tests.support.lifecycle import CLEAN, leftovers
    from tests.support.sim_daemon import sim_processes

    cfg, slurm, ctx = world
    if case == "expired":
        (tmp_path / "site").mkdir()
        imex = replace(site(tmp_path / "site", cert_days=(-30, -1)), auth_target="")
        expect = f"imexctl: prolog/render: auth certificate {tmp_path}/site/tray.pem: expired on "
    else:
        imex = replace(cfg.imex, auth=AuthMode.JOB, auth_secret_file=tmp_path / "nope")
        expect = f"imexctl: prolog/render: auth secret {tmp_path}/nope: no such file"
    cfg = replace(cfg, imex=replace(imex, **{k: getattr(cfg.imex, k) for k in
                                             ("server_port_base", "cmd_port_base", "port_span")}))
    assert run_prolog(cfg, slurm, ctx) == 1
    assert slurm.nodes_["tray01"].reason.startswith(expect), slurm.nodes_["tray01"].reason
    assert leftovers(tmp_path) == CLEAN and sim_processes(tmp_path) == []


# ---------------------------------------------- a whole domain, status, health, doctor, metrics
@pytest.fixture
def auth_world(tmp_path, sim_slurm, job_id):
    """tray01 running the simulated daemon (which speaks TLS when config.cfg says so)."""
    from imexctl.base import log
    from tests.support.lifecycle import ctx_for
    from tests.support.sim_daemon import sim_cfg

    def make(**imex):
        cfg = sim_cfg(tmp_path, policy="all", **imex)
        log.setup_logging(cfg.paths.log_file, "info", "tray01", stderr=None)
        return cfg, sim_slurm, ctx_for(job_id, nodes="tray01")
    return make


def test_job_mode_domain_comes_up_with_its_credentials_and_reports_them(tmp_path, auth_world):
    from imexctl.lifecycle.epilog import run_epilog
    from imexctl.lifecycle.prolog import run_prolog
    from imexctl.ops import metrics, status
    from tests.support.lifecycle import CLEAN, leftovers

    cfg, slurm, ctx = auth_world(auth="job", auth_secret_file=str(secret(tmp_path)),
                                 auth_cluster="rack")
    assert run_prolog(cfg, slurm, ctx) == 0, slurm.nodes_["tray01"].reason
    try:
        jdir = cfg.paths.run_dir / f"job-{ctx.job_id}"
        config = (jdir / "config.cfg").read_text().splitlines()
        assert "IMEX_ENABLE_AUTH_ENCRYPTION=1" in config
        assert f"IMEX_SERVER_KEY={jdir}/{auth.JOB_KEY}" in config
        target = next(l for l in config if l.startswith("IMEX_SECURITY_TARGET_OVERRIDE="))
        assert target.startswith(f"IMEX_SECURITY_TARGET_OVERRIDE=imexctl-j{ctx.job_id}-r0-g")
        for name in (auth.JOB_CA, auth.JOB_CERT, auth.JOB_KEY):
            assert stat.S_IMODE(os.lstat(jdir / name).st_mode) == 0o600
        view = status.collect(cfg, live=False)
        (cert,) = view["auth"]["certificates"]
        assert view["auth"]["mode"] == "job" and cert["name"] == "job-cert"
        assert 0 < cert["days_left"] < 7.1 and view["problems"] == []
        text = metrics.render(cfg, live_fabric=False)
        assert 'imexctl_auth_cert_expiry_seconds{cert="job-cert"} ' in text
    finally:
        assert run_epilog(cfg, slurm, ctx) == 0
    assert leftovers(tmp_path) == CLEAN


def test_a_running_job_that_outlives_its_certificate_is_a_note_not_a_drain(tmp_path,
                                                                            auth_world):
    """Audit F4-5: the job's time limit was extended past its certificate's end (or it
    runs longer than imex.auth_cert_lifetime_h): health notes it and drains nothing."""
    from imexctl.lifecycle.epilog import run_epilog
    from imexctl.lifecycle.prolog import run_prolog
    from imexctl.ops.health import run_checks

    key = secret(tmp_path)
    cfg, slurm, ctx = auth_world(auth="job", auth_secret_file=str(key), auth_cluster="rack")
    assert run_prolog(cfg, slurm, ctx) == 0, slurm.nodes_["tray01"].reason
    try:
        jdir = cfg.paths.run_dir / f"job-{ctx.job_id}"
        (tmp_path / "old").mkdir(mode=0o700)
        old = auth.issue_job_credentials(tmp_path / "old", key, cluster="rack",
                                         job_id=ctx.job_id, restart=0, group="g", node="tray01",
                                         end_time=None, lifetime_h=1,
                                         now=time.time() - 3 * 86400)
        os.replace(old.cert, jdir / auth.JOB_CERT)       # what the tray has after 3 days
        report = run_checks(cfg, slurm)
        assert report.problems == [] and report.drain != "drained", report.reason
        assert slurm.nodes_["tray01"].reason == ""
        assert any(f"job {ctx.job_id}'s certificate expired 2.9 days ago" in n
                   for n in report.notes), report.notes
    finally:
        assert run_epilog(cfg, slurm, ctx) == 0


def test_health_reloads_changed_site_files_once_with_sigusr1(tmp_path, auth_world):
    from imexctl.lifecycle.epilog import run_epilog
    from imexctl.lifecycle.prolog import run_prolog
    from imexctl.ops.health import run_checks

    (tmp_path / "site").mkdir()
    imex = site(tmp_path / "site")
    files = {k: str(getattr(imex, k)) for k in ("auth_ca_file", "auth_cert_file", "auth_key_file")}
    cfg, slurm, ctx = auth_world(auth="site", auth_target="imex.example", **files)
    assert run_prolog(cfg, slurm, ctx) == 0, slurm.nodes_["tray01"].reason
    try:
        first = run_checks(cfg, slurm)
        assert first.problems == [] and not any("SIGUSR1" in r for r in first.repaired)
        touched = time.time() + 5
        os.utime(files["auth_cert_file"], (touched, touched))  # the same contents, touched
        assert not any("SIGUSR1" in r for r in run_checks(cfg, slurm).repaired)
        renew(files["auth_cert_file"], mtime=os.lstat(files["auth_cert_file"]).st_mtime - 86400)
        second = run_checks(cfg, slurm)                       # a renewal with an old mtime
        assert [r for r in second.repaired if "SIGUSR1" in r] == [
            f"sent SIGUSR1 to nvidia-imex pid {_pid(cfg)} of job {ctx.job_id}: the site's TLS "
            "files changed"]
        third = run_checks(cfg, slurm)                          # sent once per change
        assert not any("SIGUSR1" in r for r in third.repaired)
        log = cfg.paths.run_dir / f"job-{ctx.job_id}" / "nvidia-imex.log"
        deadline = time.monotonic() + 5
        while "SIGUSR1 received" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "SIGUSR1 received: reloading SSL credentials." in log.read_text()
    finally:
        assert run_epilog(cfg, slurm, ctx) == 0


def renew(path, mtime):
    """Replace a PEM file by rename with new contents (one more newline: what a daemon
    reads differs), keeping the mtime it had at the source, as rsync -a and cp -p do."""
    new = f"{path}.new"
    with open(new, "wb") as out:
        out.write(open(path, "rb").read() + b"\n")
    os.utime(new, (mtime, mtime))
    os.replace(new, path)


def _pid(cfg):
    from imexctl.tray.ownership import StateStore
    return StateStore(cfg.paths.state_dir).load().daemon.pid


@pytest.mark.parametrize("case", ["expired", "soon"])
def test_health_drains_for_an_expired_site_file_and_notes_one_near_its_end(tmp_path, slurm,
                                                                            case):
    from imexctl.base.dataclass import replace
    from imexctl.ops.health import run_checks
    from tests.support.lifecycle import make_cfg

    cfg = make_cfg(tmp_path)
    imex = site(tmp_path, cert_days=(-30, -1) if case == "expired" else (-1, 3))
    cfg = replace(cfg, imex=replace(cfg.imex, **{k: getattr(imex, k) for k in (
        "auth", "auth_ca_file", "auth_cert_file", "auth_key_file", "auth_target")}))
    report = run_checks(cfg, slurm)
    if case == "expired":
        assert report.reason.startswith(
            f"imexctl: health/auth: auth certificate {tmp_path}/tray.pem: expired on ")
        assert report.drain == "drained"
    else:
        assert report.problems == []
        assert any(n.startswith(f"{tmp_path}/tray.pem expires in 3.0 days") for n in report.notes)


@pytest.mark.parametrize("case, expect", [
    ("expired", "auth certificate {d}/tray.pem: expired on "),
    ("mismatch", "auth key {d}/tray.key: does not match the certificate"),
    ("wrong-ca", "auth certificate {d}/tray.pem: not issued by the CA"),
    ("unreadable", "auth CA {d}/ca.pem: no such file"),
    ("secret-mode", "auth secret {d}/secret: readable by group or others (mode 0644)"),
])
def test_doctor_names_each_bad_auth_file(tmp_path, case, expect):
    from imexctl.base.dataclass import replace
    from imexctl.ops.doctor import check_auth
    from tests.support.lifecycle import make_cfg

    cfg = make_cfg(tmp_path)
    kw = {"expired": dict(cert_days=(-30, -1)), "mismatch": dict(key=_key()),
          "wrong-ca": dict(ca_key=_key())}.get(case, {})
    imex = site(tmp_path, **kw)
    if case == "unreadable":
        (tmp_path / "ca.pem").unlink()
    if case == "secret-mode":
        imex = replace(imex, auth=AuthMode.JOB, auth_secret_file=secret(tmp_path))
        (tmp_path / "secret").chmod(0o644)
    finding = check_auth(replace(cfg, imex=imex))
    assert finding.level == "fail" and finding.message.startswith(expect.format(d=tmp_path))
    assert check_auth(cfg).level == "ok"          # auth off: nothing to check


def test_without_cryptography_auth_is_a_one_line_reason_not_a_traceback(tmp_path):
    import json
    import subprocess
    import sys

    code = f"""
import json, sys
sys.modules["cryptography"] = None          # an install without the auth extra
from pathlib import Path
from imexctl.imex import auth
try:
    auth.read_cert_info(Path({str(tmp_path / 'c.pem')!r}))
except auth.AuthError as exc:
    print(json.dumps(str(exc)))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout).startswith(
        "imex.auth needs the Python package cryptography, which this imexctl cannot import")


def test_status_table_shows_the_mode_and_days_left():
    from imexctl.cli.display import status_table

    base = {"node": "tray01", "state": "idle", "channel_mode": "auto", "problems": [],
            "notes": []}
    on = status_table({**base, "auth": {"mode": "site", "certificates": [
        {"name": "site-ca", "days_left": 3650.2}, {"name": "site-cert", "days_left": None}]}})
    assert "auth:          site (site-ca 3650.2 days left, site-cert UNREADABLE)" in on
    off = status_table({**base, "auth": {"mode": "off", "certificates": []}})
    assert "auth:" not in off


def test_a_reissued_job_id_derives_another_job_ca(tmp_path, auth_world):
    """Audit S4-1: the same cluster, job id, restart count and clique once gave the same
    job CA key, so the earlier job's leftover daemon or certificate was trusted by a later
    job with that id. The domain job's SubmitTime now tells the incarnations apart."""
    from imexctl.lifecycle.epilog import run_epilog
    from imexctl.lifecycle.prolog import run_prolog

    cfg, slurm, ctx = auth_world(auth="job", auth_secret_file=str(secret(tmp_path)),
                                 auth_cluster="rack")
    cas = []
    for submitted in (1795335854, 1795335854 + 86400):
        slurm.set_job(ctx.job_id, submit_time=submitted)
        assert run_prolog(cfg, slurm, ctx) == 0, slurm.nodes_["tray01"].reason
        try:
            cas.append((cfg.paths.run_dir / f"job-{ctx.job_id}" / auth.JOB_CA).read_bytes())
        finally:
            assert run_epilog(cfg, slurm, ctx) == 0
    first, second = (x509.load_pem_x509_certificate(c).public_key() for c in cas)
    assert first.public_numbers() != second.public_numbers()


def test_a_het_components_trays_derive_with_the_leaders_submit_time():
    """Every component's trays must derive the one CA of the leader's domain: each
    component has its own SubmitTime, so all read the leader's."""
    from imexctl.lifecycle.prolog import PrologRun, _incarnation
    from imexctl.rules.decision import NodeDecision
    from tests.support.lifecycle import ctx_for
    from tests.support.memory_slurm import job_record, MemorySlurm

    slurm = MemorySlurm()
    slurm.jobs[50] = job_record(50, ("tray01",), submit_time=1000)
    slurm.jobs[51] = job_record(51, ("tray02",), submit_time=1001, het_job_id=50)
    for job in (50, 51):
        run = PrologRun(cfg=None, slurm=slurm, store=None,
                        ctx=ctx_for(job, node=f"tray0{job - 49}", nodes="tray[01-02]",
                                    het_job_id=50))
        run.job = slurm.job(job)
        run.decision = NodeDecision(job, "domains", None, "imexctl", "controller",
                                    het_job_id=50)
        assert _incarnation(run) == 1000
