"""A question about a revision, typed, with its one encoding.

`status`, `history` and the evidence under them are asked about one subject (a
revision), judged by one plan (or none), for some claims at a scope. Whoever asks,
here or of a server (`status --server`, a baseline reading the base's receipts), the
question is this value, and what travels is `to_json`, read back by `from_json`: the
server refuses what it cannot read with a one-line reason, and a client of this
release still asks a server of the earlier one (no field it does not know, none at
its default).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ledger.evidence.errors import RefusedError
from ledger.identity.revision import Revision

if TYPE_CHECKING:  # a question is built without the plan's models where it carries none
    from ledger.plans.governing import Identity
    from ledger.qualification.plan import Plan

__all__ = ["Question"]

_REVISION_FIELDS = frozenset(f.name for f in dataclasses.fields(Revision))


@dataclass(frozen=True, slots=True)
class Question:
    """What is asked: the subject, the plan it is judged by, and what was asked of it."""

    subject: Revision
    plan: Plan | None = None
    """The plan the asker identified (its checkout's): the server did not prove it."""
    notes: tuple[str, ...] = ()
    """How the asker identified the subject and its plan, in words."""
    claims: tuple[str, ...] = ()
    """Only these claims (all of the plan's where empty)."""
    scope: Mapping[str, str | int] = field(default_factory=dict)
    """The scope asked for (the plan's where empty)."""

    @classmethod
    def of(
        cls,
        ident: Identity,
        claims: Sequence[str] = (),
        scope: Mapping[str, str | int] | None = None,
    ) -> Question:
        """The question about an identified revision."""
        return cls(ident.revision, ident.plan, tuple(ident.notes), tuple(claims), dict(scope or {}))

    @classmethod
    def about(cls, repo: str, commit: str, claims: Sequence[str] = ()) -> Question:
        """A commit's receipts for ``claims``, judged by no plan (a baseline's base)."""
        return cls(Revision(repo=repo, commit=commit, tree=""), claims=tuple(claims))

    def identity(self) -> Identity:
        """The subject and its plan, as the read side judges them."""
        from ledger.plans.governing import Identity

        return Identity(self.subject, self.plan, self.notes)

    def to_json(self) -> dict[str, Any]:
        """The one encoding, what is posted (`POST /v1/status`, `/v1/history`,
        `/v1/evidence`)."""
        subject = dataclasses.asdict(self.subject)
        # What a checkout showed is read where the evidence is gathered, never taken from
        # a question; and a field at its default stays out, so a server of an earlier
        # release (which refuses fields it does not know) still answers.
        subject.pop("definition_proofs", None)
        if subject.get("prior_package_digest") is None:
            subject.pop("prior_package_digest", None)
        return {
            "subject": subject,
            "plan": self.plan.model_dump(mode="json") if self.plan else None,
            "notes": list(self.notes),
            "claims": list(self.claims),
            "scope": dict(self.scope),
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Question:
        """A posted question read back, or `RefusedError` naming the field that is wrong."""
        claims = doc.get("claims") or []
        if not isinstance(claims, list) or not all(isinstance(c, str) for c in claims):
            raise RefusedError("claims: expected a list of strings")
        scope = doc.get("scope") or {}
        if not isinstance(scope, dict) or not all(
            isinstance(v, str | int) and not isinstance(v, bool) for v in scope.values()
        ):
            raise RefusedError("scope: expected an object of strings and integers")
        subject = doc.get("subject")
        if not isinstance(subject, dict) or not set(subject) <= _REVISION_FIELDS:
            raise RefusedError(
                f"subject: expected an object with fields {sorted(_REVISION_FIELDS)}"
            )
        try:
            fields: dict[str, Any] = {
                k: tuple(v) if isinstance(v, list) else v for k, v in subject.items()
            }
            revision = Revision(**fields)
            for name in ("repo", "commit", "tree"):
                if not isinstance(getattr(revision, name), str):
                    raise TypeError(name)
        except TypeError as e:
            raise RefusedError(f"subject: {e}") from None
        plan = _plan(doc.get("plan"))
        notes = doc.get("notes") or []
        if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
            raise RefusedError("notes: expected a list of strings")
        return cls(revision, plan, tuple(notes), tuple(claims), dict(scope))


def _plan(doc: Any) -> Plan | None:
    if doc is None:
        return None
    from pydantic import ValidationError

    from ledger.evidence.errors import first_validation_error
    from ledger.qualification.plan import Plan

    try:
        return Plan.model_validate(doc)
    except ValidationError as e:
        raise RefusedError(f"plan: {first_validation_error(e)}") from None
