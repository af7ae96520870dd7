"""Plan entries in the ledger: recorded beside the receipts a writer records, and
the one that governs a question found again."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select

from ledger.evidence.canonical import receipt_id
from ledger.evidence.errors import Error, ForbiddenError, RefusedError
from ledger.identity.repoid import canonical_repo
from ledger.plans.entry import (
    PLAN_ROLE,
    PlanEvidence,
    RecordedPlan,
    plan_body,
    read_plan_entry,
)
from ledger.qualification.plan import PLAN_FILE
from ledger.store.store import LOG, Store

__all__ = ["Governing", "governing_plan", "record_plan", "record_sent"]


def record_plan(
    store: Store,
    repo: str,
    pr: int | None,
    commit: str,
    ev: PlanEvidence,
    recorded_by: str | None = None,
    *,
    branch: str | None = None,
    role: str | None = None,
) -> tuple[str, bool]:
    """Log that `ev` governs `commit` of `repo` (once: the same body is one entry).
    Returns (entry id, newly added). The objects are proved before anything is written."""
    body = plan_body(canonical_repo(repo), pr, commit, ev, recorded_by, branch=branch, role=role)
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


@dataclass(frozen=True, slots=True)
class Governing:
    """The plan entry that governs a question, what else was considered, and a
    conflict: two different plans recorded for the commit the chosen one speaks for."""

    found: RecordedPlan | None
    problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    conflict: tuple[RecordedPlan, ...] = ()

    @property
    def conflict_text(self) -> str | None:
        if not self.conflict:
            return None
        first = self.conflict[0]
        which = ", ".join(
            f"entry {c.seq} (blob {c.evidence.blob[:12]}{_by(c)})" for c in self.conflict
        )
        return (
            f"conflicting governing plans: {which} record different plans for "
            f"{first.key[:12]}, so no claim is judged until the ledger's host resolves it"
        )


def _by(p: RecordedPlan) -> str:
    return f", by {p.recorded_by}" if p.recorded_by else ", on the ledger's host"


def governing_plan(
    store: Store, repo: str, pr: int | None, commit: str, *, aliases: Sequence[str] = ()
) -> Governing:
    """The plan entry that governs `commit` of `repo` (or of an earlier id in `aliases`).

    For PR `pr` it is the base branch's: the newest authorised entry for that branch
    (named by the PR's newest entry, else by the newest branch entry the base
    branch's job recorded), whichever head it was recorded with, so every head of
    the PR, one delivered from an outbox included, gets the same answer; entries of
    earlier releases name no branch and count for the PR's base branch. For a
    revision it is the plan committed there. Entries recorded under a runner token
    never govern (named in `notes`); two different plans for the commit the chosen
    entry speaks for are a `conflict`, never one silently replacing the other."""
    ids = {canonical_repo(repo), *aliases}
    problems: list[str] = []
    notes: list[str] = []
    entries: list[RecordedPlan] = []
    for seq, entry_id, doc in _entries(store):
        if doc is None:
            problems.append(f"plan entry {seq} is not JSON: run `ledger audit`")
            continue
        if not isinstance(doc, dict) or doc.get("repo") not in ids:
            continue
        got = _proved(seq, entry_id, doc)
        if isinstance(got, str):
            problems.append(f"plan entry {seq} does not hold: {got}")
            continue
        if got.evidence.path != PLAN_FILE:
            # The plan is the file at the root; another path at the same commit is
            # another file, chosen by whoever recorded it.
            notes.append(f"plan entry {seq} proves {got.evidence.path}, not {PLAN_FILE}: ignored")
            continue
        if not got.authorised:
            if _bears(got, pr, commit):
                notes.append(
                    f"plan entry {seq} was recorded by token holder {got.recorded_by} under "
                    "a runner token and does not govern (the ledger's host re-records it: "
                    "`ledger plan record`)"
                )
            continue
        entries.append(got)
    if pr is None:
        cands = [
            e
            for e in entries
            if e.pr is None
            and e.commit == commit
            and (e.evidence.asserted or e.evidence.base == commit)
        ]
    else:
        own = [e for e in entries if e.pr == pr]
        branch = next((e.branch for e in reversed(own) if e.branch), None) or next(
            (e.branch for e in reversed(entries) if e.pr is None and e.branch), None
        )
        cands = [
            e
            for e in entries
            if (e.branch is not None and e.branch == branch)
            or (e.branch is None and e.pr is not None and not e.evidence.asserted)
            or (e.evidence.asserted and e.pr == pr and e.commit == commit)
        ]
    if not cands:
        return Governing(None, tuple(problems), tuple(notes))
    found = cands[-1]
    same = [e for e in cands if e.key == found.key]
    blobs = {e.evidence.blob for e in same}
    if len(blobs) > 1:
        firsts = [next(e for e in same if e.evidence.blob == b) for b in sorted(blobs)]
        return Governing(None, tuple(problems), tuple(notes), tuple(firsts))
    return Governing(found, tuple(problems), tuple(notes))


_PROVED: dict[tuple[int, str, str], RecordedPlan | str] = {}
"""Plan entries proved once per process, keyed by what they say (position, id and a
digest of the body as read): the proof (objects walked, plan parsed) of the same bytes
never changes, and an index page asks for many PRs' plans from the same entries."""


def _proved(seq: int, entry_id: str, doc: Any) -> RecordedPlan | str:
    """The entry proved, or why it does not hold."""
    import hashlib

    said = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    key = (seq, entry_id, hashlib.sha256(said).hexdigest())
    with _LOCK:
        got = _PROVED.get(key)
    if got is None:
        try:
            got = read_plan_entry(seq, entry_id, doc)
        except Error as err:
            got = err.reason()
        with _LOCK:
            if len(_PROVED) > 4096:
                _PROVED.clear()
            _PROVED[key] = got
    return got


def _bears(p: RecordedPlan, pr: int | None, commit: str) -> bool:
    """Whether an entry would have been considered for the question."""
    return (p.pr == pr and pr is not None) or p.commit == commit


def record_sent(store: Store, doc: object, holder: str) -> tuple[str, bool]:
    """A plan entry a token holder with the plan role sent to the server: proved, then
    logged as theirs, under that role. An asserted entry (no commit proves it) comes
    only from the ledger's host; a plan at another path than the root's is another file."""
    got = read_plan_entry(0, "", doc)
    if got.evidence.asserted:
        raise ForbiddenError(
            "an asserted plan (no base commit proves it) is recorded only on the ledger's "
            "host (`ledger plan assert`)"
        )
    if got.evidence.path != PLAN_FILE:
        raise RefusedError(f"plan entry: path {got.evidence.path!r}: the plan is {PLAN_FILE}")
    return record_plan(
        store,
        got.repo,
        got.pr,
        got.commit,
        got.evidence,
        holder,
        branch=got.branch,
        role=PLAN_ROLE,
    )


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
        # Read up to the log's end as it is now, and remember that end, not the last
        # plan entry: the entries logged since are read once, so a question costs the
        # same however many other repositories' receipts followed the plan.
        end = conn.execute(select(func.max(LOG.c.seq))).scalar()
        if end is None or end <= last:
            return rows
        new = conn.execute(
            select(LOG.c.seq, LOG.c.entry_id, LOG.c.body)
            .where(LOG.c.kind == "plan", LOG.c.seq > last, LOG.c.seq <= end)
            .order_by(LOG.c.seq)
        ).all()
    added = []
    for seq, eid, body in new:
        try:
            doc: Any = json.loads(body)
        except ValueError:
            doc = None
        added.append((int(seq), str(eid), doc))
    rows = [*rows, *added]
    with _LOCK:
        _CACHE[key] = (int(end), rows)
    return rows
