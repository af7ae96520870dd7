"""Load a plan's workload entry point (``module:attribute``) from a checkout."""

from __future__ import annotations

import importlib
import inspect
import json
import sys
from collections.abc import Mapping
from contextvars import ContextVar
from pathlib import Path
from types import ModuleType
from typing import Any

from runners.protocol import Workload
from runners.workloads import prebuilt

_PREPARED: dict[tuple[str, str, str], Workload] = {}
"""Workloads built and prepared once in a fork server; every forked claim inherits them."""


def _key(root: Path, ref: str, params: Mapping[str, Any]) -> tuple[str, str, str]:
    return str(root.resolve()), ref, json.dumps(dict(params), sort_keys=True, default=str)


class WorkloadLoadError(ValueError):
    """The entry point could not be imported, called, or did not give a `Workload`."""


def parse_ref(ref: str) -> tuple[str, str]:
    """Split ``module:attribute`` (attribute may be dotted); raise `WorkloadLoadError`."""
    module, sep, attr = ref.partition(":")
    if not sep or not module or not attr or ":" in attr:
        raise WorkloadLoadError(f"workload entry point {ref!r}: expected 'module:attribute'")
    return module, attr


def _provided_by(root: Path, top: str) -> bool:
    return (root / top).is_dir() or (root / f"{top}.py").is_file()


def _imported_from(root: Path, top: str) -> bool:
    """Whether the imported package ``top`` (if any) was imported from ``root``."""
    pkg = sys.modules.get(top)
    if pkg is None:
        return False
    places = [getattr(pkg, "__file__", None), *getattr(pkg, "__path__", [])]
    resolved = root.resolve()
    return any(p and Path(p).resolve().is_relative_to(resolved) for p in places)


def _forget(top: str) -> None:
    # A second checkout of the same package must not reuse the first one's modules.
    for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
        del sys.modules[name]


def _import_from(root: Path, module: str, ref: str) -> ModuleType:
    top = module.split(".", 1)[0]
    local = _provided_by(root, top)
    entry = str(root)
    if local:
        if not _imported_from(root, top):
            _forget(top)
        sys.path.insert(0, entry)
        importlib.invalidate_caches()
    try:
        mod = importlib.import_module(module)
    except Exception as e:
        where = f"from {root}" if local else "(not in the checkout; tried installed packages)"
        raise WorkloadLoadError(
            f"workload entry point {ref!r}: cannot import module {module!r} {where}: "
            f"{type(e).__name__}: {e}"
        ) from e
    finally:
        if local:
            # Leave sys.path as found: the checkout must not shadow later imports.
            sys.path.remove(entry)
    if local:
        origin = getattr(mod, "__file__", None)
        resolved = root.resolve()
        if origin is None or not Path(origin).resolve().is_relative_to(resolved):
            raise WorkloadLoadError(
                f"workload entry point {ref!r}: module {module!r} came from {origin}, "
                f"not from the checkout {root}"
            )
    return mod


_BUILDING_IN: ContextVar[Path | None] = ContextVar("_BUILDING_IN", default=None)
"""The checkout whose workload factory is running (`load_workload`)."""


def import_ref(ref: str) -> Any:
    """``module:attribute``, imported from the checkout whose workload is being built
    (a ready adapter naming the team's own factory, loss or estimator), as the entry
    point itself is; `WorkloadLoadError` when it is missing."""
    module, attr = parse_ref(ref)
    root = _BUILDING_IN.get()
    obj: object = _import_from(root, module, ref) if root else importlib.import_module(module)
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise WorkloadLoadError(f"{ref!r}: module {module!r} has no {attr!r}") from None
    return obj


def load_workload(root: Path, ref: str, params: Mapping[str, Any]) -> Workload:
    """Import ``ref`` (``module:attribute``) from the checkout at ``root``, call it with
    ``params`` and return the `Workload` it builds.

    When ``root`` holds the module's top-level package, that package is imported from
    ``root`` under its real name after any copy imported from elsewhere is forgotten, so
    two checkouts can be loaded one after the other in one process; a copy already
    imported from ``root`` itself is kept (modules are not re-read from disk). ``root``
    is on ``sys.path`` only during the import (a workload module must import its
    siblings at import time). Otherwise the module is imported from the installed
    packages.

    Raises `WorkloadLoadError` (naming ``ref``) when the module or attribute is missing,
    the attribute is not callable, ``params`` do not fit its signature, or the result
    is not a `Workload`.
    """
    prepared = _PREPARED.get(_key(root, ref, params))
    if prepared is not None:
        return prepared
    module, attr = parse_ref(ref)
    obj: object = _import_from(root, module, ref)
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise WorkloadLoadError(
                f"workload entry point {ref!r}: module {module!r} has no attribute {attr!r}"
            ) from None
    if not callable(obj):
        raise WorkloadLoadError(
            f"workload entry point {ref!r}: {attr!r} is a {type(obj).__name__}, not callable"
        )
    try:
        inspect.signature(obj).bind(**params)
    except TypeError as e:
        raise WorkloadLoadError(
            f"workload entry point {ref!r}: parameters {sorted(params)} do not fit: {e}"
        ) from None
    except ValueError:
        pass  # no introspectable signature (builtins): let the call decide
    # A ready adapter imports the team's own functions from this checkout while built.
    token = _BUILDING_IN.set(root)
    try:
        workload = obj(**params)
    finally:
        _BUILDING_IN.reset(token)
    if not isinstance(workload, Workload):
        raise WorkloadLoadError(
            f"workload entry point {ref!r} returned a {type(workload).__name__}, "
            "which does not implement the Workload protocol"
        )
    prebuilt.note_origin(workload, _key(root, ref, params))
    return workload


def _declares_prepare(root: Path, ref: str) -> bool:
    """Whether the entry point's return annotation (or the entry point itself, a class)
    is a class with ``prepare``: known without calling the factory."""
    import typing

    module, attr = parse_ref(ref)
    obj: object = _import_from(root, module, ref)
    for part in attr.split("."):
        obj = getattr(obj, part, None)
    if isinstance(obj, type):
        return callable(getattr(obj, "prepare", None))
    try:
        made = typing.get_type_hints(obj).get("return")
    except Exception:
        return False
    return isinstance(made, type) and callable(getattr(made, "prepare", None))


def prepare_workload(root: Path, ref: str, params: Mapping[str, Any]) -> bool:
    """Build the workload and run its ``prepare()`` (CPU work done once: building or
    loading the model); later `load_workload` calls with the same arguments return this
    instance, in this process and in every process forked from it. Only for an entry
    point that declares a workload class with ``prepare`` (its return annotation, or the
    class itself): any other factory is never called here. False when nothing was
    kept."""
    if not _declares_prepare(root, ref):
        return False
    w = load_workload(root, ref, params)
    prep = getattr(w, "prepare", None)
    if not callable(prep):
        return False
    prep()
    _PREPARED[_key(root, ref, params)] = w
    return True


def prebuild_workload(root: Path, ref: str, params: Mapping[str, Any]) -> str:
    """For a workload without ``prepare()``: build it once on CPU here (a fork server)
    as `runners.workloads.prebuilt` describes, so every forked claim's ``setup`` copies
    it. Returns ``""`` when kept, else why not (``LEDGER_PREBUILD=0``: turned off)."""
    if not prebuilt.enabled():
        return "turned off (LEDGER_PREBUILD=0)"
    w = load_workload(root, ref, params)
    return prebuilt.prebuild(w, _key(root, ref, params))
