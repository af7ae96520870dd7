"""witness cosignatures of checkpoints

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03

The cosignature lines witnesses returned for a checkpoint (C2SP
tlog-cosignature), one row per checkpoint size and witness key;
append-only like the checkpoints they sign. The cosigned note is the
checkpoint's note followed by its rows' lines.
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

from ledger.store.triggers import create_append_only_triggers, drop_append_only_triggers

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

TABLES = ("cosignature",)


def upgrade() -> None:
    op.create_table(
        "cosignature",
        sa.Column("size", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("witness", sqlmodel.sql.sqltypes.AutoString(length=300), nullable=False),
        sa.Column("line", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("size", "witness"),
    )
    create_append_only_triggers(op.get_bind(), TABLES)


def downgrade() -> None:
    drop_append_only_triggers(op.get_bind(), TABLES)
    op.drop_table("cosignature")
