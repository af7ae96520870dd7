"""The identity of a source revision: what a receipt speaks of and what a
status question asks about (for a PR: its current head)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ledger.evidence.models import PackageIdentity, Source

__all__ = ["DefinitionProof", "Revision"]


@dataclass(frozen=True, slots=True)
class DefinitionProof:
    """Whether a receipt's commit resolves to the workload definition of the revision
    asked about, read from a checkout where the evidence is gathered
    (`ledger.read.query`), so the engine, which reads no git, can judge it."""

    commit: str
    same: bool | None
    """True: the same definition; False: another; None: not shown (no checkout, the
    commit is not in it, its plan does not read)."""
    said: str = ""
    """How they differ (`key: was -> now; ...`), or why it could not be shown."""


@dataclass(frozen=True, slots=True)
class Revision:
    repo: str
    commit: str
    tree: str
    package_digest: str | None = None
    """Digest of the plan's package paths at this revision, when the plan has any."""
    pr: int | None = None
    package_paths: tuple[str, ...] = ()
    """The globs the package digest covers."""
    parents: tuple[str, ...] = ()
    base: str | None = None
    """Merge-base with the base branch (only read for a new statement)."""
    dirty: bool = False
    """The work tree differs from the commit (only read for a new statement)."""
    package_parts: tuple[tuple[str, str], ...] = ()
    """What the package digest covers, part by part (`PackageIdentity.parts`); empty
    when it covers the files alone. ``workload``: the digest of the workload definition
    the plan resolves to (`ledger.qualification.workload_source.definition`)."""
    prior_package_digest: str | None = None
    """Where the package identity covers a workload definition: the digest as receipts
    recorded before it did spelled it (the files, lock files and distributions alone),
    so those receipts are still found; None otherwise."""
    definition_proofs: tuple[DefinitionProof, ...] = ()
    """For receipts of other commits whose package identity names no workload definition
    or another: whether their commit's definition is this revision's, as a checkout
    showed it (`ledger.read.query`); empty where none was read."""

    @property
    def definition(self) -> str | None:
        """The digest of the workload definition the package identity covers, if any."""
        return dict(self.package_parts).get("workload")

    def proof(self, commit: str) -> DefinitionProof | None:
        """What a checkout showed of `commit`'s workload definition (None: not read)."""
        return next((p for p in self.definition_proofs if p.commit == commit), None)

    def source(self) -> Source:
        """The statement's `predicate.source`."""
        package = (
            PackageIdentity(
                paths=list(self.package_paths),
                digest=self.package_digest,
                parts=dict(self.package_parts) or None,
            )
            if self.package_digest
            else None
        )
        return Source(
            repo=self.repo,
            commit=self.commit,
            tree=self.tree,
            parents=list(self.parents),
            pr=self.pr,
            base=self.base,
            dirty=self.dirty,
            package=package,
        )

    def to_json(self) -> dict[str, Any]:
        """The subject of a status or history answer."""
        return {
            "repo": self.repo,
            "commit": self.commit,
            "tree": self.tree,
            "package_digest": self.package_digest,
            "pr": self.pr,
        }
