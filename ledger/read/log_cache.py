"""A served log kept on the client (`status --server` with `--trust` or `--policy`): its
entries up to the newest checkpoint this host verified, with the checkpoint and the
Merkle tree's compact range, so the next question fetches only what was logged since.

One SQLite file per log (its checkpoint origin) under the cache folder: `$LEDGER_CACHE`,
else `$XDG_CACHE_HOME/ledger`, else `~/.cache/ledger`. Keyed by origin, not by URL: two
servers of one log must serve one history, and a second whose checkpoint is not an
extension of the last one seen is refused (a forked log). New entries are written
only once they and the entries held hash to the new signed root, in one transaction:
a refused sync writes nothing. A tree holds together over whatever bodies the server
logged, so each new receipt's and review's signature is verified too, by the keys the
log registered before it: a body changed after it was signed is refused by its position.
Beside each receipt, review and receipt revocation the
few index columns a question selects by (`read/evidence.py` asks the store the same).
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger.evidence.entry import LoggedEntry, ReceiptRevocation, first_revocations
from ledger.evidence.errors import Error, UsageError, VerificationError
from ledger.evidence.keys import KeyInfo
from ledger.identity.aliases import read_alias
from ledger.identity.repoid import canonical_repo
from ledger.monitor.remote import extended, keys_of

__all__ = ["Held", "LogCache", "cache_dir"]

_VERSION = 3
"""2: each receipt's and review's signature verified at sync. A copy kept at version 1
was not, so it is fetched again (and checked) rather than read. 3: a signed revocation's
receipt indexed (version 2 indexed only the unsigned form's), so a copy kept at 2 is
fetched again too."""
_TABLES = ("meta", "entry", "receipt", "review", "revoked")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS entry (
  seq INTEGER PRIMARY KEY, kind TEXT NOT NULL, id TEXT NOT NULL,
  body BLOB NOT NULL, logged_at TEXT);
CREATE INDEX IF NOT EXISTS entry_kind ON entry (kind, seq);
CREATE TABLE IF NOT EXISTS receipt (
  seq INTEGER PRIMARY KEY, repo_id TEXT, "commit" TEXT, tree TEXT, package TEXT,
  pr INTEGER, claim TEXT);
CREATE INDEX IF NOT EXISTS receipt_commit ON receipt (repo_id, "commit");
CREATE INDEX IF NOT EXISTS receipt_tree ON receipt (repo_id, tree);
CREATE INDEX IF NOT EXISTS receipt_package ON receipt (repo_id, package);
CREATE INDEX IF NOT EXISTS receipt_pr ON receipt (repo_id, pr);
CREATE TABLE IF NOT EXISTS review (seq INTEGER PRIMARY KEY, receipt_id TEXT);
CREATE INDEX IF NOT EXISTS review_receipt ON review (receipt_id);
CREATE TABLE IF NOT EXISTS revoked (seq INTEGER PRIMARY KEY, receipt_id TEXT);
CREATE INDEX IF NOT EXISTS revoked_receipt ON revoked (receipt_id);
"""


def cache_dir() -> Path:
    """Where logs are kept: `$LEDGER_CACHE`, else the user's cache folder."""
    if env := os.environ.get("LEDGER_CACHE"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ledger"


@dataclass(frozen=True, slots=True)
class Held:
    """The newest checkpoint a log's copy here was verified against."""

    size: int
    root: bytes


class LogCache:
    """One log's entries as this host verified them (`open`, then `sync`)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._pinned: dict[str, Any] = {}
        """What the copy's entries decide whatever is asked (its key registry, its alias
        links), read once per copy state: a question reads them several times."""
        try:
            self._open(path)
        except sqlite3.DatabaseError as e:
            raise UsageError(f"the log kept at {path} does not read ({e}): remove it") from None

    def _open(self, path: Path) -> None:
        # One question at a time, on whichever thread asks it (`read/open_copies.py`
        # keeps a copy open between questions and lends it to one at a time).
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.inode = os.stat(path).st_ino
        # A copy that can be fetched again: neither a commit nor the checkpoint of the
        # write-ahead log on close waits for the disk (a power cut may lose the newest
        # sync, which the next question repeats; a file that no longer reads is named).
        self._db.execute("PRAGMA synchronous=OFF")
        self._prepare()

    def _prepare(self) -> None:
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version != _VERSION:
            self._pinned.clear()
            self._db.execute("PRAGMA journal_mode=WAL")  # kept in the file
            # A copy of another version starts empty: the next sync fetches it all.
            drop = "".join(f"DROP TABLE IF EXISTS {t};" for t in _TABLES) if version else ""
            self._db.executescript(drop + _SCHEMA + f"PRAGMA user_version = {_VERSION};")

    @classmethod
    def open(cls, origin: str, where: Path | None = None) -> LogCache:
        return cls(cls.open_path(origin, where))

    @staticmethod
    def open_path(origin: str, where: Path | None = None) -> Path:
        """The file that keeps the log `origin` names, its folder made where missing."""
        folder = (where or cache_dir()) / "logs"
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UsageError(f"cannot keep the log here ({folder}): {e.strerror}") from None
        # The origin names the file; anything but a plain name character is replaced,
        # so no origin a server chose reaches outside the folder.
        name = re.sub(r"[^A-Za-z0-9._-]", "_", origin)[:120] or "_"
        return folder / f"{name}.sqlite"

    @staticmethod
    def remembered(url: str, where: Path | None = None) -> str | None:
        """The origin `url` served last time, or None: a hint only, so the entries since
        can be asked beside the checkpoint (whose origin decides which log is synced)."""
        try:
            return _hint(url, where).read_text(encoding="utf-8").strip() or None
        except (OSError, UnicodeDecodeError):
            return None

    @staticmethod
    def remember(url: str, origin: str, where: Path | None = None) -> None:
        path = _hint(url, where)
        try:
            if LogCache.remembered(url, where) != origin:
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(f".{os.getpid()}")
                tmp.write_text(origin + "\n", encoding="utf-8")
                tmp.replace(path)
        except OSError:
            pass  # a hint not kept costs the next question one round trip, nothing else

    def close(self) -> None:
        self._db.close()

    def reopened(self) -> None:
        """Ready for another question after an earlier one on this connection: the copy
        read again as a fresh open reads it (another process may have synced it, or one
        of another version replaced it), what it pinned kept only while the copy holds
        the checkpoint it was read at."""
        self._prepare()
        if self._pinned.get("at", False) != self.held():
            self._pinned.clear()

    # -- the checkpoint ------------------------------------------------------------

    def _meta(self, k: str) -> str | None:
        row = self._db.execute("SELECT v FROM meta WHERE k = ?", (k,)).fetchone()
        return None if row is None else str(row[0])

    def held(self) -> Held | None:
        got = dict(self._db.execute("SELECT k, v FROM meta WHERE k IN ('size', 'root')"))
        size, root = got.get("size"), got.get("root")
        if size is None or root is None:
            return None
        return Held(int(size), bytes.fromhex(root))

    def _nodes(self) -> list[bytes]:
        nodes = self._meta("nodes")
        return [bytes.fromhex(n) for n in nodes.split()] if nodes else []

    def sync(self, size: int, root: bytes, fetch: Callable[[int, int], list[LoggedEntry]]) -> int:
        """Bring the copy up to the checkpoint of `size` and `root` (its signature
        verified by the caller), fetching entries from the
        last checkpoint held onward; returns how many were fetched. A checkpoint that
        is not an extension of the one held is refused (`VerificationError`), and
        nothing is written."""
        held = self.held()
        if held is not None:
            if size < held.size:
                raise VerificationError(
                    f"the server's checkpoint (size {size}) is older than the last one "
                    f"seen here (size {held.size}): a log never shrinks"
                )
            if size == held.size:
                if root != held.root:
                    raise VerificationError(_fork(size, root, held))
                return 0
        start = 0 if held is None else held.size
        new = fetch(start, size)
        got, nodes = extended(start, self._nodes() if held is not None else [], new)
        if got != root:
            if held is not None:
                raise VerificationError(_fork(size, root, held))
            raise VerificationError(
                f"the served entries do not hash to the signed root at size {size}"
            )
        keys = _check_signatures(self.keys() if held is not None else {}, new)
        with self._tx():
            self._pinned.clear()
            if self.held() != held:
                # Another process of this host synced meanwhile: its copy stands (it was
                # verified as this one was), and the next question checks it again.
                return len(new)
            # The registry the new entries leave: what `keys` would read back.
            self._pinned.update(keys=keys, at=Held(size, root))
            self._db.executemany(
                "INSERT INTO entry VALUES (?, ?, ?, ?, ?)",
                [(e.seq, e.kind, e.entry_id, e.body, e.logged_at) for e in new],
            )
            for table, rows in _index(new).items():
                marks = ", ".join("?" * len(rows[0]))
                self._db.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)
            self._db.executemany(
                "INSERT OR REPLACE INTO meta VALUES (?, ?)",
                [
                    ("size", str(size)),
                    ("root", root.hex()),
                    ("nodes", " ".join(n.hex() for n in nodes)),
                ],
            )
        return len(new)

    def _tx(self) -> Any:
        from contextlib import contextmanager

        @contextmanager
        def tx() -> Iterator[None]:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

        return tx()

    # -- reading -------------------------------------------------------------------

    def _entries(self, sql: str, args: Sequence[Any]) -> list[LoggedEntry]:
        with closing(self._db.execute(sql, list(args))) as cur:
            return [LoggedEntry(s, k, i, bytes(b), t, trusted=True) for s, k, i, b, t in cur]

    def receipts(
        self,
        repo_ids: Sequence[str],
        *,
        commits: Sequence[str],
        trees: Sequence[str],
        packages: Sequence[str],
        pr: int | None,
        claims: Sequence[str] | None,
    ) -> list[LoggedEntry]:
        """Receipts that could bear on a revision: the same keys, united, as the
        store's `receipt_entries` selects them."""
        parts: list[str] = []
        args: list[Any] = []
        for col, values in (
            ('"commit"', commits),
            ("tree", trees),
            ("package", packages),
            ("pr", [] if pr is None else [pr]),
        ):
            for repo_id in repo_ids:
                for v in values:
                    part = f"SELECT seq FROM receipt WHERE repo_id = ? AND {col} = ?"
                    args += [repo_id, v]
                    if claims:
                        part += f" AND claim IN ({', '.join('?' * len(claims))})"
                        args += list(claims)
                    parts.append(part)
        if not parts:
            return []
        return self._entries(
            "SELECT seq, kind, id, body, logged_at FROM entry WHERE seq IN "
            f"({' UNION '.join(parts)}) ORDER BY seq",
            args,
        )

    def reviews(self, receipt_ids: Sequence[str]) -> list[LoggedEntry]:
        return self._by_receipt("review", receipt_ids)

    def revocations(self, receipt_ids: Sequence[str]) -> dict[str, ReceiptRevocation]:
        """The first revocation that counts of each receipt that has one, its signature
        checked by the log's keys as held here (else its first, with why it does not)."""
        found: list[ReceiptRevocation] = []
        entries = self._by_receipt("revoked", receipt_ids)
        keys = self.keys() if entries else {}
        for e in entries:
            try:
                found.append(e.receipt_revocation(keys))
            except Error:
                continue
        return first_revocations(found)

    def _by_receipt(self, table: str, receipt_ids: Sequence[str]) -> list[LoggedEntry]:
        out: list[LoggedEntry] = []
        ids = sorted(set(receipt_ids))
        for i in range(0, len(ids), 500):  # bounded IN lists
            chunk = ids[i : i + 500]
            out += self._entries(
                "SELECT seq, kind, id, body, logged_at FROM entry WHERE seq IN "
                f"(SELECT seq FROM {table} WHERE receipt_id IN ({', '.join('?' * len(chunk))}))"
                " ORDER BY seq",
                chunk,
            )
        return sorted(out, key=lambda e: e.seq)

    def keys(self) -> dict[str, KeyInfo]:
        """The key registry as the log held here states it."""
        if "keys" not in self._pinned:
            self._pinned.setdefault("at", self.held())
            self._pinned["keys"] = keys_of(
                self._entries(
                    "SELECT seq, kind, id, body, logged_at FROM entry"
                    " WHERE kind IN ('key', 'revocation') ORDER BY seq",
                    (),
                )
            )
        return dict(self._pinned["keys"])

    def links(self) -> list[tuple[str, str]]:
        """Each alias entry's (earlier id, id it counts under), in log order."""
        if "links" not in self._pinned:
            self._pinned.setdefault("at", self.held())
            self._pinned["links"] = self._links()
        return list(self._pinned["links"])

    def _links(self) -> list[tuple[str, str]]:
        out = []
        for e in self._entries(
            "SELECT seq, kind, id, body, logged_at FROM entry WHERE kind = 'alias' ORDER BY seq",
            (),
        ):
            try:
                out.append(read_alias(_json(e.body)))
            except Error:
                continue  # as the store's reader skips it
        return out

    def aliases_of(self, repo_id: str) -> list[str]:
        """The earlier ids the log's alias entries count under `repo_id` (chains too)."""
        links = self.links()
        found: list[str] = []
        todo = [repo_id]
        while todo:
            at = todo.pop()
            for old, new in links:
                if new == at and old != repo_id and old not in found:
                    found.append(old)
                    todo.append(old)
        return found


def _hint(url: str, where: Path | None) -> Path:
    import hashlib

    digest = hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:32]
    return (where or cache_dir()) / "servers" / digest


