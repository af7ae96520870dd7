"""the canonical repository id of every receipt, indexed with each question's key

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01

A ledger serves many repositories, and pull-request numbers (commits, trees,
package digests less so) repeat across them. `receipt.repo_id` holds the
canonical id of the signed `source.repo` (the normalisation
`ledger.identity.repoid.canonical_repo` makes), and the lookups become (repo_id, pr),
(repo_id, commit), (repo_id, tree) and (repo_id, package_digest). Existing
rows are filled from their `repo` column, one UPDATE per distinct value,
with the append-only triggers of `receipt` lifted for that statement only;
`ledger audit` re-derives the column from the signed body.
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

from ledger.identity.repoid import canonical_repo
from ledger.store.triggers import create_append_only_triggers, drop_append_only_triggers

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_OLD = ("commit", "tree", "pr", "package_digest")
_NEW = {
    "ix_receipt_repo_pr": ["repo_id", "pr"],
    "ix_receipt_repo_commit": ["repo_id", "commit"],
    "ix_receipt_repo_tree": ["repo_id", "tree"],
    "ix_receipt_repo_package": ["repo_id", "package_digest"],
}


def upgrade() -> None:
    bind = op.get_bind()
    # NOT NULL needs a value for the rows already there; SQLite cannot drop a
    # column default afterwards, so it keeps '' (ingest always writes the id).
    op.add_column(
        "receipt",
        sa.Column(
            "repo_id",
            sqlmodel.sql.sqltypes.AutoString(length=500),
            nullable=False,
            server_default="",
        ),
    )
    drop_append_only_triggers(bind, ("receipt",))
    receipt = sa.table("receipt", sa.column("repo", sa.String), sa.column("repo_id", sa.String))
    for (raw,) in bind.execute(sa.select(receipt.c.repo).distinct()).all():
        bind.execute(
            receipt.update().where(receipt.c.repo == raw).values(repo_id=canonical_repo(raw))
        )
    create_append_only_triggers(bind, ("receipt",))
    if bind.dialect.name == "postgresql":
        op.alter_column("receipt", "repo_id", server_default=None)
    for col in _OLD:
        op.drop_index(f"ix_receipt_{col}", table_name="receipt")
    for name, cols in _NEW.items():
        op.create_index(name, "receipt", cols, unique=False)


def downgrade() -> None:
    for name in _NEW:
        op.drop_index(name, table_name="receipt")
    for col in _OLD:
        op.create_index(f"ix_receipt_{col}", "receipt", [col], unique=False)
    drop_append_only_triggers(op.get_bind(), ("receipt",))
    op.drop_column("receipt", "repo_id")
    create_append_only_triggers(op.get_bind(), ("receipt",))
