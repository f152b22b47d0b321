"""Start-up and per-hook cost of imexctl: every job start pays it on every tray.

Part 1, start-up: for each command the median wall time, CPU time (user + sys) and peak
RSS over N runs, next to a bare `python -c pass` with the same interpreter, with ratios,
all in one run: `--version`, `config check`, `status --json` with `--local` and with its
one Slurm query (target: status within 2x bare Python), status with fabric from NVML,
`import structlog` for reference (what imexctl.log avoids paying), and `import imexctl,
json, pathlib`: the standard library status cannot do without (its state files and output
are JSON, its paths pathlib; both load `re`) as imexctl loads it (pathlib without
urllib.parse), the floor under its ratio.

Part 2, hooks (root: channel devices): each hook as Slurm runs it (the imexctl CLI and the
hook's environment), in job order PrologSlurmctld, Prolog, TaskProlog, Epilog,
EpilogSlurmctld, against the simulated daemon (one tray) and shell stand-ins for
`scontrol`/`squeue` that answer at once from canned records, so no Slurm is needed. A
wrapper reports imexctl's own CPU (getrusage RUSAGE_SELF) apart from the children it
waited for (ctl checks, scontrol). Targets: own CPU <= 50 ms per hook, PrologSlurmctld
<= 50 ms wall, epilog <= 250 ms wall. Then the largest imports of each hook.

Usage: .venv/bin/python bench/startup.py [-n 20] [--hook-runs 10]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from targets import EPILOG_MS, OWN_CPU_MS, PROLOG_SLURMCTLD_MS, STATUS_X_BARE, verdict

VENV_BIN = Path(sys.executable).parent
FAKE_MUNGE = Path(__file__).resolve().parents[1] / "tests" / "unit" / "data" / "fakemunge"
PY = sys.executable    # --venv: another installation's interpreter
# How the hooks start Python: as the installation's imexctl executable does (-IS and its
# baked paths when `python -m imexctl.executable` wrote it, else pip's script with site).
START: list[str] = ["-P"]
PRELUDE = ""


def spawn(argv: list[str], env: dict[str, str]) -> tuple[float, float, float]:
    """One run: wall ms, CPU ms (user+sys) and peak RSS (MiB); stdout/stderr discarded."""
    t0 = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, env, file_actions=[
        (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
        (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0)])
    _, status, usage = os.wait4(pid, 0)
    wall = (time.perf_counter() - t0) * 1000
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(argv)} failed with {os.waitstatus_to_exitcode(status)}")
    return wall, (usage.ru_utime + usage.ru_stime) * 1000, usage.ru_maxrss / 1024


def measure(cases: list[tuple[str, list[str], dict[str, str]]], runs: int
            ) -> list[tuple[str, float, float, float, float]]:
    """Per case: median wall ms, median CPU ms, max peak RSS (MiB) over ``runs``, and the
    median of its per-round wall ratio to the first case (bare Python). The cases take
    turns, one run each per round, so a machine whose speed drifts (a shared VM: bare
    Python varies by 30% from minute to minute here) slows them alike; the paired ratio
    compares each run with bare Python of its own round. The first round writes byte
    code; not counted."""
    got: dict[str, list[tuple[float, float, float]]] = {name: [] for name, _, _ in cases}
    for i in range(runs + 1):
        for name, argv, env in cases[i % len(cases):] + cases[:i % len(cases)]:
            run = spawn(argv, env)
            if i:
                got[name].append(run)
    base = [r[0] for r in got[cases[0][0]]]
    return [(name, statistics.median(r[0] for r in got[name]),
             statistics.median(r[1] for r in got[name]), max(r[2] for r in got[name]),
             statistics.median(r[0] / b for r, b in zip(got[name], base)))
            for name, _, _ in cases]


# ---------------------------------------------------------------------------- hooks
# Each hook as Slurm runs it (the imexctl CLI with the hook's environment), against the
# simulated daemon and a shell `scontrol`/`squeue` that print canned records, so no Slurm
# is needed. A wrapper reports imexctl's own CPU (getrusage RUSAGE_SELF) apart from its
# children's (ctl checks, scontrol); the daemon it starts is detached and not counted.
# What imexctl.cli.entry() does (short_lived, main, then os._exit), with the rusage
# written between.
WRAP = """
import os, resource, sys
from imexctl.cli import main, short_lived
short_lived()
rc = main(sys.argv[2:])
s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
with open(sys.argv[1], "w") as out:
    out.write(f"{rc} {(s.ru_utime + s.ru_stime) * 1000} {(c.ru_utime + c.ru_stime) * 1000}")
