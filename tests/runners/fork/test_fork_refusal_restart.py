"""A fork refused by the server is told from a claim that exits as if refused.

The fork client runs beside the parent, outside the sandbox, and learns of a refusal
before the server forks anything: the claim's code never ran, so the parent starts
the claim afresh (a fresh interpreter), as after a refusal at ready. It writes why
where no forked claim can write. A claim that writes ``RESULT.refused`` and exits 75
itself leaves no such note: its exit is its own failure.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from runners.claim.isolated import ClaimRequest, run_claim_isolated
from runners.contract.request import Claim
from runners.contract.result import CheckResult
from runners.fork.forkparent import ForkServer
from runners.harness.child import env

ROOT = Path(__file__).resolve().parents[3]

# Imported by the server. A claim in mode "poison" signals the server (its parent),
# whose handler starts a thread there: the server refuses every fork after that.
POISON = """
import os
import signal
import sys
import threading

from runners.workloads.moe import make_workload as _make

TINY = {"d_model": 32, "n_layers": 1, "n_experts": 4, "d_ff": 32, "vocab": 64}


def _thread(*_):
    threading.Thread(target=threading.Event().wait, name="late-poller", daemon=True).start()


signal.signal(signal.SIGUSR1, _thread)


class W:
    def __init__(self, mode):
        self.mode = mode
        self.inner = _make(**TINY)

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def setup(self, device, seed):
        if self.mode == "poison":
            os.kill(os.getppid(), signal.SIGUSR1)
        if self.mode == "fake-refusal":
            with open(sys.argv[2] + ".refused", "w") as f:
                f.write("the fork server runs 2 threads (poller)")
            os._exit(75)
        if self.mode == "where":
            print("\\x1eprogress where " + str(os.getppid()), file=sys.stderr, flush=True)
        self.inner.setup(device, seed)


def make_workload(mode="plain"):
    return W(mode)
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[ForkServer, Path]]:
    (tmp_path / "poison.py").write_text(POISON)
    s = ForkServer.launch([(str(tmp_path), "poison:make_workload")], env()).wait()
    yield s, tmp_path
    s.close()


def _run(server: ForkServer, root: Path, mode: str, said: list[str], **env: str) -> CheckResult:
    [r] = run_claim_isolated(
        ClaimRequest(
            Claim(
                claim="t.cleanup",
                check="cleanup",
                params={"batch": 1, "seq": 8},
                workload_ref="poison:make_workload",
                workload_params={"mode": mode},
                device="cpu",
                observer_off=False,
            ),
            repo_root=root,
            base_root=None,
            artifact_dir=None,
            env=env,
        ),
        progress=said.append,
        fork_server=server,
    )
    return r


def test_a_claim_that_exits_as_if_refused_fails(server: tuple[ForkServer, Path]) -> None:
    s, root = server
    said: list[str] = []
    r = _run(s, root, "fake-refusal", said)
    assert r.outcome == "failed", r.reason
    assert r.reason is not None and "status 75" in r.reason
    assert not any("started afresh" in x for x in said), said


def test_a_fork_the_server_refused_runs_afresh_and_is_judged(
    server: tuple[ForkServer, Path],
) -> None:
    s, root = server
    said: list[str] = []
    # The first claim makes the server start a thread; from then on it refuses to fork.
    assert _run(s, root, "poison", said).outcome == "passed"
    r = _run(s, root, "where", said)
    assert any("refused the claim" in x and "thread" in x for x in said), said
    assert any("started afresh" in x for x in said), said
    assert r.outcome == "passed", r.reason
    # It ran in a fresh interpreter, not below the server.
    where = [x.split()[-1] for x in said if x.startswith("where ")]
    assert where and where[-1] != str(s.proc.pid)


def test_a_claim_its_process_limit_cannot_hold_never_runs_forked(
    server: tuple[ForkServer, Path], tmp_path: Path
) -> None:
    from runners.fork.forkclient import PIDS_VAR

    s, root = server
    said: list[str] = []
    # The claim's pids cgroup is gone: the client will not let the worker start unlimited.
    r = _run(s, root, "where", said, **{PIDS_VAR: str(tmp_path / "gone")})
    assert any("pids cgroup could not be entered" in x for x in said), said
    assert any("started afresh" in x for x in said), said
    assert r.outcome == "passed", r.reason
    where = [x.split()[-1] for x in said if x.startswith("where ")]
    assert where and where[-1] != str(s.proc.pid)
