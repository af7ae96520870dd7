"""A fork server: pay the imports once, still run every claim in a fresh process.

``python -m runners.forkserver SOCKET`` imports torch, the harness and every
check, then the modules of the workloads it is told to preload (JSON on
stdin: ``[[root, "module:attr"], ...]``; imported only, never built), all
without initialising CUDA, and serves requests on a Unix socket, several at
once (claims run side by side on the GPUs of a host). For each request it
forks a worker that runs ``python -m MODULE REQUEST RESULT`` as a fresh
interpreter would (``runpy``), with the client's ``CUDA_VISIBLE_DEVICES`` (the
claim's GPUs), stdin, stdout and stderr
(passed over the socket) and in the client's process group, so the claim's
timeout and Ctrl-C reach it exactly as they reach a spawned child. A CUDA
context is only ever created in a worker, so one claim's poisoned context
still cannot reach the next.

What the workload really imports is paid once too: besides the workload
modules, the server imports what every check imports anyway
(``torch._dynamo``), the modules a plan lists (``preload = [...]``) or an
earlier run recorded, and, after each worker exits, the library modules that
worker imported and the server lacked (the worker writes their names to
``RESULT.modules``), so the next claim forks with them loaded. A workload
with a ``prepare()`` method is built and prepared here once (CPU only) and
every worker inherits it through fork (`runners.workloads.loader.prepare_workload`).

``python -m runners.forkclient SOCKET MODULE REQUEST RESULT`` is the client:
a Python start without torch (tens of milliseconds), which relays the
worker's exit status and writes its pid to ``RESULT.pid`` (the process that
holds the GPU memory, for the exit proof).

The parent's side (launching, waiting, the client command line) is
`runners.forkparent`.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import runpy
import selectors
import signal
import socket
import sys
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from runners.forkparent import ALWAYS, READY

__all__: list[str] = []


def _import_modules(names: Sequence[str]) -> tuple[list[str], list[str]]:
    """Import each module that is not yet imported; (imported, failed). A module whose
    import would initialise CUDA is not kept from being imported, but then the server
    refuses to fork and every claim falls back to a fresh interpreter."""
    import importlib

    done, failed = [], []
    for name in sorted(set(names)):
        if name in sys.modules:
            continue
        try:
            importlib.import_module(name)
            done.append(name)
        except BaseException:  # a module's import may raise anything
            failed.append(name)
    return done, failed


_THREADS = 0
"""torch's intra-op thread count before the server pinned its own to one."""


def _preload(doc: Any) -> dict[str, Any]:
    global _THREADS
    t0 = time.monotonic()
    import torch

    # GNU OpenMP cannot fork: once a process has run a parallel region with a pool of
    # threads, a forked child's next parallel region waits forever for threads that
    # were not copied. The server therefore computes on one thread (building a model in
    # `prepare` included: torch's random init is serial anyway) and every forked worker
    # gets the machine's count back, starting a pool of its own.
    _THREADS = torch.get_num_threads()
    torch.set_num_threads(1)

    import runners.api
    import runners.isolated  # noqa: F401
    from runners.workloads.loader import (
        WorkloadLoadError,
        _import_from,
        parse_ref,
        prepare_workload,
    )

    if isinstance(doc, list):  # the older form: the workloads only
        doc = {"workloads": doc}
    loaded, failed = [], []
    for root, ref in doc.get("workloads", []):
        try:
            _import_from(Path(root), parse_ref(ref)[0], ref)
            loaded.append(ref)
        except WorkloadLoadError as e:
            # The worker will report it properly; the server just does not preload it.
            failed.append(f"{ref}: {e}")
    learn = bool(doc.get("learn", True))
    imported, not_imported = _import_modules([*(ALWAYS if learn else ()), *doc.get("modules", [])])
    prepared = []
    for root, ref, params in doc.get("prepare", []):
        try:
            if prepare_workload(Path(root), ref, params):
                prepared.append(ref)
        except Exception as e:  # the worker builds it again and reports
            failed.append(f"{ref}: prepare: {type(e).__name__}: {e}")
    return {
        "seconds": round(time.monotonic() - t0, 3),
        "preloaded": loaded,
        "not_preloaded": failed,
        "modules": imported,
        "modules_failed": not_imported,
        "prepared": prepared,
        "cuda_initialized": bool(torch.cuda.is_initialized()),  # type: ignore[no-untyped-call]
        "learn": learn,
    }


