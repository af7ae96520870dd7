"""Pydantic models of what the ledger signs and stores (all frozen).

Statement v1 (in-toto) with two predicates of our own: a qualification
receipt and a review of a receipt. The DSSE envelope carries the statement's
exact canonical bytes; these models validate those bytes, they never produce
the bytes that get verified.
"""

from __future__ import annotations

from typing import Annotated, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, JsonValue, StringConstraints, model_validator

from ledger.evidence.kinds import (
    BUNDLE_TYPE,
    DEFAULT_MEDIA_TYPE,
    IN_TOTO_PAYLOAD_TYPE,
    QUALIFICATION_PREDICATE,
    REVIEW_PREDICATE,
    STATEMENT_TYPE,
)
from ledger.evidence.shape import (
    inexact_figure,
    missing_reason,
    unreleased_but_complete,
    wrong_review_subject,
)

__all__ = [
    "BUNDLE_TYPE",
    "IN_TOTO_PAYLOAD_TYPE",
    "QUALIFICATION_PREDICATE",
    "REVIEW_PREDICATE",
    "STATEMENT_TYPE",
    "Artifact",
    "Check",
    "Cleanup",
    "Envelope",
    "Outcome",
    "PackageIdentity",
    "QualificationPredicate",
    "QualificationStatement",
    "Resource",
    "ReviewPredicate",
    "ReviewStatement",
    "Runner",
    "Signature",
    "Source",
    "Subject",
    "Supersedes",
]

Outcome: TypeAlias = Literal["passed", "failed", "inconclusive", "refused", "infra-error"]
Hex40 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{40}([0-9a-f]{24})?$")]
Hex64 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
ReceiptId = Annotated[str, StringConstraints(pattern=r"^sha256:[0-9a-f]{64}$")]
Facet = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_.-]*$")]
Timestamp = Annotated[str, StringConstraints(pattern=r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class Subject(_Frozen):
    name: str = Field(min_length=1)
    digest: dict[str, str] = Field(min_length=1)


class Check(_Frozen):
    name: str = Field(min_length=1)
    version: str = Field(min_length=1)
    parameters: dict[str, JsonValue] = Field(default_factory=dict)


class PackageIdentity(_Frozen):
    paths: list[str]
    """Globs (from the plan) that select the package's files."""
    digest: Hex64
    """sha256 over the sorted (path, git blob id) pairs of the matching files; with
    `parts` beyond ``files``, sha256 over the canonical JSON of `parts`."""
    parts: dict[str, str] | None = Field(default=None, exclude_if=lambda v: v is None)
    """What the digest covers, part by part, so a difference can be named: ``files``
    (the digest of the paths' files), ``lock:PATH`` (a lock file's git blob id, or
    ``missing``), ``dist:NAME`` (an installed distribution's version, or ``missing``;
    torch with its CUDA build), ``workload`` (the digest of the workload definition the
    plan resolves to, its ready adapters' versions included, where the plan names one).
    None: the files alone (as every receipt recorded before these parts existed)."""


class Source(_Frozen):
    repo: str = Field(min_length=1)
    commit: Hex40
    tree: Hex40
    parents: list[Hex40] = Field(default_factory=list)
    pr: int | None = Field(default=None, ge=1)
    base: Hex40 | None = None
    """Merge-base with the base branch, when known."""
    dirty: bool
    package: PackageIdentity | None = None


class Resource(_Frozen):
    kind: str = Field(min_length=1)
    id: str = Field(min_length=1)
    released: bool
    proof: str = ""


class Cleanup(_Frozen):
    complete: bool
    resources: list[Resource] = Field(default_factory=list)
    tolerance_bytes: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _complete_means_all_released(self) -> Cleanup:
        wrong = unreleased_but_complete(self.complete, [r.released for r in self.resources])
        if wrong:
            raise ValueError(wrong)
        return self


class Artifact(_Frozen):
    name: str = Field(min_length=1)
    digest: dict[Literal["sha256"], Hex64]
    size: int = Field(ge=0)
    mediaType: str = DEFAULT_MEDIA_TYPE


class Runner(_Frozen):
    host: str = ""
    gpu_uuids: list[str] = Field(default_factory=list)
    started: Timestamp
    finished: Timestamp
    ledger_version: str
    environment: dict[str, str] = Field(default_factory=dict)
    """Versions of where it ran (python, torch, CUDA, NCCL, driver, packages digest)."""


class Supersedes(_Frozen):
    id: ReceiptId
    reason: str = Field(min_length=1)


class QualificationPredicate(_Frozen):
    claim: str = Field(min_length=1)
    check: Check
    scope: dict[Facet, str | int]
    source: Source
    outcome: Outcome
    reason: str | None = None
    measurements: dict[str, JsonValue] = Field(default_factory=dict)
    observer: Literal["on", "off"]
    cleanup: Cleanup | None = None
    artifacts: list[Artifact] = Field(default_factory=list)
    runner: Runner
    supersedes: list[Supersedes] = Field(default_factory=list)

    @model_validator(mode="after")
    def _rules(self) -> QualificationPredicate:
        wrong = missing_reason(self.outcome, self.reason) or inexact_figure(
            self.measurements, "measurements"
        )
        if wrong:
            raise ValueError(wrong)
        return self


class _Statement(_Frozen):
    type_: Literal["https://in-toto.io/Statement/v1"] = Field(alias="_type")
    subject: list[Subject] = Field(min_length=1)


class QualificationStatement(_Statement):
    predicateType: Literal["https://ledger.dev/predicates/qualification/v1"]
    predicate: QualificationPredicate


class ReviewPredicate(_Frozen):
    receipt: ReceiptId
    verdict: Literal["concur", "dispute"]
    note: str = ""
    reviewed: Timestamp
    ledger_version: str


class ReviewStatement(_Statement):
    predicateType: Literal["https://ledger.dev/predicates/review/v1"]
    predicate: ReviewPredicate

    @model_validator(mode="after")
    def _subject_is_the_receipt(self) -> ReviewStatement:
        wrong = wrong_review_subject(
            self.predicate.receipt, [s.digest.get("sha256") for s in self.subject]
        )
        if wrong:
            raise ValueError(wrong)
        return self


class Signature(_Frozen):
    keyid: str = Field(min_length=1)
    sig: str = Field(min_length=1)


class Envelope(_Frozen):
    payloadType: str
    payload: str
    signatures: list[Signature] = Field(min_length=1)
