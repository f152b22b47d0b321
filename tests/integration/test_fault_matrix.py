"""The fault matrix (issue 12): each row injects one fault on the real Slurm harness, runs a
job, and asserts the job's state, every tray's state and drain reason, and that nothing of
any job leaked (process, port, channel, job dir, record). Each measured outcome is also
written to $STATE/fault-matrix.json; `scripts/fault-table` renders it into
docs/operations.md. Jobs run as `nobody`; every wait polls."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable

import pytest

from imexctl.rules.groups import channel_for_job
from imexctl.config import Imex
from imexctl.imex.render import job_ports
from tests.cluster import procs
from tests.cluster.imexctl_config import PROC_DEVICES, atomic_write, default_gpus
from tests.support.harness import NOT_LEAKS, daemons_of, drop_persistent, persistent_clique

pytestmark = pytest.mark.integration

NOBODY = 65534
TERMINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "BOOT_FAIL", "OUT_OF_MEMORY")
RESULTS = "fault-matrix.json"
# The harness waits 15 s for a domain; a row whose fault stops one tray keeps its healthy
# peer waiting that long before it refuses. 8 s is still ~10x a 2-tray domain's time to UP
# on the harness and saves about a minute per Slurm version in CI.
READY_TIMEOUT_S = 8


@pytest.fixture(scope="module", autouse=True)
def short_ready_wait(cluster):
    """imex.ready_timeout_s = READY_TIMEOUT_S on every tray for this module (hooks read
    imexctl.toml at every run); the harness's own file is put back afterwards."""
    path = cluster.state_dir / "etc" / "imexctl.toml"
    orig = path.read_text()
    path.write_text(re.sub(r"^ready_timeout_s = .*$", f"ready_timeout_s = {READY_TIMEOUT_S}",
                           orig, flags=re.M))
    yield
    path.write_text(orig)


# ---- observation ---------------------------------------------------------------------------

def tray_path(c, tray, *parts):
    return c.state_dir.joinpath("trays", tray, *parts)


def sim_daemons(c, tray) -> list[int]:
    return [p for p in procs.pids_in_netns(c._netns_of(tray))
            if any("imexctl-sim-imex" in a and "ctl" not in a for a in procs.cmdline(p))]


def leaks(c) -> list[str]:
    """Everything a finished job left on any tray, as 'tray: what' lines (empty = clean)."""
    imex, out = Imex(), []
    for tray in c.trays:
        st = c.imexctl_status(tray)
        if st["state"] != "idle" or st["domain"] is not None:
            out.append(f"{tray}: record ({st['state']})")
        out += [f"{tray}: {p}" for p in st["problems"] if not p.startswith(NOT_LEAKS)]
        out += [f"{tray}: channel {n}" for n in os.listdir(tray_path(c, tray, "dev", "nvidia-caps-imex-channels"))]
        out += [f"{tray}: daemon pid {p}" for p in sim_daemons(c, tray)]
        out += [f"{tray}: job dir {n}" for n in os.listdir(tray_path(c, tray, "run")) if n.startswith("job-")]
        ss = c.exec_on(tray, ["ss", "-Htln"]).stdout
        for line in ss.splitlines():
            port = int(line.split()[3].rsplit(":", 1)[1])
            if (imex.server_port_base <= port < imex.server_port_base + imex.port_span
                    or imex.cmd_port_base <= port < imex.cmd_port_base + imex.port_span):
                out.append(f"{tray}: port {port}")
    return out


def drains(c) -> dict[str, str]:
    out = {}
    for tray in c.trays:
        info = c.node_info(tray)
        if "DRAIN" in info["state"]:
            out[tray] = info.get("reason", "")
    return out


def job_state(c, job) -> str:
    info = c.job_info(job)
    st = info["JobState"]
    if st == "PENDING" and info.get("Reason") not in (None, "None", "Priority", "Resources"):
        st += f" ({info['Reason']})"
    return st


def settle(c, job, timeout=90.0) -> None:
    """Until the job ended, or a tray drained and the job went back to pending."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = c.job_info(job)
        if info["JobState"] in TERMINAL:
            return
        if drains(c) and info["JobState"] == "PENDING":
            return
        time.sleep(0.25)
    raise AssertionError(f"job {job} neither ended nor was requeued after a drain: {c.job_info(job)}")


def record(c, row: dict) -> None:
    """Append one measured row to $STATE/fault-matrix.json (rows keyed by id)."""
    path = c.state_dir / RESULTS
    rows = json.loads(path.read_text()) if path.exists() else {}
    rows[row["row"]] = row
    atomic_write(path, json.dumps(rows, indent=1, sort_keys=True) + "\n")


# ---- the rows ------------------------------------------------------------------------------

@dataclass
class Row:
    title: str
    args: list[str]                          # sbatch arguments
    job: str | tuple[str, ...]               # expected job state (prefix, or any of several)
    drained: dict[str, str] = field(default_factory=dict)   # tray -> reason prefix
    before: Callable | None = None           # (c, job) with the job held
    during: Callable | None = None           # (c, job) once released
    after: Callable | None = None            # (c, ctx) cleanup, always runs
    check: Callable | None = None            # (c, job) more assertions once all is measured
    xfail: str | None = None
    host_slurm_only: str = ""                # why it runs on the host Slurm only (conftest)


def fault(tray, spec):
    return lambda c, job: c.inject_fault(tray, spec)


def wait_ready(c, job, trays, timeout=60.0):
    c.wait_job_state(job, "RUNNING", timeout=timeout)
    deadline = time.monotonic() + 20
    while not all((c.imexctl_status(t).get("domain") or {}).get("phase") == "ready" for t in trays):
        assert time.monotonic() < deadline, "domain never ready"
        time.sleep(0.2)


def crash_daemon(c, job):
    wait_ready(c, job, ["tray03", "tray04"])
    for pid in sim_daemons(c, "tray04"):
        os.kill(pid, signal.SIGKILL)


def hold_port(c, job):
    """An unrelated process LISTENs on the job's IMEX server port on tray01."""
    ports = job_ports(job, Imex().server_port_base, Imex().cmd_port_base, Imex().port_span)
    addr = c.tray_addrs()["tray01"]
    code = (f"import socket,time;s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);"
            f"s.bind(('{addr}',{ports.server}));s.listen();time.sleep(600)")
    p = subprocess.Popen(["nsenter", "-t", str(c.tray_pid("tray01")), "-n", "-m", "--",
                          "python3", "-c", code], start_new_session=True)
    time.sleep(0.5)
    return p


