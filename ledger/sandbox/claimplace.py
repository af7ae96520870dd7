"""What a claim starts forked from a fork server, held to the claim's own process limit.

A forked claim's gradient arms are forked from the fork servers of their trees
(`runners.checks.arms`): children of a server, counted in its sandbox's pids cgroup,
not in the claim's (`ledger.sandbox.claimpids`), so one arm that forks until refused
would take the processes of every claim beside it. The claim's client, outside the
sandbox and root, places each in the claim's pids cgroup before it starts: a placer on
a socket in the claim's folder, asked by the arm's own client (a process of the claim,
inside) with its connection to the server. The placer believes only the kernel: the
asker must be counted in the claim's pids cgroup (its pid as the kernel gives it here),
the server is that connection's peer, the worker is the server's child with the pid
asked in the server's namespace and is still in a sandbox's own cgroup (no claim holds
it yet). A worker nobody placed never runs a claim's code where a limit per claim holds
(`runners.fork.forkserver._held`): an arm refused here runs in its own client instead,
inside the claim's cgroup.

Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ledger.sandbox import pids

__all__ = ["Placer", "record"]


@dataclass
class Placer:
    """A claim's placer, serving the socket its client listens on (in the claim's folder)
    from a thread of the client's, until the client shuts the socket down."""

    cgroup: Path
    """The claim's pids cgroup, as the host sees it."""
    sock: socket.socket
    placed: int = 0
    refused: list[str] = field(default_factory=list)

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # shut down: the claim ended
            with conn:
                why = self._one(conn)
                if why is None:
                    self.placed += 1
                else:
                    self.refused.append(why)
                with contextlib.suppress(OSError):
                    conn.sendall(f"{why or 'placed'}\n".encode())

    def _one(self, conn: socket.socket) -> str | None:
        """Place the worker one request names; why not (None: placed)."""
        try:
            data, fds, _, _ = socket.recv_fds(conn, 4096, 1)
        except OSError as e:
            return f"the request could not be read: {e.strerror}"
        try:
            asker = _peer(conn)
            if pids.folder_of(asker) != self.cgroup:
                return f"pid {asker} is not counted in the claim's pids cgroup"
            if len(fds) != 1:
                return "no connection to a fork server was handed over"
            with socket.socket(fileno=os.dup(fds[0])) as srv:
                server = _peer(srv)
            pid = int(json.loads(data)["pid"])
            worker = _child(server, pid)
            if worker is None:
                return f"pid {pid} is no waiting worker of the fork server it named"
            held = pids.folder_of(worker)
            if not pids.unplaced(held):
                return f"the worker is not in a sandbox's own pids cgroup ({held})"
            (self.cgroup / "cgroup.procs").write_text(str(worker))
        except (OSError, ValueError, KeyError, TypeError) as e:
            return f"not placed: {type(e).__name__}: {e}"
        finally:
            for fd in fds:
                os.close(fd)
        return None


def _peer(conn: socket.socket) -> int:
    """The pid of the process at the other end of ``conn``, as the kernel gives it here."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid = int(struct.unpack("3i", creds)[0])
    if pid <= 0:
        raise ValueError("the peer's pid is not seen here")
    return pid


def _child(parent: int, inner: int) -> int | None:
    """The child of ``parent`` whose pid in its innermost namespace is ``inner`` (the fork
    client's `_host_pid` walks the same, without importing this package)."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:
            continue
        if fields.get("PPid", "").strip() == str(parent):
            nspids = fields.get("NSpid", "").split()
            if nspids and nspids[-1] == str(inner):
                return int(entry.name)
    return None


def record(note: str, cgroup: str, seen: dict[str, Any], placer: Placer | None) -> None:
    """What the claim's client writes for the parent (`ledger.sandbox.claimpids.ClaimPids.
    proof`): the pids cgroup the claim process found itself in from inside, before its
    code ran (``seen``, from `runners.fork.forkserver._held`), the ``pids.max`` the host
    reads there, and what the placer placed and refused."""
    try:
        most = (Path(cgroup) / "pids.max").read_text().strip()
    except OSError:
        most = ""
    doc = {
        "inside": seen.get("pids_cgroup"),
        "refused": seen.get("refused"),
        "max": most,
        "placed": placer.placed if placer is not None else 0,
        "not_placed": (placer.refused if placer is not None else [])[:5],
        "placer": placer is not None,
    }
    with contextlib.suppress(OSError), open(note, "w") as f:
        json.dump(doc, f)
