"""The workload a PR's claims run: the head's definition for the head, the base tree's for
the base's arms, and what each receipt says of both.

A PR's claims, checks and thresholds come from the governing plan (the base's); the
workload the claims run is code under test and comes from the head
(`ledger.qualification.workload_source`). Where the base tree defines it otherwise, its
arms run the base's, and the receipts say how the two differ (parameters, files).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import git

from ledger.evidence.errors import UsageError
from ledger.execution.claimrun import ClaimRun
from ledger.plans import governing
from ledger.plans.governing import Identity
from ledger.qualification.plan import PLAN_FILE, ClaimSpec, Plan
from ledger.qualification.workload_source import differences

__all__ = ["claim_runs", "definitions", "file_differs", "plan_in"]


def claim_runs(
    run_plan: Plan,
    asked: Sequence[ClaimSpec],
    device: str,
    profile: str | None,
    base_plan: Plan | None = None,
    sources: dict[str, str] | None = None,
    files: dict[str, str] | None = None,
) -> list[ClaimRun]:
    """The claims as runs: the workload definition `run_plan`'s (the head's), the base's
    arms built with `base_plan`'s (the base tree's) where it differs, and `sources`
    naming both plans in each receipt, with how the workload's parameters and its file
    (`files`, by entry point) differ between head and base."""
    from runners.api import needs_base

    out = []
    for i, c in enumerate(asked, 1):
        params = dict(c.params)
        base = needs_base(c.check)
        differs = (
            differences(base_plan, run_plan, base_plan.claim(c.name) or c)
            if base_plan is not None
            else []
        )
        if base and differs and "base_workload_params" not in params and base_plan is not None:
            # The base's arms run the base tree's model as the base's plan defines it: a
            # comparison of the head's definition with itself would test nothing.
            params["base_workload_params"] = dict(
                base_plan.workload_params_for(base_plan.claim(c.name) or c)
            )
        base_ref = base_plan.workload_for(base_plan.claim(c.name) or c) if base_plan else None
        if (
            base
            and base_ref
            and base_ref != run_plan.workload_for(c)
            and "base_workload_ref" not in params
        ):
            # Likewise its entry point: a module the head added is not in the base's tree.
            params["base_workload_ref"] = base_ref
        said = dict(sources or {})
        changed = [
            *differs,
            *([f] if (f := (files or {}).get(run_plan.workload_for(c) or "")) else []),
        ]
        if changed:
            said["workload_differs"] = "; ".join(changed)
        out.append(
            ClaimRun(
                index=i,
                claim=c.name,
                check=c.check,
                params=params,
                workload_ref=run_plan.workload_for(c) or "",
                workload_params=dict(run_plan.workload_params_for(c)),
                observer_off=c.observer_off,
                world_size=c.world_size,
                timeout_s=c.timeout_s,
                device=device,
                needs_base=base,
                profile=profile,
                network=c.network,
                sources=said,
            )
        )
    return out


def definitions(
    repo: git.Repo, ident: Identity, gate: Plan, pr: int | None, plan_file: Path | None
) -> tuple[Plan, Plan | None, dict[str, str], list[str], dict[str, str]]:
    """The plan to run (the governing plan's claims with the head's workload definition),
    the base tree's definition for the base's arms, what each receipt names of both
    sources, notes where they differ, and which workload files differ between the base
    tree and the head (by entry point). With --plan FILE or --rev, the one plan."""
    from ledger.qualification.workload_source import workload_from

    if pr is None or plan_file is not None:
        return gate, None, {}, [], {}
    r = ident.revision
    head = plan_in(repo, r.commit, "the PR's head")
    base_tree = plan_in(repo, r.base, "the base tree") if r.base else None
    run_plan = workload_from(gate, head)
    base_plan = workload_from(gate, base_tree)
    plan_note = next((n for n in ident.notes if n.startswith("plan: ")), "plan: the base's")
    sources = {
        "plan_source": plan_note.removeprefix("plan: ")
        + ": claims, checks, parameters, thresholds, scopes",
        "workload_source": f"{PLAN_FILE} at head {r.commit}"
        + ("" if head is not None else " (none there: the base's)")
        + ": workload, workload_params, preload",
    }
    if r.base:
        sources["base_workload_source"] = f"{PLAN_FILE} at base tree {r.base}"
    if ident.branch:
        # Which branch `source.base` is the branch point on (whose failure is judged there).
        sources["base_branch"] = ident.branch
    notes = []
    for c in gate.claims:
        d = differences(base_plan, run_plan, c)
        if d:
            notes.append(
                f"{c.name}: the head's workload definition differs from the base's "
                f"({'; '.join(d)}): the head's is run, the base's arms run the base's"
            )
    files = {}
    if r.base:
        for ref in {run_plan.workload_for(c) or "" for c in run_plan.claims} - {""}:
            said = file_differs(repo, r.base, r.commit, ref)
            if said is not None:
                files[ref] = said
    return run_plan, base_plan, sources, notes, files


def file_differs(repo: git.Repo, base: str, head: str, ref: str) -> str | None:
    """How the file of entry point `ref` (`package.module:attr`) differs between the base
    tree and the head, or None (the same, or not a file of the repository: a library)."""
    mod = ref.split(":", 1)[0].replace(".", "/")
    for path in (f"{mod}.py", f"{mod}/__init__.py"):
        blobs: list[str | None] = []
        for commit in (base, head):
            try:
                blobs.append((repo.commit(commit).tree / path).hexsha)
            except KeyError:
                blobs.append(None)
        if blobs == [None, None]:
            continue
        if blobs[0] == blobs[1]:
            return None
        b, h = (x[:12] if x else "(none)" for x in blobs)
        return f"workload file {path}: {b} -> {h}"
    return None


def plan_in(repo: git.Repo, commit: str, what: str) -> Plan | None:
    """The plan committed at `commit` (None: none there); one that does not read is the
    head's own definition broken: refused (exit 2), naming it."""
    try:
        return governing.plan_at(repo, commit, None)
    except UsageError as e:
        raise UsageError(f"{what}'s workload definition: {e.reason()}") from None
