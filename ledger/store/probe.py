"""The log's size over a connection of its own, for a store that asks it on every request.

A server asks the size once per request (`Store.refresh`: is a kept answer still
right?). Through the pool that costs a checkout, PostgreSQL's pre-ping and the
rollback that ends the read: three round trips, most of a kept answer's time. The
probe keeps one connection outside the pool in autocommit, so the question is one
statement; a broken connection (the database restarted) is opened again once.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

from sqlalchemy import Engine

__all__ = ["SizeProbe"]

SIZE_SQL = "SELECT coalesce(max(seq) + 1, 0) FROM log_entry"
"""max(seq) + 1: an index lookup (sequence numbers are gapless from 0)."""


class SizeProbe:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._conn: Any = None
        self._lock = threading.Lock()

    def size(self) -> int:
        errors = self.engine.dialect.loaded_dbapi.Error
        with self._lock:
            for attempt in (1, 2):
                conn = self._conn if self._conn is not None else self._open()
                try:
                    cur = conn.cursor()
                    cur.execute(SIZE_SQL)
                    row = cur.fetchone()
                    cur.close()
                    return int(row[0]) if row else 0
                except errors:
                    self._close()
                    if attempt == 2:
                        raise
        raise AssertionError("unreachable")

    def _open(self) -> Any:
        pooled = self.engine.raw_connection()
        pooled.detach()  # ours until closed: never returned to (or reset by) the pool
        conn = pooled.dbapi_connection
        if self.engine.dialect.name == "postgresql":
            # No transaction left open between questions (it would hold back vacuum).
            conn.autocommit = True  # type: ignore[union-attr]
            # A server asks on its event loop: a stalled database fails the question
            # (the request path then reports it) instead of holding every request.
            conn.execute("SET statement_timeout = 2000")  # type: ignore[union-attr]
        # SQLite's connections run with isolation_level None (ledger.store.store):
        # a SELECT there opens no transaction either.
        self._conn = conn
        return conn

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(self.engine.dialect.loaded_dbapi.Error):
                conn.close()

    def close(self) -> None:
        with self._lock:
            self._close()
