"""A fork server: pay the imports once, still run every claim in a fresh process.

``python -m runners.fork.forkserver SOCKET`` imports torch, the harness and every
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

``python -m runners.fork.forkclient SOCKET MODULE REQUEST RESULT`` is the client:
a Python start without torch (tens of milliseconds), which relays the
worker's exit status and writes its pid to ``RESULT.pid`` (the process that
holds the GPU memory, for the exit proof).

The parent's side (launching, waiting, the client command line) is
`runners.fork.forkparent`.
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
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from runners.fork.forkclient import FORWARDED
from runners.fork.forkparent import ALWAYS, READY
from runners.fork.forkready import Ready
from runners.fork.forksafety import refusal, threads, witness

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
"""The intra-op thread count a claim gets back (the server computes on one)."""


def _single_threaded() -> int:
    """Before torch is imported: the thread count claims are to get back, and
    ``OMP_NUM_THREADS=1`` for this process.

    Importing torch runs a parallel region, which starts GNU OpenMP's pool (one
    thread per CPU less one, idle on a futex). A fork copies only the forking thread:
    the child inherits a pool it does not have (its next parallel region waits forever)
    and whatever lock another thread held. With one OpenMP thread from the start the
    server stays a single thread (`_threads` says so at every fork), and each forked
    worker sizes a pool of its own (`_fresh_environment`)."""
    asked = os.environ.get("OMP_NUM_THREADS", "")
    os.environ["OMP_NUM_THREADS"] = "1"
    if asked.isdigit() and int(asked) > 0:
        return int(asked)
    return _physical_cores()


def _physical_cores() -> int:
    """Cores (not hyperthreads) this process may run on: torch's own default count."""
    cpus = sorted(os.sched_getaffinity(0))
    cores = set()
    for cpu in cpus:
        try:
            topo = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
            cores.add(topo.read_text().strip())
        except OSError:
            cores.add(str(cpu))
    return max(1, len(cores))


