"""Schema migrations through Alembic (ledger/migrations/, shipped in the wheel).

Alembic is imported only when a migration runs: opening an up-to-date
ledger reads the recorded revision with one query, and every command that
opens the ledger starts that much faster.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import DBAPIError

from ledger.evidence.errors import UsageError

if TYPE_CHECKING:
    from alembic.config import Config

__all__ = ["HEAD", "alembic_config", "current_revision", "head_revision", "upgrade"]

# Package data of ledger (env.py, script.py.mako, versions/*.py), so an installed
# wheel migrates as a source checkout does.
MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations"
# The newest revision in ledger/migrations/versions. Kept as a constant so opening a
# ledger needs one query, not a parse of every migration file; a test checks
# that it matches the script directory.
HEAD = "0005"


def alembic_config(url: str | None = None) -> Config:
    from alembic.config import Config

    if not (MIGRATIONS / "env.py").is_file():
        raise UsageError(f"migrations not found at {MIGRATIONS}; reinstall ledger-qualify")
    # stdout now, not the default bound when alembic was first imported: that
    # stream may be gone (a redirected stdout, a test's capture).
    cfg = Config(stdout=sys.stdout)
    cfg.set_main_option("script_location", str(MIGRATIONS))
    if url is not None:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def head_revision() -> str | None:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def current_revision(conn: Connection) -> str | None:
    """The revision Alembic recorded, or None for a database without a ledger."""
    try:
        with conn.begin_nested() if conn.in_transaction() else conn.begin():
            rows = conn.execute(text("SELECT version_num FROM alembic_version")).all()
    except DBAPIError:  # no such table: not a ledger (yet)
        return None
    return str(rows[0][0]) if rows else None


def upgrade(engine: Engine) -> None:
    """Bring the schema to head inside one transaction."""
    from alembic import command

    cfg = alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
