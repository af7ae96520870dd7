"""Cleanup proofs: memory back to its baseline, proofs merged, what was left named.

`memory_proofs` compares two memory samples within a tolerance: on CUDA the
allocator's allocated bytes, memory outside the pool and NVML's per-process
use; on CPU the tracked live storage bytes.
"""

from __future__ import annotations

import os

from runners.contract.names import DEVICE_SHARED_VAR
from runners.contract.result import CleanupProof, ReleasedResource
from runners.harness.probe import CudaProbe, MemoryProbe, MemorySample

MiB = 1024**2
CUDA_TOLERANCE_BYTES = 64 * MiB
"""Allowed growth of CUDA memory across a check: kernels loaded lazily on first use
add to the context (outside the pool) and stay there for the process."""


def memory_proofs(
    probe: MemoryProbe, before: MemorySample, after: MemorySample, *, tolerance_bytes: int
) -> list[ReleasedResource]:
    """One proof per memory figure the probe can see, ``after`` vs ``before``."""
    out: list[ReleasedResource] = []

    def compare(kind: str, ident: str, what: str, b: int | None, a: int | None) -> None:
        if b is None or a is None:
            return
        delta = a - b
        ok = delta <= tolerance_bytes
        out.append(
            ReleasedResource(
                kind=kind,
                id=ident,
                released=ok,
                proof=(
                    f"{what}: {a} bytes after vs {b} at baseline, delta {delta} "
                    f"{'<=' if ok else '>'} tolerance {tolerance_bytes}"
                ),
            )
        )

    if isinstance(probe, CudaProbe):
        u = probe.uuid
        # On a device shared with other claims its used memory moves with theirs: only
        # this process's own figures prove anything of it.
        shared = os.environ.get(DEVICE_SHARED_VAR) == "1"
        figures = (
            ("allocated", "allocator allocated bytes", "allocated_bytes"),
            *(
                ()
                if shared
                else (("outside-pool", "device used - reserved", "outside_pool_bytes"),)
            ),
            ("nvml-process-used", "NVML per-process used", "process_used_bytes"),
            (
                "nvml-process-outside-pool",
                "NVML per-process used - reserved",
                "process_outside_pool_bytes",
            ),
        )
        for suffix, what, attr in figures:
            compare(
                "gpu-memory", f"{u}:{suffix}", what, getattr(before, attr), getattr(after, attr)
            )
    else:
        compare(
            "host-memory",
            "cpu:tracked-storage",
            "tracked live tensor storage (less pre-existing storages first seen)",
            before.allocated_bytes,
            after.allocated_bytes,
        )
    return out


def merge_proofs(*proofs: CleanupProof) -> CleanupProof:
    """One proof covering several registries (complete only if all are)."""
    return CleanupProof(
        complete=all(p.complete for p in proofs),
        resources=[r for p in proofs for r in p.resources],
        tolerance_bytes=max((p.tolerance_bytes for p in proofs), default=0),
    )


def describe_incomplete(proof: CleanupProof) -> str:
    """One sentence naming each resource that was leaked or not proven released."""
    bad = [r for r in proof.resources if not r.released]
    return "; ".join(f"{r.kind} {r.id}: {r.proof}" for r in bad)
