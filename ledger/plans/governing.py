"""The plan that governs a revision, found and loaded, and the revision's whole
identity under it (`identify`): the one way a revision's identity is built, for
a new statement and for a status question alike.

For a PR the plan on its base branch governs, never the PR's own; for a commit
the plan committed there; `--plan FILE` overrides both. Identity reads git
and is handed the plan it loaded here (`ledger.identity.source.revision_of`);
it never loads one itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import git

from ledger.evidence.errors import InputError, UsageError
from ledger.identity import source
from ledger.identity.revision import Revision
from ledger.plans.definition import Definitions, definitions_of
from ledger.plans.entry import PlanEvidence, collect
from ledger.qualification.plan import PLAN_FILE, Plan, load_plan, parse_plan
from ledger.qualification.workload_source import gate_changed, workload_changed

__all__ = ["Identity", "identify", "plan_at"]


@dataclass(frozen=True, slots=True)
class Identity:
    """A revision and the plan that governs it (None: no plan committed there).

    `notes` say, in words, which head was judged and which plan governs, so
    an answer never leaves a person guessing what it was about.
    """

    revision: Revision
    plan: Plan | None
    notes: tuple[str, ...] = ()
    governing: PlanEvidence | None = None
    """The committed plan's git objects (for a new statement only): recorded in the
    ledger beside the receipts, so a reader without a checkout can prove the plan."""
    branch: str | None = None
    """For a PR: the base branch whose plan governs."""
    problems: tuple[str, ...] = ()
    """What keeps the plan from being known (conflicting plan entries): named by the
    answer, which is not qualified while one stands."""
    definitions: Definitions | None = None
    """The revision's workload definition and, from the checkout, another commit's
    (`ledger.plans.definition`): None without a checkout (a server asked by query)."""


def identify(
    repo: git.Repo,
    *,
    rev: str | None = None,
    pr: int | None = None,
    plan_file: Path | None = None,
    for_statement: bool = False,
    offline: bool = False,
    base: str | None = None,
) -> Identity:
    """Identity of --rev REV or --pr N (its current head), with its governing plan.

    For a PR the plan on its base branch governs (`base`, default: the
    remote's default branch, else main), never the PR's own: a PR must not
    relax its own gate. For a commit it is the plan committed there; an
    explicit `plan_file` overrides both. The package identity is the one that
    plan defines. `for_statement` adds what only a new statement needs
    (merge-base, dirty flag): each costs a git process, and queries never use them.
    """
    commit, head_note = source.head_commit(repo, rev, pr, offline)
    notes = [head_note]
    plan_base: str | None = None
    branch: str | None = None
    if plan_file is not None:
        plan = plan_at(repo, commit.hexsha, plan_file)
        notes.append(f"plan: explicit --plan {plan_file} (not the governing plan)")
    elif pr is not None:
        branch = base or source.default_branch(repo)
        base_commit = source.base_tip(repo, branch, offline)
        plan = plan_at(repo, base_commit.hexsha, None)
        plan_base = base_commit.hexsha
        notes.append(
            f"plan: {PLAN_FILE} on base branch {branch} ({base_commit.hexsha[:12]}"
            f"{_blob_note(repo, plan_base)})"
        )
        proposed = _plan_text(repo, commit.hexsha)
        if proposed != _plan_text(repo, base_commit.hexsha):
            notes.extend(_proposed(plan, proposed))
    else:
        plan = plan_at(repo, commit.hexsha, None)
        plan_base = commit.hexsha
        notes.append(
            f"plan: {PLAN_FILE} as committed at {commit.hexsha[:12]}{_blob_note(repo, plan_base)}"
            if plan is not None
            else f"plan: none committed at {commit.hexsha[:12]}"
        )
    governing = None
    if for_statement and plan is not None and plan_base is not None:
        governing = collect(repo, plan_base, PLAN_FILE)
    defs = definitions_of(repo, plan, commit.hexsha, plan_file=plan_file)
    revision = source.revision_of(
        repo,
        commit,
        plan,
        pr=pr,
        for_statement=for_statement,
        base_branch=base,
        definition=defs.digest if defs is not None else None,
    )
    return Identity(revision, plan, tuple(notes), governing, branch, definitions=defs)


def _proposed(plan: Plan | None, proposed: bytes | None) -> list[str]:
    """What the PR's change to the plan does: its workload definition is the head's code
    under test (judged); everything else in it is proposed, not applied."""
    head = None
    if proposed is not None:
        try:
            head = parse_plan(proposed.decode("utf-8"), f"{PLAN_FILE} at the PR's head")
        except (UnicodeDecodeError, InputError):
            head = None
    out = []
    if workload_changed(plan, head):
        out.append(
            f"the PR changes the workload definition in {PLAN_FILE} (workload, "
            "workload_params, preload): the head's is what qualify runs, as its code is"
        )
    if head is None or gate_changed(plan, head) or not out:
        out.append(f"the PR changes {PLAN_FILE}: proposed, not applied")
    return out


def _blob_note(repo: git.Repo, commit: str) -> str:
    try:
        return f", blob {(repo.commit(commit).tree / PLAN_FILE).hexsha[:12]}"
    except KeyError:
        return ""


def _plan_text(repo: git.Repo, commit: str) -> bytes | None:
    try:
        return bytes(repo.commit(commit).tree[PLAN_FILE].data_stream.read())
    except KeyError:
        return None


def plan_at(repo: git.Repo, commit: str, override: Path | None) -> Plan | None:
    """The plan as committed at the revision (or --plan FILE); None when there is none."""
    # A plan that cannot be read is the environment's fault, not a negative
    # answer about the revision: exit 2, never "not qualified".
    if override is not None:
        try:
            return load_plan(override)
        except InputError as e:
            raise UsageError(e.reason()) from None
    try:
        blob = repo.commit(commit).tree / PLAN_FILE
    except KeyError:
        return None
    where = f"{PLAN_FILE} at {commit[:12]}"
    try:
        text = blob.data_stream.read().decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{where}: not UTF-8 text") from None
    try:
        return parse_plan(text, where)
    except InputError as e:
        raise UsageError(e.reason()) from None
