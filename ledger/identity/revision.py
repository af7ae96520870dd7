"""The identity of a source revision: what a receipt speaks of and what a
status question asks about (for a PR: its current head)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ledger.evidence.models import PackageIdentity, Source

__all__ = ["Revision"]


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
    when it covers the files alone."""

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