os._exit(rc)
"""
# pip's console script, for comparison with the -IS executable: the same entry with site.
SITE_ENTRY = "import sys; from imexctl.cli import entry; sys.argv[0] = 'imexctl'; entry()"
FAKE_SLURM = """#!/bin/sh
# bench/startup.py's stand-in for {tool}: canned records, updates appended to a file.
d={dir}
echo "{tool} $*" >> "$d/calls"
[ -s "$d/rpc-delay" ] && sleep "$(cat "$d/rpc-delay")"
case "{tool} $*" in
  "scontrol -o show job "*|"scontrol --local -o show job "*) cat "$d/job.txt" ;;
  "scontrol -o show node "*) cat "$d/node.txt" ;;
  "squeue "*) cat "$d/squeue.txt" ;;
  "scontrol update "*) ;;
  *) echo "bench fake {tool}: unexpected: $*" >&2; exit 1 ;;
esac
"""
UUID = "5b1b3a1e-1c1a-4d0e-9a5e-0000000000b1"
HOOK_CASES = ("prolog-slurmctld", "prolog", "task-prolog", "epilog", "epilog-slurmctld")


def _job_line(job_id: int, admin_comment: str) -> str:
    return (f"JobId={job_id} JobName=bench UserId=nobody(65534) GroupId=nogroup(65534) "
            "JobState=CONFIGURING Reason=None Requeue=1 Restarts=0 BatchFlag=0 "
            "Partition=trays NodeList=tray01 NumNodes=1 Features=(null) OverSubscribe=NO "
            f"WorkDir=/tmp AdminComment={admin_comment} StdOut=/dev/null\n")


def hook_setup(tmp: Path, rpc_ms: float = 0.0) -> tuple[Path, Path]:
    """A one-tray simulated site under ``tmp``: config, fabric file, slurm.conf, channel
    directory, canned Slurm whose every call takes ``rpc_ms`` (a slurmctld round trip).
    Returns (config file, fake Slurm directory)."""
    from imexctl import decision as dec
    from imexctl.fabric import simulated_tray, write_fabric_file
    from imexctl.topology import EXTRA_KEY

    slurm = tmp / "slurm"
    slurm.mkdir(parents=True)
    for tool in ("scontrol", "squeue"):
        (slurm / tool).write_text(FAKE_SLURM.format(tool=tool, dir=slurm))
        (slurm / tool).chmod(0o755)
    extra = json.dumps({EXTRA_KEY: {"cluster_uuid": UUID, "clique_id": 1, "gpu_count": 4,
                                    "state": "Completed", "observed": 1.0}},
                       separators=(",", ":"))
    (slurm / "node.txt").write_text(f"NodeName=tray01 NodeAddr=127.0.0.1 NodeHostName=tray01 "
                                    f"State=ALLOCATED Partitions=trays Extra={extra}\n")
    (slurm / "squeue.txt").write_text("")
    (slurm / "rpc-delay").write_text(f"{rpc_ms / 1000:.3f}" if rpc_ms > 0 else "")
    (tmp / "slurm.conf").write_text("ClusterName=bench\nSwitchType=switch/none\n"
                                    "NodeName=tray01 NodeAddr=127.0.0.1 CPUs=1\n")
    (tmp / "proc-devices").write_text("Character devices:\n195 nvidia\n"
                                      "234 nvidia-caps-imex-channels\n")
    (tmp / "dev/channels").mkdir(parents=True)
    write_fabric_file(tmp / "fabric.json", simulated_tray(UUID, 1))
    (tmp / "faults.json").write_text("{}")
    cfg = tmp / "imexctl.toml"
    cfg.write_text(f"""[paths]
