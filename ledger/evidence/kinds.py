"""The kinds of document the ledger signs and exports: their type identifiers,
and the key role that may sign each.

Plain constants, no models: the offline verifier reads them without building
the pydantic models of `ledger.evidence.models` (which re-exports them).
"""

from __future__ import annotations

__all__ = [
    "BUNDLE_TYPE",
    "DEFAULT_MEDIA_TYPE",
    "IN_TOTO_PAYLOAD_TYPE",
    "KIND_FOR",
    "QUALIFICATION_PREDICATE",
    "REVIEW_PREDICATE",
    "ROLE_FOR",
    "STATEMENT_TYPE",
]

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
IN_TOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"
QUALIFICATION_PREDICATE = "https://ledger.dev/predicates/qualification/v1"
REVIEW_PREDICATE = "https://ledger.dev/predicates/review/v1"
BUNDLE_TYPE = "application/vnd.ledger.bundle.v1+json"
"""Media type of an exported bundle (`ledger export`, `ledger verify FILE`)."""
DEFAULT_MEDIA_TYPE = "application/octet-stream"
"""An artifact's media type where its statement names none."""

ROLE_FOR = {QUALIFICATION_PREDICATE: "runner", REVIEW_PREDICATE: "reviewer"}
"""The key role that may sign each kind of statement."""
KIND_FOR = {QUALIFICATION_PREDICATE: "receipt", REVIEW_PREDICATE: "review"}
"""What a statement of each predicate type is called in the log."""
