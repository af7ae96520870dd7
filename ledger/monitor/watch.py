"""What `ledger monitor` finds in the entries of a log since its last position.

Per key, four checks:

- ``not-in-journal``: a receipt under a key whose host journal was given,
  absent from that journal (signed elsewhere, with a copy of the key);
- ``rate``: more receipts in one clock hour than ``multiple`` times the
  median of the key's receipts per active hour over the 30 days before it
  (active: an hour with at least one; judged once the key has
  ``MIN_HISTORY_HOURS`` active hours);
- ``after-revocation``: an entry logged after its signing key's revocation
  (ingest refuses these; one in the log was written around it);
- ``same-holder-review``: a review by a key registered by the same token
  holder as the reviewed receipt's key (one person concurring with oneself).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NamedTuple

from ledger.evidence.entry import LoggedEntry
from ledger.evidence.errors import Error
from ledger.evidence.keys import KeyInfo

if TYPE_CHECKING:
    # A type only: reading a served log loads no database library.
    from ledger.store.store import Store

__all__ = ["MIN_HISTORY_HOURS", "Finding", "LogView", "Scan", "scan", "store_view"]

MIN_HISTORY_HOURS = 3
WINDOW = timedelta(days=30)


@dataclass(frozen=True, slots=True)
class Finding:
    check: str
    keyid: str
    key_name: str
    entry: str
    seq: int
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "key": {"keyid": self.keyid, "name": self.key_name},
            "entry": self.entry,
            "seq": self.seq,
            "detail": self.detail,
        }


@dataclass
class Scan:
    start: int
    end: int
    entries: int = 0
    findings: list[Finding] = field(default_factory=list)
    journals: dict[str, int] = field(default_factory=dict)
    """Key id -> statements in the journal given for it."""


def _hour(logged_at: str) -> datetime:
    return datetime.fromisoformat(logged_at.replace("Z", "+00:00")).replace(
        minute=0, second=0, microsecond=0
    )


def _rate(
    receipts: dict[str, list[LoggedEntry]],
    new: Iterable[LoggedEntry],
    keys: dict[str, KeyInfo],
    multiple: float,
) -> list[Finding]:
    """Hours (touched by a new receipt) above `multiple` x the key's median."""
    out: list[Finding] = []
    new_by_key_hour: dict[tuple[str, datetime], list[LoggedEntry]] = defaultdict(list)
    for e in new:
        if e.logged_at is not None:
            new_by_key_hour[(e.signer, _hour(e.logged_at))].append(e)
    for (kid, hour), fresh in sorted(new_by_key_hour.items(), key=lambda kv: kv[0][1]):
        counts: dict[datetime, int] = defaultdict(int)
        for e in receipts.get(kid, []):
            if e.logged_at is not None:
                counts[_hour(e.logged_at)] += 1
        history = [n for h, n in counts.items() if hour - WINDOW <= h < hour]
        if len(history) < MIN_HISTORY_HOURS:
            continue
        median = statistics.median(history)
        if counts[hour] <= multiple * median:
            continue
        name = keys[kid].name if kid in keys else kid[:12]
        for e in fresh:
            out.append(
                Finding(
                    "rate",
                    kid,
                    name,
                    e.entry_id,
                    e.seq,
                    f"{counts[hour]} receipts in the hour from {hour:%Y-%m-%dT%H}Z, "
                    f"over {multiple:g} x the median {median:g} of its "
                    f"{len(history)} active hours in the 30 days before",
                )
            )
    return out


class LogView(NamedTuple):
    """What the monitor reads of a log up to `size`: its entries (receipts,
    reviews) in log order and its registered keys as of `size`."""

    origin: str
    size: int
    root: bytes
    entries: list[LoggedEntry]
    keys: dict[str, KeyInfo]


def store_view(store: Store) -> LogView:
    """A ledger database as the monitor reads it (its rows, as they are now)."""
    from ledger._internal import merkle
    from ledger.transparency.checkpoints import origin

    size = store.size()
    entries = [e for e in store.entries(kinds=["receipt", "review"]) if e.seq < size]
    root = merkle.root(store.leaf_hashes(upto=size))
    return LogView(origin(store), size, root, entries, store.keys())


def scan(view: LogView, start: int, journals: dict[str, set[str]], *, multiple: float) -> Scan:
    """Check the entries from `start` to the end of `view`."""
    keys, end = view.keys, view.size
    result = Scan(start, end, journals={k: len(v) for k, v in journals.items()})
    new: list[LoggedEntry] = []
    receipts: dict[str, list[LoggedEntry]] = defaultdict(list)
    signer_of: dict[str, str] = {}
    for e in view.entries:
        try:
            kid = e.signer
        except Error:
            continue
        if e.kind == "receipt":
            receipts[kid].append(e)
            signer_of[e.entry_id] = kid
        if e.seq >= start:
            new.append(e)
    result.entries = max(end - start, 0)
    for e in new:
        kid = e.signer
        k = keys.get(kid)
        name = k.name if k else kid[:12]
        if e.kind == "receipt" and kid in journals and e.entry_id not in journals[kid]:
            result.findings.append(
                Finding(
                    "not-in-journal",
                    kid,
                    name,
                    e.entry_id,
                    e.seq,
                    "a receipt under this key that its host's journal does not hold "
                    "(signed elsewhere with a copy of the key?)",
                )
            )
        if k is not None and k.revoked_seq is not None and e.seq > k.revoked_seq:
            result.findings.append(
                Finding(
                    "after-revocation",
                    kid,
                    name,
                    e.entry_id,
                    e.seq,
                    f"logged at {e.seq}, after the key's revocation at {k.revoked_seq}",
                )
            )
        if e.kind == "review":
            result.findings += _same_holder(e, kid, keys, signer_of)
    result.findings += _rate(receipts, (e for e in new if e.kind == "receipt"), keys, multiple)
    result.findings.sort(key=lambda f: (f.seq, f.check))
    return result


def _same_holder(
    e: LoggedEntry, kid: str, keys: dict[str, KeyInfo], signer_of: dict[str, str]
) -> list[Finding]:
    try:
        receipt = e.review.predicate.receipt
    except Error:
        return []
    reviewer, author = keys.get(kid), keys.get(signer_of.get(receipt, ""))
    if reviewer is None or author is None or reviewer.registered_by is None:
        return []
    if reviewer.registered_by != author.registered_by:
        return []
    return [
        Finding(
            "same-holder-review",
            kid,
            reviewer.name,
            e.entry_id,
            e.seq,
            f"reviews {receipt[:19]} by {author.name}, a key registered by the same "
            f"holder {reviewer.registered_by!r}",
        )
    ]
