"""Typed records for the hook path: the part of ``dataclasses`` imexctl uses, made cheap.

Every tray runs a hook at every job start and end, and each hook builds 30 to 60 record
classes (the configuration alone has a dozen sections). ``dataclasses`` imports
``inspect`` (with ``ast``, ``tokenize``, ``enum``) and compiles an ``__init__``,
``__repr__`` and ``__eq__`` with ``exec`` for every class: the largest single start-up
cost of a hook (bench/startup.py).
Here a class is made by attaching shared closures: no import beyond ``sys``, no ``exec``.

Same spelling and semantics for what imexctl uses: ``@dataclass``, ``@dataclass(frozen=
True)``, ``@dataclass(kw_only=True)``, ``field(default=..., default_factory=..., repr=...,
compare=...)``, ``fields``, ``replace``, ``asdict``, ``__post_init__``, inherited fields,
and a class's own ``__init__``/``__repr__``/``__eq__``/``__hash__`` left alone. Assigning
to a frozen record raises :class:`FrozenInstanceError`, an ``AttributeError``.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, TypeVar, dataclass_transform, overload
    _T = TypeVar("_T")
else:
    def dataclass_transform(**_: object):
        """At run time a no-op; type checkers see ``typing.dataclass_transform``."""
        return lambda fn: fn

    def overload(fn):
        return fn

__all__ = ["FrozenInstanceError", "Field", "MISSING", "asdict", "dataclass", "field",
           "fields", "is_record", "replace"]

FIELDS = "__record_fields__"


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


class FrozenInstanceError(AttributeError):
    """Assignment to a field of a frozen record."""


class Field:
    """One field: its name, default or default factory, and whether repr and == use it."""

    __slots__ = ("name", "type", "default", "default_factory", "repr", "compare")

    def __init__(self, default: Any = MISSING, default_factory: Any = MISSING,
                 repr: bool = True, compare: bool = True):  # noqa: A002 - dataclasses' names
        if default is not MISSING and default_factory is not MISSING:
            raise ValueError("cannot specify both default and default_factory")
        self.name = ""
        self.type: Any = None     # the annotation (a string under postponed evaluation)
        self.default = default
        self.default_factory = default_factory
        self.repr = repr
        self.compare = compare

    def __repr__(self) -> str:
        return f"Field(name={self.name!r})"


def field(*, default: Any = MISSING, default_factory: Any = MISSING, repr: bool = True,  # noqa: A002
          compare: bool = True) -> Any:
    return Field(default, default_factory, repr, compare)


@overload
def dataclass(cls: type[_T], /) -> type[_T]: ...


@overload
def dataclass(cls: None = None, /, *, frozen: bool = False, kw_only: bool = False,
              eq: bool = True) -> Callable[[type[_T]], type[_T]]: ...


@dataclass_transform(field_specifiers=(field, Field))
def dataclass(cls: type | None = None, /, *, frozen: bool = False, kw_only: bool = False,
              eq: bool = True) -> Any:
    """Make ``cls`` a record (usable bare or with arguments, like ``dataclasses.dataclass``).

    Type checkers see it as a dataclass (``typing.dataclass_transform``): they check every
    constructor call. tests/unit/test_record.py holds it to ``dataclasses``' behaviour.
    """
    def wrap(klass: type) -> type:
        return _make(klass, frozen, kw_only, eq)
    return wrap if cls is None else wrap(cls)


def _make(cls: type, frozen: bool, kw_only: bool, eq: bool) -> type:
    own = cls.__dict__
    merged: dict[str, Field] = {}
    for base in reversed(cls.__mro__[1:]):
        for f in base.__dict__.get(FIELDS, ()):
            merged[f.name] = f
    for name, kind in own.get("__annotations__", {}).items():
        if isinstance(kind, str) and kind.replace("typing.", "").startswith("ClassVar"):
            continue
        value = own.get(name, MISSING)
        if isinstance(value, Field):
            f = value
            if f.default is MISSING:
                delattr(cls, name)
            else:
                setattr(cls, name, f.default)
        else:
            if isinstance(value, (list, dict, set)):
                raise ValueError(f"mutable default {type(value).__name__} for field {name}: "
                                 "use default_factory")
            f = Field(value)
        f.name, f.type = name, kind
        merged[name] = f
    all_fields = tuple(merged.values())
    if not kw_only:
        _check_order(all_fields)
    setattr(cls, FIELDS, all_fields)
    _attach(cls, "__init__", _init(cls.__name__, all_fields, kw_only,
                                   hasattr(cls, "__post_init__")))
    _attach(cls, "__repr__", _repr(tuple(f.name for f in all_fields if f.repr)))
    compared = tuple(f.name for f in all_fields if f.compare)
    if eq:
        _attach(cls, "__eq__", _eq(compared))
        if "__hash__" not in own:
            # dataclasses' rule: eq and frozen hash by value; eq alone is unhashable.
            cls.__hash__ = _hash(compared) if frozen else None  # type: ignore[assignment]
    if frozen:
        cls.__setattr__ = _frozen_set  # type: ignore[assignment]
        cls.__delattr__ = _frozen_del  # type: ignore[assignment]
    return cls


def _check_order(all_fields: tuple[Field, ...]) -> None:
    """dataclasses' rule: a positional field without a default cannot follow one with a default."""
    after = ""
    for f in all_fields:
        if f.default is not MISSING or f.default_factory is not MISSING:
            after = after or f.name
        elif after:
            raise TypeError(f"non-default argument {f.name!r} follows default argument {after!r}")


