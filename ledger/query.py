"""The read side: `status`, `history` and `show` answered from the store.

Each loaded entry is verified again (signature, key, role), so an entry that
no longer holds shows as unverified instead of counting.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from ledger.entry import LoggedEntry
from ledger.errors import Error
from ledger.keys import KeyInfo
from ledger.qualification import (
    HistoryItem,
    ReceiptEvidence,
    ReviewEvidence,
    StatusReport,
    evaluate,
    history,
)
from ledger.repoid import canonical_repo
from ledger.revision import Revision
from ledger.source import Identity
from ledger.store.store import Store
from ledger.verify.envelope import verify_entry
from ledger.verify.logged import keys_at

__all__ = [
    "history_document",
    "load_evidence",
    "query_history",
    "query_status",
    "show_document",
]


def _problem(entry: LoggedEntry, keys: Mapping[str, KeyInfo]) -> str | None:
    """Why a logged entry no longer verifies, or None when it does."""
    try:
        verify_entry(entry, keys)
    except Error as e:
        return e.reason()
    return None


def _repo_of(e: LoggedEntry) -> str | None:
    try:
        return canonical_repo(e.receipt.predicate.source.repo)
    except Error:
        return None


def load_evidence(
    store: Store, revision: Revision, claims: Sequence[str] | None = None
) -> tuple[list[ReceiptEvidence], list[ReviewEvidence]]:
    # The repository is matched through the same normalisation that made the
    # asked id, so receipts logged under a raw URL form still count.
    entries = [
        e
        for e in store.receipt_entries(
            # With the environment in the package identity, an upgrade changes the
            # digest: the parents' receipts are read too, so status can name the part
            # that differed instead of finding no evidence.
            commits=[revision.commit, *(revision.parents if revision.package_parts else ())],
            trees=[revision.tree],
            packages=[revision.package_digest] if revision.package_digest else [],
            pr=revision.pr,
            repo=None,
            claims=claims or None,
        )
        if _repo_of(e) == revision.repo
    ]
    all_keys = store.keys()

    def signed(e: LoggedEntry) -> dict[str, Any]:
        """What both kinds of evidence say about an entry's signature."""
        info = all_keys.get(e.signer)
        return {
            "id": e.entry_id,
            "seq": e.seq,
            "signer": e.signer,
            "signer_role": info.role if info else "unknown",
            "signer_revoked_seq": info.revoked_seq if info else None,
            "signer_registered_by": info.registered_by if info else None,
            "problem": _problem(e, keys_at(store, e.seq)),
        }

    # A body that no longer parses was altered behind the ledger's back: it
    # counts for nothing here, and `audit` names it.
    receipts: list[ReceiptEvidence] = []
    for e in entries:
        try:
            stmt = e.receipt
        except Error:
            continue
        receipts.append(ReceiptEvidence(statement=stmt, **signed(e)))
    reviews: list[ReviewEvidence] = []
    for e in store.review_entries([r.id for r in receipts]):
        try:
            p = e.review.predicate
        except Error:
            continue
        reviews.append(
            ReviewEvidence(receipt=p.receipt, verdict=p.verdict, note=p.note, **signed(e))
        )
    return receipts, reviews


def query_status(
    store: Store,
    q: Identity,
    *,
    claims: Sequence[str] | None,
    scope: Mapping[str, str | int],
) -> StatusReport:
    receipts, reviews = load_evidence(store, q.revision)
    report = evaluate(
        plan=q.plan,
        revision=q.revision,
        receipts=receipts,
        reviews=reviews,
        claims=list(claims) if claims else None,
        query_scope=dict(scope),
    )
    return dataclasses.replace(report, notes=q.notes)


def query_history(store: Store, q: Identity) -> list[HistoryItem]:
    receipts, reviews = load_evidence(store, q.revision)
    return history(receipts, reviews)


def history_document(q: Identity, items: Sequence[HistoryItem]) -> dict[str, Any]:
    """What `ledger history --json` prints."""
    return {
        "subject": q.revision.to_json(),
        "judged": list(q.notes),
        "entries": [i.to_json() for i in items],
    }


def show_document(store: Store, ref: str) -> dict[str, Any]:
    """What `ledger show --json` prints (and the server's GET /v1/entries/ID returns)."""
    e = store.resolve(ref)
    info = store.keys().get(e.signer)
    reviews = [
        {"id": r.entry_id, **r.payload_document["predicate"]}
        for r in store.review_entries([e.entry_id])
    ]
    return {
        "id": e.entry_id,
        "kind": e.kind,
        "seq": e.seq,
        "logged_at": e.logged_at,
        "signer": {
            "keyid": e.signer,
            "name": info.name if info else None,
            "role": info.role if info else None,
        },
        "statement": e.payload_document,
        "reviews": reviews,
    }