state_dir = "{tmp}/state"
run_dir = "{tmp}/run"
log_file = "{tmp}/log/imexctl.log"
channel_dir = "{tmp}/dev/channels"
proc_devices = "{tmp}/proc-devices"
imex_binary = "{VENV_BIN}/imexctl-sim-imex"
imex_ctl_binary = "{VENV_BIN}/imexctl-sim-imex-ctl"
imex_persist_file = "{tmp}/imex-run/persist.dat"
slurm_conf = "{tmp}/slurm.conf"
slurm_bin_dir = "{slurm}"
munge_bin_dir = "{FAKE_MUNGE}"
controller_dir = "{tmp}/slurmctld"
[fabric]
source = "file"
file = "{tmp}/fabric.json"
[imex]
server_port_base = 20480
cmd_port_base = 24576
port_span = 4096
ready_timeout_s = 20
stop_grace_s = 10
[policy]
mode = "all"
[channels]
mode = "imexctl"
[slurm]
backend = "cli"
[sim]
faults_file = "{tmp}/faults.json"
sim_run_dir = "{tmp}/sim-run"
""")
    return cfg, slurm


def sealed_decision(job_id: int) -> str:
    """The decision PrologSlurmctld would record for ``job_id``, sealed with the unit
    tests' munge stand-in (a Python script: its start-up is counted in the prolog's
    children, not in imexctl's own CPU; bench/decision.py measures the real unmunge)."""
    from imexctl import decision as dec
    from imexctl.slurm.munge import MungeSeal

    return dec.encode(dec.Decision(job_id=job_id, action="domains", groups=(
        dec.GroupDecision(f"{UUID}.1", 7, ("tray01",)),), nodes_hash=dec.nodes_hash(["tray01"])),
        MungeSeal(FAKE_MUNGE, None, frozenset({0, os.getuid()})))


def run_hook(name: str, cfg: Path, slurm: Path, job_id: int, tmp: Path,
             importtime: bool = False) -> dict:
    """One hook run: wall ms, imexctl's own CPU ms, its children's CPU ms, exit code."""
    from imexctl import decision as dec

    text = "" if name == "prolog-slurmctld" else sealed_decision(job_id)
    assert name == "prolog-slurmctld" or dec.decode(text) is not None
    (slurm / "job.txt").write_text(_job_line(job_id, "" if name == "prolog-slurmctld" else text))
    (slurm / "squeue.txt").write_text(f"{job_id}|CONFIGURING\n")
    env = {"IMEXCTL_CONFIG": str(cfg), "LANG": "C.UTF-8", "PATH": "/usr/bin:/bin",
           "SLURM_JOB_ID": str(job_id), "SLURM_JOB_UID": "65534", "SLURM_JOB_USER": "nobody",
           "SLURM_JOB_GID": "65534", "SLURM_JOB_NODELIST": "tray01",
           "SLURM_JOB_PARTITION": "trays", "SLURMD_NODENAME": "tray01",
           "SLURM_JOB_EXCLUSIVE": "NODE"}
    if name == "task-prolog":
        env.update({"SLURM_STEP_ID": "0", "SLURM_JOB_NODELIST": "tray01"})
    out = tmp / "rusage"
    argv = [PY, *(["-X", "importtime"] if importtime else []), *START, "-c", PRELUDE + WRAP,
            str(out), name]
    err = tmp / ("importtime" if importtime else "stderr")
    if importtime:
        err.unlink(missing_ok=True)
    t0 = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, env, file_actions=[
        (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
        (os.POSIX_SPAWN_OPEN, 2, str(err), os.O_WRONLY | os.O_CREAT | os.O_APPEND,
         0o644)])
    _, status, usage = os.wait4(pid, 0)
    wall = (time.perf_counter() - t0) * 1000
    rc, own, children = out.read_text().split()
    return {"wall": wall, "own": float(own), "children": float(children), "rc": int(rc),
            "total": (usage.ru_utime + usage.ru_stime) * 1000}


def import_rows(stderr: str, count: int, skip: set[str]) -> list[tuple[int, str]]:
    """The ``count`` largest top-level imports (cumulative microseconds) in ``-X importtime``
    output, leaving out ``skip`` (what bare Python imports too: site and its .pth files)."""
    rows = []
    for line in stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            name = parts[2].rstrip()
            if (len(name) - len(name.lstrip())) // 2 <= 1 and name.strip() not in skip:
                rows.append((int(parts[1]), name.strip()))
    return sorted(rows, reverse=True)[:count]


