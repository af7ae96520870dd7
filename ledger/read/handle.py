"""A ledger opened once: what writes to it and what reads it, one handle.

A command that both records and asks (`qualify`: its receipts, then the fleet it
quarantines by and the base's receipts its baseline reuses) opens the ledger here, the
local store or a server, and hands the one handle on: its `recorder` writes
(`ledger.write.record`), its `reader` asks (`ledger.read.reader`), over the same store
or the same server, so nothing below asks a recorder what it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ledger.evidence.errors import UsageError
from ledger.read.reader import LocalReader, Reader, RemoteReader
from ledger.write.record import LocalRecorder, Recorder, RemoteRecorder

__all__ = ["OpenLedger", "kept_line", "open_ledger", "recorder_paths"]


@dataclass(frozen=True, slots=True)
class OpenLedger:
    """One ledger, here or a server's, with its recorder and its reader."""

    recorder: Recorder
    reader: Reader

    @property
    def where(self) -> str:
        """The ledger, for messages."""
        return self.recorder.where

    @property
    def kept(self) -> int:
        """Statements kept in the outbox because the server could not take them."""
        return self.recorder.kept if isinstance(self.recorder, RemoteRecorder) else 0

    def kept_line(self) -> str | None:
        """What says so, with the command that sends them; None where none were kept."""
        return kept_line(self.recorder)

    def private_paths(self) -> list[str]:
        """Where the ledger keeps what a sandbox must not reach: the SQLite file, its
        folder and its artifact store, and the outbox."""
        return recorder_paths(self.recorder)


def kept_line(recorder: Recorder) -> str | None:
    """Statements a server's recorder kept in the outbox (the server could not take
    them), said with the command that sends them; None where none were kept."""
    if not isinstance(recorder, RemoteRecorder) or not recorder.kept:
        return None
    return (
        f"{recorder.kept} signed statement(s) kept in the outbox {recorder.outbox.path}"
        f" ({recorder.failure}); send them with `ledger push --server URL` (exit 3)"
    )


def recorder_paths(recorder: Recorder) -> list[str]:
    """Where a recorder keeps what the sandbox must not reach: the SQLite file's
    folder and its artifact store, and the outbox."""
    from ledger.remote.outbox import default_dir
    from ledger.write.artifacts import default_location

    out = [str(default_dir())]
    url = str(recorder.store.url) if isinstance(recorder, LocalRecorder) else ""
    if url.startswith("sqlite:///"):
        db = Path(url.removeprefix("sqlite:///"))
        # The folder, and the file itself: a folder the command may write can hold it.
        out += [str(db.parent), str(db), default_location(url)]
    return out


def open_ledger(
    db: str | None, server: str | None, token: str | None = None, *, check_server: bool = True
) -> OpenLedger:
    """The ledger at `server`, else the local one (`--db`, `$LEDGER_DB`, default), opened
    once: one store under both the recorder and the reader. `check_server`: fail at
    once when the server is unreachable, before any work (a GPU run can take hours)."""
    if server and db:
        raise UsageError("give --server or --db, not both")
    from ledger.write.record import open_recorder

    recorder = open_recorder(db, server, check_server=check_server)
    if isinstance(recorder, LocalRecorder):
        return OpenLedger(recorder, LocalReader(store=recorder.store))
    assert server is not None  # open_recorder gave a server's recorder
    return OpenLedger(recorder, RemoteReader(server, token))
