"""Lifecycle: Slurm's floor, the common shell prolog and imexctl, side by side on the harness.

One run, three modes (more on request), the same jobs through the same hook paths:
  floor     the harness's `record` hooks (write the environment, exit 0): what Slurm costs
  baseline  bench/baseline/prolog and epilog (kill, rewrite nodes file, start, no wait)
  imexctl   the real hooks (prolog returns only when the job's domain is UP)
  python    (only with --modes) every hook a bare `python -c pass` on the hooks' interpreter:
            what any Python hook pays on this harness before doing anything, the floor
            under imexctl's wall and CPU when many trays share few cores
  imexctl-auth  (only with --modes) the real hooks with `[imex] auth = "job"` (a fresh
            site secret): per-job credentials derived, issued and checked by mutual TLS
            between the simulated daemons; printed beside imexctl with their ratio
  imexctl-persistent  (only with --modes) the real hooks with `[imex] lifetime =
            "persistent"` (issue 37): every tray publishes its identity, then `imexctl
            recover` runs on every tray at once (as the boot unit would) and brings up the
            clique's persistent domain, then one `imexctl health` on every tray at once
            (as slurmd's HealthCheckProgram runs it: it nudges each daemon whose links are
            down; --recover-only leaves that out, IMEX's own 15 s reconnect back-off); its
            bring-up (the first recover's start -> `-N` UP on every tray, recover's and
            health's wall) is printed as its own figure, not as a job's cost. Each job then gets only its channel on that domain; the probe
            checks the persistent daemon's `-N`. persist.dat is the persistent daemon's
            own here: --clean-persist does not remove it between these jobs. Afterwards
            the trays' lifetime is `job` again and `imexctl recover` removes the domain.
  REV       (with --baseline REV) the hooks of git revision REV: its hooks/ and imexctl/
            from `git archive` beside this checkout, run by a venv of their own on this
            checkout's interpreter and dependencies, with a config of REV's keys and
            state of their own (rev-state, rev-run, imexctl-rev.log per tray); printed
            beside imexctl with the ratios imexctl/REV and REV/python
python, imexctl and REV take turns, one job of each per round (the first rotating), so a
drift in the machine's speed slows them alike; the other modes run one after another.
The cluster's Prolog/Epilog/PrologSlurmctld/EpilogSlurmctld point (harness `hook_targets`)
at small generated wrappers that read a mode file, run the baseline or the real hook, and
write one file per run: hook, job, node, start and end (ns) and the CPU (user + sys) of
everything the hook waited for (`times`, 10 ms ticks: daemons it leaves running are not
counted), plus the hook's peak RSS (GNU `time -f %M`, where /usr/bin/time exists on the
tray's root). In baseline mode the slurmctld hooks are no-ops, as on a site without imexctl.
imexctl's own overhead per tray is read from each tray's imexctl.log: the prolog's
`duration_ms` minus its wait-ready step (the daemon's time to UP).

Trays are grouped into NVLink cliques of 18, one per NVL72 rack (`rack_of`): 4 and 18
trays are one clique, 72 trays four, and imexctl gives a 72-tray job one domain per rack.

Each job is `srun -N TRAYS` (as root, so the probe can read each tray's IMEX config) of a
probe that notes when it started on its tray, whether the domain was already UP
(`imexctl-sim-imex-ctl -c CFG -N -j` says "status": "UP") and, if not, polls until it is.
Per mode it prints medians over the jobs of: submit -> job running (the slowest tray's
step start), allocation -> job running (allocation = the first prolog's start, or for the
floor the first prolog record's mtime), allocation -> domain UP on every tray, prolog and
epilog wall and CPU per tray, PrologSlurmctld wall, the jobs that started before their
domain was UP and, for this checkout's hooks, those whose task found no channel device
(IMEX_CHANNEL_DEVICE, the TaskProlog's) at its start; for imexctl and imexctl-persistent
the trays' prolog steps (medians of their `step done` lines); for imexctl the controller hooks' steps (medians of the `steps_ms` their
last log line carries); and issue 35's targets: each controller hook at most 50 ms wall
and 2.5x a bare Python hook (`python` mode) of the same run. At the end, with the clusters down, `imexctl --version` and `imexctl status
--json --local` start-up next to bare Python (bench/startup.py's method; `--startup-runs`).
A benchmark, not a test: it prints, it asserts nothing.

Run as root on a cluster of your own (knobs IMEXCTL_HARNESS_*; see docs/harness.md):
    .venv/bin/python bench/lifecycle.py --trays 4 --jobs 10
    .venv/bin/python bench/lifecycle.py --trays 4,18 --jobs 7 --modes imexctl,python \
        --baseline 5d3a1d2
    .venv/bin/python bench/lifecycle.py --trays 4,18 --jobs 7 --clean-persist \
        --modes python,imexctl,imexctl-auth,imexctl-persistent --startup-runs 0
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
if str(REPO / "bench") not in sys.path:   # its sibling modules (targets, startup), last
    sys.path.append(str(REPO / "bench"))

from tests.cluster import Cluster  # noqa: E402

MODES = ("floor", "baseline", "imexctl")
PERSISTENT = "imexctl-persistent"
EXTRA_MODES = ("python", "imexctl-auth", PERSISTENT)
# --baseline REV: REV's own hooks/ and imexctl/ (git archive) in the wrappers' directory,
# with a venv of its own whose `imexctl` runs REV's package on this checkout's
# interpreter and dependencies, and a config of its own (REV's keys, its own state).
REV = "rev"
REV_TREE = "rev-tree"
REV_CONFIG = "rev-imexctl.toml"
REV_LOG = "imexctl-rev.log"
# Modes that run the same hooks' paths (the imexctl dispatchers) and leave nothing a
# next job trips on: their jobs take turns, one of each per round, so a drift in this
# shared machine's speed slows them alike.
TAKE_TURNS = ("python", "imexctl", REV)
WRAPPED = ("prolog", "epilog", "prolog-slurmctld", "epilog-slurmctld")
POLL_LIMIT_S = 20
TRAYS_PER_RACK = 18     # compute trays per NVL72 rack: one NVLink clique

_WRAPPER = """#!/bin/sh
# Generated by bench/lifecycle.py: run the baseline or imexctl's {hook}, note wall and CPU.
mode=imexctl
[ -r '{modefile}' ] && read -r mode < '{modefile}'
node=${{SLURMD_NODENAME:-$(/bin/hostname)}}
t0=$(/bin/date +%s%N)
T=""  # peak RSS of the hook and what it waited for, in KiB
[ -x /usr/bin/time ] && T="/usr/bin/time -f %M -o {timings}/rss-{hook}-${{SLURM_JOB_ID:-0}}-$node"
case "$mode" in
  baseline) $T {baseline} ;;
  python) $T '{python}' -c pass ;;
  rev) IMEXCTL_CONFIG='{rev_config}'; export IMEXCTL_CONFIG; $T '{rev_hook}' ;;
  *) $T '{real}' ;;
