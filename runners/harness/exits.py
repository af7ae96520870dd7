"""Waiting for any of a set of child processes to exit, woken by the exit itself.

Each process gets a pidfd (Linux 5.3+), readable once it has exited; a selector on
them returns at the first exit instead of at the next look of a polling loop. Where
pidfds are not available, the wait is a sleep of at most `FALLBACK_S`, as before.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import subprocess
import time
from collections.abc import Sequence
from typing import Any

__all__ = ["Exits"]

FALLBACK_S = 0.05
"""Without pidfds: how long one wait sleeps at most."""


class Exits:
    """The pidfds of ``procs`` still running, watched by one selector."""

    def __init__(self, procs: Sequence[subprocess.Popen[Any]]) -> None:
        self._sel: selectors.BaseSelector | None = None
        opened = []
        for p in procs:
            if p.returncode is not None:
                continue
            try:
                opened.append(os.pidfd_open(p.pid))
            except (AttributeError, OSError):
                # No pidfds here (or the process already reaped): sleep and look.
                for fd in opened:
                    os.close(fd)
                return
        self._sel = selectors.DefaultSelector()
        for fd in opened:
            self._sel.register(fd, selectors.EVENT_READ)

    def wait(self, timeout_s: float) -> None:
        """Until one of the processes exits (one that exited earlier counts once) or
        ``timeout_s`` has passed."""
        timeout_s = max(timeout_s, 0.0)
        if self._sel is None:
            time.sleep(min(timeout_s, FALLBACK_S))
            return
        if not self._sel.get_map():
            time.sleep(min(timeout_s, FALLBACK_S))
            return
        for key, _ in self._sel.select(timeout_s):
            # Exited: readable from now on, so no longer waited on.
            self._sel.unregister(key.fd)
            os.close(key.fd)

    def close(self) -> None:
        if self._sel is None:
            return
        for key in list(self._sel.get_map().values()):
            with contextlib.suppress(OSError):
                os.close(key.fd)
        self._sel.close()
        self._sel = None

    def __enter__(self) -> Exits:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
