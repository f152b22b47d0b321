"""`imexctl status` (node view): idle, live domain by tray, corrupt record, leaks, channel0,
identity drift, drains, stale domains, IMEX expected, a dead slurmctld."""

import json
import os
import stat
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from imexctl.config import parse_config
from tests.support.fabric import simulated_tray, write_fabric_file
from imexctl.tray.ownership import DaemonIdentity, StateStore
from imexctl.cli.display import status_json as render_json
from imexctl.cli.display import status_table as render_table
from imexctl.ops.status import collect
from tests.support.records import make_record
from tests.support.status import UUID, slurm_world
from tests.support.memory_slurm import job_record


def cfg_for(tmp_path):
    return parse_config({"paths": {"state_dir": f"{tmp_path}/state",
                                   "run_dir": f"{tmp_path}/run",
                                   "channel_dir": f"{tmp_path}/ch",
                                   "slurm_conf": f"{tmp_path}/no-slurm.conf",
                                   "imex_ctl_binary": f"{tmp_path}/no-ctl"}},
                        None, "tray01")


def test_idle_node(tmp_path):
    status = collect(cfg_for(tmp_path))
    assert status["state"] == "idle" and status["domain"] is None and status["problems"] == []
    assert "domain:        none" in render_table(status)
    assert json.loads(render_json(status))["node"] == "tray01"


def test_record_with_dead_daemon_and_leaked_channel(tmp_path):
    cfg = cfg_for(tmp_path)
    (tmp_path / "ch").mkdir()
    (tmp_path / "ch/channel3").write_text("")  # stands in for a leaked node in listing
    StateStore(cfg.paths.state_dir).save(make_record(
        channel=8, daemon=DaemonIdentity(pid=999999, create_time=1.0, exe="/x")))
    status = collect(cfg)
    assert status["state"] == "degraded"
    assert status["domain"]["daemon"]["alive"] is False
    assert "daemon pid 999999 is not running" in status["problems"]
    assert "leaked channel3" in status["problems"]
    assert any("channel8 missing" in p for p in status["problems"])
    table = render_table(status)
    assert "job:           7 (user nobody, uid 65534)" in table and "NOT RUNNING" in table


def test_live_daemon_is_reported_alive(tmp_path):
    cfg = cfg_for(tmp_path)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        ps = psutil.Process(proc.pid)
        StateStore(cfg.paths.state_dir).save(make_record(
            channel=None, daemon=DaemonIdentity(pid=proc.pid, create_time=ps.create_time(),
                                                exe=ps.exe())))
        status = collect(cfg, live=True)
        assert status["domain"]["daemon"]["alive"] is True
        # ctl binary is missing: the live query reports it instead of crashing
        assert any("cannot run" in p for p in status["problems"])
    finally:
        proc.kill()
        proc.wait()


# --------------------------------------------------------------------------- live view