esac
rc=$?
t1=$(/bin/date +%s%N)
# `times` in this shell (a pipe or $(...) would fork and count nothing); one file per run.
{{ echo "$mode {hook} ${{SLURM_JOB_ID:-0}} $node $t0 $t1"; times; }} > '{timings}/{hook}-'"${{SLURM_JOB_ID:-0}}-$node"
exit $rc
"""

_BASELINE = {
    "prolog": "/bin/sh '{repo}/bench/baseline/prolog' '{trays}/'\"$node\" '{bindir}'",
    "epilog": "/bin/sh '{repo}/bench/baseline/epilog' '{trays}/'\"$node\"",
    "prolog-slurmctld": "/bin/true",   # not ":": /usr/bin/time cannot run a builtin
    "epilog-slurmctld": "/bin/true",
}

# Runs on every tray of the job: start time, UP at start?, time the UP check began, and
# whether the job's channel device (IMEX_CHANNEL_DEVICE, from the TaskProlog) was there.
_PROBE = r"""
t=$(date +%s%N); node=$SLURMD_NODENAME
ch=0; [ -n "$IMEX_CHANNEL_DEVICE" ] && [ -e "$IMEX_CHANNEL_DEVICE" ] && ch=1
case '{mode}' in
  baseline) cfg='{trays}'/$node/baseline/config.cfg ;;
  imexctl|imexctl-auth) cfg='{trays}'/$node/run/job-$SLURM_JOB_ID/config.cfg ;;
  imexctl-persistent) cfg='{trays}'/$node/run/persistent/config.cfg ;;
  rev) cfg='{trays}'/$node/rev-run/job-$SLURM_JOB_ID/config.cfg ;;
  *) echo "BENCH $node $t 1 $t $SLURM_JOB_ID -" > '{out}'/bench-$SLURM_JOB_ID-$node; exit 0 ;;
esac
first=1; end=$(( $(date +%s) + {limit} ))
while :; do
  c=$(date +%s%N)
  '{ctl}' -c "$cfg" -N -j 2>/dev/null | grep -q '"status": "UP"' && break
  first=0
  [ "$(date +%s)" -ge "$end" ] && {{ c=never; break; }}
  sleep {poll}
done
echo "BENCH $node $t $first $c $SLURM_JOB_ID $ch" > '{out}'/bench-$SLURM_JOB_ID-$node
"""


def write_wrappers(c: Cluster, where: Path) -> dict[str, Path]:
    """One wrapper per wrapped hook; they live outside the state dir (a rebuild wipes it)."""
    where.mkdir(parents=True, exist_ok=True)
    out = {}
    for hook in WRAPPED:
        path = where / hook
        baseline = _BASELINE[hook].format(repo=REPO, trays=c.state_dir / "trays", bindir=REPO / ".venv" / "bin")
        path.write_text(_WRAPPER.format(hook=hook, modefile=where / "mode", baseline=baseline,
                                        python=REPO / ".venv" / "bin" / "python",
                                        real=REPO / "hooks" / hook, timings=where / "timings",
                                        rev_config=where / REV_CONFIG,
                                        rev_hook=where / REV_TREE / "hooks" / hook))
        path.chmod(0o755)
        out[hook] = path
    return out


def _cpu_ms(text: str) -> float:
    """`times`' children line, e.g. 0m0.120000s 0m0.030000s -> 150.0."""
    return sum(int(m) * 60000 + float(s) * 1000 for m, s in re.findall(r"(\d+)m([\d.]+)s", text))


def read_timings(path: Path) -> dict[tuple[str, int], list[dict]]:
    """(hook, job) -> one dict per run: node, start, end (s), wall and cpu (ms)."""
    out: dict[tuple[str, int], list[dict]] = {}
    rss: dict[tuple[str, str, str], float] = {}
    for f in path.glob("rss-*") if path.is_dir() else ():
        hook_job_node = f.name[len("rss-"):]
        for hook in WRAPPED:
            if hook_job_node.startswith(hook + "-"):
                job, _, node = hook_job_node[len(hook) + 1:].partition("-")
                text = f.read_text().split()
                if text and text[-1].isdigit():
                    rss[(hook, job, node)] = int(text[-1])
    for f in path.iterdir() if path.is_dir() else ():
        if f.name.startswith("rss-"):
            continue
        lines = f.read_text().splitlines()
        parts = lines[0].split() if lines else []
        if len(lines) < 3 or len(parts) != 6 or not parts[2].isdigit():
            continue
        _, hook, job, node, t0, t1 = parts
        cpu = lines[2]
        out.setdefault((hook, int(job)), []).append(dict(
            node=node, start=int(t0) / 1e9, end=int(t1) / 1e9,
            wall=(int(t1) - int(t0)) / 1e6, cpu=_cpu_ms(cpu), rss=rss.get((hook, job, node))))
    return out


def own_overhead(c: Cluster, jobs: set[int], log_name: str = "imexctl.log",
                 waits: bool = True) -> list[float]:
    """Per job and tray: the prolog's duration_ms minus its wait-ready step, from the
    trays' imexctl.log (what imexctl adds beyond waiting for the daemon). ``waits``
    False: a prolog with no wait-ready step (a persistent tray's: its daemon was UP
    before the job), all of whose duration is imexctl's own."""
    import json

    total: dict[tuple[int, str], float] = {}
    wait: dict[tuple[int, str], float] = {}
    for tray in c.trays:
        log = c.state_dir / "trays" / tray / "log" / log_name
        for line in log.read_text().splitlines() if log.exists() else ():
            if '"prolog"' not in line or "duration_ms" not in line:
                continue
            rec = json.loads(line)
            key = (rec.get("job_id"), tray)
            if key[0] not in jobs or rec.get("hook") != "prolog":
                continue
            if rec.get("event") == "IMEX domain ready":
                total[key] = float(rec["duration_ms"])
            elif rec.get("event") == "step done" and rec.get("step") == "wait-ready":
                wait[key] = float(rec["duration_ms"])
    if not waits:
        return list(total.values())
    return [total[k] - wait[k] for k in total if k in wait]


