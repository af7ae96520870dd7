"""The content-addressed artifact store: receipts name artifacts by digest, the
database keeps digest, size and media type, and the bytes live here.

By default the files lie under the ledger's data directory: beside a SQLite
ledger (for the default database that is `$XDG_DATA_HOME/ledger/artifacts/`),
and `$XDG_DATA_HOME/ledger/artifacts/` for a server database. A team sets
`$LEDGER_ARTIFACTS` (or `ledger serve --artifacts`) to any fsspec URL, e.g.
`s3://bucket/ledger-artifacts`, so every server replica reads the same bytes.
Files are named by their sha256, written to a temporary name and renamed, so
a reader never sees half an artifact and a second write of the same bytes is a
no-op. A file whose receipt was then refused stays as an orphan: harmless, as
nothing names it, and the same bytes are reused if a later receipt does.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Any

from ledger.evidence.errors import NotFoundError, UsageError, VerificationError
from ledger.evidence.kinds import DEFAULT_MEDIA_TYPE

__all__ = [
    "MAX_ARTIFACT_BYTES",
    "SNAPSHOT_MEDIA_TYPE",
    "ArtifactStore",
    "ArtifactWriter",
    "for_ledger",
]

# One artifact is held in memory on its way in and out (a receipt's batch is
# verified before anything is written), so it is bounded: 256 MiB holds the
# memory snapshot of a long training run with a deep trace.
MAX_ARTIFACT_BYTES = 256 * 1024 * 1024
SNAPSHOT_MEDIA_TYPE = "application/vnd.pytorch.memory-snapshot+pickle"
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def _digest(ref: str) -> str:
    d = ref.strip().lower().removeprefix("sha256:")
    if not _HEX64.match(d):
        raise UsageError(f"{ref!r} is not an artifact digest (sha256:<64 hex digits>)")
    return d


class ArtifactStore:
    """Files named by sha256 under a local folder or an fsspec URL."""

    def __init__(self, location: str) -> None:
        self.location = location.rstrip("/")
        self._fs: Any = None
        if "://" in location and not location.startswith("file://"):
            try:
                import fsspec
            except ImportError:
                raise UsageError(
                    f"artifact store {location}: fsspec is not installed (pip install fsspec)"
                ) from None
            self._fs, self._root = fsspec.core.url_to_fs(location)
        else:
            self._root = location.removeprefix("file://")

    def _path(self, sha256: str) -> str:
        # Two levels of fan-out keep any one folder small on a big ledger.
        return f"{self._root}/{sha256[:2]}/{sha256}"

    def has(self, sha256: str) -> bool:
        p = self._path(_digest(sha256))
        return bool(self._fs.exists(p)) if self._fs is not None else Path(p).is_file()

    def put(self, sha256: str, content: bytes) -> None:
        """Store bytes under their digest (checked), atomically and idempotently."""
        d = _digest(sha256)
        if hashlib.sha256(content).hexdigest() != d:
            raise VerificationError(f"artifact sha256:{d[:12]}: content differs from its digest")
        if self.has(d):
            return
        final = self._path(d)
        import secrets  # here: `ledger verify BUNDLE` checks artifacts, writes none

        tmp = f"{final}.{secrets.token_hex(4)}.part"
        if self._fs is not None:
            self._fs.makedirs(final.rsplit("/", 1)[0], exist_ok=True)
            self._fs.pipe_file(tmp, content)
            self._fs.mv(tmp, final)
            return
        Path(final).parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(content)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)

    def writer(self, sha256: str) -> ArtifactWriter:
        """A streamed `put`: chunks go to a temporary file as they arrive (memory: one
        chunk), hashed on the way; `commit` checks the digest and moves it in place."""
        d = _digest(sha256)
        final = self._path(d)
        import secrets

        tmp = f"{final}.{secrets.token_hex(4)}.part"
        if self._fs is not None:
            self._fs.makedirs(final.rsplit("/", 1)[0], exist_ok=True)
            f = self._fs.open(tmp, "wb")
        else:
            Path(final).parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            f = os.fdopen(fd, "wb")
        return ArtifactWriter(self, d, final, tmp, f)

    def get(self, sha256: str) -> bytes:
        """The bytes of an artifact, checked against the digest on the way out."""
        d = _digest(sha256)
        p = self._path(d)
        try:
            data = bytes(self._fs.cat_file(p)) if self._fs is not None else Path(p).read_bytes()
        except FileNotFoundError:
            raise NotFoundError(f"no artifact sha256:{d[:12]} in {self.location}") from None
        if hashlib.sha256(data).hexdigest() != d:
            raise VerificationError(
                f"artifact sha256:{d[:12]} in {self.location} differs from its digest"
            )
        return data


class ArtifactWriter:
    """One artifact being streamed into the store (see `ArtifactStore.writer`)."""

    def __init__(self, store: ArtifactStore, digest: str, final: str, tmp: str, f: Any) -> None:
        self.store, self.digest, self.final, self.tmp, self._f = store, digest, final, tmp, f
        self._h = hashlib.sha256()
        self.size = 0

    def write(self, chunk: bytes) -> None:
        self._h.update(chunk)
        self._f.write(chunk)
        self.size += len(chunk)

    def commit(self) -> None:
        """Keep it when the bytes are those of the digest; VerificationError otherwise."""
        try:
            if self.store._fs is None:
                self._f.flush()
                os.fsync(self._f.fileno())
            self._f.close()
            if self._h.hexdigest() != self.digest:
                raise VerificationError(
                    f"artifact sha256:{self.digest[:12]}: content differs from its digest"
                )
            if self.store._fs is not None:
                self.store._fs.mv(self.tmp, self.final)
            else:
                os.replace(self.tmp, self.final)
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        try:
            self._f.close()
        finally:
            if self.store._fs is not None:
                if self.store._fs.exists(self.tmp):
                    self.store._fs.rm(self.tmp)
            else:
                Path(self.tmp).unlink(missing_ok=True)


def default_location(db_url: str) -> str:
    """The artifact folder that belongs with a ledger database."""
    env = os.environ.get("LEDGER_ARTIFACTS")
    if env:
        return env
    if db_url.startswith("sqlite:///"):
        return str(Path(db_url.removeprefix("sqlite:///")).parent / "artifacts")
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return str(Path(data) / "ledger" / "artifacts")


def for_ledger(db_url: str, location: str | None = None) -> ArtifactStore:
    return ArtifactStore(location or default_location(db_url))


def bundle_with_artifacts(bundle: bytes, files: list[tuple[str, str, bytes]]) -> bytes:
    """The bundle with the receipt's artifacts inside: (sha256, media type, bytes) each."""
    import base64
    import json

    from ledger.evidence.canonical import canonical_bytes

    doc = json.loads(bundle)
    doc["artifacts"] = [
        {"sha256": d, "mediaType": m, "size": len(c), "content": base64.b64encode(c).decode()}
        for d, m, c in files
    ]
    return canonical_bytes(doc)


