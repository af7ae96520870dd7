"""A claim is stated once and stamped once.

One value (`runners.contract.request.Claim`; the ledger's `ClaimRun` is one) describes a
claim from the plan to the claim's processes and back: the request carries it whole,
never a copy of its fields, so a field added to it arrives. The host's facts are
stamped on the results once, in one place (`runners.claim.authors.stamped`), into a
frozen `Stamped` value: stamping it again, or changing it, raises. The request file a
rank reads (and the fork server reads for its artifact folder) keeps its shape:
`runners.api.run_claim`'s arguments.
"""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path
from typing import Any

import pytest

from ledger.execution.claimrun import ClaimRun
from ledger.fleet.evidence import health_evidence
from runners.claim.authors import HOST_FACETS, REPORTED_FACTS, HostFacts, Observed, stamped
from runners.contract.request import Claim, ClaimRequest
from runners.contract.result import CheckResult, CleanupProof, Stamped


def _run() -> ClaimRun:
    """A claim whose every field differs from its default."""
    return ClaimRun(
        index=3,
        claim="admission.no-oom",
        check="admission",
        device="cuda",
        workload_ref="model.workload:make_workload",
        params={"batches": [1, 2]},
        workload_params={"hidden": 64},
        observer_off=True,
        world_size=2,
        timeout_s=90,
        network=True,
        profile="smoke",
        needs_base=True,
        sources={"plan_source": "base"},
    )


def _request(run: ClaimRun, tmp_path: Path) -> ClaimRequest:
    return run.request(
        tmp_path / "head",
        tmp_path / "base",
        tmp_path / "artifacts",
        work_root=tmp_path,
        env={"CUDA_VISIBLE_DEVICES": "0,1"},
        gpu_uuids=["GPU-1", "GPU-2"],
    )


def test_the_request_carries_the_plans_claim_whole(tmp_path: Path) -> None:
    run = _run()
    req = _request(run, tmp_path)
    # The value itself, never a copy of its fields.
    assert req.run is run
    defaults = Claim(claim="", check="", device="", workload_ref="")
    for f in dataclasses.fields(Claim):
        # Each field set otherwise than its default, so a field left behind shows.
        assert getattr(run, f.name) != getattr(defaults, f.name), f.name
        assert getattr(req.run, f.name) == getattr(run, f.name), f.name


def test_a_field_added_to_the_claim_arrives_without_a_copy(tmp_path: Path) -> None:
    wider = dataclasses.make_dataclass(
        "Wider",
        [("budget_bytes", int, dataclasses.field(default=0))],
        bases=(ClaimRun,),
        frozen=True,
        slots=True,
        kw_only=True,
    )
    run = wider(**{**_run().to_json(), "budget_bytes": 7 << 30})
    req = _request(run, tmp_path)
    assert req.run.budget_bytes == 7 << 30  # type: ignore[attr-defined]
    # A claim round-trips through JSON (a Ray task's payload) with every field.
    assert wider.from_json(run.to_json()) == run  # type: ignore[attr-defined]


def test_the_rank_request_keeps_its_shape(tmp_path: Path) -> None:
    """No request file crosses versions (the parent writes it, a process of the same
    installation reads it at once); its shape is still held: `run_claim`'s arguments,
    and the artifact folder the fork server reads from it."""
    from runners.api import run_claim

    body = _request(_run(), tmp_path).body()
    assert body == {
        "device": "cuda",
        "claim": "admission.no-oom",
        "check": "admission",
        "params": {"batches": [1, 2]},
        "repo_root": str(tmp_path / "head"),
        "workload_ref": "model.workload:make_workload",
        "workload_params": {"hidden": 64},
        "observer_off_required": True,
        "base_root": str(tmp_path / "base"),
        "artifact_dir": str(tmp_path / "artifacts"),
    }
    arguments = set(inspect.signature(run_claim).parameters) - {"progress"}
    assert set(body) == arguments


