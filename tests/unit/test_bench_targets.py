"""The benchmarks print their targets from a run's figures: bench/lifecycle.py issue 12's
(the verdicts and the epilog's CPU budget per tray must follow the figures, not be written
in), bench/startup.py issue 27's absolute bounds and its baseline comparison as PASS/FAIL
rows. No timing is asserted: the figures are given."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load(name: str, file: str):
    # Loaded from its file, not through sys.path: bench/ holds modules whose names
    # (topology, chanalloc) must not shadow anything else a test imports.
    spec = importlib.util.spec_from_file_location(name, BENCH / file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


lifecycle = _load("bench_lifecycle", "lifecycle.py")
startup = _load("bench_startup", "startup.py")
targets = _load("bench_targets", "targets.py")


def imx(**kw):
    return {"alloc_up": 414, "early": 0, "jobs": 6, "pslurmctld_wall": 37, "epilog_wall": 95,
            **kw}


def base(**kw):
    return {"alloc_up": 15_107, "early": 6, "jobs": 6, "pslurmctld_wall": 2, "epilog_wall": 13,
            **kw}


def test_every_target_met_at_four_trays():
    lines = lifecycle.targets(4, {"imexctl": imx(), "baseline": base(),
                                  "python": {"epilog_wall": 31}}, 2)
    assert lines[0] == "targets at 4 trays:"
    assert all(line.count("(met)") == 1 for line in lines[1:]), lines
    assert "the target leaves 125.0 ms of CPU per tray" in lines[3]
    assert "no Python epilog" not in "\n".join(lines)


def test_misses_are_named_and_the_machine_bound_only_where_the_floor_exceeds_it():
    slow_up = lifecycle.targets(18, {"imexctl": imx(alloc_up=1_000, early=1),
                                     "baseline": base(alloc_up=850)}, 2)
    assert "(NOT met)" in slow_up[1] and "1 of 6 jobs early" in slow_up[1]

    at18 = lifecycle.targets(18, {"imexctl": imx(epilog_wall=391, pslurmctld_wall=51),
                                  "python": {"epilog_wall": 104}}, 2)
    assert "51 ms (NOT met)" in at18[1]
    assert "391 ms (NOT met)" in at18[2] and "27.8 ms of CPU per tray" in at18[2]
    assert "no Python epilog" not in at18[2]

    at72 = lifecycle.targets(72, {"imexctl": imx(epilog_wall=1_648),
                                  "python": {"epilog_wall": 387}}, 2)
    assert "6.9 ms of CPU per tray" in at72[2]
    assert at72[2].endswith("(no Python epilog meets the target at this size on this machine)")


def test_nothing_to_judge_without_imexctl():
    assert lifecycle.targets(4, {"baseline": base()}, 2) == []


def test_a_tray_never_gets_more_than_one_core():
    lines = lifecycle.targets(4, {"imexctl": imx(), "python": {"epilog_wall": 31}}, 16)
    assert "4 epilogs at once on 16 CPUs: the target leaves 250.0 ms of CPU per tray" in lines[2]


# ------------------------------------------------------------------ bench/startup.py


def test_the_bounds_are_absolute():
    assert targets.STATUS_CPU_MS == 40.0
    assert targets.OWN_CPU_MS == 50.0
    assert targets.BASELINE_X == pytest.approx(1.10)
    assert not hasattr(targets, "STATUS_X_BARE")


def _verdicts(lines):
    return {line.rsplit("  ", 1)[0].split("  ")[0].strip(): line.rsplit(None, 1)[1]
            for line in lines[1:]}


def test_checks_pass_and_fail_with_their_figures():
    lines = startup.checks(40.0, {"prolog": 50.0, "epilog": 50.1},
                           {"prolog": 1.10, "epilog": 1.101}, "abc1234")
    assert lines[0].split() == ["check", "figure", "bound", "verdict"]
    got = _verdicts(lines)
    assert got == {"status --json --local, CPU": "PASS", "prolog, own CPU": "PASS",
                   "epilog, own CPU": "FAIL", "prolog, own CPU / abc1234's": "PASS",
                   "epilog, own CPU / abc1234's": "FAIL"}
    text = "\n".join(lines)
    assert "40.0 ms" in text and "<= 40 ms" in text and "50.1 ms" in text
    assert "1.101x" in text and "<= 1.10x" in text


def test_checks_without_hooks_or_baseline():
    lines = startup.checks(40.1, {})
    assert len(lines) == 2 and lines[1].endswith("FAIL") and "40.1 ms" in lines[1]
    lines = startup.checks(12.0, {"prolog": 30.0})
    assert [line.split()[-1] for line in lines[1:]] == ["PASS", "PASS"]
    assert "/" not in "".join(lines[1:])


def test_baseline_ratio_pairs_the_rounds():
    # Round by round the new side costs 5 % more, while the machine's speed drifts: the
    # paired median says 1.05, whatever the medians of each side would say.
    this = {name: [{"own": 21.0}, {"own": 42.0}, {"own": 63.0}] for name in startup.HOOK_CASES}
    base = {name: [{"own": 20.0}, {"own": 40.0}, {"own": 60.0}] for name in startup.HOOK_CASES}
    this["prolog"] = [{"own": 30.0}, {"own": 40.0}, {"own": 50.0}]
    base["prolog"] = [{"own": 50.0}, {"own": 40.0}, {"own": 30.0}]
    got = startup.paired_ratios(this, base)
    assert set(got) == set(startup.HOOK_CASES)
    assert got["epilog"] == pytest.approx(1.05)
    assert got["prolog"] == pytest.approx(1.0)


def _stand_in(tmp_path: Path, main: str) -> Path:
    pkg = tmp_path / "tree" / "imexctl"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text(main)
    return tmp_path / "tree"


@pytest.mark.parametrize("main, rc", [
    ("import os, sys\nopen(sys.argv[1] + '.argv', 'w').write(' '.join(sys.argv))\n"
     "os._exit(3)\n", 3),
    ("import sys\nsys.exit(4)\n", 4),
    ("pass\n", 0),
])
def test_the_hook_wrapper_runs_the_package_main_and_reports_its_exit(tmp_path, main, rc):
    """The hooks start as `python -m imexctl` does (imexctl/__main__.py), by no other module
    name: a baseline commit may lay its modules out differently."""
    tree = _stand_in(tmp_path, main.replace("sys.argv[1]", repr(str(tmp_path / "seen"))))
    out = tmp_path / "rusage"
    prelude = f"import sys\nsys.path.insert(0, {str(tree)!r})\n"
    proc = subprocess.run([sys.executable, "-I", "-c", prelude + startup.WRAP, str(out),
                           "prolog"], capture_output=True, text=True)
    assert proc.returncode == rc, proc.stderr
    code, own, children = out.read_text().split()
    assert int(code) == rc and float(own) > 0 and float(children) >= 0
    if rc == 3:
        assert (tmp_path / "seen.argv").read_text() == "imexctl prolog"


def test_import_rows_read_one_level_below_the_package_main():
    stderr = "\n".join([
        "import time: self [us] | cumulative | imported package",
        "import time:       100 |        100 | imexctl",
        "import time:        50 |         50 |     json.decoder",
        "import time:       300 |       5000 |   json",
        "import time:        10 |         10 |       deep",
        "import time:       400 |       9000 |   imexctl.base.log",
        "import time:       100 |        200 |   site"])
    assert startup.import_rows(stderr, 6, {"site", "imexctl"}) == [
        (9000, "imexctl.base.log"), (5000, "json"), (50, "json.decoder")]


def test_baseline_worktree_is_made_and_dropped(tmp_path):
    repo = tmp_path / "repo"
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "f").write_text("one")
    subprocess.run([*git, "add", "f"], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    (repo / "f").write_text("two")
    subprocess.run([*git, "commit", "-qam", "two"], check=True)
    dest = tmp_path / "base"
    short = startup.worktree(repo, "HEAD~1", dest)
    assert (dest / "f").read_text() == "one" and (repo / "f").read_text() == "two"
    assert short == subprocess.run([*git, "rev-parse", "--short", "HEAD~1"], text=True,
                                   capture_output=True, check=True).stdout.strip()
    startup.drop_worktree(repo, dest)
    assert not dest.exists()
    assert str(dest) not in subprocess.run([*git, "worktree", "list"], text=True,
                                           capture_output=True, check=True).stdout
    with pytest.raises(SystemExit, match="not a commit"):
        startup.worktree(repo, "no-such-rev", tmp_path / "other")


def test_controller_hooks_against_fifty_ms_and_two_and_a_half_bare_pythons():
    """Issue 35: each controller hook at most 50 ms wall and 2.5x a bare Python hook of
    the same run; a line only where the run has the figures."""
    lines = lifecycle.targets(4, {"imexctl": imx(pslurmctld_wall=41, eslurmctld_wall=99),
                                  "python": {"epilog_wall": 33, "pslurmctld_wall": 10,
                                             "eslurmctld_wall": 40}}, 2)
    text = "\n".join(lines)
    assert "PrologSlurmctld <= 2.5x a bare Python hook's wall: 4.10x (41 against 10 ms) (NOT met)" in text
    assert "EpilogSlurmctld <= 50 ms wall: 99 ms (NOT met)" in text
    assert "EpilogSlurmctld <= 2.5x a bare Python hook's wall: 2.48x (99 against 40 ms) (met)" in text
    without = "\n".join(lifecycle.targets(4, {"imexctl": imx()}, 2))
    assert "EpilogSlurmctld" not in without and "bare Python hook" not in without


# ------------------------------------------------------- bench/lifecycle.py, persistent


def _medians(**kw):
    got = {key: None for _, key in lifecycle.ROWS}
    return {**got, "early": 0, "never": 0, "nochannel": 0, "failed": 0, "jobs": 2, **kw}


def test_the_persistent_mode_is_printed_beside_the_others_with_its_bring_up(capsys):
    """Issue 37: imexctl-persistent in the same table as python and imexctl, with its
    ratios to them, its per-tray prolog steps, and the bring-up of the persistent domain
    on a line of its own (not a job's cost)."""
    res = {"python": _medians(alloc_run=150.0, load=(0.4, 0.5)),
           "imexctl": _medians(alloc_run=620.0, alloc_up=380.0, load=(0.4, 0.5)),
           lifecycle.PERSISTENT: _medians(
               alloc_run=310.0, alloc_up=120.0, nochannel=1, load=(0.5, 0.9),
               tray_steps={"context": 8.7, "persistent-ready": 16.2},
               bring_up={"recover": 403.0, "health": 1_020.0, "up": 1_377.0,
                         "walls": [380.0, 395.0, 370.0], "health_walls": [600.0, 610.0, 590.0],
                         "nudged": 3, "trays": 4})}
    lifecycle.report(4, res, clean=True)
    out = capsys.readouterr().out
    head = next(line for line in out.splitlines() if "persist" in line and "imx/py" in line)
    assert head.split() == ["python", "imexctl", "persist", "imx/py", "pers/imx", "pers/py"]
    run = next(line for line in out.splitlines() if line.startswith("allocation -> job running"))
    assert run.split()[-6:] == ["150", "620", "310", "4.13x", "0.50x", "2.07x"]
    channel = next(line for line in out.splitlines() if line.startswith("jobs started without"))
    assert channel.split()[-3:] == ["-", "0/2", "1/2"]
    assert "persist.dat removed before every job (not under the persistent domain)" in out
    assert "persist prolog steps per tray, medians in ms (trays' log, step done): " \
           "context 8.7, persistent-ready 16.2" in out
    assert "load (1 min) persist: 0.50 at its start, 0.90 at its end" in out
    assert ("persistent domain bring-up (4 trays, `imexctl recover` on every tray at once, "
            "then one `imexctl health` on every tray at once, as slurmd's HealthCheckProgram "
            "runs it; not a job's cost): -N UP on every tray 1,377 ms after the first recover "
            "began; every recover returned 403 ms after it (each 380 ms median, 395 max), "
            "every health 1,020 ms (each 600 ms median, 610 max; 3 of 4 sent SIGUSR1)") in out


def test_a_domain_that_never_came_up_is_said_so():
    line = lifecycle.bring_up_line({"recover": 1_216.0, "health": None, "up": None,
                                    "walls": [661.0], "health_walls": [], "nudged": 0,
                                    "trays": 18})
    assert ("recover` on every tray at once, no health run after it: IMEX's own reconnect "
            "back-off; not a job's cost): -N UP on every tray never (in the poll's limit) "
            "after the first recover began; every recover returned 1,216 ms after it (each "
            "661 ms median, 661 max)") == line.split("(18 trays, `imexctl ", 1)[1]


class _Boot:
    """The harness as bring_up_persistent uses it: each tray's ``imexctl`` and
    HealthCheckProgram, and the persistent daemon's ``-N`` (UP once ``up_after`` has run on
    every tray). Records the order of the calls."""

    def __init__(self, tmp_path, up_after: str):
        self.trays, self.state_dir, self.sim_ctl = ["tray01", "tray02", "tray03"], tmp_path, "ctl"
        self.calls: list[tuple[str, str]] = []
        self.up_after = up_after

    def imexctl(self, tray, *args, timeout=30):
        self.calls.append((args[0], tray))
        if args[0] == "identity":
            return "published imex.lifetime persistent"
        return "repaired: started the persistent IMEX domain (clique c1, 3 trays)"

    def run_healthcheck(self, tray):
        self.calls.append(("health", tray))
        said = "sent SIGUSR1 to the persistent nvidia-imex (pid 7)" if tray != "tray03" else ""
        return subprocess.CompletedProcess([], 0, said, "")

    def exec_on(self, tray, argv):
        done = {t for what, t in self.calls if what == self.up_after}
        status = "UP" if done == set(self.trays) else "DEGRADED"
        return subprocess.CompletedProcess(argv, 0, f'{{"status": "{status}"}}', "")


def test_the_bring_up_is_recover_on_every_tray_then_one_health_run_on_every_tray(tmp_path):
    """A site's bring-up: every tray's recover (its boot unit) has returned before any
    health run (slurmd's HealthCheckProgram) starts, each tray gets one, and UP is timed
    from the first recover's start; the health runs that nudged are counted."""
    boot = _Boot(tmp_path, up_after="health")
    got = lifecycle.bring_up_persistent(boot)
    order = [what for what, _ in boot.calls]
    assert order == ["identity"] * 3 + ["recover"] * 3 + ["health"] * 3
    assert sorted(t for what, t in boot.calls if what == "health") == boot.trays
    assert got["nudged"] == 2 and got["trays"] == 3
    assert len(got["walls"]) == len(got["health_walls"]) == 3
    assert 0 <= got["recover"] <= got["health"] <= got["up"]


def test_recover_only_brings_the_domain_up_without_a_health_run(tmp_path):
    boot = _Boot(tmp_path, up_after="recover")
    got = lifecycle.bring_up_persistent(boot, health=False)
    assert "health" not in [what for what, _ in boot.calls]
    assert got["health"] is None and got["health_walls"] == [] and got["nudged"] == 0
    assert got["up"] is not None and got["recover"] <= got["up"]


def test_the_persistent_lifetime_is_set_and_taken_back(tmp_path):
    """The bench switches the trays' imexctl.toml to the persistent lifetime and back to
    the harness's own file, byte for byte."""
    etc = tmp_path / "etc"
    etc.mkdir()
    toml = etc / "imexctl.toml"
    own = '[paths]\nrun_dir = "/r"\n\n[imex]\nready_timeout_s = 15\n'
    toml.write_text(own)
    cluster = type("C", (), {"state_dir": tmp_path})()
    lifecycle.persistent_lifetime(cluster, True)
    lifecycle.persistent_lifetime(cluster, True)
    assert toml.read_text() == own.replace("[imex]\n", '[imex]\nlifetime = "persistent"\n')
    lifecycle.persistent_lifetime(cluster, False)
    assert toml.read_text() == own
