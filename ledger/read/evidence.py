"""The evidence a question is answered from: the receipts and reviews the ledger holds
on a revision (its repository's, under its id and every id aliased to it), each with
how its signer stands in the key table now, and the entries the index names that do not
read. Read once per question (`read_evidence`), here from the store or, from a server,
in one request (`Evidence.from_json` of what `POST /v1/evidence` sends), never one
request per receipt. One gathering (`gathered`) turns the entries selected into the
evidence, wherever they were selected: the store here, the log a client holds and
checks a server's answer on (`read/checked.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ledger.evidence.entry import LoggedEntry, ReceiptRevocation
from ledger.evidence.errors import Error, RefusedError
from ledger.evidence.keys import KeyInfo
from ledger.evidence.models import QualificationStatement
from ledger.identity.repoid import canonical_repo
from ledger.identity.revision import Revision
from ledger.qualification.evidence import ReceiptEvidence, ReviewEvidence
from ledger.qualification.revocation import with_revocations
from ledger.verify.standing import standing

if TYPE_CHECKING:
    # A type only: the client that checks a server gathers evidence without the store
    # (and the database libraries it loads).
    from ledger.store.store import Store

__all__ = ["Evidence", "gathered", "load_evidence", "read_evidence", "repo_ids", "selection"]


@dataclass(frozen=True, slots=True)
class Evidence:
    """What the ledger holds on a revision, and the entries it could not read."""

    receipts: list[ReceiptEvidence]
    reviews: list[ReviewEvidence]
    unreadable: list[str] = field(default_factory=list)
    """One line per entry the index names that does not parse (`ledger audit` says why)."""

    def to_json(self) -> dict[str, Any]:
        """What `POST /v1/evidence` sends: each entry's statement as logged, with how
        its signer stands (the server's key table)."""
        return {
            "receipts": [
                {
                    **_signed(r),
                    "statement": r.statement.model_dump(mode="json", by_alias=True),
                    # Only where revoked: an earlier client reads no such field.
                    **({"revocation": _revocation(r)} if r.revocation is not None else {}),
                }
                for r in self.receipts
            ],
            "reviews": [
                {**_signed(r), "receipt": r.receipt, "verdict": r.verdict, "note": r.note}
                for r in self.reviews
            ],
            "unreadable": list(self.unreadable),
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Evidence:
        """A server's evidence read back (its word on each signer's standing)."""
        try:
            receipts = [
                ReceiptEvidence(
                    statement=QualificationStatement.model_validate(r["statement"]),
                    **_signer_fields(r),
                )
                for r in doc.get("receipts") or []
            ]
            reviews = [
                ReviewEvidence(
                    receipt=str(r["receipt"]),
                    verdict=r["verdict"],
                    note=str(r["note"]),
                    **_signer_fields(r),
                )
                for r in doc.get("reviews") or []
            ]
            # Each revocation as the server logged it, weighed here against the reviews.
            revoked = {
                str(r["id"]): ReceiptRevocation(
                    int(v["seq"]),
                    str(r["id"]),
                    str(v["reason"]),
                    _text_or_none(v.get("review")),
                    by=_by(v),
                    signer=_text_or_none(v.get("signer")),
                    problem=_text_or_none(v.get("problem")),
                )
                for r in doc.get("receipts") or []
                if isinstance(v := r.get("revocation"), Mapping)
            }
        except (KeyError, TypeError, ValueError) as e:
            raise RefusedError(f"the server's evidence does not read: {e}") from None
        receipts = with_revocations(receipts, reviews, revoked)
        return cls(receipts, reviews, [str(u) for u in doc.get("unreadable") or []])


def _revocation(r: ReceiptEvidence) -> dict[str, Any]:
    rev = r.revocation
    assert rev is not None
    # Its signature as the server checked it (a server of an earlier release says
    # nothing: its revocations were unsigned, and read so).
    return {
        "seq": rev.seq,
        "reason": rev.reason,
        "review": rev.review,
        "by": rev.by,
        "signer": rev.signer,
        "problem": rev.problem,
    }


def _by(rev: Mapping[str, Any]) -> str:
    """Whose word a revocation is: a reviewer's where it says so, else the operator's
    (a server of an earlier release says nothing: its revocations were the operator's)."""
    return "reviewer" if rev.get("by") == "reviewer" else "operator"


def _text_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


_SIGNER_FIELDS = (
    "id",
    "seq",
    "signer",
    "signer_role",
    "signer_revoked_seq",
    "signer_registered_by",
    "problem",
)


def _signed(r: ReceiptEvidence | ReviewEvidence) -> dict[str, Any]:
    return {k: getattr(r, k) for k in _SIGNER_FIELDS}


def _signer_fields(doc: Mapping[str, Any]) -> dict[str, Any]:
    return {k: doc.get(k) for k in _SIGNER_FIELDS}


def _unreadable(e: LoggedEntry, err: Error) -> str:
    return (
        f"entry {e.seq} ({e.entry_id[:19]}) cannot be read: {err.reason()};"
        " it counts for nothing here: run `ledger audit`"
    )


def read_evidence(
    store: Store, revision: Revision, claims: Sequence[str] | None = None
) -> Evidence:
    """The receipts (and their reviews) of the revision's repository that bear on it."""
    # The asked id is canonical already; normalising again is idempotent and covers a
    # question posted with a raw URL. Ids the operator aliased to it count as it.
    entries: list[LoggedEntry] = []
    for repo_id in repo_ids(store, revision.repo):
        entries += store.receipt_entries(repo_id, **selection(revision, claims))
    return gathered(entries, store.keys(), store.review_entries, store.revoked_receipts)


def selection(revision: Revision, claims: Sequence[str] | None) -> dict[str, Any]:
    """What selects the receipts that could bear on a revision, by the index's columns:
    the store's `receipt_entries` and the client's log (`read/log_cache.py`) alike."""
    return {
        # With the environment in the package identity, an upgrade changes the digest:
        # the parents' receipts are read too, so status can name the part that differed
        # instead of finding no evidence.
        "commits": [revision.commit, *(revision.parents if revision.package_parts else ())],
        "trees": [revision.tree],
        # Receipts recorded before the package identity covered the workload definition
        # name the digest without it: found, then judged by their commit's definition
        # (`proved`).
        "packages": [d for d in (revision.package_digest, revision.prior_package_digest) if d],
        "pr": revision.pr,
        "claims": list(claims) if claims else None,
    }


def gathered(
    entries: Iterable[LoggedEntry],
    keys: Mapping[str, KeyInfo],
    reviews_of: Callable[[list[str]], Iterable[LoggedEntry]],
    revocations_of: Callable[[list[str]], Mapping[str, ReceiptRevocation]],
) -> Evidence:
    """The evidence in `entries` (a revision's receipts, wherever they were selected:
    the server's store, the log a client holds): each signer as `keys` stands, the
    reviews of the receipts that read (`reviews_of`), each revocation
    (`revocations_of`) weighed by the judge's rule, and what does not read named."""

    def signed(e: LoggedEntry) -> dict[str, Any]:
        """What both kinds of evidence say about an entry's signature."""
        info: KeyInfo | None = keys.get(e.signer)
        return {
            "id": e.entry_id,
            "seq": e.seq,
            "signer": e.signer,
            "signer_role": info.role if info else "unknown",
            "signer_revoked_seq": info.revoked_seq if info else None,
            "signer_registered_by": info.registered_by if info else None,
            "problem": standing(e, keys),
        }

    unreadable: list[str] = []
    receipts: list[ReceiptEvidence] = []
    for e in sorted(entries, key=lambda e: e.seq):
        try:
            receipts.append(ReceiptEvidence(statement=e.receipt, **signed(e)))
        except Error as err:
            unreadable.append(_unreadable(e, err))
    reviews: list[ReviewEvidence] = []
    for e in reviews_of([r.id for r in receipts]):
        try:
            p = e.review.predicate
            reviews.append(
                ReviewEvidence(receipt=p.receipt, verdict=p.verdict, note=p.note, **signed(e))
            )
        except Error as err:
            unreadable.append(_unreadable(e, err))
    # A revoked receipt carries its revocation, weighed by the judge's rule.
    revoked = revocations_of([r.id for r in receipts])
    return Evidence(with_revocations(receipts, reviews, revoked), reviews, unreadable)


def repo_ids(store: Store, repo: str) -> list[str]:
    """The repository's canonical id, then the earlier ids aliased to it."""
    from ledger.identity.aliases import aliases_of

    want = canonical_repo(repo)
    return [want, *aliases_of(store, want)]


def load_evidence(
    store: Store, revision: Revision, claims: Sequence[str] | None = None
) -> tuple[list[ReceiptEvidence], list[ReviewEvidence]]:
    ev = read_evidence(store, revision, claims)
    return ev.receipts, ev.reviews
