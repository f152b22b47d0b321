"""imexctl.base.dataclass: the dataclasses subset the hook path uses, without its import cost.

The standard library's ``dataclasses`` is the oracle (as psutil is for imexctl.base.proc):
every behaviour test runs once on each implementation, with the same classes and the same
assertions. What imexctl's version refuses on purpose (``slots=``, ``order=``, ``InitVar``)
is not here; its own error messages are tested at the end.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from types import SimpleNamespace
from typing import ClassVar

import pytest

from imexctl.base import dataclass as records


def _classes(dc):
    """The same record classes, made by ``dc`` (imexctl.base.dataclass or dataclasses)."""
    dataclass, field = dc.dataclass, dc.field

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
        LIMIT: ClassVar[int] = 10   # a class variable, not a field

        def __post_init__(self) -> None:
            self.count = max(self.count, len(self.items))

    @dataclass(frozen=True)
    class Point3(Point):
        z: int = 0

    @dataclass
    class Plain:
        a: int
        b: str = "b"

    @dataclass(eq=False)
    class Identity:
        a: int

    @dataclass(frozen=True)
    class OwnRepr:
        a: int

        def __repr__(self) -> str:
            return "own"

    return SimpleNamespace(Point=Point, Shape=Shape, Mutable=Mutable, Point3=Point3,
                           Plain=Plain, Identity=Identity, OwnRepr=OwnRepr)


IMPLS = {"imexctl": records, "dataclasses": dataclasses}
CLASSES = {name: _classes(dc) for name, dc in IMPLS.items()}


@pytest.fixture(params=sorted(IMPLS))
def dc(request):
    """One implementation: its functions (dc.fields, dc.replace...) and its classes (dc.Point...)."""
    module = IMPLS[request.param]
    return SimpleNamespace(name=request.param, **vars(CLASSES[request.param]),
                           fields=module.fields, replace=module.replace, asdict=module.asdict,
                           field=module.field, dataclass=module.dataclass, MISSING=module.MISSING,
                           FrozenInstanceError=module.FrozenInstanceError)


def test_init_positional_keyword_and_defaults(dc):
    Point = dc.Point
    assert (Point(1).x, Point(1).y, Point(1, 2).y, Point(x=3, y=4).y) == (1, 0, 2, 4)
    for bad in (lambda: Point(), lambda: Point(1, q=2), lambda: Point(1, x=2),
                lambda: Point(1, 2, (), 4), lambda: dc.Plain(b="x")):
        with pytest.raises(TypeError):
            bad()


def test_frozen_records_refuse_assignment_and_hash_by_value(dc):
    p = dc.Point(1, 2)
    with pytest.raises(dc.FrozenInstanceError):
        p.x = 5
    with pytest.raises(dc.FrozenInstanceError):
        del p.y
    assert issubclass(dc.FrozenInstanceError, AttributeError)
    assert p == dc.Point(1, 2) and p != dc.Point(2, 1) and hash(p) == hash(dc.Point(1, 2))
    assert hash(p) == hash((1, 2, ()))   # the fields' tuple, as dataclasses hashes it
    assert len({dc.Point(1), dc.Point(1), dc.Point(2)}) == 2
    assert dc.Point(1) != dc.Point3(1)   # another class is never equal
    assert dc.Point(1).__eq__(object()) is NotImplemented


def test_eq_false_keeps_identity_and_object_hash(dc):
    a = dc.Identity(1)
    assert a != dc.Identity(1) and a == a and hash(a) == object.__hash__(a)


def test_a_class_s_own_dunder_is_kept(dc):
    assert repr(dc.OwnRepr(1)) == "own"


def test_compare_false_and_repr_false_fields(dc):
    a, b = dc.Shape("s", note="one"), dc.Shape("s", note="two")
    assert a == b and "note" not in repr(a)
    assert repr(dc.Point(1, 2)) == f"{dc.Point.__qualname__}(x=1, y=2, tags=())"


def test_default_factory_gives_each_instance_its_own_value(dc):
    a, b = dc.Shape("a"), dc.Shape("b")
    a.meta["k"] = 1
    assert b.meta == {}
    assert dc.Mutable().items is not dc.Mutable().items


def test_kw_only_post_init_and_unhashable_mutable_record(dc):
    with pytest.raises(TypeError):
        dc.Mutable([1])
    m = dc.Mutable(items=[1, 2, 3])
    assert m.count == 3
    m.count = 7   # not frozen
    assert m.count == 7
    with pytest.raises(TypeError, match="unhashable"):
        hash(m)


def test_fields_in_order_inherited_first_class_variables_left_out(dc):
    assert [f.name for f in dc.fields(dc.Point3)] == ["x", "y", "tags", "z"]
    assert dc.Point3(1, 2, (), 3).z == 3
    assert [f.name for f in dc.fields(dc.Mutable(items=[]))] == ["items", "count"]
    assert dc.Mutable.LIMIT == 10


def test_fields_carry_annotation_default_factory_repr_and_compare(dc):
    got = {f.name: (f.type, f.default, f.default_factory, f.repr, f.compare)
           for f in dc.fields(dc.Shape)}
    assert got == {"name": ("str", dc.MISSING, dc.MISSING, True, True),
                   "points": ("tuple[Point, ...]", (), dc.MISSING, True, True),
                   "meta": ("dict", dc.MISSING, dict, True, True),
                   "note": ("str", "", dc.MISSING, False, False)}
    with pytest.raises(TypeError):
        dc.fields(object())


def test_replace_builds_a_new_record_and_reruns_post_init(dc):
    p = dc.Point(1, 2)
    q = dc.replace(p, y=5)
    assert (p.y, q.y, q.x, type(q)) == (2, 5, 1, dc.Point)
    m = dc.replace(dc.Mutable(items=[1]), items=[1, 2, 3, 4])
    assert m.count == 4
    with pytest.raises(TypeError):
        dc.replace(p, nope=1)


def test_asdict_is_plain_data_all_the_way_down(dc):
    s = dc.Shape("tri", (dc.Point(1, tags=("a",)), dc.Point(2)), {"k": [dc.Point(3)]})
    out = dc.asdict(s)
    assert out == {"name": "tri", "points": ({"x": 1, "y": 0, "tags": ("a",)},
                                             {"x": 2, "y": 0, "tags": ()}),
                   "meta": {"k": [{"x": 3, "y": 0, "tags": ()}]}, "note": ""}
    assert type(out["points"]) is tuple and type(out["meta"]["k"]) is list
    out["meta"]["k"].append(1)
    assert s.meta == {"k": [dc.Point(3)]}   # a copy, not the record's own dict
    with pytest.raises(TypeError):
        dc.asdict(dc.Point)


def test_mutable_default_is_refused(dc):
    with pytest.raises(ValueError, match="mutable default .*list.* for field items"):
        @dc.dataclass
        class Bad:
            items: list = []   # noqa: RUF012


def test_a_required_field_after_a_default_is_refused_unless_keyword_only(dc):
    with pytest.raises(TypeError, match="non-default argument 'z' follows default argument"):
        @dc.dataclass
        class Bad:
            y: int = 0
            z: int

    @dc.dataclass(kw_only=True)
    class Good:
        y: int = 0
        z: int
    assert Good(z=1).y == 0


def test_the_oracle_agrees_on_every_outcome():
    """The same calls on both implementations: the same results, or the same exception type."""
    def outcome(fn):
        try:
            value = fn()
        except Exception as e:   # noqa: BLE001 - the exception type is the outcome
            return type(e).__name__
        return value if isinstance(value, (bool, int, str, dict, tuple)) else repr(value)

    def calls(c, m):
        return [lambda: c.Point(1, 2) == c.Point(1, 2), lambda: c.Point(1) == c.Point3(1),
                lambda: m.asdict(c.Shape("s", (c.Point(1),))), lambda: c.Point(),
                lambda: c.Point(1, y=2, q=3), lambda: m.replace(c.Point(1), y=9),
                lambda: [f.name for f in m.fields(c.Shape)], lambda: c.Mutable(1),
                lambda: c.Mutable(items=[1, 2]).count, lambda: hash(c.Plain(1)),
                lambda: c.Plain(1) == c.Plain(1), lambda: c.Plain(1, "x") != c.Plain(1)]

    ours = [outcome(f) for f in calls(CLASSES["imexctl"], records)]
    oracle = [outcome(f) for f in calls(CLASSES["dataclasses"], dataclasses)]
    assert ours == oracle


def test_imexctl_error_messages_name_the_class_and_the_argument():
    Point = CLASSES["imexctl"].Point
    with pytest.raises(TypeError, match="missing required argument: 'x'"):
        Point()
    with pytest.raises(TypeError, match="unexpected keyword argument 'q'"):
        Point(1, q=2)
    with pytest.raises(TypeError, match="multiple values for argument 'x'"):
        Point(1, x=2)
    with pytest.raises(TypeError, match="takes 3 positional"):
        Point(1, 2, (), 4)


def test_the_hook_modules_do_not_import_dataclasses_or_inspect():
    """What the module exists for: a hook pays neither import."""
    code = ("import sys; import imexctl.config, imexctl.lifecycle.prolog, imexctl.lifecycle.epilog, "
            "imexctl.controller.slurmctld, imexctl.slurm.context; "
            "print(sorted({'dataclasses', 'inspect'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
