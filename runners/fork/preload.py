"""What claims really import, recorded so the fork server imports it before the next.

A claim forked from the server writes the library modules it imported that the
server lacked (``RESULT.modules``, see `runners.fork.forkserver`); the server
imports them at once for the claims that follow in the same run, and
`remember_modules` keeps them for the next run (``$LEDGER_CACHE``, else
``$XDG_CACHE_HOME/ledger``, ``preload/`` in it), whose server imports them
before the first claim.

The list is the code under test's word, so nothing one run learns reaches
another's server unless both qualify the same tree: a record is keyed by the git
tree id of the code that wrote it with the workload entry point, and read only
for that tree (another pull request's server never imports what this one's claims
chose). The parent also keeps only names it finds, without importing them,
among the installed packages and the standard library outside every tree under
qualification (`installed_only`), and at most `MAX_MODULES` of them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sys
import threading
from collections.abc import Iterable, Sequence
from importlib.machinery import PathFinder
from pathlib import Path

__all__ = [
    "installed_only",
    "learned",
    "note_learned",
    "recorded_modules",
    "remember_modules",
]

_lock = threading.Lock()
_learned: dict[str, set[str]] = {}
MAX_MODULES = 4096
"""Names kept per record: a claim cannot make the next run of its tree import more."""
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_MAX_NOTE_BYTES = 1024 * 1024
"""A list of module names, written by a claim: more than this is not read."""


def cache_dir() -> Path:
    env = os.environ.get("LEDGER_CACHE")
    if env:
        return Path(env) / "preload"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ledger" / "preload"


def _file(tree: str, ref: str) -> Path:
    key = hashlib.sha256(f"{tree}\0{ref}".encode()).hexdigest()[:24]
    return cache_dir() / f"{key}.json"


def _root_key(root: object) -> str:
    return "" if root is None else os.path.realpath(str(root))


def note_learned(path: Path, root: object = None) -> None:
    """Take the module names a forked claim on the tree at ``root`` wrote to ``path`` (if
    it wrote any), read beneath its folder without following a link."""
    from ledger.outputs.beneath import Folder, Refused

    with contextlib.suppress(OSError, ValueError, Refused):
        with Folder(path.parent) as folder:
            names = json.loads(folder.read(path.name, _MAX_NOTE_BYTES))
        if isinstance(names, list):
            got = [n for n in names if isinstance(n, str) and _NAME.match(n)][:MAX_MODULES]
            with _lock:
                _learned.setdefault(_root_key(root), set()).update(got)


def learned(root: object = None) -> list[str]:
    """The module names noted in this process so far by claims on the tree at ``root``
    (forgotten once read: a worker that runs other trees next starts empty)."""
    with _lock:
        return sorted(_learned.pop(_root_key(root), set()))


def _search_path(outside: Sequence[Path]) -> list[str]:
    roots = [Path(r).resolve() for r in outside]
    out: list[str] = []
    for entry in sys.path:
        if not entry or not os.path.isdir(entry):
            continue
        p = Path(entry).resolve()
        if not any(p == r or p.is_relative_to(r) or r.is_relative_to(p) for r in roots):
            out.append(str(p))
    return out


def installed_only(names: Iterable[str], outside: Sequence[Path] = ()) -> list[str]:
    """The names among ``names`` whose top-level module lies in this interpreter's
    standard library or installed packages, on a path entry that is neither inside nor
    above a tree in ``outside`` (found by path, nothing imported); at most `MAX_MODULES`."""
    path = _search_path(outside)
    roots = [Path(r).resolve() for r in outside]
    found: dict[str, bool] = {}
    out: list[str] = []
    for name in sorted(set(names)):
        if not isinstance(name, str) or not _NAME.match(name) or len(name) > 200:
            continue
        top = name.split(".", 1)[0]
        if top not in found:
            found[top] = top in sys.builtin_module_names or _installed(top, path, roots)
        if found[top]:
            out.append(name)
        if len(out) >= MAX_MODULES:
            break
    return out


def _installed(top: str, path: list[str], roots: list[Path]) -> bool:
    try:
        spec = PathFinder.find_spec(top, path)
    except (ImportError, ValueError):
        return False
    if spec is None:
        return False
    where = [*(spec.submodule_search_locations or []), *([spec.origin] if spec.origin else [])]
    return bool(where) and not any(
        Path(w).resolve().is_relative_to(r) for w in where for r in roots
    )


def recorded_modules(refs: Iterable[str], tree: str = "") -> list[str]:
    """The modules earlier runs of the same ``tree`` (a git tree id) recorded for these
    workload entry points; nothing without a tree."""
    out: set[str] = set()
    if not tree:
        return []
    for ref in refs:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            doc = json.loads(_file(tree, ref).read_text())
            out.update(str(n) for n in doc.get("modules", []))
    return sorted(out)


def remember_modules(
    refs: Sequence[str], modules: Iterable[str], tree: str = "", outside: Sequence[Path] = ()
) -> None:
    """Record ``modules`` (with what was recorded before), of those `installed_only`
    keeps, for each workload entry point of the tree ``tree``; nothing without a tree."""
    if not tree:
        return
    names = installed_only(modules, outside)
    for ref in sorted(set(refs) - {""}):
        path = _file(tree, ref)
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
            merged = installed_only([*recorded_modules([ref], tree), *names], outside)
            tmp = path.with_suffix(f".{os.getpid()}.part")
            tmp.write_text(json.dumps({"tree": tree, "ref": ref, "modules": merged}))
            tmp.replace(path)
