"""The simulated daemons speak mutual TLS when their config says so (issue 29).

Real processes on 127.x.y.z, certificates made here with ``cryptography``
(tests/support/simtls.py). Members with credentials of one CA come UP; a member or a
forged peer (the probe) with another CA's certificate, with none, with an expired one,
or without TLS at all is refused, and each daemon logs the address and the reason; a
refused member is not connected in ``-N``. Misconfigured auth keys fail the start;
SIGUSR1 reloads rotated files.
"""

from __future__ import annotations

import signal
import subprocess

import pytest

from imexctl.imex import launcher
from imexctl_sim import probe as simprobe

from tests.support.sim import PY, poll
from tests.support.simtls import TestCA, auth_keys


@pytest.fixture
def cas(tmp_path):
    return TestCA(tmp_path, "a"), TestCA(tmp_path, "b")


def probe(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "imexctl_sim.probe", *args], capture_output=True,
                          text=True, timeout=30)


def connections(view: dict) -> dict[str, dict[str, str]]:
    return {i: {j: c["status"] for j, c in node["connections"].items()}
            for i, node in view["nodes"].items()}


def stranger(dom) -> str:
    """A loopback address in the domain's /24 that is no member."""
    return dom.addresses[0].rsplit(".", 1)[0] + ".250"


def test_two_members_of_one_ca_come_up_and_forged_peers_are_refused(sim, cas):
    a, b = cas
    dom = sim(2)
    for t in dom.trays:
        t.write_config(**auth_keys(a.issue(f"tray{t.idx}", [t.addr])))
    dom.start_all()
    dom.wait_up()
    t0 = dom.trays[0]
    log = t0.log_text()
    assert "Authentication and Encryption enabled = 1" in log
    assert "SSL credentials loaded: mode SSL_TLS, source FILE, server certificate sha256:" \
        in log
    assert "TLS authentication" not in log and "Refusing" not in log
    src = stranger(dom)
    target = f"{t0.addr}:{dom.port}"
    other = b.issue("forger", [src])
    expired = a.issue("stale", [src], expired=True)
    # another CA's credentials, none, an expired certificate of the right CA, no TLS
    cases = [
        (["--cert", str(other.cert), "--key", str(other.key)],
         "certificate verify failed: unable to get local issuer certificate"),
        ([], "the peer presented no certificate"),
        (["--cert", str(expired.cert), "--key", str(expired.key)],
         "certificate verify failed: certificate has expired"),
        (["--plain"], "not a TLS handshake"),
    ]
    for args, logged in cases:
        out = probe("--connect", target, "--source", src, *args)
        assert out.returncode == 1, (args, out.stdout, out.stderr)
        # the prober learns it was refused at TLS, from the daemon's alert
        assert out.stdout.startswith("refused: TLS: " if args != ["--plain"] else
                                     "refused: closed without an answer"), out.stdout
        poll(lambda logged=logged: f"Refusing connection from {src}: TLS authentication "
             f"failed: {logged}" in t0.log_text(), 5, what=logged)
    # the prober does not trust the daemon (its own CA): it hangs up, the daemon says why
    out = probe("--connect", target, "--source", src, "--ca", str(b.ca_path))
    assert out.returncode == 1 and out.stdout.startswith(
        "refused: TLS: certificate verify failed"), out.stdout
    poll(lambda: f"Refusing connection from {src}: TLS authentication failed: the peer "
         "does not trust our certificate (unknown CA)" in t0.log_text(), 5)
    # good credentials from a stranger's address: past TLS, but no member
    good = a.issue("stranger", [src])
    out = probe("--connect", target, "--source", src, "--cert", str(good.cert),
                "--key", str(good.key), "--ca", str(a.ca_path))
    assert (out.returncode, out.stdout.strip()) == (1, "refused: hello rejected: not a member")
    # the domain stayed UP meanwhile
    assert t0.domain_json()["status"] == "UP"
    # a member's credentials from its own address are accepted (the probe's exit 0)
    t1 = dom.trays[1]
    mine = a.issue("tray1-again", [t1.addr])
    out = probe("--connect", target, "--source", t1.addr, "--cert", str(mine.cert),
                "--key", str(mine.key), "--ca", str(a.ca_path))
    assert out.returncode == 0, out.stdout
    assert out.stdout.startswith(f"accepted: welcomed by node 0 ({t0.addr})")


