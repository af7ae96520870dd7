"""`ledger audit` against a database changed behind the ledger's back, and the
append-only triggers that stop such changes while they are in place."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import git
import pytest
from sqlalchemy import Connection, text
from sqlalchemy.exc import DBAPIError
from sqlmodel import SQLModel

from ledger._internal.merkle import leaf_hash
from ledger.evidence.canonical import canonical_bytes
from ledger.store.store import Store
from ledger.store.tables import APPEND_ONLY_TABLES
from ledger.store.triggers import drop_append_only_triggers
from tests.ledger.helpers import Run, run

DIGITS = "0123456789"
B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def ok(r: Run) -> Run:
    assert r.code == 0, f"exit {r.code}: {r.err}"
    return r


def ledger(capsys: pytest.CaptureFixture[str], words: str, *args: str) -> Run:
    """`ledger WORDS ARGS...` (WORDS split on spaces), which must exit 0."""
    return ok(run(capsys, *words.split(), *args))


@dataclass(frozen=True, slots=True)
class History:
    """A ledger whose entries are, in order: 0 ledger key, 1 runner key,
    2 reviewer key, 3 passing receipt, 4 its review, 5 failing receipt,
    6 a second runner key, 7 its revocation; checkpointed at size 8."""

    db: str
    passed: str
    failed: str


@pytest.fixture
def history(
    db_url: str,
    key_dir: Path,
    repo: git.Repo,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> History:
    db = ("--db", db_url)
    snapshot = tmp_path / "memory-snapshot.json"
    snapshot.write_text('{"peak_bytes": 123}\n')
    ledger(capsys, "init", *db)
    ledger(capsys, "keys new runner --role runner", *db)
    ledger(capsys, "keys new reviewer --role reviewer", *db)
    attest = ("--rev", "HEAD", "--repo", str(repo.working_tree_dir), "--key", "runner", *db)
    scope = "--scope device_kind=cpu --scope gpu_count=0"
    claim = "admission.no-oom-after-admit"
    passed = ledger(
        capsys,
        f"attest --unplanned --claim {claim} --outcome passed {scope}",
        "--artifact",
        str(snapshot),
        *attest,
    ).out.strip()
    ledger(capsys, "review", passed, "--concur", "--key", "reviewer", *db)
    failed = ledger(
        capsys,
        f"attest --unplanned --claim regression.24-view --outcome failed {scope}",
        "--reason",
        "pooled states differ between runs",
        *attest,
    ).out.strip()
    ledger(capsys, "keys new old --role runner", *db)
    ledger(capsys, "keys revoke old", "--reason", "host retired", *db)
    ledger(capsys, "log checkpoint", *db)
    return History(db_url, passed, failed)


@pytest.fixture
def store(history: History) -> Iterator[Store]:
    s = Store.open(history.db)
    yield s
    s.engine.dispose()


def behind_the_back(store: Store, change: Callable[[Connection], None]) -> None:
    """Drop the append-only triggers and change the database with plain SQL."""
    with store.engine.begin() as conn:
        drop_append_only_triggers(conn)
        change(conn)


def body_of(conn: Connection, seq: int) -> str:
    return str(conn.execute(text("SELECT body FROM log_entry WHERE seq = :s"), {"s": seq}).scalar())


def set_body(conn: Connection, seq: int, body: str, *, leaf: bool = False) -> None:
    """Replace an entry's body; with `leaf`, also its stored leaf hash (a careful forger)."""
    conn.execute(text("UPDATE log_entry SET body = :b WHERE seq = :s"), {"b": body, "s": seq})
    if leaf:
        conn.execute(
            text("UPDATE log_entry SET leaf_hash = :h WHERE seq = :s"),
            {"h": leaf_hash(body.encode()).hex(), "s": seq},
        )


def one_byte(s: str, at: int) -> str:
    """`s` with the character at `at` replaced by another one of the same kind."""
    c = s[at]
    alphabet = DIGITS if c in DIGITS else B64
    return s[:at] + alphabet[(alphabet.index(c) + 1) % len(alphabet)] + s[at + 1 :]


def flip_payload_char(conn: Connection) -> None:
    body = body_of(conn, 3)
    at = body.index('"payload":"') + len('"payload":"') + 40
    set_body(conn, 3, one_byte(body, at))


def flip_statement_digit(conn: Connection) -> None:
    """gpu_count 0 -> 1 inside the signed statement, payload re-encoded, leaf hash recomputed."""
    env = json.loads(body_of(conn, 3))
    stmt = base64.b64decode(env["payload"])
    assert stmt.count(b'"gpu_count":0') == 1
    env["payload"] = base64.b64encode(stmt.replace(b'"gpu_count":0', b'"gpu_count":1')).decode()
    set_body(conn, 3, canonical_bytes(env).decode(), leaf=True)


