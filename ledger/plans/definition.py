"""The workload definition a revision resolves to, and the same at another commit.

A revision's workload definition is code under test (`ledger.qualification.workload_source`):
for a PR the head's `qualification.toml` resolved under the base's gate, for a commit
its own plan, with `--plan FILE` that file's. Its digest joins the package identity
(`ledger.identity.source.package_identity`), so a PR that changes only the model its
plan names never inherits the base's receipts.

A receipt recorded before the definition joined the package identity names the files'
digest alone: it is found by that digest and counts only where a checkout shows that
its commit resolves, the same way, to the revision's definition (`prove`). Read here,
where git is; the engine is handed the result (`ledger.identity.revision.DefinitionProof`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import git

from ledger.evidence.errors import InputError
from ledger.identity.revision import DefinitionProof
from ledger.qualification.adapters import adapter_version, unrecorded_version
from ledger.qualification.plan import PLAN_FILE, Plan, parse_plan
from ledger.qualification.workload_source import (
    definition,
    definition_changes,
    definition_digest,
    names_definition,
    workload_from,
)

__all__ = ["NO_DEFINITION", "Definitions", "definitions_of", "prove"]

NO_DEFINITION = "none"
"""The ``workload`` part of a revision whose plan names no definition under a gate that
names one."""


@dataclass(frozen=True, slots=True)
class Definitions:
    """The workload definition of the revision asked about, and how another commit's is
    resolved from the same checkout."""

    repo: git.Repo
    gate: Plan
    """The governing plan: the gate every commit's definition is resolved under."""
    resolved: Plan | None
    """The gate with the revision's workload definition (None: its plan does not read)."""
    digest: str | None
    """The definition's digest, the package identity's ``workload`` part (None: the plan
    names none)."""
    explicit: bool = False
    """`--plan FILE`: the file's definition is every commit's."""

    def at(self, commit: str) -> Plan | str:
        """`commit`'s definition resolved the same way, or why it cannot be read."""
        if self.explicit:
            return self.gate
        try:
            blob = self.repo.commit(commit).tree / PLAN_FILE
        except (git.BadName, ValueError):
            return f"commit {commit[:12]} is not in this checkout"
        except KeyError:
            return workload_from(self.gate, None)
        try:
            text = blob.data_stream.read().decode("utf-8")
            return workload_from(self.gate, parse_plan(text, f"{PLAN_FILE} at {commit[:12]}"))
        except (UnicodeDecodeError, InputError):
            return f"its {PLAN_FILE} at {commit[:12]} does not read"


def definitions_of(
    repo: git.Repo, gate: Plan | None, commit: str, *, plan_file: Path | None
) -> Definitions | None:
    """The revision's workload definition under `gate` (None: no plan governs): the file's
    with `--plan FILE`, else the commit's own plan's resolved under the gate (a PR's
    head's under its base's; a commit's plan is its own gate). A plan at the commit that
    does not read is a definition of its own, which no receipt shares. A gate and a
    head naming none: no definition (the package identity stays as it always was)."""
    if gate is None:
        return None
    defs = Definitions(repo, gate, gate, definition_digest(gate), explicit=plan_file is not None)
    if plan_file is not None:
        return defs
    got = defs.at(commit)
    if isinstance(got, str):
        try:
            raw = bytes((repo.commit(commit).tree / PLAN_FILE).data_stream.read())
        except (KeyError, git.BadName, ValueError):
            raw = got.encode()
        unread = "unreadable:" + hashlib.sha256(raw).hexdigest()
        return Definitions(repo, gate, None, unread)
    digest = definition_digest(got)
    if digest is None and names_definition(gate):
        # The head names none where its gate names one: no receipt of a definition
        # shares it (the files alone would match the base's receipts).
        digest = NO_DEFINITION
    return Definitions(repo, gate, got, digest)


def prove(defs: Definitions | None, commit: str, recorded: str | None) -> DefinitionProof:
    """Whether `commit` (a receipt's, whose package identity records the definition
    `recorded`, None: none) resolves to the definition of the revision `defs` speaks of.
    A receipt recording none ran its ready adapters as they were before versions were
    named (`ledger.qualification.adapters.UNRECORDED`); one recording another digest
    ran another definition, and what differs is named where the checkout shows it."""
    if defs is None:
        return DefinitionProof(
            commit,
            None,
            "there is no checkout here to read the workload definition at it: ask in a "
            "checkout, or give the server one (`ledger serve --repo PATH`)",
        )
    if defs.resolved is None:
        return DefinitionProof(commit, False, f"this revision's {PLAN_FILE} does not read")
    was = defs.at(commit)
    if isinstance(was, str):
        # A recorded definition that differs differs, whether or not its words can be
        # read here (then its digest says it).
        return (
            DefinitionProof(commit, None, was)
            if recorded is None
            else (DefinitionProof(commit, False))
        )
    versions = unrecorded_version if recorded is None else adapter_version
    changes = definition_changes(was, defs.resolved, versions)
    if recorded is None:
        same = definition(was, versions) == definition(defs.resolved)
        return DefinitionProof(commit, same, "; ".join(changes))
    return DefinitionProof(commit, False, "; ".join(changes))
