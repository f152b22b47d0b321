"""Start-up and per-hook cost of imexctl: every job start pays it on every tray.

Part 1, start-up: for each command the median wall time, CPU time (user + sys) and peak
RSS over N runs, next to a bare `python -c pass` with the same interpreter, with ratios,
all in one run: `--version`, `config check`, `status --json` with `--local` (target: at
most 40 ms of CPU on the reference machine) and with its one Slurm query, status with
fabric from NVML, `import structlog` for reference (what imexctl.base.log avoids paying), and
`import imexctl, json, pathlib`: the standard library status cannot do without (its state
files and output are JSON, its paths pathlib; both load `re`) as imexctl loads it.

Part 2, hooks (root: channel devices): each hook as Slurm runs it (the imexctl CLI and the
hook's environment), in job order PrologSlurmctld, Prolog, TaskProlog, Epilog,
EpilogSlurmctld, against the simulated daemon (one tray) and shell stand-ins for
`scontrol`/`squeue` that answer at once from canned records, so no Slurm is needed. A
wrapper reports imexctl's own CPU (getrusage RUSAGE_SELF) apart from the children it
waited for (ctl checks, scontrol). Targets: own CPU <= 50 ms per hook, PrologSlurmctld
<= 50 ms wall, epilog <= 250 ms wall. Then the largest imports of each hook.

`--baseline REV` (part 2): checks REV out into a temporary `git worktree` and runs its
hooks in the same rounds as this checkout's, taking turns; target: each hook's own CPU
within 10 % of REV's (the median of the per-round ratios). Both sides start the hooks the
same way, as `python -m imexctl` does (`import imexctl.__main__`), REV's tree first on
the path, so REV may lay its modules out differently.

The end of the report: every check as a row, PASS or FAIL, with its figure.

Usage: .venv/bin/python bench/startup.py [-n 20] [--hook-runs 10] [--baseline REV]
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

BENCH = Path(__file__).resolve().parent
if str(BENCH) not in sys.path:   # its sibling targets.py, when loaded from its file (tests)
    sys.path.append(str(BENCH))

from targets import (BASELINE_X, EPILOG_MS, OWN_CPU_MS, PROLOG_SLURMCTLD_MS,  # noqa: E402
                     STATUS_CPU_MS, pass_fail, verdict)

VENV_BIN = Path(sys.executable).parent
FAKE_MUNGE = Path(__file__).resolve().parents[1] / "tests" / "unit" / "data" / "fakemunge"
PY = sys.executable    # --venv: another installation's interpreter
# How the hooks start Python: as the installation's imexctl executable does (-IS and its
# baked paths when `python -m imexctl.cli.executable` wrote it, else pip's script with site).
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
# What `python -m imexctl` does (imexctl/__main__.py: the entry, which ends in os._exit),
# with the rusage written on the way out: by module name only the package and its
# __main__, so a baseline commit may lay out its modules differently.
WRAP = """
import os, resource, sys
def _report(rc=0, _exit=os._exit, _out=sys.argv[1]):
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(_out, "w") as out:
        out.write(f"{rc} {(s.ru_utime + s.ru_stime) * 1000} {(c.ru_utime + c.ru_stime) * 1000}")
    _exit(rc)
os._exit = _report
sys.argv = ["imexctl", *sys.argv[2:]]
try:
    import imexctl.__main__
except SystemExit as exc:
    _report(exc.code if isinstance(exc.code, int) else 1)
