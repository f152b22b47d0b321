"""`imexctl doctor`: each misconfiguration is found, named and given its fix."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from imexctl.ops import doctor
from imexctl.cli import main
from imexctl.config import parse_config
from imexctl.ops.doctor import FAIL, OK, WARN, check_node, check_slurm, check_units, read_slurm_conf
from tests.support.memory_slurm import FAKE_MUNGE
from imexctl.errors import EXIT_CONFIG
from imexctl.tray.fabric import FabricVerdict, judge
from tests.support.fabric import simulated_tray
from imexctl.ops.units import render_dropin
from imexctl.slurm.localconf import LocalSlurmConf

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data/slurmconf"


def conf_file(tmp_path, name, hooks=REPO / "hooks"):
    for f in DATA.iterdir():
        (tmp_path / f.name).write_text(f.read_text().replace("@HOOKS@", str(hooks)))
    return tmp_path / name


def cfg(**sections):
    return parse_config(sections, None, "tray01")


def by_check(findings):
    return {f.check: f for f in findings}


def settings(**keys):
    """A slurm.conf of these settings alone, as the hooks read one."""
    return LocalSlurmConf(path=Path("slurm.conf"), settings={k.lower(): v for k, v in keys.items()})


def test_good_conf_passes(tmp_path):
    found = check_slurm(cfg(), read_slurm_conf(conf_file(tmp_path, "good.conf")), (22, 5))
    assert [f for f in found if f.level != OK] == []
    assert {"prolog-flags", "defer-batch", "hook-prolog", "hook-epilog",
            "hook-prologslurmctld", "hook-epilogslurmctld", "hook-healthcheckprogram",
            "prolog-timeout"} <= set(by_check(found))


def test_bad_conf_every_finding_with_fix(tmp_path):
    found = by_check(check_slurm(cfg(imex={"ready_timeout_s": 60}),
                                 read_slurm_conf(conf_file(tmp_path, "bad.conf")), (22, 5)))
    assert found["prolog-flags"].level == FAIL and "lacks Alloc" in found["prolog-flags"].message
    assert "PrologFlags=Alloc,DeferBatch" in found["prolog-flags"].fix
    assert found["defer-batch"].level == WARN
    assert found["run-in-job"].level == FAIL and "launcher" in found["run-in-job"].fix
    assert found["hook-prolog"].level == FAIL
    assert "site-prolog.sh does not run imexctl" in found["hook-prolog"].message
    assert found["hook-epilog"].level == FAIL and "(unset)" in found["hook-epilog"].message
    assert found["hook-healthcheckprogram"].level == WARN
    t = found["prolog-timeout"]
    assert t.level == FAIL and "PrologEpilogTimeout=60s" in t.message
    assert "PrologEpilogTimeout=90" in t.fix
    for f in found.values():
        assert f.level == OK or f.fix, f


def test_run_in_job_fine_with_systemd_launcher(tmp_path):
    found = by_check(check_slurm(cfg(imex={"launcher": "systemd", "ready_timeout_s": 60}),
                                 read_slurm_conf(conf_file(tmp_path, "bad.conf")), (24, 11)))
    assert "run-in-job" not in found
    assert "PrologTimeout=90" in found["prolog-timeout"].fix   # the newer key on 24.11+


def test_unset_ready_timeout_is_derived_from_the_prolog_timeout(tmp_path):
    """Issue 10: imex.ready_timeout_s unset: the prolog derives it from slurm.conf."""
    short = by_check(check_slurm(cfg(), settings(PrologEpilogTimeout="60"), (22, 5)))
    assert short["prolog-timeout"].level == WARN
    assert "leaves 45s to wait for UP (wanted 120s" in short["prolog-timeout"].message
    assert "PrologEpilogTimeout=135" in short["prolog-timeout"].fix
    newer = by_check(check_slurm(cfg(), settings(PrologTimeout="60"), (24, 11)))
    assert "PrologTimeout=135" in newer["prolog-timeout"].fix
    roomy = by_check(check_slurm(cfg(), settings(PrologTimeout="300"), (24, 11)))
    assert roomy["prolog-timeout"].level == OK and "waits 120s" in \
        roomy["prolog-timeout"].message


def test_a_set_ready_timeout_against_every_form_of_the_prolog_limit():
    """doctor reads the prolog's limit as localconf does: no limit, a number, or not one."""
    c = cfg(imex={"ready_timeout_s": 60})
    for unlimited in ("UNLIMITED", "infinite", "65534"):
        found = by_check(check_slurm(c, settings(PrologTimeout=unlimited), (24, 11)))
        assert found["prolog-timeout"].level == OK and "PrologTimeout unset/unlimited" in \
            found["prolog-timeout"].message
    found = by_check(check_slurm(c, settings(PrologEpilogTimeout="soon"), (22, 5)))
    assert found["prolog-timeout"].level == WARN
    assert found["prolog-timeout"].message == "PrologEpilogTimeout='soon' is not a number"
    found = by_check(check_slurm(c, settings(PrologEpilogTimeout="80"), (24, 11)))
    assert found["prolog-timeout"].level == FAIL and "PrologTimeout=90" in \
        found["prolog-timeout"].fix


