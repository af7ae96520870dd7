"""Multi-rank claims on CPU/gloo: agreement, per-rank proofs, and ranks that raise or die."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runners.claim.isolated import ClaimRequest, run_claim_isolated
from runners.claim.ranks import merge_ranks
from runners.contract.request import Claim
from runners.contract.result import CheckResult, CleanupProof, ReleasedResource, Stamped
from runners.harness import launch

REPO = Path(__file__).resolve().parents[3]
EP = "runners.workloads.moe_ep:make_workload"
SMALL = {"d_model": 32, "n_layers": 1, "n_heads": 2, "n_experts": 4, "d_ff": 64, "vocab": 128}

KILL_RANK1 = """
import os, signal
import torch.distributed as dist
from runners.workloads.moe_ep import make_workload as _make

def make_workload(**params):
    if dist.get_rank() == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return _make(**params)
"""

RAISE_RANK1 = """
import torch.distributed as dist
from runners.workloads.moe import MoEConfig
from runners.workloads.moe_ep import EPMoEWorkload

class Diverging(EPMoEWorkload):
    def forward(self, batch, *, grad):
        if dist.get_rank() == 1:
            raise RuntimeError("rank 1 diverged")
        return super().forward(batch, grad=grad)  # rank 0 then waits in all-to-all

def make_workload(**params):
    return Diverging(MoEConfig(**params))
