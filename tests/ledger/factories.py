"""Builders of valid statements and signed envelopes for tests."""

from __future__ import annotations

from typing import Any

from ledger.evidence.keys import LocalKey
from ledger.evidence.models import (
    QUALIFICATION_PREDICATE,
    STATEMENT_TYPE,
    QualificationStatement,
)
from ledger.store.store import Store
from ledger.store.tables import APPEND_ONLY_TABLES
from ledger.write.journal import sign

COMMIT = "1" * 40
TREE = "2" * 40


def predicate_dict(**over: Any) -> dict[str, Any]:
    d: dict[str, Any] = {
        "claim": "admission.no-oom-after-admit",
        "check": {"name": "admission", "version": "1", "parameters": {}},
        "scope": {"device_kind": "cpu"},
        "source": {"repo": "example", "commit": COMMIT, "tree": TREE, "dirty": False},
        "outcome": "passed",
        "measurements": {"predicted_bytes": 100, "measured_bytes": 90},
        "observer": "off",
        "cleanup": {"complete": True, "resources": []},
        "runner": {
            "started": "2026-11-30T00:00:00Z",
            "finished": "2026-11-30T00:00:01Z",
            "ledger_version": "0.1.0",
        },
    }
    d.update(over)
    return d


def statement(**over: Any) -> QualificationStatement:
    p = predicate_dict(**over)
    return QualificationStatement.model_validate(
        {
            "_type": STATEMENT_TYPE,
            "subject": [
                {
                    "name": p["source"]["repo"],
                    "digest": {"gitCommit": p["source"]["commit"], "gitTree": p["source"]["tree"]},
                }
            ],
            "predicateType": QUALIFICATION_PREDICATE,
            "predicate": p,
        }
    )


def envelope(key: LocalKey, **over: Any) -> bytes:
    return sign(statement(**over), key)


def dump(store: Store) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every ledger table, for before/after comparisons."""
    out: dict[str, list[tuple[Any, ...]]] = {}
    with store.engine.connect() as conn:
        for t in APPEND_ONLY_TABLES:
            rows = conn.exec_driver_sql(f'SELECT * FROM "{t}"').all()
            out[t] = sorted(tuple(r) for r in rows)
    return out