@pytest.mark.parametrize("third", ["other-ca", "no-auth", "expired"])
def test_a_member_that_does_not_authenticate_is_not_connected(sim, cas, third):
    a, b = cas
    dom = sim(3)
    t0, t1, t2 = dom.trays
    for t in (t0, t1):
        t.write_config(**auth_keys(a.issue(f"tray{t.idx}", [t.addr])))
    if third == "other-ca":
        t2.write_config(**auth_keys(b.issue("tray2", [t2.addr])))
    elif third == "expired":
        t2.write_config(**auth_keys(a.issue("tray2", [t2.addr], expired=True)))
    # no-auth: tray 2 keeps the default config (IMEX_ENABLE_AUTH_ENCRYPTION=0)
    dom.start_all()
    why = {"other-ca": "certificate verify failed: self-signed certificate in certificate "
                       "chain",
           "expired": "certificate verify failed: certificate has expired",
           "no-auth": None}[third]
    refused = {"other-ca": "the peer does not trust our certificate (unknown CA)",
               "expired": "certificate verify failed: certificate has expired",
               "no-auth": "not a TLS handshake (a peer without authentication?)"}[third]
    # tray 0 refuses tray 2's dial, and (with TLS on tray 2) tray 2's server certificate
    lines = [f"Refusing connection from {t2.addr}: TLS authentication failed: {refused}."]
    if why:
        lines.append(f"TLS authentication with node 2 ({t2.addr}) failed: {why}.")

    def settled():
        view = t0.domain_json()
        c = connections(view)
        log = t0.log_text()
        return view if (c["0"]["1"], c["1"]["0"]) == ("CONNECTED", "CONNECTED") and \
            all(line in log for line in lines) else None
    view = poll(settled, 20, 0.2, "trays 0 and 1 connected, tray 2 refused both ways")
    c = connections(view)
    assert view["status"] == "DEGRADED"
    assert c["0"]["2"] == c["1"]["2"] == "NEVER_CONNECTED"
    assert c["2"]["0"] == c["2"]["1"] == "NEVER_CONNECTED"
    assert "       0        C   C   N" in t0.ctl("-N").stdout
    # what a prolog's wait-ready reason quotes of the log (audit F4-6)
    if t0.log.name == launcher.DAEMON_LOGS[0]:
        quoted = launcher.tls_failure(t0.log.parent)
        assert "TLS authentication" in quoted and quoted in t0.log_text(), quoted


def test_auth_off_is_plaintext_as_before(sim):
    dom = sim(2)
    dom.start_all()
    dom.wait_up()
    log = dom.trays[0].log_text()
    assert "Authentication and Encryption enabled = 0" in log
    assert "SSL" not in log and "TLS" not in log
    out = probe("--connect", f"{dom.addresses[0]}:{dom.port}", "--source", dom.addresses[1],
                "--plain")
    assert out.returncode == 0 and out.stdout.startswith("accepted: "), out.stdout


def test_sigusr1_reloads_a_rotated_certificate(sim, cas):
    a, b = cas
    dom = sim(2)
    t0, t1 = dom.trays
    t0.write_config(**auth_keys(a.issue("tray0", [t0.addr])))
    # tray 1 trusts CA a but holds a certificate of CA b: refused both ways
    wrong = b.issue("tray1", [t1.addr], out=t1.dir / "tls")
    t1.write_config(**auth_keys(wrong, IMEX_SERVER_CERT_AUTH=str(a.ca_path),
                                IMEX_CLIENT_CERT_AUTH=str(a.ca_path)))
    dom.start_all()
    poll(lambda: f"Refusing connection from {t1.addr}" in t0.log_text(), 10)
    before = t1.log_text().count("SSL credentials loaded")
    # rotate in place (same paths, as a site's renewal does), then SIGUSR1
    a.issue("tray1", [t1.addr], out=t1.dir / "tls")
    t1.signal(signal.SIGUSR1)
    poll(lambda: t1.log_text().count("SSL credentials loaded") == before + 1, 5)
    log = t1.log_text()
    assert "SIGUSR1 received: reloading SSL credentials." in log
    assert "SIGUSR1 received: restarting all outgoing client connections." in log
    dom.wait_up(timeout=20)
    # files that no longer load: the daemon keeps the credentials it has, and says so
    (t1.dir / "tls" / "key.pem").write_text("garbage\n")
    poll(lambda: (t1.signal(signal.SIGUSR1), "Reloading SSL credentials failed: "
                  "IMEX_SERVER_KEY holds no PEM private key. Keeping the previous "
                  "credentials." in t1.log_text())[1], 5, 0.2)
    assert t1.proc.poll() is None
    dom.wait_up(timeout=20)