def fake_ctl(tmp_path, domain: dict, local: str = "READY"):
    """An nvidia-imex-ctl stand-in printing a fixed -q word and -N -j document."""
    path = tmp_path / "ctl"
    path.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import json, sys
        if "-q" in sys.argv:
            print({local!r})
        else:
            print(json.dumps({domain!r}))
        """))
    path.chmod(0o755)
    return path


def member(host, status="READY", conns=None):
    return {"host": host, "status": status, "version": "580.95.05",
            "connections": {str(i): {"host": h, "status": s}
                            for i, (h, s) in enumerate(conns or [])}}


def live_setup(tmp_path, domain, fabric_clique=1):
    ctl = fake_ctl(tmp_path, domain)
    write_fabric_file(tmp_path / "fabric.json", simulated_tray(UUID, fabric_clique))
    cfg = parse_config({"paths": {"state_dir": f"{tmp_path}/state", "run_dir": f"{tmp_path}/run",
                                  "channel_dir": f"{tmp_path}/ch",
                                  "imex_ctl_binary": str(ctl)},
                        "fabric": {"source": "file", "file": f"{tmp_path}/fabric.json"}},
                       None, "tray01")
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    ps = psutil.Process(proc.pid)
    StateStore(cfg.paths.state_dir).save(make_record(
        channel=None, phase="ready", job_dir=str(tmp_path / "run/job-7"),
        nodes=["tray01", "tray02", "tray03"], addresses=["10.0.0.1", "10.0.0.2", "10.0.0.3"],
        daemon=DaemonIdentity(pid=proc.pid, create_time=ps.create_time(), exe=ps.exe())))
    return cfg, proc


@pytest.fixture
def procs():
    started = []
    yield started
    for p in started:
        p.kill()
        p.wait()


def test_live_view_names_missing_tray_and_mismatch(tmp_path, procs):
    domain = {"status": "DEGRADED", "nodes": {
        "0": member("10.0.0.1", conns=[("10.0.0.1", "CONNECTED"), ("10.0.0.2", "CONNECTED"),
                                       ("10.0.0.3", "NODE_MAP_MISMATCH")]),
        "1": member("10.0.0.2", conns=[("10.0.0.1", "CONNECTED"), ("10.0.0.2", "CONNECTED"),
                                       ("10.0.0.3", "INVALID")]),
        "2": member("10.0.0.3", status="UNAVAILABLE")}}
    cfg, proc = live_setup(tmp_path, domain)
    procs.append(proc)
    t0 = 1_800_000_000.0
    status = collect(cfg, now=t0)
    dom = status["domain"]
    assert status["state"] == "degraded" and dom["domain_state"] == "DEGRADED"
    assert [(m["node"], m["status"]) for m in dom["members"]] == [
        ("tray01", "READY"), ("tray02", "READY"), ("tray03", "UNAVAILABLE")]
    assert dom["missing"] == [{"node": "tray03", "host": "10.0.0.3", "status": "UNAVAILABLE",
                               "since": t0}]
    assert dom["mismatches"] == [{"from": "tray01", "to": "tray03", "marker": "!M!",
                                  "since": t0}]
    assert any(p.startswith("tray03 (10.0.0.3) UNAVAILABLE since") for p in status["problems"])
    assert any(p.startswith("!M! node map mismatch tray01->tray03") for p in status["problems"])
    # a later run keeps the first-seen time: "missing since when"
    later = collect(cfg, now=t0 + 120)
    assert later["domain"]["missing"][0]["since"] == t0
    table = render_table(later)
    assert "tray03       10.0.0.3         UNAVAILABLE" in table
    assert "links: tray03 NODE_MAP_MISMATCH" in table
    assert "IMEX expected: yes (up, job 7" in table
    assert status["expected"]["imex_expected"] is True and status["decision"]["source"] == "fallback"


def test_live_view_all_up_clears_seen(tmp_path, procs):
    hosts = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    up = {"status": "UP", "nodes": {str(i): member(h, conns=[(x, "CONNECTED") for x in hosts])
                                    for i, h in enumerate(hosts)}}
    down = json.loads(json.dumps(up))
    down["status"], down["nodes"]["1"]["status"] = "DEGRADED", "UNAVAILABLE"
    cfg, proc = live_setup(tmp_path, down)
    procs.append(proc)
    assert collect(cfg)["domain"]["missing"][0]["node"] == "tray02"
    assert "tray02 UNAVAILABLE" in json.loads(
        (cfg.paths.state_dir / "status-seen.json").read_text())["seen"]
    fake_ctl(tmp_path, up)
    status = collect(cfg)
    assert status["state"] == "ready" and status["problems"] == []
    assert status["domain"]["missing"] == [] and status["domain"]["mismatches"] == []
    assert json.loads((cfg.paths.state_dir / "status-seen.json").read_text())["seen"] == {}


@pytest.mark.parametrize("body", [b"{not json", b"\xff\xfe", b'"a string"', b"[]",
                                  b'{"job_id": "abc", "nodes": []}', b'{"job_id": 7}'])
def test_corrupt_record_is_reported_not_raised(tmp_path, body):
    cfg = cfg_for(tmp_path)
    (tmp_path / "state").mkdir()
    (tmp_path / "state/domain.json").write_bytes(body)
    status = collect(cfg)
    assert status["state"] == "record-unreadable"
    assert any("ownership record" in p for p in status["problems"]), status["problems"]
    assert status["expected"]["imex_expected"] is None
    assert "state:         record-unreadable" in render_table(status)


def test_channels_beside_an_unreadable_record_are_not_called_leaked(tmp_path):
    """The record may own one of them: health leaves them, so status must not say leaked."""
    cfg = cfg_for(tmp_path)
    (tmp_path / "state").mkdir()
    (tmp_path / "state/domain.json").write_bytes(b"{not json")
    (tmp_path / "ch").mkdir()
    (tmp_path / "ch/channel12").write_text("")
    problems = collect(cfg)["problems"]
    assert not any("leaked" in p for p in problems), problems
    assert "channel12 present; whose is unknown while the record is unreadable (health " \
           "leaves them)" in problems


@pytest.mark.skipif(os.geteuid() != 0, reason="a channel0 device node needs root (mknod)")
def test_world_usable_channel0_and_leak(tmp_path):
    cfg = cfg_for(tmp_path)
    (tmp_path / "ch").mkdir()
    os.mknod(tmp_path / "ch/channel0", 0o666 | stat.S_IFCHR, os.makedev(234, 0))
    os.chmod(tmp_path / "ch/channel0", 0o666)   # as the driver makes it, whatever the umask
    (tmp_path / "ch/channel12").write_text("")
    status = collect(cfg)
    assert "leaked channel12" in status["problems"]
    assert "channel0 is world-usable: jobs are not isolated" in status["problems"]
    os.chmod(tmp_path / "ch/channel0", 0o600)
    assert not any("channel0" in p for p in collect(cfg)["problems"])


def test_identity_drift_and_imexctl_drain(tmp_path):
    cfg, slurm = slurm_world(tmp_path, clique=2, state="IDLE+DRAIN",
                             reason="imexctl: health/fabric: GPU 0 fabric state Not Started")
    status = collect(cfg, slurm=slurm)
    assert any(p.startswith(f"identity drift: live clique {UUID}.2 but Slurm holds {UUID}.1")
               for p in status["problems"])
    assert "drained by imexctl: imexctl: health/fabric: GPU 0 fabric state Not Started " \
           "(see docs/runbook.md)" in status["problems"]
    assert status["slurm"]["drain_ours"] is True
    assert status["state"] == "idle" and status["expected"] == {
        "imex_expected": False, "state": "idle", "persistent": False, "source": "derived"}


def test_foreign_drain_is_not_a_problem(tmp_path):
    cfg, slurm = slurm_world(tmp_path, state="IDLE+DRAIN", reason="PSU swap (bob)")
    status = collect(cfg, slurm=slurm)
    assert status["problems"] == [] and status["slurm"]["drained"] is True


def test_stale_domain_found_through_slurm(tmp_path):
    cfg, slurm = slurm_world(tmp_path)
    StateStore(cfg.paths.state_dir).save(make_record(channel=None, phase="ready"))
    status = collect(cfg, slurm=slurm, live=False)
    assert any(p.startswith("stale domain: job 7 no longer runs here") for p in status["problems"])
    slurm.jobs[7] = job_record(7, ("tray01", "tray02"), state="RUNNING")
    status = collect(cfg, slurm=slurm, live=False)
    assert status["slurm"]["owner_running"] is True
    assert not any("stale" in p for p in status["problems"])


def test_slurm_unreachable_is_a_note(tmp_path):
    cfg, _ = slurm_world(tmp_path)

    class Down:
        def nodes(self, names):
            raise RuntimeError("Unable to contact slurm controller")

    status = collect(cfg, slurm=Down())
    assert status["slurm"] is None and status["problems"] == []
    assert any("Unable to contact" in n for n in status["notes"])


def test_not_an_imex_tray(tmp_path):
    cfg, slurm = slurm_world(tmp_path)
    write_fabric_file(tmp_path / "fabric.json",
                      simulated_tray("00000000-0000-0000-0000-000000000000", 0,
                                     **{str(i): {"state": 0} for i in range(4)}))
    status = collect(cfg, slurm=slurm)
    assert status["expected"] == {"imex_expected": False, "state": "not-imex",
                                  "persistent": False, "source": "derived"}
    assert "IMEX expected: no (not-imex)" in render_table(status)
    assert "fabric:        not an IMEX tray (no NVLink fabric)" in render_table(status)


def test_unfit_fabric_is_a_problem_not_a_note(tmp_path):
    """The tray the prolog and health drain (route recovery on GPU 1) must not look idle
    and clean to the admin who runs status."""
    cfg, slurm = slurm_world(tmp_path)
    write_fabric_file(tmp_path / "fabric.json",
                      simulated_tray(UUID, 1, **{"1": {"health_mask": 0x1A6}}))
    status = collect(cfg, slurm=slurm)
    assert status["problems"] == ["fabric unfit: GPU 1 fabric unhealthy (route_recovery=TRUE) "
                                  "(the prolog and health drain this tray: docs/runbook.md, "
                                  "prolog/fabric)"]
    assert "fabric unfit: GPU 1" in render_table(status)
    assert "fabric:        unfit (see PROBLEM below)" in render_table(status)
    healthy = tmp_path / "fabric.json"
    write_fabric_file(healthy, simulated_tray(UUID, 1))
    assert f"fabric:        clique {UUID}.1" in render_table(collect(cfg, slurm=slurm))


def test_failed_last_outcome_says_where(tmp_path):
    cfg = cfg_for(tmp_path)
    StateStore(cfg.paths.state_dir).save_outcome({
        "job_id": 9, "hook": "prolog", "result": "node-fault", "finished_at": time.time(),
        "reason": "imexctl: prolog/wait-ready: local daemon UNAVAILABLE after 60s"})
    status = collect(cfg)
    assert status["expected"]["state"] == "failed"
    assert status["expected"]["reason"].startswith("imexctl: prolog/wait-ready")


def test_published_expected_state_file_wins(tmp_path):
    """The hooks publish the expected state (docs/health.md); status shows that file."""
    from imexctl.tray import expected

    cfg = cfg_for(tmp_path)
    expected.write(cfg, expected.UP, job_id=42)
    status = collect(cfg)
    assert status["expected"]["source"] == "file"
    assert status["expected"]["state"] == "up" and status["expected"]["imex_expected"] is True
    assert status["expected"]["job_id"] == 42


def test_corrupt_last_outcome_is_a_note(tmp_path):
    cfg = cfg_for(tmp_path)
    (tmp_path / "state").mkdir()
    (tmp_path / "state/last-outcome.json").write_text("{")
    status = collect(cfg)
    assert status["last_outcome"] is None and status["notes"]


def test_schema_tag(tmp_path):
    status = json.loads(render_json(collect(cfg_for(tmp_path))))
    assert status["schema"] == "imexctl.status/1" and status["view"] == "node"


def test_cli_status_with_slurmctld_down_answers_fast(tmp_path, capsys):
    """A hanging scontrol costs one short attempt, then status answers with a note."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text("#!/bin/sh\nsleep 60\n")
    (bin_dir / "scontrol").chmod(0o755)
    conf = tmp_path / "c.toml"
    conf.write_text(f'[paths]\nstate_dir = "{tmp_path}/state"\nrun_dir = "{tmp_path}/run"\n'
                    f'log_file = "{tmp_path}/log"\nchannel_dir = "{tmp_path}/ch"\n'
                    f'slurm_bin_dir = "{bin_dir}"\n[slurm]\nbackend = "cli"\ntimeout_s = 30\n'
                    'attempts = 5\n')
    from imexctl.cli import main
    start = time.monotonic()
    assert main(["--config", str(conf), "status", "--json"]) == 0
    assert time.monotonic() - start < 15
    out = json.loads(capsys.readouterr().out)
    assert out["slurm"] is None and any("not asked" in n for n in out["notes"])


