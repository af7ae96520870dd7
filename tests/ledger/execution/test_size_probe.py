"""A server's store asks the log size over a connection of its own: right after every
append, with no transaction left open, and again after that connection broke."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text

from ledger.evidence.keys import KeyDir
from ledger.store.store import Store
from ledger.write.ingest import record, register_key
from tests.ledger.factories import envelope


def test_the_probe_sees_every_append_and_survives_a_broken_connection(
    db_url: str, tmp_path: Path
) -> None:
    store = Store.create(db_url)
    writer = Store.open(db_url)  # another process's appends, as far as the probe knows
    store.live = True
    runner = KeyDir(tmp_path / "k").create("r")
    register_key(writer, "r", "runner", runner.public)
    n = store.refresh()
    assert n == writer.size() and store._probe is not None
    for i in range(3):
        record(writer, [envelope(runner, claim=f"c.{i}")])
        assert store.refresh() == n + i + 1
    probe = store._probe._conn
    if store.engine.dialect.name == "postgresql":
        # Autocommit: between questions the probe holds no transaction open.
        with writer.engine.connect() as c:
            states = c.execute(
                text("SELECT state FROM pg_stat_activity WHERE pid = :p"),
                {"p": probe.info.backend_pid},
            ).scalars()
            assert list(states) == ["idle"]
    else:
        assert not probe.in_transaction
    # The connection breaks (a database restart): the next question opens another.
    probe.close()
    assert store.refresh() == n + 3
    assert store._probe._conn is not probe
    store.dispose()
    writer.dispose()