def flip_key_role(conn: Connection) -> None:
    body = body_of(conn, 2)
    set_body(conn, 2, body.replace('"role":"reviewer"', '"role":"reviewes"'), leaf=True)


def exec_sql(sql: str, **params: Any) -> Callable[[Connection], None]:
    def change(conn: Connection) -> None:
        conn.execute(text(sql), params)

    return change


def flip_checkpoint_root(conn: Connection) -> None:
    root = str(conn.execute(text("SELECT root FROM checkpoint WHERE size = 8")).scalar())
    flipped = ("1" if root[10] == "0" else "0").join((root[:10], root[11:]))
    conn.execute(text("UPDATE checkpoint SET root = :r WHERE size = 8"), {"r": flipped})


def flip_checkpoint_signature(conn: Connection) -> None:
    note = str(conn.execute(text("SELECT note FROM checkpoint WHERE size = 8")).scalar())
    # 12 characters into the signature of the ledger key's line (named by the origin).
    at = note.index(" ", note.index("\n\n— ") + 4) + 1 + 12
    conn.execute(text("UPDATE checkpoint SET note = :n WHERE size = 8"), {"n": one_byte(note, at)})


def delete_entry(seq: int, index_table: str) -> Callable[[Connection], None]:
    def change(conn: Connection) -> None:
        conn.execute(text(f'DELETE FROM "{index_table}" WHERE seq = :s'), {"s": seq})
        conn.execute(text("DELETE FROM log_entry WHERE seq = :s"), {"s": seq})

    return change


# (change, what the audit must say); {passed} and {failed} stand for the receipts' short ids.
TAMPERING: dict[str, tuple[Callable[[Connection], None], list[str]]] = {
    "payload-base64-char": (
        flip_payload_char,
        [
            "entry 3 ({passed})",
            ": stored leaf hash differs from its seq, time and body",
            "checkpoint 8: root differs from the recomputed log",
        ],
    ),
    "statement-digit-with-leaf-hash": (
        flip_statement_digit,
        [
            "entry 3 ({passed})",
            ": DSSE: invalid signature by key",
            "checkpoint 8: root differs from the recomputed log",
        ],
    ),
    "key-entry-role": (
        flip_key_role,
        [
            "entry 2 (sha256:",
            ": id differs from the body digest",
            "checkpoint 8: root differs from the recomputed log",
        ],
    ),
    "receipt-outcome-row": (
        exec_sql("UPDATE receipt SET outcome = 'passed' WHERE seq = 5"),
        ["entry 5 ({failed})", ": receipt index row differs from the entry"],
    ),
    "receipt-repository-row": (
        exec_sql("UPDATE receipt SET repo_id = 'github.com/someone/else' WHERE seq = 5"),
        [
            "entry 5 ({failed})",
            ": receipt row's repository 'github.com/someone/else' differs from the signed body's",
            ": receipt index row differs from the entry",
        ],
    ),
    "scope-facet-row": (
        exec_sql("UPDATE scope_facet SET value = '8' WHERE seq = 3 AND key = 'gpu_count'"),
        ["entry 3 ({passed})", ": scope facets differ from the entry"],
    ),
    "review-verdict-row": (
        exec_sql("UPDATE review SET verdict = 'dispute' WHERE seq = 4"),
        ["entry 4 (sha256:", ": review index row differs from the entry"],
    ),
    "key-role-row": (
        exec_sql("UPDATE key SET role = 'runner' WHERE seq = 2"),
        ["entry 2 (sha256:", ": key row differs from the entry"],
    ),
    "checkpoint-root": (
        flip_checkpoint_root,
        ["checkpoint 8: root differs from the recomputed log"],
    ),
    "checkpoint-signature": (
        flip_checkpoint_signature,
        ["checkpoint 8: signature or root does not hold"],
    ),
    "delete-last-entry": (
        delete_entry(7, "revocation"),
        ["checkpoint 8: larger than the log (7 entries)"],
    ),
    "delete-middle-entry": (
        delete_entry(4, "review"),
        ["sequence gap: entry 4 is missing", "checkpoint 8: larger than the log (7 entries)"],
    ),
}


NAMED = re.compile(
    r"^(entry \d+ \(sha256:[0-9a-f]{12}\)|checkpoint \d+|[a-z]+ row \d+|sequence gap)"
)


def test_clean_ledger_audits_ok(history: History, capsys: pytest.CaptureFixture[str]) -> None:
    r = ok(run(capsys, "audit", "--db", history.db))
    assert r.out.startswith("8 entries, 1 checkpoints, root ")
    assert r.out.endswith(": ok\n")
    doc = json.loads(ok(run(capsys, "audit", "--db", history.db, "--json")).out)
    assert doc["ok"] is True and doc["problems"] == []
    assert (doc["entries"], doc["checkpoints"]) == (8, 1)


