"""A fork server: pay the imports once, still run every claim in a fresh process.

``python -m runners.forkserver SOCKET`` imports torch, the harness and every
check, then the modules of the workloads it is told to preload (JSON on
stdin: ``[[root, "module:attr"], ...]``; imported only, never built), all
without initialising CUDA, and serves one request at a time on a Unix socket.
For each request it forks a worker that runs ``python -m MODULE REQUEST
RESULT`` as a fresh interpreter would (``runpy``), with the client's stdin,
stdout and stderr (passed over the socket) and in the client's process group,
so the claim's timeout and Ctrl-C reach it exactly as they reach a spawned
child. A CUDA context is only ever created in a worker, so one claim's
poisoned context still cannot reach the next.

``python -m runners.forkclient SOCKET MODULE REQUEST RESULT`` is the client:
a Python start without torch (tens of milliseconds), which relays the
worker's exit status and writes its pid to ``RESULT.pid`` (the process that
holds the GPU memory, for the exit proof).
"""

from __future__ import annotations

import contextlib
import json
import os
import runpy
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["ForkServer", "serving"]

READY = "forkserver ready"

Wrap = Callable[[list[str], dict[str, str]], tuple[list[str], dict[str, str]]]
"""(command line, environment) -> the same, started inside a sandbox."""


class ForkServer:
    """The parent's handle: the server process and the command line of a client."""

    def __init__(self, proc: subprocess.Popen[str], sock: Path, ready: dict[str, Any]) -> None:
        self.proc = proc
        self.sock = sock
        self.ready = ready
        """What the server reported once preloaded (modules, seconds, CUDA state)."""

    @classmethod
    def start(
        cls,
        preload: list[tuple[str, str]],
        env: dict[str, str],
        *,
        wrap: Wrap | None = None,
        sock_dir: Path | None = None,
    ) -> ForkServer:
        """Start the server; ``wrap`` turns its command line and environment into the
        sandboxed ones (the server imports the pull request's modules, and every claim
        process it forks inherits its sandbox); ``sock_dir`` is where its socket goes
        (a folder the sandbox can write)."""
        sock = Path(tempfile.mkdtemp(prefix="ledger-fork-", dir=sock_dir)) / "s"
        env = {**env, "PYTORCH_NVML_BASED_CUDA_CHECK": "1"}
        argv = [sys.executable, "-m", "runners.forkserver", str(sock)]
        if wrap is not None:
            argv, env = wrap(argv, env)
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(preload))
        proc.stdin.close()
        line = proc.stdout.readline()
        if not line.startswith(READY):
            proc.kill()
            proc.wait()
            raise RuntimeError(f"fork server did not start: {line.strip() or 'no output'}")
        return cls(proc, sock, json.loads(line[len(READY) :]))

    def argv(self, module: str, request: Path, result: Path) -> list[str]:
        """The client command line that runs ``python -m module request result`` forked."""
        client = [sys.executable, "-m", "runners.forkclient", str(self.sock)]
        return [*client, module, str(request), str(result)]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        with contextlib.suppress(OSError):
            self.sock.unlink()
            self.sock.parent.rmdir()


@contextlib.contextmanager
def serving(
    preload: list[tuple[str, str]],
    env: dict[str, str],
    *,
    wrap: Wrap | None = None,
    sock_dir: Path | None = None,
) -> Iterator[ForkServer | None]:
    """A fork server for the block; None (callers spawn interpreters) when it cannot start
    or ``LEDGER_FORK_SERVER=0``."""
    if os.environ.get("LEDGER_FORK_SERVER", "1") == "0":
        yield None
        return
    try:
        server = ForkServer.start(preload, env, wrap=wrap, sock_dir=sock_dir)
    except (OSError, RuntimeError):
        yield None
        return
    try:
        yield server
    finally:
        server.close()


# -- the server side ---------------------------------------------------------


def _preload(items: list[list[str]]) -> dict[str, Any]:
    t0 = time.monotonic()
    import torch

    import runners.api
    import runners.isolated  # noqa: F401
    from runners.workloads.loader import WorkloadLoadError, _import_from, parse_ref

    loaded, failed = [], []
    for root, ref in items:
        try:
            _import_from(Path(root), parse_ref(ref)[0], ref)
            loaded.append(ref)
        except WorkloadLoadError as e:
            # The worker will report it properly; the server just does not preload it.
            failed.append(f"{ref}: {e}")
    return {
        "seconds": round(time.monotonic() - t0, 3),
        "preloaded": loaded,
        "not_preloaded": failed,
        "cuda_initialized": bool(torch.cuda.is_initialized()),  # type: ignore[no-untyped-call]
    }


def _worker(conn: socket.socket, fds: list[int], msg: dict[str, Any]) -> None:
    """In the forked child: become the claim process and never return."""
    code = 1
    try:
        with contextlib.suppress(OSError):
            os.setpgid(0, int(msg["pgid"]))
        for target, fd in zip((0, 1, 2), fds, strict=True):
            os.dup2(fd, target)
            os.close(fd)
        conn.close()
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
        os._exit(code)


def _serve(path: str) -> int:
    items = json.loads(sys.stdin.read() or "[]")
    ready = _preload(items)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(8)
    print(READY + json.dumps(ready), flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    # One request at a time: claims run one after another, and a single-threaded
    # server forks no copy of another thread's held lock.
    while True:
        conn, _ = listener.accept()
        with conn:
            try:
                data, fds, _, _ = socket.recv_fds(conn, 65536, 3)
                msg = json.loads(data)
            except (OSError, ValueError):
                continue
            import torch

            if torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
                # Never fork a CUDA context: tell the client to fall back.
                conn.sendall(b'{"refused": "CUDA initialised in the fork server"}\n')
                continue
            pid = os.fork()
            if pid == 0:
                listener.close()
                _worker(conn, fds, msg)
            for fd in fds:
                os.close(fd)
            conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
            _, status = os.waitpid(pid, 0)
            rc = os.waitstatus_to_exitcode(status)
            with contextlib.suppress(OSError):
                conn.sendall(json.dumps({"rc": rc}).encode() + b"\n")


if __name__ == "__main__":
    sys.exit(_serve(sys.argv[1]))
