"""imexctl.base.dataclass: the dataclasses subset the hook path uses, without its import cost."""

from __future__ import annotations

import subprocess
import sys

import pytest

from imexctl.base.dataclass import FrozenInstanceError, asdict, dataclass, field, fields, replace


@dataclass(frozen=True)
class Point:
    x: int
    y: int = 0
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Shape:
    name: str
    points: tuple[Point, ...] = ()
    meta: dict = field(default_factory=dict)
    note: str = field(default="", repr=False, compare=False)


@dataclass(kw_only=True)
class Mutable:
    items: list = field(default_factory=list)
    count: int = 1

    def __post_init__(self) -> None:
        self.count = max(self.count, len(self.items))


@dataclass(frozen=True)
class Point3(Point):
    z: int = 0


def test_init_positional_keyword_and_defaults():
    assert (Point(1).x, Point(1).y, Point(1, 2).y, Point(x=3, y=4).y) == (1, 0, 2, 4)
    with pytest.raises(TypeError, match="missing required argument: 'x'"):
        Point()
    with pytest.raises(TypeError, match="unexpected keyword argument 'q'"):
        Point(1, q=2)
    with pytest.raises(TypeError, match="multiple values for argument 'x'"):
        Point(1, x=2)
    with pytest.raises(TypeError, match="takes 3 positional"):
        Point(1, 2, (), 4)


def test_frozen_records_refuse_assignment_and_hash_by_value():
    p = Point(1, 2)
    with pytest.raises(FrozenInstanceError):
        p.x = 5
    with pytest.raises(AttributeError):
        del p.y
    assert p == Point(1, 2) and p != Point(2, 1) and hash(p) == hash(Point(1, 2))
    assert len({Point(1), Point(1), Point(2)}) == 2
    assert Point(1) != Point3(1)   # another class is never equal


def test_compare_false_and_repr_false_fields():
    a, b = Shape("s", note="one"), Shape("s", note="two")
    assert a == b and "note" not in repr(a)
    assert repr(Point(1, 2)) == "Point(x=1, y=2, tags=())"


def test_default_factory_gives_each_instance_its_own_value():
    a, b = Shape("a"), Shape("b")
    a.meta["k"] = 1
    assert b.meta == {}


def test_kw_only_post_init_and_unhashable_mutable_record():
    with pytest.raises(TypeError, match="takes 0 positional"):
        Mutable([1])
    m = Mutable(items=[1, 2, 3])
    assert m.count == 3
    m.count = 7   # not frozen
    assert m.count == 7
    with pytest.raises(TypeError, match="unhashable"):
        hash(m)


def test_inherited_fields_come_first():
    assert [f.name for f in fields(Point3)] == ["x", "y", "tags", "z"]
    assert Point3(1, 2, (), 3).z == 3


def test_replace_builds_a_new_record_and_reruns_post_init():
    p = Point(1, 2)
    q = replace(p, y=5)
    assert (p.y, q.y, q.x) == (2, 5, 1)
    m = replace(Mutable(items=[1]), items=[1, 2, 3, 4])
    assert m.count == 4
    with pytest.raises(TypeError):
        replace(p, nope=1)


def test_asdict_is_plain_data_all_the_way_down():
    s = Shape("tri", (Point(1, tags=("a",)), Point(2)), {"k": [Point(3)]})
    out = asdict(s)
    assert out == {"name": "tri", "points": ({"x": 1, "y": 0, "tags": ("a",)},
                                             {"x": 2, "y": 0, "tags": ()}),
                   "meta": {"k": [{"x": 3, "y": 0, "tags": ()}]}, "note": ""}
    out["meta"]["k"].append(1)
    assert s.meta == {"k": [Point(3)]}   # a copy, not the record's own dict
    with pytest.raises(TypeError):
        asdict(Point)


def test_mutable_default_is_refused():
    with pytest.raises(ValueError, match="mutable default list for field items"):
        @dataclass
        class Bad:
            items: list = []   # noqa: RUF012


def test_fields_carry_the_annotation():
    assert {f.name: f.type for f in fields(Point)} == {"x": "int", "y": "int",
                                                        "tags": "tuple[str, ...]"}


def test_the_hook_modules_do_not_import_dataclasses_or_inspect():
    """What the module exists for: a hook pays neither import."""
    code = ("import sys; import imexctl.config, imexctl.lifecycle.prolog, imexctl.lifecycle.epilog, "
            "imexctl.controller.slurmctld, imexctl.slurm.context; "
            "print(sorted({'dataclasses', 'inspect'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
