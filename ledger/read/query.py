"""The read side: `status`, `history` and `show` answered from the store.

Only the asked repository's receipts are read (the index holds each
receipt's canonical repository id). Entries are parsed once per process
(`ledger.store.cache`) and judged by the key table as it stands
(`ledger.transparency.logged.standing`): signatures were verified at ingest and
are re-checked by `audit` and `verify`, not by every question. An entry the
index names but whose body no longer reads is a problem of the answer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ledger.identity.repoid import canonical_repo
from ledger.identity.revision import Revision
from ledger.plans.governing import Identity
from ledger.qualification import HistoryItem, ReceiptEvidence, StatusReport, history
from ledger.qualification.judge import Gathered, judge
from ledger.qualification.plan import Plan
from ledger.read.evidence import load_evidence, read_evidence, repo_ids
from ledger.read.whose import receipt_label

if TYPE_CHECKING:
    # A type only: `proved`, which the client that checks a server uses, needs no store.
    from ledger.store.store import Store

__all__ = [
    "definition_notes",
    "gather",
    "history_answer",
    "history_document",
    "proved",
    "quarantined_gpus",
    "query_history",
    "query_status",
    "show_document",
]


def _elsewhere_notes(store: Store, revision: Revision, claims: Sequence[str]) -> tuple[str, ...]:
    """Receipts of the asked claims for this exact commit under another repository id,
    and how to count them (one (claim, commit) index lookup per claim)."""
    from ledger.identity.aliases import elsewhere

    if not claims:
        return ()
    want = canonical_repo(revision.repo)
    return tuple(
        f"{n} receipt{'' if n == 1 else 's'} for this exact commit "
        f"{'is' if n == 1 else 'are'} recorded under repository {other}: "
        f"`ledger repo alias {other} {want} --reason TEXT` on the ledger's host counts them here"
        for other, n in elsewhere(store, revision.commit, repo_ids(store, want), claims)
    )


def quarantined_gpus(store: Store, plan: Plan | None) -> frozenset[str]:
    """The GPUs the fleet quarantines under the plan's ``quarantine_above`` (none without
    it): read from every receipt of the ledger, so only a plan that asks pays for it."""
    if plan is None or plan.quarantine_above is None:
        return frozenset()
    from ledger.fleet.report import fleet_report, quarantined, store_predicates

    return frozenset(quarantined(fleet_report(store_predicates(store)), plan.quarantine_above))


def proved(q: Identity, receipts: Sequence[ReceiptEvidence]) -> Revision:
    """The revision asked about, with what the checkout shows of the workload definition
    at each other commit whose receipts record none or another
    (`ledger.plans.definition.prove`): the engine reads no git, and is handed this."""
    from ledger.plans.definition import prove

    # Proofs are read here, never taken from the question (a posted subject's are dropped).
    rev = dataclasses.replace(q.revision, definition_proofs=())
    if rev.package_digest is None:
        return rev
    wanted: dict[str, str | None] = {}
    for r in receipts:
        src = r.predicate.source
        if src.commit == rev.commit or src.package is None or src.commit in wanted:
            continue
        recorded = (src.package.parts or {}).get("workload")
        if recorded != rev.definition:
            wanted[src.commit] = recorded
    if not wanted:
        return rev
    proofs = tuple(prove(q.definitions, c, recorded) for c, recorded in wanted.items())
    return dataclasses.replace(rev, definition_proofs=proofs)


def query_status(
    store: Store,
    q: Identity,
    *,
    claims: Sequence[str] | None,
    scope: Mapping[str, str | int],
) -> StatusReport:
    """The status answer: what the ledger holds on the revision gathered here, and
    decided once by the judge (`ledger.qualification.judge`); nothing here decides."""
    return judge(gather(store, q, claims=claims, scope=scope))


def gather(
    store: Store,
    q: Identity,
    *,
    claims: Sequence[str] | None,
    scope: Mapping[str, str | int],
) -> Gathered:
    """Everything the judge decides a status answer from, read from the store: the
    revision's evidence, the fleet's quarantine under the plan, and how to read the
    base's receipts, the fleet's counts and the receipts under other ids, where the
    judge needs them."""
    ev = read_evidence(store, q.revision)
    repo = q.revision.repo

    def base(commits: Sequence[str], blocking: Sequence[str]) -> list[ReceiptEvidence]:
        out: list[ReceiptEvidence] = []
        for commit in commits:
            at = Revision(repo=repo, commit=commit, tree="")
            out += read_evidence(store, at, list(blocking)).receipts
        return out

    return Gathered(
        plan=q.plan,
        revision=proved(q, ev.receipts),
        receipts=ev.receipts,
        reviews=ev.reviews,
        claims=list(claims) if claims else None,
        scope=dict(scope),
        quarantined=quarantined_gpus(store, q.plan),
        notes=q.notes,
        problems=q.problems,
        unreadable=tuple(ev.unreadable),
        base=base,
        fleet=lambda: _fleet_counts(store),
        elsewhere=lambda asked: _elsewhere_notes(store, q.revision, asked),
    )


def _fleet_counts(store: Store) -> dict[str, str]:
    """Per GPU, what `ledger fleet` counts there, in words."""
    from ledger.fleet.report import fleet_report, store_predicates

    out = {}
    for d in fleet_report(store_predicates(store))["devices"]:
        out[d["uuid"]] = (
            f"{d['failures']} failed and {d['infra_errors']} infra-error of {d['runs']} claim "
            f"runs on it, {d['device_faults']} with a device fault (`ledger fleet`)"
        )
    return out


def query_history(store: Store, q: Identity) -> list[HistoryItem]:
    receipts, reviews = load_evidence(store, q.revision)
    return history(receipts, reviews, _revoke_pass(q))


def history_answer(store: Store, q: Identity) -> dict[str, Any]:
    """What `ledger history --json` prints: the history document, with the
    entries that bear on it but cannot be read named under `problems`."""
    ev = read_evidence(store, q.revision)
    doc = history_document(q, history(ev.receipts, ev.reviews, _revoke_pass(q)))
    doc["judged"] += definition_notes(proved(q, ev.receipts))
    doc["problems"] = list(ev.unreadable)
    return doc


def _revoke_pass(q: Identity) -> str:
    """Who may revoke a pass under the governing plan (none known: the operator)."""
    return q.plan.review.revoke_pass if q.plan is not None else "operator"


def definition_notes(revision: Revision) -> list[str]:
    """Per other commit whose receipts record no workload definition or another, what
    the checkout showed of it: why those receipts carry over here or do not."""
    out = []
    for p in revision.definition_proofs:
        if p.same:
            said = "the same workload definition as this revision (its receipts may carry over)"
        elif p.same is None:
            said = f"a workload definition not shown to be this revision's ({p.said})"
        else:
            said = f"another workload definition ({p.said or 'its digest differs'})"
        out.append(f"commit {p.commit[:12]}: {said}")
    return out


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
        # Whose failure it is, as `status` labels its blocker (`read/whose.py`).
        "attribution": receipt_label(e, lambda rev, c: read_evidence(store, rev, [c]).receipts)
        if e.kind == "receipt"
        else None,
    }
