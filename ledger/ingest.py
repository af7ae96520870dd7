"""Verify on ingest, then append: the only way anything enters the log.

Every input is fully checked before the write transaction starts; a refused
input leaves the database exactly as it was.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from pydantic import ValidationError
from sqlalchemy import Connection

from ledger import dsse
from ledger.canonical import canonical_bytes, receipt_id
from ledger.errors import RefusedError, UsageError, VerificationError
from ledger.keys import Role, key_id, raw_public
from ledger.models import (
    QUALIFICATION_PREDICATE,
    REVIEW_PREDICATE,
    Envelope,
    QualificationStatement,
    ReviewStatement,
)
from ledger.store.store import (
    FACET,
    KEY,
    LOG,
    RECEIPT,
    REVIEW,
    REVOCATION,
    KeyInfo,
    Store,
    utc_now,
)

__all__ = [
    "Recorded",
    "Verified",
    "parse_statement",
    "receipt_index",
    "record",
    "register_key",
    "revoke_key",
    "verify_envelope",
]

Statement = QualificationStatement | ReviewStatement
ROLE_FOR = {QUALIFICATION_PREDICATE: "runner", REVIEW_PREDICATE: "reviewer"}


@dataclass(frozen=True, slots=True)
class Verified:
    id: str
    kind: str
    """receipt | review"""
    envelope: Envelope
    payload: bytes
    statement: Statement
    signer: str


@dataclass(frozen=True, slots=True)
class Recorded:
    id: str
    kind: str
    seq: int | None
    duplicate: bool


def parse_statement(payload: bytes) -> Statement:
    """Validate the exact payload bytes as one of our statements."""
    try:
        data = json.loads(payload)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise RefusedError("payload is not JSON") from None
    if not isinstance(data, dict):
        raise RefusedError("payload is not a JSON object")
    ptype = data.get("predicateType")
    model: type[QualificationStatement] | type[ReviewStatement]
    if ptype == QUALIFICATION_PREDICATE:
        model = QualificationStatement
    elif ptype == REVIEW_PREDICATE:
        model = ReviewStatement
    else:
        raise RefusedError(f"unknown predicateType {ptype!r}")
    try:
        return model.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise RefusedError(f"malformed in-toto statement: {loc}: {first['msg']}") from None


def verify_envelope(
    env: Envelope, keys: dict[str, KeyInfo], *, at_seq: int | None = None
) -> Verified:
    """Signature, key status, role and statement checks of one envelope.

    `at_seq` is the log position the entry has (audit) or would get (ingest):
    a key revoked before that position does not count.
    """
    pubs: dict[str, Ed25519PublicKey] = {k: v.public for k, v in keys.items()}
    payload, accepted = dsse.verify(env, pubs)
    stmt = parse_statement(payload)
    want_role = ROLE_FOR[stmt.predicateType]
    signer = accepted[0]
    info = keys[signer]
    if info.revoked_seq is not None and (at_seq is None or info.revoked_seq < at_seq):
        raise VerificationError(
            f"key {info.name} ({signer[:12]}) was revoked: {info.revoked_reason}"
        )
    if info.role != want_role:
        raise VerificationError(
            f"key {info.name} has role {info.role}; "
            f"a {_kind(stmt)} must be signed by a {want_role} key"
        )
    return Verified(
        id=receipt_id(payload),
        kind=_kind(stmt),
        envelope=env,
        payload=payload,
        statement=stmt,
        signer=signer,
    )


def _kind(stmt: Statement) -> str:
    return "receipt" if isinstance(stmt, QualificationStatement) else "review"


def envelope_body(env: Envelope) -> bytes:
    """The log entry bytes of an envelope: its canonical JSON (payload bytes untouched)."""
    return canonical_bytes(env.model_dump(mode="json"))


def receipt_index(seq: int, v: Verified) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The derived index rows of a receipt (also recomputed by the audit)."""
    assert isinstance(v.statement, QualificationStatement)
    p = v.statement.predicate
    row = {
        "seq": seq,
        "id": v.id,
        "claim": p.claim,
        "check_name": p.check.name,
        "repo": p.source.repo,
        "commit": p.source.commit,
        "tree": p.source.tree,
        "pr": p.source.pr,
        "package_digest": p.source.package.digest if p.source.package else None,
        "outcome": p.outcome,
        "observer": p.observer,
        "dirty": p.source.dirty,
        "signer": v.signer,
    }
    facets = [{"seq": seq, "key": k, "value": str(val)} for k, val in sorted(p.scope.items())]
    return row, facets


def review_index(seq: int, v: Verified) -> dict[str, Any]:
    assert isinstance(v.statement, ReviewStatement)
    p = v.statement.predicate
    return {
        "seq": seq,
        "id": v.id,
        "receipt_id": p.receipt,
        "verdict": p.verdict,
        "signer": v.signer,
    }


