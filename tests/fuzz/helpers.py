"""A ledger to fuzz against, and one call of the CLI judged the same way every time."""

from __future__ import annotations

import contextlib
import io
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from ledger.cli import main
from ledger.evidence.keys import KeyDir, LocalKey
from ledger.store.store import Store
from ledger.write.ingest import init_ledger, register_key
from tests.ledger.factories import dump, envelope

SEEDS = Path(__file__).parents[1] / "ledger" / "fixtures" / "seeds"


@dataclass
class FuzzLedger:
    db: str
    store: Store
    runner: LocalKey
    good: bytes
    folder: Path


def make_ledger(folder: Path) -> FuzzLedger:
    url = f"sqlite:///{folder / 'ledger.db'}"
    keys = KeyDir(folder / "keys")
    init_ledger(url, keys)
    store = Store.open(url)
    runner = keys.create("runner")
    register_key(store, "runner", "runner", runner.public)
    return FuzzLedger(url, store, runner, envelope(runner), folder)


def cli(counts: Counter[str], kind: str, ledger: FuzzLedger, args: list[str]) -> int:
    """Run `ledger ARGS`; a traceback, an unexpected exit code, or a write after
    a refusal fails the case (and is counted)."""
    counts[f"{kind}.cases"] += 1
    before = dump(ledger.store)
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(args)
    except BaseException:
        counts["tracebacks"] += 1
        raise
    text = out.getvalue() + err.getvalue()
    if "Traceback" in text or code not in (0, 1, 2):
        counts["tracebacks"] += 1
        raise AssertionError(f"exit {code}: {text[-2000:]}")
    if code != 0 and dump(ledger.store) != before:
        counts["writes_after_refusal"] += 1
        raise AssertionError(f"refused (exit {code}) but the database changed: {args}")
    return code
