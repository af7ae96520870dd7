"""A witness of the log, in the manner of C2SP tlog-witness: it remembers the
last checkpoint it accepted and accepts a newer one only with a consistency
proof from it. Also `ledger log consistency --from` and the proofs the server
hands out."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from ledger._internal import merkle
from ledger._internal.checkpoint import Checkpoint, parse_checkpoint
from ledger._internal.witness import check_extends, consistency_doc, signed_by_any
from ledger.evidence.errors import Error, NotFoundError, UsageError, VerificationError
from ledger.evidence.keys import KeyDir
from ledger.evidence.limits import MAX_INT
from ledger.log.checkpoints import checkpoint, ledger_signer, verify_note
from ledger.store.store import Store

__all__ = ["DbSource", "ServerSource", "consistency_from", "prove", "witness"]


def prove(store: Store, old: int, new: int) -> tuple[bytes, list[bytes]]:
    """(the signed note at `new`, a consistency proof from size `old` to it).

    Only `new` must be checkpointed: a client proves its own older checkpoint
    (of any size) against the root the ledger signs now.
    """
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
