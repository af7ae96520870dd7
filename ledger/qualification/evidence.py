"""What the engine is given: the revision asked about and the logged evidence.

The store builds these after verifying signatures and resolving keys; the
engine decides what the evidence means and never touches bytes or keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ledger.evidence.models import QualificationPredicate, QualificationStatement
from ledger.evidence.signed_revocation import UNSIGNED
from ledger.identity.revision import Revision

__all__ = ["ReceiptEvidence", "ReviewEvidence", "Revision", "Revoked", "short_id"]


@dataclass(frozen=True, slots=True)
class Revoked:
    """A receipt's revocation, as the judge weighs it (`qualification.revocation`)."""

    seq: int
    """The revocation's log position."""
    reason: str
    review: str | None
    """The review the revocation names (a counterexample's independent dispute)."""
    authority: str | None
    """Who vouches for it; None: it is pending and the receipt stands."""
    by: str = "operator"
    """Whose word it is: the ledger's `operator`, or a `reviewer` (on the dispute it names)."""
    refused: str | None = None
    """Why it does not count though it is not pending: the plan leaves revoking a pass
    to the operator (a reviewer's revocation of one), or its signature does not verify
    by a key that may assert it; None: neither is what holds it."""
    unsigned: bool = False
    """Of the earlier, unsigned form: counted as before, and said to be so."""
    signer: str | None = None
    """The key id that signed it (`ReceiptRevocation.signer`)."""
    problem: str | None = None
    """Why its signature counts for nothing (`ReceiptRevocation.problem`; then `refused`)."""

    @property
    def effective(self) -> bool:
        return self.authority is not None

    def text(self) -> str:
        """`revoked: REASON`, or why the revocation does not count yet."""
        if self.effective and self.unsigned:
            return f"revoked: {self.reason}; {UNSIGNED}"
        if self.effective:
            return f"revoked: {self.reason}"
        if self.refused is not None:
            return f"revocation not counted ({self.refused}): {self.reason}"
        return f"revocation pending review: {self.reason}"


@dataclass(frozen=True, slots=True)
class ReceiptEvidence:
    """One logged qualification receipt."""

    id: str
    """`sha256:<hex>` of the signed payload."""
    seq: int
    """Log sequence number: later entries have higher numbers."""
    statement: QualificationPredicate | QualificationStatement
    signer: str
    """Key id of the signing key."""
    signer_role: str
    signer_revoked_seq: int | None = None
    """Sequence number of the signer key's revocation, if revoked."""
    problem: str | None = None
    """Set by the store when the signature or key does not verify."""
    signer_registered_by: str | None = None
    """The token holder who registered the signing key over HTTP (None: on the ledger's host)."""
    revocation: Revoked | None = None
    """The receipt's own revocation, weighed (`qualification.revocation`), if revoked."""

    @property
    def predicate(self) -> QualificationPredicate:
        s = self.statement
        return s.predicate if isinstance(s, QualificationStatement) else s

    @property
    def revoked(self) -> bool:
        """Logged after its key's revocation."""
        return self.signer_revoked_seq is not None and self.seq > self.signer_revoked_seq


@dataclass(frozen=True, slots=True)
class ReviewEvidence:
    """One logged review of a receipt."""

    id: str
    seq: int
    receipt: str
    """Full id of the reviewed receipt."""
    verdict: Literal["concur", "dispute"]
    note: str
    signer: str
    signer_role: str
    signer_revoked_seq: int | None = None
    problem: str | None = None
    """Set by the store when the signature or key does not verify."""
    signer_registered_by: str | None = None
    """The token holder who registered the signing key over HTTP (None: on the ledger's host)."""

    @property
    def revoked(self) -> bool:
        """Logged after its key's revocation."""
        return self.signer_revoked_seq is not None and self.seq > self.signer_revoked_seq


def short_id(receipt_id: str) -> str:
    """First 12 hex characters of a `sha256:<hex>` id (what people type)."""
    return receipt_id.removeprefix("sha256:")[:12]
