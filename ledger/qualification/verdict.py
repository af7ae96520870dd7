"""The verdict a reviewer reads: one model of a status answer that every surface
renders (the terminal, `--json`, Markdown, JUnit, a GitHub check and the web
pages), so no surface decides a state of its own.

It is computed once per question from the engine's report (`meanings.verdict_of`):
the headline ("N of M required claims qualified"), the blockers in order with
their reasons and the next command to run (`next_command.py`), per claim the
required scope's state and the evidence behind it with the one figure that
decides it, and per receipt what it means for this question.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from ledger.evidence.errors import EXIT_INFRA, EXIT_NEGATIVE, EXIT_OK
from ledger.qualification.attribution import Attribution
from ledger.qualification.deciding import Deciding
from ledger.qualification.evidence import short_id
from ledger.qualification.scope import format_scope
from ledger.qualification.states import STATES, State
from ledger.qualification.supersession import SUPERSESSION_PENDING

__all__ = ["MEANINGS", "ClaimVerdict", "Meaning", "ReceiptMeaning", "Verdict"]

Meaning: TypeAlias = Literal[
    "counts",
    "counterexample",
    "outweighed",
    "needs-review",
    "disputed",
    "does-not-hold",
    "inconclusive",
    "infra-error",
    "stale",
    "superseded",
    "supersession-pending",
    "not-evidence",
    "other-revision",
    "does-not-cover",
    "control",
    "control-run",
]
MEANINGS: Mapping[Meaning, str] = {
    "counts": "counts: qualifies the claim",
    "counterexample": "counterexample: fails the claim",
    "outweighed": "a pass outweighed by a counterexample",
    "needs-review": "a pass waiting for concurring reviews",
    "disputed": "disputed by a review: does not qualify",
    "does-not-hold": "does not hold (signature, key, cleanup, control or dirty tree)",
    "inconclusive": "inconclusive: decides nothing",
    "infra-error": "infra-error: the host failed, the code was not judged; a retry judges it",
    "stale": "stale: recorded for an earlier head, or older than the plan allows",
    "superseded": "superseded: replaced by a later receipt",
    "supersession-pending": f"{SUPERSESSION_PENDING}: it stands until its signer "
    "supersedes it or an independent reviewer concurs with the superseding receipt",
    "not-evidence": "not evidence either way (infrastructure error or refusal)",
    "other-revision": "for another revision: does not carry over",
    "does-not-cover": "does not cover the required scope",
    "control": "an observer-off control: it lets an observer-on pass count, "
    "and is not a pass of the claim itself",
    "control-run": "a run inside an observer-off control (observer on or off): "
    "the control compares it with the other run; not a pass of the claim",
}
# Blockers in the order a reviewer acts on them: what contradicts the claim
# first, what is merely missing last.
_BLOCKER_ORDER: tuple[State, ...] = tuple(s for s in STATES if s != "qualified")


@dataclass(frozen=True, slots=True)
class ReceiptMeaning:
    """What one receipt means for the question asked."""

    id: str
    claim: str
    outcome: str
    meaning: Meaning
    seq: int
    commit: str
    recorded: str | None
    """When the check finished (the runner's clock), ISO 8601."""
    observer: str
    environment: Mapping[str, str | int]
    """The receipt's scope, environment facets first (digests whole: surfaces shorten)."""
    reason: str | None
    """The engine's reason about this receipt, when it gave one."""

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "short": short_id(self.id),
            "claim": self.claim,
            "outcome": self.outcome,
            "meaning": self.meaning,
            "meaning_text": MEANINGS[self.meaning],
            "seq": self.seq,
            "commit": self.commit,
            "recorded": self.recorded,
            "observer": self.observer,
            "environment": dict(self.environment),
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class ClaimVerdict:
    """One asked claim at its required scope."""

    claim: str
    required: bool
    state: State
    scope: Mapping[str, str | int]
    via: str | None
    reasons: tuple[str, ...]
    """The reasons that decide the state (for a qualified claim: only what qualifies it)."""
    next: str | None
    """The command to run next, when the claim is not qualified."""
    receipts: tuple[ReceiptMeaning, ...]
    """Every receipt of the claim the ledger holds for this question, deciding ones first."""
    attribution: Attribution | None = None
    """For a blocker: whose failure it is, beside the commit the head branched from."""
    deciding: Deciding | None = None
    """The figure of the receipt that decides the state (the counterexample of a failed
    claim, else the receipt it is qualified on; the newest where several do), with its
    bound: what the receipt page, `ledger show` and the blocker's trend link say.
    None where no receipt decides it or the receipt records no figure."""

    @property
    def scope_text(self) -> str:
        return format_scope(self.scope)

    def to_json(self) -> dict[str, Any]:
        return {
            "claim": self.claim,
            "required": self.required,
            "state": self.state,
            "scope": dict(self.scope),
            "scope_text": self.scope_text,
            "via": self.via,
            "reasons": list(self.reasons),
            "next": self.next,
            "receipts": [r.to_json() for r in self.receipts],
            "attribution": self.attribution.to_json() if self.attribution else None,
            "deciding": self.deciding.to_json() if self.deciding else None,
        }


@dataclass(frozen=True, slots=True)
class Verdict:
    """The whole answer as a reviewer reads it."""

    qualified: bool
    required: int
    """Required claims asked."""
    qualified_required: int
    """Of those, how many are qualified at their required scope."""
    claims: tuple[ClaimVerdict, ...]
    scopes: tuple[str, ...]
    """The required scopes asked (the columns of a matrix), in first-asked order."""
    governed: bool = True
    """False: no governing plan is known (and no claim was named), nothing was judged."""
    ungoverned: str = "no governing plan recorded"
    """Why none is known, as the headline says it (a conflict between plan entries)."""
    run_once: tuple[str, tuple[str, ...]] | None = None
    """One `ledger qualify` that records evidence for several blockers at once (the
    command, the claims it serves), where each would otherwise get its own."""
    problems: int = 0
    """Entries that bear on the answer but do not read, and what keeps the plan unknown:
    the answer is open while any stands (never only infrastructure's)."""

    @property
    def exit_code(self) -> int:
        """The exit status the answer asks of every command that ends on it: 0 qualified;
        3 not qualified only because of infrastructure (every blocker an infra-error: a
        retry, not a fix, decides it); else 1 (the code was judged, evidence is missing,
        or an entry does not read)."""
        if self.qualified:
            return EXIT_OK
        return EXIT_INFRA if self.infra_only and not self.problems else EXIT_NEGATIVE

    @property
    def infra_only(self) -> bool:
        """Not qualified only because of infrastructure: every blocker is an infra-error
        (the code was not judged; a retry, not a fix, decides it)."""
        blockers = self.blockers
        return (
            self.governed
            and not self.qualified
            and bool(blockers)
            and all(c.state == "infra-error" for c in blockers)
        )

    @property
    def headline(self) -> str:
        if not self.governed:
            return f"not qualified: {self.ungoverned}"
        word = "qualified" if self.qualified else "not qualified"
        if self.infra_only:
            word = "not qualified only because of infrastructure (infra-error)"
        return f"{word}: {self.qualified_required} of {self.required} required claims qualified"

    @property
    def whose(self) -> str:
        """Whose the blockers are, counted apart where a baseline told any: those this
        pull request introduced and those already on its base, said under the headline
        (empty where no blocker was set beside its base)."""
        labels = [c.attribution for c in self.blockers if c.attribution is not None]
        introduced = sum(a.label == "introduced" for a in labels)
        inherited = sum(a.inherited for a in labels)
        if not introduced and not inherited:
            return ""
        rest = len(self.blockers) - introduced - inherited
        parts = [
            f"{introduced} introduced by this pull request",
            f"{inherited} already on the base",
        ]
        if rest:
            parts.append(f"{rest} not attributed")
        return "blocking: " + ", ".join(parts)

    @property
    def inherited_only(self) -> bool:
        """Not qualified, and every blocker already fails on the base: the pull request
        brought none of them (a check asks for a person's action, not a fix here)."""
        blockers = self.blockers
        return (
            self.governed
            and not self.qualified
            and bool(blockers)
            and all(c.attribution is not None and c.attribution.inherited for c in blockers)
        )

    @property
    def blockers(self) -> tuple[ClaimVerdict, ...]:
        """Required claims that are not qualified, worst first (then in plan order)."""
        rank = {s: i for i, s in enumerate(_BLOCKER_ORDER)}
        todo = [c for c in self.claims if c.required and c.state != "qualified"]
        return tuple(sorted(todo, key=lambda c: rank.get(c.state, len(rank))))

    def receipt(self, receipt_id: str) -> ReceiptMeaning | None:
        """What `receipt_id` means here (None when this question does not involve it)."""
        for c in self.claims:
            for r in c.receipts:
                if r.id == receipt_id:
                    return r
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "qualified": self.qualified,
            "headline": self.headline,
            "required": self.required,
            "qualified_required": self.qualified_required,
            "scopes": list(self.scopes),
            "governed": self.governed,
            "infra_only": self.infra_only,
            "inherited_only": self.inherited_only,
            "whose": self.whose,
            "blockers": [
                {
                    "claim": c.claim,
                    "state": c.state,
                    "scope_text": c.scope_text,
                    "reasons": list(c.reasons),
                    "next": c.next,
                    "attribution": c.attribution.to_json() if c.attribution else None,
                    "deciding": c.deciding.to_json() if c.deciding else None,
                }
                for c in self.blockers
            ],
            "claims": [c.to_json() for c in self.claims],
            "run_once": (
                None
                if self.run_once is None
                else {"command": self.run_once[0], "claims": list(self.run_once[1])}
            ),
            "exit_code": self.exit_code,
        }
