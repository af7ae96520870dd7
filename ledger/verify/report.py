"""The verification report: one shape whether a receipt was verified from its
id in a ledger or from an exported bundle offline."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ledger.keys import KeyInfo
from ledger.models import ReviewStatement
from ledger.verify.envelope import Verified

__all__ = ["LogState", "VerificationReport", "review_item"]


@dataclass(frozen=True, slots=True)
class LogState:
    index: int
    size: int
    """Size of the tree the inclusion was proven against."""
    origin: str | None
    inclusion: str
    """What the inclusion was proven against, in words."""


@dataclass
class VerificationReport:
    id: str
    kind: str
    signer: str
    """Key id of the signature that verified."""
    signer_name: str
    signer_role: str
    anchor: str
    """Which trusted key, or which ledger, the verification rests on."""
    log: LogState
    statement: dict[str, Any]
    reviews: list[dict[str, Any]] = field(default_factory=list)
    """Reviews logged up to the proven size, vouched for by the anchor.
    Each is proven to be in the log; that the list is complete is not."""
    unanchored_reviews: list[dict[str, Any]] = field(default_factory=list)
    """Reviews in a log no trusted key vouches for: shown, never counted."""

    def to_json(self) -> dict[str, Any]:
        p = self.statement.get("predicate", {})
        return {
            "verified": True,
            "id": self.id,
            "kind": self.kind,
            "claim": p.get("claim"),
            "outcome": p.get("outcome"),
            "signer": {"keyid": self.signer, "name": self.signer_name, "role": self.signer_role},
            "anchor": self.anchor,
            "log": {
                "index": self.log.index,
                "size": self.log.size,
                "origin": self.log.origin,
                "inclusion": self.log.inclusion,
            },
            "reviews": self.reviews,
            "unanchored_reviews": self.unanchored_reviews,
        }


def review_item(rv: Verified, keys: Mapping[str, KeyInfo]) -> dict[str, Any]:
    assert isinstance(rv.statement, ReviewStatement)
    p = rv.statement.predicate
    info = keys.get(rv.signer)
    return {
        "id": rv.id,
        "verdict": p.verdict,
        "note": p.note,
        "reviewed": p.reviewed,
        "signer": {"keyid": rv.signer, "name": info.name if info else None},
    }
