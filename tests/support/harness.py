"""Helpers for tests against the Slurm harness (tests/cluster): whether it can run here,
what a tray holds (channels, simulated daemons, listening ports), that nothing of a job is
left, a job's domain up on its trays, the seal the trays open decisions with, and the trays'
config with imex.auth = "job"."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time

import psutil
import pytest

from imexctl.config import Imex
from tests.cluster import procs


def harness_unavailable() -> str | None:
    """Why the harness cannot run here, or None when it can."""
    if os.geteuid() != 0:
        return "integration harness needs root (network namespaces, bind mounts, runuser)"
    for tool in ("unshare", "nsenter", "ip", "runuser"):
        if not shutil.which(tool, path="/usr/sbin:/usr/bin:/sbin:/bin"):
            return f"integration harness needs {tool!r}"
    probe = subprocess.run(["unshare", "--net", "--uts", "--mount", "--", "true"], capture_output=True, text=True)
    if probe.returncode:
        return f"network/mount namespaces unavailable: {probe.stderr.strip()}"
    return None


def skip_or_fail(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but the integration harness cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


def harness_seal(c):
    """The seal a tray of cluster ``c`` opens decisions with: the host's unmunge on the
    harness's munged (the roots' daemons use the same socket and key), trusting root
    and SlurmUser as the hooks do."""
    import pwd

    from imexctl.slurm.munge import MungeSeal

    return MungeSeal("/usr/bin", str(c.state_dir / "munge" / "munge.socket"),
                     frozenset({0, pwd.getpwnam("slurm").pw_uid}))


def channels(c, tray) -> dict[str, os.stat_result]:
    d = c.state_dir / "trays" / tray / "dev" / "nvidia-caps-imex-channels"
    return {name: os.lstat(d / name) for name in os.listdir(d)}


def sim_daemons(c, tray) -> list[int]:
    ino = c._netns_of(tray)
    return [p for p in procs.pids_in_netns(ino)
            if any("imexctl-sim-imex" in a and "ctl" not in a for a in procs.cmdline(p))]


def listening_ports(c, tray) -> set[int]:
    out = c.exec_on(tray, ["ss", "-Htln"]).stdout
    return {int(line.split()[3].rsplit(":", 1)[1]) for line in out.splitlines() if line.strip()}


# Problems status reports that are the fault under test, not something a job left behind.
NOT_LEAKS = ("drained by imexctl:", "fabric unfit:")


def assert_clean(c, trays):
    """Nothing of any job is left on the trays: record, daemon, port, channel, job dir."""
    for tray in trays:
        st = c.imexctl_status(tray)
        assert st["state"] == "idle" and st["domain"] is None, (tray, st)
        # a drain, and the unfit fabric that caused it, are the outcome under test, not
        # leftovers (status reports both as problems)
        left = [p for p in st["problems"] if not p.startswith(NOT_LEAKS)]
        assert left == [], (tray, st["problems"])
        assert channels(c, tray) == {}, tray
        assert sim_daemons(c, tray) == [], tray
        run = c.state_dir / "trays" / tray / "run"
        assert [p for p in os.listdir(run) if p.startswith("job-")] == [], tray
        imex = Imex()
        assert not {p for p in listening_ports(c, tray)
                    if imex.server_port_base <= p < imex.server_port_base + imex.port_span
                    or imex.cmd_port_base <= p < imex.cmd_port_base + imex.port_span}, tray


def wait_running_domain(c, job, trays, timeout=60):
    c.wait_job_state(job, "RUNNING", timeout=timeout)
    deadline = time.monotonic() + 20
    while True:
        sts = {t: c.imexctl_status(t) for t in trays}
        if all((s.get("domain") or {}).get("job_id") == job
               and s["domain"].get("phase") == "ready" for s in sts.values()):
            return sts
        assert time.monotonic() < deadline, sts
        time.sleep(0.2)


def age_reconciliation(c, seconds=3600) -> None:
    """Move the table's last reconciliation ``seconds`` back (the file stays SlurmUser's)."""
    path = c.state_dir / "trays" / c.ctl_name / "state" / "slurmctld" / "channels.json"
    raw = json.loads(path.read_text())
    path.write_text(json.dumps({**raw, "reconciled_at": raw["reconciled_at"] - seconds}))


# The cluster name the auth = "job" credentials are derived for: 46 characters, an ordinary
# production name, which drained every tray before the job CA's name was bounded (N9).
AUTH_CLUSTER = "gb200-production-east-cluster-01-hall-b-row-07"


@contextlib.contextmanager
def job_auth(c):
    """The trays' imexctl.toml with ``auth = "job"``, a fresh site secret (root's, 0600) and
    AUTH_CLUSTER; the harness's own file is put back afterwards. Yields the secret's path."""
    secret = c.state_dir / "etc" / "imex-auth.key"
    secret.write_bytes(os.urandom(64))
    secret.chmod(0o600)
    toml = c.state_dir / "etc" / "imexctl.toml"
    base = toml.read_text()
    assert "\n[imex]\n" in base
    toml.write_text(base.replace("\n[imex]\n", f'\n[imex]\nauth = "job"\nauth_secret_file = '
                                 f'"{secret}"\nauth_cluster = "{AUTH_CLUSTER}"\n', 1))
    try:
        yield secret
    finally:
        toml.write_text(base)
        secret.unlink()


def release_file(c, name):
    """A file that ends a job waiting for it: (its path, the job's shell loop). The job
    lives exactly as long as the test needs it, instead of a sleep that may race it."""
    path = c.state_dir / "jobs" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    return path, f"while [ ! -e {path} ]; do sleep 0.2; done"


def wait_up(c, job, trays, timeout=20):
    """Every tray's status: its domain is ``job``'s and UP (nvidia-imex-ctl -N on it)."""
    deadline = time.monotonic() + timeout
    while True:
        sts = {t: c.imexctl_status(t) for t in trays}
        if all(s["domain"].get("job_id") == job and s["domain"].get("domain_state") == "UP"
               for s in sts.values()):
            return sts
        assert time.monotonic() < deadline, sts
        time.sleep(0.3)


def persistent_toml(c) -> str:
    base = (c.state_dir / "etc" / "imexctl.toml").read_text()
    assert "\n[imex]\n" in base
    return base.replace("\n[imex]\n", '\n[imex]\nlifetime = "persistent"\n', 1)


def daemons_of(tray_dir) -> list[int]:
    """The simulated nvidia-imex processes running a config under ``tray_dir``."""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        argv = p.info["cmdline"] or []
        if argv and any(a.endswith("imexctl-sim-imex") for a in argv[:2]) and \
                any(a.startswith(str(tray_dir)) for a in argv):
            out.append(p.pid)
    return sorted(out)


def drop_persistent(c, tray) -> None:
    """Take ``tray``'s persistent domain away as a reboot would (the simulated daemons
    killed, their ``persist.dat``, the record and ``<run_dir>/persistent`` removed)."""
    d = c.state_dir / "trays" / tray
    for pid in daemons_of(d):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)
    (d / "state" / "persistent.json").unlink(missing_ok=True)
    (d / "sim-run" / "persist.dat").unlink(missing_ok=True)
    shutil.rmtree(d / "run" / "persistent", ignore_errors=True)


class PersistentClique:
    """Trays of the harness running the clique's persistent IMEX domain (issue 37), seen as
    an admin sees it: the record, the daemons, ``nvidia-imex-ctl -N`` and health."""

    def __init__(self, c, trays):
        self.c, self.trays = c, list(trays)
        self.dirs = {t: c.state_dir / "trays" / t for t in c.trays}

    def record(self, tray: str) -> dict:
        return json.loads((self.dirs[tray] / "state" / "persistent.json").read_text())

    def pids(self) -> dict[str, list[int]]:
        return {t: daemons_of(self.dirs[t]) for t in self.trays}

    def view(self, tray: str | None = None) -> dict:
        config = str(self.dirs[tray or self.trays[0]] / "run" / "persistent" / "config.cfg")
        res = self.c.exec_on(tray or self.trays[0], [str(self.c.sim_ctl), "-c", config, "-N",
                                                     "-j"])
        return json.loads(res.stdout) if res.returncode == 0 else {"status": res.stderr}

    def wait_up(self, tray: str | None = None, timeout: float = 60.0) -> float:
        """Seconds until ``-N`` on ``tray`` (the first) says UP (asked every 0.2 s)."""
        start = time.monotonic()
        view: dict = {}
        while time.monotonic() - start < timeout:
            view = self.view(tray)
            if view.get("status") == "UP":
                return time.monotonic() - start
            time.sleep(0.2)
        raise AssertionError(f"persistent domain not UP after {timeout:g}s: {view}")

    def health(self, tray: str) -> str:
        """HealthCheckProgram as slurmd runs it; no problem of the persistent check (other
        checks may see a shared machine's look-alike daemons: not these tests')."""
        res = self.c.run_healthcheck(tray)
        assert "health/persistent" not in res.stdout + res.stderr, (tray, res.stdout,
                                                                    res.stderr)
        assert "Traceback" not in res.stderr, res.stderr
        return res.stdout


@contextlib.contextmanager
def persistent_clique(c, trays, *, toml_extra: str = ""):
    """``trays`` run their clique's persistent domain, UP: the cluster's imexctl.toml gets
    ``lifetime = "persistent"`` (plus ``toml_extra``), each tray publishes its identity and
    runs recover as the boot unit does, then health as slurmd does (its nudge brings the
    domain UP in a second instead of IMEX's 15 s back-off). On exit: jobs cancelled, every
    tray's persistent domain dropped, the config and identities back to the cluster's."""
    toml = c.state_dir / "etc" / "imexctl.toml"
    base = toml.read_text()
    q = PersistentClique(c, trays)
    try:
        toml.write_text(persistent_toml(c) + toml_extra)
        for tray in c.trays:
            c.clear_faults(tray)
            c.set_fabric(tray)
            (q.dirs[tray] / "sim-run" / "persist.dat").unlink(missing_ok=True)
        for tray in q.trays:
            assert "imex.lifetime persistent" in c.imexctl(tray, "identity", "publish")
        for tray in q.trays:
            assert "started the persistent IMEX domain" in c.imexctl(tray, "recover")
        recovered = time.monotonic()
        for tray in q.trays:
            q.health(tray)
        q.wait_up()
        print(f"persistent domain UP {time.monotonic() - recovered:.1f}s after the last "
              "recover (health run on each tray)")
        yield q
    finally:
        c.cancel_all()
        try:
            c.wait_quiet(timeout=90)
        finally:
            toml.write_text(base)
            for tray in c.trays:
                # a job tray again: recover removes its persistent domain, rewrites its
                # expected state and republishes its identity (the cluster's lifetime)
                c.imexctl(tray, "recover")
                drop_persistent(c, tray)
            c.resume_all()