SEEN = Observed(
    host="gpu-host",
    gpu_uuids=("GPU-1", "GPU-2"),
    scope={k: ("8x" if k != "gpu_count" else 2) for k in HOST_FACETS},
)


def _draft(**over: Any) -> CheckResult:
    fields: dict[str, Any] = {
        "claim": "admission.no-oom",
        "check": "admission",
        "check_version": "7",
        "params": {"batches": [1, 2]},
        "scope": {"gpu_model": "H200 (said the claim)", "dtype": "bf16", "world_size": 1},
        "outcome": "passed",
        "reason": None,
        "measurements": {"peak_bytes": 1 << 30},
        "observer": "off",
        "cleanup": CleanupProof(complete=True),
        "host": "elsewhere",
        "started_ns": 10,
        "finished_ns": 20,
    }
    return CheckResult(**{**fields, **over})


def _host(**over: Any) -> HostFacts:
    return HostFacts(
        **{
            "seen": SEEN,
            "sandbox": "bwrap",
            "network": False,
            "profile": "smoke",
            "world_size": 2,
            "window": (5, 25),
            **over,
        }
    )


def test_the_host_stamps_every_fact_once_in_the_receipts_order() -> None:
    [s] = stamped([_draft()], _host())
    # The host's readings, the plan's facets, the runner's: the order receipts list them.
    assert list(s.scope.items()) == [
        *SEEN.scope.items(),
        ("dtype", "bf16"),
        ("world_size", 2),
        ("sandbox", "bwrap"),
        ("network", "off"),
        ("profile", "smoke"),
    ]
    assert s.host == "gpu-host" and s.gpu_uuids == ("GPU-1", "GPU-2")
    assert s.measurements[REPORTED_FACTS] == {
        "gpu_model": "H200 (said the claim)",
        "host": "elsewhere",
    }
    assert (s.started_ns, s.finished_ns) == (10, 20)


def test_a_stamped_result_is_never_changed() -> None:
    [s] = stamped([_draft()], _host())
    assert isinstance(s, Stamped)
    with pytest.raises(TypeError, match="stamped already"):
        stamped([s], _host(sandbox="none"))  # type: ignore[list-item]
    with pytest.raises(TypeError):
        s.scope["sandbox"] = "none"  # type: ignore[index]
    with pytest.raises(TypeError):
        s.scope.update(network="on")  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        s.measurements["peak_bytes"] = 0  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.outcome = "failed"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.scope = {}  # type: ignore[misc]
    with pytest.raises(AttributeError):
        s.artifacts.append(None)  # type: ignore[attr-defined]
    # No second place stamps the runner's facets on a claim's run.
    assert not hasattr(ClaimRun, "stamp")


def test_the_claims_word_on_an_infra_error_is_a_failure_the_hosts_own_is_not() -> None:
    said = _draft(outcome="infra-error", reason="the GPU fell off the bus")
    [claims] = stamped([said], _host())
    assert claims.outcome == "failed" and "the GPU fell off the bus" in (claims.reason or "")
    [hosts] = stamped([said], _host(claims_word=False, window=None))
    assert hosts.outcome == "infra-error" and hosts.reason == "the GPU fell off the bus"
    # The draft itself is untouched: stamping makes a new value.
    assert said.outcome == "infra-error" and said.host == "elsewhere"


def test_a_gpu_fault_judges_a_stamped_result_as_a_new_value(tmp_path: Path) -> None:
    [s] = stamped([_draft(outcome="failed", reason="peak 9 GiB > 8 GiB")], _host())
    health = {"devices": [{"uuid": "GPU-1", "after": {"remapped_rows_failed": "yes"}}]}
    [judged], env = health_evidence([s], health, tmp_path, "3")
    assert judged.outcome == "infra-error" and "peak 9 GiB" in (judged.reason or "")
    assert [a.name for a in judged.artifacts] == ["gpu-health.json"]
    assert "gpu_health" in env
    assert s.outcome == "failed" and s.artifacts == ()
