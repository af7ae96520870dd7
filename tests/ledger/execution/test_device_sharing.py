"""Claims that judge no memory share a device (`ledger.execution.sharing`): which may,
how the pool hands a device to several of them and never to a memory claim beside
them, what the receipts say, the exit proof a shared run gives, and a shared run that
did not pass judged again alone before anything is recorded. On this CPU host the
devices are logical slots and `LEDGER_SHARE_DEVICE` turns sharing on."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ledger.evidence.errors import UsageError
from ledger.execution import sharing
from ledger.execution.devices import Device, DevicePool
from ledger.sandbox import find_bwrap, resolve
from runners.api import check_names
from runners.claim import claim_exit
from runners.contract.names import DEVICE_SHARED_VAR
from runners.contract.result import CheckResult, CleanupProof, ReleasedResource
from runners.harness import nvml
from runners.harness.probe import CudaProbe, MemorySample
from runners.harness.proofs import memory_proofs
from tests.ledger.helpers import run
from tests.ledger.probe_repo import make_probe_repo


def test_which_checks_share_and_how_many_at_once() -> None:
    assert set(check_names()) >= sharing.SHAREABLE
    assert sharing.CHILD_VAR == DEVICE_SHARED_VAR
    assert sharing.shares("regression-24view", {})
    assert sharing.shares("gradient-compare", {"batch": 1})
    assert sharing.shares("observer-off-control", {})  # of a regression by default
    assert sharing.shares("observer-off-control", {"check": "gradient-compare"})
    for memory in ("admission", "cleanup", "full-prefix-backward", "mesh-handoff", "new-check"):
        assert not sharing.shares(memory, {})
    assert not sharing.shares("observer-off-control", {"check": "admission"})
    assert sharing.limit(True, {}) == sharing.DEFAULT_ON_GPU
    assert sharing.limit(False, {}) == 1
    assert sharing.limit(False, {sharing.VAR: "3"}) == 3
    assert sharing.limit(True, {sharing.VAR: "1"}) == 1
    for bad in ("0", "-2", "two", "1.5"):
        with pytest.raises(UsageError, match=sharing.VAR):
            sharing.limit(True, {sharing.VAR: bad})


def test_the_pool_shares_a_device_only_among_claims_that_may() -> None:
    pool = DevicePool([Device("0", "GPU-a"), Device("1", "GPU-b")], share=2)
    a = pool.take(1, shared=True)
    b = pool.take(1, shared=True)
    assert a and b and a[0].index == "0" and b[0].index == "1"  # a free device first
    c = pool.take(1, shared=True)
    assert c and c[0].index == "0"  # then the least shared one with room
    d = pool.take(1, shared=True)
    assert d and d[0].index == "1"
    assert pool.take(1, shared=True) is None  # two on each
    assert pool.take(1) is None  # a memory claim waits for an idle device
    pool.give_back(a)
    assert pool.take(1) is None  # still one claim on device 0
    pool.give_back(c)
    e = pool.take(1)
    assert e and e[0].index == "0"
    assert pool.take(1, shared=True) is None  # never beside a memory claim
    alone = DevicePool([Device("0")])  # share 1: every claim has its device alone
    assert alone.take(1, shared=True) and alone.take(1, shared=True) is None


def _result(outcome: str, complete: bool = True) -> CheckResult:
    proof = CleanupProof(
        complete=complete,
        resources=[ReleasedResource(kind="k", id="i", released=complete, proof="p")],
    )
    return CheckResult(
        claim="c", check="regression-24view", check_version="3", outcome=outcome,  # type: ignore[arg-type]
        reason=None, params={}, scope={}, measurements={}, cleanup=proof, observer="off",
        started_ns=1, finished_ns=2,
    )  # fmt: skip


def test_a_shared_run_is_kept_only_when_it_passed_with_its_proof_complete() -> None:
    assert sharing.rerun_why([_result("passed"), _result("passed")]) is None
    assert sharing.rerun_why([_result("passed"), _result("failed")]) == (
        "failed on a shared device"
    )
    assert sharing.rerun_why([_result("passed", complete=False)]) == (
        "cleanup not proven on a shared device"
    )
    assert "inconclusive" in (sharing.rerun_why([_result("inconclusive")]) or "")


def test_a_shared_exit_proof_reads_the_claims_processes_not_the_device(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = ({"GPU-a": 1 << 30}, {11, 12})
    # Another claim on the device holds 10 GiB more after this one exited.
    monkeypatch.setattr(nvml, "devices_used", lambda: ({"GPU-a": 11 << 30}, {12}))
    alone = claim_exit.exit_release(before, [11], ["GPU-a"])
    shared = claim_exit.exit_release(before, [11], ["GPU-a"], shared=True)
    unseen = claim_exit.exit_release(before, [11], ["GPU-a"], shared=True, shown=False)
    still = claim_exit.exit_release(before, [12], ["GPU-a"], shared=True)
    assert alone is not None and not alone[0]  # alone, the device's growth is the claim's
    assert shared is not None and shared[0] and "not judged" in shared[1]
    assert unseen is not None and not unseen[0] and "proves nothing" in unseen[1]
    assert still is not None and not still[0] and "pid 12 still in" in still[1]


def _sample(outside: int) -> MemorySample:
    return MemorySample(
        device_kind="cuda", time_ns=0, allocated_bytes=0, reserved_bytes=0, free_bytes=0,
        total_bytes=0, available_bytes=0, outside_pool_bytes=outside, process_used_bytes=None,
        process_outside_pool_bytes=None, num_ooms=0,
    )  # fmt: skip


def test_a_shared_claims_cleanup_proof_leaves_the_devices_memory_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    probe = object.__new__(CudaProbe)  # no CUDA here: only its class and uuid are read
    probe.uuid = "GPU-a"
    grown = (_sample(0), _sample(8 << 30))  # a neighbour took 8 GiB outside any pool
    kinds = [r.id for r in memory_proofs(probe, *grown, tolerance_bytes=1 << 20)]
    assert "GPU-a:outside-pool" in kinds
    monkeypatch.setenv(DEVICE_SHARED_VAR, "1")
    shared = memory_proofs(probe, *grown, tolerance_bytes=1 << 20)
    assert [r.id for r in shared] == ["GPU-a:allocated"] and all(r.released for r in shared)


def _claim(name: str, check: str, mode: str = "plain", params: str = "") -> str:
    given = {
        "regression-24view": "{ views = 2, seq = 8 }",
        "observer-off-control": "{ params = { views = 2, seq = 8 } }",
        "cleanup": "{ batch = 1, seq = 8 }",
    }[check]
    return (
        f'[[claims]]\nname = "{name}"\ncheck = "{check}"\nparams = {params or given}\n'
        f'workload_params = {{ mode = "{mode}" }}\n'
    )


@pytest.fixture
def sharing_env(ledger_env: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A ledger, and up to 3 claims on one logical device."""
    monkeypatch.setenv(sharing.VAR, "3")
    return ledger_env


