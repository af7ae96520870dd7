"""Alias entries: `ledger repo alias OLD NEW`, logged on the ledger's host like key
entries (the checkpoint signs the log, `ledger audit` checks each), read back as the
set of ids whose receipts count for a repository."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ledger.evidence.canonical import canonical_bytes, receipt_id
from ledger.evidence.entry import LoggedEntry
from ledger.evidence.errors import Error, RefusedError, UsageError
from ledger.identity.repoid import canonical_repo

if TYPE_CHECKING:
    from ledger.store.store import Store

__all__ = [
    "add_alias",
    "alias_body",
    "aliases_of",
    "current_id",
    "elsewhere",
    "read_alias",
]


def alias_body(old: str, new: str, reason: str) -> bytes:
    return canonical_bytes({"kind": "alias", "from": old, "to": new, "reason": reason})


def read_alias(doc: Any) -> tuple[str, str]:
    """An alias entry's (from, to): both canonical ids, distinct. RefusedError otherwise."""
    if not isinstance(doc, dict) or doc.get("kind") != "alias":
        raise RefusedError("not an alias entry")
    old, new = doc.get("from"), doc.get("to")
    if not isinstance(old, str) or not isinstance(new, str) or not old or not new:
        raise RefusedError("alias entry: from and to must be repository ids")
    if canonical_repo(old) != old or canonical_repo(new) != new or old == new:
        raise RefusedError("alias entry: from and to must be distinct canonical ids")
    return old, new


# Alias entries read once per process and ledger, then only the entries logged since
# (keyed by the ledger's first entry too: a fresh ledger at the same URL is another
# ledger): every question asks for its repository's aliases, and reading the whole log
# for them would cost more the more other repositories the ledger holds.
_CACHE: dict[tuple[str, str], tuple[int, list[tuple[str, str]]]] = {}
_LOCK = threading.Lock()


def _all(store: Store) -> list[tuple[str, str]]:
    # Here, not at the top: `read_alias` alone (the client that checks a server reads
    # its log's aliases) loads no database library.
    from sqlalchemy import func, select

    from ledger.store.store import LOG

    with store.engine.connect() as conn:
        first = conn.execute(select(LOG.c.entry_id).where(LOG.c.seq == 0)).scalar()
        end = conn.execute(select(func.max(LOG.c.seq))).scalar()
        key = (store.url, str(first))
        with _LOCK:
            last, links = _CACHE.get(key, (-1, []))
        if end is None or end <= last:
            return links
        rows = conn.execute(
            select(LOG).where(LOG.c.kind == "alias", LOG.c.seq > last, LOG.c.seq <= end)
        ).all()
    added = []
    for row in sorted(rows, key=lambda r: r.seq):
        try:
            added.append(read_alias(LoggedEntry.of(row).document))
        except Error:
            continue  # `ledger audit` names it; an unreadable alias links nothing
    links = [*links, *added]
    with _LOCK:
        _CACHE[key] = (int(end), links)
    return links


def aliases_of(store: Store, repo: str) -> list[str]:
    """The earlier ids whose receipts count under `repo` (through chains of aliases)."""
    want = canonical_repo(repo)
    links = _all(store)
    found: list[str] = []
    todo = [want]
    while todo:
        at = todo.pop()
        for old, new in links:
            if new == at and old != want and old not in found:
                found.append(old)
                todo.append(old)
    return found


def current_id(store: Store, repo: str) -> str:
    """The id `repo`'s receipts count under now: followed through `ledger repo alias`
    from an earlier id to the newest (itself where nothing aliases it), so every page
    files receipts under the id the operator chose."""
    at = canonical_repo(repo)
    links = dict(_all(store))
    seen = {at}
    while at in links and links[at] not in seen:
        at = links[at]
        seen.add(at)
    return at


def add_alias(store: Store, old: str, new: str, reason: str) -> tuple[str, bool]:
    """Log that receipts under `old` count under `new`; (entry id, newly added)."""
    old_id, new_id = canonical_repo(old), canonical_repo(new)
    if old_id == new_id:
        raise UsageError(f"{old!r} and {new!r} are one repository id ({new_id})")
    if not reason.strip():
        raise UsageError("an alias needs a --reason")
    if new_id in aliases_of(store, old_id):
        raise UsageError(f"{new_id} already counts under {old_id}: an alias may not make a cycle")
    if old_id in aliases_of(store, new_id):
        return receipt_id(alias_body(old_id, new_id, reason)), False
    body = alias_body(old_id, new_id, reason)
    eid = receipt_id(body)
    with store.append_tx() as tx:
        if tx.existing([eid]):
            return eid, False
        tx.add(kind="alias", entry_id=eid, body=body)
    return eid, True


def elsewhere(
    store: Store, commit: str, counted: Sequence[str], claims: Sequence[str]
) -> list[tuple[str, int]]:
    """(repository id, receipts) of `claims` for `commit` recorded under ids not in
    `counted` (the (claim, commit) index answers it)."""
    from sqlalchemy import func, select

    from ledger.store.store import RECEIPT

    q = (
        select(RECEIPT.c.repo_id, func.count())
        .where(
            RECEIPT.c.claim.in_(list(claims)),
            RECEIPT.c.commit == commit,
            RECEIPT.c.repo_id.not_in(list(counted)),
        )
        .group_by(RECEIPT.c.repo_id)
        .order_by(RECEIPT.c.repo_id)
    )
    with store.engine.connect() as conn:
        return [(str(r), int(n)) for r, n in conn.execute(q)]