def test_deferbatch_only_where_slurm_has_it(tmp_path):
    conf = settings(PrologFlags="Alloc")
    assert "defer-batch" in by_check(check_slurm(cfg(), conf, (22, 5)))
    assert "defer-batch" not in by_check(check_slurm(cfg(), conf, (20, 2)))


def test_include_and_prolog_timeout(tmp_path):
    conf = read_slurm_conf(conf_file(tmp_path, "include.conf"))
    found = by_check(check_slurm(cfg(imex={"ready_timeout_s": 120}), conf, (25, 5)))
    assert found["hook-prolog"].level == OK and found["prolog-flags"].level == OK
    assert found["prolog-timeout"].level == OK and "PrologTimeout=200s" in \
        found["prolog-timeout"].message
    found = by_check(check_slurm(cfg(imex={"ready_timeout_s": 180}), conf, (25, 5)))
    assert found["prolog-timeout"].level == FAIL


def test_hook_writable_by_others_is_refused(tmp_path):
    hooks = tmp_path / "checkout/hooks"
    shutil.copytree(REPO / "hooks", hooks)
    os.chmod(tmp_path / "checkout", 0o777)
    conf = read_slurm_conf(conf_file(tmp_path, "good.conf", hooks=hooks))
    found = by_check(check_slurm(cfg(), conf, (22, 5)))
    assert found["hook-prolog"].level == FAIL
    assert "checkout is writable by group or others" in found["hook-prolog"].message


@pytest.fixture(autouse=True)
def no_loaded_driver(tmp_path, monkeypatch):
    """Hermetic on a machine with a real NVIDIA driver: the loaded driver's version is
    not this test's fake nvidia-imex's (platform check 2026-11-28, an H200 with 580.159)."""
    monkeypatch.setattr(doctor, "DRIVER_VERSION_FILE", tmp_path / "no-driver" / "version")


def node_cfg(tmp_path, **extra_paths):
    fabric = tmp_path / "fabric.json"
    fabric.write_text('{"gpus": [{"cluster_uuid": "11111111-2222-3333-4444-555555555555",'
                      ' "clique_id": 1}]}')
    proc = tmp_path / "devices"
    proc.write_text("Character devices:\n  1 mem\n234 nvidia-caps-imex-channels\n\n"
                    "Block devices:\n  8 sd\n")
    paths = {"state_dir": f"{tmp_path}/state", "run_dir": f"{tmp_path}/run",
             "channel_dir": f"{tmp_path}/ch", "proc_devices": str(proc),
             "imex_binary": str(REPO / ".venv/bin/imexctl-sim-imex"),
             "imex_ctl_binary": str(REPO / ".venv/bin/imexctl-sim-imex-ctl"),
             "munge_bin_dir": str(FAKE_MUNGE), **extra_paths}
    for d in ("state", "run", "ch"):
        (tmp_path / d).mkdir(mode=0o755, exist_ok=True)
    return parse_config({"paths": paths, "fabric": {"source": "file", "file": str(fabric)}},
                        None, "tray01")


def test_node_checks_pass(tmp_path):
    found = check_node(node_cfg(tmp_path))
    assert [f for f in found if f.level != OK] == []
    assert by_check(found)["imex-channels"].message.endswith("major 234")