@pytest.mark.parametrize("case", list(TAMPERING))
def test_audit_names_what_was_changed(
    case: str, history: History, store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    change, expected = TAMPERING[case]
    behind_the_back(store, change)
    r = run(capsys, "audit", "--db", history.db)
    assert r.code == 1, r.out
    lines = r.out.splitlines()
    problems, summary = lines[:-1], lines[-1]
    assert summary.endswith(f"{len(problems)} problems")
    for want in expected:
        want = want.format(passed=history.passed[:19], failed=history.failed[:19])
        assert want in r.out, f"{want!r} not in:\n{r.out}"
    for p in problems:
        assert NAMED.match(p), p


def test_audit_names_a_changed_artifact(
    history: History, store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    """Artifacts are content-addressed: a blob whose bytes no longer hash to
    its sha256 must be named, as the receipt that cites it now points at
    different evidence."""
    behind_the_back(store, exec_sql("UPDATE artifact SET content = :c", c=b'{"peak_bytes": 124}\n'))
    r = run(capsys, "audit", "--db", history.db)
    assert r.code == 1, r.out
    assert "artifact " in r.out


# --- the triggers ----------------------------------------------------------------------


def snapshot(store: Store) -> dict[str, list[tuple[Any, ...]]]:
    out = {}
    with store.engine.connect() as conn:
        for t in APPEND_ONLY_TABLES:
            table = SQLModel.metadata.tables[t]
            rows = conn.execute(table.select().order_by(*table.primary_key.columns)).all()
            out[t] = [tuple(r) for r in rows]
    return out


def test_database_rejects_update_and_delete(
    history: History, store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    # A witness's cosignature of checkpoint 8, so that its table is tried too.
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from ledger._internal.checkpoint import parse_checkpoint
    from ledger.transparency.cosignature import cosign
    from ledger.transparency.vkey import WITNESS_ED25519, VKey

    witness = Ed25519PrivateKey.generate()
    row = store.checkpoint(8)
    assert row is not None
    line = cosign(parse_checkpoint(row.note.encode()).body, "w.example", witness, 1)
    vkey = VKey("w.example", WITNESS_ED25519, witness.public_key())
    store.add_cosignature(8, vkey.text(), line)
    # A receipt's revocation, so that its table is tried too.
    from ledger.store.store import RECEIPT
    from ledger.write.revoke import revoke_receipt

    rows = store.table_rows(RECEIPT, RECEIPT.c.seq)
    revoke_receipt(store, next(r["id"] for r in rows if r["outcome"] != "failed"), "tried")
    before = snapshot(store)
    assert all(before.values()), {t: len(v) for t, v in before.items()}
    statements = []
    for t in APPEND_ONLY_TABLES:
        col = next(iter(SQLModel.metadata.tables[t].columns)).name
        statements += [f'UPDATE "{t}" SET "{col}" = "{col}"', f'DELETE FROM "{t}"']
        if store.engine.dialect.name == "postgresql":
            statements.append(f'TRUNCATE "{t}" CASCADE')
    statements += [
        "UPDATE log_entry SET body = 'x' WHERE seq = 3",
        "DELETE FROM log_entry WHERE seq = 7",
        "UPDATE receipt SET outcome = 'passed' WHERE seq = 5",
    ]
    for sql in statements:
        with pytest.raises(DBAPIError, match="append-only"), store.engine.begin() as conn:
            conn.execute(text(sql))
    assert snapshot(store) == before
    ok(run(capsys, "audit", "--db", history.db))


def test_appending_still_works_under_the_triggers(
    history: History, repo: git.Repo, capsys: pytest.CaptureFixture[str]
) -> None:
    """The triggers stop changes, not growth: a new receipt and checkpoint audit clean."""
    ledger(
        capsys,
        "attest --unplanned --claim cleanup.complete --outcome passed --rev HEAD --key runner",
        "--repo",
        str(repo.working_tree_dir),
        "--db",
        history.db,
    )
    ok(run(capsys, "log", "checkpoint", "--db", history.db))
    assert ok(run(capsys, "audit", "--db", history.db)).out.startswith(
        "9 entries, 2 checkpoints, root "
    )


def test_200_random_single_byte_row_mutations_are_all_detected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fixed seed; benchmarks/tamper.py runs 1,000 of them and prints the figure."""
    from benchmarks.tamper import run_trials

    monkeypatch.setenv("LEDGER_KEYS", str(tmp_path / "keys"))
    t = run_trials(200, seed=20261201)
    print(f"tamper: {t.detected}/{t.trials} single-byte row mutations detected")
    assert not t.crashed, t.crashed[:3]
    assert t.detected == t.trials == 200, t.missed[:3]
