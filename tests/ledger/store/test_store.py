"""The SQL store on SQLite and PostgreSQL: migrations, drift, append-only triggers."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import create_engine
from sqlalchemy.exc import DatabaseError

from ledger.evidence.keys import KeyDir
from ledger.store import migrate
from ledger.store.store import Store
from ledger.write.ingest import record, register_key
from tests.ledger.factories import dump, envelope


def _ledger(db_url: str, tmp_path: Path) -> tuple[Store, KeyDir]:
    store = Store.create(db_url)
    kd = KeyDir(tmp_path / "k")
    k = kd.create("r")
    register_key(store, "r", "runner", k.public)
    record(store, [envelope(k)])
    return store, kd


def test_migrations_reach_head_and_match_models(db_url: str) -> None:
    store = Store.create(db_url)
    with store.engine.connect() as conn:
        assert migrate.current_revision(conn) == migrate.head_revision()
    cfg = migrate.alembic_config()
    with store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.check(cfg)  # raises when models and migrations disagree


def test_open_applies_pending_migrations(db_url: str) -> None:
    engine = create_engine(db_url)
    cfg = migrate.alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0001")  # an older ledger: no checkpoint/artifact tables yet
    engine.dispose()
    store = Store.open(db_url)
    with store.engine.connect() as conn:
        assert migrate.current_revision(conn) == migrate.head_revision() == migrate.HEAD
    store.add_checkpoint(1, "00" * 32, "note")
    assert store.checkpoint(1) is not None


def test_repo_id_migration_fills_existing_rows(db_url: str, tmp_path: Path) -> None:
    """A ledger written before the repository column (0002) gets it filled with
    the canonical id of each signed `source.repo`; the audit then agrees."""
    from sqlalchemy import select

    from ledger.store.store import RECEIPT
    from ledger.transparency.audit import audit

    store = Store.create(db_url)
    kd = KeyDir(tmp_path / "k")
    k = kd.create("r")
    register_key(store, "r", "runner", k.public)
    raw = ["https://GitHub.com/Org/Repo.git", "git@github.com:org/other.git", "example"]
    for i, repo in enumerate(raw):
        src = {"repo": repo, "commit": f"{i:040x}", "tree": f"{i:040x}", "dirty": False}
        record(store, [envelope(k, source=src)])
    store.engine.dispose()
    cfg = migrate.alembic_config()
    engine = create_engine(db_url)
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0002")
        assert "repo_id" not in {c["name"] for c in _columns(conn, "receipt")}
    engine.dispose()
    store = Store.open(db_url)
    with store.engine.connect() as conn:
        got = dict(conn.execute(select(RECEIPT.c.repo, RECEIPT.c.repo_id)).all())
    assert got == {
        raw[0]: "github.com/Org/Repo",
        raw[1]: "github.com/org/other",
        raw[2]: "example",
    }
    rep = audit(store)
    assert rep.ok, rep.problems
    store.engine.dispose()


def _columns(conn: object, table: str) -> list[dict[str, object]]:
    from sqlalchemy import inspect

    return list(inspect(conn).get_columns(table))  # type: ignore[arg-type]


def test_head_constant_matches_migrations() -> None:
    assert migrate.head_revision() == migrate.HEAD


def test_open_refuses_empty_database(tmp_path: Path) -> None:
    from ledger.evidence.errors import UsageError

    with pytest.raises(UsageError, match="ledger init"):
        Store.open(f"sqlite:///{tmp_path / 'none.db'}")


@pytest.mark.parametrize("table", ["log_entry", "receipt", "scope_facet", "key"])
@pytest.mark.parametrize("stmt", ["UPDATE {t} SET seq = seq", "DELETE FROM {t}"])
def test_database_rejects_update_and_delete(
    db_url: str, tmp_path: Path, table: str, stmt: str
) -> None:
    store, _ = _ledger(db_url, tmp_path)
    before = dump(store)
    with pytest.raises(DatabaseError, match="append-only"), store.engine.begin() as conn:
        conn.exec_driver_sql(stmt.format(t=f'"{table}"'))
    assert dump(store) == before


def test_truncate_rejected_on_postgresql(db_url: str, tmp_path: Path) -> None:
    if not db_url.startswith("postgresql"):
        pytest.skip("TRUNCATE is PostgreSQL only")
    store, _ = _ledger(db_url, tmp_path)
    with pytest.raises(DatabaseError, match="append-only"), store.engine.begin() as conn:
        conn.exec_driver_sql('TRUNCATE "log_entry" CASCADE')
    assert store.size() == 2


def test_sequence_is_gapless_across_writers(db_url: str, tmp_path: Path) -> None:
    store, kd = _ledger(db_url, tmp_path)
    k = kd.load("r")
    other = Store.open(db_url)
    for i in range(5):
        (store if i % 2 else other).keys()
        record(store if i % 2 else other, [envelope(k, claim=f"c{i}")])
    seqs = [e.seq for e in store.entries()]
    assert seqs == list(range(len(seqs))) and len(seqs) == 7


def test_plain_path_means_sqlite(tmp_path: Path) -> None:
    from ledger.store.store import resolve_url

    assert resolve_url(str(tmp_path / "x.db")) == f"sqlite:///{tmp_path / 'x.db'}"
    eng = create_engine(resolve_url(str(tmp_path / "x.db")))
    eng.dispose()


def test_concurrent_writers_keep_the_sequence_gapless(db_url: str, tmp_path: Path) -> None:
    import threading

    store, kd = _ledger(db_url, tmp_path)
    k = kd.load("r")
    envs = [[envelope(k, claim=f"w{w}.c{i}") for i in range(15)] for w in range(3)]
    errors: list[BaseException] = []

    def write(batch: list[bytes]) -> None:
        own = Store.open(db_url)  # its own engine and connections, like another host
        try:
            for e in batch:
                record(own, [e])
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(b,)) for b in envs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    seqs = [e.seq for e in store.entries()]
    assert seqs == list(range(2 + 45))
