"""systemd units: every unit verifies with `systemd-analyze verify`, and the rendered
drop-ins put the configured paths in force (audit S-02)."""

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from imexctl.cli import main
from imexctl.config import parse_config
from imexctl.errors import ConfigError
from imexctl.ops.units import render_all, render_dropin, render_tmpfiles

REPO = Path(__file__).resolve().parents[2]
UNITS = sorted((REPO / "systemd").glob("*.service"))
ANALYZE = shutil.which("systemd-analyze", path="/usr/bin:/bin")
pytestmark = pytest.mark.skipif(ANALYZE is None and os.environ.get("CI") != "true",
                                reason="systemd-analyze not installed")


def cfg_with(tmp_path, **paths):
    raw = {"paths": {"run_dir": f"{tmp_path}/run", "state_dir": f"{tmp_path}/state",
                     "log_file": f"{tmp_path}/log/imexctl.log",
                     "channel_dir": f"{tmp_path}/dev/channels",
                     "imex_binary": str(REPO / ".venv/bin/imexctl-sim-imex"), **paths}}
    return parse_config(raw, tmp_path / "imexctl.toml", "tray01")


def unit_dir(tmp_path, cfg=None):
    """The shipped units, plus (with cfg) the drop-ins `imexctl config systemd` renders."""
    d = tmp_path / "units"
    d.mkdir()
    for unit in UNITS:
        shutil.copy(unit, d / unit.name)
    if cfg is not None:
        for path, text in render_all(cfg, REPO / ".venv/bin/imexctl", unit_dir=d,
                                     tmpfiles=tmp_path / "tmpfiles.conf").items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    return d


def verify(d, *units):
    env = {**os.environ, "SYSTEMD_UNIT_PATH": f"{d}:", "SYSTEMD_LOG_LEVEL": "notice"}
    return subprocess.run([ANALYZE, "verify", *units], capture_output=True, text=True,
                          env=env, cwd=d, timeout=60)


def test_units_shipped():
    assert {u.name for u in UNITS} == {"imexctl-imex@.service", "imexctl-recover.service",
                                       "imexctl-imex-persistent.service"}


def test_every_unit_verifies_with_rendered_dropins(tmp_path):
    d = unit_dir(tmp_path, cfg_with(tmp_path))
    res = verify(d, "imexctl-imex@4242.service", "imexctl-recover.service",
                 "imexctl-imex-persistent.service")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "imexctl" not in res.stdout + res.stderr


def test_without_dropin_the_default_paths_are_used(tmp_path):
    """The control: with no drop-in, the template still points at /usr/bin/nvidia-imex
    (absent here), so verify fails; the drop-in above is what changed it."""
    if Path("/usr/bin/nvidia-imex").exists():
        pytest.skip("a real nvidia-imex is installed")
    res = verify(unit_dir(tmp_path), "imexctl-imex@4242.service")
    assert res.returncode != 0 and "/usr/bin/nvidia-imex" in res.stderr


def test_dropin_carries_configured_paths(tmp_path):
    cfg = cfg_with(tmp_path, run_dir="/srv/imex%run")
    text = render_dropin(cfg)
    assert "ConditionPathExists=\nConditionPathExists=/srv/imex%%run/job-%i/config.cfg" in text
    assert f"ExecStart=\nExecStart={REPO}/.venv/bin/imexctl-sim-imex -c " \
           "/srv/imex%%run/job-%i/config.cfg" in text
    assert "\nTimeoutStopSec=10\n" in text            # imex.stop_grace_s, default 10 s


@pytest.mark.parametrize("grace, want", [(10.0, 10), (0.1, 1), (42.5, 43), (600, 600)])
def test_dropin_stop_timeout_follows_the_grace(tmp_path, grace, want):
    """systemd, not imexctl, sends SIGKILL to the unit: at the epilog's grace."""
    from imexctl.config import parse_config
    cfg = parse_config({"imex": {"launcher": "systemd", "stop_grace_s": grace}}, None, "t1")
    assert f"\nTimeoutStopSec={want}\n" in render_dropin(cfg)