_report(0)
"""
# pip's console script, for comparison with the -IS executable: the same entry with site.
SITE_ENTRY = "import sys; sys.argv[0] = 'imexctl'; import imexctl.__main__"
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
            "SubmitTime=1795335854 "
            "Partition=trays NodeList=tray01 NumNodes=1 Features=(null) OverSubscribe=NO "
            f"WorkDir=/tmp AdminComment={admin_comment} StdOut=/dev/null\n")


def hook_setup(tmp: Path, rpc_ms: float = 0.0, sim_section: bool = False,
               munge_key: bool = True) -> tuple[Path, Path]:
    """A one-tray simulated site under ``tmp``: config, fabric file, slurm.conf, channel
    directory, canned Slurm whose every call takes ``rpc_ms`` (a slurmctld round trip).
    The simulator's knobs go in ``[imex] environment_file``, or with ``sim_section`` in
    the ``[sim]`` section a baseline from before that key reads; ``munge_key`` False
    leaves out ``paths.munge_bin_dir`` for a baseline from before the sealed decision.
    Returns (config file, fake Slurm directory)."""
    from tests.support.fabric import simulated_tray, write_fabric_file
    from imexctl.rules.cliques import EXTRA_KEY

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
    (tmp / "imex.env").write_text(f"IMEXCTL_SIM_FAULTS={tmp}/faults.json\n"
                                  f"IMEXCTL_SIM_RUN_DIR={tmp}/sim-run\n")
    knobs = (f'[sim]\nfaults_file = "{tmp}/faults.json"\nsim_run_dir = "{tmp}/sim-run"\n'
             if sim_section else "")
    env_key = "" if sim_section else f'environment_file = "{tmp}/imex.env"\n'
    munge = f'munge_bin_dir = "{FAKE_MUNGE}"\n' if munge_key else ""
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
{munge}controller_dir = "{tmp}/slurmctld"
[fabric]
source = "file"
file = "{tmp}/fabric.json"
[imex]
server_port_base = 20480
cmd_port_base = 24576
port_span = 4096
ready_timeout_s = 20
stop_grace_s = 10
{env_key}[policy]
mode = "all"
[channels]
mode = "imexctl"
[slurm]
backend = "cli"
{knobs}""")
    return cfg, slurm


def sealed_decision(job_id: int) -> str:
    """The decision PrologSlurmctld would record for ``job_id``, sealed with the unit
    tests' munge stand-in (a Python script: its start-up is counted in the prolog's
    children, not in imexctl's own CPU; bench/decision.py measures the real unmunge)."""
    from imexctl.rules import decision as dec
    from imexctl.slurm.munge import MungeSeal

    bound = {"cluster": "bench"} if getattr(dec, "VERSION", 2) >= 3 else {}   # slurm.conf's
    return dec.encode(dec.Decision(job_id=job_id, action="domains", groups=(
        dec.GroupDecision(f"{UUID}.1", 7, ("tray01",)),), nodes_hash=dec.nodes_hash(["tray01"]),
        **bound), MungeSeal(FAKE_MUNGE, None, frozenset({0, os.getuid()})))


def run_hook(name: str, cfg: Path, slurm: Path, job_id: int, tmp: Path,
             importtime: bool = False, prelude: str | None = None) -> dict:
    """One hook run: wall ms, imexctl's own CPU ms, its children's CPU ms, exit code.
    ``prelude``: Python run before the hook (default: how the executable sets the path)."""
    from imexctl.rules import decision as dec

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
    out.unlink(missing_ok=True)
    argv = [PY, *(["-X", "importtime"] if importtime else []), *START, "-c",
            (PRELUDE if prelude is None else prelude) + WRAP, str(out), name]
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


def import_rows(stderr: str, count: int, skip: set[str], depth: int = 2
                ) -> list[tuple[int, str]]:
    """The ``count`` largest imports down to ``depth`` (cumulative microseconds) in ``-X
    importtime`` output, leaving out ``skip`` (what bare Python imports too: site and its
    .pth files). The hook runs inside the import of ``imexctl.__main__`` (WRAP), one level
    down, and never finishes it (os._exit), so that line is never printed."""
    rows = []
    for line in stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            name = parts[2].rstrip()
            if (len(name) - len(name.lstrip())) // 2 <= depth and name.strip() not in skip:
                rows.append((int(parts[1]), name.strip()))
    return sorted(rows, reverse=True)[:count]


