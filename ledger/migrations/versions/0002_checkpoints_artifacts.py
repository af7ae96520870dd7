"""checkpoints and content-addressed artifacts

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30

Signed checkpoints of the log, and the artifact blobs that receipts reference
by digest; both append-only like the log.
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

from ledger.store.triggers import create_append_only_triggers, drop_append_only_triggers

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

TABLES = ("checkpoint", "artifact")


def upgrade() -> None:
    op.create_table(
        "artifact",
        sa.Column("sha256", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("media_type", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("content", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("sha256"),
    )
    op.create_table(
        "checkpoint",
        sa.Column("size", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("root", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("size"),
    )
    create_append_only_triggers(op.get_bind(), TABLES)


def downgrade() -> None:
    drop_append_only_triggers(op.get_bind(), TABLES)
    op.drop_table("checkpoint")
    op.drop_table("artifact")