def reuse_pid(c, job):
    victim = subprocess.Popen(["nsenter", "-t", str(c.tray_pid("tray01")), "-n", "-m", "--",
                               "sleep", "600"], start_new_session=True)
    time.sleep(0.3)
    rec = {"job_id": 999001, "uid": NOBODY, "user": "nobody", "nodes": ["tray01"],
           "addresses": [c.tray_addrs()["tray01"]], "node_id": 0, "digest": "stale",
           "server_port": 40000, "cmd_port": 50000, "channel": None, "channel_rule": "job-id",
           "job_dir": str(tray_path(c, "tray01", "run", "job-999001")), "phase": "ready",
           "daemon": {"pid": victim.pid, "create_time": 1.0, "exe": "/usr/bin/sleep", "launcher": "direct"}}
    atomic_write(tray_path(c, "tray01", "state", "domain.json"), json.dumps(rec))
    return victim


def stop_victim(c, p):
    alive = p.poll() is None
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert alive, "the unrelated process was signalled"


def stale_channel(c, job):
    """channel<N> of an earlier job (another user) where this job's channel will go."""
    n = channel_for_job(job).number
    os.mknod(tray_path(c, "tray01", "dev", "nvidia-caps-imex-channels", f"channel{n}"),
             0o600 | stat.S_IFCHR, os.makedev(234, n))
    os.chown(tray_path(c, "tray01", "dev", "nvidia-caps-imex-channels", f"channel{n}"), 4242, 4242)


def no_imex_major(c, job):
    atomic_write(tray_path(c, "tray02", "proc-devices"), PROC_DEVICES.replace("234 nvidia-caps-imex-channels\n", ""))


def restore_major(c, _):
    atomic_write(tray_path(c, "tray02", "proc-devices"), PROC_DEVICES)


def state_full(c, job):
    """The state dir is a 64 KiB tmpfs (in tray02's mount namespace), filled up."""
    d = str(tray_path(c, "tray02", "state"))
    c.exec_on("tray02", ["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", d], check=True)
    c.exec_on("tray02", ["dd", "if=/dev/zero", f"of={d}/filler", "bs=4k", "count=64"])


def unmount_state(c, _):
    c.exec_on("tray02", ["umount", str(tray_path(c, "tray02", "state"))])


def corrupt_record(c, job):
    atomic_write(tray_path(c, "tray01", "state", "domain.json"), '{"job_id": 12, "phase": ')


def remove_record(c, _):
    """The admin's repair: the corrupt record is kept for inspection, never guessed at."""
    tray_path(c, "tray01", "state", "domain.json").unlink()


def second_prolog(c, job):
    """While the job runs on tray01-02, slurmd runs a prolog of another job on tray01."""
    wait_ready(c, job, ["tray01", "tray02"])
    other = job + 100000
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "SLURMD_NODENAME": "tray01",
           "SLURM_JOB_ID": str(other), "SLURM_JOB_UID": str(NOBODY), "SLURM_JOB_USER": "nobody",
           "SLURM_NODELIST": "tray[01-02]", "SLURM_JOB_NODELIST": "tray[01-02]",
           "SLURM_SCRIPT_CONTEXT": "prolog_slurmd", "SLURM_CONF": str(c.conf_path)}
    res = c.exec_on("tray01", [str(c.imexctl_bin), "prolog"], env=env, timeout=60)
    assert res.returncode != 0, res
    st = c.imexctl_status("tray01")
    assert st["domain"]["job_id"] == job and st["domain"]["phase"] == "ready", st
    return res


# ---- Slurm itself misbehaving -----------------------------------------------------------
PROLOG_TIMEOUT_S = 5      # Slurm kills the prolog well inside its ready wait (READY_TIMEOUT_S)
SLURM_TIMEOUT_S, SLURM_ATTEMPTS = 2, 2   # the prolog's bound on slurmctld: 2 x 2 s + back-off


def last_outcome(c, tray) -> dict:
    path = tray_path(c, tray, "state", "last-outcome.json")
    return json.loads(path.read_text()) if path.exists() else {}


