"""The ledger's database: open/create, the locked append, and the lookups."""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from sqlalchemy import Connection, Engine, bindparam, create_engine, event, func, select, text
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, OperationalError

from ledger._internal.merkle import entry_leaf
from ledger.evidence.entry import LoggedEntry, ReceiptRevocation, first_revocations
from ledger.evidence.errors import Error, InputError, NotFoundError, UsageError
from ledger.evidence.keys import KeyInfo
from ledger.store import migrate
from ledger.store.cache import ENTRIES
from ledger.store.probe import SIZE_SQL, SizeProbe
from ledger.store.tables import (
    ArtifactBlob,
    CheckpointRow,
    CosignatureRow,
    KeyRow,
    LogEntry,
    ReceiptRevocationRow,
    ReceiptRow,
    ReviewRow,
    RevocationRow,
    ScopeFacet,
)

__all__ = ["DEFAULT_DB", "RECEIPT_REVOCATION", "Store", "resolve_url", "utc_now"]


def default_db() -> Path:
    """$XDG_DATA_HOME/ledger/ledger.db (default ~/.local/share/...): never in a
    work tree, where it would make every clone look dirty."""
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "ledger" / "ledger.db"


DEFAULT_DB = default_db()
_PREFIX = re.compile(r"^(sha256:)?([0-9a-f]{12,64})$")
# Any constant works; it only has to be the same for every writer of one database.
_PG_APPEND_LOCK = 0x1ED6E7

LOG = LogEntry.__table__  # type: ignore[attr-defined]
RECEIPT = ReceiptRow.__table__  # type: ignore[attr-defined]
FACET = ScopeFacet.__table__  # type: ignore[attr-defined]
REVIEW = ReviewRow.__table__  # type: ignore[attr-defined]
KEY = KeyRow.__table__  # type: ignore[attr-defined]
REVOCATION = RevocationRow.__table__  # type: ignore[attr-defined]
RECEIPT_REVOCATION = ReceiptRevocationRow.__table__  # type: ignore[attr-defined]
CHECKPOINT = CheckpointRow.__table__  # type: ignore[attr-defined]
ARTIFACT = ArtifactBlob.__table__  # type: ignore[attr-defined]
COSIGNATURE = CosignatureRow.__table__  # type: ignore[attr-defined]


_LOG_COLUMNS = ", ".join(
    f"log_entry.{c}" for c in ("seq", "kind", "entry_id", "body", "leaf_hash", "logged_at")
)


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def resolve_url(db: str | None) -> str:
    """--db, else LEDGER_DB, else $XDG_DATA_HOME/ledger/ledger.db; a bare path means SQLite."""
    value = db or os.environ.get("LEDGER_DB") or str(default_db())
    if "://" in value:
        try:
            make_url(value)
        except ArgumentError:
            raise UsageError(f"invalid database URL {value!r}") from None
        return value
    return f"sqlite:///{Path(value).expanduser().resolve()}"


