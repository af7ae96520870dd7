"""The copies of served logs (`read/log_cache.py`) a process keeps open between its
questions: a client that asks many (a job, a long-lived tool) pays a connection, the
write-ahead log's set-up and its checkpoint on close once, not per question.

A copy is lent to one question at a time (`borrow`, then `give_back`) and read again
on each loan as a fresh open reads it (`LogCache.reopened`); a file replaced since (the
cache folder removed, say) is opened afresh. At most `KEPT` copies stay open; each is
closed at exit.
"""

from __future__ import annotations

import atexit
import os
import sqlite3
import threading
from pathlib import Path

from ledger.read.log_cache import LogCache

__all__ = ["KEPT", "borrow", "give_back"]

KEPT = 4
"""The most copies kept open at once (one per log a process asks about, usually one)."""

_idle: dict[Path, LogCache] = {}
_lock = threading.Lock()


def borrow(origin: str, where: Path | None = None) -> LogCache:
    """The copy of the log `origin` names under `where`: one kept open, else opened."""
    path = LogCache.open_path(origin, where)
    with _lock:
        kept = _idle.pop(path, None)
    if kept is not None:
        try:
            if os.stat(path).st_ino == kept.inode:
                kept.reopened()
                return kept
        except (OSError, sqlite3.Error):
            pass
        kept.close()
    return LogCache(path)


def give_back(cache: LogCache) -> None:
    """Done with `cache`: kept open for the next question, or closed."""
    with _lock:
        if cache.path not in _idle and len(_idle) < KEPT:
            _idle[cache.path] = cache
            return
    cache.close()


@atexit.register
def _close_all() -> None:
    with _lock:
        kept = list(_idle.values())
        _idle.clear()
    for cache in kept:
        cache.close()
