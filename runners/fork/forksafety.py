"""When the fork server may fork a claim, and who made it unsafe to.

A fork copies only the forking thread: a lock another thread held stays held in the
child forever, and a CUDA context is never valid in a child. So the server forks
only while it is one thread and has not initialised CUDA (`refusal`); the one thread
allowed beside it is named in `FORK_SAFE_THREADS` with why. While the server imports
and builds, `witness` records who initialised CUDA and who started each Python
thread, so that a refusal names the file and line instead of leaving every claim to
start a fresh interpreter unexplained. Imports no torch at module level: the server
imports this before torch, which must wait for its single-thread setting.
"""

from __future__ import annotations

import contextlib
import functools
import mmap
import os
import threading
import traceback
from collections.abc import Callable, Mapping
from typing import Any


def threads() -> list[str]:
    """This process's threads by name (``/proc/self/task``), the calling one included."""
    return [name for _, name in _tasks()]


def _tasks() -> list[tuple[int, str]]:
    out = []
    with contextlib.suppress(OSError):
        for tid in sorted(os.listdir("/proc/self/task"), key=int):
            with contextlib.suppress(OSError), open(f"/proc/self/task/{tid}/comm") as f:
                out.append((int(tid), f.read().strip()))
    return out


FORK_SAFE_THREADS: Mapping[str, str] = {
    "jemalloc_bg_thd": (
        "jemalloc's background purger (jemalloc preloaded, or linked into a library "
        "such as a Rust extension, with background_thread:true): the only locks it "
        "takes are jemalloc's own, and "
        "jemalloc's pthread_atfork handlers acquire every one of them before the fork "
        "and reinitialise them (and the background thread's state) in the child"
    ),
}
"""Threads a fork may leave behind, by name, and why none holds a lock the child needs."""


def refusal() -> str | None:
    """Why this process must not fork a claim now, or None: CUDA initialised here (a
    context is never forked), or a thread besides this one that is not `FORK_SAFE_THREADS`
    (another thread's held lock would be the child's forever)."""
    import torch

    if torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        by = _WITNESSED["cuda"]
        return f"CUDA initialised in the fork server{f' by {by[0]}' if by else ''}"
    me = threading.get_native_id()
    others = [name for tid, name in _tasks() if tid != me and not _fork_safe(name)]
    if not others:
        return None
    started = _WITNESSED["threads"]
    who = f"; started: {'; '.join(started[:4])}" if started else ""
    return f"the fork server runs {len(others) + 1} threads ({', '.join(others)}{who})"


_MARKERS: Mapping[str, bytes] = {"jemalloc_bg_thd": b"jemalloc_bg_thd"}
"""The bytes a library that starts each allowed thread holds: the name jemalloc gives
its thread (``pthread_setname_np``), which is in its code however it is linked."""


@functools.cache
def _fork_safe(name: str) -> bool:
    """A thread's name is a claim anyone can make (``prctl(PR_SET_NAME)``): it counts
    only where a file mapped into this process holds the code that names it so. jemalloc
    comes preloaded or inside another library (a Rust extension that links it
    statically: on the H200 hosts `import transformers` starts its thread), so the
    mapped files are searched for its marker, smallest first."""
    marker = _MARKERS.get(name)
    if marker is None or name not in FORK_SAFE_THREADS:
        return False
    return any(_holds(path, marker) for path in _mapped_files())


def _mapped_files() -> list[str]:
    """The files mapped into this process, smallest first."""
    paths = set()
    with contextlib.suppress(OSError), open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and parts[5].startswith("/"):
                paths.add(parts[5].strip())
    sized = []
    for path in paths:
        with contextlib.suppress(OSError):
            sized.append((os.stat(path).st_size, path))
    return [p for _, p in sorted(sized)]


def _holds(path: str, marker: bytes) -> bool:
    with (
        contextlib.suppress(OSError, ValueError),
        open(path, "rb") as f,
        mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m,
    ):
        return m.find(marker) >= 0
    return False


_WITNESSED: dict[str, list[str]] = {"cuda": [], "threads": []}
"""Who initialised CUDA here and who started Python threads (`witness`)."""


def _caller() -> str:
    """The innermost frame of the current stack that is neither torch's, threading's
    nor this server's: who asked (``path:line in function``)."""
    ours = (
        "/torch/",
        "/threading.py",
        "/runners/fork/forkserver.py",
        "/runners/fork/forksafety.py",
        "/runners/workloads/",
    )
    for f in reversed(traceback.extract_stack()[:-2]):
        if not any(part in f.filename for part in ours):
            return f"{f.filename}:{f.lineno} in {f.name}"
    return "the server's own preload"


def witness(torch: Any) -> tuple[list[str], list[str], Callable[[], None]]:
    """Until the returned undo: where CUDA was first initialised in this process (every
    path to it goes through ``torch._C._cuda_init``) and who started each Python
    thread. Undone before any claim forks: a claim's code runs on plain torch."""
    cuda_by = _WITNESSED["cuda"]
    threads_by = _WITNESSED["threads"]
    init = getattr(torch._C, "_cuda_init", None)  # absent from CPU-only builds

    def cuda_init() -> Any:
        if not cuda_by:
            cuda_by.append(_caller())
        assert init is not None
        return init()

    if init is not None:
        torch._C._cuda_init = cuda_init
    start = threading.Thread.start

    def started(self: threading.Thread) -> None:
        threads_by.append(f"{self.name}: {_caller()}")
        start(self)

    threading.Thread.start = started  # type: ignore[method-assign]

    def undo() -> None:
        if init is not None:
            torch._C._cuda_init = init
        threading.Thread.start = start  # type: ignore[method-assign]

    return cuda_by, threads_by, undo
