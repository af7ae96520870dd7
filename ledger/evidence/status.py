"""The shape of `ledger status --json` (and the server's `/v1/status`), as a model: its
schema is checked in (schemas/status.schema.json) for the tools that read the verdict:
CI steps that act on `verdict.exit_code`, dashboards that count `attribution.label`.

Only the schema and the tests use it: the answer is built by the judge
(`ledger.qualification.judge`) and rendered by hand. Fields are added, never taken
away or narrowed; a later release may add fields, which a reader of this one ignores.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

__all__ = [
    "AttributionDoc",
    "BlockerDoc",
    "ClaimVerdictDoc",
    "DecidingDoc",
    "ReceiptMeaningDoc",
    "RunOnceDoc",
    "StatusDocument",
    "VerdictDoc",
]


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class AttributionDoc(_Open):
    """Whose failure a blocker is, beside the commit its head branched from: it
    explains, it never unblocks."""

    claim: str
    label: Literal["introduced", "base-too", "device-only", "base-unjudged", "no-base"]
    """introduced: the base passes on the same device; base-too: the base fails there
    too; device-only: it fails only on one device; base-unjudged: no receipt of the base
    on that device; no-base: the head names no merge-base."""
    label_text: str
    text: str
    base_commit: str | None
    device: str | None
    head_receipt: str | None
    base_receipt: str | None
    passes_on: str | None
    base_branch: str | None
    base_receipts: list[str]
    inherited: bool


class DecidingDoc(_Open):
    """The one figure that decides a claim's deciding receipt, with its bound: as the
    receipt page and `ledger show` say it (`said`)."""

    key: str
    """The series a trend of it follows (`/trend?figure=KEY`)."""
    name: str
    value: float
    unit: Literal["bytes", "ratio", "number"]
    text: str
    bound: float | None
    direction: Literal["max", "min"]
    """max: the figure must stay at or under its bound; min: at or above it."""
    past: bool | None
    """Past its bound (None: the check records no bound)."""
    said: str


class ReceiptMeaningDoc(_Open):
    """What one receipt means for the question asked."""

    id: str
    short: str
    claim: str
    outcome: str
    meaning: str
    meaning_text: str
    seq: int
    commit: str
    recorded: str | None
    observer: str
    environment: dict[str, str | int]
    reason: str | None


class ClaimVerdictDoc(_Open):
    """One asked claim at its required scope, as the judge decided it."""

    claim: str
    required: bool
    state: str
    scope: dict[str, str | int]
    scope_text: str
    via: str | None
    reasons: list[str]
    next: str | None
    receipts: list[ReceiptMeaningDoc]
    attribution: AttributionDoc | None
    deciding: DecidingDoc | None = None
    """The figure of the receipt that decides the state (absent from earlier answers)."""


class BlockerDoc(_Open):
    """A required claim that is not qualified, worst first."""

    claim: str
    state: str
    scope_text: str
    reasons: list[str]
    next: str | None
    attribution: AttributionDoc | None
    deciding: DecidingDoc | None = None
    """As its claim's (absent from earlier answers)."""


class RunOnceDoc(_Open):
    command: str
    claims: list[str]


class VerdictDoc(_Open):
    """The whole verdict, decided once; every surface renders it."""

    qualified: bool
    headline: str
    required: int
    qualified_required: int
    scopes: list[str]
    governed: bool
    infra_only: bool
    inherited_only: bool
    whose: str
    blockers: list[BlockerDoc]
    claims: list[ClaimVerdictDoc]
    run_once: RunOnceDoc | None
    exit_code: Literal[0, 1, 3]
    """0 qualified; 1 not qualified by the code, missing evidence or an entry that does
    not read; 3 not qualified only because of infrastructure (a retry decides it)."""


class StatusDocument(_Open):
    """`ledger status --json`: the subject, what was judged and the verdict."""

    subject: dict[str, Any]
    qualified: bool
    scope: dict[str, str | int]
    judged: list[str]
    """How the subject and its plan were identified, in words."""
    claims: list[dict[str, Any]]
    """Per claim and scope, the engine's row."""
    verdict: VerdictDoc
    problems: list[str]
    governed: bool
    plan_source: Literal["git", "recorded", "file", "asker", "none"] | None = None
    plan_source_text: str | None = None
    record_plan: str | None = None