def set_slurm_conf(c, **keys) -> None:
    """Rewrite keys of the cluster's slurm.conf and make every daemon re-read it."""
    text = c.conf_path.read_text()
    for key, value in keys.items():
        text = re.sub(rf"^{key}=.*$", f"{key}={value}", text, flags=re.M)
    c.conf_path.write_text(text)
    c.scontrol("reconfigure")
    for tray in c.trays:  # 24.05+: slurmctld and the slurmds re-exec; drained trays stay so
        c.wait_node_state(tray, lambda toks: not toks & {"DOWN", "NOT_RESPONDING", "UNKNOWN"})


def short_prolog_timeout(c, job):
    """Slurm kills the prolog after PROLOG_TIMEOUT_S while tray03 waits for a daemon that
    never becomes READY (imex.ready_timeout_s set above Slurm's limit: the misconfiguration
    `imexctl doctor` fails)."""
    set_slurm_conf(c, PrologEpilogTimeout=PROLOG_TIMEOUT_S)
    c.inject_fault("tray03", {"never_ready": True})


def restore_prolog_timeout(c, _):
    set_slurm_conf(c, PrologEpilogTimeout=c.prolog_epilog_timeout)


def killed_prolog_cleaned_by_epilog(c, job):
    """The prolog never reported (killed); the epilog of the same job did, and cleanly."""
    for tray in ("tray03", "tray04"):
        out = last_outcome(c, tray)
        assert (out.get("job_id"), out.get("hook"), out.get("result")) == (job, "epilog", "ok"), out


def prolog_pids(c, tray) -> list[int]:
    """`imexctl prolog` running on a tray (once the hook's shell has exec'd it; the shell's
    own forks carry the same argv and must not be caught)."""
    return [p for p in procs.pids_in_netns(c._netns_of(tray))
            if "prolog" in (argv := procs.cmdline(p)) and any(a.endswith("/imexctl") for a in argv)]


def imexctl_toml_with_slurm_bound(c):
    """Shorter [slurm] bounds for every tray (the file is read by each hook run)."""
    path = c.state_dir / "etc" / "imexctl.toml"
    orig = path.read_text()
    keys = f"timeout_s = {SLURM_TIMEOUT_S}\nattempts = {SLURM_ATTEMPTS}\n"
    path.write_text(orig.replace("[slurm]\n", f"[slurm]\n{keys}") if "[slurm]\n" in orig
                    else f"{orig}\n[slurm]\n{keys}")
    return orig


# ---- a terminate request resent without a node list --------------------------------------
# slurmctld's re_kill_job() resends REQUEST_TERMINATE_JOB to trays that have not finished
# a job's epilog without filling the message's node list (every Slurm from 22.05 to 26.05),
# and slurmd hands the Epilog neither SLURM_NODELIST nor SLURM_JOB_NODELIST. It runs the
# Epilog when that resend is the first terminate request a tray gets: the tray missed the
# first one (NOT_RESPONDING) and came back before SlurmdTimeout. Seen on a 72-tray run.
RESEND_SLURMD_TIMEOUT_S = 120  # the outage must end before the tray goes DOWN (no epilog)


def long_slurmd_timeout(c, job):
    set_slurm_conf(c, SlurmdTimeout=RESEND_SLURMD_TIMEOUT_S)


def restore_slurmd_timeout(c, _):
    c.set_tray_link("tray02", up=True)
    set_slurm_conf(c, SlurmdTimeout=c.slurmd_timeout)


def terminate_missed(c, job):
    """Cancel the job while tray02 is cut off; reconnect it once slurmctld marked it
    NOT_RESPONDING; wait for its epilog, run by the resent request."""
    wait_ready(c, job, ["tray01", "tray02"])
    t0 = time.monotonic()
    c.set_tray_link("tray02", up=False)
    try:
        c.client(["scancel", str(job)])
        c.wait_node_state("tray02", lambda toks: "NOT_RESPONDING" in toks, timeout=90)
    finally:
        c.set_tray_link("tray02", up=True)
    cut = time.monotonic() - t0
    deadline = time.monotonic() + 240   # the resend comes with slurmctld's 60 s purge pass
    while ((out := last_outcome(c, "tray02")).get("job_id"), out.get("hook")) != (job, "epilog"):
        assert time.monotonic() < deadline, f"no epilog on tray02: {out}"
        time.sleep(1)
    return {"tray02 cut off (s)": round(cut, 1),
            "its epilog after (s)": round(time.monotonic() - t0 - cut, 1)}


def epilog_without_node_list_cleaned(c, job):
    """tray02's epilog had no node list (Slurm's resend fills none), logged so, and
    cleaned by job id; tray01's had the list as always."""
    for tray in ("tray01", "tray02"):
        out = last_outcome(c, tray)
        assert (out.get("job_id"), out.get("hook"), out.get("result")) == (job, "epilog", "ok"), (tray, out)
    def events(tray):
        path = c.state_dir / "trays" / tray / "log" / "imexctl.log"
        return [e for e in map(json.loads, path.read_text().splitlines())
                if e.get("job_id") == job and e.get("hook") == "epilog"]
    started = {tray: next(e for e in events(tray) if e["event"] == "epilog started") for tray in ("tray01", "tray02")}
    assert started["tray02"].get("nodelist") == "", started
    assert started["tray01"].get("nodelist") == "tray[01-02]", started
    assert any(e["event"].startswith("Slurm gave no node list") for e in events("tray02"))
    assert any(e["event"] == "daemon stop" for e in events("tray02"))


def ctld_pid(c) -> int:
    pid = procs.read_pidfile(c.state_dir / "run" / "slurmctld.pid")
    assert pid, "no slurmctld pid"
    return pid