def test_status_says_which_slurm_backend_and_why(tmp_path):
    """Issue 8: where pyslurm cannot be had, status says the CLI is used and why."""
    cfg, slurm = slurm_world(tmp_path)
    slurm.name, slurm.selection = "cli", "auto: CLI, because pyslurm is not installed"
    status = collect(cfg, slurm=slurm)
    assert status["slurm"]["backend"] == "cli"
    assert status["slurm"]["backend_selection"] == "auto: CLI, because pyslurm is not installed"
    assert "slurm backend: cli (auto: CLI, because pyslurm is not installed)" in \
        render_table(status)


# --------------------------------------------------------------------------- stuck (F-02)
STUCK_REASON = "imexctl: epilog/stop-daemon: daemon stuck: pid 4242 survived SIGKILL (+1 more)"


def test_stuck_record_with_a_live_daemon_is_singled_out(tmp_path):
    """A record the epilog kept in phase stuck, pointing at a live process: state `stuck`
    (not `degraded`), one problem naming the pid, the job, its ports and what to do."""
    cfg, slurm = slurm_world(tmp_path, state="IDLE+DRAIN", reason=STUCK_REASON)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        ps = psutil.Process(proc.pid)
        StateStore(cfg.paths.state_dir).save(make_record(
            channel=None, phase="stuck", server_port=18440, cmd_port=20488,
            daemon=DaemonIdentity(pid=proc.pid, create_time=ps.create_time(), exe=ps.exe())))
        status = collect(cfg, slurm=slurm, live=True)   # job 7 is unknown to Slurm: ended
    finally:
        proc.kill()
        proc.wait()
    assert status["state"] == "stuck"
    stuck = status["stuck"]
    assert (stuck["pid"], stuck["job_id"], stuck["alive"]) == (proc.pid, 7, True)
    assert stuck["ports"] == [18440, 20488] and stuck["runbook"] == "docs/runbook.md#stuck-daemon"
    assert status["problems"][0] == stuck["problem"]
    assert stuck["problem"].startswith(f"stuck daemon: nvidia-imex pid {proc.pid} of job 7 "
                                       "could not be stopped by the epilog and may hold ports "
                                       "18440/20488; ")
    assert f"`ps -o pid,stat,wchan -p {proc.pid}`" in stuck["problem"]
    # not also a generic stale domain, and the live ctl (which a frozen daemon would hang)
    # is not asked
    assert not any(p.startswith("stale domain") for p in status["problems"])
    assert "domain_state" not in status["domain"]
    assert f"drained by imexctl: {STUCK_REASON} (see docs/runbook.md)" in status["problems"]
    assert status["expected"]["imex_expected"] is False
    table = render_table(status)
    assert f"state:         stuck (nvidia-imex pid {proc.pid} of job 7 still running" in table
    assert f"PROBLEM:       stuck daemon: nvidia-imex pid {proc.pid} of job 7" in table
    assert json.loads(render_json(status))["stuck"]["pid"] == proc.pid


