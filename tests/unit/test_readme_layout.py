"""The README's layout names every module of the package: a module added without a word
on what it is for fails here."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def layout() -> str:
    text = (REPO / "README.md").read_text()
    start = text.index("## Layout")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


def test_every_top_level_module_is_named_in_the_readme_layout():
    section = layout()
    modules = sorted(p.name for p in (REPO / "imexctl").glob("*.py")
                     if p.name not in ("__init__.py", "__main__.py"))
    assert len(modules) > 30
    assert [m for m in modules if f"`{m}`" not in section] == []


def test_every_subpackage_is_named_in_the_readme_layout():
    section = layout()
    packages = sorted(p.name for p in (REPO / "imexctl").iterdir()
                      if (p / "__init__.py").is_file())
    assert packages and [p for p in packages if f"`{p}/`" not in section] == []
