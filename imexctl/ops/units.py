"""systemd drop-ins rendered from the configuration (audit S-02).

The unit files in ``systemd/`` carry the built-in default paths. A site whose
``[paths]`` differ installs what :func:`render_all` returns: a drop-in for the per-job
unit (its ``ExecStart`` and ``ConditionPathExists`` use ``paths.imex_binary`` and
``paths.run_dir``), one for the recovery unit (this installation's imexctl and config
file), and the tmpfiles.d file for the configured directories. Rendering is pure: the
CLI writes the files.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from imexctl.config import Config
from imexctl.imex.launcher import stop_timeout_s
from imexctl.tray import jobdir
from imexctl.errors import ConfigError

UNIT_DIR = Path("/etc/systemd/system")
DROPIN_NAME = "imexctl-paths.conf"
DROPIN_PATH = UNIT_DIR / "imexctl-imex@.service.d" / DROPIN_NAME
RECOVER_DROPIN = Path("imexctl-recover.service.d") / DROPIN_NAME
PERSISTENT_DROPIN = Path("imexctl-imex-persistent.service.d") / DROPIN_NAME
TMPFILES_PATH = Path("/etc/tmpfiles.d/imexctl.conf")
_SAFE = r"/[A-Za-z0-9._/+@:=%-]*"


def _unit_path(path: Path | str, what: str) -> str:
    """A path as a unit file needs it: no whitespace or quotes, ``%`` escaped."""
    text = str(path)
    if not re.fullmatch(_SAFE, text):
        raise ConfigError(f"{what} = {text!r}: a systemd unit cannot carry this path "
                          "(use letters, digits and ._/+@:=%- only)")
    return text.replace("%", "%%")


def _header(cfg: Config) -> str:
    source = cfg.source or "built-in defaults"
    return (f"# Rendered by `imexctl config systemd` from {source} (node {cfg.node or '?'}).\n"
            "# Re-render after changing [paths]; `imexctl doctor` reports a stale copy.\n")


def render_dropin(cfg: Config) -> str:
    """Drop-in for ``imexctl-imex@.service``: the configured daemon, run_dir and stop grace
    (the epilog's SIGTERM-to-SIGKILL wait, as with the direct launcher)."""
    run = _unit_path(cfg.paths.run_dir, "paths.run_dir")
    binary = _unit_path(cfg.paths.imex_binary, "paths.imex_binary")
    return (_header(cfg) + "[Unit]\nConditionPathExists=\n"
            f"ConditionPathExists={run}/{jobdir.PREFIX}%i/{jobdir.CONFIG}\n\n"
            "[Service]\nExecStart=\n"
            f"ExecStart={binary} -c {run}/{jobdir.PREFIX}%i/{jobdir.CONFIG}\n"
            f"TimeoutStopSec={stop_timeout_s(cfg.imex.stop_grace_s)}\n")


def render_persistent_dropin(cfg: Config) -> str:
    """Drop-in for ``imexctl-imex-persistent.service``: the configured daemon, the
    persistent domain's directory under run_dir, and the stop grace."""
    conf = _unit_path(jobdir.persistent_path(cfg.paths.run_dir) / jobdir.CONFIG,
                      "paths.run_dir")
    binary = _unit_path(cfg.paths.imex_binary, "paths.imex_binary")
    return (_header(cfg) + f"[Unit]\nConditionPathExists=\nConditionPathExists={conf}\n\n"
            f"[Service]\nExecStart=\nExecStart={binary} -c {conf}\n"
            f"TimeoutStopSec={stop_timeout_s(cfg.imex.stop_grace_s)}\n")


def render_recover_dropin(cfg: Config, imexctl_exe: Path) -> str:
    """Drop-in for ``imexctl-recover.service``: this imexctl, this configuration file."""
    exe = _unit_path(imexctl_exe, "imexctl executable")
    env = (f"Environment=IMEXCTL_CONFIG={_unit_path(cfg.source, 'configuration file')}\n"
           if cfg.source else "")
    return _header(cfg) + f"[Service]\nExecStart=\nExecStart={exe} recover\n" + env


def render_tmpfiles(cfg: Config) -> str:
    dirs = [cfg.paths.run_dir, cfg.paths.state_dir, cfg.paths.log_file.parent,
            cfg.paths.channel_dir]
    lines = [f"d {_unit_path(d, 'path')} 0755 root root -" for d in dict.fromkeys(dirs)]
    return _header(cfg) + "\n".join(lines) + "\n"


def render_all(cfg: Config, imexctl_exe: Path, unit_dir: Path = UNIT_DIR,
               tmpfiles: Path = TMPFILES_PATH) -> dict[Path, str]:
    """Every file `imexctl config systemd` installs, by absolute path."""
    return {
        unit_dir / DROPIN_PATH.relative_to(UNIT_DIR): render_dropin(cfg),
        unit_dir / RECOVER_DROPIN: render_recover_dropin(cfg, imexctl_exe),
        unit_dir / PERSISTENT_DROPIN: render_persistent_dropin(cfg),
        tmpfiles: render_tmpfiles(cfg),
    }


def this_imexctl() -> Path:
    """The imexctl executable of this installation (for the recovery unit)."""
    import shutil
    import sys

    here = Path(sys.argv[0])
    if here.name == "imexctl" and here.is_absolute():
        return here
    found = shutil.which("imexctl", path=os.pathsep.join(
        [str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin"]))
    return Path(found) if found else Path("/usr/local/bin/imexctl")