def test_stuck_record_whose_daemon_is_gone_says_health_clears_it(tmp_path):
    cfg = cfg_for(tmp_path)
    StateStore(cfg.paths.state_dir).save(make_record(
        channel=None, phase="stuck", daemon=DaemonIdentity(pid=999999, create_time=1.0, exe="/x")))
    status = collect(cfg, live=False)
    assert status["state"] == "stuck" and status["stuck"]["alive"] is False
    assert status["problems"] == [
        "stuck record: the epilog could not verify nvidia-imex pid 999999 of job 7 stopped; "
        "it is gone now: `imexctl health` clears the record (docs/runbook.md#stuck-daemon)"]
    assert "gone now; see PROBLEM below" in render_table(status)


def test_stuck_record_without_a_pid_says_how_to_find_the_daemon(tmp_path):
    cfg = cfg_for(tmp_path)
    StateStore(cfg.paths.state_dir).save(make_record(channel=None, phase="stuck", daemon=None))
    status = collect(cfg, live=False)
    assert status["state"] == "stuck" and status["stuck"]["pid"] is None
    assert "`pgrep -af /run/x/job-7/config.cfg`" in status["problems"][0]


def test_a_healthy_record_is_not_stuck(tmp_path):
    cfg = cfg_for(tmp_path)
    StateStore(cfg.paths.state_dir).save(make_record(channel=None, phase="ready"))
    status = collect(cfg, live=False)
    assert status["stuck"] is None and status["state"] == "degraded"  # names no daemon


