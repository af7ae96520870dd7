"""A witness of a log, both sides of C2SP tlog-witness.

The log's side: `witness` (`ledger log witness`) remembers the last checkpoint
it accepted and accepts a newer one only with a consistency proof from it, read
from a ledger database (`DbSource`) or a `ledger serve` (`ServerSource`); `prove`
and `consistency_from` are the proofs the server hands out and `ledger log
consistency --from` asks for.

The witness's side: `Witness`, `add-checkpoint` checked and answered, its state
in a small SQLite file. For each log it follows (by origin) the witness keeps the
last checkpoint it cosigned; a new one is cosigned only when the client's old
size is that size and a consistency proof from it holds. The check and the
update happen in one write transaction (BEGIN IMMEDIATE), so two concurrent
requests can never roll the stored size back. Over HTTP it is served by
`ledger.service.witness_http`. Neither side loads the store unless asked to
read one.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import sqlite3
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ledger._internal import merkle
from ledger._internal.checkpoint import Checkpoint, parse_checkpoint, verify_checkpoint
from ledger._internal.witness import check_extends, consistency_doc, signed_by_any
from ledger.evidence.errors import (
    CheckpointError,
    Error,
    InputError,
    NotFoundError,
    UsageError,
    VerificationError,
)
from ledger.evidence.limits import MAX_INT
from ledger.transparency.cosignature import cosign
from ledger.transparency.vkey import LOG_ED25519, WITNESS_ED25519, VKey, key_id, parse_vkey

if TYPE_CHECKING:
    from ledger.evidence.keys import KeyDir
    from ledger.store.store import Store

__all__ = [
    "SIZE_TYPE",
    "Answer",
    "DbSource",
    "ServerSource",
    "Witness",
    "consistency_from",
    "parse_logs",
    "prove",
    "witness",
]

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


def prove(store: Store, old: int, new: int) -> tuple[bytes, list[bytes]]:
    """(the signed note at `new`, a consistency proof from size `old` to it).

    Only `new` must be checkpointed: a client proves its own older checkpoint
    (of any size) against the root the ledger signs now.
    """
    from ledger.transparency.checkpoints import verify_note

    for v in (old, new):
        if not 1 <= v <= MAX_INT:
            raise UsageError(f"size {v} is outside 1..2^63-1")
    row = store.checkpoint(new)
    if row is None:
        raise NotFoundError(f"no checkpoint at size {new}")
    if old > new:
        raise UsageError(f"size {old} is larger than {new}")
    note = row.note.encode()
    verify_note(store, note)
    return note, merkle.consistency_proof(old, new, store.leaf_hashes(upto=new))


def _newest(store: Store, keys: KeyDir | None) -> bytes:
    """A fresh checkpoint when the ledger key is here, else the newest stored one."""
    from ledger.transparency.checkpoints import checkpoint

    if keys is not None:
        try:
            return checkpoint(store, keys)
        except Error:
            pass
    row = store.latest_checkpoint()
    if row is None:
        raise NotFoundError("no checkpoint has been signed yet; run `ledger log checkpoint`")
    return row.note.encode()


def consistency_from(store: Store, held: bytes, keys: KeyDir | None) -> dict[str, Any]:
    """Prove that a checkpoint a client holds is a prefix of the log now."""
    from ledger.transparency.checkpoints import ledger_signer, verify_note

    _, old = ledger_signer(store.keys().values(), held)
    note = _newest(store, keys)
    new = verify_note(store, note)
    leaves = store.leaf_hashes(upto=new.size) if old.size <= new.size else []
    proof = merkle.consistency_proof(old.size, new.size, leaves) if leaves else []
    check_extends(old, new, proof)
    return consistency_doc(old, new, note, proof)


class DbSource:
    """Checkpoints and proofs read straight from a ledger database."""

    def __init__(self, store: Store, trust: list[Ed25519PublicKey]) -> None:
        self.store, self.trust = store, trust

    def latest(self) -> bytes:
        """The newest checkpoint, with the witnesses' cosignatures kept for it."""
        note = _newest(self.store, None)
        size = parse_checkpoint(note).size
        return note + "".join(self.store.cosignatures(size)).encode()

    def verify(self, note: bytes) -> Checkpoint:
        from ledger.transparency.checkpoints import verify_note

        return signed_by_any(note, self.trust) if self.trust else verify_note(self.store, note)

    def proof(self, old: int, new: int) -> list[bytes]:
        if old > new:
            return []
        return merkle.consistency_proof(old, new, self.store.leaf_hashes(upto=new))


class ServerSource:
    """Checkpoints and proofs fetched from a `ledger serve`."""

    def __init__(self, url: str, trust: list[Ed25519PublicKey]) -> None:
        if not trust:
            raise UsageError("--server needs --trust LEDGER_KEY_PEM to check checkpoint signatures")
        self.url, self.trust = url.rstrip("/"), trust

    def _get(self, path: str) -> bytes:
        try:
            with urllib.request.urlopen(self.url + path, timeout=30) as r:
                return bytes(r.read())
        except urllib.error.HTTPError as e:
            raise VerificationError(f"{self.url}{path}: HTTP {e.code}") from None
        except (urllib.error.URLError, OSError) as e:
            raise UsageError(f"cannot reach {self.url}: {getattr(e, 'reason', e)}") from None

    def latest(self) -> bytes:
        return self._get("/v1/checkpoint")

    def verify(self, note: bytes) -> Checkpoint:
        return signed_by_any(note, self.trust)

    def proof(self, old: int, new: int) -> list[bytes]:
        if old > new:
            return []
        q = urllib.parse.urlencode({"from": old, "to": new})
        from ledger.evidence.limits import load_json

        doc = load_json(self._get(f"/v1/log/consistency?{q}"), "consistency proof")
        try:
            return [bytes.fromhex(h) for h in doc["proof"]]
        except (KeyError, TypeError, ValueError):
            raise VerificationError("the server's consistency proof is malformed") from None


def witness(
    state: Path, source: DbSource | ServerSource, accept: Callable[[bytes], str] | None = None
) -> str:
    """Accept the source's newest checkpoint if it extends the one in `state`
    (and, with `accept`, if that check of the note passes: a policy's quorum)."""
    note = source.latest()
    new = source.verify(note)
    line = f"size {new.size} root {new.root.hex()}"
    witnessed = accept(note) if accept is not None else None
    if state.exists():
        held = json.loads(state.read_text())["checkpoint"].encode()
        old = parse_checkpoint(held)
        check_extends(old, new, source.proof(old.size, new.size))
        line = f"consistent: {old.size} -> {new.size}, root {new.root.hex()}"
    else:
        line = f"first checkpoint seen: {line}"
    tmp = state.with_name(state.name + ".part")
    tmp.write_text(json.dumps({"checkpoint": note.decode()}) + "\n")
    os.replace(tmp, state)
    return line if witnessed is None else f"{line}; {witnessed}"
