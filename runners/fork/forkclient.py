"""The client of `runners.fork.forkserver`:
``python -m runners.fork.forkclient SOCKET MODULE REQ RES``.

Imports nothing heavy (no torch): it hands its stdin, stdout and stderr, the
variables that place the claim (`FORWARDED`) and its process group to the fork
server, writes the worker's pid to
``RES.pid``, waits, and exits with the worker's status (negative: the
signal, as a spawned child would). A refusal runs the module here instead, where this
client runs inside the sandbox already (a gradient arm started by its claim); a client
started outside it (`STRICT_VAR`, a claim of `runners.rank`) must not run the
claim's code itself: it writes why where `REFUSAL_VAR` says (else ``RES.refused``) and
exits `REFUSED` (a claim's caller starts the claim afresh in its own sandbox, as does
the doctor's).
"""

from __future__ import annotations

import contextlib
import json
import os
import runpy
import signal
import socket
import struct
import sys
from typing import Any

PLACER_VAR = "LEDGER_CLAIM_PLACER"
"""The socket of the claim's placer (`ledger.sandbox.claimplace`), where its client holds
a pids cgroup of the claim's own: a process the claim starts forked from a fork server (a
gradient arm) is placed there through it before it starts."""

FORWARDED = (
    "CUDA_VISIBLE_DEVICES",
    "OMP_NUM_THREADS",
    "LEDGER_FORK_SERVERS",
    "LEDGER_DEVICE_SHARED",
    PLACER_VAR,
)
"""The client's variables a forked worker takes."""

STRICT_VAR = "LEDGER_FORK_STRICT"
"""``1``: this client runs outside the sandbox, so a refusal is never run here."""

REFUSAL_VAR = "LEDGER_FORK_REFUSAL_NOTE"
"""Where a strict client writes why it was refused (else ``RES.refused``): a path only
the parent, outside the sandbox, can write, read by it as its own observation."""

REFUSED = 75
"""The exit status of a strict client whose fork was refused (EX_TEMPFAIL)."""


def main(argv: list[str]) -> int:
    path, module, request, result = argv
    placer = _placer(result)
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
        refused = str(first.get("refused") or "the fork server did not fork")
        _record(placer, {"refused": refused})
        return _refused(module, request, result, refused)
    host = _host_pid(conn, int(first["pid"]))
    if host is not None:
        with open(result + ".pid", "w") as f:
            f.write(str(host))
        _into_cgroup(host)
    why = _into_pids(host) or _placed(conn, int(first["pid"]))
    if why is not None:
        # Its process limit would not hold: the worker never starts (the server ends it
        # when this connection closes), and the claim starts afresh in a sandbox of its
        # own, whose limit is its own (or, asked from inside one, runs here). The server
        # hears the end of this side and ends it; its word that the worker is gone (it
        # was moved into the claim's cgroup) comes before the claim starts afresh.
        with contextlib.suppress(OSError):
            conn.shutdown(socket.SHUT_WR)
            _gone(reader)
        reader.close()
        conn.close()
        _record(placer, {"refused": why})
        return _refused(module, request, result, why, always=True)
    # The worker waits for this word: it is in the claim's cgroup, and knows its host pid.
    conn.sendall(f"go {host if host is not None else ''}\n".encode())
    seen, done = _after_go(reader)
    _record(placer, seen)
    if "refused" in seen:
        # Not held to its limit, by its own reading: it ran none of the claim's code.
        reader.close()
        conn.close()
        return _refused(module, request, result, str(seen["refused"]), always=True)
    rc = int(done["rc"])
    if done.get("ended"):
        # What the worker left running, ended by the server: the parent names it.
        with open(result + ".ended", "w") as f:
            json.dump(done["ended"], f)
    if rc < 0:
        # Die of the same signal, so the parent sees what a spawned child shows.
        # SIGKILL and SIGSTOP take no handler (their disposition is always the default).
        with contextlib.suppress(OSError, ValueError):
            signal.signal(-rc, signal.SIG_DFL)
        os.kill(os.getpid(), -rc)
    return rc


