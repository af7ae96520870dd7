"""SQL tables of the ledger. Every table is append-only (database triggers).

`log_entry` is the log itself: one row per receipt, review, key event or
revocation, with a gapless sequence number that is also the entry's index in
the Merkle tree. The other tables are indexes derived from entry bodies (the
audit re-derives and compares them) plus checkpoints and artifact blobs.
"""

from __future__ import annotations

from sqlalchemy import Column, Index, LargeBinary, Text
from sqlmodel import Field, SQLModel

__all__ = [
    "APPEND_ONLY_TABLES",
    "ArtifactBlob",
    "CheckpointRow",
    "CosignatureRow",
    "KeyRow",
    "LogEntry",
    "ReceiptRevocationRow",
    "ReceiptRow",
    "ReviewRow",
    "RevocationRow",
    "ScopeFacet",
]


class LogEntry(SQLModel, table=True):
    __tablename__ = "log_entry"

    seq: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    kind: str = Field(max_length=16)
    """receipt | review | key | revocation"""
    entry_id: str = Field(max_length=80, unique=True)
    """`sha256:<hex>`: of the payload for receipts and reviews, of the body otherwise."""
    body: str = Field(sa_column=Column(Text, nullable=False))
    """Canonical (RFC 8785) JSON of the entry: the exact Merkle leaf input."""
    leaf_hash: str = Field(max_length=64)
    logged_at: str = Field(max_length=40)
    """UTC time of logging; informational, the order that counts is `seq`."""


class ReceiptRow(SQLModel, table=True):
    __tablename__ = "receipt"
    # Every question names its repository: the lookups are (repo_id, x), so
    # pull-request numbers shared by a thousand repositories cost nothing.
    __table_args__ = (
        Index("ix_receipt_claim_commit", "claim", "commit"),
        Index("ix_receipt_repo_pr", "repo_id", "pr"),
        Index("ix_receipt_repo_commit", "repo_id", "commit"),
        Index("ix_receipt_repo_tree", "repo_id", "tree"),
        Index("ix_receipt_repo_package", "repo_id", "package_digest"),
    )

    seq: int = Field(primary_key=True, foreign_key="log_entry.seq")
    id: str = Field(max_length=80, unique=True)
    claim: str = Field(max_length=200, index=True)
    check_name: str = Field(max_length=200)
    repo: str = Field(max_length=500)
    """`source.repo` as signed."""
    repo_id: str = Field(max_length=500)
    """The canonical repository id of `repo` (`ledger.identity.repoid.canonical_repo`)."""
    commit: str = Field(max_length=64)
    tree: str = Field(max_length=64)
    pr: int | None = Field(default=None)
    package_digest: str | None = Field(default=None, max_length=64)
    outcome: str = Field(max_length=16)
    observer: str = Field(max_length=4)
    dirty: bool
    signer: str = Field(max_length=64, index=True)


class ScopeFacet(SQLModel, table=True):
    __tablename__ = "scope_facet"
    __table_args__ = (Index("ix_scope_facet_key_value", "key", "value"),)

    seq: int = Field(primary_key=True, foreign_key="receipt.seq")
    key: str = Field(primary_key=True, max_length=100)
    value: str = Field(max_length=500)


class ReviewRow(SQLModel, table=True):
    __tablename__ = "review"

    seq: int = Field(primary_key=True, foreign_key="log_entry.seq")
    id: str = Field(max_length=80, unique=True)
    receipt_id: str = Field(max_length=80, index=True)
    verdict: str = Field(max_length=16)
    signer: str = Field(max_length=64, index=True)


class KeyRow(SQLModel, table=True):
    __tablename__ = "key"

    keyid: str = Field(primary_key=True, max_length=64)
    seq: int = Field(foreign_key="log_entry.seq", unique=True)
    name: str = Field(max_length=64, index=True)
    role: str = Field(max_length=16)
    public_key: str = Field(max_length=64)
    """base64 of the raw 32-byte Ed25519 public key."""


class RevocationRow(SQLModel, table=True):
    __tablename__ = "revocation"

    seq: int = Field(primary_key=True, foreign_key="log_entry.seq")
    keyid: str = Field(max_length=64, index=True)
    reason: str = Field(sa_column=Column(Text, nullable=False))


class ReceiptRevocationRow(SQLModel, table=True):
    """A receipt revoked (a `revocation` entry naming a receipt, not a key)."""

    __tablename__ = "receipt_revocation"

    seq: int = Field(primary_key=True, foreign_key="log_entry.seq")
    receipt_id: str = Field(max_length=80, index=True)
    reason: str = Field(sa_column=Column(Text, nullable=False))
    review: str | None = Field(default=None, max_length=80)
    """The independent review a counterexample's revocation rests on."""


class CheckpointRow(SQLModel, table=True):
    __tablename__ = "checkpoint"

    size: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    root: str = Field(max_length=64)
    note: str = Field(sa_column=Column(Text, nullable=False))
    """The signed note, as served to verifiers."""


class CosignatureRow(SQLModel, table=True):
    """A witness's cosignature line on the checkpoint of one size (C2SP tlog-cosignature)."""

    __tablename__ = "cosignature"

    size: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    witness: str = Field(primary_key=True, max_length=300)
    """The witness's vkey (name, key id, key): one line per witness key and size."""
    line: str = Field(sa_column=Column(Text, nullable=False))


class ArtifactBlob(SQLModel, table=True):
    __tablename__ = "artifact"

    sha256: str = Field(primary_key=True, max_length=64)
    size: int
    media_type: str = Field(max_length=200)
    content: bytes = Field(sa_column=Column(LargeBinary, nullable=False))


APPEND_ONLY_TABLES = (
    "log_entry",
    "receipt",
    "scope_facet",
    "review",
    "key",
    "revocation",
    "checkpoint",
    "artifact",
    "cosignature",
    "receipt_revocation",
)