def freeze_ctld_under_prologs(c, job):
    """Catch both trays' `imexctl prolog` as they start (stopped before their first Slurm
    call), freeze slurmctld (SIGSTOP: its port accepts, nothing answers), let the prologs
    run their job-record query against it, thaw slurmctld when both have exited."""
    trays, caught, argv = ("tray01", "tray02"), {}, {}
    ctld, t0 = ctld_pid(c), time.monotonic()
    try:
        while len(caught) < len(trays) and time.monotonic() < t0 + (30 if not caught else 5):
            for tray in set(trays) - set(caught):
                for pid in prolog_pids(c, tray):
                    os.kill(pid, signal.SIGSTOP)
                    caught.setdefault(tray, []).append(pid)
                    argv[pid] = " ".join(procs.cmdline(pid))
            time.sleep(0.002)
        assert caught, "no node prolog started"
        os.kill(ctld, signal.SIGSTOP)
    finally:
        pids = [pid for found in caught.values() for pid in found]
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    started = time.monotonic()
    try:
        bound = SLURM_ATTEMPTS * (SLURM_TIMEOUT_S + 2) + 10   # + back-off, start-up, the drain try
        assert procs.wait_gone(pids, bound), f"a prolog hung past its Slurm bound: {argv}"
        took = time.monotonic() - started
    finally:
        os.kill(ctld, signal.SIGCONT)
    for tray in caught:
        out = last_outcome(c, tray)
        assert (out.get("job_id"), out.get("hook"), out.get("result"), out.get("step")) == (
            job, "prolog", "slurm-error", "context"), (tray, out, argv)
        assert "internal error" not in out.get("reason", ""), out
    return {"prologs caught": ",".join(sorted(caught)), "prolog exit after (s)": round(took, 1)}


def thaw_ctld(c, ctx):
    """Whatever happened: slurmctld runs and the trays' imexctl.toml is the harness's."""
    os.kill(ctld_pid(c), signal.SIGCONT)
    if ctx and ctx.get("toml"):
        (c.state_dir / "etc" / "imexctl.toml").write_text(ctx["toml"])


def slurm_bound(c, job):
    return {"toml": imexctl_toml_with_slurm_bound(c)}


def refusal_names(tray):
    def check(c, job):
        comment = c.job_info(job).get("AdminComment", "")
        assert comment.startswith("imexctl: IMEX domain DEGRADED after") and f"{tray} UNAVAILABLE" in comment, comment
        assert not (c.state_dir / "jobs" / f"{job}.out").exists(), "the job ran on a DEGRADED domain"
    return check


def refusal_names_ctl_timeout(c, job):
    """tray04 refuses naming its ctl's timeout and the READY -q answer; or tray03, whose
    view is not UP either (tray04's links), refuses first: a race of two job faults, and
    either way nothing is drained (the row's drained set) and the job never runs."""
    comment = c.job_info(job).get("AdminComment", "")
    by_hung_tray = comment.startswith("imexctl: IMEX domain UNKNOWN after") and (
        "nvidia-imex-ctl -N -j timed out" in comment and "-q answered READY" in comment)
    by_peer = comment.startswith("imexctl: IMEX domain ") and "tray04" in comment
    assert by_hung_tray or by_peer, comment
    assert not (c.state_dir / "jobs" / f"{job}.out").exists(), "the job ran without an UP domain"


def refusal_shows_map_mismatch(c, job):
    """The tray that refuses first names what its view shows: the !M! links, or (its ctl
    cannot reach a peer that disabled communication) that peer UNAVAILABLE."""
    comment = c.job_info(job).get("AdminComment", "")
    assert comment.startswith("imexctl: IMEX domain ") and (
        "NODE_MAP_MISMATCH" in comment or re.search(r"tray0[12] UNAVAILABLE", comment)), comment
    assert not (c.state_dir / "jobs" / f"{job}.out").exists(), "the job ran without an UP domain"


def job_ran(c, job):
    assert (c.state_dir / "jobs" / f"{job}.out").read_text().strip() == "ran"