def _environments(capsys: pytest.CaptureFixture[str], out: str) -> dict[str, dict[str, str]]:
    envs = {}
    for x in json.loads(out)["receipts"]:
        shown = json.loads(run(capsys, "show", x["id"], "--json").out)
        envs[x["claim"]] = shown["statement"]["predicate"]["runner"]["environment"]
    return envs


def _line(lines: list[str], claim: str, what: str) -> int:
    return next(i for i, x in enumerate(lines) if f"] {claim} " in x and what in x)


def test_claims_that_judge_no_memory_share_one_device_and_memory_claims_keep_it_alone(
    tmp_path: Path, sharing_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = (
        _claim("a.cleanup", "cleanup")
        + _claim("b.regression", "regression-24view")
        + _claim("c.regression", "regression-24view")
        + _claim("d.cleanup", "cleanup")
    )
    repo = make_probe_repo(tmp_path / "repo", plan)
    r = run(capsys, "qualify", "--rev", "HEAD", "--repo", str(repo), "--gpus", "0", "--json")
    assert r.code == 0, r.err
    lines = r.err.splitlines()
    assert any(
        "may share a device, up to 3 at once: b.regression, c.regression" in x for x in lines
    )
    started = {c: _line(lines, c, "...") for c in ("a.cleanup", "b.regression", "c.regression")}
    started["d.cleanup"] = _line(lines, "d.cleanup", "...")
    done = {c: _line(lines, c, "-> sha256:") for c in started}
    # The two that share started together, after the memory claim before them ended ...
    assert done["a.cleanup"] < started["b.regression"] < started["c.regression"]
    assert "(sharing the device)" in lines[started["c.regression"]]
    assert started["c.regression"] < min(done["b.regression"], done["c.regression"])
    # ... and the memory claim after them waited until both had ended.
    assert max(done["b.regression"], done["c.regression"]) < started["d.cleanup"]
    envs = _environments(capsys, r.out)
    assert envs["b.regression"]["device_shared_with"] == "c.regression"
    assert envs["c.regression"]["device_shared_with"] == "b.regression"
    for alone in ("a.cleanup", "d.cleanup"):
        assert "device_shared_with" not in envs[alone]


def test_a_shared_run_that_fails_is_judged_again_alone_and_recorded_once(
    tmp_path: Path, sharing_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = _claim("a.fails", "regression-24view", mode="oom") + _claim(
        "b.passes", "regression-24view"
    )
    repo = make_probe_repo(tmp_path / "repo", plan)
    r = run(capsys, "qualify", "--rev", "HEAD", "--repo", str(repo), "--gpus", "0", "--json")
    assert r.code == 1, r.err
    lines = r.err.splitlines()
    again = [x for x in lines if "running it again alone" in x]
    assert len(again) == 1 and "a.fails: failed on a shared device (b.passes)" in again[0]
    receipts = json.loads(r.out)["receipts"]
    assert sorted((x["claim"], x["outcome"]) for x in receipts) == [
        ("a.fails", "failed"),
        ("b.passes", "passed"),
    ]
    # Alone the second time: after the first run and b.passes had both ended.
    rerun = [i for i, x in enumerate(lines) if "] a.fails (" in x and x.endswith("...")][-1]
    assert _line(lines, "b.passes", "-> sha256:") < rerun
    envs = _environments(capsys, r.out)
    assert envs["a.fails"]["device_alone_after"] == "failed on a shared device (b.passes)"
    assert "device_shared_with" not in envs["a.fails"]
    assert envs["b.passes"]["device_shared_with"] == "a.fails"


@pytest.mark.skipif(find_bwrap() is None and os.environ.get("CI") != "true", reason="no bwrap")
def test_a_claim_started_afresh_in_the_sandbox_knows_its_device_is_shared(tmp_path: Path) -> None:
    # The sandbox passes no LEDGER_* variable of its own accord: this one is handed in.
    from runners.claim.claim_launch import _launches
    from runners.claim.isolated import ClaimRequest
    from runners.contract.request import Claim

    box = resolve("bwrap")
    (tmp_path / "w").mkdir()
    for extra, want in (({DEVICE_SHARED_VAR: "1"}, "1"), ({}, None)):
        work = tmp_path / "w" / str(bool(extra))
        work.mkdir()
        request = ClaimRequest(
            Claim(claim="c", check="cleanup", device="cpu", workload_ref=""),
            repo_root=work,
            env=extra,
        )
        _, envs = _launches([["python3", "-c", "pass"]], request, sandbox=box, work=work)
        assert envs[0].get(DEVICE_SHARED_VAR) == want