def bench_hooks(tmp: Path, runs: int, rpc_ms: float
                ) -> tuple[dict[str, list[dict]], dict[str, list]]:
    """Every hook ``runs`` times (plus one uncounted warm-up), one job per round; then one
    more round under ``-X importtime``."""
    cfg, slurm = hook_setup(tmp, rpc_ms)
    results: dict[str, list[dict]] = {name: [] for name in HOOK_CASES + ("bare",)}
    for i in range(runs + 1):
        for name in HOOK_CASES:
            r = run_hook(name, cfg, slurm, 30000 + i, tmp)
            if r["rc"] != 0:
                raise SystemExit(f"{name} exited {r['rc']}: {(tmp / 'stderr').read_text()[-2000:]}")
            if i:
                results[name].append(r)
        wall, cpu, _ = spawn([PY, "-c", "pass"], {"PATH": "/usr/bin:/bin"})
        if i:   # bare Python in the same rounds: the hooks' "- bare" column
            results["bare"].append({"wall": wall, "own": cpu, "children": 0.0})
    bare = set(subprocess.run([PY, "-c", "import sys; print(' '.join(sys.modules))"],
                              capture_output=True, text=True, check=True).stdout.split())
    imports = {}
    for name in HOOK_CASES:
        run_hook(name, cfg, slurm, 30000 + runs + 1, tmp, importtime=True)
        imports[name] = import_rows((tmp / "importtime").read_text(), 6, bare)
    return results, imports


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=20, help="runs per command (median)")
    ap.add_argument("--hook-runs", type=int, default=10, help="runs per hook (median)")
    ap.add_argument("--rpc-ms", type=float, default=10.0,
                    help="how long each canned scontrol/squeue call of the hooks takes "
                         "(a slurmctld round trip; 0: instant)")
    ap.add_argument("--venv", type=Path,
                    help="measure another installation: a venv with imexctl installed as a "
                         "site installs it (/usr/bin/python3 -m venv DIR && DIR/bin/pip "
                         "install .) instead of this checkout's editable one (a path in a "
                         ".pth file, see pyproject.toml: both should cost the same). Make "
                         "it with the interpreter the hooks run on: a pyenv-built Python "
                         "runs the same code about 25%% slower than Debian's")
    args = ap.parse_args()
    global PY, VENV_BIN, START, PRELUDE
    if args.venv:
        VENV_BIN = args.venv.resolve() / "bin"
        PY = str(VENV_BIN / "python")
    if args.hook_runs < 1 or args.n < 1:
        ap.error("-n and --hook-runs must be at least 1")
    from imexctl.executable import is_fast_executable, site_paths
    fast = is_fast_executable(VENV_BIN / "imexctl")
    if fast:
        START, PRELUDE = ["-IS"], f"import sys\nsys.path += {site_paths(PY)!r}\n"
    with tempfile.TemporaryDirectory() as tmp:
        cfg, _ = hook_setup(Path(tmp) / "startup")
        nvml_cfg = Path(tmp) / "nvml.toml"
        nvml_cfg.write_text(cfg.read_text().replace('source = "file"', 'source = "nvml"'))
        # A clean environment (no PYTHONDONTWRITEBYTECODE): hooks run with byte code cached.
        env = {"PATH": "/usr/bin:/bin", "IMEXCTL_CONFIG": str(cfg), "LANG": "C.UTF-8",
               "SLURMD_NODENAME": "tray01"}
        imexctl = str(VENV_BIN / "imexctl")
        py = PY
        cases = [
            ("python -c pass (baseline)", [py, "-c", "pass"], env),
            ("imexctl --version", [imexctl, "--version"], env),
            ("imexctl config check", [imexctl, "config", "check"], env),
            ("imexctl status --json --local", [imexctl, "status", "--json", "--local"], env),
            ("status --json --local, with site", [py, "-c", SITE_ENTRY, "status", "--json",
                                                  "--local"], env),
            ("imexctl status --json", [imexctl, "status", "--json"], env),
            ("status --json --local, NVML", [imexctl, "status", "--json", "--local"],
             {**env, "IMEXCTL_CONFIG": str(nvml_cfg)}),
            ("import structlog (reference)", [py, "-P", "-c", "import structlog"], env),
            # imexctl's package first: it spares pathlib urllib.parse, as in every command;
            # started as the executable starts (-IS and its paths, when it is the fast one)
            ("import json, pathlib (floor)",
             [py, *START, "-c", PRELUDE + "import imexctl, json, pathlib"], env),
        ]
        results = measure(cases, args.n)
        hook_root = Path(tmp) / "hooks"
        hooks, imports = (bench_hooks(hook_root, args.hook_runs, args.rpc_ms)
                          if os.geteuid() == 0
                          else ({}, {}))
    base_w, base_c, base_m, _ = results[0][1:]
    print(f"{'command':32} {'wall ms':>8} {'x base':>7} {'paired':>7} {'CPU ms':>7} "
          f"{'x base':>7} {'+CPU ms':>8} {'peak MiB':>9}")
    for name, wall, cpu, mem, paired in results:
        print(f"{name:32} {wall:8.1f} {wall / base_w:7.2f} {paired:7.2f} {cpu:7.1f} "
              f"{cpu / base_c:7.2f} {cpu - base_c:8.1f} {mem:9.1f}")
    by_name = {name: (wall / base_w, paired) for name, wall, _, _, paired in results}

    def both(name: str) -> str:
        return "{:.2f}x (paired {:.2f}x)".format(*by_name[name])
    print("(paired: median of each run's ratio to bare Python in its own round; status --json "
          "asks the bench's shell scontrol once; NVML: fabric.source = nvml on this machine, "
          "pynvml imported, no GPU)")
    print(f"target status within {STATUS_X_BARE:g}x bare Python (wall): --local "
          f"{both('imexctl status --json --local')}, with Slurm "
          f"{both('imexctl status --json')}, NVML {both('status --json --local, NVML')}; the "
          f"stdlib status cannot do without (json for its state and output, pathlib for every "
          f"path) alone: {both('import json, pathlib (floor)')}")
    if not hooks:
        print("\nhooks: not measured (channel devices need root)")
        return 0
    med = {name: {k: statistics.median(r[k] for r in rs) for k in ("wall", "own", "children")}
           for name, rs in hooks.items()}
    bare_hooks = med.pop("bare")["own"]
    print(f"\nhooks against the simulator, one tray, shell scontrol/squeue taking "
          f"{args.rpc_ms:g} ms each (median of {args.hook_runs}); own = imexctl's process "
          "(RUSAGE_SELF), children = what it waited for (ctl checks, scontrol); the "
          f"daemon it starts is not counted; - bare: less bare Python's CPU in the same "
          f"rounds ({bare_hooks:.1f} ms)")
    print(f"{'hook':18} {'wall ms':>8} {'own CPU':>8} {'- bare':>7} {'children':>9} "
          f"{f'own <= {OWN_CPU_MS:g}':>10}")
    for name, m in med.items():
        print(f"{name:18} {m['wall']:8.1f} {m['own']:8.1f} {m['own'] - bare_hooks:7.1f} "
              f"{m['children']:9.1f} {verdict(m['own'] <= OWN_CPU_MS):>10}")
    print(f"target PrologSlurmctld <= {PROLOG_SLURMCTLD_MS:g} ms wall: "
          f"{med['prolog-slurmctld']['wall']:.1f} ms "
          f"({verdict(med['prolog-slurmctld']['wall'] <= PROLOG_SLURMCTLD_MS)}; with "
          f"{args.rpc_ms:g} ms per Slurm call)")
    print(f"target epilog <= {EPILOG_MS:g} ms wall per tray: {med['epilog']['wall']:.1f} ms "
          f"({verdict(med['epilog']['wall'] <= EPILOG_MS)})")
    print("largest imports per hook (cumulative ms, -X importtime, one run):")
    for name, rows in imports.items():
        print(f"  {name:18} " + ", ".join(f"{n} {us / 1000:.1f}" for us, n in rows))
    print(f"(runs per command: {args.n}, median; bare Python CPU {base_c:.1f} ms; "
          f"{VENV_BIN / 'imexctl'}: "
          f"{'python -IS (imexctl.executable)' if fast else 'pip console script, with site'}; "
          f"{os.cpu_count()} CPUs; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; {PY})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
