"""What every request of `ledger serve` shares: the store, the keys, the tokens,
the artifact store and the answers kept.

Apart from `app` (the assembly) so that the routes (`api`) and the pages name
it without importing the application that mounts them: the arrows run
app -> api -> state, never back.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from starlette.requests import Request

from ledger.evidence.errors import Error, NotFoundError, RefusedError
from ledger.evidence.keys import KeyDir
from ledger.service.answers import Answers
from ledger.service.auth import TokenRole, Tokens
from ledger.service.fetching import MirrorFetch
from ledger.service.limits import MAX_BODY_BYTES
from ledger.store.store import ARTIFACT, Store
from ledger.write.artifacts import ArtifactStore

if TYPE_CHECKING:
    from ledger.read.reader import LocalReader

__all__ = ["Ledger"]


@dataclass
class Ledger:
    """What every request shares: the engine, the keys, the tokens, the artifact store."""

    base: Store
    keys: KeyDir | None
    tokens: Tokens
    artifacts: ArtifactStore
    max_body: int = MAX_BODY_BYTES
    quiet: bool = False
    mirrors: tuple[Path, ...] = ()
    """Checkouts status questions by repo and PR are identified in (`--repo`)."""
    _started: float = field(default_factory=time.monotonic)
    answers: Answers = field(default_factory=Answers)
    """Status and history answers, kept while the log size is unchanged."""
    fetch: MirrorFetch = field(default_factory=MirrorFetch)
    """Fetches the `mirrors` before a question is judged in them (bounded)."""

    def store(self) -> Store:
        """The one store every request shares (its engine and its key table;
        `live`: the key table is read again whenever the log grew)."""
        return self.base

    def holder(self, request: Request, role: TokenRole) -> str:
        """The token holder, when the request's token carries `role` (else 401/403)."""
        return self.tokens.holder(request.headers.get("authorization"), role)

    def log(self, line: str) -> None:
        if not self.quiet:
            sys.stderr.write(f"ledger serve: {line}\n")

    def record(self, raws: Sequence[bytes], reviews_only: bool) -> list[Any]:
        """Record a batch; the artifacts its receipts name are logged when uploaded first."""
        from ledger.evidence import dsse
        from ledger.evidence.statement import ArtifactFile, parse_statement
        from ledger.write.ingest import record

        files: list[ArtifactFile] = []
        seen: set[str] = set()
        for i, raw in enumerate(raws):
            try:
                stmt = parse_statement(dsse.decode_payload(dsse.parse_envelope(raw)))
            except Error:
                # Refused by ingest below, with the reason in its usual order
                # (the signature before the statement).
                continue
            kind = "review" if stmt.predicateType.endswith("/review/v1") else "receipt"
            if reviews_only and kind != "review":
                raise RefusedError(f"input {i + 1}: a receipt; post receipts to /v1/envelopes")
            for a in getattr(stmt.predicate, "artifacts", []):
                d = a.digest["sha256"]
                if d not in seen and self.artifacts.has(d):
                    seen.add(d)
                    files.append(ArtifactFile(a, self.artifacts.get(d)))
        out = record(self.store(), raws, files, self.artifacts)
        self.vouch()
        return out

    def vouch(self) -> None:
        """After a write: sign a checkpoint covering it, when this server holds the
        ledger key. Reads never sign (an anonymous GET must not write), so bundles
        and proofs of what this server logged are ready at once."""
        if self.keys is None:
            return
        from ledger.transparency.checkpoints import checkpoint

        try:
            checkpoint(self.store(), self.keys)
        except Error as e:
            self.log(f"no checkpoint after the write: {e.reason()}")

    def reader(self) -> LocalReader:
        """The read side's local reader over the one store, with this server's artifact
        store. It never signs: a read serves the checkpoints stored, never a new one."""
        from ledger.read.reader import LocalReader

        def artifact(digest: str) -> tuple[bytes, str]:
            media, content = self.artifact(digest)
            return content, media

        return LocalReader(
            store=self.store(), signs=False, artifacts=artifact, mirrors=self.mirrors
        )

    def artifact(self, digest: str) -> tuple[str, bytes]:
        """(media type, bytes) of an artifact the log names, digest-checked."""
        from sqlalchemy import select

        with self.base.engine.connect() as conn:
            row = conn.execute(
                select(ARTIFACT.c.media_type, ARTIFACT.c.content).where(ARTIFACT.c.sha256 == digest)
            ).first()
        if row is None:
            raise NotFoundError(f"no artifact sha256:{digest[:12]} is named by a logged receipt")
        if row.content:
            return str(row.media_type), bytes(row.content)  # stored before the artifact store
        return str(row.media_type), self.artifacts.get(digest)
