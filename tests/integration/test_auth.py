"""imex.auth = "job" on the harness (issue 29): a job's daemons authenticate each other with
per-job credentials every tray derives from the site secret. The job comes UP and
completes; a forged peer (another job's credentials, none, an expired certificate, no TLS
at all) is refused by every simulated daemon of the job, which names it in its log. The simulator's
TLS is docs/simulator.md's; what it assumes of NVIDIA's daemon is said there."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.support.harness import (AUTH_CLUSTER, job_auth, release_file, wait_running_domain,
                                   wait_up)


def forge(c, secret: Path, group: str, job: int, kind: str) -> dict[str, str]:
    """Credentials a forger could hold: another job's (same secret), an expired certificate
    of this very job's CA, or none."""
    from imexctl.imex import auth

    d = c.state_dir / "forged" / kind
    d.mkdir(parents=True, exist_ok=True)
    d.chmod(0o700)
    if kind == "none":
        return {}
    if kind == "other-job":
        creds = auth.issue_job_credentials(d, secret, cluster=AUTH_CLUSTER, job_id=job + 7919,
                                           restart=0, group=group, node="forger",
                                           end_time=None, lifetime_h=1)
    else:   # expired, signed by the job's own CA key (a stolen old certificate)
        from imexctl.slurm.scontrol import submit_time

        # the job instance: its SubmitTime is part of the CA key's derivation (audit S4-1)
        submitted = submit_time(c.scontrol("-o", "show", "job", str(job)))
        creds = auth.issue_job_credentials(d, secret, cluster=AUTH_CLUSTER, job_id=job, restart=0,
                                           group=group, node="forger", end_time=None,
                                           lifetime_h=0.5, now=time.time() - 6 * 3600,
                                           incarnation=submitted or 0)
    return {"cert": str(creds.cert), "key": str(creds.key)}


def probe(c, on: str, target: str, port: int, creds: dict[str, str] | None):
    python = c.sim_ctl.parent / "python"    # the simulator's venv (in a Slurm root too)
    argv = [str(python), "-m", "imexctl_sim.probe", "--connect",
            f"{c.tray_addrs()[target]}:{port}", "--timeout", "5"]
    if creds is None:
        argv.append("--plain")
    elif creds:
        argv += ["--cert", creds["cert"], "--key", creds["key"]]
    return c.exec_on(on, argv, timeout=30)


def test_job_auth_domain_comes_up_refuses_forged_peers_and_completes(imex):
    c = imex
    trays = ["tray01", "tray02", "tray03", "tray04"]
    with job_auth(c) as secret:
        release, wait = release_file(c, "auth-probes-done")   # runs until the probes end
        job = c.submit(["-N", "4", "-w", ",".join(trays), "--wrap", wait])
        wait_running_domain(c, job, trays)
        sts = wait_up(c, job, trays)
        dom = sts["tray01"]["domain"]
        for tray, s in sts.items():
            (cert,) = s["auth"]["certificates"]
            assert s["auth"]["mode"] == "job" and cert["name"] == "job-cert", s["auth"]
            assert 0 < cert["days_left"] < 8 and s["problems"] == [], s
        jdir = c.state_dir / "trays" / "tray01" / "run" / f"job-{job}"
        config = (jdir / "config.cfg").read_text().splitlines()
        assert "IMEX_ENABLE_AUTH_ENCRYPTION=1" in config
        assert any(l.startswith(f"IMEX_SECURITY_TARGET_OVERRIDE=imexctl-j{job}-r0-g")
                   for l in config)
        # forged peers knock on every member's server port, from another member's address
        group = sts["tray01"]["decision"]["clique"]
        forged = {kind: forge(c, secret, group, job, kind)
                  for kind in ("other-job", "expired", "none")}
        forged["plain"] = None
        prober = {t: ("tray01" if t == "tray04" else "tray04") for t in trays}
        for tray in trays:
            for kind, creds in forged.items():
                res = probe(c, prober[tray], tray, dom["server_port"], creds)
                want = "refused: closed" if kind == "plain" else "refused: TLS: "
                assert res.returncode == 1 and res.stdout.startswith(want), (tray, kind, res)
        # every daemon names each forger with its address and why: another CA, expired, no
        # certificate, no TLS
        for tray in trays:
            tdir = c.state_dir / "trays" / tray / "run" / f"job-{job}"
            log = (tdir / "nvidia-imex.log").read_text()
            addr = c.tray_addrs()[prober[tray]]
            refusals = [l for l in log.splitlines()
                        if f"Refusing connection from {addr}: TLS authentication failed" in l]
            for why in ("certificate verify failed: unable to get local issuer certificate",
                        "certificate verify failed: certificate has expired",
                        "the peer presented no certificate", "not a TLS handshake"):
                assert any(why in line for line in refusals), (tray, why, refusals)
        # the domain stayed UP among its members
        assert all(s["domain"]["domain_state"] == "UP"
                   for s in (c.imexctl_status(t) for t in trays))
        # the job outlives tray01's certificate (an extended time limit; audit F4-5): the
        # HealthCheckProgram notes it and drains nothing
        cert = jdir / "imex-auth-cert.pem"
        cert.write_bytes(Path(forged["expired"]["cert"]).read_bytes())
        cert.chmod(0o600)
        res = c.run_healthcheck("tray01")
        node = c.node_info("tray01")
        assert res.returncode == 0 and "DRAIN" not in node["state"], (res, node)
        assert f"job {job}'s certificate expired" in res.stdout + res.stderr + (
            c.state_dir / "trays" / "tray01" / "log" / "imexctl.log").read_text()[-20000:]
        release.touch()
        info = c.wait_job_state(job, ("COMPLETED", "FAILED", "CANCELLED"), timeout=60)
        assert info["JobState"] == "COMPLETED", info
        c.wait_quiet(timeout=60)
        assert not jdir.exists()



