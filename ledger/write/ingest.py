"""Verify on ingest, then append: the only way anything enters the log.

Every input is fully checked before the write transaction starts; a refused
input leaves the database exactly as it was.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from sqlalchemy import Connection

from ledger.evidence import dsse, limits
from ledger.evidence.canonical import receipt_id
from ledger.evidence.entry import envelope_body, key_body, revocation_body
from ledger.evidence.errors import RefusedError, UsageError, VerificationError
from ledger.evidence.hosts import with_hosts
from ledger.evidence.keys import (
    KeyDir,
    KeyInfo,
    LocalKey,
    Role,
    find_key,
    key_id,
    raw_public,
    valid_key_name,
)
from ledger.evidence.models import QualificationStatement, ReviewStatement
from ledger.evidence.statement import ArtifactFile
from ledger.identity.repoid import canonical_repo
from ledger.store.store import (
    FACET,
    KEY,
    LOG,
    RECEIPT,
    REVIEW,
    REVOCATION,
    Store,
    utc_now,
)
from ledger.verify.envelope import Verified, verify_envelope
from ledger.write.artifacts import MAX_ARTIFACT_BYTES, ArtifactStore, for_ledger
from ledger.write.hosts import check_names, check_speaks_for, registry
from ledger.write.recorders import Recorders, check_first_recorded, recorders
from ledger.write.revocation_signing import asserted, signed_entry

__all__ = [
    "Initialized",
    "Recorded",
    "init_ledger",
    "receipt_index",
    "record",
    "register_key",
    "review_index",
    "revoke_key",
]


@dataclass(frozen=True, slots=True)
class Recorded:
    id: str
    kind: str
    seq: int | None
    duplicate: bool

    def to_json(self) -> dict[str, Any]:
        """What `ledger record --json` prints and the server answers, per envelope."""
        return {"id": self.id, "kind": self.kind, "seq": self.seq, "duplicate": self.duplicate}


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
        "repo_id": canonical_repo(p.source.repo),
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
        # No co-signer of the receipt is its independent reviewer either.
        logged = store.entry(target)
        cosigners = {s.keyid for s in logged.envelope.signatures} if logged is not None else set()
        if target in batch:
            cosigners |= set(batch[target].signers)
        if set(v.signers) & cosigners:
            raise RefusedError("a key that signed a receipt cannot review it")
    else:
        for s in v.statement.predicate.supersedes:
            if store.entry(s.id) is None and s.id not in batch:
                raise RefusedError(f"supersedes unknown receipt {s.id}")


def _check_limits(v: Verified) -> None:
    """The derived rows fit their columns: refused here, alike on every backend."""
    if v.kind == "receipt":
        row, facets = receipt_index(0, v)
        limits.check_row("receipt", row)
        limits.check_rows("scope_facet", facets)
        assert isinstance(v.statement, QualificationStatement)
        for i, a in enumerate(v.statement.predicate.artifacts):
            limits.check_media_type(a.mediaType, f"artifacts[{i}].mediaType")
    else:
        limits.check_row("review", review_index(0, v))


def record(
    store: Store,
    raws: Sequence[bytes],
    artifacts: Sequence[ArtifactFile] = (),
    artifact_store: ArtifactStore | None = None,
) -> list[Recorded]:
    """Verify every envelope, then append the new ones in one transaction.

    All or nothing: one refused input means nothing is written. Artifact
    bytes go to the content-addressed artifact store once everything was
    accepted, before the transaction that logs their digest, size and media
    type: a logged receipt never names bytes that are not there.
    """
    keys = store.keys(fresh=True)
    nxt = store.size()
    checked: list[Verified] = []
    batch: dict[str, Verified] = {}
    for i, raw in enumerate(raws):
        try:
            v = verify_envelope(dsse.parse_envelope(raw), keys, at_seq=nxt + i)
            _check_limits(v)
            _check_links(store, v, batch)
        except (RefusedError, VerificationError) as e:
            raise RefusedError(_where(i, raws) + e.reason()) from None
        checked.append(v)
        batch[v.id] = v
    _check_hosts(store, keys, checked, raws)
    _check_artifacts(checked, artifacts)
    files = artifact_store or for_ledger(store.url)
    for a in artifacts:
        files.put(a.artifact.digest["sha256"], a.content)
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
        for a in artifacts:
            tx.put_artifact(a.artifact.digest["sha256"], a.artifact.size, a.artifact.mediaType)
    return out


def _where(i: int, raws: Sequence[bytes]) -> str:
    return f"input {i + 1}: " if len(raws) > 1 else ""


def _check_hosts(
    store: Store, keys: Mapping[str, KeyInfo], checked: Sequence[Verified], raws: Sequence[bytes]
) -> None:
    """Each receipt's key speaks for the host and GPUs it names, and every name it
    signs is printable (`ledger.write.hosts`)."""
    receipts = [(i, v) for i, v in enumerate(checked) if v.kind == "receipt"]
    if not receipts:
        return
    asked: dict[str, set[str]] = {}
    for _, v in receipts:
        assert isinstance(v.statement, QualificationStatement)
        host = v.statement.predicate.runner.host
        asked.setdefault(v.signer, set()).update([host] if host else [])
    reg = registry(store, keys, only=asked)
    rec: Recorders | None = None
    for i, v in receipts:
        assert isinstance(v.statement, QualificationStatement)
        p = v.statement.predicate
        try:
            check_names(p)
            check_speaks_for(reg, v.signer, p)
            if p.runner.host and p.runner.gpu_uuids:
                # Read once a batch, and only for a receipt that names GPUs at all.
                rec = recorders(store, keys) if rec is None else rec
                check_first_recorded(rec, reg.owners, p.runner.host, p.runner.gpu_uuids)
        except RefusedError as e:
            raise RefusedError(_where(i, raws) + e.reason()) from None


def _check_artifacts(checked: Sequence[Verified], artifacts: Sequence[ArtifactFile]) -> None:
    """Each artifact given is named by a receipt of the batch, with its size and media type."""
    named = {
        (a.digest["sha256"], a.size, a.mediaType)
        for v in checked
        if isinstance(v.statement, QualificationStatement)
        for a in v.statement.predicate.artifacts
    }
    for a in artifacts:
        d = a.artifact.digest["sha256"]
        if (d, a.artifact.size, a.artifact.mediaType) not in named:
            raise RefusedError(f"artifact sha256:{d[:12]} is named by no receipt of this batch")
        if len(a.content) != a.artifact.size or len(a.content) > MAX_ARTIFACT_BYTES:
            raise RefusedError(
                f"artifact sha256:{d[:12]}: {len(a.content)} bytes (named {a.artifact.size},"
                f" limit {MAX_ARTIFACT_BYTES})"
            )


@dataclass(frozen=True, slots=True)
class Initialized:
    created: bool
    name: str
    keyid: str
    private_key: Path


def init_ledger(url: str, keys: KeyDir) -> Initialized:
    """Create (or migrate) the ledger at `url` and register its ledger key once."""
    store = Store.create(url)
    have = [k for k in store.keys().values() if k.role == "ledger" and k.active]
    if have:
        return Initialized(False, have[0].name, have[0].keyid, keys.file(have[0].name))
    name = "ledger"
    local = keys.load(name) if keys.file(name).exists() else keys.create(name)
    kid, _ = register_key(store, name, "ledger", local.public)
    return Initialized(True, name, kid, keys.file(name))


def register_key(
    store: Store,
    name: str,
    role: Role,
    public: Ed25519PublicKey,
    *,
    registered_by: str | None = None,
    rotation: bool = False,
    hosts: Mapping[str, Sequence[str]] | None = None,
) -> tuple[str, bool]:
    """Log a public key with its role; returns (key id, newly added).

    `hosts`: the hosts a runner key speaks for, each with the GPU UUIDs declared
    there (none: not known); its receipts may speak of no other host's devices
    (`ledger.write.hosts`). None registers it as earlier releases did: it speaks for
    the hosts it records from.

    `registered_by` is the token holder of a registration over HTTP: such a
    key is a runner or reviewer key, never the ledger key nor one of its names.
    A ledger key beside an active one is refused unless it is `rotation`'s (the
    newest signs checkpoints: one whose private key this host lacks stops them).
    """
    kid = key_id(public)
    limits.check_row("key", {"name": name, "role": role})
    if hosts is not None and role != "runner":
        raise (RefusedError if registered_by is not None else UsageError)(
            f"a {role} key speaks for no host: only a runner key names hosts"
        )
    if registered_by is not None:
        _check_remote_key(store, name, role)
        if role == "runner" and not hosts:
            raise RefusedError(
                "hosts: a runner key names the hosts it speaks for ({host: [GPU UUIDs]})"
            )
    # Over HTTP these are the client's mistakes (400), not the operator's.
    err = RefusedError if registered_by is not None else UsageError
    existing = store.keys(fresh=True).get(kid)
    if existing is not None:
        if existing.role != role or existing.name != name:
            raise err(f"key {kid[:12]} is already registered as {existing.name} ({existing.role})")
        return kid, False
    if any(k.name == name and k.revoked_seq is None for k in store.keys().values()):
        raise err(f"a key named {name!r} is already registered")
    live = [k for k in store.keys().values() if k.role == "ledger" and k.active]
    if role == "ledger" and live and not rotation:
        raise err(
            f"this ledger's key is {live[-1].name} ({live[-1].keyid[:12]}): a second ledger key "
            "would sign its checkpoints from now on; replace it with `ledger keys rotate-ledger`"
        )
    body = key_body(kid, name, role, public, registered_by)
    if hosts is not None:
        try:
            body = with_hosts(body, hosts)
        except RefusedError as e:
            if registered_by is not None:
                raise
            raise UsageError(e.reason()) from None
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


def _check_remote_key(store: Store, name: str, role: str) -> None:
    """What no token may do: register a ledger key or take a ledger key's name."""
    if not valid_key_name(name):
        raise RefusedError(f"key name {name[:40]!r}: letters, digits, . _ - only (64 at most)")
    if role not in ("runner", "reviewer"):
        raise RefusedError(
            f"role {role!r}: only runner and reviewer keys are registered over HTTP"
            " (the ledger key is registered on the ledger's host)"
        )
    if any(k.name == name for k in store.keys(fresh=True).values() if k.role == "ledger"):
        raise RefusedError(f"{name!r} is the name of a ledger key")


