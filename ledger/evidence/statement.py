"""Statements: built from facts, signed into envelopes, and parsed back from
their exact payload bytes. Used alike by `attest`, `qualify` and `review`."""

from __future__ import annotations

import hashlib
import mimetypes
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, TypeAlias

from pydantic import JsonValue, ValidationError

from ledger import __version__
from ledger.evidence import dsse
from ledger.evidence.canonical import canonical_bytes
from ledger.evidence.errors import InputError, RefusedError, UsageError, first_validation_error
from ledger.evidence.keys import LocalKey
from ledger.evidence.kinds import ROLE_FOR
from ledger.evidence.limits import load_json
from ledger.evidence.models import (
    QUALIFICATION_PREDICATE,
    REVIEW_PREDICATE,
    STATEMENT_TYPE,
    Artifact,
    Check,
    Cleanup,
    Outcome,
    QualificationPredicate,
    QualificationStatement,
    ReviewPredicate,
    ReviewStatement,
    Runner,
    Source,
    Subject,
    Supersedes,
)

__all__ = [
    "ROLE_FOR",
    "ArtifactFile",
    "Facts",
    "Statement",
    "build_review",
    "build_statement",
    "describe_artifact",
    "kind_of",
    "parse_statement",
    "read_artifact",
    "sign_payload",
    "sign_statement",
    "statement_model",
    "statement_payload",
    "timestamp",
]

Statement: TypeAlias = QualificationStatement | ReviewStatement


def timestamp(ns: int | None = None) -> str:
    when = datetime.now(UTC) if ns is None else datetime.fromtimestamp(ns / 1e9, UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True, slots=True)
class Facts:
    """What a harness tells about one check; the repository tells the rest."""

    claim: str
    check: str
    check_version: str
    parameters: Mapping[str, JsonValue]
    scope: Mapping[str, str | int]
    outcome: Outcome
    reason: str | None
    measurements: Mapping[str, JsonValue]
    observer: Literal["on", "off"]
    cleanup: Mapping[str, Any] | None
    artifacts: Sequence[Artifact]
    supersedes: Sequence[Supersedes]
    host: str = ""
    gpu_uuids: Sequence[str] = ()
    started: str | None = None
    finished: str | None = None
    environment: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ArtifactFile:
    """A file a receipt names by digest, with the bytes to store beside it."""

    artifact: Artifact
    content: bytes


def read_artifact(
    path: Path, name: str | None = None, media_type: str | None = None
) -> ArtifactFile:
    """Read and describe a file a person named; nothing is stored until its receipt is
    accepted. What a sandboxed process wrote is read by `ledger.outputs` instead."""
    try:
        content = path.read_bytes()
    except OSError as e:
        raise UsageError(f"artifact {path}: {e.strerror}") from None
    return describe_artifact(content, name or path.name, media_type)


def describe_artifact(content: bytes, name: str, media_type: str | None = None) -> ArtifactFile:
    """The bytes of an artifact named ``name``, with their digest, size and media type."""
    # The observer's CUDA memory snapshot has a type of its own, so a reader
    # (the web page's memory plot) knows it without guessing from the name.
    snapshot = name.endswith("snapshot.pickle")
    media = (
        media_type
        or ("application/vnd.pytorch.memory-snapshot+pickle" if snapshot else None)
        or mimetypes.guess_type(name)[0]
        or "application/octet-stream"
    )
    art = Artifact(
        name=name,
        digest={"sha256": hashlib.sha256(content).hexdigest()},
        size=len(content),
        mediaType=media,
    )
    return ArtifactFile(art, content)


def build_statement(source: Source, facts: Facts) -> QualificationStatement:
    now = timestamp()
    try:
        predicate = QualificationPredicate(
            claim=facts.claim,
            check=Check(
                name=facts.check, version=facts.check_version, parameters=dict(facts.parameters)
            ),
            scope=dict(facts.scope),
            source=source,
            outcome=facts.outcome,
            reason=facts.reason,
            measurements=dict(facts.measurements),
            observer=facts.observer,
            cleanup=None if facts.cleanup is None else Cleanup.model_validate(facts.cleanup),
            artifacts=list(facts.artifacts),
            runner=Runner(
                host=facts.host,
                gpu_uuids=list(facts.gpu_uuids),
                started=facts.started or now,
                finished=facts.finished or now,
                ledger_version=__version__,
                environment=dict(facts.environment),
            ),
            supersedes=list(facts.supersedes),
        )
    except ValidationError as e:
        raise InputError(f"statement would be invalid: {first_validation_error(e)}") from None
    return QualificationStatement(
        type_=STATEMENT_TYPE,
        subject=[
            Subject(name=source.repo, digest={"gitCommit": source.commit, "gitTree": source.tree})
        ],
        predicateType=QUALIFICATION_PREDICATE,
        predicate=predicate,
    )


def build_review(receipt: str, verdict: Literal["concur", "dispute"], note: str) -> ReviewStatement:
    return ReviewStatement(
        type_=STATEMENT_TYPE,
        subject=[Subject(name="receipt", digest={"sha256": receipt.removeprefix("sha256:")})],
        predicateType=REVIEW_PREDICATE,
        predicate=ReviewPredicate(
            receipt=receipt,
            verdict=verdict,
            note=note,
            reviewed=timestamp(),
            ledger_version=__version__,
        ),
    )


def statement_payload(stmt: Statement) -> bytes:
    """The bytes a statement is signed as: its canonical JSON (its id is their sha256)."""
    return canonical_bytes(stmt.model_dump(mode="json", by_alias=True))


def sign_payload(payload: bytes, key: LocalKey) -> bytes:
    """The envelope bytes: a statement's payload (`statement_payload`), signed."""
    return dsse.sign(payload, key).model_dump_json().encode()


def sign_statement(stmt: Statement, key: LocalKey) -> bytes:
    """The envelope bytes: the statement's canonical JSON, signed. The format only:
    the write path signs through `ledger.write.journal.sign`, which also notes what
    this host signed in its journal."""
    return sign_payload(statement_payload(stmt), key)


def kind_of(stmt: Statement) -> str:
    return "receipt" if isinstance(stmt, QualificationStatement) else "review"


def statement_model(doc: Any) -> type[QualificationStatement] | type[ReviewStatement]:
    """The model a decoded payload claims to be, by its predicateType."""
    if not isinstance(doc, dict):
        raise RefusedError("payload is not a JSON object")
    ptype = doc.get("predicateType")
    if ptype == QUALIFICATION_PREDICATE:
        return QualificationStatement
    if ptype == REVIEW_PREDICATE:
        return ReviewStatement
    raise RefusedError(f"unknown predicateType {ptype!r}")


def parse_statement(payload: bytes) -> Statement:
    """Validate the exact payload bytes as one of our statements."""
    try:
        data = load_json(payload, "payload")
    except InputError as e:
        raise RefusedError(e.reason()) from None
    try:
        return statement_model(data).model_validate(data)
    except ValidationError as e:
        raise RefusedError(f"malformed in-toto statement: {first_validation_error(e)}") from None
