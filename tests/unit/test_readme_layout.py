"""The README's layout names every part and every module of the package under its part,
and every path a doc names exists: a module added or moved without a word fails here."""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PKG = REPO / "imexctl"


def layout() -> str:
    text = (REPO / "README.md").read_text()
    start = text.index("## Layout")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


def part_entry(section: str, part: str) -> str:
    """The README's bullet of one part (``- `tray/`: ...`` up to the next bullet)."""
    m = re.search(rf"^- `{re.escape(part)}/`:(.*?)(?=^- |\Z)", section, re.M | re.S)
    assert m, f"README layout has no bullet for {part}/"
    return m.group(1)


def test_every_part_and_its_modules_are_named_in_the_readme_layout():
    section = layout()
    parts = sorted(p.name for p in PKG.iterdir() if (p / "__init__.py").is_file())
    assert len(parts) >= 9
    missing = []
    for part in parts:
        entry = part_entry(section, part)
        for module in sorted((PKG / part).glob("*.py")):
            if module.name != "__init__.py" and f"`{module.name}`" not in entry:
                missing.append(f"{part}/{module.name}")
    assert missing == []


def test_top_level_modules_are_named_in_the_readme_layout():
    section = layout()
    modules = sorted(p.name for p in PKG.glob("*.py")
                     if p.name not in ("__init__.py", "__main__.py"))
    assert modules == ["config.py", "errors.py"]
    assert [m for m in modules if f"`{m}`" not in section] == []


def test_the_layout_names_no_module_that_is_gone():
    section = layout()
    named = set(re.findall(r"`([a-z_]+\.py)`", section))
    present = {p.name for p in PKG.rglob("*.py")}
    assert sorted(named - present) == []


# Names shaped like a module that are files or Prometheus rule groups.
NOT_MODULES = {"imexctl.log", "imexctl.toml", "imexctl.prom", "imexctl.alerts",
               "imexctl.recording"}
DOCS = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md"), REPO / "bench" / "README.md",
               REPO / "sim" / "README.md"] if (REPO / "sim" / "README.md").exists() else
              [REPO / "README.md", *(REPO / "docs").glob("*.md"), REPO / "bench" / "README.md"])


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_code_path_a_doc_names_exists(doc):
    """``imexctl/tray/fabric.py`` and ``imexctl.tray.fabric`` (a module, or a name in
    one) must be in the tree: docs follow the code when it moves."""
    text = doc.read_text()
    gone = []
    for path in set(re.findall(r"(?<![\w/.-])((?:imexctl|sim/imexctl_sim|tests|bench|scripts|hooks)"
                               r"/[\w/.-]*\w)", text)):
        if not (REPO / path).exists():
            gone.append(path)
    for dotted in set(re.findall(r"(?<![\w./-])(imexctl(?:\.[a-z_]\w*)+)(?![\w./])", text)):
        if dotted in NOT_MODULES:
            continue
        parts = dotted.split(".")
        for n in range(len(parts), 1, -1):   # the longest prefix that is a module or package
            base = REPO.joinpath(*parts[:n])
            if base.with_suffix(".py").is_file() or (base / "__init__.py").is_file():
                break
        else:
            gone.append(dotted)
    assert sorted(gone) == [], f"{doc.name} names what is not in the tree"