# --------------------------------------------------------------------------- channel owner
PROC_OK = "Character devices:\n195 nvidia\n234 nvidia-caps-imex-channels\n\nBlock devices:\n"
PROC_NO_MAJOR = "Character devices:\n195 nvidia\n\nBlock devices:\n"


def owner_world(tmp_path, switch_type, proc, mode="auto", fabric_uuid=UUID):
    write_fabric_file(tmp_path / "fabric.json", simulated_tray(fabric_uuid, 1) if fabric_uuid
                      else simulated_tray("00000000-0000-0000-0000-000000000000", 0,
                                          **{str(i): {"state": 0} for i in range(4)}))
    (tmp_path / "slurm.conf").write_text("ClusterName=c\n" + (
        f"SwitchType={switch_type}\n" if switch_type else "") + "NodeName=tray01\n")
    (tmp_path / "proc-devices").write_text(proc)
    return parse_config({"paths": {"state_dir": f"{tmp_path}/state", "run_dir": f"{tmp_path}/run",
                                   "channel_dir": f"{tmp_path}/ch",
                                   "slurm_conf": f"{tmp_path}/slurm.conf",
                                   "proc_devices": f"{tmp_path}/proc-devices",
                                   "imex_ctl_binary": f"{tmp_path}/no-ctl"},
                         "channels": {"mode": mode},
                         "fabric": {"source": "file", "file": f"{tmp_path}/fabric.json"}},
                        None, "tray01")