def tray_steps(c: Cluster, jobs: set[int], hook: str = "prolog") -> dict[str, float]:
    """The median ms of each step of ``hook`` on the trays over ``jobs``, from the trays'
    imexctl.log (its ``step done`` lines), in the order the steps ran."""
    got: dict[str, list[float]] = {}
    for tray in c.trays:
        log = c.state_dir / "trays" / tray / "log" / "imexctl.log"
        for line in log.read_text().splitlines() if log.exists() else ():
            if '"step done"' not in line:
                continue
            rec = json.loads(line)
            if rec.get("job_id") in jobs and rec.get("hook") == hook and "duration_ms" in rec:
                got.setdefault(rec.get("step", "?"), []).append(float(rec["duration_ms"]))
    return {name: statistics.median(v) for name, v in got.items()}


def controller_steps(c: Cluster, jobs: set[int]) -> dict[str, dict[str, float]]:
    """Per controller hook, the median of each step's ms and of ``duration_ms`` over
    ``jobs``, from the controller's imexctl.log (the hooks' last line: ``steps_ms``)."""
    import json

    got: dict[str, dict[str, list[float]]] = {}
    for ctl in c.controllers:
        log = c.state_dir / "trays" / ctl / "log" / "imexctl.log"
        for line in log.read_text().splitlines() if log.exists() else ():
            if '"steps_ms"' not in line:
                continue
            rec = json.loads(line)
            if rec.get("job_id") not in jobs:
                continue
            steps = got.setdefault(rec.get("hook", "?"), {})
            for name, ms in {**rec["steps_ms"], "total": rec["duration_ms"]}.items():
                steps.setdefault(name, []).append(float(ms))
    return {hook: {name: statistics.median(v) for name, v in steps.items()}
            for hook, steps in got.items()}


def run_job(c: Cluster, mode: str, trays: int) -> dict:
    """One srun of the probe; returns submit time, srun wall and per-tray probe lines."""
    # Each probe writes its line to a file. At 72 trays slurmstepd's IO connections back
    # to srun used to time out ("could not connect IO"); that was the host's neighbour
    # table overflowing, which the harness now sizes (`srun -N 72 hostname` prints all 72
    # lines since), but a file does not depend on it. Beyond 18 trays the probes poll
    # less often: 72 pollers starting a Python ctl every 20 ms would starve the daemons
    # they wait for.
    out = c.state_dir / "out" / "bench"
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("bench-*"):
        old.unlink()
    probe = _PROBE.format(mode=mode, trays=c.state_dir / "trays", ctl=c.sim_ctl,
                          limit=POLL_LIMIT_S, out=out, poll=0.02 if trays <= 18 else 0.5)
    t_submit = time.time()
    try:
        res = c.srun(["-N", str(trays), "--exclusive", "--ntasks-per-node=1", "--input=none",
                      "--output=/dev/null", "/bin/sh", "-c", probe], user="root", timeout=180)
    except subprocess.TimeoutExpired as exc:   # a job that never ends is a figure too
        res = subprocess.CompletedProcess(exc.cmd, "timeout", "", f"srun timed out after "
                                                                  f"{exc.timeout:g} s")
    wall = time.time() - t_submit
    rows = [path.read_text().split() for path in sorted(out.glob("bench-*"))]
    rows = [r for r in rows if r and r[0] == "BENCH"]
    job = int(rows[0][5]) if rows and rows[0][5].isdigit() else None
    return dict(submit=t_submit, srun_ms=wall * 1000, rc=res.returncode, rows=rows, job=job,
                stderr=res.stderr.strip()[-300:])


def rack_of(index: int) -> int:
    """The NVLink clique of the tray at ``index`` in node order: an NVL72 rack joins 18
    compute trays, so 4 and 18 trays are one clique and 72 trays are four racks. A
    72-tray job then gets one 18-member domain per rack (policy per-clique), as on a real
    GB200 fleet; the baseline, which writes every allocated tray into one nodes file,
    still builds one 72-member domain."""
    return index // TRAYS_PER_RACK + 1


def floor_alloc(c: Cluster, job: int) -> float | None:
    """For the record hooks: the earliest prolog record's mtime."""
    times = [os.stat(f).st_mtime for f in c.state_dir.joinpath("out").glob(f"prolog-{job}-*.env")]
    return min(times) if times else None


def allow_slow_domains(c: Cluster) -> None:
    """Beyond 18 trays, wait for UP up to PrologEpilogTimeout - 10 s instead of the
    harness's 15 s (kept short for its fault tests): with every tray's prolog, daemon and
    slurmd on a few cores, a large domain needs more than 15 s, and each prolog would
    refuse the job before it is UP."""
    toml = c.state_dir / "etc" / "imexctl.toml"
    text = toml.read_text()
    wait = max(15, c.prolog_epilog_timeout - 10)
    if "ready_timeout_s = 15\n" in text:
        toml.write_text(text.replace("ready_timeout_s = 15\n", f"ready_timeout_s = {wait}\n"))
        print(f"  {len(c.trays)} trays: imex.ready_timeout_s = {wait}", flush=True)


def fresh_trays(c: Cluster) -> None:
    """Between modes: no drain, no job, and no IMEX persistence file. The baseline SIGKILLs
    its daemon, which leaves persist.dat behind; the next daemon on that tray would wait
    in WAITING_FOR_RECOVERY for importers that no longer exist."""
    c.cancel_all()
    c.client(["scancel", "--user", "0"], check=False)  # this script's jobs run as root
    c.wait_quiet(timeout=120)
    clear_persist(c)
    c.resume_all()


def clear_persist(c: Cluster) -> None:
    for tray in c.trays:
        (c.state_dir / "trays" / tray / "sim-run" / "persist.dat").unlink(missing_ok=True)


