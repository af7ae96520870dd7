"""Recompute the whole log from its rows and name every entry that differs."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from pydantic import ValidationError

from ledger._internal import merkle
from ledger.canonical import receipt_id, sha256_hex
from ledger.checkpoint import CheckpointError, verify_checkpoint
from ledger.errors import RefusedError, VerificationError
from ledger.ingest import envelope_body, receipt_index, review_index, verify_envelope
from ledger.keys import key_id
from ledger.models import Envelope
from ledger.store.store import (
    ARTIFACT,
    CHECKPOINT,
    FACET,
    KEY,
    RECEIPT,
    REVIEW,
    REVOCATION,
    KeyInfo,
    Store,
)

__all__ = ["AuditReport", "audit"]


@dataclass
class AuditReport:
    entries: int = 0
    checkpoints: int = 0
    root: str = ""
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def audit(store: Store) -> AuditReport:
    rep = AuditReport()
    keys: dict[str, KeyInfo] = {}
    leaves: list[bytes] = []
    receipts = {r["seq"]: r for r in store.table_rows(RECEIPT, RECEIPT.c.seq)}
    facets: dict[int, list[dict[str, object]]] = {}
    for f in store.table_rows(FACET, FACET.c.seq):
        facets.setdefault(int(f["seq"]), []).append(f)
    reviews = {r["seq"]: r for r in store.table_rows(REVIEW, REVIEW.c.seq)}
    key_rows = {r["seq"]: r for r in store.table_rows(KEY, KEY.c.seq)}
    revocations = {r["seq"]: r for r in store.table_rows(REVOCATION, REVOCATION.c.seq)}
    seen_derived: set[int] = set()
    expected = 0

    for e in store.entries():
        where = f"entry {e.seq} ({e.entry_id[:19]})"
        if e.seq != expected:
            gone = (
                f"entry {expected} is"
                if e.seq == expected + 1
                else f"entries {expected}..{e.seq - 1} are"
            )
            rep.problems.append(f"sequence gap: {gone} missing")
        expected = e.seq + 1
        rep.entries += 1
        body = e.body.encode()
        leaf = merkle.leaf_hash(body)
        leaves.append(leaf)
        if leaf.hex() != e.leaf_hash:
            rep.problems.append(f"{where}: stored leaf hash differs from its body")
        try:
            data = json.loads(body)
        except json.JSONDecodeError:
            rep.problems.append(f"{where}: body is not JSON")
            continue
        if e.kind in ("receipt", "review"):
            try:
                env = Envelope.model_validate(data)
                v = verify_envelope(env, keys, at_seq=e.seq)
            except (RefusedError, VerificationError) as err:
                rep.problems.append(f"{where}: {err.reason()}")
                continue
            except ValidationError:
                rep.problems.append(f"{where}: body is not a DSSE envelope")
                continue
            if v.id != e.entry_id:
                rep.problems.append(f"{where}: id differs from the payload digest {v.id[:19]}")
            if envelope_body(env) != body:
                rep.problems.append(f"{where}: body is not the canonical envelope")
            seen_derived.add(e.seq)
            if e.kind == "receipt":
                row, want_facets = receipt_index(e.seq, v)
                if receipts.get(e.seq) != row:
                    rep.problems.append(f"{where}: receipt index row differs from the entry")
                got = [
                    {"seq": f["seq"], "key": f["key"], "value": f["value"]}
                    for f in facets.get(e.seq, [])
                ]
                if sorted(got, key=lambda f: str(f["key"])) != want_facets:
                    rep.problems.append(f"{where}: scope facets differ from the entry")
            elif reviews.get(e.seq) != review_index(e.seq, v):
                rep.problems.append(f"{where}: review index row differs from the entry")
        elif e.kind == "key":
            if receipt_id(body) != e.entry_id:
                rep.problems.append(f"{where}: id differs from the body digest")
            try:
                pub = Ed25519PublicKey.from_public_bytes(
                    base64.b64decode(data["public_key"], validate=True)
                )
            except (KeyError, ValueError, binascii.Error):
                rep.problems.append(f"{where}: not a key entry")
                continue
            if key_id(pub) != data.get("keyid"):
                rep.problems.append(f"{where}: key id is not the digest of the key")
            kr = key_rows.get(e.seq)
            if kr is None or (kr["keyid"], kr["name"], kr["role"], kr["public_key"]) != (
                data.get("keyid"),
                data.get("name"),
                data.get("role"),
                data.get("public_key"),
            ):
                rep.problems.append(f"{where}: key row differs from the entry")
            seen_derived.add(e.seq)
            keys[data["keyid"]] = KeyInfo(data["keyid"], data["name"], data["role"], pub, e.seq)
        elif e.kind == "revocation":
            if receipt_id(body) != e.entry_id:
                rep.problems.append(f"{where}: id differs from the body digest")
            rr = revocations.get(e.seq)
            if rr is None or (rr["keyid"], rr["reason"]) != (data.get("keyid"), data.get("reason")):
                rep.problems.append(f"{where}: revocation row differs from the entry")
            seen_derived.add(e.seq)
            old = keys.get(str(data.get("keyid")))
            if old is not None and old.revoked_seq is None:
                keys[old.keyid] = KeyInfo(
                    old.keyid, old.name, old.role, old.public, old.seq, e.seq, data.get("reason")
                )
        else:
            rep.problems.append(f"{where}: unknown kind {e.kind!r}")

    for table, rows in (
        ("receipt", receipts),
        ("review", reviews),
        ("key", key_rows),
        ("revocation", revocations),
    ):
        for seq in sorted(set(rows) - seen_derived):
            rep.problems.append(f"{table} row {seq} has no matching log entry")

    for a in store.table_rows(ARTIFACT, ARTIFACT.c.sha256):
        content = bytes(a["content"])
        if sha256_hex(content) != a["sha256"] or len(content) != a["size"]:
            rep.problems.append(f"artifact {a['sha256'][:12]}: content differs from its digest")

    rep.root = merkle.root(leaves).hex()
    checkpoints = store.table_rows(CHECKPOINT, CHECKPOINT.c.size)
    roots = _roots_at(leaves, {int(cp["size"]) for cp in checkpoints})
    for cp in checkpoints:
        rep.checkpoints += 1
        size = int(cp["size"])
        if size > len(leaves):
            rep.problems.append(f"checkpoint {size}: larger than the log ({len(leaves)} entries)")
            continue
        want = roots[size]
        if want.hex() != cp["root"]:
            rep.problems.append(f"checkpoint {size}: root differs from the recomputed log")
        signers = [k for k in keys.values() if k.role == "ledger" and k.seq < size]
        ok = False
        for k in signers:
            try:
                c = verify_checkpoint(cp["note"].encode(), key_name=k.name, public_key=k.public)
            except CheckpointError:
                continue
            ok = c.root == want and c.size == size
        if not ok:
            rep.problems.append(f"checkpoint {size}: signature or root does not hold")
    return rep


def _roots_at(leaves: list[bytes], sizes: set[int]) -> dict[int, bytes]:
    """The tree root at each size, in one pass over the leaves (not one pass each)."""
    tree = merkle.CompactRange()
    roots = {0: tree.root()} if 0 in sizes else {}
    for i, leaf in enumerate(leaves, 1):
        tree.append(leaf)
        if i in sizes:
            roots[i] = tree.root()
    return roots
