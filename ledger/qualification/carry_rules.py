"""The rules that decide whether a receipt of other code, or of another time, counts
for the revision asked about: carry-over (by commit, tree or package, and the
workload definition a receipt ran), an earlier head of the same pull request,
the age of evidence, and a counterexample recorded for other code than the pull
request's. Their names, `Reason` and `Requirement` are the catalogue's
(`rules.py`).
"""

from __future__ import annotations

import datetime as dt

from ledger.qualification.evidence import ReceiptEvidence, Revision, short_id
from ledger.qualification.plan import CarryOver
from ledger.qualification.rules import (
    BASE_CONFIRMATION,
    CARRY_OVER,
    EVIDENCE_AGE,
    STALE_HEAD,
    Reason,
    Requirement,
    Via,
)

__all__ = [
    "aged",
    "definition_gap",
    "earlier_head",
    "finished_at",
    "link",
    "not_carried",
    "other_code",
    "stale",
    "unconfirmed",
    "via_text",
]


# -- carry-over ---------------------------------------------------------------


def link(r: ReceiptEvidence, revision: Revision, carry_over: CarryOver) -> Via | None:
    """How `r` reaches `revision` under the claim's carry-over, if it does. Another
    commit's receipt carries only where its workload definition is the revision's
    (`definition_gap`): by tree where it recorded that definition or none (a tree holds
    its plan), by package where it recorded the same, or recorded none and a checkout
    showed its commit's definition to be the revision's."""
    src = r.predicate.source
    if src.commit == revision.commit:
        return "commit"
    gap = definition_gap(r, revision)
    # A tree holds its plan: only a definition recorded otherwise (`--plan FILE`) keeps
    # a receipt of the same tree from carrying.
    same_tree = src.tree == revision.tree
    if carry_over != "commit" and same_tree and (gap is None or _recorded_definition(r) is None):
        return "tree"
    if carry_over != "package" or revision.package_digest is None or src.package is None:
        return None
    if gap is not None:
        return None
    if src.package.digest == revision.package_digest:
        return "package"
    if revision.prior_package_digest is not None and src.package.digest == (
        revision.prior_package_digest
    ):
        return "package"
    return None


def _recorded_definition(r: ReceiptEvidence) -> str | None:
    """The ``workload`` part of `r`'s package identity (None: it records none)."""
    package = r.predicate.source.package
    return (package.parts or {}).get("workload") if package is not None else None


def definition_gap(r: ReceiptEvidence, revision: Revision) -> str | None:
    """Why `r` (of another commit) ran another workload definition than the revision's,
    or None where it ran the same, or neither records one. The package identity records
    the definition (its ``workload`` part); a receipt recorded before it did counts only
    where a checkout showed its commit's definition to be the revision's
    (`Revision.definition_proofs`, read where the evidence is gathered)."""
    src = r.predicate.source
    if revision.package_digest is None or src.package is None:
        return None
    recorded, now = _recorded_definition(r), revision.definition
    if recorded == now:
        return None
    proof = revision.proof(src.commit)
    if recorded is None:
        if proof is not None and proof.same:
            return None
        if proof is None or proof.same is None:
            why = proof.said if proof is not None else "no checkout was read"
            return (
                "it was recorded before the package identity covered the workload "
                "definition, and its commit's definition could not be shown to be this "
                f"revision's ({why})"
            )
    if proof is not None and proof.said:
        return f"the workload definition changed: {proof.said}"
    return (
        f"the workload definition changed (recorded {(recorded or 'none')[:12]}, "
        f"now {(now or 'none')[:12]})"
    )


def _same_but_definition(r: ReceiptEvidence, revision: Revision) -> bool:
    """`r`'s package identity is the revision's in everything but the workload definition."""
    from ledger.identity.environment_identity import prior_digest

    package = r.predicate.source.package
    if package is None or revision.package_digest is None:
        return False
    mine = revision.prior_package_digest or revision.package_digest
    theirs = prior_digest(package.parts) if package.parts else package.digest
    return theirs == mine


def earlier_head(r: ReceiptEvidence, revision: Revision) -> bool:
    """`r` is about another head of the PR asked about."""
    src = r.predicate.source
    return revision.pr is not None and src.pr == revision.pr and src.commit != revision.commit


def via_text(r: ReceiptEvidence, via: Via, revision: Revision | None = None) -> str:
    src = r.predicate.source
    if via == "commit":
        return "via commit"
    if via == "tree":
        return f"via tree (commit {src.commit[:12]} has the same tree)"
    if (
        revision is not None
        and revision.definition is not None
        and (_recorded_definition(r) is None)
    ):
        return (
            f"via package (commit {src.commit[:12]} has the same package files; recorded "
            "before the package identity covered the workload definition, its commit's "
            "definition, read from the checkout, is this revision's)"
        )
    return f"via package (commit {src.commit[:12]} has the same package digest)"