def test_target_override_and_san_check(sim, cas):
    a, _ = cas
    # certificates naming no address, only "localhost" as common name (NVIDIA's example
    # for IMEX_SECURITY_TARGET_OVERRIDE): UP with the override
    dom = sim(2)
    for t in dom.trays:
        t.write_config(**auth_keys(a.issue("localhost", out=t.dir / "tls"),
                                   IMEX_SECURITY_TARGET_OVERRIDE="localhost"))
    dom.start_all()
    dom.wait_up()
    # a DNS name in the SAN and no override: the address is checked, and refused
    dom2 = sim(2)
    for t in dom2.trays:
        t.write_config(**auth_keys(a.issue(f"dns{t.idx}", dns=["imex.test"],
                                           out=t.dir / "tls")))
    dom2.start_all()
    t0 = dom2.trays[0]
    addr1 = dom2.addresses[1]
    poll(lambda: f"TLS authentication with node 1 ({addr1}) failed: certificate verify "
         f"failed: IP address mismatch, certificate is not valid for '{addr1}'."
         in t0.log_text(), 10)
    assert connections(t0.domain_json())["0"]["1"] == "NEVER_CONNECTED"


def test_env_path_and_env_val_sources(sim, cas):
    a, _ = cas
    dom = sim(2)
    t0, t1 = dom.trays
    i0 = a.issue("tray0", [t0.addr])
    names = {k: f"SIM_{k}" for k in ("IMEX_SERVER_KEY", "IMEX_SERVER_CERT",
                                     "IMEX_SERVER_CERT_AUTH", "IMEX_CLIENT_KEY",
                                     "IMEX_CLIENT_CERT", "IMEX_CLIENT_CERT_AUTH")}
    files = {"KEY": i0.key, "CERT": i0.cert, "CERT_AUTH": i0.ca}
    env0 = {v: str(files[k.split("_", 2)[2]]) for k, v in names.items()}
    t0.write_config(**auth_keys(i0, IMEX_AUTH_SOURCE="ENV_PATH", **names))
    i1 = a.issue("tray1", [t1.addr])
    files = {"KEY": i1.key, "CERT": i1.cert, "CERT_AUTH": i1.ca}
    env1 = {v: files[k.split("_", 2)[2]].read_text() for k, v in names.items()}
    t1.write_config(**auth_keys(i1, IMEX_AUTH_SOURCE="ENV_VAL", **names))
    t0.start(env0)
    t1.start(env1)
    dom.wait_up()
    assert "source ENV_VAL" in t1.log_text()


def _fails_to_start(dom, **keys) -> str:
    t = dom.trays[0]
    t.write_config(**keys)
    t.start()
    assert t.wait_exit(10) == 1
    return t.log_text()


