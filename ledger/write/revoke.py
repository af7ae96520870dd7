"""`ledger revoke ID --reason TEXT [--review ID]`: one receipt void from here on.

A `revocation` entry naming the receipt (not a key), logged by the ledger's
operator on its host. Checked before anything is written, with the judge's own
rule (`ledger.qualification.revocation`): a counterexample is revoked only on an
independent reviewer's dispute of it, named by `--review`, so revoking is never
a way around what a supersession of it needs. A refusal writes nothing.

Over HTTP (`--server`, `POST /v1/receipts/ID/revoke`): an operator token revokes as
on the host; a reviewer token only on its own dispute of the receipt (`--review`),
logged as a reviewer's, which counts for a pass only where the plan says so
(`[review] revoke_pass`, weighed by the judge: the write path knows no plan).

Each revocation is signed by its authority (`write/revocation_signing.py`): the
operator's ledger key, or the reviewer key that signed the dispute; over HTTP the
client signs and the server checks the signature before logging it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection

from ledger.evidence import limits
from ledger.evidence.canonical import receipt_id
from ledger.evidence.entry import LoggedEntry, ReceiptRevocation, receipt_revocation_body
from ledger.evidence.errors import InputError, RefusedError, UsageError
from ledger.evidence.keys import KeyInfo, LocalKey
from ledger.qualification.evidence import ReceiptEvidence, ReviewEvidence, short_id
from ledger.qualification.revocation import authority, missing_review, needs_review
from ledger.store.store import RECEIPT_REVOCATION, Store, utc_now
from ledger.verify.standing import standing
from ledger.write.revocation_signing import asserted, signed_entry

__all__ = ["revoke_receipt"]


def _evidence(entry: LoggedEntry, keys: Mapping[str, KeyInfo]) -> ReceiptEvidence:
    info = keys.get(entry.signer)
    return ReceiptEvidence(
        id=entry.entry_id,
        seq=entry.seq,
        statement=entry.receipt,
        signer=entry.signer,
        signer_role=info.role if info else "unknown",
        signer_revoked_seq=info.revoked_seq if info else None,
        problem=standing(entry, keys),
    )


def _review(
    store: Store, ref: str, r: ReceiptEvidence, keys: Mapping[str, KeyInfo], by: str, signer: str
) -> str:
    """The full id of review `ref` of `r`, once it is the independent dispute a
    counterexample's revocation needs (a reviewer's own: signed by `signer`, the key
    that signs the revocation); RefusedError saying what it lacks."""
    entry = store.resolve(ref)
    if entry.kind != "review":
        raise RefusedError(f"--review {ref}: a {entry.kind}, not a review")
    p = entry.review.predicate
    info = keys.get(entry.signer)
    v = ReviewEvidence(
        id=entry.entry_id,
        seq=entry.seq,
        receipt=p.receipt,
        verdict=p.verdict,
        note=p.note,
        signer=entry.signer,
        signer_role=info.role if info else "unknown",
        signer_revoked_seq=info.revoked_seq if info else None,
        problem=standing(entry, keys),
    )
    if authority(r, v.id, store.size(), [v], by, signer) is None:
        rid, vid = short_id(r.id), short_id(v.id)
        why = (
            f"it reviews {short_id(v.receipt)}"
            if v.receipt != r.id
            else f"it {v.verdict}s"
            if v.verdict != "dispute"
            else "it is signed by the counterexample's own signer"
            if v.signer == r.signer
            else "a reviewer revokes on its own dispute: it is signed by another key"
            if by == "reviewer" and v.signer != signer
            else f"it does not count ({v.problem or 'not a reviewer key'})"
        )
        need = missing_review(r) if needs_review(r) else "a reviewer revokes on its own dispute"
        raise RefusedError(f"review {vid} is not an independent dispute of {rid}: {why}; {need}")
    return v.id


def revoke_receipt(
    store: Store,
    ref: str,
    reason: str,
    review: str | None = None,
    by: str = "operator",
    revoked_by: str | None = None,
    *,
    key: LocalKey | None = None,
    envelope: Mapping[str, Any] | None = None,
) -> ReceiptRevocation:
    """Log the revocation of receipt `ref` (id or unique prefix) with `reason`; a
    counterexample's needs `review`, an independent reviewer's dispute of it, and so
    does any revocation `by` a reviewer. `revoked_by`: the token holder over HTTP.

    Signed (`write/revocation_signing.py`) by `key`, on this host the operator's ledger
    key when None, or carried by a client's `envelope` (over HTTP): a ledger key for the
    operator's word, the reviewer key that signed the dispute for a reviewer's."""
    if by == "reviewer" and review is None:
        raise InputError("a reviewer revokes on its own dispute of the receipt: --review REVIEW_ID")
    if not reason.strip():
        # Over HTTP a bad request (400); on the host a usage error, as before.
        err = InputError if revoked_by is not None else UsageError
        raise err("a revocation needs a --reason")
    limits.check_text(reason, "--reason", limits.COLUMN_LIMITS["reason"])
    entry = store.resolve(ref)
    if entry.kind != "receipt":
        raise InputError(f"{entry.entry_id} is a {entry.kind}: only receipts are revoked")
    rid = entry.entry_id
    done = store.revoked_receipts([rid]).get(rid)
    if done is not None and done.problem is None:  # one that counts for nothing is no answer
        raise RefusedError(
            f"receipt {short_id(rid)} is already revoked (seq {done.seq}): {done.reason}"
        )
    keys = store.keys(fresh=True)
    r = _evidence(entry, keys)
    named: str | None = None
    when = utc_now() if envelope is None else str(asserted(envelope).get("revoked"))
    doc = receipt_revocation_body(rid, reason, when, review and store.resolve(review).entry_id, by)
    body, signer = signed_entry(store, doc, key, envelope, revoked_by)
    if review is not None:
        named = _review(store, review, r, keys, by, signer)
    elif authority(r, None, store.size(), []) is None:
        raise RefusedError(missing_review(r))
    with store.append_tx() as tx:

        def idx(conn: Connection, seq: int) -> None:
            conn.execute(
                RECEIPT_REVOCATION.insert().values(
                    seq=seq, receipt_id=rid, reason=reason, review=named
                )
            )

        seq = tx.add(kind="revocation", entry_id=receipt_id(body), body=body, index=idx)
    return ReceiptRevocation(seq, rid, reason, named, when, by, revoked_by, signer)
