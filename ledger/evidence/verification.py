"""The shape of `ledger verify --json`, as a model: its schema is checked in
(schemas/verification-report.schema.json) for tools that read the report.

Only the schema and the tests use it: `ledger verify FILE` builds its document by
hand (`ledger.verify.report`) and loads no pydantic. Fields are added, never
taken away or narrowed: a reader of an earlier report's fields finds them all.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

__all__ = ["CheckpointDoc", "FactDoc", "FactsDoc", "VerificationReportDoc"]


class _Open(BaseModel):
    # A later release may add fields; a reader of this one ignores them.
    model_config = ConfigDict(extra="allow")


class CheckpointDoc(_Open):
    size: int
    """The size of the signed checkpoint the inclusion was proven against."""
    origin: str | None
    time: str | None = None
    """When it existed by (UTC): its note's `timestamp` line, or the earliest
    cosignature of the witness quorum; null where neither says."""
    time_from: Literal["checkpoint", "witnesses"] | None = None


class FactDoc(_Open):
    """One fact: whether it was established, whether the policy requires it, and
    one line for people; each fact adds its own fields."""

    established: bool
    required: bool
    text: str


class FactsDoc(_Open):
    """Each fact apart (`ledger.verify.facts`)."""

    signature: FactDoc
    """keyid, name, role_at_signing, registered_at."""
    inclusion: FactDoc
    """index, checkpoint."""
    witnesses: FactDoc
    """quorum: the cosigning witnesses' names (null: no --policy)."""
    key_status: FactDoc
    """status (active, revoked, unknown), revoked_at, reason, as_of, freshness."""
    revocation: FactDoc
    """status (not revoked, revoked, pending, unknown), as_of, freshness; seq,
    reason, review and authority where revoked."""


class VerificationReportDoc(_Open):
    """`ledger verify --json` where the receipt was found: what it established."""

    verified: bool
    """True only where every fact required is established and the receipt is the
    one expected (--repo, --commit, --claim, --signer)."""
    id: str
    kind: Literal["receipt", "review"]
    subject: dict[str, Any]
    claim: str | None
    outcome: str | None
    scope: dict[str, Any] | None
    sandbox: str | None = None
    signer: dict[str, Any]
    anchor: str
    log: dict[str, Any]
    checkpoint: CheckpointDoc
    reviews: list[dict[str, Any]]
    unanchored_reviews: list[dict[str, Any]]
    steps: list[str]
    expected: dict[str, str] = {}
    reason: str | None = None
    """What failed, in one line, where `verified` is false."""
    mismatches: list[str] | None = None
    facts: FactsDoc | None = None
    """Absent from reports of earlier releases, and from a server's word."""
    established: list[str] | None = None
    not_established: list[str] | None = None
