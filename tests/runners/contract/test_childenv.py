"""The environment of a claim's processes (`runners.contract.childenv`): OpenMP's
threads wait for work asleep, not spinning, unless the caller said otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest

from runners.contract.childenv import env
from runners.fork.forkparent import ForkServer

ROOT = Path(__file__).resolve().parents[3]


def test_openmp_threads_wait_asleep_unless_the_caller_says(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert env()["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert env()["OMP_WAIT_POLICY"] == "ACTIVE"


def test_a_fork_server_starts_openmp_with_its_threads_waiting_asleep(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GNU OpenMP reads the policy once, when torch loads it in the server: every claim
    # forked from the server inherits what it read there.
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    s = ForkServer.launch([(str(ROOT), "runners.workloads.moe:make_workload")], env()).wait()
    try:
        environ = Path(f"/proc/{s.proc.pid}/environ").read_bytes().split(b"\0")
    finally:
        s.close()
    assert b"OMP_WAIT_POLICY=PASSIVE" in environ
