"""imex.auth = "job" on the harness (issue 29): a job's daemons authenticate each other with
per-job credentials every tray derives from the site secret. The job comes UP and
completes; a forged peer (another job's credentials, none, an expired certificate, no TLS
at all) is refused by the simulated daemon, which names it in its log. The simulator's
TLS is docs/simulator.md's; what it assumes of NVIDIA's daemon is said there."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.support.harness import job_auth, wait_running_domain, wait_up


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
        creds = auth.issue_job_credentials(d, secret, cluster="harness", job_id=job + 7919,
                                           restart=0, group=group, node="forger",
                                           end_time=None, lifetime_h=1)
    else:   # expired, signed by the job's own CA key (a stolen old certificate)
        creds = auth.issue_job_credentials(d, secret, cluster="harness", job_id=job, restart=0,
                                           group=group, node="forger", end_time=None,
                                           lifetime_h=0.5, now=time.time() - 6 * 3600)
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
        job = c.submit(["-N", "4", "-w", ",".join(trays), "--wrap", "sleep 12"])
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
        # forged peers knock on tray01's server port from tray04 (a member's address)
        group = sts["tray01"]["decision"]["clique"]
        results = {kind: probe(c, "tray04", "tray01", dom["server_port"],
                               forge(c, secret, group, job, kind))
                   for kind in ("other-job", "expired", "none")}
        results["plain"] = probe(c, "tray04", "tray01", dom["server_port"], None)
        for kind, res in results.items():
            want = "refused: closed" if kind == "plain" else "refused: TLS: "
            assert res.returncode == 1 and res.stdout.startswith(want), (kind, res)
        log = (jdir / "nvidia-imex.log").read_text()
        refusals = [l for l in log.splitlines()
                    if f"Refusing connection from {c.tray_addrs()['tray04']}: TLS authentication "
                       "failed" in l]
        # each named with its address and why: another CA, expired, no certificate, no TLS
        for why in ("certificate verify failed: unable to get local issuer certificate",
                    "certificate verify failed: certificate has expired",
                    "the peer presented no certificate", "not a TLS handshake"):
            assert any(why in line for line in refusals), (why, refusals)
        # the domain stayed UP among its members, and the job completes
        assert all(s["domain"]["domain_state"] == "UP"
                   for s in (c.imexctl_status(t) for t in trays))
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
