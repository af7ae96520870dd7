"""The committed H200 evidence ledgers (evidence/*/ledger.db), read once per test
session: each ledger copied aside (opening one may write), every question its
receipts answer (each PR and each revision without a PR) as the status
document, and every receipt as `ledger show --json` prints it."""

from __future__ import annotations

import functools
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EVIDENCE = Path(__file__).resolve().parents[2] / "evidence"


@dataclass
class Ledger:
    name: str
    url: str
    statuses: list[dict[str, Any]] = field(default_factory=list)
    shown: list[dict[str, Any]] = field(default_factory=list)
    questions: list[tuple[str, int | None, str | None]] = field(default_factory=list)


def ledger_dbs() -> list[Path]:
    return sorted(EVIDENCE.glob("*/ledger.db"))


@functools.cache
def evidence_ledgers() -> tuple[Ledger, ...]:
    """Every committed evidence ledger with its status documents and receipts."""
    from sqlalchemy import select

    from ledger.evidence.errors import Error
    from ledger.read.query import query_status, show_document
    from ledger.read.subject import identity_from_log
    from ledger.store.store import RECEIPT, Store

    aside = Path(tempfile.mkdtemp(prefix="evidence-ledgers-"))
    out = []
    for db in ledger_dbs():
        copy = aside / db.parent.name / "ledger.db"
        copy.parent.mkdir()
        shutil.copy(db, copy)
        led = Ledger(db.parent.name, f"sqlite:///{copy}")
        store = Store.open(led.url)
        with store.engine.connect() as conn:
            rows = conn.execute(
                select(RECEIPT.c.repo, RECEIPT.c.pr, RECEIPT.c.commit, RECEIPT.c.id)
            ).all()
        asked: set[tuple[str, int | None, str | None]] = set()
        for repo, pr, commit, rid in rows:
            asked.add((repo, pr, None) if pr is not None else (repo, None, commit))
            led.shown.append(show_document(store, rid))
        for repo, pr, rev in sorted(asked, key=str):
            try:
                ident = identity_from_log(store, repo, pr, rev)
            except Error:
                continue
            led.statuses.append(query_status(store, ident, claims=None, scope={}).to_json())
            led.questions.append((repo, pr, rev))
        out.append(led)
    return tuple(out)