def _fresh_environment(env: Mapping[str, str]) -> None:
    """The worker takes the variables that place the claim (``CUDA_VISIBLE_DEVICES``,
    ``OMP_NUM_THREADS``: `runners.forkclient.FORWARDED`) from the client; torch's cached
    device count (read without CUDA in the server) is dropped, so ``CUDA_VISIBLE_DEVICES``
    decides which GPUs the claim sees."""
    for k in ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "LEDGER_FORK_SERVERS"):
        if k in env:
            os.environ[k] = str(env[k])
        else:
            os.environ.pop(k, None)
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    if cuda is not None:
        with contextlib.suppress(Exception):
            cuda._cached_device_count = None
        for name in ("_device_count_nvml", "_parse_visible_devices", "_raw_device_count_nvml"):
            fn = getattr(cuda, name, None)
            with contextlib.suppress(Exception):
                fn.cache_clear()  # type: ignore[union-attr]
    threads = env.get("OMP_NUM_THREADS", "")
    if torch is not None and threads.isdigit() and int(threads) > 0:
        # The intra-op pool was sized when the server imported torch.
        torch.set_num_threads(int(threads))
    elif torch is not None and _THREADS > 0:
        torch.set_num_threads(_THREADS)


def _learned(before: set[str]) -> list[str]:
    """Library modules this worker imported that the server lacked (not the checkout's
    own: those are the workload preloads)."""
    out = []
    for name, mod in list(sys.modules.items()):
        if name in before or name == "__main__" or mod is None:
            continue
        where = getattr(mod, "__file__", None) or ""
        if where and where.startswith(_LIBRARY_DIRS):
            out.append(name)
    return sorted(out)


def _library_dirs() -> tuple[str, ...]:
    import site
    import sysconfig

    paths = sysconfig.get_paths()
    dirs = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    with contextlib.suppress(AttributeError):
        dirs.update(site.getsitepackages())
    return tuple(sorted(d.rstrip("/") + "/" for d in dirs))


_LIBRARY_DIRS = _library_dirs()


def _worker(conn: socket.socket, fds: list[int], msg: dict[str, Any]) -> None:
    """In the forked child: become the claim process and never return."""
    code = 1
    before = set(sys.modules)
    try:
        with contextlib.suppress(OSError):
            os.setpgid(0, int(msg["pgid"]))
        for target, fd in zip((0, 1, 2), fds, strict=True):
            os.dup2(fd, target)
            os.close(fd)
        conn.close()
        if isinstance(msg.get("env"), dict):
            _fresh_environment(msg["env"])
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.argv = [msg["module"], *msg["args"]]
        try:
            runpy.run_module(msg["module"], run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        learn = msg.get("learn")
        if learn:
            with contextlib.suppress(Exception):
                Path(learn).write_text(json.dumps(_learned(before)))
        os._exit(code)


def _same_session(msg: dict[str, Any]) -> bool:
    try:
        return os.getsid(int(msg.get("pid", 0)) or 0) == os.getsid(0)
    except (OSError, ValueError):
        return False


def _accept(listener: socket.socket, running: dict[int, tuple[socket.socket, Any]]) -> None:
    conn, _ = listener.accept()
    try:
        data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
        msg = json.loads(data)
    except (OSError, ValueError):
        conn.close()
        return
    import torch

    refused = None
    if torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        # Never fork a CUDA context: tell the client to fall back.
        refused = "CUDA initialised in the fork server"
    elif not _same_session(msg):
        # The worker could not join the client's process group: a timeout or Ctrl-C
        # that ends the group would miss it. The client runs the module itself.
        refused = "the client is in another session"
    if refused is not None:
        with contextlib.suppress(OSError):
            conn.sendall(json.dumps({"refused": refused}).encode() + b"\n")
        for fd in fds:
            os.close(fd)
        conn.close()
        return
    pid = os.fork()
    if pid == 0:
        listener.close()
        for other, _ in running.values():
            other.close()
        _worker(conn, fds, msg)
    for fd in fds:
        os.close(fd)
    with contextlib.suppress(OSError):
        conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
    running[pid] = (conn, msg.get("learn"))


def _reap(running: dict[int, tuple[socket.socket, Any]], learn: bool = True) -> None:
    while running:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn, names = running.pop(pid, (None, None))
        if conn is None:
            continue
        rc = os.waitstatus_to_exitcode(status)
        with contextlib.suppress(OSError):
            conn.sendall(json.dumps({"rc": rc}).encode() + b"\n")
        conn.close()
        if learn and names:
            # What that claim imported, the next one forks with.
            with contextlib.suppress(OSError, ValueError):
                _import_modules(json.loads(Path(names).read_text()))


_PR_SET_CHILD_SUBREAPER = 36


def _adopt_orphans() -> None:
    """Become the subreaper of every claim process: what one leaves running (even
    after leaving its process group) stays below this server, where the parent
    looks for it after the claim."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _serve(path: str) -> int:
    _adopt_orphans()
    doc = json.loads(sys.stdin.read() or "[]")
    ready = _preload(doc)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    print(READY + json.dumps(ready), flush=True)
    learn = bool(ready["learn"])
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    # Single-threaded (a forked child inherits no other thread's held lock), yet several
    # claims at once: a worker is reaped by polling while the next request is awaited.
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)
    running: dict[int, tuple[socket.socket, Any]] = {}
    while True:
        if sel.select(timeout=0.05 if running else None):
            _accept(listener, running)
        _reap(running, learn)


if __name__ == "__main__":
    sys.exit(_serve(sys.argv[1]))