def bench_hooks(tmp: Path, runs: int, rpc_ms: float, preludes: dict[str, str] | None = None,
                sim_sections: frozenset[str] = frozenset(), unsealed: frozenset[str] = frozenset()
                ) -> tuple[dict[str, dict[str, list[dict]]], dict[str, list]]:
    """Every hook ``runs`` times (plus one uncounted warm-up), one job per round, per side:
    ``preludes`` maps a side ("this", a baseline) to the Python that sets its path (default:
    this checkout alone). The sides take turns within each round, each on a site of its
    own, the first side rotating, so a drift in the machine's speed slows them alike. Then
    one more round of the first side under ``-X importtime``. Returns per side per hook the
    runs (one per round, in round order, so side by side they pair), and a "bare" Python
    per round under the first side."""
    preludes = preludes or {"this": PRELUDE}
    sides = list(preludes)
    sites = {side: (tmp / f"side{k}", *hook_setup(tmp / f"side{k}", rpc_ms, side in sim_sections,
                                                  side not in unsealed))
             for k, side in enumerate(sides)}
    results: dict[str, dict[str, list[dict]]] = {
        side: {name: [] for name in HOOK_CASES} for side in sides}
    results[sides[0]]["bare"] = []
    job = 30000
    for i in range(runs + 1):
        for side in sides[i % len(sides):] + sides[:i % len(sides)]:
            root, cfg, slurm = sites[side]
            job += 1
            for name in HOOK_CASES:
                r = run_hook(name, cfg, slurm, job, root, prelude=preludes[side])
                if r["rc"] != 0:
                    raise SystemExit(f"{side}: {name} exited {r['rc']}: "
                                     f"{(root / 'stderr').read_text()[-2000:]}")
                if i:
                    results[side][name].append(r)
        wall, cpu, _ = spawn([PY, "-c", "pass"], {"PATH": "/usr/bin:/bin"})
        if i:   # bare Python in the same rounds: the hooks' "- bare" column
            results[sides[0]]["bare"].append({"wall": wall, "own": cpu, "children": 0.0})
    bare = set(subprocess.run([PY, "-c", "import sys; print(' '.join(sys.modules))"],
                              capture_output=True, text=True, check=True).stdout.split())
    imports = {}
    root, cfg, slurm = sites[sides[0]]
    for name in HOOK_CASES:
        run_hook(name, cfg, slurm, job + 1, root, importtime=True, prelude=preludes[sides[0]])
        imports[name] = import_rows((root / "importtime").read_text(), 6,
                                    bare | {"imexctl", "resource"})
    return results, imports


def paired_ratios(this: dict[str, list[dict]], base: dict[str, list[dict]]
                  ) -> dict[str, float]:
    """Per hook, the median over rounds of this side's own CPU over the baseline's in the
    same round."""
    return {name: statistics.median(a["own"] / b["own"] for a, b in zip(this[name], base[name]))
            for name in HOOK_CASES if this.get(name) and base.get(name)}


def checks(status_cpu: float, own: dict[str, float], vs_base: dict[str, float] | None = None,
           rev: str = "") -> list[str]:
    """The start-up targets as rows to print, each with its figure, its bound and PASS or
    FAIL: status --json --local's CPU, each hook's own CPU, and with a baseline each hook's
    own CPU as a ratio to ``rev``'s (measured in the same run)."""
    rows = [("status --json --local, CPU", f"{status_cpu:.1f} ms", f"<= {STATUS_CPU_MS:g} ms",
             status_cpu <= STATUS_CPU_MS)]
    rows += [(f"{name}, own CPU", f"{ms:.1f} ms", f"<= {OWN_CPU_MS:g} ms", ms <= OWN_CPU_MS)
             for name, ms in own.items()]
    rows += [(f"{name}, own CPU / {rev}'s", f"{x:.3f}x", f"<= {BASELINE_X:.2f}x",
              x <= BASELINE_X) for name, x in (vs_base or {}).items()]
    width = max(len(r[0]) for r in rows)
    return ([f"{'check':{width}} {'figure':>10} {'bound':>10}  verdict"]
            + [f"{name:{width}} {fig:>10} {bound:>10}  {pass_fail(ok)}"
               for name, fig, bound, ok in rows])


