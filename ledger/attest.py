"""Build, sign and record qualification statements and reviews."""

from __future__ import annotations

import hashlib
import json
import mimetypes
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import JsonValue, ValidationError

from ledger import __version__, dsse
from ledger.canonical import canonical_bytes
from ledger.errors import InputError, UsageError
from ledger.ingest import Recorded, record
from ledger.keys import LocalKey
from ledger.models import (
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
from ledger.store.store import Store

__all__ = [
    "Facts",
    "build_statement",
    "parse_scope",
    "record_review",
    "record_statement",
    "timestamp",
]


def timestamp(ns: int | None = None) -> str:
    when = datetime.now(UTC) if ns is None else datetime.fromtimestamp(ns / 1e9, UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_scope(pairs: Sequence[str]) -> dict[str, str | int]:
    """`k=v` facets; integers stay integers so `gpu_count=2` matches exactly."""
    out: dict[str, str | int] = {}
    for p in pairs:
        k, sep, v = p.partition("=")
        if not sep or not k:
            raise UsageError(f"--scope {p!r}: expected key=value")
        if k in out:
            raise UsageError(f"--scope {k} given twice")
        out[k.strip()] = int(v) if v.lstrip("-").isdigit() else v
    return out


def load_json_file(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_bytes())
    except FileNotFoundError:
        raise UsageError(f"{what} file {path} does not exist") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(f"{what} file {path} is not JSON: {e}") from None


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


def artifact_of(store: Store | None, path: Path, name: str | None = None) -> Artifact:
    """Describe a file for the statement; store it content-addressed when a store is given."""
    try:
        content = path.read_bytes()
    except OSError as e:
        raise UsageError(f"artifact {path}: {e.strerror}") from None
    digest = hashlib.sha256(content).hexdigest()
    media = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    if store is not None:
        store.put_artifact(digest, content, media)
    return Artifact(
        name=name or path.name, digest={"sha256": digest}, size=len(content), mediaType=media
    )


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
            ),
            supersedes=list(facts.supersedes),
        )
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise InputError(f"statement would be invalid: {loc}: {first['msg']}") from None
    return QualificationStatement(
        type_=STATEMENT_TYPE,
        subject=[
            Subject(name=source.repo, digest={"gitCommit": source.commit, "gitTree": source.tree})
        ],
        predicateType=QUALIFICATION_PREDICATE,
        predicate=predicate,
    )


def sign_statement(stmt: QualificationStatement | ReviewStatement, key: LocalKey) -> bytes:
    payload = canonical_bytes(stmt.model_dump(mode="json", by_alias=True))
    return dsse.sign(payload, key).model_dump_json().encode()


def record_statement(
    store: Store, stmts: Sequence[QualificationStatement], key: LocalKey
) -> list[Recorded]:
    return record(store, [sign_statement(s, key) for s in stmts])


def record_review(
    store: Store, receipt: str, verdict: Literal["concur", "dispute"], note: str, key: LocalKey
) -> Recorded:
    rid = receipt.removeprefix("sha256:")
    stmt = ReviewStatement(
        type_=STATEMENT_TYPE,
        subject=[Subject(name="receipt", digest={"sha256": rid})],
        predicateType=REVIEW_PREDICATE,
        predicate=ReviewPredicate(
            receipt=receipt,
            verdict=verdict,
            note=note,
            reviewed=timestamp(),
            ledger_version=__version__,
        ),
    )
    return record(store, [sign_statement(stmt, key)])[0]