def revoke_key(
    store: Store,
    ref: str,
    reason: str,
    *,
    revoked_by: str | None = None,
    key: LocalKey | None = None,
    envelope: Mapping[str, Any] | None = None,
) -> KeyInfo:
    """Revoke a key by id (or unique prefix) or name; later entries by it stop counting.

    `revoked_by` is the token holder of a revocation over HTTP, which reaches
    runner and reviewer keys only. Signed (`write/revocation_signing.py`) by `key`, on
    this host the operator's ledger key when None, or carried by a client's `envelope`:
    a ledger key's signature, or the revoked key's own.
    """
    if not reason.strip():
        raise UsageError("a revocation needs a --reason")
    limits.check_text(reason, "--reason", limits.COLUMN_LIMITS["reason"])
    info = find_key(store.keys(fresh=True), ref)
    if revoked_by is not None and info.role not in ("runner", "reviewer"):
        raise RefusedError(
            f"key {info.name} is a {info.role} key: only runner and reviewer keys are"
            " revoked over HTTP"
        )
    if info.revoked_seq is not None:
        err = RefusedError if revoked_by is not None else UsageError
        raise err(f"key {info.name} is already revoked")
    when = utc_now() if envelope is None else str(asserted(envelope).get("revoked"))
    doc = revocation_body(info.keyid, reason, when)
    body, _ = signed_entry(store, doc, key, envelope, revoked_by)
    with store.append_tx() as tx:

        def idx(conn: Connection, seq: int) -> None:
            conn.execute(REVOCATION.insert().values(seq=seq, keyid=info.keyid, reason=reason))

        tx.add(kind="revocation", entry_id=receipt_id(body), body=body, index=idx)
    return info