def worktree(repo: Path, rev: str, dest: Path) -> str:
    """``rev`` checked out (detached) into ``dest`` as a git worktree of ``repo``; its short
    id. The caller removes it (:func:`drop_worktree`)."""
    short = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", f"{rev}^{{commit}}"],
                           capture_output=True, text=True)
    if short.returncode != 0:
        raise SystemExit(f"--baseline {rev}: not a commit of {repo}: {short.stderr.strip()}")
    subprocess.run(["git", "-C", str(repo), "worktree", "add", "--detach", "--quiet",
                    str(dest), rev], check=True)
    return short.stdout.strip()


def drop_worktree(repo: Path, dest: Path) -> None:
    subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(dest)],
                   capture_output=True)
    subprocess.run(["git", "-C", str(repo), "worktree", "prune"], capture_output=True)


def stop_leftovers(root: Path) -> None:
    """Kill what a failed hook round left running under ``root`` (a simulated daemon whose
    epilog never ran): it would hold its ports and break the next run's prologs."""
    import signal

    for pid_dir in Path("/proc").iterdir():
        if not pid_dir.name.isdigit():
            continue
        try:
            argv = (pid_dir / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(str(root).encode() in arg for arg in argv):
            try:
                os.kill(int(pid_dir.name), signal.SIGKILL)
            except OSError:
                pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=20, help="runs per command (median)")
    ap.add_argument("--hook-runs", type=int, default=10, help="runs per hook (median)")
    ap.add_argument("--rpc-ms", type=float, default=10.0,
                    help="how long each canned scontrol/squeue call of the hooks takes "
                         "(a slurmctld round trip; 0: instant)")
    ap.add_argument("--baseline", metavar="REV",
                    help="also run the hooks of this git revision (a temporary git worktree "
                         "of this checkout), in the same rounds, and check each hook's own "
                         f"CPU within {(BASELINE_X - 1) * 100:.0f}%% of it (needs root)")
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
    if args.baseline and os.geteuid() != 0:
        ap.error("--baseline compares the hooks, which need root (channel devices)")
    from imexctl.base.executable import is_fast_executable, site_paths
    fast = is_fast_executable(VENV_BIN / "imexctl")
    if fast:
        START, PRELUDE = ["-IS"], f"import sys\nsys.path += {site_paths(PY)!r}\n"
    repo = BENCH.parent
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
            # imexctl's package first, as in every command; started as the executable
            # starts (-IS and its paths, when it is the fast one)
            ("import json, pathlib (floor)",
             [py, *START, "-c", PRELUDE + "import imexctl, json, pathlib"], env),
        ]
        results = measure(cases, args.n)
        hook_root = Path(tmp) / "hooks"
        preludes = {"this": PRELUDE}
        rev = ""
        sim_sections: frozenset[str] = frozenset()
        unsealed: frozenset[str] = frozenset()
        if args.baseline:
            tree = Path(tmp) / "baseline-tree"
            rev = worktree(repo, args.baseline, tree)
            preludes[rev] = f"import sys\nsys.path.insert(0, {str(tree)!r})\n" + PRELUDE
            # a commit from before imex.environment_file reads the simulator's [sim] keys
            if "class Sim:" in (tree / "imexctl" / "config.py").read_text():
                sim_sections = frozenset({rev})
            # one from before the sealed decision has no munge_bin_dir, and its node
            # prologs read an unsealed record
            if "munge_bin_dir" not in (tree / "imexctl" / "config.py").read_text():
                unsealed = frozenset({rev})
        try:
            hooks, imports = (bench_hooks(hook_root, args.hook_runs, args.rpc_ms, preludes,
                                          sim_sections, unsealed)
                              if os.geteuid() == 0
                              else ({}, {}))
        finally:
            stop_leftovers(hook_root)
            if args.baseline:
                drop_worktree(repo, tree)
    base_w, base_c, base_m, _ = results[0][1:]
    print(f"{'command':32} {'wall ms':>8} {'x base':>7} {'paired':>7} {'CPU ms':>7} "
          f"{'x base':>7} {'+CPU ms':>8} {'peak MiB':>9}")
    for name, wall, cpu, mem, paired in results:
        print(f"{name:32} {wall:8.1f} {wall / base_w:7.2f} {paired:7.2f} {cpu:7.1f} "
              f"{cpu / base_c:7.2f} {cpu - base_c:8.1f} {mem:9.1f}")
    status_cpu = {name: cpu for name, _, cpu, _, _ in results}["imexctl status --json --local"]
    print("(paired: median of each run's wall ratio to bare Python in its own round; status "
          "--json asks the bench's shell scontrol once; NVML: fabric.source = nvml on this "
          "machine, pynvml imported, no GPU)")
    footer = (f"(runs per command: {args.n}, median; bare Python CPU {base_c:.1f} ms; "
              f"{VENV_BIN / 'imexctl'}: "
              f"{'python -IS (imexctl.cli.executable wrote it)' if fast else 'pip console script, with site'}; "
              f"{os.cpu_count()} CPUs; load average "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; {PY})")
    if not hooks:
        print("\nhooks: not measured (channel devices need root)\n")
        print("\n".join(checks(status_cpu, {})))
        print(footer)
        return 0
    this = hooks["this"]
    med = {name: {k: statistics.median(r[k] for r in rs) for k in ("wall", "own", "children")}
           for name, rs in this.items()}
    bare_hooks = med.pop("bare")["own"]
    print(f"\nhooks against the simulator, one tray, shell scontrol/squeue taking "
          f"{args.rpc_ms:g} ms each (median of {args.hook_runs}); own = imexctl's process "
          "(RUSAGE_SELF), children = what it waited for (ctl checks, scontrol); the "
          f"daemon it starts is not counted; - bare: less bare Python's CPU in the same "
          f"rounds ({bare_hooks:.1f} ms)")
    vs_base = paired_ratios(this, hooks[rev]) if rev else {}
    base_own = ({name: statistics.median(r["own"] for r in hooks[rev][name])
                 for name in HOOK_CASES} if rev else {})
    extra = f" {f'{rev} own':>12} {'paired x':>9}" if rev else ""
    print(f"{'hook':18} {'wall ms':>8} {'own CPU':>8} {'- bare':>7} {'children':>9}{extra}")
    for name, m in med.items():
        extra = f" {base_own[name]:12.1f} {vs_base[name]:9.3f}" if rev else ""
        print(f"{name:18} {m['wall']:8.1f} {m['own']:8.1f} {m['own'] - bare_hooks:7.1f} "
              f"{m['children']:9.1f}{extra}")
    if rev:
        print(f"({rev}: git worktree of {args.baseline}, its hooks in the same rounds, taking "
              "turns; paired x: median over rounds of this checkout's own CPU over "
              f"{rev}'s in the same round)")
    print(f"target PrologSlurmctld <= {PROLOG_SLURMCTLD_MS:g} ms wall: "
          f"{med['prolog-slurmctld']['wall']:.1f} ms "
          f"({verdict(med['prolog-slurmctld']['wall'] <= PROLOG_SLURMCTLD_MS)}; with "
          f"{args.rpc_ms:g} ms per Slurm call)")
    print(f"target epilog <= {EPILOG_MS:g} ms wall per tray: {med['epilog']['wall']:.1f} ms "
          f"({verdict(med['epilog']['wall'] <= EPILOG_MS)})")
    print("largest imports per hook (cumulative ms, -X importtime, one run):")
    for name, rows in imports.items():
        print(f"  {name:18} " + ", ".join(f"{n} {us / 1000:.1f}" for us, n in rows))
    print()
    print("\n".join(checks(status_cpu, {name: m["own"] for name, m in med.items()},
                           vs_base, rev)))
    print(footer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
