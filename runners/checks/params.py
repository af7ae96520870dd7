"""Check parameters: one typed, documented dataclass per check.

A plan's ``params`` table is parsed into the check's `CheckParams` subclass:
an unknown name or a value of the wrong type is a `ParamError` naming the
parameter and what it must be. The receipt records the check's defaults
updated by the parameters the plan gave (harness options only when given),
the values as written in the plan.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import sys
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from runners.contract.names import Observer
from runners.contract.result import Json

P = TypeVar("P", bound="CheckParams")


class ParamError(ValueError):
    """A check parameter is unknown or has the wrong type or value."""


@dataclass(kw_only=True, slots=True, frozen=True)
class CheckParams:
    """Options every check takes; they configure the harness, not the check."""

    observer: Observer = "off"
    """``on``: instrument the run (CUDA memory snapshot, CPU storage events) and attach the
    trace as an artifact; with the claim's ``observer_off`` an observer-off control runs
    too. Never recorded in the parameters: the receipt's ``observer`` field says it."""
    deterministic_warn_only: bool = True
    """Ops without a deterministic kernel warn (counted in the measurements) instead of
    raising."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = _checked(f.name, _hints(type(self))[f.name], getattr(self, f.name))
            object.__setattr__(self, f.name, value)
        self.constrain()

    def constrain(self) -> None:
        """Constraints between parameters; raise `ParamError` naming the parameter."""

    @classmethod
    def parse(cls: type[P], given: Mapping[str, Json]) -> P:
        """The parameters a plan gave, checked; `ParamError` for the first problem."""
        known = [f.name for f in dataclasses.fields(cls)]
        for name in given:
            if name not in known:
                raise ParamError(f"unknown parameter {name!r} (known: {', '.join(known)})")
        return cls(**given)  # type: ignore[arg-type]

    @classmethod
    def defaults(cls) -> dict[str, Json]:
        """The check's own parameters with their defaults (harness options left out)."""
        out: dict[str, Json] = {}
        for f in dataclasses.fields(cls):
            if f.name in _HARNESS_OPTIONS:
                continue
            out[f.name] = _default(f)
        return out

    @classmethod
    def recorded(cls, given: Mapping[str, Json]) -> dict[str, Json]:
        """What the receipt records: the defaults, updated by what the plan gave."""
        return {**cls.defaults(), **given}

    @classmethod
    def describe(cls) -> list[dict[str, Json]]:
        """Each parameter's name, type, default and docstring, from the source."""
        docs = _field_docs(cls)
        types_ = _field_types(cls)
        out: list[dict[str, Json]] = []
        for f in dataclasses.fields(cls):
            out.append(
                {
                    "name": f.name,
                    "type": types_[f.name],
                    "default": _default(f),
                    "doc": docs[f.name],
                }
            )
        return out


_HARNESS_OPTIONS = frozenset(f.name for f in dataclasses.fields(CheckParams))


def _default(f: dataclasses.Field[Any]) -> Json:
    if f.default_factory is not dataclasses.MISSING:
        value: Json = f.default_factory()
        return value
    assert f.default is not dataclasses.MISSING, f"parameter {f.name} has no default"
    default: Json = f.default
    return default


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _checked(name: str, hint: Any, value: object) -> object:
    """``value`` if it is of type ``hint`` (ints accepted as floats); `ParamError` otherwise."""
    ok, expected = _fits(hint, value)
    if not ok:
        raise ParamError(f"parameter {name!r} must be {expected}, got {value!r}")
    if hint is float and isinstance(value, int):
        return float(value)
    return value


def _fits(hint: Any, value: object) -> tuple[bool, str]:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        checks = [_fits(a, value) for a in args]
        return any(ok for ok, _ in checks), " or ".join(e for _, e in checks)
    if hint is type(None):
        return value is None, "null"
    if hint is bool:
        return isinstance(value, bool), "true or false"
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool), "an integer"
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool), "a number"
    if hint is str:
        return isinstance(value, str), "a string"
    if origin is Literal:
        return value in args, "one of " + ", ".join(repr(a) for a in args)
    if origin is list:
        (item,) = args
        _, each = _fits(item, None)
        ok = isinstance(value, list) and bool(value) and all(_fits(item, x)[0] for x in value)
        return ok, f"a non-empty list, each {each}"
    if origin is dict:
        return isinstance(value, dict), "a table"
    raise TypeError(f"no parameter check for type {hint!r}")


def _classes(cls: type) -> list[type]:
    return [c for c in reversed(cls.__mro__) if dataclasses.is_dataclass(c)]


def _field_types(cls: type) -> dict[str, str]:
    """Each field's annotation as written in the source."""
    out: dict[str, str] = {}
    for c in _classes(cls):
        out.update({k: str(v) for k, v in inspect.get_annotations(c).items()})
    return out


def _field_docs(cls: type) -> dict[str, str]:
    """Each field's docstring (the string literal under it in the class body)."""
    out: dict[str, str] = {}
    for c in _classes(cls):
        tree = ast.parse(inspect.getsource(sys.modules[c.__module__]))
        node = next(
            n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == c.__name__
        )
        body = node.body
        for stmt, nxt in zip(body, [*body[1:], None], strict=True):
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                continue
            doc = ""
            if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant):
                doc = inspect.cleandoc(str(nxt.value.value))
            out[stmt.target.id] = " ".join(doc.split())
    return out