def test_recover_dropin_names_config_and_executable(tmp_path):
    files = render_all(cfg_with(tmp_path), Path("/opt/imexctl/bin/imexctl"), unit_dir=tmp_path)
    text = files[tmp_path / "imexctl-recover.service.d/imexctl-paths.conf"]
    assert "ExecStart=\nExecStart=/opt/imexctl/bin/imexctl recover\n" in text
    assert f"Environment=IMEXCTL_CONFIG={tmp_path}/imexctl.toml" in text


def test_persistent_dropin_carries_configured_paths(tmp_path):
    files = render_all(cfg_with(tmp_path, run_dir="/srv/imex%run"), Path("/usr/bin/imexctl"),
                       unit_dir=tmp_path)
    text = files[tmp_path / "imexctl-imex-persistent.service.d/imexctl-paths.conf"]
    assert "ConditionPathExists=\nConditionPathExists=/srv/imex%%run/persistent/config.cfg\n" \
        in text
    assert f"ExecStart=\nExecStart={REPO}/.venv/bin/imexctl-sim-imex -c " \
           "/srv/imex%%run/persistent/config.cfg\n" in text


def test_the_recover_unit_never_kills_the_persistent_daemon_it_started():
    """recover's direct launcher leaves the persistent nvidia-imex in this oneshot unit's
    cgroup: the unit stays active after recover exits, and stopping or restarting it
    signals only its main process."""
    text = (REPO / "systemd" / "imexctl-recover.service").read_text()
    assert "\nType=oneshot\n" in text and "\nRemainAfterExit=yes\n" in text
    assert "\nKillMode=process\n" in text


def test_unit_unsafe_path_refused(tmp_path):
    with pytest.raises(ConfigError, match="paths.run_dir"):
        render_dropin(cfg_with(tmp_path, run_dir="/srv/my run"))


@pytest.mark.skipif(os.geteuid() != 0, reason="systemd-tmpfiles --root chowns to root")
def test_tmpfiles_creates_configured_dirs(tmp_path):
    cfg = cfg_with(tmp_path, run_dir="/r/run", state_dir="/r/state",
                   log_file="/r/log/imexctl.log", channel_dir="/r/dev/ch")
    conf = tmp_path / "imexctl.conf"
    conf.write_text(render_tmpfiles(cfg))
    root = tmp_path / "root"
    root.mkdir()
    res = subprocess.run(["systemd-tmpfiles", "--create", f"--root={root}", str(conf)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    for d in ("r/run", "r/state", "r/log", "r/dev/ch"):
        st = os.lstat(root / d)
        assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o755 and st.st_uid == 0


def test_shipped_tmpfiles_matches_default_rendering():
    shipped = (REPO / "systemd/imexctl-tmpfiles.conf").read_text()
    lines = [ln for ln in shipped.splitlines() if ln and not ln.startswith("#")]
    rendered = render_tmpfiles(parse_config({}, None, "x"))
    assert lines == [ln for ln in rendered.splitlines() if ln and not ln.startswith("#")]


def test_cli_config_systemd_write(tmp_path, capsys):
    conf = tmp_path / "imexctl.toml"
    conf.write_text(f'[paths]\nrun_dir = "{tmp_path}/run"\nlog_file = "{tmp_path}/l.log"\n')
    root = tmp_path / "root"
    assert main(["--config", str(conf), "config", "systemd", "--write", "--root",
                 str(root)]) == 0
    dropin = root / "etc/systemd/system/imexctl-imex@.service.d/imexctl-paths.conf"
    assert f"ExecStart=/usr/bin/nvidia-imex -c {tmp_path}/run/job-%i/config.cfg" \
        in dropin.read_text()
    assert (root / "etc/tmpfiles.d/imexctl.conf").is_file()
    assert "systemctl daemon-reload" in capsys.readouterr().out
    assert main(["--config", str(conf), "config", "systemd"]) == 0
    assert "# ==> /etc/systemd/system/imexctl-recover.service.d/imexctl-paths.conf <==" \
        in capsys.readouterr().out
