"""Offline verification of an exported bundle (no database needed).

A bundle is one canonical JSON document: the receipt's log entry, its
reviews' entries and the key entries of every signer, each with an inclusion
proof against one signed checkpoint. Every byte is covered: entry bodies by
the proofs, proofs by the checkpoint root, the checkpoint by the ledger's
signature, and the layout by the canonical-form check.
"""

from __future__ import annotations

import json
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from ledger._internal import merkle
from ledger._internal.checkpoint import (
    Checkpoint,
    key_hint,
    parse_checkpoint,
    verify_by_key,
    verify_checkpoint,
)
from ledger.evidence.canonical import canonical_bytes
from ledger.evidence.entry import LoggedEntry, first_revocations
from ledger.evidence.errors import Error, InputError, UsageError, VerificationError
from ledger.evidence.keys import KeyInfo, key_id
from ledger.evidence.kinds import BUNDLE_TYPE
from ledger.evidence.limits import load_json
from ledger.verify.envelope import Verified, verify_envelope
from ledger.verify.facts import Registry, revoked_receipt
from ledger.verify.report import LogState, VerificationReport, review_item

__all__ = ["BUNDLE_TYPE", "verify_bundle"]


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


def _included(cp: Checkpoint, item: Any, what: str, kind: str) -> LoggedEntry:
    """The entry of a bundle item, once its inclusion in the checkpointed log holds."""
    try:
        index, body = item["index"], item["body"].encode()
        # Bundles exported before leaves committed to the logging time carry
        # none; their leaf is the body's alone (a stripped time changes the
        # leaf, so the signed root still decides).
        logged_at = item.get("logged_at")
    except (KeyError, TypeError, AttributeError, UnicodeEncodeError):
        # UnicodeEncodeError: a lone surrogate escape (\ud800) in the JSON string.
        raise _fail(f"{what} is malformed") from None
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        raise _fail(f"{what} is malformed")
    if logged_at is not None and not isinstance(logged_at, str):
        raise _fail(f"{what} is malformed")
    leaf = (
        merkle.leaf_hash(body) if logged_at is None else merkle.entry_leaf(index, logged_at, body)
    )
    try:
        merkle.verify_inclusion(
            index,
            cp.size,
            leaf,
            _hexes(item.get("proof"), what),
            cp.root,
        )
    except merkle.MerkleError as e:
        raise _fail(f"{what} is not in the checkpointed log: {e}") from None
    return LoggedEntry(index, kind, "", body, logged_at)


def _trusted_signer(
    cp: Checkpoint, note: bytes, trusted: dict[str, Ed25519PublicKey]
) -> str | None:
    """The id of a trusted key whose signature line on the checkpoint verifies, if any."""
    for sig in cp.signatures:
        for kid, pub in trusted.items():
            if sig.key_hint != key_hint(sig.name, pub):
                continue
            try:
                verify_checkpoint(note, key_name=sig.name, public_key=pub)
            except Error:
                continue
            return kid
    return None


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _bundle_keys(cp: Checkpoint, key_entries: Any) -> dict[str, KeyInfo]:
    """The keys the checkpointed log vouches for: each entry proven included, then parsed."""
    included = [
        _included(cp, item, f"keys[{i}]", "key") for i, item in enumerate(_list(key_entries))
    ]
    keys: dict[str, KeyInfo] = {}
    for i, logged in enumerate(included):
        try:
            info = logged.key()
        except Error:
            raise _fail(f"keys[{i}] is not a valid key entry") from None
        keys[info.keyid] = info
    return keys


def _revocations(
    cp: Checkpoint, items: Any, keys: dict[str, KeyInfo], receipt: Any
) -> tuple[LoggedEntry, ...]:
    """The bundle's revocation entries (bundles of earlier releases carry none), each
    proven included; a key's applies to `keys` (the first one counts), and a receipt's
    must be of this bundle's receipt. Returns the receipt's revocations."""
    mine = []
    included = [
        _included(cp, item, f"revocations[{i}]", "revocation")
        for i, item in enumerate(_list(items))
    ]
    # In log order: a key revocation's signature is checked by the keys as the
    # revocations before it left them.
    for i, logged in sorted(enumerate(included), key=lambda p: p[1].seq):
        what = f"revocations[{i}]"
        try:
            if logged.revokes_receipt:
                if logged.receipt_revocation().receipt != receipt:
                    raise _fail(f"{what} revokes another receipt")
                mine.append(logged)
                continue
            keyid, reason = logged.revocation()
        except Error as e:
            if isinstance(e, VerificationError):
                raise
            raise _fail(f"{what} is not a valid revocation entry") from None
        info = keys.get(keyid)
        if info is None or (info.revoked_seq is not None and info.revoked_seq <= logged.seq):
            continue
        # Counted only as signed by a key that may assert it (or of the unsigned form
        # earlier releases logged): `ledger.evidence.signed_revocation`.
        if logged.revocation_signature(keys).problem is None:
            keys[keyid] = info._replace(revoked_seq=logged.seq, revoked_reason=reason)
    return tuple(sorted(mine, key=lambda e: e.seq))


def _revoked_before(e: LoggedEntry, keys: dict[str, KeyInfo]) -> str:
    """Where a signer's key was revoked before `e` was logged, in words; else ''."""
    try:
        signers = e.signers
    except Error:
        return ""
    for k in signers:
        at = keys[k].revoked_seq if k in keys else None
        if at is not None and at < e.seq:
            return (
                f" (revoked at entry {at}, before entry {e.seq} was logged;"
                " the time a statement gives itself does not count)"
            )
    return ""


