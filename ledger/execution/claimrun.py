"""One claim's run as data: what any executor needs to run it, and what comes back."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runners.contract.request import Claim

if TYPE_CHECKING:
    from runners.contract.request import ClaimRequest
    from runners.contract.result import Stamped

__all__ = ["ClaimRun", "Finished", "ReceiptRow"]

ReceiptRow = tuple[str, str, str]
"""(receipt id, claim, outcome)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimRun(Claim):
    """A plan claim, sized by the profile, ready to run anywhere (JSON round-trips): the
    claim itself (`runners.contract.request.Claim`, every field of which reaches the claim's
    processes whole, `request`) and its place in this run."""

    index: int
    """1-based position in the run (for progress lines)."""
    needs_base: bool = False
    sources: dict[str, str] = field(default_factory=dict)
    """Where its definition came from, as each receipt's `runner.environment` names it:
    the governing plan (claims, checks, parameters) and the head's plan (the workload),
    and how the head's workload definition differs from the base's."""

    @property
    def gpus(self) -> int:
        """GPUs the claim needs to itself (one per rank)."""
        return self.world_size

    def request(
        self,
        repo_root: Path,
        base_root: Path | None,
        artifact_dir: Path,
        *,
        work_root: Path | None,
        env: Mapping[str, str],
        gpu_uuids: Sequence[str] | None,
        shared: bool = False,
    ) -> ClaimRequest:
        """What `runners.claim.isolated.run_claim_isolated` runs for this claim (this value
        itself, never a copy of its fields) on the checkout at ``repo_root`` (its base's
        at ``base_root``), its artifacts in ``artifact_dir``, its folder under
        ``work_root``, with ``env`` added (its GPUs: ``gpu_uuids``); ``shared``: beside
        other claims on its devices (`ledger.execution.sharing`)."""
        from runners.contract.request import ClaimRequest

        return ClaimRequest(
            run=self,
            repo_root=repo_root,
            base_root=base_root,
            artifact_dir=artifact_dir,
            work_root=work_root,
            env=dict(env),
            gpu_uuids=gpu_uuids,
            shared=shared,
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ClaimRun:
        return cls(**doc)


@dataclass(slots=True)
class Finished:
    """What an executor hands back for one claim: results for the caller to sign and
    record (local), or receipts already recorded where the claim ran (ray)."""

    run: ClaimRun
    executor: str
    job_id: str = ""
    devices: tuple[str, ...] = ()
    """The device indices (or logical slots) the claim had to itself."""
    gpu_uuids: tuple[str, ...] = ()
    results: list[Stamped] | None = None
    receipts: list[ReceiptRow] = field(default_factory=list)
    error: str | None = None
    """Why the executor could not produce results (nothing recorded)."""
    host: str = ""
    sandbox_facts: dict[str, str] = field(default_factory=dict)
    """The self-tests of the sandboxes the claim's code ran in, the policies' digests
    and the host uid (`ledger.sandbox.Sandbox.facts`): the host's observations."""
    artifacts: Path | None = None
    """The folder the results' artifacts must lie in (read only inside it)."""
    health: dict[str, Any] | None = None
    """The claim's GPUs' health, read by the parent before and after it ran
    (`ledger.fleet.health`); None where no GPU is visible."""