ROWS = {
    "fail-start": Row("daemon fails to start", ["-N", "2", "-w", "tray01,tray02", "--wrap", "echo ran"],
                      "PENDING", {"tray02": "imexctl: prolog/"},
                      before=fault("tray02", {"fail_start": "simulated start failure"})),
    # the READY peer's job-fault cancel races the drained tray's requeue: either way it never ran
    "never-ready": Row("daemon never READY", ["-N", "2", "-w", "tray03,tray04", "--wrap", "echo ran"],
                       ("PENDING", "CANCELLED"), {"tray03": "imexctl: prolog/wait-ready:"},
                       before=fault("tray03", {"never_ready": True})),
    # Documented (issue 9, docs/runbook.md): the READY tray refuses the job naming the tray it
    # cannot query; no tray is drained. The unreachable tray sees its own domain UP (its
    # command port answers locally), so no prolog has evidence against itself, and a prolog
    # only ever drains its own node: a peer's view must not drain another tray.
    "degraded": Row("domain stuck DEGRADED (one tray's command port unreachable)",
                    ["-N", "2", "-w", "tray03,tray04", "--wrap", "echo ran"], "CANCELLED",
                    before=fault("tray04", {"cmd_unreachable": True}), check=refusal_names("tray04")),
    # Fidelity N2: a firewall that DROPs the command port (no refusal): the asking ctl waits
    # out its deadline and reads the tray UNAVAILABLE; the same refusal, no tray drained.
    "cmd-drop": Row("one tray's command port DROPs other trays' queries",
                    ["-N", "2", "-w", "tray03,tray04", "--wrap", "echo ran"], "CANCELLED",
                    before=fault("tray04", {"cmd_drop": True}), check=refusal_names("tray04"),
        host_slurm_only="CI time: a refusal naming an unreachable peer, as the degraded row's (every Slurm); what differs is the simulator's firewall and imexctl's ctl deadline"),
    # Fidelity N2 (DRA-k8s #1417: `nvidia-imex-ctl -N` may hang): tray04's -N never returns
    # while its -q says READY. tray04 refuses the job naming the ctl timeout; before, it
    # read its own READY daemon as UNAVAILABLE and drained itself.
    "ctl-hang": Row("nvidia-imex-ctl -N hangs on one tray (its -q answers READY)",
                    ["-N", "2", "-w", "tray03,tray04", "--wrap", "echo ran"], "CANCELLED",
                    before=fault("tray04", {"ctl_hang": True}), check=refusal_names_ctl_timeout,
        host_slurm_only="CI time: a refusal as the degraded row's (every Slurm); what differs is imexctl's ctl deadline"),
    # Both sides see !M! and neither can tell whose map is wrong: the job is refused with
    # the links named, and no tray is drained (the next job renders afresh on both).
    "node-map-mismatch": Row("node-map mismatch !M! (one tray's daemon announces another node map)",
                             ["-N", "2", "-w", "tray01,tray02", "--wrap", "echo ran"], "CANCELLED",
                             before=fault("tray02", {"node_map_mismatch": True}),
                             check=refusal_shows_map_mismatch,
        host_slurm_only="CI time: a refusal as the degraded row's (every Slurm); what differs is imexctl's reading of !M!"),
    "sigterm-ignored": Row("daemon ignores SIGTERM", ["-N", "2", "-w", "tray01,tray02", "--wrap", "true"],
                           "COMPLETED", before=fault("tray02", {"hang_on_sigterm": True})),
    "crash-mid-job": Row("daemon crashes mid-job (SIGKILL)", ["-N", "2", "-w", "tray03,tray04",
                         "--wrap", "sleep 4"], "COMPLETED", during=crash_daemon),
    "port-held": Row("job port held by an unrelated process", ["-N", "2", "-w", "tray01,tray02",
                     "--wrap", "true"], "PENDING", {"tray01": "imexctl: prolog/render:"},
                     before=hold_port, after=stop_victim,
        host_slurm_only="CI time: a prolog drain as the fail-start row's (every Slurm); what differs is imexctl's port check"),
    "pid-reused": Row("pid in a stale record reused by an unrelated process",
                      ["-N", "2", "-w", "tray01,tray02", "--wrap", "true"], "COMPLETED",
                      before=reuse_pid, after=stop_victim,
        host_slurm_only="CI time: a clean epilog as the crash-mid-job row's (every Slurm); what differs is imexctl's process identity"),
    "stale-channel": Row("stale channel of an earlier job", ["-N", "2", "-w", "tray01,tray02",
                         "--wrap", "true"], "COMPLETED", before=stale_channel,
        host_slurm_only="CI time: a clean epilog as the crash-mid-job row's (every Slurm); what differs is imexctl's channel sweep"),
    "gpus-disagree": Row("GPUs of one tray disagree (clique)", ["-N", "2", "-w", "tray01,tray02", "--wrap", "echo ran"],
                         "PENDING", {"tray02": "imexctl: prolog/fabric:"},
                         before=lambda c, j: c.set_fabric("tray02", default_gpus("tray02")[:3]
                                                          + default_gpus("tray02", clique_id=2)[3:]),
        host_slurm_only="CI time: a prolog drain as the fabric-in-progress row's (every Slurm); what differs is imexctl's fabric judgement"),
    "fabric-in-progress": Row("fabric not Completed", ["-N", "2", "-w", "tray03,tray04", "--wrap", "echo ran"],
                              "PENDING", {"tray03": "imexctl: prolog/fabric:"},
                              before=lambda c, j: c.set_fabric("tray03", 4, state="IN_PROGRESS")),
    "no-imex-major": Row("/proc/devices without the IMEX major", ["-N", "2", "-w", "tray01,tray02", "--wrap", "echo ran"],
                         "PENDING", {"tray02": "imexctl: prolog/"},
                         before=no_imex_major, after=restore_major,
        host_slurm_only="CI time: a prolog drain as the fail-start row's (every Slurm); what differs is imexctl's channel step"),
    "state-full": Row("state dir full", ["-N", "2", "-w", "tray01,tray02", "--wrap", "echo ran"],
                      "PENDING", {"tray02": "imexctl: prolog/"}, before=state_full, after=unmount_state,
        host_slurm_only="CI time: a prolog drain as the fail-start row's (every Slurm); what differs is imexctl's record step"),
    "second-prolog": Row("a second job's prolog on a tray owned by a running job",
                         ["-N", "2", "-w", "tray01,tray02", "--wrap", "sleep 8"], "COMPLETED",
                         during=second_prolog),
    "prolog-timeout": Row("prolog killed by Slurm's PrologEpilogTimeout (the epilog still cleans)",
                          ["-N", "2", "-w", "tray03,tray04", "--wrap", "echo ran"], "PENDING",
                          {"tray03": "Prolog error", "tray04": "Prolog error"},
                          before=short_prolog_timeout, after=restore_prolog_timeout,
                          check=killed_prolog_cleaned_by_epilog),
    "terminate-resent": Row("tray missed the terminate request; Slurm's resend runs the epilog with no node list",
                            ["-N", "2", "-w", "tray01,tray02", "--wrap", "sleep 300"], "CANCELLED",
                            before=long_slurmd_timeout, during=terminate_missed,
                            after=restore_slurmd_timeout, check=epilog_without_node_list_cleaned,
                            host_slurm_only="re_kill_job() sends no node list in 22.05 to 26.05 alike "
                                            "(docs/harness.md); about 2 minutes a run"),
    "ctld-unreachable": Row("slurmctld unreachable during the prolog's job-record query",
                            ["-N", "2", "-w", "tray01,tray02", "--wrap", "echo ran"], "PENDING",
                            {"tray01": "Prolog error", "tray02": "Prolog error"},
                            before=slurm_bound, during=freeze_ctld_under_prologs, after=thaw_ctld),
    # Audit S-01: Slurm accepts a raw newline in JobName and prints it raw in `scontrol -o`,
    # here followed by forged keys; before the fix every tray's prolog exited 5 (Prolog error).
    "newline-job-name": Row("raw newline and forged keys in the job's name",
                            ["-J", "a\nb UserId=root(0) NodeList=tray09", "-N", "2", "-w", "tray01,tray02",
                             "--wrap", "echo ran"], "COMPLETED", check=lambda c, job: job_ran(c, job)),
    "corrupt-record": Row("corrupt ownership record", ["-N", "2", "-w", "tray01,tray02",
                          "--wrap", "true"], "PENDING", {"tray01": "imexctl: epilog/ownership: unreadable record"},
                            before=corrupt_record, after=remove_record),
}


