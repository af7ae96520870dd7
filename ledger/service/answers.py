"""Answers the server gave, kept while the log they were read from is unchanged.

A status or history answer depends on the log and on the question alone (the
key table is part of the log). The log only grows, so an answer stays right
for as long as the log's size stays the same: a repeated question costs one
index lookup (the size) instead of reading and judging the evidence again.
Questions identified in a mirror checkout depend on that checkout too; their
key is the identified revision and plan, not the request.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

__all__ = ["Answers"]


class Answers:
    """A bounded LRU of answer documents by (question, log size)."""

    def __init__(self, size: int = 1024) -> None:
        self.size = size
        self._items: OrderedDict[Hashable, tuple[int, Any]] = OrderedDict()
        self._lock = threading.Lock()
        self._encoded: OrderedDict[int, tuple[Any, bytes]] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable, log_size: int, compute: Callable[[], Any]) -> Any:
        """The answer to `key` at `log_size`: from memory, or computed and kept."""
        with self._lock:
            have = self._items.get(key)
            if have is not None and have[0] == log_size:
                self._items.move_to_end(key)
                self.hits += 1
                return have[1]
            self.misses += 1
        doc = compute()
        with self._lock:
            # Two requests may compute one answer at once: both are right, one is kept.
            self._items[key] = (log_size, doc)
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return doc

    def peek(self, key: Hashable, log_size: int) -> Any | None:
        """The answer kept for `key` at `log_size`, or None (nothing computed)."""
        with self._lock:
            have = self._items.get(key)
            if have is None or have[0] != log_size:
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return have[1]

    def encoded(self, doc: Any, encode: Callable[[Any], bytes]) -> bytes:
        """`encode(doc)`, once per kept answer: encoding the JSON of an answer
        costs several times more than finding it."""
        with self._lock:
            have = self._encoded.get(id(doc))
            if have is not None and have[0] is doc:
                return have[1]
        body = encode(doc)
        with self._lock:
            # The document is held beside its bytes, so its id is not reused meanwhile.
            self._encoded[id(doc)] = (doc, body)
            while len(self._encoded) > self.size:
                self._encoded.popitem(last=False)
        return body