def job_auth(c: Cluster, on: bool) -> None:
    """``[imex] auth = "job"`` with a fresh site secret in the trays' imexctl.toml (on), or
    the harness's own file again (off)."""
    toml = c.state_dir / "etc" / "imexctl.toml"
    secret = c.state_dir / "etc" / "imex-auth.key"
    text = toml.read_text()
    marker = '\n[imex]\nauth = "job"\n'
    if on and marker not in text:
        secret.write_bytes(os.urandom(64))
        secret.chmod(0o600)
        toml.write_text(text.replace("\n[imex]\n", f'{marker}auth_secret_file = "{secret}"\n', 1))
    elif not on and marker in text:
        toml.write_text(re.sub(r'\n\[imex\]\nauth = "job"\nauth_secret_file = "[^"]*"\n',
                               "\n[imex]\n", text, count=1))


def persistent_lifetime(c: Cluster, on: bool) -> None:
    """``[imex] lifetime = "persistent"`` in the trays' imexctl.toml (on), or the harness's
    own file again (off: the default, ``job``)."""
    toml = c.state_dir / "etc" / "imexctl.toml"
    text = toml.read_text()
    line = 'lifetime = "persistent"\n'
    if on and f"\n[imex]\n{line}" not in text:
        toml.write_text(text.replace("\n[imex]\n", f"\n[imex]\n{line}", 1))
    elif not on:
        toml.write_text(text.replace(f"\n[imex]\n{line}", "\n[imex]\n", 1))


def bring_up_persistent(c: Cluster, health: bool = True, limit_s: float = 120) -> dict:
    """Publish every tray's (persistent) identity, then ``imexctl recover`` on every tray at
    once, as each tray's boot unit would, then (``health``) one ``imexctl health`` on every
    tray at once, run as slurmd's HealthCheckProgram runs it (the harness's
    ``run_healthcheck``): a site's bring-up, where health nudges (SIGUSR1) each daemon
    whose links are down instead of leaving it to IMEX's 15 s reconnect back-off. Without
    ``health`` only recover runs (that back-off's figure). Polls each tray's ``-N`` until
    the domain is UP there. Returns ms from the first recover's start: ``recover`` (the
    last recover returned), ``health`` (the last health returned, or None), ``up`` (UP
    seen on every tray; the poll visits the trays not yet UP in turn, so it is late by up
    to one round of ctl queries), each recover's and health's wall, and ``nudged`` (the
    health runs that sent SIGUSR1)."""
    for tray in c.trays:
        out = c.imexctl(tray, "identity", "publish")
        if "imex.lifetime persistent" not in out:
            raise SystemExit(f"{PERSISTENT}: {tray} did not publish the persistent lifetime: {out}")

    def recover(tray: str) -> tuple[str, float, float]:
        t = time.time()
        out = c.imexctl(tray, "recover", timeout=120)
        return out, t, time.time()

    def healthcheck(tray: str) -> tuple[str, float, float]:
        t = time.time()
        res = c.run_healthcheck(tray)
        return res.stdout + res.stderr, t, time.time()

    t0 = time.time()
    with ThreadPoolExecutor(len(c.trays)) as pool:
        done = dict(zip(c.trays, pool.map(recover, c.trays)))
        for tray, (out, _, _) in done.items():
            if "started the persistent IMEX domain" not in out:
                raise SystemExit(f"{PERSISTENT}: recover on {tray} did not start the persistent "
                                 f"domain: {out[-600:]}")
        checked = dict(zip(c.trays, pool.map(healthcheck, c.trays))) if health else {}
    recovered = max(end for _, _, end in done.values())
    up: dict[str, float] = {}
    end = time.time() + limit_s
    while len(up) < len(c.trays) and time.time() < end:
        for tray in c.trays:
            if tray in up:
                continue
            cfg = c.state_dir / "trays" / tray / "run" / "persistent" / "config.cfg"
            view = c.exec_on(tray, [str(c.sim_ctl), "-c", str(cfg), "-N", "-j"])
            if view.returncode == 0 and '"status": "UP"' in view.stdout:
                up[tray] = time.time()
        time.sleep(0.05)
    return dict(recover=(recovered - t0) * 1000,
                health=(max(e for _, _, e in checked.values()) - t0) * 1000 if checked else None,
                up=(max(up.values()) - t0) * 1000 if len(up) == len(c.trays) else None,
                walls=[(e - s) * 1000 for _, s, e in done.values()],
                health_walls=[(e - s) * 1000 for _, s, e in checked.values()],
                nudged=sum("sent SIGUSR1 to the persistent" in out for out, _, _ in checked.values()),
                trays=len(c.trays))


def end_persistent(c: Cluster) -> None:
    """The trays' lifetime back to ``job``: publish it, and ``imexctl recover`` removes the
    persistent domain (daemon stopped, its directory and record removed). A daemon that
    outlives that is killed here, its files removed, so the next size starts clean."""
    persistent_lifetime(c, False)
    for tray in c.trays:
        c.imexctl(tray, "identity", "publish")
        c.imexctl(tray, "recover", timeout=120)
        tray_dir = c.state_dir / "trays" / tray
        record = tray_dir / "state" / "persistent.json"
        if record.exists():
            print(f"  {PERSISTENT}: recover left {record}; killing its daemon", file=sys.stderr)
            try:
                os.kill(json.loads(record.read_text())["daemon"]["pid"], signal.SIGKILL)
            except (ProcessLookupError, TypeError, KeyError, ValueError):
                pass
            record.unlink()
            shutil.rmtree(tray_dir / "run" / "persistent", ignore_errors=True)
    clear_persist(c)