@pytest.mark.host_slurm_only(
    "waits out Slurm's requeue delay (cred_expire, ~35 s here), Slurm's own and alike in 22.05 "
    "to 26.05; imexctl's side, the restart count in the credentials, is the same everywhere "
    "(tests/unit/test_auth.py)")
def test_a_requeued_job_gets_new_credentials(imex):
    c = imex
    trays = ["tray01", "tray02"]
    with job_auth(c):
        job = c.submit(["-N", "2", "-w", ",".join(trays), "--requeue", "--wrap", "sleep 120"])
        wait_running_domain(c, job, trays)
        wait_up(c, job, trays)
        jdir = c.state_dir / "trays" / "tray01" / "run" / f"job-{job}"
        first = (jdir / "imex-auth-ca.pem").read_bytes()
        c.scontrol("requeue", str(job))
        deadline = time.monotonic() + c.cred_expire + 90
        while True:     # the second run's prolog renders its own credentials
            config = jdir / "config.cfg"
            try:
                lines = config.read_text().splitlines()
            except FileNotFoundError:
                lines = []
            if any(l.startswith(f"IMEX_SECURITY_TARGET_OVERRIDE=imexctl-j{job}-r1-g")
                   for l in lines):
                break
            assert time.monotonic() < deadline, c.job_info(job)
            time.sleep(0.5)
        sts = wait_up(c, job, trays, timeout=30)
        assert (jdir / "imex-auth-ca.pem").read_bytes() != first
        assert all(s["problems"] == [] for s in sts.values()), sts
        c.client(["scancel", str(job)], check=False)
        c.wait_quiet(timeout=60)