def _check_signatures(
    held: Mapping[str, KeyInfo], new: Sequence[LoggedEntry]
) -> dict[str, KeyInfo]:
    """Each of `new`'s receipts and reviews signed by a key the log registered before it
    (`held`: the registry of the entries kept here, the new entries' own added in log
    order), every signature by such a key verifying; `VerificationError` naming the
    first that does not. The judge reads a held entry's signers without verifying them
    again (`verify/standing.py`), as the server's store does after its ingest. Returns
    the registry once the new entries are added."""
    from ledger.evidence import dsse

    keys = dict(held)
    for e in new:
        if e.kind in ("key", "revocation"):
            keys = keys_of([e], keys)
            continue
        if e.kind not in ("receipt", "review"):
            continue
        try:
            env = e.envelope
            # Only the keys it names, as registered before it (not the whole registry).
            named = (keys.get(sig.keyid) for sig in env.signatures)
            before = {k.keyid: k.public for k in named if k is not None and k.seq < e.seq}
            dsse.verify(env, before)
        except Error as err:
            raise VerificationError(
                f"entry {e.seq} ({e.kind} {e.entry_id[:19]}) served by the log does not "
                f"verify: {err.reason()}; its signature is not by a key the log registered "
                "before it, or its body is not what was signed"
            ) from None
    return keys