@pytest.mark.parametrize("row_id", [
    pytest.param(row_id, marks=pytest.mark.host_slurm_only(row.host_slurm_only)) if row.host_slurm_only
    else row_id for row_id, row in ROWS.items()])
def test_fault_row(imex, row_id, request):
    c, row = imex, ROWS[row_id]
    if row.xfail:
        request.applymarker(pytest.mark.xfail(reason=row.xfail, strict=True))
    job = c.submit(["--hold", *row.args])
    ctx = row.before(c, job) if row.before else None
    try:
        c.scontrol("release", str(job))
        observed = row.during(c, job) if row.during else None
        settle(c, job)
        state, drained = job_state(c, job), drains(c)
        comment = c.job_info(job).get("AdminComment", "")
        c.client(["scancel", str(job)], check=False)
        c.wait_quiet(timeout=90)
    finally:
        if row.after:
            row.after(c, ctx)
    ran = (c.state_dir / "jobs" / f"{job}.out").exists()
    check_row(c, row_id, row, job, state, drained, comment, leaks(c), ran, observed)


def check_row(c, row_id, row, job, state, drained, comment, left, ran, observed=None) -> None:
    """Record one measured row, then assert it is what the row expects."""
    record(c, {"row": row_id, "title": row.title, "job": state, "ran": ran, "drained": drained,
               "comment": comment, "leaks": left, **({"observed": observed} if isinstance(observed, dict) else {})})
    assert state.startswith(row.job if isinstance(row.job, tuple) else (row.job,)), (state, drained)
    if row.drained:
        assert not ran, "the job ran although a fault should have stopped it"
    assert set(drained) == set(row.drained), drained
    for tray, reason in row.drained.items():
        assert drained[tray].startswith(reason), drained
    assert left == []
    if row.check:
        row.check(c, job)


# ---- the persistent rows (issue 37) -------------------------------------------------------
# Faults of a persistent clique (imex.lifetime = "persistent"), measured and recorded as the
# rows above are. One persistent clique for these rows: tray01-03 run the persistent domain,
# brought up by `imexctl recover`; tray04 publishes `job`. Each row asserts the job's state,
# every drain with its reason, and that no job left anything on the persistent trays
# (record, channel, job dir, a daemon other than the persistent one). A row NOT_HERE names
# would be listed with its reason but not run (CI fails on a skipped integration test).

PERSISTENT_TRAYS = ("tray01", "tray02", "tray03")


def persistent_pid(c, tray) -> int:
    return json.loads((tray_path(c, tray) / "state" / "persistent.json").read_text()
                      )["daemon"]["pid"]


@pytest.fixture(scope="module")
def clique(cluster):
    """tray01-03 one persistent clique, UP; tray04 publishes job (a config of its own).
    Afterwards the harness's imexctl.toml is back and every tray a job tray again."""
    c = cluster
    c.set_hooks("imexctl")
    job_toml = c.state_dir / "etc" / "imexctl-job.toml"
    job_toml.write_text((c.state_dir / "etc" / "imexctl.toml").read_text())
    job_toml.chmod(0o644)
    try:
        with persistent_clique(c, PERSISTENT_TRAYS):
            c.imexctl("tray04", "--config", str(job_toml), "identity", "publish")
            yield c, job_toml
    finally:
        job_toml.unlink(missing_ok=True)