def test_node_checks_find_problems(tmp_path):
    c = node_cfg(tmp_path, imex_binary="/nonexistent/nvidia-imex")
    os.chmod(tmp_path / "state", 0o777)
    (tmp_path / "devices").write_text("Character devices:\n  1 mem\n")
    shutil.rmtree(tmp_path / "run")
    found = by_check(check_node(c))
    assert found["dir-state_dir"].level == FAIL and "chmod go-w" in found["dir-state_dir"].message
    assert found["dir-run_dir"].level == WARN
    assert found["imex-binary"].level == FAIL
    assert found["imex-channels"].level == FAIL and "NVreg_ImexChannelCount" in \
        found["imex-channels"].fix


def test_nvml_probe(tmp_path):
    c = cfg()   # fabric.source = "nvml", the default
    broken = FabricVerdict("unfit", "NVML init failed: Driver Not Loaded")
    found = by_check(check_node(c, nvml_probe=lambda: broken))
    assert found["nvml"].level == FAIL and "Driver Not Loaded" in found["nvml"].message
    ok = judge(simulated_tray("11111111-2222-3333-4444-555555555555", 3))
    found = by_check(check_node(c, nvml_probe=lambda: ok))
    assert found["nvml"].level == OK and "4 GPU(s), clique 1111" in found["nvml"].message
    found = by_check(check_node(c, nvml_probe=lambda: judge([])))
    assert found["nvml"].level == OK and "not an IMEX tray" in found["nvml"].message
    # a tray without NVLink needs no IMEX package and no channel device: nothing fails
    assert all(f.level == OK for f in found.values()
               if f.check.startswith("imex-")), found
    assert "(not needed: not an IMEX tray)" in found["imex-binary"].message

    def crash():
        raise RuntimeError("NVML_ERROR_UNKNOWN")

    assert by_check(check_node(c, nvml_probe=crash))["nvml"].level == FAIL


def test_systemd_dropin_check(tmp_path):
    c = cfg(imex={"launcher": "systemd"}, paths={"run_dir": "/srv/run"})
    dropin = tmp_path / "imexctl-paths.conf"
    assert check_units(c, dropin)[0].level == FAIL
    dropin.write_text(render_dropin(c))
    assert check_units(c, dropin)[0].level == OK
    assert check_units(cfg(), dropin) == []     # direct launcher: no unit involved
    # rendered on another tray (its name in the header) and copied here: still current
    other = parse_config({"imex": {"launcher": "systemd"}, "paths": {"run_dir": "/srv/run"}},
                         None, "tray02")
    dropin.write_text(render_dropin(other))
    assert "tray02" in dropin.read_text() and check_units(c, dropin)[0].level == OK
    # a changed stop grace is a stale drop-in
    longer = cfg(imex={"launcher": "systemd", "stop_grace_s": 40}, paths={"run_dir": "/srv/run"})
    assert check_units(longer, dropin)[0].level == FAIL


def test_cli_prints_findings_and_fixes(tmp_path, capsys):
    c = tmp_path / "imexctl.toml"
    c.write_text(f'[paths]\nlog_file = "{tmp_path}/imexctl.log"\n')
    bad = conf_file(tmp_path, "bad.conf")
    assert main(["--config", str(c), "doctor", "--slurm-conf", str(bad)]) == EXIT_CONFIG
    out = capsys.readouterr().out
    assert "FAIL prolog-flags: PrologFlags=Contain,RunInJob lacks Alloc" in out
    assert "     fix: set PrologFlags=Alloc,DeferBatch" in out
    assert main(["--config", str(c), "doctor", "--slurm-conf", str(bad), "--json"]) \
        == EXIT_CONFIG
    rows = json.loads(capsys.readouterr().out)["findings"]
    assert {"check", "level", "message", "fix"} == set(rows[0])


