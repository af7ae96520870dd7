"""A host's append-only journal of the statements its keys signed, and the signer of
the write path that keeps it (`sign`).

Every statement this host signs on the write path (`sign`: attest, run, import,
qualify on this host or a Ray worker, review, supersede) adds one JSON line: the
statement's id (``sha256:`` of the signed payload), the key id, the time. `ledger
monitor` compares a log with it: a receipt under this host's key that its journal
lacks was signed somewhere else, with a copy of the key. The journal is
`$LEDGER_JOURNAL`, else ``journal.jsonl`` in the key folder (``$LEDGER_KEYS``) when
that folder exists: beside the keys it speaks for.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from ledger.evidence.canonical import receipt_id
from ledger.evidence.errors import InputError
from ledger.evidence.statement import sign_payload, statement_payload

if TYPE_CHECKING:
    from ledger.evidence.keys import LocalKey
    from ledger.evidence.statement import Statement

__all__ = ["journal_path", "read_journal", "record_signed", "sign"]


def sign(stmt: Statement, key: LocalKey) -> bytes:
    """The envelope bytes of `stmt` signed by `key`, noted in this host's journal:
    the one signer of the write path. `ledger monitor` compares the log with the
    journal, so a statement signed here without a line would read as a copy of the
    key signing elsewhere."""
    payload = statement_payload(stmt)
    envelope = sign_payload(payload, key)
    record_signed(payload, key.keyid)
    return envelope


def journal_path() -> Path | None:
    """Where this host journals, or None (no $LEDGER_JOURNAL, no key folder)."""
    env = os.environ.get("LEDGER_JOURNAL")
    if env:
        return Path(env)
    from ledger.evidence.keys import default_key_dir

    keys = default_key_dir()
    return keys / "journal.jsonl" if keys.is_dir() else None


def record_signed(payload: bytes, keyid: str) -> None:
    """Append the statement just signed. One write of one line, O_APPEND: lines
    of concurrent signers never interleave. A journal that cannot be written
    is said on stderr and does not stop the signing: the monitor then reports
    the receipt as one its host never made, the safe side of the error."""
    path = journal_path()
    if path is None:
        return
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    line = json.dumps({"id": receipt_id(payload), "keyid": keyid, "signed_at": now})
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)
    except OSError as e:
        print(f"ledger: journal {path} not written: {e.strerror}", file=sys.stderr)


def read_journal(path: Path) -> dict[str, set[str]]:
    """The statement ids of a journal, by key id. A torn last line (a crash
    mid-write) is skipped; any other malformed line refuses the journal."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise InputError(f"journal {path}: {e.strerror}") from None
    out: dict[str, set[str]] = {}
    lines = text.split("\n")
    for number, line in enumerate(lines, start=1):
        if not line:
            continue
        try:
            doc = json.loads(line)
            out.setdefault(str(doc["keyid"]), set()).add(str(doc["id"]))
        except (ValueError, KeyError, TypeError):
            if number == len(lines):
                continue
            raise InputError(f"journal {path} line {number} is not a journal line") from None
    return out
