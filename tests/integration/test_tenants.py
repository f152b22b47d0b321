"""Two tenants on one rack (issue 29, multi-tenant): a job of another user can neither
open this job's channel device nor read its job files, and environment it sets cannot
make the TaskProlog tell its tasks another job's domain."""

from __future__ import annotations

import json

import pytest

from tests.support.harness import job_auth, wait_running_domain

pytestmark = pytest.mark.host_slurm_only(
    "needs a second submitting user, which only the host's passwd has; imexctl's side "
    "(device modes, file modes, the TaskProlog) is the same on every Slurm")

PROBE = r"""
import errno, json, os, sys
out = {}
for name, path in json.loads(sys.argv[1]).items():
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
        out[name] = "opened"
    except OSError as exc:
        out[name] = errno.errorcode.get(exc.errno, str(exc.errno))
out["task_env"] = {k: v for k, v in os.environ.items() if k.startswith("IMEX_")}
print("PROBE " + json.dumps(out, sort_keys=True))
"""


def test_another_tenant_cannot_reach_this_jobs_channel_files_or_task_facts(imex):
    c = imex
    y = c.submit(["-N", "2", "-w", "tray01,tray02", "--wrap", "sleep 40"])
    dom = wait_running_domain(c, y, ["tray01", "tray02"])["tray01"]["domain"]
    channel = c.state_dir / "trays" / "tray01" / "dev" / "nvidia-caps-imex-channels" / \
        f"channel{dom['channel']}"
    jdir = c.state_dir / "trays" / "tray01" / "run" / f"job-{y}"
    targets = {"channel": str(channel), "facts": str(jdir / "imex-job.json"),
               "config": str(jdir / "config.cfg"),
               "record": str(c.state_dir / "trays" / "tray01" / "state" / "domain.json")}
    script = c.state_dir / "jobs" / "probe.py"
    script.write_text(PROBE)
    script.chmod(0o644)
    # The other tenant's job runs on tray03 and names job Y's id where a het task would
    # find its component's facts.
    x = c.submit(["-N", "1", "-w", "tray03", "--export",
                  f"ALL,SLURM_JOB_ID_HET_GROUP_0={y},SLURM_JOB_ID_HET_GROUP_1={y}",
                  "--wrap", f"srun python3 {script} '{json.dumps(targets)}'"], user="daemon")
    assert c.wait_job_state(x, ("COMPLETED", "FAILED"), timeout=90)["JobState"] == "COMPLETED"
    line = next(ln for ln in c.job_output(x).splitlines() if ln.startswith("PROBE "))
    probe = json.loads(line[len("PROBE "):])
    assert probe["channel"] == "EACCES", probe
    assert probe["facts"] == probe["config"] == probe["record"] == "EACCES", probe
    assert probe["task_env"].get("IMEX_DOMAIN_STATE") == "NONE", probe
    assert "IMEX_CHANNEL" not in probe["task_env"], probe
    # job Y's own user may open its channel (mode and owner, not a blanket denial)
    st = channel.stat()
    assert st.st_uid == 65534 and st.st_mode & 0o077 == 0
    c.client(["scancel", str(y)], check=False)
    c.wait_quiet(timeout=60)


JOIN = r"""
import errno, json, os, subprocess, sys
target, port, jdir, python = sys.argv[1:5]
out = {}
for name in ("imex-auth-key.pem", "imex-auth-ca.pem"):     # steal job Y's credentials?
    try:
        os.close(os.open(os.path.join(jdir, name), os.O_RDONLY))
        out[name] = "opened"
    except OSError as exc:
        out[name] = errno.errorcode.get(exc.errno, str(exc.errno))
for kind, extra in (("tls", []), ("plain", ["--plain"])):   # join without them
    res = subprocess.run([python, "-m", "imexctl_sim.probe", "--connect", f"{target}:{port}",
                          "--timeout", "5", *extra], capture_output=True, text=True)
    out[kind] = [res.returncode, res.stdout.strip()]
print("JOIN " + json.dumps(out, sort_keys=True))
"""


def test_with_auth_another_tenant_cannot_join_this_jobs_domain(imex):
    """imex.auth = "job" (issue 29): a job of another user on a tray of the same rack can
    neither read job Y's credentials nor join Y's domain without them."""
    c = imex
    with job_auth(c):
        y = c.submit(["-N", "2", "-w", "tray01,tray02", "--wrap", "sleep 40"])
        dom = wait_running_domain(c, y, ["tray01", "tray02"])["tray01"]["domain"]
        jdir = c.state_dir / "trays" / "tray01" / "run" / f"job-{y}"
        script = c.state_dir / "jobs" / "join.py"
        script.write_text(JOIN)
        script.chmod(0o644)
        python = c.sim_ctl.parent / "python"     # the simulator's probe, readable by all
        x = c.submit(["-N", "1", "-w", "tray03", "--wrap",
                      f"srun {python} {script} {c.tray_addrs()['tray01']} {dom['server_port']} "
                      f"{jdir} {python}"], user="daemon")
        assert c.wait_job_state(x, ("COMPLETED", "FAILED"), timeout=90)["JobState"] == "COMPLETED"
        line = next(ln for ln in c.job_output(x).splitlines() if ln.startswith("JOIN "))
        got = json.loads(line[len("JOIN "):])
        assert got["imex-auth-key.pem"] == got["imex-auth-ca.pem"] == "EACCES", got
        assert got["tls"][0] == 1 and got["tls"][1].startswith("refused: TLS: "), got
        assert got["plain"][0] == 1 and got["plain"][1].startswith("refused: "), got
        log = (jdir / "nvidia-imex.log").read_text()
        assert f"Refusing connection from {c.tray_addrs()['tray03']}: TLS authentication " \
               "failed" in log
        assert c.imexctl_status("tray01")["domain"]["domain_state"] == "UP"
        c.client(["scancel", str(y)], check=False)
        c.wait_quiet(timeout=60)