def test_run_ok_exit(tmp_path, capsys, monkeypatch):
    c = node_cfg(tmp_path)
    good = conf_file(tmp_path, "good.conf")
    monkeypatch.setattr(doctor, "slurm_version", lambda bin_dir: (22, 5))
    findings = doctor.run(c, slurm_conf=good, dropin=tmp_path / "none",
                          python=str(tmp_path / "no-venv" / "python"))
    assert [f for f in findings if f.level != OK] == []
    assert findings[0].check == "slurm-conf" and findings[0].message == f"read {good}"


@pytest.mark.parametrize("missing", ["absent.conf"])
def test_unreadable_slurm_conf(tmp_path, missing):
    found = doctor.run(node_cfg(tmp_path), slurm_conf=tmp_path / missing)
    assert found[0].check == "slurm-conf" and found[0].level == FAIL


def test_slurm_only_on_the_controller(tmp_path, capsys):
    c = tmp_path / "imexctl.toml"
    c.write_text(f'[paths]\nlog_file = "{tmp_path}/imexctl.log"\n')
    good = conf_file(tmp_path, "good.conf")
    c.write_text(f'[paths]\nlog_file = "{tmp_path}/imexctl.log"\n'
                 f'munge_bin_dir = "{FAKE_MUNGE}"\n'
                 f'controller_dir = "{tmp_path}/ctl"\n')     # SlurmUser (good.conf: root) creates it
    assert main(["--config", str(c), "doctor", "--slurm-only", "--slurm-conf", str(good),
                 "--json"]) == 0
    checks = {f["check"] for f in json.loads(capsys.readouterr().out)["findings"]}
    assert "prolog-flags" in checks and not checks & {"nvml", "imex-binary", "dir-state_dir"}
    assert "controller-dir" in checks


def test_doctor_reads_the_slurm_conf_the_hooks_read(tmp_path, monkeypatch):
    """[paths] slurm_conf first, then as slurmd finds it (SLURM_CONF): the file the
    prolog takes SwitchType and timeouts from, not a list of doctor's own."""
    good = conf_file(tmp_path, "good.conf")
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "bad.conf"))
    found = by_check(doctor.run(node_cfg(tmp_path, slurm_conf=str(good)), node_checks=False))
    assert found["slurm-conf"].message == f"read {good}"
    found = by_check(doctor.run(node_cfg(tmp_path), node_checks=False))
    assert found["slurm-conf"].message == f"read {tmp_path / 'bad.conf'}"
    assert found["prolog-flags"].level == FAIL
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "absent.conf"))
    found = by_check(doctor.run(node_cfg(tmp_path), node_checks=False))
    assert found["slurm-conf"].level == FAIL and "absent.conf: cannot open" in \
        found["slurm-conf"].message


def controller(tmp_path, slurm_user="nobody", extra="", **paths):
    conf = tmp_path / "ctl-slurm.conf"
    conf.write_text(f"SlurmUser={slurm_user}\nPrologFlags=Alloc,DeferBatch\n{extra}")
    c = parse_config({"paths": {"state_dir": str(tmp_path / "state"), **paths}}, None, "ctl")
    return by_check(doctor.run(c, slurm_conf=conf, node_checks=False))["controller-dir"]


@pytest.fixture
def open_tmp():
    """A directory other users can reach (pytest's tmp_path sits under a root-only one)."""
    import tempfile
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        os.chmod(tmp, 0o755)
        yield Path(tmp)


