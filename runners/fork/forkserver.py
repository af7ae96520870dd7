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
import traceback
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from runners.fork.childwake import ChildWake
from runners.fork.forkclient import FORWARDED
from runners.fork.forkimports import (
    Stopped,
    claim_threads,
    import_modules,
    learned_modules,
    preload,
)
from runners.fork.forkparent import READY
from runners.fork.forksafety import refusal

__all__: list[str] = []


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
    elif torch is not None and claim_threads() > 0:
        torch.set_num_threads(claim_threads())


def _worker(
    conn: socket.socket, fds: list[int], msg: dict[str, Any], go: int, confine: dict[str, Any]
) -> None:
    """In the forked child: become the claim process and never return. It waits for
    its client's word (``go``: the client has placed it in the claim's cgroup and
    learnt its host pid) before any of the claim's code runs."""
    # Imported here, not at the top: the harness package imports torch, which must wait
    # for `forkimports`' `_single_threaded` (the server's preload has imported it by now).
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
        word = os.read(go, 64).decode()
        os.close(go)
        if not word:
            os._exit(1)  # the client went away before the claim started
        timeline.mark("go")
        held = _held(conn, confine)
        # Nothing of the claim's code can write to its client as this process.
        conn.close()
        if not held:
            os._exit(1)
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
                Path(learn).write_text(json.dumps(learned_modules(before)))
        os._exit(code)


def _held(conn: socket.socket, confine: dict[str, Any]) -> bool:
    """The claim process's own process limit, proved from inside before its code runs
    (`ledger.sandbox.selftest.claim_pids`): what it found goes to its client, over the
    connection no code of the claim's ever holds. Where the host makes a limit per claim
    (``claim_pids``) and this process is counted in none, it never runs the claim's code:
    a process that asked this server to fork it without its client placing it (the
    claim's own code can reach this socket) would hold the sandbox's processes."""
    try:
        from ledger.sandbox.selftest import claim_pids

        seen, why = claim_pids()
    except Exception as e:  # not proved is not held
        seen, why = "", f"the self-test did not run: {type(e).__name__}: {e}"
    doc = {"pids_cgroup": seen}
    if why is not None and confine.get("claim_pids"):
        doc["refused"] = f"its process limit per claim does not hold: {why}"
    with contextlib.suppress(OSError):
        conn.sendall(json.dumps(doc).encode() + b"\n")
    return "refused" not in doc


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
    # The built-in estimator's fits, a folder of the run's the run handed in
    # (`ledger.execution.calibrations`): every claim may add the fit it measured.
    fits = os.environ.get("LEDGER_CALIBRATION_DIR", "")
    if fits and os.path.realpath(fits).startswith(os.path.realpath(str(run_dir)) + os.sep):
        mine.append(fits)
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
        if _WAKE:
            _WAKE[0].close_in_child()
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
                import_modules(json.loads(Path(claim.learn).read_text()))


_PR_SET_CHILD_SUBREAPER = 36

_EXITED = "a child exited"
"""The selector's mark on the `ChildWake` socket."""
_WAKE: list[ChildWake] = []
"""The server's `ChildWake`, which each forked claim process lets go of."""


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
    ready = preload(doc)
    with contextlib.suppress(ImportError):
        # Each claim process's own self-test (`_held`), imported once here, not per fork.
        import ledger.sandbox.selftest  # noqa: F401
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
    signal.signal(signal.SIGTERM, _stop)
    # Single-threaded (`forkimports`; a fork from more threads is refused), yet several
    # claims at once: a worker's exit wakes the server (`childwake`) as a request does.
    wake = ChildWake()
    _WAKE.append(wake)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, None)
    sel.register(wake.sock, selectors.EVENT_READ, _EXITED)
    running: dict[int, _Claim] = {}
    while True:
        for key, _ in sel.select():
            if key.data is None:
                _accept(listener, running, sel, confine)
            elif key.data == _EXITED:
                wake.drain()
            elif key.data in running:
                _heard(key.data, running)
        _reap(running, sel, learn)


def _stop(*_: object) -> None:
    """SIGTERM: the parent is done with this server (its claims are stopped)."""
    raise Stopped


if __name__ == "__main__":
    try:
        sys.exit(_serve(sys.argv[1]))
    except Stopped:
        sys.exit(0)