"""


@pytest.fixture(autouse=True)
def _short_peer_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    # Peers of a dead rank wait in a collective; the tests need not wait 20 s for them.
    monkeypatch.setattr(launch, "PEER_GRACE_S", 5.0)


def _claim(
    root: Path,
    ref: str,
    check: str,
    params: dict[str, Any],
    world_size: int = 1,
    timeout_s: float = 1800,
) -> list[Stamped]:
    return run_claim_isolated(
        ClaimRequest(
            Claim(
                device="cpu",
                claim=f"ep.{check}",
                check=check,
                params=params,
                workload_ref=ref,
                workload_params=SMALL,
                observer_off=False,
                world_size=world_size,
                timeout_s=timeout_s,
            ),
            repo_root=root,
            base_root=None,
            artifact_dir=None,
        ),
        progress=lambda _m: None,
    )


def _result(rank: int, outcome: str, reason: str | None, released: bool = True) -> CheckResult:
    return CheckResult(
        claim="c",
        check="admission",
        check_version="1",
        params={"batches": [1]},
        scope={"device_kind": "cuda", "gpu_count": 8},
        outcome=outcome,  # type: ignore[arg-type]
        reason=reason,
        measurements={"peak": 10 + rank},
        observer="off",
        cleanup=CleanupProof(
            complete=released,
            resources=[ReleasedResource(kind="dist-group", id="g", released=released, proof="x")],
        ),
        gpu_uuids=[f"GPU-{rank}"],
        started_ns=100 + rank,
        finished_ns=200 + rank,
    )


def test_merge_keeps_every_rank_and_takes_the_worst_outcome() -> None:
    m = merge_ranks(
        [_result(0, "passed", None), _result(1, "failed", "counterexample", released=False)],
        cuda=True,
    )
    assert m.outcome == "failed" and m.reason == "rank 1: counterexample"
    assert m.scope["gpu_count"] == 2 and m.scope["world_size"] == 2
    assert m.measurements["ranks"] == [{"rank": 0, "peak": 10}, {"rank": 1, "peak": 11}]
    assert [r.id for r in m.cleanup.resources] == ["rank0:g", "rank1:g"]
    assert not m.cleanup.complete and m.gpu_uuids == ["GPU-0", "GPU-1"]
    assert (m.started_ns, m.finished_ns) == (100, 201)


def test_a_hanging_claim_is_killed_at_its_timeout(tmp_path: Path) -> None:
    (tmp_path / "hang.py").write_text(
        "import time\n\ndef make_workload(**p):\n    time.sleep(600)\n"
    )
    [r] = _claim(tmp_path, "hang:make_workload", "cleanup", {}, timeout_s=3)
    assert r.outcome == "failed" and r.reason is not None
    assert r.reason.startswith("timed out after 3 s")
    group = next(x for x in r.cleanup.resources if x.kind == "process-group")
    assert group.released and "ProcessLookupError" in group.proof


def test_a_killed_rank_is_named_and_every_rank_is_stopped(tmp_path: Path) -> None:
    (tmp_path / "killer.py").write_text(KILL_RANK1)
    [r] = _claim(tmp_path, "killer:make_workload", "cleanup", {}, world_size=2, timeout_s=120)
    assert r.outcome == "failed" and r.reason is not None
    assert "rank 1 of 2" in r.reason and "killed by signal 9" in r.reason
    procs = [x for x in r.cleanup.resources if x.kind == "process"]
    assert len(procs) == 2 and all(x.released for x in procs)
    assert next(x for x in r.cleanup.resources if x.kind == "process-group").released


def test_a_rank_that_raises_fails_the_claim_and_its_peer_is_stopped(
    tmp_path: Path,
) -> None:
    (tmp_path / "diverging.py").write_text(RAISE_RANK1)
    params = {"batch": 1, "seq": 8}
    [r] = _claim(
        tmp_path, "diverging:make_workload", "cleanup", params, world_size=2, timeout_s=120
    )
    assert r.outcome == "failed" and r.reason is not None, r.reason
    assert r.reason.startswith("rank 1: ") and "rank 1 diverged" in r.reason
    # Rank 0 either fails in the broken collective or is stopped; rank 1 leads the reason.
    outcomes = r.measurements["rank_outcomes"]
    assert isinstance(outcomes, list) and outcomes[1] == "failed"
    stopped = r.measurements["ranks"]
    assert isinstance(stopped, list) and len(stopped) == 2
    assert all(x.released for x in r.cleanup.resources if x.kind.startswith("process"))


def test_mesh_handoff_runs_through_the_multi_rank_harness() -> None:
    params = {"world_size": 2, "rows": 256, "cols": 64, "mode": "gather", "dtype": "float32"}
    [r] = _claim(REPO, EP, "mesh-handoff", params, world_size=2, timeout_s=120)
    assert r.outcome == "inconclusive", r.reason  # CPU: no allocator pool to measure
    assert r.scope["world_size"] == 2 and r.scope["backend"] == "gloo"
    ranks = r.measurements["ranks"]
    assert isinstance(ranks, list)
    for i, m in enumerate(ranks):
        assert isinstance(m, dict) and m["harness"] == "multi-rank"
        assert m[f"rank{i}_gather_matches"] is True
        assert m[f"rank{i}_after_destroy_outside_pool_bytes_delta"] is None
    groups = [x for x in r.cleanup.resources if x.kind == "dist-group"]
    assert [x.id for x in groups] == ["rank0:default-gloo", "rank1:default-gloo"]
    assert all(x.released for x in groups) and r.cleanup.complete


def test_a_world_size_param_that_disagrees_with_the_claim_is_inconclusive() -> None:
    # The plan's parameters disagree: nothing found about the code either way.
    params = {"world_size": 4, "rows": 256, "cols": 64}
    [r] = _claim(REPO, EP, "mesh-handoff", params, world_size=2, timeout_s=120)
    assert r.outcome == "inconclusive" and r.reason and "claim runs 2 ranks" in r.reason


def test_rank_memory_returned_at_exit_counts_and_cleanup_is_decided_per_rank() -> None:
    from runners.claim.claim_exit import merged

    def held(rank: int) -> CheckResult:
        r = _result(rank, "failed", "cleanup incomplete: communicator", released=False)
        r.check = "cleanup"
        r.cleanup = CleanupProof(
            complete=False,
            resources=[
                ReleasedResource(
                    kind="gpu-memory", id="GPU-x:outside-pool", released=False, proof="+600 MB"
                )
            ],
        )
        return r

    returned = merged(
        [[held(0)], [held(1)]],
        cuda=True,
        grouped=True,
        at_exit=(True, "pids absent; GPU-x: +0 bytes"),
        lead=None,
    )
    [r] = returned
    assert r.outcome == "passed" and r.cleanup.complete
    assert all("held by the claim process until it exited" in x.proof for x in r.cleanup.resources)
    [kept] = merged([[held(0)], [held(1)]], cuda=True, grouped=True, at_exit=None, lead=None)
    assert kept.outcome == "failed" and kept.reason and kept.reason.startswith("rank 0, 1: cleanup")