def test_switch_plugin_disabled_on_this_tray_is_a_problem(tmp_path):
    """SwitchType=switch/nvidia_imex but no channel major in the /proc/devices slurmd reads:
    slurmd disables the plugin here, so status says who would make the channel and that it
    cannot, before a job is drained for it."""
    cfg = owner_world(tmp_path, "switch/nvidia_imex", PROC_NO_MAJOR)
    status = collect(cfg)
    assert status["channel_owner"] == {
        "owner": "slurm", "why": f"SwitchType=switch/nvidia_imex in {tmp_path}/slurm.conf",
        "major": None, "usable": False}
    assert status["problems"] == [
        "Slurm's switch/nvidia_imex is disabled on this tray (slurmd: \"major device not found, "
        "plugin disabled\") and makes no channel: nvidia-caps-imex-channels not registered in "
        f"{tmp_path}/proc-devices (is the NVIDIA driver loaded with NVreg_ImexChannelCount > 0?);"
        " the prolog drains this tray (prolog/channel) rather than run a job with no channel"]
    assert (f"channels by:   slurm (SwitchType=switch/nvidia_imex in {tmp_path}/slurm.conf; "
            "major missing: CANNOT make a channel here)") in render_table(status)


def test_switch_plugin_active_and_imexctl_channels(tmp_path):
    status = collect(owner_world(tmp_path, "switch/nvidia_imex", PROC_OK))
    assert status["channel_owner"]["owner"] == "slurm" and status["channel_owner"]["major"] == 234
    assert status["channel_owner"]["usable"] is True and status["problems"] == []
    assert "major 234: works here" in render_table(status)
    status = collect(owner_world(tmp_path, None, PROC_OK))
    assert status["channel_owner"] == {"owner": "imexctl", "usable": True, "major": 234,
                                       "why": f"SwitchType=(none) in {tmp_path}/slurm.conf"}
    status = collect(owner_world(tmp_path, "switch/nvidia_imex", PROC_NO_MAJOR, mode="imexctl"))
    assert status["channel_owner"]["why"] == "channels.mode = imexctl"
    assert status["problems"][0].startswith("imexctl cannot make IMEX channels on this tray: ")


def test_no_major_on_a_tray_that_is_not_an_imex_tray_is_fine(tmp_path):
    status = collect(owner_world(tmp_path, "switch/nvidia_imex", PROC_NO_MAJOR, fabric_uuid=None))
    assert status["fabric"]["imex_tray"] is False
    assert status["channel_owner"]["usable"] is False and status["problems"] == []


def test_channel_owner_unknown_without_slurm_conf(tmp_path):
    status = collect(cfg_for(tmp_path))
    assert status["channel_owner"]["owner"] is None
    assert any(n.startswith("channel owner unknown: cannot read slurm.conf") for n in status["notes"])


def test_tearing_down_record_is_not_a_dead_daemon_problem(tmp_path):
    """While the epilog stops the daemon, status says tearing-down; once the job has
    ended in Slurm, a record left tearing-down (an epilog killed midway) is stale."""
    cfg, slurm = slurm_world(tmp_path)
    slurm.jobs[7] = job_record(7, ("tray01", "tray02"), state="COMPLETING")
    StateStore(cfg.paths.state_dir).save(make_record(
        channel=None, phase="tearing-down",
        daemon=DaemonIdentity(pid=999999, create_time=1.0, exe="/x")))
    status = collect(cfg, slurm=slurm, live=True)
    assert status["state"] == "tearing-down" and status["problems"] == []
    assert "phase:         tearing-down" in render_table(status)
    del slurm.jobs[7]
    status = collect(cfg, slurm=slurm, live=True)
    assert status["state"] == "degraded"
    assert [p for p in status["problems"] if p.startswith("stale domain: job 7")]