def check_bundle_artifacts(bundle: bytes, statement: dict[str, Any]) -> list[str]:
    """Each artifact inside a bundle against the digest, size and media type the
    verified receipt names; returns one line per artifact checked."""
    import base64
    import binascii
    import json

    items = json.loads(bundle).get("artifacts")
    if items is None:
        return []
    named = {a["digest"]["sha256"]: a for a in statement.get("predicate", {}).get("artifacts", [])}
    out = []
    if not isinstance(items, list):
        raise VerificationError("bundle artifacts: not a list")
    for i, item in enumerate(items):
        try:
            content = base64.b64decode(item["content"], validate=True)
            d = str(item["sha256"])
        except (KeyError, TypeError, binascii.Error, ValueError):
            raise VerificationError(f"bundle artifacts[{i}]: malformed") from None
        a = named.get(d)
        if a is None:
            raise VerificationError(f"bundle artifact sha256:{d[:12]} is not named by the receipt")
        if hashlib.sha256(content).hexdigest() != d or len(content) != a["size"]:
            raise VerificationError(f"bundle artifact {a['name']}: content differs from its digest")
        # The statement may leave the media type out: the model's default then holds.
        media = a.get("mediaType", DEFAULT_MEDIA_TYPE)
        if item.get("mediaType") != media:
            raise VerificationError(f"bundle artifact {a['name']}: media type differs")
        out.append(f"artifact {a['name']} ({media}, {len(content)} bytes): digest verified")
    return out