def _sqlite_engine(url: str) -> Engine:
    engine = create_engine(url)

    # pysqlite's own transaction handling defers BEGIN; take the write lock at
    # the start instead so the next sequence number cannot be raced.
    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None
        # A stored byte that is not UTF-8 (only a hand edit can put one there)
        # must reach the audit as itself, not abort the read of a whole table.
        dbapi_conn.text_factory = lambda b: b.decode("utf-8", "surrogateescape")
        dbapi_conn.execute("PRAGMA foreign_keys=ON")
        dbapi_conn.execute("PRAGMA journal_mode=WAL")
        dbapi_conn.execute("PRAGMA busy_timeout=30000")

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        # Writers take the write lock at BEGIN; readers stay deferred, so WAL
        # lets them read while an append is in progress.
        immediate = conn.get_execution_options().get("ledger_append", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


class Store:
    """One open ledger database."""

    def __init__(self, engine: Engine, url: str) -> None:
        self.engine = engine
        self.url = url
        self._keys: dict[str, KeyInfo] | None = None
        self._seen_size: int | None = None
        self.live = False
        """Long-lived (a server's): `keys()` checks first that the log did not grow."""
        self._probe: SizeProbe | None = None

    # -- opening ---------------------------------------------------------------

    @classmethod
    def _engine(cls, url: str) -> Engine:
        if url.startswith("sqlite"):
            return _sqlite_engine(url)
        try:
            return create_engine(url, pool_pre_ping=True)
        except ModuleNotFoundError as e:
            raise UsageError(
                f"database driver missing ({e.name}); pip install '.[postgres]'"
            ) from None

    @classmethod
    def create(cls, url: str) -> Store:
        """Create (or bring up to date) the ledger at url."""
        if url.startswith("sqlite:///"):
            Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        engine = cls._engine(url)
        try:
            migrate.upgrade(engine)
        except OperationalError as e:
            raise UsageError(f"cannot open database: {str(e.orig).strip()}") from None
        return cls(engine, url)

    @classmethod
    def open(cls, url: str) -> Store:
        """Open an existing ledger; apply pending migrations of an older one."""
        if url.startswith("sqlite:///"):
            path = Path(url.removeprefix("sqlite:///"))
            if not path.is_file():
                raise UsageError(f"no ledger at {path}; run `ledger init` first")
        engine = cls._engine(url)
        try:
            with engine.connect() as conn:
                current = migrate.current_revision(conn)
        except OperationalError as e:
            raise UsageError(f"cannot open database: {str(e.orig).strip()}") from None
        if current is None:
            raise UsageError("database holds no ledger; run `ledger init` first")
        if current != migrate.HEAD:
            migrate.upgrade(engine)
        return cls(engine, url)

    # -- writing ---------------------------------------------------------------

    @contextmanager
    def append_tx(self) -> Iterator[Appender]:
        """A transaction that holds the append lock; entries get gapless seqs."""
        with (
            self.engine.connect().execution_options(ledger_append=True) as conn,
            conn.begin(),
        ):
            if conn.dialect.name == "postgresql":
                conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_PG_APPEND_LOCK})")
            nxt = conn.execute(select(func.coalesce(func.max(LOG.c.seq) + 1, 0))).scalar_one()
            tx = Appender(conn, int(nxt))
            yield tx
        if tx.touched_keys:
            self._keys = None

    # -- reading ---------------------------------------------------------------

    def keys(self, *, fresh: bool = False) -> dict[str, KeyInfo]:
        """Registered keys; `fresh` re-reads them (a write must see every
        revocation, also one another process logged after this one started)."""
        if self.live and not fresh:
            self.refresh()
        # One read of the attribute: another thread of a server may drop it meanwhile.
        keys = self._keys
        if keys is None or fresh:
            with self.engine.connect() as conn:
                keys = load_keys(conn)
            self._keys = keys
        return keys

    def size(self) -> int:
        """Number of entries: max(seq) + 1, an index lookup (seqs are gapless).

        A long-lived store (`live`, the server's) asks over a connection of its
        own (`ledger.store.probe`); any other over a pooled DB-API connection,
        where SQLAlchemy's execution machinery would cost more than the lookup."""
        if self.live:
            if self._probe is None:
                self._probe = SizeProbe(self.engine)
            return self._probe.size()
        raw = self.engine.raw_connection()
        try:
            cur = raw.cursor()
            cur.execute(SIZE_SQL)
            (n,) = cur.fetchone() or (0,)
            cur.close()
            raw.rollback()  # end the read transaction PostgreSQL opened
            return int(n)
        finally:
            raw.close()

    def dispose(self) -> None:
        """Close every connection this store holds (the pool's and the probe's)."""
        if self._probe is not None:
            self._probe.close()
        self.engine.dispose()

    def refresh(self) -> int:
        """The log size now; the key table is read again when the log grew since.

        Keys and revocations are log entries, so an unchanged size means an
        unchanged key table: a long-lived store (the server's) answers with
        the key table as of now for one index lookup per request.
        """
        n = self.size()
        if n != self._seen_size:
            self._keys = None
            self._seen_size = n
        return n

    def resolve(self, ref: str) -> LoggedEntry:
        """Find a receipt or review by full id or a unique prefix of 12+ hex digits."""
        m = _PREFIX.match(ref.strip().lower())
        if not m:
            raise InputError(f"{ref!r} is not a receipt id (sha256:<hex>, or 12+ hex digits)")
        prefix = "sha256:" + m.group(2)
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(LOG)
                # A range on the unique index, not LIKE: SQLite's LIKE is
                # case-insensitive and would scan every row of a large ledger.
                .where(
                    LOG.c.entry_id >= prefix,
                    LOG.c.entry_id < prefix + "g",
                    LOG.c.kind.in_(("receipt", "review")),
                )
                .limit(2)
            ).all()
        if not rows:
            raise NotFoundError(f"no receipt or review matches {ref}")
        if len(rows) > 1:
            raise InputError(f"{ref} is ambiguous: give more hex digits")
        return ENTRIES.get(rows[0])

    def entry(self, entry_id: str) -> LoggedEntry | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(LOG).where(LOG.c.entry_id == entry_id)).first()
        return None if row is None else ENTRIES.get(row)

    def entries(self, *, kinds: Sequence[str] | None = None) -> Iterator[LoggedEntry]:
        """Every entry in log order, read untrusted and not kept (the audit's pass)."""
        q = select(LOG).order_by(LOG.c.seq)
        if kinds:
            q = q.where(LOG.c.kind.in_(kinds))
        with self.engine.connect() as conn:
            for row in conn.execution_options(yield_per=2000).execute(q):
                yield LoggedEntry.of(row)

    def entries_at(self, seqs: Sequence[int]) -> Iterator[LoggedEntry]:
        with self.engine.connect() as conn:
            for row in conn.execute(select(LOG).where(LOG.c.seq.in_(seqs)).order_by(LOG.c.seq)):
                yield ENTRIES.get(row)

    def leaf_hashes(self, upto: int | None = None) -> list[bytes]:
        q = select(LOG.c.leaf_hash).order_by(LOG.c.seq)
        if upto is not None:
            q = q.where(LOG.c.seq < upto)
        with self.engine.connect() as conn:
            return [bytes.fromhex(h) for (h,) in conn.execute(q)]

    def receipt_entries(
        self,
        repo_id: str,
        *,
        commits: Sequence[str] = (),
        trees: Sequence[str] = (),
        packages: Sequence[str] = (),
        pr: int | None = None,
        claims: Sequence[str] | None = None,
    ) -> list[LoggedEntry]:
        """Receipts of one repository (its canonical id) that could bear on a
        revision: same commit, tree, package or PR.

        One indexed lookup per key, (repo_id, key), united: receipts of other
        repositories that share a PR number or a commit are never read.
        """
        keys = [
            ("commit", list(commits)),
            ("tree", list(trees)),
            ("package_digest", list(packages)),
            ("pr", [] if pr is None else [pr]),
        ]
        params: dict[str, Any] = {"repo_id": repo_id}
        parts = []
        for col, values in keys:
            if not values:
                continue
            params[col] = values
            part = f'SELECT seq FROM receipt WHERE repo_id = :repo_id AND "{col}" IN :{col}'
            parts.append(part + (" AND claim IN :claims" if claims else ""))
        if not parts:
            return []
        if claims:
            params["claims"] = list(claims)
        # Plain SQL: a CLI call opens its engine once, and compiling the
        # equivalent SELECT ... UNION construct cost more than running it.
        stmt = text(
            f"SELECT {_LOG_COLUMNS} FROM log_entry JOIN ({' UNION '.join(parts)}) AS hit"
            " ON hit.seq = log_entry.seq ORDER BY log_entry.seq"
        ).bindparams(*(bindparam(k, expanding=True) for k in params if k != "repo_id"))
        with self.engine.connect() as conn:
            return [ENTRIES.get(r) for r in conn.execute(stmt, params)]

    def newest_receipt(
        self, repo_id: str, *, pr: int | None = None, commit_prefix: str = ""
    ) -> Any:
        """The index row of the newest receipt of a repository for a PR (or a
        commit prefix), or None: one descending step of a (repo_id, key) index."""
        q = select(RECEIPT).where(RECEIPT.c.repo_id == repo_id)
        if pr is not None:
            q = q.where(RECEIPT.c.pr == pr)
        else:
            q = q.where(RECEIPT.c.commit >= commit_prefix, RECEIPT.c.commit < commit_prefix + "g")
        with self.engine.connect() as conn:
            return conn.execute(q.order_by(RECEIPT.c.seq.desc()).limit(1)).first()

    def receipt_groups(self) -> list[tuple[str, int | None, str, int, int]]:
        """Per repository (as its receipts name it), PR and commit: how many receipts
        the index holds and the newest one's seq (what the reviewer's index lists)."""
        c = RECEIPT.c
        q = select(c.repo, c.pr, c.commit, func.count(), func.max(c.seq)).group_by(
            c.repo, c.pr, c.commit
        )
        with self.engine.connect() as conn:
            return [(str(r), p, str(h), int(n), int(s)) for r, p, h, n, s in conn.execute(q)]

    def review_entries(self, receipt_ids: Sequence[str]) -> list[LoggedEntry]:
        if not receipt_ids:
            return []
        stmt = text(
            f"SELECT {_LOG_COLUMNS} FROM log_entry JOIN review ON review.seq = log_entry.seq"
            " WHERE review.receipt_id IN :ids ORDER BY log_entry.seq"
        ).bindparams(bindparam("ids", expanding=True))
        with self.engine.connect() as conn:
            return [ENTRIES.get(r) for r in conn.execute(stmt, {"ids": list(receipt_ids)})]

    def revoked_receipts(self, receipt_ids: Sequence[str]) -> dict[str, ReceiptRevocation]:
        """The first revocation that counts of each of `receipt_ids` that has one, its
        signature checked by the key registry (else its first, with why it does not:
        `first_revocations`); an index lookup."""
        found: list[ReceiptRevocation] = []
        ids = sorted(set(receipt_ids))
        keys = self.keys() if ids else {}
        with self.engine.connect() as conn:
            for i in range(0, len(ids), 500):  # bounded IN lists
                rows = conn.execute(
                    select(LOG)
                    .join(RECEIPT_REVOCATION, RECEIPT_REVOCATION.c.seq == LOG.c.seq)
                    .where(RECEIPT_REVOCATION.c.receipt_id.in_(ids[i : i + 500]))
                    .order_by(LOG.c.seq)
                ).all()
                for row in rows:
                    try:
                        found.append(LoggedEntry.of(row, trusted=True).receipt_revocation(keys))
                    except Error:
                        continue  # no revocation that reads counts (the audit names it)
        return first_revocations(sorted(found, key=lambda rev: rev.seq))

    def receipt_signer(self, receipt_id: str) -> str | None:
        with self.engine.connect() as conn:
            return conn.execute(
                select(RECEIPT.c.signer).where(RECEIPT.c.id == receipt_id)
            ).scalar_one_or_none()

    def latest_checkpoint(self) -> CheckpointRow | None:
        with self.engine.connect() as conn:
            row = conn.execute(
                select(CHECKPOINT).order_by(CHECKPOINT.c.size.desc()).limit(1)
            ).first()
        return None if row is None else CheckpointRow(**row._mapping)

    def checkpoint(self, size: int) -> CheckpointRow | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(CHECKPOINT).where(CHECKPOINT.c.size == size)).first()
        return None if row is None else CheckpointRow(**row._mapping)

    def add_checkpoint(self, size: int, root: str, note: str) -> str:
        """Store a checkpoint unless one of that size exists; returns the stored note.

        Concurrent signers of one size are idempotent: SQLite takes the write
        lock up front (BEGIN IMMEDIATE, the same busy timeout as appends) and
        PostgreSQL inserts with ON CONFLICT DO NOTHING, so the loser reads the
        winner's note instead of failing on the primary key.
        """
        with (
            self.engine.connect().execution_options(ledger_append=True) as conn,
            conn.begin(),
        ):
            values = {"size": size, "root": root, "note": note}
            if conn.dialect.name == "postgresql":
                conn.execute(pg_insert(CHECKPOINT).values(**values).on_conflict_do_nothing())
            elif not conn.execute(
                select(CHECKPOINT.c.size).where(CHECKPOINT.c.size == size)
            ).first():
                conn.execute(CHECKPOINT.insert().values(**values))
            stored = conn.execute(select(CHECKPOINT.c.note).where(CHECKPOINT.c.size == size))
            return str(stored.scalar_one())

    def add_cosignature(self, size: int, witness: str, line: str) -> None:
        """Keep a witness's cosignature line on the checkpoint at `size` (the first
        one per witness key and size; a later one of the same witness is dropped)."""
        with (
            self.engine.connect().execution_options(ledger_append=True) as conn,
            conn.begin(),
        ):
            values = {"size": size, "witness": witness, "line": line}
            if conn.dialect.name == "postgresql":
                conn.execute(pg_insert(COSIGNATURE).values(**values).on_conflict_do_nothing())
            elif not conn.execute(
                select(COSIGNATURE.c.size).where(
                    COSIGNATURE.c.size == size, COSIGNATURE.c.witness == witness
                )
            ).first():
                conn.execute(COSIGNATURE.insert().values(**values))

    def cosignatures(self, size: int) -> list[str]:
        """The cosignature lines kept for the checkpoint at `size`, by witness."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(COSIGNATURE.c.line)
                .where(COSIGNATURE.c.size == size)
                .order_by(COSIGNATURE.c.witness)
            )
            return [str(r[0]) for r in rows]

    def witnessed_size(self, witness: str) -> int:
        """The largest checkpoint size `witness` (a vkey) cosigned here; 0 if none."""
        with self.engine.connect() as conn:
            got = conn.execute(
                select(func.max(COSIGNATURE.c.size)).where(COSIGNATURE.c.witness == witness)
            ).scalar_one_or_none()
        return int(got or 0)

    def table_rows(self, table: Any, order: Any) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(select(table).order_by(order))]


def load_keys(conn: Connection) -> dict[str, KeyInfo]:
    """The key registry: each key with its first revocation that counts (its signature
    checked by the keys as the revocations before it left them: `signed_revocation`)."""
    out: dict[str, KeyInfo] = {}
    # Who registered a key lives only in its log entry (no column), read from there.
    rows = conn.execute(
        text(
            'SELECT "key".keyid, "key".name, "key".role, "key".public_key, "key".seq,'
            ' log_entry.body FROM "key" JOIN log_entry ON log_entry.seq = "key".seq'
            ' ORDER BY "key".seq'
        )
    )
    for r in rows:
        out[r.keyid] = KeyInfo(
            keyid=r.keyid,
            name=r.name,
            role=r.role,
            public=Ed25519PublicKey.from_public_bytes(base64.b64decode(r.public_key)),
            seq=r.seq,
            registered_by=_registered_by(r.body),
        )
    # Plain SQL, like every lookup a question makes once per process (see receipt_entries).
    for row in conn.execute(
        text(
            "SELECT revocation.keyid, log_entry.seq, log_entry.body FROM revocation"
            " JOIN log_entry ON log_entry.seq = revocation.seq ORDER BY revocation.seq"
        )
    ):
        k = out.get(row.keyid)
        if k is None or k.revoked_seq is not None:
            continue
        e = LoggedEntry(int(row.seq), "revocation", "", _bytes(row.body), trusted=True)
        try:
            keyid, reason = e.revocation()
        except Error:
            continue
        if keyid == k.keyid and e.revocation_signature(out).problem is None:
            out[keyid] = k._replace(revoked_seq=e.seq, revoked_reason=reason)
    return out


def _bytes(body: str | bytes) -> bytes:
    return body.encode("utf-8", "surrogateescape") if isinstance(body, str) else bytes(body)


def _registered_by(body: str | bytes) -> str | None:
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    if '"registered_by"' not in text:
        return None
    try:
        by = json.loads(text).get("registered_by")
    except (ValueError, AttributeError):
        return None
    return by if isinstance(by, str) else None


@dataclass
class Appender:
    """Writes entries inside one locked transaction, numbering them gaplessly."""

    conn: Connection
    next_seq: int
    touched_keys: bool = False

    def row(self, *, kind: str, entry_id: str, body: bytes) -> dict[str, Any]:
        """The next log row (its seq taken); written by `add` or `insert_many`."""
        seq = self.next_seq
        self.next_seq += 1
        self.touched_keys = self.touched_keys or kind in ("key", "revocation")
        now = utc_now()
        return {
            "seq": seq,
            "kind": kind,
            "entry_id": entry_id,
            "body": body.decode(),
            "leaf_hash": entry_leaf(seq, now, body).hex(),
            "logged_at": now,
        }

    def add(
        self,
        *,
        kind: str,
        entry_id: str,
        body: bytes,
        index: Callable[[Connection, int], None] | None = None,
    ) -> int:
        r = self.row(kind=kind, entry_id=entry_id, body=body)
        self.conn.execute(LOG.insert().values(**r))
        if index is not None:
            index(self.conn, r["seq"])
        return int(r["seq"])

    def insert_many(self, table: Any, rows: Sequence[dict[str, Any]]) -> None:
        """One executemany per table: a batch costs a few round trips, not four per entry."""
        if rows:
            self.conn.execute(table.insert(), list(rows))

    def put_artifact(self, sha256: str, size: int, media_type: str) -> None:
        """Log an artifact's digest, size and media type once, inside this transaction.

        The bytes are in the artifact store (ledger.write.artifacts); `content` stays
        empty for them and holds bytes only in ledgers written before it.
        """
        if self.conn.execute(select(ARTIFACT.c.sha256).where(ARTIFACT.c.sha256 == sha256)).first():
            return
        self.conn.execute(
            ARTIFACT.insert().values(sha256=sha256, size=size, media_type=media_type, content=b"")
        )

    def existing(self, entry_ids: Sequence[str]) -> set[str]:
        found: set[str] = set()
        for i in range(0, len(entry_ids), 500):  # bounded IN lists
            chunk = entry_ids[i : i + 500]
            found.update(
                self.conn.execute(select(LOG.c.entry_id).where(LOG.c.entry_id.in_(chunk))).scalars()
            )
        return found
