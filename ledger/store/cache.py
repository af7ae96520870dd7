"""Entries read back from the ledger, parsed once per process.

A question (status, history, show) reads the same receipts again and again;
each is parsed on first use and kept here by sequence number, with its
parsed views (envelope, statement) computed once. A hit needs the stored row
to be byte for byte the row that was parsed, so a row changed behind the
ledger's back is read again, never answered from memory.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from ledger.evidence.entry import LoggedEntry

__all__ = ["ENTRIES", "EntryCache"]


class EntryCache:
    """A bounded, thread-safe LRU of trusted `LoggedEntry` objects by seq."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[int, LoggedEntry] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, row: Any) -> LoggedEntry:
        """The entry of a stored row (seq, kind, entry_id, body, logged_at, leaf_hash)."""
        fresh = LoggedEntry.of(row, trusted=True)
        with self._lock:
            have = self._items.get(fresh.seq)
            if have is not None and have == fresh:  # every field, the body bytes included
                self._items.move_to_end(fresh.seq)
                self.hits += 1
                return have
            self.misses += 1
            self._items[fresh.seq] = fresh
            self._items.move_to_end(fresh.seq)
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return fresh

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


ENTRIES = EntryCache(10_000)
"""Process-wide: every `Store` of the process shares it (a server, a CLI call).
A parsed receipt takes about 12 KB (more with many measurements), so this
is about 120 MB at most; a question keeps tens to hundreds."""