def _check_links(store: Store, v: Verified, batch: dict[str, Verified]) -> None:
    """References must point at receipts the ledger (or this batch) holds."""
    if isinstance(v.statement, ReviewStatement):
        target = v.statement.predicate.receipt
        signer = store.receipt_signer(target)
        if signer is None and target in batch:
            signer = batch[target].signer
        if signer is None:
            raise RefusedError(f"review of unknown receipt {target}")
        if signer == v.signer:
            raise RefusedError("a reviewer cannot review a receipt it signed itself")
    else:
        for s in v.statement.predicate.supersedes:
            if store.entry(s.id) is None and s.id not in batch:
                raise RefusedError(f"supersedes unknown receipt {s.id}")


def record(store: Store, raws: Sequence[bytes]) -> list[Recorded]:
    """Verify every envelope, then append the new ones in one transaction.

    All or nothing: one refused input means nothing is written.
    """
    keys = store.keys()
    nxt = store.size()
    checked: list[Verified] = []
    batch: dict[str, Verified] = {}
    for i, raw in enumerate(raws):
        try:
            v = verify_envelope(dsse.parse_envelope(raw), keys, at_seq=nxt + i)
            _check_links(store, v, batch)
        except (RefusedError, VerificationError) as e:
            where = f"input {i + 1}: " if len(raws) > 1 else ""
            raise RefusedError(where + e.reason()) from None
        checked.append(v)
        batch[v.id] = v
    out: list[Recorded] = []
    with store.append_tx() as tx:
        seen = tx.existing([v.id for v in checked])
        logs: list[dict[str, Any]] = []
        receipts: list[dict[str, Any]] = []
        facets: list[dict[str, Any]] = []
        reviews: list[dict[str, Any]] = []
        for v in checked:
            if v.id in seen:
                out.append(Recorded(v.id, v.kind, None, True))
                continue
            seen.add(v.id)
            log = tx.row(kind=v.kind, entry_id=v.id, body=envelope_body(v.envelope))
            logs.append(log)
            if v.kind == "receipt":
                row, fs = receipt_index(log["seq"], v)
                receipts.append(row)
                facets.extend(fs)
            else:
                reviews.append(review_index(log["seq"], v))
            out.append(Recorded(v.id, v.kind, log["seq"], False))
        # Parents before children: the index tables reference log_entry.seq.
        for table, rows in ((LOG, logs), (RECEIPT, receipts), (FACET, facets), (REVIEW, reviews)):
            tx.insert_many(table, rows)
    return out


def key_body(keyid: str, name: str, role: str, public: Ed25519PublicKey) -> bytes:
    return canonical_bytes(
        {
            "kind": "key",
            "keyid": keyid,
            "name": name,
            "role": role,
            "public_key": base64.b64encode(raw_public(public)).decode(),
        }
    )


def register_key(store: Store, name: str, role: Role, public: Ed25519PublicKey) -> tuple[str, bool]:
    """Log a public key with its role; returns (key id, newly added)."""
    kid = key_id(public)
    existing = store.keys().get(kid)
    if existing is not None:
        if existing.role != role or existing.name != name:
            raise UsageError(
                f"key {kid[:12]} is already registered as {existing.name} ({existing.role})"
            )
        return kid, False
    if any(k.name == name and k.revoked_seq is None for k in store.keys().values()):
        raise UsageError(f"a key named {name!r} is already registered")
    body = key_body(kid, name, role, public)
    with store.append_tx() as tx:

        def idx(conn: Connection, seq: int) -> None:
            conn.execute(
                KEY.insert().values(
                    keyid=kid,
                    seq=seq,
                    name=name,
                    role=role,
                    public_key=base64.b64encode(raw_public(public)).decode(),
                )
            )

        tx.add(kind="key", entry_id=receipt_id(body), body=body, index=idx)
    return kid, True


def revocation_body(keyid: str, reason: str, when: str) -> bytes:
    return canonical_bytes(
        {"kind": "revocation", "keyid": keyid, "reason": reason, "revoked": when}
    )


def revoke_key(store: Store, ref: str, reason: str) -> KeyInfo:
    """Revoke a key by id (or unique prefix) or name; later entries by it stop counting."""
    if not reason.strip():
        raise UsageError("a revocation needs a --reason")
    keys = store.keys()
    matches = [k for k in keys.values() if k.keyid.startswith(ref.lower()) or k.name == ref]
    if not matches:
        raise UsageError(f"no registered key matches {ref!r}")
    if len(matches) > 1:
        raise UsageError(f"{ref!r} matches several keys; give more of the key id")
    info = matches[0]
    if info.revoked_seq is not None:
        raise UsageError(f"key {info.name} is already revoked")
    body = revocation_body(info.keyid, reason, utc_now())
    with store.append_tx() as tx:

        def idx(conn: Connection, seq: int) -> None:
            conn.execute(REVOCATION.insert().values(seq=seq, keyid=info.keyid, reason=reason))

        tx.add(kind="revocation", entry_id=receipt_id(body), body=body, index=idx)
    return info