def test_unpublished_identity_of_an_imex_tray_is_a_note(tmp_path):
    cfg, slurm = slurm_world(tmp_path)
    slurm.set_node("tray01", extra="")
    status = collect(cfg, slurm=slurm)
    assert status["problems"] == [] and status["slurm"]["published_clique"] is None
    assert [n for n in status["notes"] if n.startswith(
        f"fabric identity (clique {UUID}.1) not published in Slurm: PrologSlurmctld")]
    slurm.publish("tray01", {"cluster_uuid": UUID, "clique_id": 1, "gpu_count": 4})
    assert not [n for n in collect(cfg, slurm=slurm)["notes"] if "not published" in n]


def test_tearing_down_record_with_a_live_daemon_is_not_queried(tmp_path):
    """The daemon being stopped is not asked for its domain (the ctl here would fail with
    "cannot run"); once the teardown is long overdue, a killed epilog is named."""
    cfg = cfg_for(tmp_path)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        ps = psutil.Process(proc.pid)
        store = StateStore(cfg.paths.state_dir)
        store.save(make_record(channel=None, phase="tearing-down", daemon=DaemonIdentity(
            pid=proc.pid, create_time=ps.create_time(), exe=ps.exe())))
        status = collect(cfg, live=True)
        assert status["state"] == "tearing-down" and status["problems"] == []
        assert status["domain"]["daemon"]["alive"] is True
        later = time.time() + cfg.imex.stop_grace_s + 61
        status = collect(cfg, live=True, now=later)
        assert status["state"] == "degraded"
        assert status["problems"][0].startswith("record of job 7 has been tearing-down for ")
    finally:
        proc.kill()
        proc.wait()


# fidelity 2026-11b: a partial map (real 580.30 -N -j) printed "domain DEGRADED: " and
# nothing else; members are found by node index, not by the host string

HOSTS = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]


def test_partial_map_names_the_members_not_listed(tmp_path, procs):
    partial = {"status": "DEGRADED", "nodes": {
        str(i): member(HOSTS[i], conns=[(h, "CONNECTED") for h in HOSTS[:2]]) for i in (0, 1)}}
    cfg, proc = live_setup(tmp_path, partial)
    procs.append(proc)
    status = collect(cfg, now=1_800_000_000.0)
    assert [(x["node"], x["status"]) for x in status["domain"]["missing"]] == [
        ("tray03", "not listed")]
    assert any(p.startswith("tray03 (10.0.0.3) not listed since") for p in status["problems"])
    assert not any(p.rstrip().endswith("DEGRADED:") for p in status["problems"])


def test_degraded_by_a_link_only_names_the_link(tmp_path, procs):
    doc = {"status": "DEGRADED", "nodes": {
        str(i): member(h, conns=[(x, "INVALID" if (i, j) == (0, 2) else "CONNECTED")
                                 for j, x in enumerate(HOSTS)]) for i, h in enumerate(HOSTS)}}
    cfg, proc = live_setup(tmp_path, doc)
    procs.append(proc)
    status = collect(cfg)
    assert "domain DEGRADED: tray01->tray03 INVALID" in status["problems"]


def test_members_by_index_when_the_ctl_prints_another_form_of_the_entry(tmp_path, procs):
    # host-name entries printed as written, IPv6 printed uncompressed: still the members
    up = {"status": "UP", "nodes": {
        str(i): member(h, conns=[(x, "CONNECTED") for x in ("a", "b", "c")])
        for i, h in enumerate(["tray01.ib", "tray02.ib", "10.0.0.3"])}}
    cfg, proc = live_setup(tmp_path, up)
    procs.append(proc)
    status = collect(cfg)
    assert [m["node"] for m in status["domain"]["members"]] == ["tray01", "tray02", "tray03"]
    assert [c["peer"] for c in status["domain"]["members"][0]["connections"]] == [
        "tray01", "tray02", "tray03"]
    assert status["problems"] == [] and status["domain"]["missing"] == []
    # an address that is not the entry imexctl wrote: another node map, reported
    up["nodes"]["2"]["host"] = "10.9.9.9"
    fake_ctl(tmp_path, up)
    status = collect(cfg)
    assert [(x["node"], x["status"]) for x in status["domain"]["missing"]] == [
        ("tray03", "listed as 10.9.9.9")]
