"""A witness (C2SP tlog-witness): `add-checkpoint` checked and answered, its
state in a small SQLite file.

For each log it follows (by origin) the witness keeps the last checkpoint it
cosigned; a new one is cosigned only when the client's old size is that
size and a consistency proof from it holds. The check and the update happen
in one write transaction (BEGIN IMMEDIATE), so two concurrent requests can
never roll the stored size back.
"""

from __future__ import annotations

import base64
import binascii
import re
import sqlite3
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import NamedTuple

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ledger._internal import merkle
from ledger._internal.checkpoint import Checkpoint, parse_checkpoint, verify_checkpoint
from ledger.evidence.errors import CheckpointError, InputError
from ledger.transparency.cosignature import cosign
from ledger.transparency.vkey import LOG_ED25519, WITNESS_ED25519, VKey, key_id, parse_vkey

__all__ = ["SIZE_TYPE", "Answer", "Witness", "parse_logs"]

SIZE_TYPE = "text/x.tlog.size"
MAX_PROOF_LINES = 63
_OLD = re.compile(r"old (0|[1-9][0-9]*)")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS witnessed (
    origin TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    root BLOB NOT NULL,
    note BLOB NOT NULL
)
"""


class Answer(NamedTuple):
    """An HTTP answer: status, content type, body."""

    status: int
    content_type: str
    body: bytes


def _text(status: int, reason: str) -> Answer:
    return Answer(status, "text/plain; charset=utf-8", reason.encode() + b"\n")


def parse_logs(data: bytes) -> dict[str, list[VKey]]:
    """A witness's config: `log VKEY [URL]` lines (the log lines of a tlog-policy),
    `#` comments and blank lines; the logs' keys by origin (the vkey's name)."""
    logs: dict[str, list[VKey]] = {}
    for number, line in enumerate(data.decode("utf-8", "replace").split("\n"), start=1):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if words[0] != "log" or len(words) not in (2, 3):
            raise InputError(f"witness config line {number}: expected: log VKEY [URL]")
        vkey = parse_vkey(words[1], f"witness config line {number}")
        if vkey.sig_type != LOG_ED25519:
            raise InputError(f"witness config line {number}: a log key must be of type 0x01")
        logs.setdefault(vkey.name, []).append(vkey)
    if not logs:
        raise InputError("witness config: no log line")
    return logs


class _Request(NamedTuple):
    old: int
    proof: list[bytes]
    note: bytes


def _parse_request(body: bytes) -> _Request:
    head, sep, note = body.partition(b"\n\n")
    if not sep:
        raise InputError("no empty line before the checkpoint")
    lines = head.split(b"\n")
    m = _OLD.fullmatch(lines[0].decode("ascii", "replace"))
    if m is None:
        raise InputError("the first line is not `old SIZE`")
    if len(lines) - 1 > MAX_PROOF_LINES:
        raise InputError(f"more than {MAX_PROOF_LINES} consistency proof lines")
    proof = []
    for line in lines[1:]:
        try:
            h = base64.b64decode(line, validate=True)
        except (binascii.Error, ValueError):
            raise InputError("a consistency proof line is not base64") from None
        if len(h) != merkle.HASH_SIZE or base64.b64encode(h) != line:
            raise InputError("a consistency proof line is not one SHA-256 hash")
        proof.append(h)
    return _Request(int(m.group(1)), proof, note)


class Witness:
    """One witness: its name and key, the logs it follows, its state file."""

    def __init__(
        self,
        name: str,
        private: Ed25519PrivateKey,
        logs: dict[str, list[VKey]],
        state: Path,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.name, self.private, self.logs, self.state = name, private, logs, state
        self.clock = clock
        with closing(self._db()) as db:
            db.execute(_SCHEMA)

    @property
    def vkey(self) -> VKey:
        return VKey(self.name, WITNESS_ED25519, self.private.public_key())

    @property
    def key_id(self) -> bytes:
        return key_id(self.name, WITNESS_ED25519, self.private.public_key())

    def _db(self) -> sqlite3.Connection:
        # isolation_level=None: transactions are begun by hand (BEGIN IMMEDIATE).
        return sqlite3.connect(self.state, timeout=30, isolation_level=None)

    def _verified(self, note: bytes) -> Checkpoint | Answer:
        try:
            cp = parse_checkpoint(note)
        except CheckpointError as e:
            return _text(400, f"bad checkpoint: {e.reason()}")
        keys = self.logs.get(cp.origin)
        if keys is None:
            return _text(404, f"unknown log {cp.origin!r}")
        for vkey in keys:
            # Only the line named as the vkey: signatures of unknown keys are ignored.
            if not any(s.name == vkey.name and s.key_hint == vkey.id for s in cp.signatures):
                continue
            try:
                return verify_checkpoint(note, key_name=vkey.name, public_key=vkey.public)
            except CheckpointError:
                continue
        return _text(403, "no signature by a known key of this log verifies")

    def add_checkpoint(self, body: bytes) -> Answer:
        """Answer one add-checkpoint request body."""
        try:
            req = _parse_request(body)
        except InputError as e:
            return _text(400, e.reason())
        cp = self._verified(req.note)
        if isinstance(cp, Answer):
            return cp
        if req.old > cp.size:
            return _text(400, f"old size {req.old} is larger than the checkpoint's {cp.size}")
        if req.old == 0 and req.proof:
            return _text(422, "a proof from size 0 must be empty")
        with closing(self._db()) as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                answer = self._check_and_store(db, req, cp)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT" if answer is None else "ROLLBACK")
        if answer is not None:
            return answer
        line = cosign(cp.body, self.name, self.private, int(self.clock()))
        return Answer(200, "text/plain; charset=utf-8", line.encode())

    def _check_and_store(
        self, db: sqlite3.Connection, req: _Request, cp: Checkpoint
    ) -> Answer | None:
        row = db.execute(
            "SELECT size, root FROM witnessed WHERE origin = ?", (cp.origin,)
        ).fetchone()
        size, root = (0, merkle.EMPTY_ROOT) if row is None else (int(row[0]), bytes(row[1]))
        if req.old != size:
            return Answer(409, SIZE_TYPE, b"%d\n" % size)
        if req.old == cp.size:
            if root != cp.root:
                return _text(409, f"another root at size {size}")
        else:
            try:
                merkle.verify_consistency(req.old, cp.size, root, cp.root, req.proof)
            except merkle.MerkleError as e:
                return _text(422, f"consistency proof: {e}")
        db.execute(
            "INSERT INTO witnessed (origin, size, root, note) VALUES (?, ?, ?, ?) "
            "ON CONFLICT(origin) DO UPDATE SET size = excluded.size, root = excluded.root, "
            "note = excluded.note",
            (cp.origin, cp.size, cp.root, cp.body),
        )
        return None
