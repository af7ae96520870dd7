"""A claim's placer believes only the kernel.

It moves a fork server's worker into the claim's pids cgroup only for a process counted
in that cgroup (its pid as the kernel gives it), only a child of the process at the other
end of the connection the asker hands over (the server), and only one still in a
sandbox's own cgroup (no claim holds it yet): a process of another claim cannot have
its workers placed here, nor can a claim take a worker another claim already holds.
Real cgroups (cgroup v1's pids hierarchy here, v2 where offered), real processes.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledger.sandbox import pids
from ledger.sandbox.claimpids import ClaimPids
from ledger.sandbox.claimplace import Placer
from ledger.sandbox.launcher import PIDS_PREFIX

# A fork server's stand-in, in a sandbox's pids cgroup: it listens on a socket, and on
# each word forks a worker that waits, naming its pid.
SERVER = """
import os, socket, sys
from ledger.sandbox.launcher import limit_pids

limit_pids(sys.argv[1], 64)
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(sys.argv[2])
srv.listen(8)
r, w = os.pipe()
kids = []
print("ready", flush=True)
for word in sys.stdin:
    if word.strip() == "fork":
        pid = os.fork()
        if pid == 0:
            os.close(w)
            os.read(r, 1)
            os._exit(0)
        kids.append(pid)
        print(pid, flush=True)
os.close(w)
for pid in kids:
    os.waitpid(pid, 0)
"""

# A process of a claim: connects to the server and asks the placer to place ``pid``.
ASKER = """
import json, os, socket, sys

server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.connect(sys.argv[1])
with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
    s.connect(sys.argv[2])
    socket.send_fds(s, [json.dumps({"pid": int(sys.argv[3])}).encode()], [server.fileno()])
    print(s.makefile("r").readline().strip(), flush=True)
"""


@pytest.fixture
def under() -> Iterator[str]:
    if os.geteuid() != 0:
        pytest.skip("needs root (a pids cgroup is root's)")
    found = pids.controller()
    if found is None:
        pytest.skip("no pids controller Ledger may write here")
    yield found


def test_the_placer_places_only_an_unheld_worker_of_the_server_for_a_process_of_its_claim(
    under: str, tmp_path: Path
) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[3])}
    sock = str(tmp_path / "server.sock")
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, under, sock],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert server.stdin is not None and server.stdout is not None
    assert server.stdout.readline().strip() == "ready"
    mine = ClaimPids.make(server.pid, 2)
    other = ClaimPids.make(server.pid, 2)
    assert mine is not None and other is not None
    listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listening.bind(str(tmp_path / "placer.sock"))
    listening.listen(8)
    placer = Placer(mine.path, listening)
    serving = threading.Thread(target=placer.serve)
    serving.start()

    def worker() -> int:
        assert server.stdin is not None and server.stdout is not None
        server.stdin.write("fork\n")
        server.stdin.flush()
        return int(server.stdout.readline())

    def ask(pid: int, cgroup: ClaimPids | None) -> str:
        """What the placer says to a process counted in ``cgroup`` (None: the test's
        own) that asks it to place ``pid``."""
        asker = subprocess.Popen(
            [sys.executable, "-c", ASKER, sock, str(tmp_path / "placer.sock"), str(pid)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            # Counted in ``cgroup`` before it runs, as a claim's process is.
            preexec_fn=None if cgroup is None else lambda: _join(cgroup.path),
        )
        out, _ = asker.communicate()
        return out.strip()

    try:
        first, second = worker(), worker()
        # Not a process of this claim (another claim's, or none of Ledger's): refused.
        assert ask(first, other).endswith("is not counted in the claim's pids cgroup")
        assert ask(first, None).endswith("is not counted in the claim's pids cgroup")
        assert pids.unplaced(pids.folder_of(first))
        # No child of the server at the other end: refused.
        assert ask(os.getpid(), mine).endswith("is no waiting worker of the fork server it named")
        # The claim's own process, for a worker no claim holds yet: placed.
        assert ask(first, mine) == "placed"
        assert pids.folder_of(first) == mine.path
        # A worker another claim holds already stays where it is.
        (other.path / "cgroup.procs").write_text(str(second))
        assert "is not in a sandbox's own pids cgroup" in ask(second, mine)
        assert pids.folder_of(second) == other.path
        assert placer.placed == 1 and len(placer.refused) == 4
    finally:
        listening.shutdown(socket.SHUT_RDWR)
        serving.join()
        listening.close()
        server.stdin.close()
        assert server.wait() == 0
        mine.close()
        other.close()
        pids.release(under, server.pid)
    assert not (Path(under) / f"{PIDS_PREFIX}{server.pid}").exists()
    assert all(placer.refused)  # every refusal said why


def _join(cgroup: Path) -> None:
    with open(cgroup / "cgroup.procs", "w") as f:
        f.write("0")