def site_files(c, trays, target):
    """A site PKI as enterprises run one, where the trays' config finds it ({node} in the
    paths): the CA file a bundle of an old CA (a rotation in progress) and the site's root;
    the first tray's certificate issued by the root, every other one's by an issuing
    (intermediate) CA that follows it in its certificate file (fidelity N8). Returns the
    [imex] keys that name them."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    pem = serialization.Encoding.PEM

    def cert(key, signer, name, issuer, ca):
        b = (x509.CertificateBuilder()
             .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
             .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
             .public_key(key.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(now - datetime.timedelta(days=1))
             .not_valid_after(now + datetime.timedelta(days=30))
             .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if not ca:
            b = b.add_extension(x509.SubjectAlternativeName([x509.DNSName(target)]), critical=False)
        return b.sign(signer, hashes.SHA256()).public_bytes(pem)

    old_key, ca_key, mid_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
    bundle = cert(old_key, old_key, "old site CA", "old site CA", True) + \
        cert(ca_key, ca_key, "site CA", "site CA", True)
    mid_pem = cert(mid_key, ca_key, "site issuing CA", "site CA", True)
    for i, tray in enumerate(trays):
        d = c.state_dir / "trays" / tray / "tls"
        d.mkdir(mode=0o700, exist_ok=True)
        key = ec.generate_private_key(ec.SECP256R1())
        (d / "ca.pem").write_bytes(bundle)
        (d / "tray.pem").write_bytes(cert(key, ca_key, tray, "site CA", False) if i == 0 else
                                     cert(key, mid_key, tray, "site issuing CA", False) + mid_pem)
        (d / "tray.key").write_bytes(key.private_bytes(
            pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        for f in d.iterdir():
            f.chmod(0o600 if f.name == "tray.key" else 0o644)
    t = f"{c.state_dir}/trays/{{node}}/tls"
    return (f'auth = "site"\nauth_ca_file = "{t}/ca.pem"\nauth_cert_file = "{t}/tray.pem"\n'
            f'auth_key_file = "{t}/tray.key"\nauth_target = "{target}"\n')


@pytest.mark.host_slurm_only(
    "the site mode's checks and rotation are imexctl's and the simulator's alone (unit-tested "
    "on every Python); the job mode above runs on every Slurm")
def test_site_auth_domain_comes_up_and_health_reloads_a_renewed_certificate(imex):
    c = imex
    trays = ["tray01", "tray02"]
    toml = c.state_dir / "etc" / "imexctl.toml"
    base = toml.read_text()
    toml.write_text(base.replace("\n[imex]\n", "\n[imex]\n" + site_files(
        c, trays, "imex.harness.example"), 1))
    try:
        release, wait = release_file(c, "site-auth-done")    # runs until the test is done
        job = c.submit(["-N", "2", "-w", ",".join(trays), "--wrap", wait])
        wait_running_domain(c, job, trays)
        sts = wait_up(c, job, trays)
        assert [e["name"] for e in sts["tray01"]["auth"]["certificates"]] == ["site-ca",
                                                                               "site-cert"]
        # a renewed certificate copied the way rsync -a and cp -p copy (new contents, the
        # source's older mtime, renamed over): health sends SIGUSR1 once (audit F4-7)
        cert = c.state_dir / "trays" / "tray01" / "tls" / "tray.pem"
        new = cert.with_name("tray.pem.new")
        new.write_bytes(cert.read_bytes() + b"\n")
        new.chmod(0o644)
        older = cert.stat().st_mtime - 3600
        os.utime(new, (older, older))
        os.replace(new, cert)
        first = c.run_healthcheck("tray01")
        second = c.run_healthcheck("tray01")
        assert first.returncode == second.returncode == 0, (first.stderr, second.stderr)
        log = c.state_dir / "trays" / "tray01" / "run" / f"job-{job}" / "nvidia-imex.log"
        deadline = time.monotonic() + 10
        while "reloading SSL credentials" not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.2)
        assert log.read_text().count("SIGUSR1 received: reloading SSL credentials.") == 1
        assert wait_up(c, job, trays)
        release.touch()
        info = c.wait_job_state(job, ("COMPLETED", "FAILED", "CANCELLED"), timeout=60)
        assert info["JobState"] == "COMPLETED", info
        c.wait_quiet(timeout=60)
    finally:
        c.cancel_all()
        toml.write_text(base)


def test_a_tray_with_another_secret_is_drained_before_the_job_runs(imex):
    """Issue 36 (audit F4-6): tray03 holds another secret. Health publishes each tray's
    fingerprint; PrologSlurmctld compares them per clique, drains tray03 naming imex.auth,
    and the job waits: no daemon starts, nothing times out, no healthy tray drains."""
    c = imex
    trays = ["tray01", "tray02", "tray03"]
    toml = c.state_dir / "etc" / "imexctl.toml"
    base = toml.read_text()
    shared = os.urandom(64)
    keys = {t: c.state_dir / "trays" / t / "imex-auth.key" for t in trays}
    for tray, key in keys.items():
        key.write_bytes(os.urandom(64) if tray == "tray03" else shared)
        key.chmod(0o600)
    toml.write_text(base.replace("\n[imex]\n", f'\n[imex]\nauth = "job"\nauth_secret_file = '
                                 f'"{c.state_dir}/trays/{{node}}/imex-auth.key"\n'
                                 f'auth_cluster = "{AUTH_CLUSTER}"\n', 1))
    try:
        for tray in trays:      # what HealthCheckProgram does on its interval
            res = c.run_healthcheck(tray)
            assert res.returncode == 0, (tray, res.stdout, res.stderr)
        tags = {t: json.loads(c.node_info(t)["extra"])["imex"]["auth"] for t in trays}
        assert tags["tray01"] == tags["tray02"] != tags["tray03"], tags
        assert all(t.startswith("job:") and len(t) == 20 for t in tags.values()), tags
        job = c.submit(["-N", "3", "-w", ",".join(trays), "--wrap", "true"])
        node = c.wait_node_state("tray03", lambda words: "DRAIN" in words, timeout=60)
        assert node["reason"] == (f"imexctl: prolog-slurmctld/auth: imex.auth {tags['tray03']} "
                                  f"differs from clique {node_clique(c, 'tray03')}'s "
                                  f"{tags['tray01']}"), node
        info = c.wait_job_state(job, "PENDING", timeout=60)
        for tray in trays:
            assert not (c.state_dir / "trays" / tray / "run" / f"job-{job}" /
                        "nvidia-imex.log").exists()
        for tray in ("tray01", "tray02"):
            assert "DRAIN" not in c.node_info(tray)["state"], c.node_info(tray)
        assert "imex.auth differs within clique" in info.get("AdminComment", ""), info
    finally:
        c.cancel_all()
        toml.write_text(base)
        for key in keys.values():
            key.unlink(missing_ok=True)


def node_clique(c, tray):
    ident = json.loads(c.node_info(tray)["extra"])["imex"]
    return f"{ident['cluster_uuid']}.{ident['clique_id']}"