def _refused(module: str, request: str, result: str, why: str, always: bool = False) -> int:
    """The server did not run the claim: outside the sandbox (`STRICT_VAR`, or
    ``always`` where this client placed the claim itself) the claim's code must not run
    in this process, so why is written where the parent asked (a folder no sandboxed
    process can write: only this client's word counts as a refusal, never a claim's own
    exit) and this exits `REFUSED`; inside the sandbox, the claim runs here."""
    if os.environ.get(STRICT_VAR) == "1" or (always and os.environ.get(PIDS_VAR)):
        with open(os.environ.get(REFUSAL_VAR) or result + ".refused", "w") as f:
            f.write(why or "the fork server did not fork")
        return REFUSED
    sys.argv = [module, request, result]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    return 0


def _after_go(reader: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """After the word to start: what the worker found of its own process limit before
    the claim's code ran (`runners.fork.forkserver._held`), then the server's word that
    it exited (``{"rc": 1}`` where the server went away)."""
    seen: dict[str, Any] = {}
    for line in reader:
        doc = json.loads(line)
        if "pids_cgroup" in doc and not seen:
            seen = doc
            if "refused" in doc:
                # It exits at once, none of the claim's code run: the server's word that
                # it is gone, so nothing of it is left in the claim's cgroup when the
                # claim starts afresh.
                _gone(reader)
                return seen, {"rc": 1}
            continue
        return seen, doc
    return seen, {"rc": 1}


def _gone(reader: Any) -> None:
    """Until the server's word that the worker exited (or the server went away)."""
    for _ in reader:
        return


def _host_pid(conn: socket.socket, pid: int) -> int | None:
    """The worker's pid as this process sees it: the server (the socket's peer, whose
    pid the kernel gives in this namespace) forked it, and its status names its pid in
    each namespace it is in, the innermost last (the server's own sandbox)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    server = struct.unpack("3i", creds)[0]
    if server <= 0:
        return None
    # The same walk as `ledger.sandbox.claimplace._child`, kept here: importing it would
    # load the sandbox package's face (17.5 ms against the client's own 7.3 ms, on every
    # claim a fork server starts), and the sandbox's room may not import the runners.
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:
            continue
        if fields.get("PPid", "").strip() != str(server):
            continue
        nspids = fields.get("NSpid", "").split()
        if nspids and nspids[-1] == str(pid):
            return int(entry.name)
    return None


CGROUP_VAR = "LEDGER_CLAIM_CGROUP"
"""The claim's cgroup (a folder with ``cgroup.procs``), set by the parent."""


def _into_cgroup(pid: int) -> None:
    """The worker into the claim's cgroup before it starts, so that everything it
    starts is counted in the claim's peak; a failure leaves the outside view sampled."""
    where = os.environ.get(CGROUP_VAR)
    if where:
        with contextlib.suppress(OSError), open(os.path.join(where, "cgroup.procs"), "w") as f:
            f.write(str(pid))


PIDS_VAR = "LEDGER_CLAIM_PIDS_CGROUP"
"""The claim's own pids cgroup below its sandbox's (`ledger.sandbox.claimpids`), set by
the parent where it made one."""


PROOF_VAR = "LEDGER_CLAIM_PIDS_PROOF"
"""Where the claim's client writes what the claim process found of its pids cgroup
from inside, and what it placed there (`ledger.sandbox.claimplace`): a file in a folder
of the parent's that no sandboxed process can write."""


def pids_env(cgroup: str | os.PathLike[str], note: str | os.PathLike[str]) -> dict[str, str]:
    """What a claim's client is told where the parent made the claim a pids cgroup of its
    own (`ledger.sandbox.claimpids.ClaimPids`): the cgroup, and where to write what the
    claim found of it."""
    return {PIDS_VAR: str(cgroup), PROOF_VAR: str(note)}


PLACER_NAME = "placer.sock"
"""The placer's socket, in the claim's folder."""


class _Placing:
    """The claim's placer (`ledger.sandbox.claimplace.Placer`): its socket listens from
    the start (an arm that asks early waits in its backlog), and it is served from a
    thread of its own, which imports the sandbox's room there: that takes longer than
    this client's whole start, and overlaps the claim's start instead of delaying it."""

    def __init__(self, path: str, cgroup: str) -> None:
        import threading  # only here: a client of no claim's pids cgroup starts without it

        self.path = path
        self.placer: Any = None
        self.sock = _listen(path)
        self.thread = threading.Thread(target=self._serve, args=(cgroup,), daemon=True)
        if self.sock is not None:
            self.thread.start()

    def _serve(self, cgroup: str) -> None:
        from pathlib import Path

        from ledger.sandbox.claimplace import Placer

        assert self.sock is not None
        placer = self.placer = Placer(Path(cgroup), self.sock)
        placer.serve()

    def close(self) -> Any:
        """The placer, once no more is placed (None: there was none)."""
        if self.sock is None:
            return None
        with contextlib.suppress(OSError):
            # Wakes the thread's accept (a close alone would not).
            self.sock.shutdown(socket.SHUT_RDWR)
        self.thread.join()
        self.sock.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        return self.placer


def _listen(path: str) -> socket.socket | None:
    """A socket listening at ``path`` in the claim's folder, the folder owner's (the
    sandbox's uid) to connect to; None where none can be made (the claim's arms then run
    in their own clients)."""
    folder, name = os.path.split(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        sock.close()
        return None
    try:
        # By the folder's descriptor: a socket's path holds at most 107 bytes.
        sock.bind(f"/proc/self/fd/{fd}/{name}")
        st = os.stat(fd)
        os.chown(path, st.st_uid, st.st_gid)
        os.chmod(path, 0o600)
        sock.listen(16)
    except OSError:
        sock.close()
        return None
    finally:
        os.close(fd)
    return sock


def _placer(result: str) -> _Placing | None:
    """Outside the sandbox, where the parent made the claim a pids cgroup of its own: the
    placer of what the claim starts forked, its socket in the claim's folder, named to
    the worker; else None."""
    where, note = os.environ.get(PIDS_VAR), os.environ.get(PROOF_VAR)
    if not where or not note or os.environ.get(STRICT_VAR) != "1":
        return None
    path = os.path.join(os.path.dirname(os.path.abspath(result)), PLACER_NAME)
    os.environ[PLACER_VAR] = path
    return _Placing(path, where)


def _record(placing: _Placing | None, seen: dict[str, Any]) -> None:
    """Outside the sandbox, where the parent made the claim a pids cgroup of its own: the
    placer closed, and what the claim found of its limit from inside written for the
    parent (`ledger.sandbox.claimplace.record`)."""
    where, note = os.environ.get(PIDS_VAR), os.environ.get(PROOF_VAR)
    placer = placing.close() if placing is not None else None
    if not where or not note or os.environ.get(STRICT_VAR) != "1":
        return
    from ledger.sandbox.claimplace import record

    record(note, where, seen, placer)


def _placed(conn: socket.socket, pid: int) -> str | None:
    """Inside the sandbox, a process the claim starts forked (a gradient arm): the
    claim's placer moves the worker ``pid`` (of the server at the other end of ``conn``)
    into the claim's pids cgroup before it starts; why not (None: placed, or there is
    no placer: no limit per claim)."""
    where = os.environ.get(PLACER_VAR)
    if not where or os.environ.get(STRICT_VAR) == "1":
        return None
    try:
        here = os.open(".", os.O_RDONLY)
    except OSError as e:
        return f"the claim's placer could not be asked: {e.strerror}"
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            # By its folder: a socket's path holds at most 107 bytes.
            os.chdir(os.path.dirname(where))
            s.connect(os.path.basename(where))
            socket.send_fds(s, [json.dumps({"pid": pid}).encode()], [conn.fileno()])
            reply = s.makefile("r").readline().strip()
    except OSError as e:
        return f"the claim's placer could not be asked: {e.strerror}"
    finally:
        os.fchdir(here)
        os.close(here)
    return None if reply == "placed" else (reply or "the claim's placer said nothing")


def _into_pids(pid: int | None) -> str | None:
    """The worker into the claim's pids cgroup before it starts, so that it and all it
    starts are held to the claim's limit; why not, where the parent made one and the
    worker could not be placed there (None: placed, or none was made)."""
    where = os.environ.get(PIDS_VAR)
    if not where:
        return None
    if pid is None:
        return "the fork server's worker has no pid seen here: its process limit cannot hold"
    try:
        with open(os.path.join(where, "cgroup.procs"), "w") as f:
            f.write(str(pid))
    except OSError as e:
        return f"the claim's pids cgroup could not be entered: {e.strerror}"
    return None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