def _fork(size: int, root: bytes, held: Held) -> str:
    return (
        f"the server's checkpoint (size {size}, root {root.hex()[:16]}) is not "
        f"consistent with the last one seen here (size {held.size}, root "
        f"{held.root.hex()[:16]}): a forked log"
    )


def _json(raw: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(raw)
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def _index(entries: Sequence[LoggedEntry]) -> dict[str, list[tuple[Any, ...]]]:
    """The columns a question selects by, read from each entry's payload; an entry that
    does not read gets none (its question's answer cannot count it either)."""
    out: dict[str, list[tuple[Any, ...]]] = {}
    for e in entries:
        try:
            if e.kind == "receipt":
                p = e.payload_document["predicate"]
                src = p["source"]
                package = (src.get("package") or {}).get("digest")
                row: tuple[Any, ...] = (
                    e.seq,
                    canonical_repo(str(src["repo"])),
                    src.get("commit"),
                    src.get("tree"),
                    package,
                    src.get("pr"),
                    p.get("claim"),
                )
                out.setdefault("receipt", []).append(row)
            elif e.kind == "review":
                rid = e.payload_document["predicate"]["receipt"]
                out.setdefault("review", []).append((e.seq, str(rid)))
            elif e.kind == "revocation" and e.revokes_receipt:
                out.setdefault("revoked", []).append((e.seq, str(e.revocation_doc["receipt"])))
        except (Error, KeyError, TypeError, AttributeError, ValueError):
            continue
    return out