@pytest.mark.skipif(os.geteuid() != 0, reason="directory ownership needs root")
def test_controller_dir_must_be_usable_by_slurm_user(open_tmp):
    """PrologSlurmctld runs as SlurmUser: a table directory it cannot create or trust
    leaves every job without a controller channel. Each state, and the fix doctor gives."""
    tmp_path = open_tmp
    table = tmp_path / "state" / "slurmctld"
    (tmp_path / "state").mkdir(mode=0o755)          # root-owned, as tmpfiles makes it
    found = controller(tmp_path)
    assert found.level == FAIL and "cannot create it in" in found.message
    assert found.fix == f"install -d -o nobody -m 0755 {table}"
    table.mkdir(mode=0o755)                          # root-owned: refused
    found = controller(tmp_path)
    assert found.level == FAIL and "owned by uid 0, not SlurmUser nobody" in found.message
    assert found.fix == f"chown nobody {table} && chmod 0755 {table}"
    os.chown(table, 65534, 65534)
    os.chmod(table, 0o775)
    found = controller(tmp_path)
    assert found.level == FAIL and "writable by group or others (mode 0775)" in found.message
    os.chmod(table, 0o755)
    assert controller(tmp_path).level == OK
    # what doctor promised: SlurmUser can use it (the channel table as PrologSlurmctld runs)
    probe = ("import sys; from imexctl.controller.channel_table import ChannelTable; "
             "print(ChannelTable(sys.argv[1], count=8).allocate(7, ['u.1'], live_jobs=set()))")
    res = subprocess.run([sys.executable, "-c", probe, str(table)], capture_output=True,
                         text=True, user=65534, group=65534, cwd=tmp_path, timeout=30,
                         env={"PYTHONPATH": str(REPO)})
    assert res.returncode == 0 and "'u.1':" in res.stdout, res.stderr
    table.rename(tmp_path / "elsewhere")
    table.symlink_to(tmp_path / "elsewhere")
    found = controller(tmp_path)
    assert found.level == FAIL and "is a symbolic link" in found.message
    assert found.fix.startswith("remove it, then install -d -o nobody")


@pytest.mark.skipif(os.geteuid() != 0, reason="directory ownership needs root")
def test_controller_dir_other_cases(tmp_path):
    os.chmod(tmp_path, 0o755)
    (tmp_path / "state").mkdir(mode=0o755)
    os.chown(tmp_path / "state", 65534, 65534)      # SlurmUser may create the table dir
    found = controller(tmp_path)
    assert found.level == OK and "creates it in" in found.message
    assert controller(tmp_path, "no-such-user-here").level == FAIL
    assert controller(tmp_path, "65534").level == OK        # SlurmUser given as a uid
    found = controller(tmp_path, extra="SwitchType=switch/nvidia_imex\n")
    assert found.level == OK and "Slurm owns the IMEX channels" in found.message
    # Slurm's default SlurmUser is root
    found = controller(tmp_path, slurm_user="", controller_dir=str(tmp_path / "ctl"))
    assert found.level == OK and "SlurmUser root" in found.message


def test_seal_check_proves_munge_works_or_names_the_fix(tmp_path):
    """PrologSlurmctld seals, node prologs open: doctor makes and opens one seal."""
    ok = doctor.check_seal(node_cfg(tmp_path))
    assert ok.level == doctor.OK and "seals and opens" in ok.message
    broken = doctor.check_seal(node_cfg(tmp_path, munge_bin_dir=str(tmp_path / "none")))
    assert broken.level == doctor.FAIL and "every IMEX job is refused" in broken.message
    assert "munge_bin_dir" in broken.fix


def test_imex_package_must_match_the_loaded_driver(tmp_path):
    """nvidia-imex aborts at start when its version is not the driver's: doctor says so
    before a prolog drains for it."""
    from imexctl.ops.doctor import check_imex_version

    imex = tmp_path / "nvidia-imex"
    imex.write_text("#!/bin/sh\necho 'IMEX version is: 570.158.01'\n")
    imex.chmod(0o755)
    drv = tmp_path / "version"
    drv.write_text("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.105.08  "
                   "Release Build  (dvs-builder@U16-I3-B11-2-2)  Thu Oct 30 2025\n"
                   "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n")
    bad = check_imex_version(imex, drv)
    assert bad.level == FAIL and "570.158.01 does not match the loaded driver 580.105.08" \
        in bad.message and "nvidia-imex 580.105.08" in bad.fix
    drv.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.158.01  Wed Jun 4\n")
    assert check_imex_version(imex, drv).level == OK
    assert check_imex_version(imex, tmp_path / "absent").level == OK     # no driver: not compared
    imex.write_text("#!/bin/sh\nexit 3\n")
    assert check_imex_version(imex, drv).level == FAIL


