"""The local outbox: nothing measured is lost when the server is away.

`qualify --server` and `attest --server` write each signed batch (the
envelopes of one claim and the artifacts they name) here before sending it;
a batch leaves the outbox only once the server acknowledged every envelope
(recorded or a duplicate, which is as good). `ledger push` sends what is
left, oldest first. A batch is a folder written under a temporary name and
renamed, so a crash never leaves half a batch to send.

Default: `$LEDGER_OUTBOX`, else `$XDG_DATA_HOME/ledger/outbox/`.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Batch", "Outbox", "PushResult", "push"]


def default_dir() -> Path:
    env = os.environ.get("LEDGER_OUTBOX")
    if env:
        return Path(env)
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "ledger" / "outbox"


@dataclass(frozen=True)
class Batch:
    path: Path

    @property
    def envelopes(self) -> list[bytes]:
        docs = json.loads((self.path / "envelopes.json").read_bytes())
        return [json.dumps(d).encode() for d in docs]

    @property
    def artifacts(self) -> list[dict[str, Any]]:
        return list(json.loads((self.path / "artifacts.json").read_bytes()))

    def content(self, sha256: str) -> bytes:
        return (self.path / "artifacts" / sha256).read_bytes()


class Outbox:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path or default_dir()

    def put(self, envelopes: Sequence[bytes], artifacts: Sequence[tuple[str, str, bytes]]) -> Batch:
        """Keep a batch: envelopes and (sha256, media type, bytes) of each artifact."""
        self.path.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256(b"".join(envelopes)).hexdigest()[:16]
        # Time first, so a directory listing is the order the batches were made in.
        name = f"{time.time_ns():020d}-{digest}"
        tmp = self.path / f".{name}.{secrets.token_hex(4)}.part"
        (tmp / "artifacts").mkdir(parents=True)
        docs = [json.loads(e) for e in envelopes]
        (tmp / "envelopes.json").write_text(json.dumps(docs))
        (tmp / "artifacts.json").write_text(
            json.dumps([{"sha256": d, "mediaType": m} for d, m, _ in artifacts])
        )
        for d, _, content in artifacts:
            (tmp / "artifacts" / d).write_bytes(content)
        os.replace(tmp, self.path / name)
        return Batch(self.path / name)

    def batches(self) -> Iterator[Batch]:
        if not self.path.is_dir():
            return
        for p in sorted(self.path.iterdir()):
            if p.is_dir() and not p.name.startswith("."):
                yield Batch(p)

    def remove(self, batch: Batch) -> None:
        shutil.rmtree(batch.path)


@dataclass
class PushResult:
    sent: int = 0
    """Envelopes the server acknowledged (recorded or already held)."""
    recorded: list[dict[str, Any]] | None = None
    kept: int = 0
    """Envelopes still in the outbox."""
    reasons: list[str] | None = None


def send(url: str, batch: Batch, token: str | None) -> list[dict[str, Any]]:
    """Upload a batch's artifacts, then record its envelopes (raises on failure)."""
    from ledger.remote import client

    for a in batch.artifacts:
        client.upload_artifact(url, batch.content(a["sha256"]), a["mediaType"], token)
    return client.post_envelopes(url, batch.envelopes)


def push(url: str, outbox: Outbox, token: str | None = None) -> PushResult:
    """Send every batch, oldest first; remove only what the server acknowledged."""
    from ledger.evidence.errors import Error

    out = PushResult(recorded=[], reasons=[])
    assert out.recorded is not None and out.reasons is not None
    for batch in list(outbox.batches()):
        n = len(batch.envelopes)
        try:
            recs = send(url, batch, token)
        except Error as e:
            out.kept += n
            out.reasons.append(f"{batch.path.name}: {e.reason()}")
            continue
        outbox.remove(batch)
        out.sent += n
        out.recorded.extend(recs)
    return out