def _ledger_anchor(note: bytes, keys: dict[str, KeyInfo], signed_by: str | None) -> str | None:
    """The checkpoint must be signed by a ledger key of the bundle whatever the
    anchor (after a rotation the bundle names older ledger keys too); only a
    trusted ledger key makes the log (and so its reviews) vouched for: then it
    is the anchor, else None."""
    ledger_keys = [k for k in keys.values() if k.role == "ledger"]
    if not ledger_keys:
        raise _fail("no ledger key entry: the checkpoint cannot be checked")
    signer = None
    problem = ""
    for info in ledger_keys:
        try:
            verify_by_key(note, info.public)
        except Error as e:
            problem = problem or e.reason()
            continue
        if signer is None or info.keyid == signed_by:
            signer = info
    if signer is None:
        raise _fail(f"checkpoint: {problem}")
    if signed_by is not None and signed_by in keys and keys[signed_by].role == "ledger":
        return f"ledger key {keys[signed_by].name} ({signed_by[:12]})"
    return None


def verify_bundle(raw: bytes, trust: list[Ed25519PublicKey]) -> VerificationReport:
    """Verify a bundle offline against trusted public keys.

    The trust anchor is the ledger key that signed the checkpoint; the
    receipt's signer may be trusted directly instead (then the log proofs are
    still checked against the checkpoint, but its signature is not required
    to come from a trusted key).
    """
    if not trust:
        raise UsageError("offline verification needs at least one --trust PEM")
    try:
        doc = load_json(raw, "file")
    except InputError as e:
        raise _fail(e.reason()) from None
    if not isinstance(doc, dict) or doc.get("mediaType") != BUNDLE_TYPE:
        raise _fail(f"not a {BUNDLE_TYPE} document")
    if canonical_bytes(doc) != raw:
        raise _fail("not in canonical form: the file was modified after export")
    trusted = {key_id(k): k for k in trust}
    try:
        note = doc["checkpoint"].encode()
        entry, reviews, key_entries = doc["entry"], doc["reviews"], doc["keys"]
    except (KeyError, AttributeError, TypeError) as e:
        raise _fail(f"missing or malformed field {e}") from None
    try:
        cp = parse_checkpoint(note)
    except Error as e:
        raise _fail(f"checkpoint: {e.reason()}") from None

    # The checkpoint's signature is checked against --trust before any key
    # entry is parsed: a trusted ledger key vouches for every byte below it.
    signed_by = _trusted_signer(cp, note, trusted)
    keys = _bundle_keys(cp, key_entries)
    anchor = _ledger_anchor(note, keys, signed_by)
    log_anchored = anchor is not None
    revoked = _revocations(cp, doc.get("revocations"), keys, doc.get("id"))

    def verified(item: Any, what: str) -> Verified:
        e = _included(cp, item, what, "entry")
        try:
            return verify_envelope(e.envelope, keys, at_seq=e.seq)
        except Error as err:
            # By log position, never by the time a statement gives itself: a key
            # revoked before the entry was logged signs nothing that counts.
            raise _fail(f"{what}: {err.reason()}{_revoked_before(e, keys)}") from None

    v = verified(entry, "entry")
    if v.id != doc.get("id"):
        raise _fail(f"id {doc.get('id')} does not match the payload's digest {v.id}")
    if anchor is None:
        if v.signer in trusted:
            anchor = f"signer {keys[v.signer].name} ({v.signer[:12]})"
        else:
            raise _fail("neither the checkpoint's ledger key nor the signer is in --trust")

    report = VerificationReport(
        id=v.id,
        kind=v.kind,
        signer=v.signer,
        signer_name=keys[v.signer].name,
        signer_role=keys[v.signer].role,
        anchor=anchor,
        log=LogState(
            index=int(entry["index"]),
            size=cp.size,
            origin=cp.origin,
            inclusion=f"verified against the signed checkpoint at size {cp.size}",
            time=cp.timestamp,
        ),
        statement=json.loads(v.payload),
        reviews=[],
        unanchored_reviews=[],
        signer_seq=keys[v.signer].seq,
    )
    sound: list[tuple[Any, ...]] = []
    for i, item in enumerate(_list(reviews)):
        rv = verified(item, f"reviews[{i}]")
        if rv.kind != "review":
            raise _fail(f"reviews[{i}] is not a review")
        if rv.document["predicate"]["receipt"] != v.id:
            raise _fail(f"reviews[{i}] reviews another receipt")
        (report.reviews if log_anchored else report.unanchored_reviews).append(
            review_item(rv, keys)
        )
        if log_anchored:
            p = rv.document["predicate"]
            sound.append((rv.id, p["verdict"], rv.signer, int(item["index"])))
    key = keys[v.signer]
    receipt_revoked = None
    if revoked:
        revs = first_revocations(e.receipt_revocation(keys) for e in revoked)
        receipt_revoked = revoked_receipt(
            revs[v.id], str(report.statement.get("predicate", {}).get("outcome")), v.signer, sound
        )
    registry = Registry(
        as_of=cp.size,
        source="bundle",
        key_revoked=None
        if key.revoked_seq is None
        else (key.revoked_seq, key.revoked_reason or ""),
        receipt_revoked=receipt_revoked,
    )
    return report._replace(registry=registry).with_facts()