def test_misconfigured_auth_fails_the_start(sim, cas, tmp_path):
    a, b = cas
    dom = sim(1)
    t = dom.trays[0]
    good = a.issue("tray0", [t.addr])
    other = b.issue("other", [t.addr])
    unreadable = tmp_path / "nothere.pem"
    head = "Failed to initialize authentication and encryption: "
    cases = [
        (auth_keys(good, IMEX_SERVER_KEY=str(unreadable)),
         f"Cannot read IMEX_SERVER_KEY '{unreadable}': No such file or directory."),
        (auth_keys(good, IMEX_CLIENT_KEY=str(other.key)),
         "IMEX_CLIENT_KEY does not match the certificate in IMEX_CLIENT_CERT."),
        (auth_keys(good, IMEX_SERVER_CERT_AUTH=str(good.key)),
         "IMEX_SERVER_CERT_AUTH holds no PEM certificate."),
        (auth_keys(good, IMEX_SERVER_CERT_AUTH=str(tmp_path)),
         f"Cannot read IMEX_SERVER_CERT_AUTH '{tmp_path}': not a regular file."),
        (auth_keys(good, IMEX_AUTH_ENCRYPTION_MODE=""),
         "Invalid value '' for IMEX_AUTH_ENCRYPTION_MODE: expected one of SSL_TLS, "
         "GSS_AUTH_ENCRYPT, GSS_AUTH_ONLY."),
        (auth_keys(good, IMEX_AUTH_ENCRYPTION_MODE="TLS"),
         "Invalid value 'TLS' for IMEX_AUTH_ENCRYPTION_MODE"),
        (auth_keys(good, IMEX_AUTH_ENCRYPTION_MODE="GSS_AUTH_ENCRYPT"),
         "IMEX_AUTH_ENCRYPTION_MODE=GSS_AUTH_ENCRYPT is not simulated"),
        (auth_keys(good, IMEX_AUTH_SOURCE=""),
         "Invalid value '' for IMEX_AUTH_SOURCE: expected one of FILE, ENV_PATH, ENV_VAL."),
        (auth_keys(good, IMEX_CLIENT_CERT=""),
         "IMEX_CLIENT_CERT is empty (IMEX_AUTH_SOURCE=FILE)."),
        (auth_keys(good, IMEX_AUTH_SOURCE="ENV_PATH", IMEX_SERVER_KEY="NO_SUCH_VAR"),
         "IMEX_SERVER_KEY names environment variable NO_SUCH_VAR, which is not set"),
        (auth_keys(good, IMEX_ENABLE_AUTH_ENCRYPTION="yes"),
         "Invalid value 'yes' for IMEX_ENABLE_AUTH_ENCRYPTION (0 or 1)."),
    ]
    for keys, line in cases:
        log = _fails_to_start(dom, **keys)
        assert f"[ERROR] [tid " in log and head + line in log, (line, log[-600:])
    # an absent mode is the documented default, SSL_TLS
    keys = auth_keys(good)
    del keys["IMEX_AUTH_ENCRYPTION_MODE"]
    t.write_config(**keys)
    assert "IMEX_AUTH_ENCRYPTION_MODE" not in t.cfg.read_text()
    t.start()
    poll(lambda: t.query() == "READY", 10)
    assert "SSL credentials loaded: mode SSL_TLS" in t.log_text()


def test_sigusr1_reload_is_rate_limited_like_the_reconnects(sim, cas):
    """Scale 0.4: one reload per 2 s window; a second SIGUSR1 inside it reloads nothing."""
    a, _ = cas
    dom = sim(1, time_scale="0.4")
    t = dom.trays[0]
    t.write_config(**auth_keys(a.issue("tray0", [t.addr])))
    t.start()
    poll(lambda: t.query() == "READY", 10)
    t.signal(signal.SIGUSR1)
    poll(lambda: "SIGUSR1 received: reloading SSL credentials." in t.log_text(), 5)
    t.signal(signal.SIGUSR1)
    poll(lambda: "SIGUSR1 ignored: processed less than 5 s ago." in t.log_text(), 5)
    log = t.log_text()
    assert log.count("SIGUSR1 received: reloading SSL credentials.") == 1
    assert log.count("SSL credentials loaded: ") == 2        # at start and once on SIGUSR1


def test_probe_errors_are_exit_2(sim, cas, tmp_path):
    a, _ = cas
    dom = sim(1)
    addr = dom.addresses[0]
    # nothing listening, a malformed endpoint, unreadable credentials
    out = probe("--connect", f"{addr}:{dom.port}", "--source", addr)
    assert out.returncode == 2 and out.stdout.startswith(
        f"error: cannot connect to {addr}:{dom.port}: "), out.stdout
    assert probe("--connect", "nohostport").returncode == 2
    out = probe("--connect", f"{addr}:{dom.port}", "--cert", str(tmp_path / "none.pem"))
    assert out.returncode == 2 and out.stdout.startswith("error: cannot load --cert "), \
        out.stdout


def test_a_refused_prober_always_reads_the_reason(sim, cas, capsys):
    """The daemon lingers on a connection it refused at TLS: closing it with the prober's
    hello unread sent a reset that lost the alert ('connection closed during the TLS
    handshake' instead of the reason, 38 times in 40 before)."""
    a, _ = cas
    dom = sim(1)
    t = dom.trays[0]
    t.write_config(**auth_keys(a.issue("tray0", [t.addr])))
    t.start()
    poll(lambda: t.query() == "READY", 10)
    argv = ["--connect", f"{t.addr}:{dom.port}", "--source", stranger(dom)]
    for _ in range(20):
        assert simprobe.main(argv) == 1
        assert capsys.readouterr().out == \
            "refused: TLS: the peer requires a certificate and got none\n"
        assert simprobe.main([*argv, "--plain"]) == 1
        assert capsys.readouterr().out.startswith("refused: closed without an answer")
