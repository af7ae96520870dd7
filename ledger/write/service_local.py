"""Reading artifacts of a local ledger (`ledger artifact get`, `export --artifacts`)."""

from __future__ import annotations

from sqlalchemy import select

from ledger.evidence.errors import NotFoundError
from ledger.store.store import ARTIFACT, Store
from ledger.write.artifacts import _digest, for_ledger

__all__ = ["artifact_of"]


def artifact_of(store: Store, digest: str) -> tuple[bytes, str]:
    """(bytes, media type) of an artifact the log names, checked against its digest."""
    d = _digest(digest)
    with store.engine.connect() as conn:
        row = conn.execute(
            select(ARTIFACT.c.media_type, ARTIFACT.c.content).where(ARTIFACT.c.sha256 == d)
        ).first()
    if row is None:
        raise NotFoundError(f"no artifact sha256:{d[:12]} is named by a logged receipt")
    if row.content:  # written before the artifact store
        import hashlib

        data = bytes(row.content)
        if hashlib.sha256(data).hexdigest() != d:
            from ledger.evidence.errors import VerificationError

            raise VerificationError(f"artifact sha256:{d[:12]} differs from its digest")
        return data, str(row.media_type)
    return for_ledger(store.url).get(d), str(row.media_type)
