"""Churn: many consecutive jobs on the 4-tray harness, then prove nothing grew.

Jobs of mixed sizes (1-4 trays) run in waves; some waves carry a fault that must not drain
(a daemon ignoring SIGTERM, a slow start). After every wave the script counts what a job
could leave behind on each tray: processes and their open files, listening ports,
channels, job dirs, state files, the ownership record, imexctl.log size. It prints those
counts for the first and last wave and per-job prolog time (imexctl's own `duration_ms`)
for the first and last hundred jobs. A benchmark, not a test: it prints, it asserts nothing.

Job ids run consecutively, so even and odd ids alternate: with the old port rule (ports
from the job id, inside the ephemeral range) about one job in a few hundred met a port
taken by an outgoing connection; the summary counts every job that ended on a port fault.
The log cap (`[log] max_bytes`) is set low for the run, so the log sizes printed show the
bound at work (the current file plus one kept generation).

Run as root under the harness lock:
    flock /tmp/imexctl-harness.lock .venv/bin/python bench/churn.py --jobs 300
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.cluster import Cluster, procs  # noqa: E402

SIZES = (1, 2, 4, 3, 2, 1, 4, 2)
FAULTS = ({}, {"hang_on_sigterm": True}, {}, {"slow_start": 1})  # per wave, on one tray


def snapshot(c: Cluster) -> dict[str, int]:
    """Totals over all trays of everything a job could leak."""
    tot = dict(processes=0, open_files=0, ports=0, channels=0, job_dirs=0, state_files=0,
               records=0, log_bytes=0)
    for tray in c.trays:
        d = c.state_dir / "trays" / tray
        pids = procs.pids_in_netns(c._netns_of(tray))
        tot["processes"] += len(pids)
        for p in pids:
            try:
                tot["open_files"] += len(os.listdir(f"/proc/{p}/fd"))
            except OSError:
                pass
        tot["ports"] += len(c.exec_on(tray, ["ss", "-Htln"]).stdout.splitlines())
        tot["channels"] += len(os.listdir(d / "dev" / "nvidia-caps-imex-channels"))
        tot["job_dirs"] += len([n for n in os.listdir(d / "run") if n.startswith("job-")])
        tot["state_files"] += sum(len(files) for _, _, files in os.walk(d / "state"))
        tot["records"] += int((d / "state" / "domain.json").exists())
        log = d / "log" / "imexctl.log"
        for f in (log, log.with_name("imexctl.log.1")):
            tot["log_bytes"] += f.stat().st_size if f.exists() else 0
    return tot


LOG_CAP = 256 * 1024


def prolog_ms(c: Cluster, out: dict[int, float]) -> dict[int, float]:
    """Per job: the slowest tray's prolog duration_ms from imexctl's own log (both
    generations; called after every wave, before a rotation can drop a job's lines)."""
    for tray in c.trays:
        d = c.state_dir / "trays" / tray / "log"
        for log in (d / "imexctl.log.1", d / "imexctl.log"):
            for line in log.read_text().splitlines() if log.exists() else []:
                if '"hook": "prolog"' not in line or '"duration_ms"' not in line:
                    continue
                rec = json.loads(line)
                job = rec.get("job_id")
                if isinstance(job, int):
                    out[job] = max(out.get(job, 0.0), float(rec["duration_ms"]))
    return out


def set_log_cap(c: Cluster, cap: int | None) -> None:
    """Append (or drop) a [log] max_bytes to the harness's imexctl.toml; hooks read it on
    every run. Dropping restores the file byte for byte."""
    conf = c.state_dir / "etc" / "imexctl.toml"
    text = conf.read_text().split("\n# churn log cap\n")[0]
    conf.write_text(text + (f"\n# churn log cap\n[log]\nmax_bytes = {cap}\n" if cap else ""))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=300)
    ap.add_argument("--wave", type=int, default=20, help="jobs submitted together")
    args = ap.parse_args()

    c = Cluster.from_env(n=4).up()
    c.set_hooks("imexctl")
    c.client(["scancel", "--user", "nobody"], check=False)
    c.wait_quiet(timeout=90)
    for tray in c.trays:
        c.clear_faults(tray)
        c.set_fabric(tray)
        c.imexctl(tray, "identity", "publish")
    c.resume_all()
    set_log_cap(c, LOG_CAP)
    try:
        return churn(c, args)
    finally:
        set_log_cap(c, None)


def churn(c: Cluster, args: argparse.Namespace) -> int:
    first_job = None
    per_job_ms: dict[int, float] = {}
    reasons: dict[int, str] = {}
    before = snapshot(c)
    waves, states, t0 = [], {}, time.monotonic()
    submitted = 0
    while submitted < args.jobs:
        fault = FAULTS[len(waves) % len(FAULTS)]
        c.inject_fault("tray04", fault)
        jobs = []
        for i in range(min(args.wave, args.jobs - submitted)):
            n = SIZES[(submitted + i) % len(SIZES)]
            jobs.append(c.submit(["-N", str(n), "--wrap", "srun true"]))
        submitted += len(jobs)
        first_job = first_job or jobs[0]
        c.wait_quiet(timeout=600)
        for j in jobs:
            info = c.job_info(j)
            states[j] = info["JobState"]
            if states[j] != "COMPLETED":
                reasons[j] = f"{info.get('Reason', '')} {info.get('AdminComment', '')}"
        prolog_ms(c, per_job_ms)
        waves.append(snapshot(c))
        print(f"wave {len(waves):3d}: {submitted:4d} jobs, {time.monotonic() - t0:6.1f} s, "
              f"fault={fault or '-'}, {waves[-1]}", flush=True)
    c.clear_faults("tray04")
    drained = [t for t in c.trays if "DRAIN" in c.node_info(t)["state"]]
    per_job = [ms for j, ms in sorted(per_job_ms.items()) if j >= first_job]
    port = sorted(j for j, r in reasons.items() if "port" in r.lower())
    done = sum(1 for s in states.values() if s == "COMPLETED")

    print(f"\njobs: {len(states)} submitted, {done} COMPLETED, others "
          f"{sorted({s for s in states.values() if s != 'COMPLETED'})}; drained trays: {drained or 'none'}")
    even = sum(1 for j in states if j % 2 == 0)
    print(f"job ids {min(states)}..{max(states)}: {even} even, {len(states) - even} odd; "
          f"jobs that ended on a port fault: {len(port)} {port or ''}")
    for j, r in sorted(reasons.items()):
        print(f"  job {j} {states[j]}: {r.strip()[:160]}")
    print(f"log cap per tray: {LOG_CAP} bytes (+ one kept generation); "
          f"bound for {len(c.trays)} trays: {2 * LOG_CAP * len(c.trays)} bytes")
    print(f"wall: {time.monotonic() - t0:.0f} s; machine load (1/5/15 min): {os.getloadavg()}")
    print(f"{'resource':12} {'before':>9} {'after wave 1':>13} {'after last':>11}")
    for key in before:
        print(f"{key:12} {before[key]:9d} {waves[0][key]:13d} {waves[-1][key]:11d}")
    if len(per_job) >= 200:
        a, b = per_job[:100], per_job[-100:]
        print(f"prolog ms (slowest tray per job), first 100: median {statistics.median(a):.0f}, "
              f"p90 {sorted(a)[89]:.0f}; last 100: median {statistics.median(b):.0f}, "
              f"p90 {sorted(b)[89]:.0f}; ratio of medians {statistics.median(b) / statistics.median(a):.2f}")
    else:
        print(f"prolog ms per job ({len(per_job)} jobs logged): {per_job}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
