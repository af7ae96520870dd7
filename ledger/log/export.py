"""Export bundles and their offline verification (no database needed).

A bundle is one canonical JSON document: the receipt's log entry, its
reviews' entries and the key entries of every signer, each with an inclusion
proof against one signed checkpoint. Every byte is covered: entry bodies by
the proofs, proofs by the checkpoint root, the checkpoint by the ledger's
signature, and the layout by the canonical-form check.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from ledger._internal import merkle
from ledger.canonical import canonical_bytes
from ledger.checkpoint import CheckpointError, parse_checkpoint, verify_checkpoint
from ledger.errors import RefusedError, UsageError, VerificationError
from ledger.ingest import Verified, verify_envelope
from ledger.keys import KeyDir, key_id
from ledger.log import inclusion, ledger_key
from ledger.models import Envelope, ReviewStatement
from ledger.store.store import KeyInfo, Store

__all__ = ["BUNDLE_TYPE", "BundleReport", "export", "verify_bundle"]

BUNDLE_TYPE = "application/vnd.ledger.bundle.v1+json"


def export(store: Store, ref: str, keys: KeyDir | None) -> bytes:
    entry = store.resolve(ref)
    reviews = store.review_entries([entry.entry_id]) if entry.kind == "receipt" else []
    # A checkpoint covering the newest review too; signed afresh when the key is here.
    inc = inclusion(store, max([entry.seq, *(r.seq for r in reviews)]), keys)
    reviews = [r for r in reviews if r.seq < inc.size]
    leaves = inc.leaves

    def item(seq: int, body: str) -> dict[str, Any]:
        proof = merkle.inclusion_proof(seq, leaves)
        return {"index": seq, "body": body, "proof": [h.hex() for h in proof]}

    signers: set[str] = set()
    for e in [entry, *reviews]:
        signers.update(s["keyid"] for s in json.loads(e.body)["signatures"])
    all_keys = store.keys()
    key_seqs = sorted({all_keys[k].seq for k in signers if k in all_keys} | {ledger_key(store).seq})
    doc = {
        "mediaType": BUNDLE_TYPE,
        "id": entry.entry_id,
        "checkpoint": inc.note.decode(),
        "entry": item(entry.seq, entry.body),
        "reviews": [item(r.seq, r.body) for r in reviews],
        "keys": [item(k.seq, k.body) for k in store.entries_at(key_seqs)],
    }
    return canonical_bytes(doc)


@dataclass
class BundleReport:
    id: str
    kind: str
    log_origin: str
    log_size: int
    signer: str
    anchor: str
    """Which trusted key the verification rests on."""
    statement: dict[str, Any]
    reviews: list[dict[str, Any]] = field(default_factory=list)
    """Reviews logged up to `log_size`, vouched for by a trusted ledger key.
    Each is proven to be in the log; that the list is complete is not."""
    unanchored_reviews: list[dict[str, Any]] = field(default_factory=list)
    """Reviews in a log no trusted key vouches for (anchor = the signer): shown, never counted."""


def _fail(reason: str) -> VerificationError:
    return VerificationError(f"bundle: {reason}")


def _hexes(values: Any, what: str) -> list[bytes]:
    if not isinstance(values, list):
        raise _fail(f"{what} is not a list")
    out = []
    for v in values:
        try:
            b = bytes.fromhex(v)
        except (TypeError, ValueError):
            raise _fail(f"{what} holds a non-hex value") from None
        if len(b) != 32 or b.hex() != v:
            raise _fail(f"{what} holds a malformed hash")
        out.append(b)
    return out


def verify_bundle(raw: bytes, trust: list[Ed25519PublicKey]) -> BundleReport:
    """Verify a bundle offline against trusted public keys.

    The trust anchor is the ledger key that signed the checkpoint; the
    receipt's signer may be trusted directly instead (then the log proofs are
    still checked against the checkpoint, but its signature is not required
    to come from a trusted key).
    """
    if not trust:
        raise UsageError("offline verification needs at least one --trust PEM")
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _fail(f"not JSON ({e})") from None
    if not isinstance(doc, dict) or doc.get("mediaType") != BUNDLE_TYPE:
        raise _fail(f"not a {BUNDLE_TYPE} document")
    if canonical_bytes(doc) != raw:
        raise _fail("not in canonical form: the file was modified after export")
    trusted = {key_id(k): k for k in trust}
    try:
        note = doc["checkpoint"].encode()
        cp = parse_checkpoint(note)
        entry, reviews, key_entries = doc["entry"], doc["reviews"], doc["keys"]
    except (KeyError, AttributeError, TypeError) as e:
        raise _fail(f"missing or malformed field {e}") from None
    except CheckpointError as e:
        raise _fail(f"checkpoint: {e}") from None

    def included(item: Any, what: str) -> bytes:
        try:
            index, body = int(item["index"]), item["body"].encode()
        except (KeyError, TypeError, ValueError, AttributeError):
            raise _fail(f"{what} is malformed") from None
        try:
            merkle.verify_inclusion(
                index, cp.size, merkle.leaf_hash(body), _hexes(item.get("proof"), what), cp.root
            )
        except merkle.MerkleError as e:
            raise _fail(f"{what} is not in the checkpointed log: {e}") from None
        return bytes(body)

    # Key entries first: the log vouches for each signer's key and role.
    keys: dict[str, KeyInfo] = {}
    for i, item in enumerate(key_entries if isinstance(key_entries, list) else []):
        body = json.loads(included(item, f"keys[{i}]"))
        try:
            pub = Ed25519PublicKey.from_public_bytes(
                base64.b64decode(body["public_key"], validate=True)
            )
        except (KeyError, ValueError, binascii.Error):
            raise _fail(f"keys[{i}] is not a key entry") from None
        if body.get("kind") != "key" or key_id(pub) != body.get("keyid"):
            raise _fail(f"keys[{i}] is not a valid key entry")
        keys[body["keyid"]] = KeyInfo(
            body["keyid"], body["name"], body["role"], pub, int(item["index"])
        )

    # The checkpoint must be signed by the bundle's own ledger key whatever the
    # anchor; only a trusted ledger key makes the log (and so its reviews) vouched for.
    anchor = None
    ledger_keys = [k for k in keys.values() if k.role == "ledger"]
    if not ledger_keys:
        raise _fail("no ledger key entry: the checkpoint cannot be checked")
    for info in ledger_keys:
        try:
            verify_checkpoint(note, key_name=info.name, public_key=info.public)
        except CheckpointError as e:
            raise _fail(f"checkpoint: {e}") from None
        if info.keyid in trusted:
            anchor = f"ledger key {info.name} ({info.keyid[:12]})"
    log_anchored = anchor is not None

    def verified(item: Any, what: str) -> Verified:
        body = included(item, what)
        try:
            env = Envelope.model_validate_json(body)
            return verify_envelope(env, keys, at_seq=int(item["index"]))
        except (RefusedError, VerificationError) as e:
            raise _fail(f"{what}: {e.reason()}") from None
        except ValueError:
            raise _fail(f"{what} is not a DSSE envelope") from None

    v = verified(entry, "entry")
    if v.id != doc.get("id"):
        raise _fail(f"id {doc.get('id')} does not match the payload's digest {v.id}")
    if anchor is None:
        if v.signer in trusted:
            anchor = f"signer {keys[v.signer].name} ({v.signer[:12]})"
        else:
            raise _fail("neither the checkpoint's ledger key nor the signer is in --trust")

    report = BundleReport(
        id=v.id,
        kind=v.kind,
        log_origin=cp.origin,
        log_size=cp.size,
        signer=v.signer,
        anchor=anchor,
        statement=json.loads(v.payload),
    )
    for i, item in enumerate(reviews if isinstance(reviews, list) else []):
        rv = verified(item, f"reviews[{i}]")
        if not isinstance(rv.statement, ReviewStatement):
            raise _fail(f"reviews[{i}] is not a review")
        if rv.statement.predicate.receipt != v.id:
            raise _fail(f"reviews[{i}] reviews another receipt")
        (report.reviews if log_anchored else report.unanchored_reviews).append(
            {
                "id": rv.id,
                "verdict": rv.statement.predicate.verdict,
                "signer": rv.signer,
                "note": rv.statement.predicate.note,
            }
        )
    return report