def measure_turns(c: Cluster, wrappers: Path, modes: list[str], trays: int, jobs: int,
                  clean: bool) -> dict[str, dict]:
    """The TAKE_TURNS modes, one job of each per round, the first mode rotating; the
    mode file is switched between jobs (each wrapper reads it when it starts, and a job
    is over, EpilogSlurmctld included, before the next is submitted)."""
    fresh_trays(c)
    job_auth(c, False)
    persistent_lifetime(c, False)
    c.set_hooks("imexctl")
    for mode in modes:      # warm-up, not counted
        (wrappers / "mode").write_text(mode + "\n")
        c.srun(["-N", str(trays), "true"], user="root", timeout=120)
        c.wait_quiet(timeout=120)
    per_job: dict[str, list[dict]] = {mode: [] for mode in modes}
    load = os.getloadavg()[0]
    for i in range(jobs):
        k = i % len(modes)
        for mode in modes[k:] + modes[:k]:
            if clean:
                clear_persist(c)
            (wrappers / "mode").write_text(mode + "\n")
            per_job[mode].append(run_job(c, mode, trays))
            c.wait_quiet(timeout=120)
    out = {}
    for mode in modes:
        _wait_epilogs(wrappers, mode, per_job[mode], trays)
        out[mode] = summarise(c, wrappers, mode, per_job[mode], trays)
        out[mode]["load"] = (load, os.getloadavg()[0])
    return out


def measure(c: Cluster, wrappers: Path, mode: str, trays: int, jobs: int, clean: bool,
            health: bool = True) -> dict:
    fresh_trays(c)
    job_auth(c, mode == "imexctl-auth")
    persistent_lifetime(c, mode == PERSISTENT)
    c.set_hooks("record" if mode == "floor" else "imexctl")
    (wrappers / "mode").write_text((mode if mode in ("baseline", "python") else "imexctl") + "\n")
    load = os.getloadavg()[0]
    try:
        bring_up = bring_up_persistent(c, health) if mode == PERSISTENT else None
        c.srun(["-N", str(trays), "true"], user="root", timeout=120)  # warm-up, not counted
        c.wait_quiet(timeout=120)
        per_job = []
        for _ in range(jobs):
            if clean and mode != PERSISTENT:    # the persistent daemon's own file
                clear_persist(c)
            per_job.append(run_job(c, mode, trays))
            c.wait_quiet(timeout=120)
        _wait_epilogs(wrappers, mode, per_job, trays)
        out = summarise(c, wrappers, mode, per_job, trays)
    finally:
        if mode == PERSISTENT:
            end_persistent(c)
    out.update(bring_up=bring_up, load=(load, os.getloadavg()[0]))
    return out


def _wait_epilogs(wrappers: Path, mode: str, per_job: list[dict], trays: int, timeout: float = 30) -> None:
    if mode == "floor":
        return
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        t = read_timings(wrappers / "timings")
        if all(len(t.get(("epilog", r["job"]), [])) >= trays for r in per_job if r["job"]):
            return
        time.sleep(0.2)


def summarise(c: Cluster, wrappers: Path, mode: str, per_job: list[dict], trays: int) -> dict:
    timings = read_timings(wrappers / "timings")
    m: dict[str, list[float]] = {k: [] for k in (
        "srun", "submit_run", "alloc_run", "alloc_up", "prolog_wall", "prolog_cpu", "epilog_wall",
        "epilog_cpu", "pslurmctld_wall", "pslurmctld_cpu", "eslurmctld_wall", "eslurmctld_cpu",
        "prolog_rss", "epilog_rss", "pslurmctld_rss", "eslurmctld_rss", "own")}
    early = never = failed = nochannel = 0
    for r in per_job:
        if r["rc"] or len(r["rows"]) != trays:
            failed += 1
            print(f"  {mode}: job {r['job']} rc {r['rc']}, {len(r['rows'])} probes: {r['stderr']}", file=sys.stderr)
            continue
        starts = [int(row[2]) / 1e9 for row in r["rows"]]
        ups = [row[4] for row in r["rows"]]
        started = max(starts)
        m["srun"].append(r["srun_ms"])
        m["submit_run"].append((started - r["submit"]) * 1000)
        pro = timings.get(("prolog", r["job"]), [])
        alloc = floor_alloc(c, r["job"]) if mode == "floor" else (min(p["start"] for p in pro) if pro else None)
        if alloc is not None:
            m["alloc_run"].append((started - alloc) * 1000)
        if (mode.startswith("imexctl") or mode == REV) and pro:
            # The prolog returns only when UP: the last tray's prolog end bounds UP.
            up = max(p["end"] for p in pro)
        elif mode == "baseline" and "never" not in ups:
            up = max(int(u) / 1e9 for u in ups)
        else:
            up = None
        never += "never" in ups
        nochannel += any(row[6:] == ["0"] for row in r["rows"])
        early += any(row[3] == "0" for row in r["rows"]) if mode != "floor" else 0
        if up is not None and alloc is not None:
            m["alloc_up"].append((up - alloc) * 1000)
        for hook, key in (("prolog", "prolog"), ("epilog", "epilog"), ("prolog-slurmctld", "pslurmctld"),
                          ("epilog-slurmctld", "eslurmctld")):
            for p in timings.get((hook, r["job"]), []):
                m[f"{key}_wall"].append(p["wall"])
                m[f"{key}_cpu"].append(p["cpu"])
                if p["rss"] is not None:
                    m[f"{key}_rss"].append(p["rss"])
    if mode.startswith("imexctl") or mode == REV:
        m["own"] = own_overhead(c, {r["job"] for r in per_job if r["job"]},
                                REV_LOG if mode == REV else "imexctl.log",
                                waits=mode != PERSISTENT)
    med = {k: (statistics.median(v) if v else None) for k, v in m.items()}
    med.update(early=early, never=never, failed=failed, nochannel=nochannel,
               jobs=len(per_job) - failed)
    if mode == "imexctl":
        med["steps"] = controller_steps(c, {r["job"] for r in per_job if r["job"]})
    if mode in ("imexctl", PERSISTENT):
        med["tray_steps"] = tray_steps(c, {r["job"] for r in per_job if r["job"]})
    return med


ROWS = (
    ("srun wall (job = probe, waits for UP)", "srun"),
    ("submit -> job running", "submit_run"),
    ("allocation -> job running", "alloc_run"),
    ("allocation -> domain UP, every tray", "alloc_up"),
    ("prolog wall per tray", "prolog_wall"),
    ("prolog CPU per tray (user+sys)", "prolog_cpu"),
    ("epilog wall per tray", "epilog_wall"),
    ("epilog CPU per tray (user+sys)", "epilog_cpu"),
    ("PrologSlurmctld wall", "pslurmctld_wall"),
    ("PrologSlurmctld CPU (user+sys)", "pslurmctld_cpu"),
    ("EpilogSlurmctld wall", "eslurmctld_wall"),
    ("EpilogSlurmctld CPU (user+sys)", "eslurmctld_cpu"),
    ("imexctl overhead (prolog - wait-ready)", "own"),
    ("prolog peak RSS, KiB", "prolog_rss"),
    ("epilog peak RSS, KiB", "epilog_rss"),
    ("PrologSlurmctld peak RSS, KiB", "pslurmctld_rss"),
    ("EpilogSlurmctld peak RSS, KiB", "eslurmctld_rss"),
)


