"""Per-rank results of one claim merged into one result per check.

A multi-rank claim yields one receipt per check, at ``world_size = N``, that
keeps every rank's measurements and every rank's cleanup proof. Its outcome is
the worst rank's, with that rank named: a counterexample on one rank is a
counterexample of the claim. No torch here: the qualifying process merges.
"""

from __future__ import annotations

from collections.abc import Sequence

from runners.contract.names import Outcome
from runners.contract.result import CheckResult, CleanupProof, Json, ReleasedResource

__all__ = ["merge_ranks"]

# Worst first: evidence against the claim outranks the lack of evidence.
_ORDER: tuple[Outcome, ...] = ("failed", "infra-error", "inconclusive", "refused", "passed")


def _named(rank: int, r: ReleasedResource) -> ReleasedResource:
    prefix = f"rank{rank}:"
    ident = r.id if r.id.startswith(prefix) else prefix + r.id
    return ReleasedResource(kind=r.kind, id=ident, released=r.released, proof=r.proof)


def merge_ranks(
    per_rank: Sequence[CheckResult], *, cuda: bool, lead: int | None = None
) -> CheckResult:
    """One result for the check all of ``per_rank`` (rank ``i`` at index ``i``) ran.

    ``lead``: the rank that ended first with a failure; its reason comes first (its
    peers' failures, a collective broken by its exit, are most likely consequences)."""
    first = per_rank[0]
    world = len(per_rank)
    worst = min(per_rank, key=lambda r: _ORDER.index(r.outcome))
    outcome = worst.outcome
    by_reason: dict[str, list[str]] = {}
    order = sorted(range(world), key=lambda i: i != lead)
    for i, r in ((i, per_rank[i]) for i in order):
        if r.outcome == outcome and r.reason:
            by_reason.setdefault(r.reason, []).append(str(i))
    # Ranks that agree on why are named together.
    reasons = [f"rank {', '.join(sorted(ranks))}: {why}" for why, ranks in by_reason.items()]
    resources = [_named(i, res) for i, r in enumerate(per_rank) for res in r.cleanup.resources]
    # Each rank's clock stamps (`runners.harness.timeline`) are absolute: the claim's
    # timeline is the first rank's, placed from the parent's launch by the caller.
    from runners.harness import timeline

    stamps = first.measurements.get(timeline.MEASUREMENT)
    measurements: dict[str, Json] = {
        "world_size": world,
        "ranks": [
            {"rank": i, **{k: v for k, v in r.measurements.items() if k != timeline.MEASUREMENT}}
            for i, r in enumerate(per_rank)
        ],
        "rank_outcomes": [r.outcome for r in per_rank],
    }
    if stamps is not None:
        measurements[timeline.MEASUREMENT] = stamps
    scope: dict[str, str | int] = {**first.scope, "world_size": world}
    if cuda:
        # One GPU per rank: the receipt is about N GPUs, whatever else the host has.
        scope["gpu_count"] = world
    uuids: list[str] = []
    for r in per_rank:
        uuids.extend(u for u in r.gpu_uuids if u not in uuids)
    return CheckResult(
        claim=first.claim,
        check=first.check,
        check_version=first.check_version,
        params=dict(first.params),
        scope=scope,
        outcome=outcome,
        reason=None if outcome == "passed" else "; ".join(reasons) or f"{outcome} on a rank",
        measurements=measurements,
        observer=first.observer,
        cleanup=CleanupProof(
            complete=all(r.cleanup.complete for r in per_rank),
            resources=resources,
            tolerance_bytes=max(r.cleanup.tolerance_bytes for r in per_rank),
        ),
        artifacts=[a for r in per_rank for a in r.artifacts],
        gpu_uuids=uuids if cuda else [],
        host=first.host,
        started_ns=min(r.started_ns for r in per_rank),
        finished_ns=max(r.finished_ns for r in per_rank),
    )
