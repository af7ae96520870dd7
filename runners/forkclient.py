"""The client of `runners.forkserver`: ``python -m runners.forkclient SOCKET MODULE REQ RES``.

Imports nothing heavy (no torch): it hands its stdin, stdout and stderr, the
variables that place the claim (`FORWARDED`) and its process group to the fork
server, writes the worker's pid to
``RES.pid``, waits, and exits with the worker's status (negative: the
signal, as a spawned child would; a refusal runs the module here instead).
"""

from __future__ import annotations

import contextlib
import json
import os
import runpy
import signal
import socket
import sys

FORWARDED = ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "LEDGER_FORK_SERVERS")
"""The client's variables a forked worker takes."""


def main(argv: list[str]) -> int:
    path, module, request, result = argv
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(path)
    msg = {
        "module": module,
        "args": [request, result],
        "pgid": os.getpgid(0),
        "pid": os.getpid(),
        # Only what places the claim (its GPUs, its share of the cores, the servers of
        # other trees): the worker keeps the server's (sandboxed) environment otherwise.
        "env": {k: os.environ[k] for k in FORWARDED if k in os.environ},
        # The worker names the library modules it imported here; the server takes them.
        "learn": result + ".modules",
    }
    socket.send_fds(conn, [json.dumps(msg).encode()], [0, 1, 2])
    reader = conn.makefile("r")
    first = json.loads(reader.readline() or "{}")
    if "pid" not in first:
        # The server would not fork (or died): run the claim in this interpreter.
        sys.argv = [module, request, result]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        return 0
    with open(result + ".pid", "w") as f:
        f.write(str(first["pid"]))
    line = reader.readline()
    rc = int(json.loads(line)["rc"]) if line else 1
    if rc < 0:
        # Die of the same signal, so the parent sees what a spawned child shows.
        # SIGKILL and SIGSTOP take no handler (their disposition is always the default).
        with contextlib.suppress(OSError, ValueError):
            signal.signal(-rc, signal.SIG_DFL)
        os.kill(os.getpid(), -rc)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