def persistent_leaks(c) -> list[str]:
    """What a finished job left on a persistent tray (empty = clean): a job's record,
    a channel, a job dir, or a daemon other than the one persistent.json names."""
    out = []
    for tray in PERSISTENT_TRAYS:
        st = c.imexctl_status(tray)
        dom = st.get("domain") or {}
        if dom.get("jobs"):
            out.append(f"{tray}: job record {dom['jobs']}")
        out += [f"{tray}: channel {n}" for n in st.get("channels_present", [])]
        out += [f"{tray}: job dir {n}" for n in os.listdir(tray_path(c, tray) / "run")
                if n.startswith("job-")]
        want = [persistent_pid(c, tray)]
        if daemons_of(tray_path(c, tray)) != want:
            out.append(f"{tray}: daemons {daemons_of(tray_path(c, tray))}, recorded {want}")
    return out


def publish_job_lifetime(c, job_toml):
    c.imexctl("tray04", "--config", str(job_toml), "identity", "publish")


def stop_daemon(sig):
    def before(c, _job_toml):
        pid = persistent_pid(c, "tray02")
        os.kill(pid, sig)
        return pid
    return before


def continue_daemon(c, pid):
    os.kill(pid, signal.SIGCONT)


def restart_daemon(c, pid):
    """tray02's HealthCheckProgram restarts the dead daemon (self-heal), drained as it is
    by the prolog (its persist.dat left as the SIGKILL left it); tray01's nudges."""
    out = health(c, "tray02")
    assert f"restarted the persistent IMEX domain (its nvidia-imex (pid {pid}) was gone; " \
        in out, out
    health(c, "tray01")


def refused_for_lifetime(c, job):
    comment = c.job_info(job).get("AdminComment", "")
    assert comment.startswith("imexctl: imex.lifetime differs within clique "), comment
    assert "tray03 persistent" in comment and "tray04 job" in comment, comment


def daemon_pids_kept(c, job):
    for tray in ("tray01", "tray03"):
        assert daemons_of(tray_path(c, tray)) == [persistent_pid(c, tray)]


PATH_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}


def health(c, tray) -> str:
    """HealthCheckProgram on ``tray`` as slurmd runs it: its output (no traceback)."""
    res = c.run_healthcheck(tray)
    assert "Traceback" not in res.stderr, res.stderr
    return res.stdout


def maintain(c, *args) -> tuple[int, str]:
    """``imexctl maintain ARGS`` on the controller, as an admin runs it: (rc, output)."""
    res = c.exec_on(c.ctl_name, [str(c.imexctl_bin), "maintain", *args], env=PATH_ENV,
                    timeout=120)
    return res.returncode, res.stdout + res.stderr


def healed_by_health(c, _job_toml):
    """tray02's persistent daemon SIGKILLed; its HealthCheckProgram restarts it (tray01's
    nudges its daemon to reconnect at once) before the job is released."""
    old = persistent_pid(c, "tray02")
    os.kill(old, signal.SIGKILL)
    out = health(c, "tray02")
    said = f"restarted the persistent IMEX domain (its nvidia-imex (pid {old}) was gone; "
    assert said in out, out
    health(c, "tray01")
    assert persistent_pid(c, "tray02") != old
    return {"observed": {"health": said.rstrip("; ") + ")"}}


def rebooted(c, _job_toml):
    """tray03 power-cut, back with a new boot id and an empty /run (persist.dat gone); its
    boot unit (`imexctl recover`) brings it back into the domain, tray01's health nudges."""
    old = persistent_pid(c, "tray03")
    c.kill_tray("tray03")
    atomic_write(tray_path(c, "tray03", "boot_id"), str(uuid.uuid4()) + "\n")
    for f in tray_path(c, "tray03", "sim-run").iterdir():
        f.unlink()
    c.restart_tray("tray03", timeout=40)
    out = c.imexctl("tray03", "recover")
    said = "restarted the persistent IMEX domain (this tray rebooted since it last ran; "
    assert said in out, out
    health(c, "tray01")
    assert persistent_pid(c, "tray03") != old
    return {"observed": {"recover": said.rstrip("; ") + ")"}}


def membership(c, pdir, expect_trays):
    """`imexctl maintain --membership` end to end on the clique: drained, each tray's
    HealthCheckProgram restarts its daemon on the new members, resumed when all publish."""
    rc, out = maintain(c, "--node", "tray01", "--membership", "--no-wait")
    assert rc == 8 and f"drained {expect_trays}" in out, out
    for tray in pdir:
        # the tray added: its boot unit (recover); the others: their HealthCheckProgram
        said = c.imexctl(tray, "recover") if tray == "tray04" else health(c, tray)
        assert "restarted the persistent IMEX domain (for maintenance " in said, said
    rc, out = maintain(c, "--node", "tray01", "--membership", "--deadline", "60s",
                       "--poll", "1")
    assert rc == 0 and f"resumed {expect_trays}" in out, out
    return out


def tray_added(c, _job_toml):
    """tray04 joins the persistent clique (publishes persistent, its recover starts its
    daemon on 4 members); `imexctl maintain --membership` applies it to tray01-03."""
    assert "imex.lifetime persistent" in c.imexctl("tray04", "identity", "publish")
    assert "4 trays tray[01-04]" in c.imexctl("tray04", "recover")
    out = membership(c, ("tray01", "tray02", "tray03", "tray04"), "tray[01-04]")
    done = next(ln.split("maintain: ", 1)[1] for ln in out.splitlines() if "done: clique " in ln)
    return {"observed": {"maintain": done}}


