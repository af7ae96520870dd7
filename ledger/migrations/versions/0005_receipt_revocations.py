"""receipt revocations: one receipt void from a log position on, with a reason

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-07

A `revocation` entry names a key (table `revocation`) or, from this
revision on, one receipt (table `receipt_revocation`, derived from the
entry's body like every index; `ledger audit` re-derives it). The index
lets every question find a receipt's revocation by one lookup.
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

from ledger.store.triggers import create_append_only_triggers, drop_append_only_triggers

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

TABLES = ("receipt_revocation",)


def upgrade() -> None:
    op.create_table(
        "receipt_revocation",
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("receipt_id", sqlmodel.sql.sqltypes.AutoString(length=80), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("review", sqlmodel.sql.sqltypes.AutoString(length=80), nullable=True),
        sa.ForeignKeyConstraint(["seq"], ["log_entry.seq"]),
        sa.PrimaryKeyConstraint("seq"),
    )
    op.create_index(
        op.f("ix_receipt_revocation_receipt_id"),
        "receipt_revocation",
        ["receipt_id"],
        unique=False,
    )
    create_append_only_triggers(op.get_bind(), TABLES)


def downgrade() -> None:
    drop_append_only_triggers(op.get_bind(), TABLES)
    op.drop_index(op.f("ix_receipt_revocation_receipt_id"), table_name="receipt_revocation")
    op.drop_table("receipt_revocation")