def _attach(cls: type, name: str, fn: Callable) -> None:
    if name not in cls.__dict__:
        fn.__name__ = name
        fn.__qualname__ = f"{cls.__qualname__}.{name}"
        setattr(cls, name, fn)


def _init(cls_name: str, all_fields: tuple[Field, ...], kw_only: bool, post: bool) -> Callable:
    names = frozenset(f.name for f in all_fields)
    positional = () if kw_only else tuple(f.name for f in all_fields)
    setter = object.__setattr__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if len(args) > len(positional):
            raise TypeError(f"{cls_name}() takes {len(positional)} positional arguments "
                            f"but {len(args)} were given")
        for key in kwargs:
            if key not in names:
                raise TypeError(f"{cls_name}() got an unexpected keyword argument {key!r}")
        for name, value in zip(positional, args):
            if name in kwargs:
                raise TypeError(f"{cls_name}() got multiple values for argument {name!r}")
            kwargs[name] = value
        for f in all_fields:
            if f.name in kwargs:
                value = kwargs[f.name]
            elif f.default is not MISSING:
                value = f.default
            elif f.default_factory is not MISSING:
                value = f.default_factory()
            else:
                raise TypeError(f"{cls_name}() missing required argument: {f.name!r}")
            setter(self, f.name, value)
        if post:
            self.__post_init__()
    return __init__


def _repr(names: tuple[str, ...]) -> Callable:
    def __repr__(self: Any) -> str:
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in names)
        return f"{type(self).__qualname__}({inner})"
    return __repr__


def _eq(names: tuple[str, ...]) -> Callable:
    def __eq__(self: Any, other: Any) -> Any:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n in names)
    return __eq__


def _hash(names: tuple[str, ...]) -> Callable:
    def __hash__(self: Any) -> int:
        return hash(tuple(getattr(self, n) for n in names))
    return __hash__


def _frozen_set(self: Any, name: str, value: Any) -> None:
    raise FrozenInstanceError(f"cannot assign to field {name!r} of frozen {type(self).__name__}")


def _frozen_del(self: Any, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete field {name!r} of frozen {type(self).__name__}")


def is_record(obj: Any) -> bool:
    return hasattr(type(obj) if not isinstance(obj, type) else obj, FIELDS)


def _real_dataclass(obj: Any) -> Any:
    """``dataclasses`` itself for a real dataclass (tests' fakes), imported only then."""
    if hasattr(obj, "__dataclass_fields__"):
        import dataclasses
        return dataclasses
    return None


def fields(obj: Any) -> tuple[Field, ...]:
    try:
        return getattr(obj, FIELDS)
    except AttributeError:
        if (real := _real_dataclass(obj)) is not None:
            return real.fields(obj)
        raise TypeError(f"{obj!r} is not a record") from None


def replace(obj: _T, /, **changes: Any) -> _T:
    """A copy of ``obj`` with ``changes`` (``__post_init__`` runs again, as in dataclasses)."""
    if not is_record(obj) and (real := _real_dataclass(obj)) is not None:
        return real.replace(obj, **changes)
    values = {f.name: getattr(obj, f.name) for f in fields(obj) if f.name not in changes}
    return type(obj)(**values, **changes)


def asdict(obj: Any) -> dict[str, Any]:
    """The record as plain dicts, lists and tuples, all the way down (JSON-ready)."""
    if not is_record(obj) or isinstance(obj, type):
        raise TypeError("asdict() should be called on record instances")
    return _plain(obj)


def _plain(value: Any) -> Any:
    if is_record(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(_plain(v) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    return value
