"""A claim's ranks are waited for by their exit, not by a look on a timer."""

from __future__ import annotations

import os
import platform
import signal
import sys
import threading
from pathlib import Path

import pytest

from runners.harness.launch import RankGroup

_EPOLL_WAIT = {"x86_64": (232, 281)}  # epoll_wait, epoll_pwait

RANK = (
    "import signal, sys\n"
    "print('\\x1eprogress started', file=sys.stderr, flush=True)\n"
    "signal.pause()\n"
)


def test_the_wait_for_a_rank_sleeps_until_it_exits() -> None:
    """While a rank runs, the waiting thread is blocked in epoll_wait on the rank's
    pidfd with the claim's deadline as its timeout (as /proc shows the call it is in),
    not in a sleep of 50 ms between looks; the rank's exit ends the wait."""
    calls = _EPOLL_WAIT.get(platform.machine())
    if calls is None or not hasattr(os, "pidfd_open"):
        pytest.skip("no epoll_wait number for this machine, or no pidfds")
    started = threading.Event()
    group = RankGroup.start(
        [[sys.executable, "-c", RANK]],
        progress=lambda m: started.set() if m == "started" else None,
        envs=[dict(os.environ)],
    )
    tid: list[int] = []

    def wait() -> None:
        tid.append(threading.get_native_id())
        group.wait(timeout_s=600, died=lambda rank, rc: rc != 0)

    waiter = threading.Thread(target=wait)
    try:
        waiter.start()
        assert started.wait(60)  # a bound, not a synchronisation: the rank runs
        while not tid:
            pass
        at = Path(f"/proc/self/task/{tid[0]}/syscall")
        while True:  # until the waiting thread is found blocked (between two looks)
            fields = at.read_text().split()
            if fields and fields[0].isdigit() and int(fields[0]) in (*calls, 230, 35):
                break  # epoll_wait, or a sleep (clock_nanosleep, nanosleep)
        assert int(fields[0]) in calls, fields
        assert int(fields[4], 16) & 0xFFFFFFFF > 1000, fields  # ms: the deadline, not 50
    finally:
        os.kill(group.pgid, signal.SIGTERM)
        waiter.join(60)
        group.stop()
    assert not waiter.is_alive() and group.procs[0].returncode == -signal.SIGTERM
