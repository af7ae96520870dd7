"""What claims really import, recorded so the fork server imports it before the next.

A claim forked from the server writes the library modules it imported that the
server lacked (``RESULT.modules``, see `runners.forkserver`); the server
imports them at once for the claims that follow in the same run, and
`remember_modules` keeps them per workload entry point for the next run
(``$LEDGER_CACHE``, else ``$XDG_CACHE_HOME/ledger``, ``preload/`` in it), whose
server imports them before the first claim. Only modules of the Python
installation (standard library, site-packages) are ever recorded.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

__all__ = ["learned", "note_learned", "recorded_modules", "remember_modules"]

_lock = threading.Lock()
_learned: set[str] = set()
_MAX_NOTE_BYTES = 1024 * 1024
"""A list of module names, written by a claim: more than this is not read."""


def cache_dir() -> Path:
    env = os.environ.get("LEDGER_CACHE")
    if env:
        return Path(env) / "preload"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ledger" / "preload"


def _file(ref: str) -> Path:
    return cache_dir() / f"{hashlib.sha256(ref.encode()).hexdigest()[:16]}.json"


def note_learned(path: Path) -> None:
    """Take the module names a forked claim wrote to ``path`` (if it wrote any), read
    beneath its folder without following a link."""
    from ledger.outputs.beneath import Folder, Refused

    with contextlib.suppress(OSError, ValueError, Refused):
        with Folder(path.parent) as folder:
            names = json.loads(folder.read(path.name, _MAX_NOTE_BYTES))
        if isinstance(names, list):
            with _lock:
                _learned.update(str(n) for n in names)


def learned() -> list[str]:
    """Every module name noted in this process so far."""
    with _lock:
        return sorted(_learned)


def recorded_modules(refs: Iterable[str]) -> list[str]:
    """The modules earlier runs recorded for these workload entry points."""
    out: set[str] = set()
    for ref in refs:
        with contextlib.suppress(OSError, ValueError):
            doc = json.loads(_file(ref).read_text())
            out.update(str(n) for n in doc.get("modules", []))
    return sorted(out)


def remember_modules(refs: Sequence[str], modules: Iterable[str]) -> None:
    """Record ``modules`` (with what was recorded before) for each workload entry point."""
    names = sorted(set(modules))
    for ref in sorted(set(refs) - {""}):
        path = _file(ref)
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
            merged = sorted(set(recorded_modules([ref])) | set(names))
            tmp = path.with_suffix(f".{os.getpid()}.part")
            tmp.write_text(json.dumps({"ref": ref, "modules": merged}))
            tmp.replace(path)