def test_doctor_json_has_a_schema_and_a_tray_without_nvlink_exits_0(tmp_path, capsys,
                                                                     monkeypatch):
    c = tmp_path / "imexctl.toml"
    c.write_text(f'[paths]\nlog_file = "{tmp_path}/imexctl.log"\n')
    good = conf_file(tmp_path, "good.conf")
    monkeypatch.setattr(doctor, "slurm_version", lambda bin_dir: (22, 5))
    monkeypatch.setattr(doctor, "check_node", lambda cfg, nvml_probe=None: [
        doctor.Finding("nvml", OK, "no GPU" + doctor.NOT_IMEX)])
    monkeypatch.setattr(doctor, "check_seal", lambda cfg: doctor.Finding("munge-seal", OK, "ok"))
    monkeypatch.setattr(doctor, "check_executable", lambda python: [])
    assert main(["--config", str(c), "doctor", "--slurm-conf", str(good), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["schema"] == "imexctl.doctor/1" and out["failed"] == 0
    assert {"check", "level", "message", "fix"} == set(out["findings"][0])


def test_a_missing_task_prolog_is_a_warning_that_says_what_tasks_lose(tmp_path):
    conf = read_slurm_conf(conf_file(tmp_path, "good.conf"))
    conf.settings.pop("taskprolog")
    found = by_check(check_slurm(cfg(), conf, (22, 5)))
    assert found["hook-taskprolog"].level == WARN
    assert "not told their IMEX domain" in found["hook-taskprolog"].message


def _systemctl_says(text, rc=0, stderr=""):
    from imexctl.base.subproc import Completed
    calls = []

    def systemctl(*args, timeout=None):
        calls.append(args)
        return Completed(["systemctl", *args], rc, text, stderr)
    return systemctl, calls


@pytest.mark.parametrize("answer, level, says", [
    ("LoadState=loaded\nUnitFileState=enabled\nActiveState=active\n", FAIL,
     "nvidia-imex.service is enabled (enabled) and active: a second owner of IMEX"),
    ("LoadState=loaded\nUnitFileState=enabled\nActiveState=inactive\n", FAIL,
     "nvidia-imex.service is enabled (enabled): a second owner of IMEX"),
    ("LoadState=loaded\nUnitFileState=disabled\nActiveState=active\n", FAIL,
     "nvidia-imex.service is active: a second owner of IMEX"),
    ("LoadState=loaded\nUnitFileState=disabled\nActiveState=inactive\n", WARN,
     "nvidia-imex.service is disabled and inactive, not masked"),
    ("LoadState=masked\nUnitFileState=masked\nActiveState=inactive\n", OK,
     "nvidia-imex.service is masked"),
    ("LoadState=masked\nUnitFileState=masked\nActiveState=active\n", FAIL,
     "nvidia-imex.service is masked but still active"),
    ("LoadState=not-found\nUnitFileState=\nActiveState=inactive\n", OK,
     "nvidia-imex.service is not installed"),
])
def test_the_packaged_imex_service_is_a_second_owner_when_enabled_or_running(
        tmp_path, answer, level, says):
    """Fidelity N6: the package enables nvidia-imex.service by preset; doctor asks systemd
    (through the launcher's bounded systemctl) and names the fix."""
    (tmp_path / "systemd").mkdir()
    systemctl, calls = _systemctl_says(answer)
    found = doctor.check_packaged_service(systemctl, booted=tmp_path / "systemd")
    assert calls == [("show", "--property=LoadState,UnitFileState,ActiveState",
                      "nvidia-imex.service")]
    assert (found.check, found.level) == ("packaged-imex-service", level)
    assert found.message.startswith(says), found.message
    if level != OK:
        assert found.fix == "systemctl mask --now nvidia-imex.service"


def test_the_packaged_service_check_without_systemd_or_an_answer(tmp_path):
    from imexctl.imex.launcher import SystemctlError
    assert doctor.check_packaged_service(booted=tmp_path / "absent").level == OK
    (tmp_path / "systemd").mkdir()

    def hangs(*args, timeout=None):
        raise SystemctlError("systemctl show did not return within 10s")
    found = doctor.check_packaged_service(hangs, booted=tmp_path / "systemd")
    assert found.level == WARN and "did not return within 10s" in found.message
    systemctl, _ = _systemctl_says("", rc=1, stderr="Failed to connect to bus: Host is down\n")
    found = doctor.check_packaged_service(systemctl, booted=tmp_path / "systemd")
    assert found.level == WARN and found.message.endswith("Failed to connect to bus: Host is down")