def not_carried(r: ReceiptEvidence, revision: Revision, req: Requirement) -> Reason:
    src = r.predicate.source
    sid = short_id(r.id)
    same_tree = src.tree == revision.tree
    same_pkg = (
        revision.package_digest is not None
        and src.package is not None
        and src.package.digest == revision.package_digest
    )
    gap = definition_gap(r, revision) if req.carry_over != "commit" else None
    same_files = _same_but_definition(r, revision)
    if gap is not None and (same_tree or (req.carry_over == "package" and same_files)):
        what = "tree" if same_tree else "package files"
        text = f"{sid} on commit {src.commit[:12]} has the same {what}, but {gap}"
    elif same_tree or same_pkg:
        what = "tree" if same_tree else "package digest"
        text = (
            f"{sid} on commit {src.commit[:12]} has the same {what}, but claim "
            f"{req.claim!r} carries over by {req.carry_over} only"
        )
    elif req.carry_over == "package" and src.package is None:
        text = f"{sid} on commit {src.commit[:12]} records no package identity"
    elif (
        req.carry_over == "package"
        and src.package is not None
        and (src.package.parts or revision.package_parts)
    ):
        from ledger.identity.environment_identity import differing

        # A receipt without parts covered its files alone; the workload definition is
        # said in words (`definition_gap`), never as two digests.
        theirs = src.package.parts or {"files": src.package.digest}
        parts = [
            p
            for p in differing(theirs, dict(revision.package_parts))
            if not p.startswith("workload:")
        ]
        said = [*parts, *([gap] if gap is not None else [])]
        text = (
            f"{sid} on commit {src.commit[:12]}: the package identity differs in "
            f"{'; '.join(said) or 'its digest'}"
        )
    else:
        differs = {
            "commit": "another commit",
            "tree": "another commit and tree",
            "package": "another commit, tree and package digest",
        }[req.carry_over]
        text = f"{sid} is for {differs} ({src.commit[:12]})"
    return Reason(CARRY_OVER, text, r.id)


def stale(r: ReceiptEvidence, revision: Revision, req: Requirement) -> Reason:
    src = r.predicate.source
    why = {
        "commit": "the claim carries over by commit only",
        "tree": "its tree differs",
        "package": "its tree and package differ",
    }[req.carry_over]
    gap = definition_gap(r, revision) if req.carry_over != "commit" else None
    if gap is not None and (src.tree == revision.tree or _same_but_definition(r, revision)):
        # Its files are the revision's: the definition is what differs.
        why = gap
    return Reason(
        STALE_HEAD,
        f"{short_id(r.id)} {r.predicate.outcome} on earlier head {src.commit[:12]} of "
        f"PR #{src.pr}; {why}",
        r.id,
    )


# -- age, and a counterexample of other code ---------------------------------


def finished_at(r: ReceiptEvidence) -> dt.datetime:
    return dt.datetime.fromisoformat(r.predicate.runner.finished.replace("Z", "+00:00"))


def _age(seconds: float) -> str:
    for unit, n in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= n:
            return f"{seconds / n:.1f}{unit}"
    return f"{seconds:.0f}s"


def aged(r: ReceiptEvidence, req: Requirement, now: dt.datetime) -> Reason | None:
    """Where the plan sets evidence_max_age: a receipt that finished longer ago."""
    if req.max_age_s is None:
        return None
    age = (now - finished_at(r)).total_seconds()
    if age <= req.max_age_s:
        return None
    return Reason(
        EVIDENCE_AGE,
        f"{short_id(r.id)} {r.predicate.outcome} {_age(age)} ago (finished "
        f"{r.predicate.runner.finished}); the plan's evidence_max_age is {req.max_age}",
        r.id,
    )


def other_code(r: ReceiptEvidence, revision: Revision) -> bool:
    """`r` was recorded for another commit than a pull request's own, and not for that
    pull request (its base branch's, or another pull request's code)."""
    src = r.predicate.source
    return revision.pr is not None and src.commit != revision.commit and src.pr != revision.pr


def unconfirmed(r: ReceiptEvidence, req: Requirement, heads: int) -> Reason:
    src = r.predicate.source
    where = f"PR #{src.pr}" if src.pr is not None else "the base branch"
    return Reason(
        BASE_CONFIRMATION,
        f"{short_id(r.id)} failed on {src.commit[:12]} ({where}, not this pull request's "
        f"code); failures of the claim stand on {heads} distinct commit(s), the plan's "
        f"base_counterexample_heads is {req.base_heads}: it does not block yet",
        r.id,
    )
