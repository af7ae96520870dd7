"""The next command for a claim that is not qualified: the command that records new
evidence for it (`record_command`), what a blocker asks of a person (a review, a
supersession, a fix, a retry; for a failure already on the base, the base's step),
and the one `ledger qualify` that serves several blockers at once (`run_once`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ledger.qualification import rules
from ledger.qualification.attribution import Attribution, next_step
from ledger.qualification.evidence import short_id
from ledger.qualification.states import ClaimStatus
from ledger.qualification.supersession import SUPERSESSION_PENDING, pending
from ledger.qualification.verdict import ClaimVerdict

__all__ = ["next_of", "record_command", "run_once"]


def run_once(
    rows: Sequence[ClaimStatus], claims: Sequence[ClaimVerdict], target: str
) -> tuple[str, tuple[str, ...]] | None:
    """One `ledger qualify` for the required claims whose next step is just a
    qualify run, where there are two or more: without --claim where that runs
    nothing else that already qualifies, else naming each."""
    check = {r.claim: r.check for r in rows if r.scope_role == "required"}

    def by_qualify(claim: str) -> bool:
        c = check.get(claim)
        return c is not None and c not in _RECORDED_BY

    todo = [
        c.claim
        for c in claims
        if c.required
        and by_qualify(c.claim)
        and c.next == f"`{record_command(c.claim, check[c.claim], target)}`"
    ]
    if len(todo) < 2:
        return None
    rest = [c for c in claims if by_qualify(c.claim) and c.claim not in todo]
    if not rest:
        return f"ledger qualify {target}", tuple(todo)
    return f"ledger qualify {target} " + " ".join(f"--claim {c}" for c in todo), tuple(todo)


# The command that records evidence for a claim, by the check the plan names: the
# checks qualify runs, and those whose receipts another command records.
_RECORDED_BY: Mapping[str, str] = {
    "import-junit": "ledger import junit REPORT.xml --claim {claim} {target} --key RUNNER",
    "import-in-toto": "ledger import in-toto STATEMENT --claim {claim} {target} --key RUNNER",
    "import-admission-events": (
        "ledger import admission-events SPOOL --claim {claim} {target} --key RUNNER"
    ),
    "command": "ledger run --claim {claim} {target} --key RUNNER -- CMD ...",
}


def record_command(claim: str, check: str | None, target: str) -> str:
    """The command that records new evidence for `claim` (checked by `check`)."""
    if check is None:
        # Not in the plan: only another harness's result can be attested for it.
        return f"ledger attest --claim {claim} {target} --outcome OUTCOME --key RUNNER --unplanned"
    form = _RECORDED_BY.get(check, "ledger qualify {target} --claim {claim}")
    return form.format(claim=claim, target=target)


def next_of(row: ClaimStatus, target: str, label: Attribution | None) -> str | None:
    """The next step; for a failure already on the base, the base's (`next_step`)."""
    if row.state != "qualified" and label is not None and label.inherited:
        return next_step(label, target)
    return _next(row, target)


def _next(row: ClaimStatus, target: str) -> str | None:
    qualify = record_command(row.claim, row.check, target)
    first = short_id(row.receipts[0]) if row.receipts else "ID"
    rules_here = {r.rule for r in row.reasons}
    match row.state:
        case "qualified":
            return None
        case "failed" if (by := pending_by(row)) is not None:
            return (
                f"`ledger review {by} --concur --note TEXT --key REVIEWER` (an independent "
                f"reviewer) lets {by} retire {first}, or its signer supersedes it"
            )
        case "failed":
            return (
                f"`{qualify}` after a fix, or `ledger supersede {first} --reason TEXT "
                f"--key RUNNER` if the failure was not the code's"
            )
        case "needs-review":
            return f"`ledger review {first} --concur --note TEXT --key REVIEWER` (not the signer)"
        case "disputed":
            return f"read the dispute (`ledger show {first}`), then `{qualify}`"
        case "unverified":
            if rules.DIRTY_TREE in rules_here:
                return f"commit the work tree, then `{qualify}`"
            if rules_here & {rules.SIGNATURE, rules.KEY_REVOKED, rules.SIGNER_ROLE}:
                return f"`ledger audit`, then `{qualify}` with a valid runner key"
            return f"`{qualify}`"
        case "not-applicable":
            return "ask at a scope the plan's scope allows (drop or change --scope)"
        case "infra-error":
            return f"retry: `{qualify}` (the host failed, not the code: nothing to fix)"
        case _:
            return f"`{qualify}`"


def pending_by(row: ClaimStatus) -> str | None:
    """The short id of a receipt whose supersession of this row's evidence waits for review."""
    for r in row.reasons:
        if pending(r):
            return r.text.removeprefix(SUPERSESSION_PENDING + ": ").split(" ", 1)[0]
    return None
