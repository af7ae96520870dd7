"""Harness on CPU: tracker, probe windows, failure capture, observer, fingerprint,
determinism and the resource registry's proofs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from runners.harness import (
    CpuProbe,
    ObserverSession,
    ResourceRegistry,
    apply_determinism,
    capture,
    cold_warm,
    fingerprint,
    measure_step,
)
from runners.harness.fingerprint import packages_digest
from runners.harness.processes import descendants
from runners.harness.proofs import describe_incomplete, merge_proofs
from runners.harness.tracker import LiveStorageTracker


def test_tracker_counts_each_storage_once_and_uncounts_on_free() -> None:
    t = LiveStorageTracker()
    with t:
        a = torch.zeros(256)  # 1024 bytes
        v = a.view(16, 16)  # same storage
        b = a + 1  # 1024 more
        assert t.live_bytes == 2048
        del a
        assert t.live_bytes == 2048  # the view keeps the storage alive
        del v
        assert t.live_bytes == 1024
        del b
        assert t.live_bytes == 0
        assert t.peak_bytes == 2048
    t.close()


def test_window_increment_counts_pre_existing_inputs_at_the_reset_level() -> None:
    probe = CpuProbe(budget_bytes=1 << 20)
    pre = torch.ones(500)  # 2000 bytes, created before the tracker looked
    with probe.session():
        with probe.window() as w:
            tmp = torch.ones(500)  # +2000
            out = tmp + pre  # +2000, and `pre` seen for the first time
            del tmp
        r = w.increment
        # Level at reset includes `pre`; the peak held tmp, out and pre.
        assert r.allocated_at_reset_bytes == 2000
        assert r.peak_allocated_bytes == 6000
        assert r.increment_bytes == 4000
        assert r.allocated_after_bytes == 4000
        del out
    probe.close()


def test_budget_simulates_free_memory() -> None:
    probe = CpuProbe(budget_bytes=10_000)
    with probe.session():
        x = torch.empty(1000, dtype=torch.uint8)
        s = probe.sample()
        assert (s.allocated_bytes, s.free_bytes, s.total_bytes) == (1000, 9000, 10_000)
        assert s.outside_pool_bytes is None
        del x
    assert probe.budget_source == "simulated-budget"


def test_capture_turns_failures_into_outcomes() -> None:
    def oom() -> None:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 3.25 GiB")

    def boom() -> None:
        raise ValueError("bad shape")

    def missing() -> None:
        raise ModuleNotFoundError("no module named flash_attn")

    assert capture("x", lambda: 3).value == 3
    o = capture("fwd", oom).outcome
    assert (o.status, o.error_type) == ("oom", "OutOfMemoryError")
    assert "Tried to allocate" in (o.message or "")
    f = capture("fwd", boom).outcome
    assert f.status == "failed" and "ValueError: bad shape" in f.sentence()
    assert capture("imp", missing).outcome.status == "infra-error"

    def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        capture("x", interrupted)


def test_measure_step_keeps_outputs_in_the_window_and_cold_warm_repeats() -> None:
    probe = CpuProbe()
    with probe.session():
        rec = measure_step(probe, "alloc", lambda: torch.zeros(1024))
        assert rec.ok and rec.increment_bytes == 4096
        assert rec.peak.allocated_after_bytes == rec.peak.allocated_at_reset_bytes + 4096
        cw = cold_warm(probe, "alloc", lambda: torch.zeros(1024), warm_runs=2)
        assert [r.increment_bytes for r in cw.records] == [4096, 4096, 4096]
        bad = cold_warm(probe, "raise", lambda: 1 / 0, warm_runs=2)
        assert not bad.ok and bad.warm == () and bad.cold.outcome.status == "failed"
        assert "cold_increment_bytes" in cw.measurements("")
    probe.close()


def test_observer_on_writes_cpu_artifact_and_off_writes_nothing(tmp_path: Path) -> None:
    probe = CpuProbe()
    x = torch.randn(8, 8, requires_grad=True)
    with probe.session():
        with ObserverSession(enabled=True, probe=probe, artifact_dir=tmp_path / "on") as obs:
            (x @ x).relu().sum().backward()
        with ObserverSession(enabled=False, probe=probe, artifact_dir=tmp_path / "off") as off:
            (x @ x).relu().sum().backward()
    assert obs.state == "on" and off.state == "off"
    assert len(obs.artifacts) == 1 and not off.artifacts
    assert not (tmp_path / "off").exists()
    doc = json.loads(Path(obs.artifacts[0].path).read_text())
    assert doc["format"] == "ledger.cpu-storage-events.v1"
    assert doc["saved_tensors"]["saved_tensors"] > 0
    assert any(e["kind"] == "alloc" for e in doc["events"])
    assert obs.summary["observer_saved_bytes"] == doc["saved_tensors"]["saved_bytes"]
    probe.close()


def test_fingerprint_cpu_facets() -> None:
    fp = fingerprint(torch.device("cpu"))
    scope = fp.scope()
    assert scope["device_kind"] == "cpu" and scope["gpu_count"] == 0
    assert scope["torch"] == torch.__version__
    assert scope["python"].count(".") == 2  # type: ignore[union-attr]
    assert scope["packages_digest"] == packages_digest() and len(fp.packages_digest) == 64
    assert fp.gpu_uuids == ()


def test_determinism_is_applied_and_recorded() -> None:
    before = torch.are_deterministic_algorithms_enabled()
    try:
        applied = apply_determinism(seed=7, warn_only=True)
        assert applied["deterministic_algorithms"] is True
        assert applied["cudnn_benchmark"] is False
        assert applied["CUBLAS_WORKSPACE_CONFIG"] == os.environ["CUBLAS_WORKSPACE_CONFIG"]
        assert torch.initial_seed() == 7
    finally:
        torch.use_deterministic_algorithms(before)


def test_registry_releases_and_proves_owned_resources() -> None:
    real_tmp = tempfile.gettempdir()
    with ResourceRegistry() as reg:
        assert tempfile.gettempdir() == str(reg.temp_root) != real_tmp
        p = reg.spawn(["sleep", "30"])
        d = reg.make_tempdir("owned-")
        (d / "f").write_text("x")
        ballast = reg.own_tensor("ballast", torch.empty(4096, dtype=torch.uint8))
        assert ballast.payload.numel() == 4096
    proof = reg.proof
    assert proof is not None and proof.complete, describe_incomplete(proof)
    kinds = {(r.kind, r.id) for r in proof.resources}
    assert ("process", str(p.pid)) in kinds and ("process-group", str(p.pid)) in kinds
    assert ("tempdir", str(d)) in kinds and not d.exists()
    by_kind = {r.kind: r for r in proof.resources}
    assert "ProcessLookupError" in by_kind["process"].proof
    assert "weakref" in by_kind["ballast"].proof
    assert tempfile.gettempdir() == real_tmp


def test_registry_names_unregistered_children_and_temp_entries() -> None:
    with ResourceRegistry() as reg:
        leaked = subprocess.Popen(["sleep", "30"])
        path = tempfile.mkdtemp(prefix="leak-")
    proof = reg.proof
    assert proof is not None and not proof.complete
    leaks = {(r.kind, r.id): r for r in proof.resources if not r.released}
    assert ("process", str(leaked.pid)) in leaks
    assert "LEAK" in leaks[("process", str(leaked.pid))].proof
    assert ("tempdir", path) in leaks
    # The registry stopped and reaped the leaked child all the same.
    assert leaked.pid not in descendants(os.getpid())


def test_registry_detects_a_tensor_kept_alive_elsewhere() -> None:
    probe = CpuProbe()
    with probe.session(), ResourceRegistry(probe=probe) as reg:
        owned = reg.own_tensor("gpu-allocation", torch.zeros(100))
        kept = owned.payload
    assert reg.proof is not None and not reg.proof.complete
    bad = [r for r in reg.proof.resources if not r.released]
    assert {r.kind for r in bad} == {"gpu-allocation", "host-memory"}
    del kept
    probe.close()


def test_registry_releases_on_keyboard_interrupt() -> None:
    real_tmp = tempfile.gettempdir()
    reg = ResourceRegistry()
    with pytest.raises(KeyboardInterrupt), reg:
        p = reg.spawn(["sleep", "30"])
        raise KeyboardInterrupt
    assert reg.proof is not None and reg.proof.complete
    assert p.returncode is not None
    assert tempfile.gettempdir() == real_tmp


def test_registry_destroys_a_dist_group(tmp_path: Path) -> None:
    import torch.distributed as dist

    with ResourceRegistry() as reg:
        dist.init_process_group(
            "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
        )
        reg.own_dist_group()
    assert not dist.is_initialized()
    assert reg.proof is not None and reg.proof.complete
    (r,) = [r for r in reg.proof.resources if r.kind == "dist-group"]
    assert "is_initialized() is False" in r.proof


def test_merge_proofs() -> None:
    with ResourceRegistry() as a:
        pass
    with ResourceRegistry() as b:
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    assert a.proof is not None and b.proof is not None
    merged = merge_proofs(a.proof, b.proof)
    assert not merged.complete
    assert len(merged.resources) == len(a.proof.resources) + len(b.proof.resources)


def test_a_cuda_library_allocation_failure_is_an_oom() -> None:
    """What an H200 raised at the admission edge: memory outside the allocator ran out."""
    from runners.harness.oom import capture

    def fails() -> None:
        raise RuntimeError(
            "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"
        )

    def other() -> None:
        raise RuntimeError("shape mismatch")

    assert capture("forward", fails).outcome.status == "oom"
    assert capture("forward", other).outcome.status == "failed"


def test_flat_stats_reads_the_nested_allocator_counters() -> None:
    from runners.harness.probe import flat_stats

    nested = {
        "allocated_bytes": {"all": {"current": 10, "peak": 20, "allocated": 99, "freed": 89}},
        "reserved_bytes": {"all": {"current": 32, "peak": 64}, "large_pool": {"current": 1}},
        "active_bytes": {"all": {"current": 11, "peak": 21}},
        "num_ooms": 1,
    }
    got = flat_stats(nested)
    assert got["allocated_bytes.all.current"] == 10 and got["allocated_bytes.all.peak"] == 20
    assert got["reserved_bytes.all.peak"] == 64 and got["num_ooms"] == 1
    assert got["inactive_split_bytes.all.current"] == 0 and got["num_alloc_retries"] == 0
