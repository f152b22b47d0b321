"""What the Debian package build generates and pins, checked without building it
(tests/integration/test_package.py builds and installs the package)."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

from imexctl import config
from imexctl.cli.parser import build_parser
from imexctl.base.dataclass import fields

ROOT = Path(__file__).resolve().parents[2]


def script(name: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / name), *args],
                          capture_output=True, text=True, check=True)


def uncommented(text: str) -> str:
    """The default file with every `# key = value` and `# [section]` line made live."""
    out = []
    for line in text.splitlines():
        if re.fullmatch(r"# \[[a-z]+\]", line):
            out.append(line[2:])
        elif re.fullmatch(r"# [a-z_]+ = .*", line) and "(unset by default)" not in line:
            out.append(line[2:])
    return "\n".join(out) + "\n"


def test_default_config_names_every_key_and_is_all_comments(tmp_path):
    text = script("default-config").stdout
    assert all(not line or line.startswith("#") for line in text.splitlines())
    for section, cls in config.SECTIONS.items():
        assert f"# [{section}]" in text
        for f in fields(cls):
            if f.name == "partition_multi_clique":
                assert "# [policy.partition.<name>] multi_clique" in text
            else:
                assert re.search(rf"^# {f.name} =", text, re.M), f"{section}.{f.name}"


def test_default_config_uncommented_is_the_built_in_defaults(tmp_path):
    live = tmp_path / "imexctl.toml"
    live.write_text(uncommented(script("default-config").stdout))
    tomllib.loads(live.read_text())
    cfg = config.load_config(live, node="tray01")
    default = config.parse_config({}, None, "tray01")
    for section in config.SECTIONS:
        assert getattr(cfg, section) == getattr(default, section), section


def test_manpage_lists_every_subcommand_and_option(tmp_path):
    out = tmp_path / "imexctl.8"
    script("manpage", str(out))
    page = out.read_text()
    assert page.startswith(".TH IMEXCTL 8 ")
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name, p in sub.choices.items():
        assert f".SS {name.replace('-', chr(92) + '-')}\n" in page, name
        for action in p._actions:
            for opt in action.option_strings:
                if opt not in ("-h", "--help"):
                    assert opt.replace("-", "\\-") in page, (name, opt)
    man = subprocess.run(["man", "--warnings", "-l", "-Tutf8", str(out)], capture_output=True,
                         text=True)
    if man.returncode == 0:             # man-db present: groff says nothing about the page
        assert "warning" not in man.stderr, man.stderr


def test_constraints_pin_every_dependency_by_hash_inside_pyproject_ranges():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    ranges = {}
    for dep in project["dependencies"]:
        name, spec = re.fullmatch(r"([A-Za-z0-9_.-]+)(.*)", dep).groups()
        ranges[name.lower()] = spec.split(",")
    text = (ROOT / "constraints.txt").read_text().replace("\\\n", " ")
    pins = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)==(\S+)((?:\s+--hash=sha256:[0-9a-f]{64})+)\s*", line)
        assert m, f"constraints.txt: not NAME==VERSION --hash=sha256:...: {line!r}"
        pins[m.group(1).lower()] = m.group(2)
    assert set(pins) == set(ranges), "constraints.txt must pin exactly pyproject's dependencies"

    def v(text: str) -> tuple[int, ...]:
        return tuple(int(x) for x in text.split("."))

    for name, version in pins.items():
        for bound in ranges[name]:
            op, ref = re.fullmatch(r"(>=|<|==|<=|>)(.+)", bound.strip()).groups()
            ok = {">=": v(version) >= v(ref), "<": v(version) < v(ref),
                  "<=": v(version) <= v(ref), ">": v(version) > v(ref),
                  "==": v(version) == v(ref)}[op]
            assert ok, f"{name}=={version} outside pyproject's {bound}"


def test_constraints_auth_pins_the_auth_extra_and_its_dependencies_for_both_architectures():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (extra,) = project["optional-dependencies"]["auth"]
    name, spec = re.fullmatch(r"([A-Za-z0-9_.-]+)(.*)", extra).groups()
    text = (ROOT / "constraints-auth.txt").read_text().replace("\\\n", " ")
    pins = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)==(\S+)((?:\s+--hash=sha256:[0-9a-f]{64})+)\s*", line)
        assert m, f"constraints-auth.txt: not NAME==VERSION --hash=sha256:...: {line!r}"
        pins[m.group(1).lower()] = (m.group(2), m.group(3).split())
    # cryptography's run-time dependencies (cffi, and cffi's pycparser) come with it
    assert set(pins) == {name, "cffi", "pycparser"}
    lo, hi = (b.strip() for b in spec.split(","))
    version = tuple(int(x) for x in pins[name][0].split("."))
    assert version >= tuple(int(x) for x in lo[2:].split(".")) and \
        version < tuple(int(x) for x in hi[1:].split("."))
    # compiled wheels: x86_64 and aarch64 (manylinux 2_28 and 2_34); cffi per CPython 3.11-3.14
    assert len(pins[name][1]) >= 4 and len(pins["cffi"][1]) >= 8
