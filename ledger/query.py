"""`status` and `history`: load the evidence about a revision and ask the engine.

The store verifies each loaded entry again (signature, key, role), so an
entry that no longer holds shows as unverified instead of counting.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger import source as src
from ledger.entries import payload_of, signer_of
from ledger.errors import Error
from ledger.ingest import verify_envelope
from ledger.models import Envelope, QualificationStatement, ReviewStatement
from ledger.plan import Plan
from ledger.qualification import (
    HistoryItem,
    ReceiptEvidence,
    ReviewEvidence,
    Revision,
    StatusReport,
    evaluate,
    history,
)
from ledger.source import PLAN_FILE, plan_at
from ledger.store.store import KeyInfo, Store
from ledger.store.tables import LogEntry
from ledger.verify import keys_at

__all__ = ["PLAN_FILE", "Query", "load_evidence", "query_history", "query_status"]


@dataclass(frozen=True, slots=True)
class Query:
    revision: Revision
    plan: Plan | None


def resolve_query(
    repo_path: Path | None, *, rev: str | None, pr: int | None, plan_file: Path | None
) -> Query:
    repo = src.open_repo(repo_path)
    bare = src.resolve(repo, rev=rev, pr=pr, identity_only=True)
    plan = plan_at(repo, bare.commit, plan_file)
    paths = list(plan.package.paths) if plan is not None and plan.package else []
    package = src.package_identity(repo.commit(bare.commit), paths) if paths else None
    return Query(
        Revision(
            repo=bare.repo_name,
            commit=bare.commit,
            tree=bare.tree,
            package_digest=package.digest if package else None,
            pr=pr,
        ),
        plan,
    )


def _problem(body: str, keys: dict[str, KeyInfo], seq: int) -> str | None:
    """Why a logged entry no longer verifies, or None when it does."""
    try:
        verify_envelope(Envelope.model_validate(json.loads(body)), keys, at_seq=seq)
    except Error as e:
        return e.reason()
    except ValueError:
        return "entry is not a DSSE envelope"
    return None


def load_evidence(
    store: Store, revision: Revision, claims: Sequence[str] | None = None
) -> tuple[list[ReceiptEvidence], list[ReviewEvidence]]:
    entries = store.receipt_entries(
        commits=[revision.commit],
        trees=[revision.tree],
        packages=[revision.package_digest] if revision.package_digest else [],
        pr=revision.pr,
        repo=revision.repo,
        claims=claims or None,
    )
    all_keys = store.keys()

    def signed(e: LogEntry) -> dict[str, Any]:
        """What both kinds of evidence say about an entry's signature."""
        signer = signer_of(e.body)
        info = all_keys.get(signer)
        return {
            "id": e.entry_id,
            "seq": e.seq,
            "signer": signer,
            "signer_role": info.role if info else "unknown",
            "signer_revoked_seq": info.revoked_seq if info else None,
            "problem": _problem(e.body, keys_at(store, e.seq), e.seq),
        }

    # A body that no longer parses was altered behind the ledger's back: it
    # counts for nothing here, and `audit` names it.
    receipts: list[ReceiptEvidence] = []
    for e in entries:
        try:
            stmt = QualificationStatement.model_validate_json(payload_of(e.body))
        except ValueError:
            continue
        receipts.append(ReceiptEvidence(statement=stmt, **signed(e)))
    reviews: list[ReviewEvidence] = []
    for e in store.review_entries([r.id for r in receipts]):
        try:
            p = ReviewStatement.model_validate_json(payload_of(e.body)).predicate
        except ValueError:
            continue
        reviews.append(
            ReviewEvidence(receipt=p.receipt, verdict=p.verdict, note=p.note, **signed(e))
        )
    return receipts, reviews


def query_status(
    store: Store,
    q: Query,
    *,
    claims: Sequence[str] | None,
    scope: dict[str, str | int],
) -> StatusReport:
    receipts, reviews = load_evidence(store, q.revision)
    return evaluate(
        plan=q.plan,
        revision=q.revision,
        receipts=receipts,
        reviews=reviews,
        claims=list(claims) if claims else None,
        query_scope=scope,
    )


def query_history(store: Store, q: Query) -> list[HistoryItem]:
    receipts, reviews = load_evidence(store, q.revision)
    return history(receipts, reviews)