PLANT = r"""
import errno, json, os, sys, tempfile
if sys.argv[1] == "prepare":    # a config and facts of this job's own making, in /tmp
    d = tempfile.mkdtemp(prefix="tenant-", dir="/tmp")
    job = int(os.environ["SLURM_JOB_ID"])
    os.makedirs(f"{d}/run/job-{job}")
    os.makedirs(f"{d}/state")
    with open(f"{d}/run/job-{job}/imex-job.json", "w") as f:
        json.dump({"format": 1, "job_id": job, "state": "UP", "channel": 7,
                   "channel_device": "/dev/forged/channel7", "members": ["forged"],
                   "clique": "forged.1"}, f)
    with open(f"{d}/imexctl.toml", "w") as f:
        f.write(f'[paths]\nrun_dir = "{d}/run"\nstate_dir = "{d}/state"\n')
    print(f"{d}/imexctl.toml")
    sys.exit(0)
out = {}
for name, path in json.loads(sys.argv[2]).items():     # plant where the root hooks look
    for kind in ("link", "fifo"):
        try:
            os.symlink("/etc/shadow", path) if kind == "link" else os.mkfifo(path)
            out[f"{name} {kind}"] = "planted"
            os.unlink(path)
        except OSError as exc:
            out[f"{name} {kind}"] = errno.errorcode.get(exc.errno, str(exc.errno))
out["task_env"] = {k: v for k, v in os.environ.items() if k.startswith("IMEX")}
print("PLANT " + json.dumps(out, sort_keys=True))
"""


def test_another_tenant_can_plant_nothing_for_the_hooks_nor_choose_task_prolog_lines(imex):
    """Issue 29: a job of another user can create no link or FIFO where a root hook reads or
    writes (the next job's directory, the ownership record, a channel device, the log),
    and a config and facts of its own making, named in its tasks' $IMEXCTL_CONFIG, do not
    reach the lines the TaskProlog prints. The next job on that tray runs clean."""
    c = imex
    base = c.state_dir / "trays" / "tray01"
    probe = c.submit(["-H", "--wrap", "true"])          # the ids the next submissions get
    c.client(["scancel", str(probe)])
    x_id, y_id = probe + 1, probe + 2
    targets = {"next job dir": str(base / "run" / f"job-{y_id}"),
               "ownership record": str(base / "state" / "domain.json"),
               "channel": str(base / "dev" / "nvidia-caps-imex-channels" / "channel99"),
               "log": str(base / "log" / "imexctl-planted.log")}
    script = c.state_dir / "jobs" / "plant.py"
    script.write_text(PLANT)
    script.chmod(0o644)
    x = c.submit(["-N", "1", "-w", "tray01", "--wrap",
                  f"cfg=$(python3 {script} prepare) && IMEXCTL_CONFIG=$cfg "
                  f"srun python3 {script} probe '{json.dumps(targets)}'"], user="daemon")
    assert x == x_id
    assert c.wait_job_state(x, ("COMPLETED", "FAILED"), timeout=90)["JobState"] == "COMPLETED"
    line = next(ln for ln in c.job_output(x).splitlines() if ln.startswith("PLANT "))
    got = json.loads(line[len("PLANT "):])
    env = got.pop("task_env")
    assert set(got.values()) == {"EACCES"}, got
    assert env.get("IMEXCTL_CONFIG", "").startswith("/tmp/tenant-"), env     # it was named
    assert env.get("IMEX_DOMAIN_STATE") == "NONE" and "IMEX_CHANNEL" not in env, env
    # the next job on that tray: what the hooks made is theirs, nothing drained
    y = c.submit(["-N", "2", "-w", "tray01,tray02", "--wrap", "sleep 3"])
    assert y == y_id
    wait_running_domain(c, y, ["tray01", "tray02"])
    jdir = base / "run" / f"job-{y}"
    assert jdir.is_dir() and not jdir.is_symlink() and jdir.stat().st_uid == 0
    assert c.wait_job_state(y, ("COMPLETED", "FAILED", "CANCELLED"),
                            timeout=60)["JobState"] == "COMPLETED"
    c.wait_quiet(timeout=60)
    assert not any("DRAIN" in c.node_info(t)["state"] for t in ("tray01", "tray02"))
