"""What a check hands back to the ledger: plain data, no torch.

The ledger turns each `CheckResult` into one signed receipt (qualification
predicate v1). Bytes and nanoseconds are exact integers; ratios (rel-L2,
cosine, measured/predicted) may be floats.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from runners.names import Observer, Outcome

__all__ = [
    "Artifact",
    "CheckResult",
    "CleanupProof",
    "Json",
    "Observer",
    "Outcome",
    "ReleasedResource",
    "infra_error",
    "result_from_dict",
]

Scalar = int | float | str | bool | None
Json = Scalar | list["Json"] | dict[str, "Json"]


@dataclass(kw_only=True, slots=True, frozen=True)
class ReleasedResource:
    """One owned resource and how its release was observed."""

    kind: str
    """process | process-group | dist-group | tempdir | gpu-memory | ballast | ..."""
    id: str
    """pid, path, group name, device uuid: whatever names it uniquely."""
    released: bool
    """True when the observation below showed it gone / back to baseline."""
    proof: str
    """The observation, in one sentence (e.g. 'os.kill(pid, 0) raised ProcessLookupError')."""


@dataclass(kw_only=True, slots=True, frozen=True)
class CleanupProof:
    complete: bool
    resources: list[ReleasedResource] = field(default_factory=list)
    tolerance_bytes: int = 0
    """Allowed drift of outside-pool / NVML per-process memory versus baseline."""


@dataclass(kw_only=True, slots=True, frozen=True)
class Artifact:
    name: str
    path: str
    """Local file path; the ledger hashes and stores it content-addressed."""
    media_type: str = "application/octet-stream"


@dataclass(kw_only=True, slots=True)
class CheckResult:
    claim: str
    """Claim name from the plan, e.g. 'admission.no-oom-after-admit'."""
    check: str
    """Check name, e.g. 'admission', 'regression-24view', 'observer-off-control'."""
    check_version: str
    params: dict[str, Json]
    scope: dict[str, str | int]
    """Flat facets: device_kind, gpu_model, gpu_count, gpu_memory_bytes, driver, cuda, torch,
    nccl, dtype, workload, workload_digest, ..."""
    outcome: Outcome
    reason: str | None
    """Required for anything but 'passed'."""
    measurements: dict[str, Json]
    observer: Observer
    cleanup: CleanupProof
    artifacts: list[Artifact] = field(default_factory=list)
    gpu_uuids: list[str] = field(default_factory=list)
    host: str = ""
    started_ns: int = 0
    """UTC wall clock, ns since the epoch."""
    finished_ns: int = 0


def infra_error(
    *,
    claim: str,
    check: str,
    version: str,
    params: Mapping[str, Json],
    reason: str,
    scope: Mapping[str, str | int],
    observer: Observer = "off",
    cleanup: CleanupProof | None = None,
    gpu_uuids: tuple[str, ...] | list[str] = (),
    host: str = "",
    started_ns: int,
    finished_ns: int,
) -> CheckResult:
    """A result for a check that could not produce evidence either way.

    ``cleanup`` None: nothing was acquired, so nothing is left to prove released.
    """
    return CheckResult(
        claim=claim,
        check=check,
        check_version=version,
        params=dict(params),
        scope=dict(scope),
        outcome="infra-error",
        reason=reason,
        measurements={},
        observer=observer,
        cleanup=CleanupProof(complete=True, resources=[]) if cleanup is None else cleanup,
        gpu_uuids=list(gpu_uuids),
        host=host,
        started_ns=started_ns,
        finished_ns=finished_ns,
    )


def result_from_dict(d: Mapping[str, Any]) -> CheckResult:
    """The inverse of `dataclasses.asdict` on a `CheckResult` (after a JSON round trip)."""
    c = d["cleanup"]
    return CheckResult(
        **{
            **d,
            "cleanup": CleanupProof(
                complete=c["complete"],
                resources=[ReleasedResource(**r) for r in c["resources"]],
                tolerance_bytes=c["tolerance_bytes"],
            ),
            "artifacts": [Artifact(**a) for a in d["artifacts"]],
        }
    )
