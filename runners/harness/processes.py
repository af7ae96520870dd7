"""Processes as observed in /proc and by signals, and how they are stopped.

Every stop is one escalation: SIGTERM, a grace period, SIGKILL, another grace
period, reaping our own children on the way (a zombie still answers
``kill(pid, 0)``), until an observation shows the target gone. Each function
returns that observation as a sentence, for a cleanup proof.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class ProcInfo:
    pid: int
    ppid: int
    pgid: int
    state: str
    comm: str


def proc_table() -> dict[int, ProcInfo] | None:
    """Every process in /proc, or None where there is no /proc."""
    root = Path("/proc")
    if not (root / "self").exists():
        return None
    table: dict[int, ProcInfo] = {}
    for entry in root.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "stat").read_text()
        except OSError:
            continue  # exited while we looked
        # comm is in parentheses and may itself contain ') ': split at the last one.
        head, _, rest = raw.rpartition(")")
        fields = rest.split()
        if len(fields) < 3:
            continue
        pid = int(entry.name)
        table[pid] = ProcInfo(
            pid=pid,
            ppid=int(fields[1]),
            pgid=int(fields[2]),
            state=fields[0],
            comm=head.partition("(")[2],
        )
    return table


def descendants(pid: int, table: dict[int, ProcInfo] | None = None) -> dict[int, ProcInfo]:
    """Processes whose parent chain leads to ``pid`` (children, grandchildren, ...)."""
    table = proc_table() if table is None else table
    if table is None:
        return {}
    children: dict[int, list[int]] = {}
    for info in table.values():
        children.setdefault(info.ppid, []).append(info.pid)
    found: dict[int, ProcInfo] = {}
    todo = list(children.get(pid, []))
    while todo:
        p = todo.pop()
        if p in found or p not in table:
            continue
        found[p] = table[p]
        todo.extend(children.get(p, []))
    return found


def proc_state(pid: int) -> str | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw.rpartition(")")[2].split()[0]


def _reap_if_child(pid: int) -> int | None:
    """waitpid a child of ours without blocking; its exit status, or None."""
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return None  # not our child, or already reaped
    return status if done == pid else None


def pid_gone(pid: int) -> tuple[bool, str]:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True, f"os.kill({pid}, 0) raised ProcessLookupError"
    except PermissionError:
        return False, f"os.kill({pid}, 0) raised PermissionError: pid exists (not ours)"
    st = proc_state(pid)
    if st == "Z":
        return False, f"pid {pid} is a zombie (state Z) not yet reaped by waitpid"
    return False, f"os.kill({pid}, 0) succeeded: pid {pid} still exists (state {st})"


def group_gone(pgid: int) -> tuple[bool, str]:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True, f"os.killpg({pgid}, 0) raised ProcessLookupError"
    except PermissionError:
        return False, f"os.killpg({pgid}, 0) raised PermissionError: group exists"
    return False, f"os.killpg({pgid}, 0) succeeded: process group {pgid} still exists"


def _escalate(
    *,
    check: Callable[[], tuple[bool, str]],
    signal_: Callable[[int], None],
    reap: Callable[[], list[str]],
    term_first: bool,
    label: str,
    timeout_s: float,
) -> tuple[bool, str]:
    """SIGTERM, wait, SIGKILL, wait: until `check` observes the target gone.

    `reap` collects exit statuses of our own children so they stop being
    zombies (a zombie still answers kill(pid, 0)); it returns what it did.
    """
    actions: list[str] = []
    gone, why = check()
    if not gone and term_first:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            signal_(signal.SIGTERM)
            actions.append(f"SIGTERM{label}")
    deadline = time.monotonic() + timeout_s
    killed = False
    while not gone:
        actions.extend(reap())
        gone, why = check()
        if gone:
            break
        if time.monotonic() > deadline:
            if killed:
                break
            with contextlib.suppress(ProcessLookupError, PermissionError):
                signal_(signal.SIGKILL)
                actions.append(f"SIGKILL{label}")
            killed = True
            deadline = time.monotonic() + timeout_s
        time.sleep(0.01)
    prefix = "; ".join(actions)
    return gone, f"{prefix}; {why}" if prefix else why


def stop_pid(pid: int, *, timeout_s: float) -> tuple[bool, str]:
    """Terminate, then kill, then reap (when ours) ``pid``; prove it gone."""

    def reap() -> list[str]:
        status = _reap_if_child(pid)
        return [] if status is None else [f"reaped by waitpid (status {status})"]

    return _escalate(
        check=lambda: pid_gone(pid),
        signal_=lambda sig: os.kill(pid, sig),
        reap=reap,
        # A zombie is already dead: it needs reaping, not a signal.
        term_first=proc_state(pid) != "Z",
        label="",
        timeout_s=timeout_s,
    )


def stop_group(pgid: int, *, timeout_s: float) -> tuple[bool, str]:
    """Terminate, then kill, the process group; reap our members; prove it gone."""

    def reap() -> list[str]:
        for p in descendants(os.getpid()).values():
            if p.pgid == pgid:
                _reap_if_child(p.pid)
        return []

    return _escalate(
        check=lambda: group_gone(pgid),
        signal_=lambda sig: os.killpg(pgid, sig),
        reap=reap,
        term_first=True,
        label=" to group",
        timeout_s=timeout_s,
    )


def stop_popen(popen: subprocess.Popen[Any], *, timeout_s: float) -> tuple[bool, str]:
    """`stop_pid` for a child started with `subprocess.Popen`: reaped through the
    Popen, so that it records the return code."""
    pid = popen.pid

    def reap() -> list[str]:
        if popen.returncode is None and popen.poll() is not None:
            return [f"reaped by waitpid (returncode {popen.returncode})"]
        return []

    done = popen.poll() is not None
    gone, why = _escalate(
        check=lambda: pid_gone(pid),
        signal_=popen.send_signal,
        reap=reap,
        term_first=not done,
        label="",
        timeout_s=timeout_s,
    )
    if done:
        why = f"reaped by waitpid (returncode {popen.returncode}); {why}"
    return gone, why