def _preload(doc: Any) -> Ready:
    global _THREADS
    t0 = time.monotonic()
    _THREADS = _single_threaded()
    import torch

    # Belt and braces: computing on one thread even where OpenMP ignored the variable
    # (building a model in `prepare` included: torch's random init is serial anyway).
    torch.set_num_threads(1)
    # Either makes every fork refused (each claim then starts a fresh interpreter and
    # pays every import and build again): who did it is named, not guessed.
    cuda_by, threads_by, undo = witness(torch)

    import runners.api
    import runners.claim.isolated  # noqa: F401
    from runners.workloads.loader import (
        WorkloadLoadError,
        _import_from,
        parse_ref,
        prebuild_workload,
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
    from runners.harness.fingerprint import packages_digest

    packages_digest()  # every claim's fingerprint reads it; once here, inherited
    prepared, prebuilt, not_prebuilt = [], [], []
    twice = {json.dumps(x, sort_keys=True) for x in doc.get("prebuild", [])}
    for root, ref, params in doc.get("prepare", []):
        try:
            if prepare_workload(Path(root), ref, params):
                prepared.append(ref)
                continue
        except Exception as e:  # the worker builds it again and reports
            failed.append(f"{ref}: prepare: {type(e).__name__}: {e}")
            continue
        if json.dumps([root, ref, params], sort_keys=True) not in twice:
            continue  # set up once at most: nothing to save
        try:
            why = prebuild_workload(Path(root), ref, params)
        except Exception as e:  # the claim's own setup will say what is wrong
            why = f"setup on CPU: {type(e).__name__}: {e}"
        (not_prebuilt.append(f"{ref}: {why}") if why else prebuilt.append(ref))
    undo()
    return Ready(
        seconds=round(time.monotonic() - t0, 3),
        preloaded=loaded,
        not_preloaded=failed,
        modules=imported,
        modules_failed=not_imported,
        prepared=prepared,
        prebuilt=prebuilt,
        not_prebuilt=not_prebuilt,
        cuda_initialized=bool(torch.cuda.is_initialized()),  # type: ignore[no-untyped-call]
        cuda_initialized_by=cuda_by[0] if cuda_by else None,
        threads_started_by=threads_by[:8],
        learn=learn,
        threads=threads(),
        fork_refused=refusal(),
        claim_threads=_THREADS,
    )


def _fresh_environment(env: Mapping[str, str]) -> None:
    """The worker takes the variables that place the claim (``CUDA_VISIBLE_DEVICES``,
    ``OMP_NUM_THREADS``: `runners.fork.forkclient.FORWARDED`) from the client; torch's cached
    device count (read without CUDA in the server) is dropped, so ``CUDA_VISIBLE_DEVICES``
    decides which GPUs the claim sees."""
    for k in FORWARDED:
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


def _worker(
    conn: socket.socket, fds: list[int], msg: dict[str, Any], go: int, confine: dict[str, Any]
) -> None:
    """In the forked child: become the claim process and never return. It waits for
    its client's word (``go``: the client has placed it in the claim's cgroup and
    learnt its host pid) before any of the claim's code runs."""
    # Imported here, not at the top: the harness package imports torch, which must wait
    # for `_single_threaded` (the server's preload has imported it by now).
    from runners.harness import timeline

    code = 1
    timeline.reset()
    timeline.mark("forked")
    before = set(sys.modules)
    try:
        with contextlib.suppress(OSError):
            # Unsandboxed (one pid namespace), the client's process group: its
            # timeout and Ctrl-C reach this process directly too.
            os.setpgid(0, int(msg["pgid"]))
        for target, fd in zip((0, 1, 2), fds, strict=True):
            os.dup2(fd, target)
            os.close(fd)
        conn.close()
        word = os.read(go, 64).decode()
        os.close(go)
        if not word:
            os._exit(1)  # the client went away before the claim started
        timeline.mark("go")
        _confined(word, msg, confine)
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
    except KeyboardInterrupt:
        code = 130  # Ctrl-C: the parent says what it stopped; no traceback here
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


def _confined(word: str, msg: dict[str, Any], confine: dict[str, Any]) -> None:
    """The claim process's own confinement (`runners.fork.confine`) before its code runs:
    the subreaper of what it starts, the only writer of its folder (where the run is
    sandboxed), no capabilities; and its host pid, as its client learnt it."""
    from runners.fork import confine as c
    from runners.harness.hostpid import HOST_PID_VAR

    host = word.strip().removeprefix("go").strip()
    if host.isdigit():
        os.environ[HOST_PID_VAR] = host
        os.environ[HOST_PID_VAR + "_OF"] = str(os.getpid())
    c.subreaper()
    run_dir = confine.get("run_dir")
    args = [str(a) for a in msg.get("args", [])]
    if not run_dir or not args:
        return
    folder = os.path.dirname(args[0])
    mine = [folder]
    with contextlib.suppress(OSError, ValueError, AttributeError):
        art = json.loads(Path(args[0]).read_text()).get("artifact_dir")
        if isinstance(art, str):
            mine.append(art)
    # A scratch folder of the claim's own (the server's is read-only from here on).
    scratch = os.path.join(folder, "scratch")
    with contextlib.suppress(OSError):
        os.makedirs(scratch, exist_ok=True)
        os.environ["HOME"] = os.environ["TMPDIR"] = scratch
        import tempfile

        tempfile.tempdir = scratch  # the server's choice is cached
    try:
        c.own_folder(str(run_dir), mine)
        c.drop_capabilities()
    except OSError as e:
        # No nested user namespace on this host: the claim shares the run's writable
        # folders with the run's other claims (docs/security.md).
        print(f"confinement: the run's folders stay shared ({e})", file=sys.stderr)


class _Claim:
    """A running claim process as the server holds it: its client's connection (the
    claim lives as long as it), where it names what it imported, and the pipe its
    start waits on."""

    def __init__(self, conn: socket.socket, learn: Any, go: int) -> None:
        self.conn = conn
        self.learn = learn
        self.go: int | None = go


def _accept(
    listener: socket.socket,
    running: dict[int, _Claim],
    sel: selectors.BaseSelector,
    confine: dict[str, Any],
) -> None:
    conn, _ = listener.accept()
    try:
        data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
        msg = json.loads(data)
    except (OSError, ValueError):
        conn.close()
        return
    refused = refusal()
    if refused:
        # Never fork a CUDA context, nor from a threaded process (another thread's held
        # lock would be the child's forever): tell the client to fall back.
        with contextlib.suppress(OSError):
            conn.sendall(json.dumps({"refused": refused}).encode())
            conn.sendall(b"\n")
        for fd in fds:
            os.close(fd)
        conn.close()
        return
    r, w = os.pipe()
    with warnings.catch_warnings():
        # Python warns at any fork beside another thread; `refusal` has just shown that
        # each one is in FORK_SAFE_THREADS.
        warnings.filterwarnings("ignore", "This process .* is multi-threaded", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        listener.close()
        os.close(w)
        for other in running.values():
            other.conn.close()
            if other.go is not None:
                os.close(other.go)
        _worker(conn, fds, msg, r, confine)
    os.close(r)
    for fd in fds:
        os.close(fd)
    with contextlib.suppress(OSError):
        conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
    running[pid] = _Claim(conn, msg.get("learn"), w)
    sel.register(conn, selectors.EVENT_READ, pid)


def _heard(pid: int, running: dict[int, _Claim]) -> None:
    """The client of ``pid`` said something: its word to start (with the worker's host
    pid), or, at end of file, that it is gone: then the claim ends now."""
    claim = running[pid]
    try:
        data = claim.conn.recv(64)
    except OSError:
        data = b""
    if data and claim.go is not None:
        with contextlib.suppress(OSError):
            os.write(claim.go, data)
        os.close(claim.go)
        claim.go = None
        return
    if not data:
        # Timed out, Ctrl-C, killed: the client is the claim's handle outside.
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        if claim.go is not None:
            os.close(claim.go)
            claim.go = None


def _reap(running: dict[int, _Claim], sel: selectors.BaseSelector, learn: bool = True) -> None:
    from runners.fork.confine import end_strays

    while running:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        claim = running.pop(pid, None)
        if claim is None:
            continue  # a stray re-parented here, reaped
        # What the claim left running came up to this server (its subreaper) when
        # it exited: ended before the claim is reported done.
        ended = end_strays(running)
        rc = os.waitstatus_to_exitcode(status)
        with contextlib.suppress(KeyError, ValueError):
            sel.unregister(claim.conn)
        with contextlib.suppress(OSError):
            claim.conn.sendall(json.dumps({"rc": rc, "ended": ended}).encode() + b"\n")
        claim.conn.close()
        if claim.go is not None:
            os.close(claim.go)
        if learn and claim.learn:
            # What that claim imported, the next one forks with.
            with contextlib.suppress(OSError, ValueError):
                _import_modules(json.loads(Path(claim.learn).read_text()))


_PR_SET_CHILD_SUBREAPER = 36


def _adopt_orphans() -> None:
    """Become the subreaper of every claim process: what one leaves running (even
    after leaving its process group) stays below this server, where the parent
    looks for it after the claim."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _serve(path: str) -> int:
    # Ctrl-C at a terminal reaches this server too (unsandboxed, it shares the
    # parent's process group): the parent stops it (SIGTERM) once its claims are
    # stopped, so the signal is ignored here rather than ending in a traceback.
    # A forked claim process sets its own handler before the claim's code runs.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _adopt_orphans()
    doc = json.loads(sys.stdin.read() or "[]")
    ready = _preload(doc)
    # Every claim forked from here collects only what it made (after torch: the harness
    # package imports it).
    from runners.harness.collect import freeze

    freeze()
    confine = doc.get("confine", {}) if isinstance(doc, dict) else {}
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    print(READY + json.dumps(ready.to_json()), flush=True)
    learn = ready.learn
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    # Single-threaded (`_single_threaded`; a fork from more threads is refused), yet several
    # claims at once: a worker is reaped by polling while the next request is awaited.
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, None)
    running: dict[int, _Claim] = {}
    while True:
        for key, _ in sel.select(timeout=0.05 if running else None):
            if key.data is None:
                _accept(listener, running, sel, confine)
            elif key.data in running:
                _heard(key.data, running)
        _reap(running, sel, learn)


if __name__ == "__main__":
    sys.exit(_serve(sys.argv[1]))
