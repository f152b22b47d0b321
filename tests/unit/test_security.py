"""Security properties over the whole package (issue 12): no subprocess goes through a
shell, and no file imexctl reads can block a hook by being a FIFO. The symlink, directory
and channel-mode properties live beside the code they test (test_state_fsutil.py,
test_channels*.py, test_hook_faults.py); this file holds the checks that span modules."""

from __future__ import annotations

import ast
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from imexctl.tray.channels import read_driver_params, read_major
from imexctl.rules.groups import ChannelError
from imexctl.tray.bootid import current_boot_id
from tests.support.lifecycle import make_cfg

PKG = Path(__file__).resolve().parents[2] / "imexctl"
SHELLS = {"sh", "bash", "dash", "zsh", "/bin/sh", "/bin/bash", "/usr/bin/sh", "/usr/bin/bash"}
SHELL_CALLS = {("os", "system"), ("os", "popen"), ("asyncio", "create_subprocess_shell"),
               ("subprocess", "getoutput"), ("subprocess", "getstatusoutput")}


def sources():
    for path in sorted(PKG.rglob("*.py")):
        yield path.relative_to(PKG.parent), ast.parse(path.read_text(), str(path))


def shell_uses(tree: ast.AST) -> list[str]:
    """shell=<anything but False>, os.system-like calls, and argv lists starting with a shell."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                    found.append(f"line {node.lineno}: shell={ast.unparse(kw.value)}")
            f = node.func
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and (f.value.id, f.attr) in SHELL_CALLS:
                found.append(f"line {node.lineno}: {f.value.id}.{f.attr}()")
        if isinstance(node, (ast.List, ast.Tuple)) and len(node.elts) >= 2:
            first, second = node.elts[0], node.elts[1]
            if (isinstance(first, ast.Constant) and first.value in SHELLS
                    and isinstance(second, ast.Constant) and second.value == "-c"):
                found.append(f"line {node.lineno}: [{first.value!r}, '-c', ...]")
    return found


def test_no_subprocess_uses_a_shell():
    bad = {str(p): hits for p, tree in sources() if (hits := shell_uses(tree))}
    assert bad == {}


def test_the_shell_check_finds_each_form():
    """The check above can fail: each forbidden form is caught in a sample."""
    sample = ast.parse("import os, subprocess\nsubprocess.run('x', shell=True)\nos.system('x')\n"
                       "subprocess.Popen(['/bin/sh', '-c', 'x'])\nsubprocess.run(a, shell=flag)\n"
                       "subprocess.run(['ls'], shell=False)\n")
    assert len(shell_uses(sample)) == 4


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


def test_proc_devices_fifo_is_refused_without_blocking(fifo, no_hang):
    with pytest.raises(ChannelError, match="cannot read"):
        read_major(fifo)


def test_driver_params_fifo_is_refused_without_blocking(fifo, no_hang):
    with pytest.raises(ChannelError, match="cannot read"):
        read_driver_params(fifo)


def test_boot_id_fifo_reads_as_unknown_without_blocking(fifo, no_hang):
    assert current_boot_id(SimpleNamespace(paths=SimpleNamespace(boot_id_file=fifo))) is None


def test_metrics_never_write_through_a_symlinked_state_dir(tmp_path):
    """Audit r12: health with state_dir a symlink created `metrics/` in the link's target."""
    from imexctl.ops import metrics
    cfg = make_cfg(tmp_path)
    victim = tmp_path / "victim"
    victim.mkdir()
    state = type(cfg.paths.state_dir)(cfg.paths.state_dir)
    if state.exists():
        state.rmdir()
    state.symlink_to(victim)
    metrics.count(cfg, "stale_domains_found")
    assert os.listdir(victim) == []


@pytest.mark.parametrize("kind", ["fifo", "directory", "symlink-loop"])
def test_config_that_is_not_a_regular_file_is_a_config_error(tmp_path, no_hang, kind):
    """Audit r20: a FIFO as the config blocked every command; a directory or a symlink
    loop escaped as a raw OSError (exit 1 instead of the config error's 3)."""
    from imexctl.config import load_config
    from imexctl.errors import ConfigError
    path = tmp_path / "imexctl.toml"
    {"fifo": os.mkfifo, "directory": os.mkdir, "symlink-loop": lambda p: os.symlink(p, p)}[kind](path)
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(path, node="tray01")


def test_config_through_a_symlink_still_loads(tmp_path):
    from imexctl.config import load_config
    real = tmp_path / "real.toml"
    real.write_text("[imex]\nready_timeout_s = 7\n")
    (tmp_path / "imexctl.toml").symlink_to(real)
    assert load_config(tmp_path / "imexctl.toml", node="tray01").imex.ready_timeout_s == 7
