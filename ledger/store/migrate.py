"""Schema migrations through Alembic (migrations/ at the project root)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine

from ledger.errors import UsageError

__all__ = ["alembic_config", "current_revision", "head_revision", "upgrade"]

MIGRATIONS = Path(__file__).resolve().parents[2] / "migrations"
# The newest revision in migrations/versions. Kept as a constant so opening a
# ledger needs one query, not a parse of every migration file; a test checks
# that it matches the script directory.
HEAD = "0002"


def alembic_config(url: str | None = None) -> Config:
    if not (MIGRATIONS / "env.py").is_file():
        raise UsageError(f"migrations not found at {MIGRATIONS}; install the project from source")
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    if url is not None:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def current_revision(conn: Connection) -> str | None:
    return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: Engine) -> None:
    """Bring the schema to head inside one transaction."""
    cfg = alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