def tray_removed(c, _ctx):
    """Back to the module's clique: tray04 on lifetime job (its recover removes its
    persistent daemon), tray01-03's domain started afresh on their 3 trays as the fixture
    starts it (a tray of the clique leaving it is no change `imexctl maintain` makes: the
    clique's trays share one lifetime)."""
    job_toml = c.state_dir / "etc" / "imexctl-job.toml"
    c.imexctl("tray04", "--config", str(job_toml), "identity", "publish")
    c.imexctl("tray04", "--config", str(job_toml), "recover")
    assert daemons_of(tray_path(c, "tray04")) == []
    for tray in PERSISTENT_TRAYS:
        drop_persistent(c, tray)
    for tray in PERSISTENT_TRAYS:
        assert "started the persistent IMEX domain" in c.imexctl(tray, "recover")
    health(c, "tray01")


def switch_refused(c, job):
    """With the job running on the clique, `imexctl maintain --lifetime job` is refused
    (exit 9, the job named, nothing drained); then the job is cancelled."""
    c.wait_job_state(job, "RUNNING", timeout=60)
    rc, out = maintain(c, "--node", "tray02", "--lifetime", "job")
    assert rc == 9, out
    refused = next(ln.split("REFUSED: ", 1)[1] for ln in out.splitlines() if "REFUSED: " in ln)
    assert refused.startswith(f"job {job} (tray[01-03]) still running on clique "), out
    assert "Nothing was drained" in out, out
    assert drains(c) == {}
    c.client(["scancel", str(job)], check=False)
    return {"maintain": f"exit 9, REFUSED: {refused.split('. Run it again', 1)[0]}"}


PERSISTENT_ROWS = {
    "persistent-lifetime-mismatch": Row(
        "persistent: one tray of the clique publishes imex.lifetime job",
        ["-N", "2", "-w", "tray03,tray04", "--wrap", "echo ran"], "CANCELLED",
        before=publish_job_lifetime, check=refused_for_lifetime),
    "persistent-daemon-hung": Row(
        "persistent: one tray's persistent nvidia-imex hung (SIGSTOP)",
        ["-N", "2", "-w", "tray01,tray02", "--wrap", "echo ran"], ("PENDING", "CANCELLED"),
        {"tray02": "imexctl: prolog/persistent-ready: "}, before=stop_daemon(signal.SIGSTOP),
        after=continue_daemon, check=daemon_pids_kept,
        host_slurm_only="CI time: a prolog drain as the daemon-dead row's (every Slurm); what "
                        "differs is imexctl's -q deadline"),
    "persistent-daemon-dead": Row(
        "persistent: one tray's persistent nvidia-imex dead (SIGKILL) when a job starts, "
        "before health ran",
        ["-N", "2", "-w", "tray01,tray02", "--wrap", "echo ran"], ("PENDING", "CANCELLED"),
        {"tray02": "imexctl: prolog/persistent-ready: "}, before=stop_daemon(signal.SIGKILL),
        after=restart_daemon, check=daemon_pids_kept),
    "persistent-healed": Row(
        "persistent: one tray's persistent nvidia-imex dead (SIGKILL), health ran before the job",
        ["-N", "2", "-w", "tray01,tray02", "--wrap", "echo ran"], "COMPLETED",
        before=healed_by_health, check=daemon_pids_kept),
    "persistent-rebooted": Row(
        "persistent: a tray rebooted (new boot id, empty /run); its boot unit ran recover",
        ["-N", "2", "-w", "tray01,tray03", "--wrap", "echo ran"], "COMPLETED",
        before=rebooted),
    "persistent-membership": Row(
        "persistent: a tray added to the clique, applied by imexctl maintain --membership",
        ["-N", "2", "-w", "tray03,tray04", "--wrap", "echo ran"], "COMPLETED",
        before=tray_added, after=tray_removed),
    "persistent-maintain-refused": Row(
        "persistent: imexctl maintain --lifetime job while a job holds a channel",
        ["-N", "3", "-w", "tray01,tray02,tray03", "--wrap", "echo ran; sleep 300"],
        "CANCELLED", during=switch_refused),
}
# Rows listed for the table but not run here (none left: every persistent row runs).
NOT_HERE: dict[str, str] = {}


@pytest.mark.parametrize("row_id", [
    pytest.param(row_id, marks=pytest.mark.host_slurm_only(row.host_slurm_only))
    if row.host_slurm_only else row_id for row_id, row in PERSISTENT_ROWS.items()
    if row_id not in NOT_HERE])
def test_persistent_fault_row(clique, row_id):
    c, job_toml = clique
    row = PERSISTENT_ROWS[row_id]
    job = c.submit(["--hold", "--exclusive", *row.args])
    ctx = row.before(c, job_toml) if row.before else None
    observed = ctx.pop("observed", None) if isinstance(ctx, dict) else None
    try:
        c.scontrol("release", str(job))
        if row.during:
            observed = row.during(c, job)
        settle(c, job)
        state, drained = job_state(c, job), drains(c)
        comment = c.job_info(job).get("AdminComment", "")
        c.client(["scancel", str(job)], check=False)
        c.wait_quiet(timeout=90)
    finally:
        if row.after:
            row.after(c, ctx)
        c.resume_all()
        c.imexctl("tray04", "--config", str(job_toml), "identity", "publish")
    out = c.state_dir / "jobs" / f"{job}.out"
    # the batch script can start on a tray whose prolog passed before another tray's
    # failed (the harness's note on DeferBatch); what matters is that it never ran
    ran = out.exists() and "ran" in out.read_text().split()
    check_row(c, row_id, row, job, state, drained, comment, persistent_leaks(c), ran,
              observed)