def _fmt(v) -> str:
    return "-" if v is None else f"{v:,.0f}"


def _ratio(a, b) -> str:
    return "-" if a is None or b in (None, 0) else f"{a / b:.2f}x"


def report(trays: int, res: dict[str, dict], clean: bool, rev: str = "") -> None:
    """The modes that ran side by side, with imexctl's ratios to the others; ``rev``: the
    short id the --baseline mode is shown as."""
    cols = [m for m in ("floor", "python", "baseline", REV, "imexctl", "imexctl-auth", PERSISTENT)
            if m in res]
    short = {"imexctl": "imx", "baseline": "base", "floor": "floor", "python": "py",
             "imexctl-auth": "auth", REV: rev[:7] or REV, PERSISTENT: "pers"}
    name = {"imexctl-auth": "imx+auth", REV: rev[:8] or REV, PERSISTENT: "persist"}
    ratios = [("imexctl", "baseline"), ("imexctl", "floor"), ("baseline", "floor"),
              ("imexctl", "python"), ("imexctl-auth", "imexctl"), ("imexctl", REV),
              (REV, "python"), (PERSISTENT, "imexctl"), (PERSISTENT, "python"),
              (PERSISTENT, "baseline")]
    ratios = [(a, b) for a, b in ratios if a in res and b in res]
    jobs = " / ".join(f"{res[m]['jobs']} {name.get(m, m)}" for m in cols)
    print(f"\n{trays} trays{', persist.dat removed before every job' if clean else ''}"
          f"{' (not under the persistent domain)' if clean and PERSISTENT in res else ''}, "
          f"medians in ms ({jobs} jobs; load {' '.join(f'{x:.2f}' for x in os.getloadavg())})")
    head = f"{'':38} " + " ".join(f"{name.get(m, m):>8}" for m in cols) + "".join(
        f" {short[a] + '/' + short[b]:>12}" for a, b in ratios)
    print(head)
    print("-" * len(head))
    for label, key in ROWS:
        print(f"{label:38} " + " ".join(f"{_fmt(res[m][key]):>8}" for m in cols) + "".join(
            f" {_ratio(res[a][key], res[b][key]):>12}" for a, b in ratios))
    counted = ("baseline", "imexctl", "imexctl-auth", REV, PERSISTENT)
    # the channel: only this checkout's hooks give one its TaskProlog exports
    for label, key, modes in (("jobs started before domain UP", "early", counted),
                              ("jobs whose domain never came UP", "never", counted),
                              ("jobs started without their channel", "nochannel",
                               ("imexctl", "imexctl-auth", PERSISTENT))):
        print(f"{label:38} " + " ".join(
            f"{res[m][key]:>3}/{res[m]['jobs']:<4}" if m in modes else f"{'-':>8}" for m in cols))
    for hook, steps in (res.get("imexctl") or {}).get("steps", {}).items():
        print(f"imexctl {hook} steps, medians in ms (controller log, steps_ms): " + ", ".join(
            f"{name} {ms:.1f}" for name, ms in steps.items()))
    for m in ("imexctl", PERSISTENT):
        if (res.get(m) or {}).get("tray_steps"):
            print(f"{name.get(m, m)} prolog steps per tray, medians in ms (trays' log, step "
                  "done): " + ", ".join(f"{step} {ms:.1f}"
                                        for step, ms in res[m]["tray_steps"].items()))
    for m in cols:
        if "load" in res[m]:
            print(f"load (1 min) {name.get(m, m)}: {res[m]['load'][0]:.2f} at its start, "
                  f"{res[m]['load'][1]:.2f} at its end")
    if (res.get(PERSISTENT) or {}).get("bring_up"):
        print(bring_up_line(res[PERSISTENT]["bring_up"]))
    for line in targets(trays, res, os.cpu_count() or 1):
        print(line)


def bring_up_line(b: dict) -> str:
    """The persistent domain's bring-up, apart from any job's cost."""
    up = "never (in the poll's limit)" if b["up"] is None else f"{b['up']:,.0f} ms"
    walls = b["walls"]
    how = ("then one `imexctl health` on every tray at once, as slurmd's HealthCheckProgram "
           "runs it" if b.get("health") is not None else
           "no health run after it: IMEX's own reconnect back-off")
    line = (f"persistent domain bring-up ({b['trays']} trays, `imexctl recover` on every tray "
            f"at once, {how}; not a job's cost): -N UP on every tray {up} after the first "
            f"recover began; every recover returned {b['recover']:,.0f} ms after it (each "
            f"{statistics.median(walls):,.0f} ms median, {max(walls):,.0f} max)")
    if b.get("health") is not None:
        hw = b["health_walls"]
        line += (f", every health {b['health']:,.0f} ms (each {statistics.median(hw):,.0f} ms "
                 f"median, {max(hw):,.0f} max; {b['nudged']} of {b['trays']} sent SIGUSR1)")
    return line


