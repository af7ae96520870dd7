"""Plan entries in the ledger: recorded beside the receipts a writer records, and
the one that governs a question found again."""

from __future__ import annotations

import json
import threading
from typing import Any

from sqlalchemy import select

from ledger.evidence.canonical import receipt_id
from ledger.evidence.errors import Error
from ledger.identity.repoid import canonical_repo
from ledger.plans.entry import PlanEvidence, RecordedPlan, plan_body, read_plan_entry
from ledger.store.store import LOG, Store

__all__ = ["governing_plan", "record_governing", "record_plan", "record_sent"]


def record_plan(
    store: Store,
    repo: str,
    pr: int | None,
    commit: str,
    ev: PlanEvidence,
    recorded_by: str | None = None,
) -> tuple[str, bool]:
    """Log that `ev` governs `commit` of `repo` (once: the same body is one entry).
    Returns (entry id, newly added). The objects are proved before anything is written."""
    body = plan_body(canonical_repo(repo), pr, commit, ev, recorded_by)
    eid = receipt_id(body)
    read_plan_entry(0, eid, _json(body))
    if store.entry(eid) is not None:
        return eid, False
    with store.append_tx() as tx:
        if tx.existing([eid]):
            return eid, False
        tx.add(kind="plan", entry_id=eid, body=body)
    return eid, True


def _json(body: bytes) -> object:
    return json.loads(body)


def governing_plan(
    store: Store, repo: str, pr: int | None, commit: str
) -> tuple[RecordedPlan | None, list[str]]:
    """The newest plan entry for `commit` (PR `pr`'s head, or the revision) of `repo`
    whose objects prove it, and one line per plan entry that does not."""
    want = canonical_repo(repo)
    found: RecordedPlan | None = None
    problems: list[str] = []
    for seq, entry_id, doc in _entries(store):
        if doc is None:
            problems.append(f"plan entry {seq} is not JSON: run `ledger audit`")
            continue
        if not isinstance(doc, dict) or doc.get("repo") != want or doc.get("commit") != commit:
            continue
        if doc.get("pr") != pr:
            # A PR's plan is its base's; a revision's is its own: never one for the other.
            continue
        try:
            got = read_plan_entry(seq, entry_id, doc)
        except Error as err:
            problems.append(f"plan entry {seq} does not hold: {err.reason()}")
            continue
        if pr is None and not got.evidence.asserted and got.evidence.base != commit:
            continue  # a revision's governing plan is the one committed there
        found = got
    return found, problems


def record_governing(recorder: object, ident: object) -> str | None:
    """Record the governing plan of a writer's question (`ledger.identity.source.Identity`)
    in a local ledger, beside the receipts it is about to record; the entry id, or
    None where there is nothing to record (no committed plan: --plan FILE, or none)
    or the ledger is a server's (which records plans given by its host's operator)."""
    from ledger.identity.source import Identity
    from ledger.write.record import LocalRecorder, RemoteRecorder

    assert isinstance(ident, Identity)
    if ident.governing is None:
        return None
    r = ident.revision
    if isinstance(recorder, RemoteRecorder):
        import sys

        from ledger.remote.client import post_plan

        doc = json.loads(plan_body(canonical_repo(r.repo), r.pr, r.commit, ident.governing))
        try:
            return str(post_plan(recorder.url, doc, recorder.token)["id"])
        except Error as e:
            # The receipts still go (the outbox keeps them); the plan can be recorded later.
            sys.stderr.write(
                f"ledger: note: the governing plan was not recorded at {recorder.where}: "
                f"{e.reason()}; `ledger plan record` on the ledger's host records it\n"
            )
            return None
    if not isinstance(recorder, LocalRecorder):
        return None
    eid, _ = record_plan(recorder.store, r.repo, r.pr, r.commit, ident.governing)
    return eid


def record_sent(store: Store, doc: object, holder: str) -> tuple[str, bool]:
    """A plan entry a token holder sent to the server: proved, then logged as theirs."""
    got = read_plan_entry(0, "", doc)
    return record_plan(store, got.repo, got.pr, got.commit, got.evidence, holder)


# Plan entries read once per process and ledger, then only the new ones: a server
# answering an index page of 50 PRs reads the log's plan entries once, not 50 times.
# Keyed by the ledger's first entry too (its ledger key: a fresh ledger at the same
# URL is another ledger).
_CACHE: dict[tuple[str, str], tuple[int, list[tuple[int, str, Any]]]] = {}
_LOCK = threading.Lock()


def _entries(store: Store) -> list[tuple[int, str, Any]]:
    """(seq, entry id, parsed body or None) of every plan entry, in log order."""
    with store.engine.connect() as conn:
        first = conn.execute(select(LOG.c.entry_id).where(LOG.c.seq == 0)).scalar()
        key = (store.url, str(first))
        with _LOCK:
            last, rows = _CACHE.get(key, (-1, []))
        new = conn.execute(
            select(LOG.c.seq, LOG.c.entry_id, LOG.c.body)
            .where(LOG.c.kind == "plan", LOG.c.seq > last)
            .order_by(LOG.c.seq)
        ).all()
    if not new:
        return rows
    added = []
    for seq, eid, body in new:
        try:
            doc: Any = json.loads(body)
        except ValueError:
            doc = None
        added.append((int(seq), str(eid), doc))
    rows = [*rows, *added]
    with _LOCK:
        _CACHE[key] = (added[-1][0], rows)
    return rows
