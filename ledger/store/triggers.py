"""Triggers that make the ledger's tables append-only in the database itself.

Application code never updates or deletes a row; these triggers make sure
nobody else does through SQL either (short of dropping them, which `ledger
audit` then catches from the content).
"""

from __future__ import annotations

from sqlalchemy import Connection

from ledger.store.tables import APPEND_ONLY_TABLES

__all__ = ["create_append_only_triggers", "drop_append_only_triggers"]

# `%%` because exec_driver_sql passes the text through the driver's paramstyle.
_PG_FUNCTION = """
CREATE OR REPLACE FUNCTION ledger_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'ledger: %% on %% rejected: the ledger is append-only', TG_OP, TG_TABLE_NAME;
END;
$$ LANGUAGE plpgsql
"""


def create_append_only_triggers(
    conn: Connection, tables: tuple[str, ...] = APPEND_ONLY_TABLES
) -> None:
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(_PG_FUNCTION)
        for t in tables:
            conn.exec_driver_sql(
                f'CREATE TRIGGER {t}_append_only BEFORE UPDATE OR DELETE ON "{t}" '
                "FOR EACH ROW EXECUTE FUNCTION ledger_append_only()"
            )
            conn.exec_driver_sql(
                f'CREATE TRIGGER {t}_no_truncate BEFORE TRUNCATE ON "{t}" '
                "FOR EACH STATEMENT EXECUTE FUNCTION ledger_append_only()"
            )
        return
    for t in tables:
        for op in ("UPDATE", "DELETE"):
            conn.exec_driver_sql(
                f'CREATE TRIGGER {t}_no_{op.lower()} BEFORE {op} ON "{t}" '
                f"BEGIN SELECT RAISE(ABORT, 'ledger: {op} on {t} rejected: "
                "the ledger is append-only'); END"
            )


def drop_append_only_triggers(
    conn: Connection, tables: tuple[str, ...] = APPEND_ONLY_TABLES
) -> None:
    if conn.dialect.name == "postgresql":
        for t in tables:
            conn.exec_driver_sql(f'DROP TRIGGER IF EXISTS {t}_append_only ON "{t}"')
            conn.exec_driver_sql(f'DROP TRIGGER IF EXISTS {t}_no_truncate ON "{t}"')
        return
    for t in tables:
        for op in ("update", "delete"):
            conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {t}_no_{op}")