def targets(trays: int, res: dict[str, dict], cpus: int) -> list[str]:
    """Issue 12's targets for this size, from this run's medians, as lines to print.

    Every tray's epilog starts at once when a job ends, and here all trays share ``cpus``
    cores: a per-tray wall of T ms leaves ``min(cpus, trays) * T / trays`` ms of CPU per
    tray for all that tray's epilog runs (slurmd's fork, the hook, the daemon's exit). That
    budget and the bare-Python epilog of the same run (``python`` mode) say how much of a
    miss is the machine's: a size where even ``python -c pass`` exceeds the target cannot
    meet it here."""
    imx, base, py = res.get("imexctl"), res.get("baseline"), res.get("python")
    if imx is None:
        return []
    from targets import CONTROLLER_PYTHON_X, EPILOG_MS, PROLOG_SLURMCTLD_MS, UP_MARGIN_MS, verdict

    out = [f"targets at {trays} trays:"]
    if base is not None and imx["alloc_up"] is not None and base["alloc_up"] is not None:
        ok = imx["alloc_up"] <= base["alloc_up"] + UP_MARGIN_MS and imx["early"] == 0
        out.append(f"  allocation -> UP within {UP_MARGIN_MS:.0f} ms of the baseline's, every "
                   f"job on an UP domain: {imx['alloc_up']:,.0f} ms against "
                   f"{base['alloc_up']:,.0f}, {imx['early']} of {imx['jobs']} jobs early "
                   f"({verdict(ok)})")
    if imx["pslurmctld_wall"] is not None:
        out.append(f"  PrologSlurmctld <= {PROLOG_SLURMCTLD_MS:.0f} ms wall: "
                   f"{imx['pslurmctld_wall']:,.0f} ms "
                   f"({verdict(imx['pslurmctld_wall'] <= PROLOG_SLURMCTLD_MS)})")
    if imx["epilog_wall"] is not None:
        budget = min(cpus, trays) * EPILOG_MS / trays   # no tray has more than a core
        line = (f"  epilog <= {EPILOG_MS:.0f} ms wall per tray: "
                f"{imx['epilog_wall']:,.0f} ms "
                f"({verdict(imx['epilog_wall'] <= EPILOG_MS)}); {trays} epilogs at "
                f"once on {cpus} CPUs: the target leaves {budget:.1f} ms of CPU per tray")
        if py is not None and py["epilog_wall"] is not None:
            line += (f"; a bare `python -c pass` epilog took {py['epilog_wall']:,.0f} ms per "
                     f"tray here")
            if py["epilog_wall"] > EPILOG_MS:
                line += " (no Python epilog meets the target at this size on this machine)"
        out.append(line)
    # Issue 35: each controller hook within PROLOG_SLURMCTLD_MS and CONTROLLER_PYTHON_X
    # times a bare `python -c pass` hook of the same run (the EpilogSlurmctld line and
    # the ratios only where the run has their figures).
    for name, key in (("PrologSlurmctld", "pslurmctld_wall"), ("EpilogSlurmctld", "eslurmctld_wall")):
        wall, bare = imx.get(key), (py or {}).get(key)
        if wall is None:
            continue
        if key == "eslurmctld_wall":
            out.append(f"  {name} <= {PROLOG_SLURMCTLD_MS:.0f} ms wall: {wall:,.0f} ms "
                       f"({verdict(wall <= PROLOG_SLURMCTLD_MS)})")
        if bare:
            x = wall / bare
            out.append(f"  {name} <= {CONTROLLER_PYTHON_X:g}x a bare Python hook's wall: "
                       f"{x:.2f}x ({wall:,.0f} against {bare:,.0f} ms) "
                       f"({verdict(x <= CONTROLLER_PYTHON_X)})")
    return out


def prepare_rev(rev: str, wrappers: Path) -> str:
    """REV's tree (``git archive``: its hooks/ and imexctl/, nothing of this checkout's)
    under ``wrappers``, with a venv of its own that holds only an ``imexctl`` executable
    as REV's hooks look for it (``.venv/bin/imexctl`` beside hooks/): this checkout's
    interpreter with ``-IS``, REV's package first on the path, then this venv's
    site-packages (its dependencies). Its byte code is compiled (as this checkout's is, in
    main): the controller hooks run as SlurmUser, who cannot write a __pycache__ there,
    and would compile every module at every run. Returns REV's short id."""
    import compileall

    from imexctl.base.executable import site_paths

    short = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", f"{rev}^{{commit}}"],
                           capture_output=True, text=True)
    if short.returncode != 0:
        raise SystemExit(f"--baseline {rev}: not a commit of {REPO}: {short.stderr.strip()}")
    tree = wrappers / REV_TREE
    shutil.rmtree(tree, ignore_errors=True)
    tree.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "-c", "tar.umask=022", "archive", rev,
                              "hooks", "imexctl"],  # 0755: its hooks check that
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    python = REPO / ".venv" / "bin" / "python"
    venv = tree / ".venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "lib").mkdir()
    shutil.copy(REPO / ".venv" / "pyvenv.cfg", venv / "pyvenv.cfg")
    exe = venv / "bin" / "imexctl"
    exe.write_text(f"#!{python} -IS\n# bench/lifecycle.py --baseline {rev}: REV's package "
                   f"on this checkout's interpreter\nimport sys\nsys.path.insert(0, "
                   f"{str(tree)!r})\nsys.path += {site_paths(str(python))!r}\n"
                   "from imexctl.cli import entry\nentry()\n")
    exe.chmod(0o755)
    compileall.compile_dir(str(tree / "imexctl"), quiet=1)
    return short.stdout.strip()


def rev_config(c: Cluster, wrappers: Path) -> None:
    """The cluster's imexctl.toml as REV reads it: its own state, run directory, channel
    table and log (each version's files apart: neither takes the other's for a leftover),
    and, for a REV from before ``imex.environment_file``, the simulator's knobs in its
    ``[sim]`` section. Checked by loading it with REV's code."""
    import pwd

    t = f"{c.state_dir}/trays/{{node}}"
    text = (c.state_dir / "etc" / "imexctl.toml").read_text()
    text = (text.replace(f'"{t}/state', f'"{t}/rev-state').replace(f'"{t}/run"', f'"{t}/rev-run"')
            .replace(f'"{t}/log/imexctl.log"', f'"{t}/log/{REV_LOG}"'))
    tree = wrappers / REV_TREE
    if "class Sim:" in (tree / "imexctl" / "config.py").read_text():
        text = text.replace(f'environment_file = "{t}/imex.env"\n', "")
        text += f'\n[sim]\nfaults_file = "{t}/faults.json"\nsim_run_dir = "{t}/sim-run"\n'
    (wrappers / REV_CONFIG).write_text(text)
    slurm = pwd.getpwnam("slurm")
    for node in (*c.trays, *c.controllers):
        for sub in ("rev-state", "rev-run"):
            d = c.state_dir / "trays" / node / sub
            d.mkdir(parents=True, exist_ok=True)
            if node in c.controllers:
                os.chown(d, slurm.pw_uid, slurm.pw_gid)
    check = subprocess.run([str(REPO / ".venv" / "bin" / "python"), "-IS", "-c",
                            f"import sys; sys.path.insert(0, {str(tree)!r}); "
                            f"sys.path += {sys.path!r}; from imexctl.config import load_config; "
                            f"load_config({str(wrappers / REV_CONFIG)!r}, node={c.trays[0]!r})"],
                           capture_output=True, text=True)
    if check.returncode != 0:
        raise SystemExit(f"--baseline: {wrappers / REV_CONFIG} is not a config REV reads: "
                         f"{check.stderr.strip()[-600:]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trays", default="4", help="comma-separated tray counts (e.g. 4,18)")
    ap.add_argument("--jobs", type=int, default=10, help="jobs per mode and tray count")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--keep", action="store_true",
                    help="leave each cluster up afterwards (default: take it down, so idle "
                    "slurmds do not sit under the next measurement)")
    ap.add_argument("--clean-persist", action="store_true",
                    help="remove each tray's IMEX persistence file before every job (the baseline's "
                    "SIGKILL leaves it, and its next daemon then waits in WAITING_FOR_RECOVERY)")
    ap.add_argument("--baseline", metavar="REV",
                    help="also run the hooks of git revision REV (git archive of its hooks/ and "
                    "imexctl/, on this checkout's interpreter and dependencies, with its own "
                    "state) in the same run, its jobs taking turns with imexctl's and "
                    "python's; printed beside them with the ratios")
    ap.add_argument("--recover-only", action="store_true",
                    help=f"{PERSISTENT}: bring the domain up with recover alone, no health run "
                    "after it (IMEX's own reconnect back-off, about 15 s; default: recover, "
                    "then one health run on every tray, as a site's slurmd runs it)")
    ap.add_argument("--startup-runs", type=int, default=20,
                    help="runs of `imexctl --version` and `status --json --local` next to bare "
                    "Python at the end (0: skip)")
    args = ap.parse_args()
    modes = args.modes.split(",")
    unknown = set(modes) - set(MODES + EXTRA_MODES)
    if unknown:
        ap.error(f"unknown mode(s) {', '.join(sorted(unknown))}; known: "
                 f"{', '.join(MODES + EXTRA_MODES)}")
    if args.baseline:
        modes.append(REV)
    head = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty"],
                          capture_output=True, text=True).stdout.strip()
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; this checkout {head}; load "
          f"(1/5/15 min) at start: {tuple(round(x, 2) for x in os.getloadavg())}; "
          f"{os.cpu_count()} CPUs")
    # The controller hooks run as SlurmUser, who cannot write a __pycache__ in this checkout:
    # byte code that is not there yet (a module changed since root last imported it) would
    # be compiled at every run and measured as the hook's cost. A package is compiled at
    # install; so is this checkout here, whatever the modes.
    import compileall
    compileall.compile_dir(str(REPO / "imexctl"), quiet=1)
    rev = ""
    for n in (int(x) for x in args.trays.split(",")):
        base = Cluster.from_env(n=n)
        wrappers = Path(f"{base.state_dir}-bench-hooks")
        targets = write_wrappers(base, wrappers)
        if args.baseline:
            rev = prepare_rev(args.baseline, wrappers)
            print(f"  --baseline {args.baseline}: {rev} in {wrappers / REV_TREE}", flush=True)
        c = Cluster.from_env(n=n, hook_targets=targets).up(timeout=120)
        shutil.rmtree(wrappers / "timings", ignore_errors=True)
        (wrappers / "timings").mkdir()
        (wrappers / "timings").chmod(0o1777)  # PrologSlurmctld runs as SlurmUser
        c.scontrol("update", "partitionname=" + c.partition, "maxnodes=unlimited", check=False)
        if n > 18:
            allow_slow_domains(c)
        if args.baseline:
            rev_config(c, wrappers)
        fresh_trays(c)
        for i, tray in enumerate(c.trays):
            c.clear_faults(tray)
            c.set_fabric(tray, clique_id=rack_of(i))
            c.imexctl(tray, "identity", "publish")
        c.resume_all()
        try:
            turns = [m for m in modes if m in TAKE_TURNS]
            res = {}
            for mode in modes:
                if mode not in TAKE_TURNS:
                    res[mode] = measure(c, wrappers, mode, n, args.jobs, args.clean_persist,
                                        health=not args.recover_only)
                elif mode == turns[0]:
                    res.update(measure_turns(c, wrappers, turns, n, args.jobs,
                                             args.clean_persist))
            (wrappers / "mode").write_text("imexctl\n")
            job_auth(c, False)
            persistent_lifetime(c, False)
            c.set_hooks("imexctl")
        finally:
            if not args.keep:
                c.down()
        report(n, res, args.clean_persist, rev)
    if args.startup_runs:
        startup_report(args.startup_runs)
    print(f"load (1/5/15 min) at end: {tuple(round(x, 2) for x in os.getloadavg())}")
    return 0


def startup_report(runs: int) -> None:
    """`imexctl --version` and `imexctl status --json --local` start-up next to bare Python,
    in this run, after the clusters are down (bench/startup.py's method: commands in turns,
    medians, and the paired ratio to bare Python of the same round)."""
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import startup

    with tempfile.TemporaryDirectory() as tmp:
        cfg, _ = startup.hook_setup(Path(tmp) / "startup")
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "IMEXCTL_CONFIG": str(cfg),
               "SLURMD_NODENAME": "tray01"}
        exe = str(startup.VENV_BIN / "imexctl")
        rows = startup.measure([("python -c pass", [startup.PY, "-c", "pass"], env),
                                ("imexctl --version", [exe, "--version"], env),
                                ("imexctl status --json --local",
                                 [exe, "status", "--json", "--local"], env)], runs)
    base = rows[0][1]
    print(f"\nstart-up, {runs} runs each in turns, medians (load "
          f"{os.getloadavg()[0]:.2f})")
    print(f"{'command':32} {'wall ms':>8} {'x bare':>7} {'paired':>7} {'CPU ms':>7} "
          f"{'peak MiB':>9}")
    for name, wall, cpu, mem, paired in rows:
        print(f"{name:32} {wall:8.1f} {wall / base:7.2f} {paired:7.2f} {cpu:7.1f} {mem:9.1f}")
    print("\n".join(startup.checks(rows[2][2], {})))


if __name__ == "__main__":
    sys.exit(main())
