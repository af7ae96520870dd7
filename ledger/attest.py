"""`ledger attest`: sign and record a receipt from another harness's result.

Commit, tree, parents, PR, merge-base, dirty flag and package identity are
read from the repository; the harness supplies the facts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ledger import source
from ledger.errors import UsageError
from ledger.ingest import Recorded
from ledger.keys import LocalKey
from ledger.models import Supersedes
from ledger.record import Recorder, sign_and_record
from ledger.revision import Revision
from ledger.statement import Facts, build_statement, read_artifact

__all__ = ["Attested", "attest"]


@dataclass(frozen=True, slots=True)
class Attested:
    recorded: Recorded
    revision: Revision


def attest(
    recorder: Recorder,
    key: LocalKey,
    facts: Facts,
    *,
    repo_path: Path | None,
    rev: str | None,
    pr: int | None,
    plan_file: Path | None,
    artifact_paths: Sequence[Path] = (),
    supersedes: Sequence[str] = (),
    supersedes_reason: str | None = None,
) -> Attested:
    """Record one receipt about --rev/--pr; `facts` names no artifacts or
    supersessions yet: they are read and resolved here."""
    if artifact_paths and not recorder.stores_artifacts:
        raise UsageError("--artifact needs --db: a ledger server does not store artifact contents")
    if supersedes and not supersedes_reason:
        raise UsageError("--supersedes needs --supersedes-reason")
    sup = [Supersedes(id=recorder.lookup(s).id, reason=supersedes_reason or "") for s in supersedes]
    files = [read_artifact(p) for p in artifact_paths]
    repo = source.open_repo(repo_path)
    revision = source.identify(
        repo, rev=rev, pr=pr, plan_file=plan_file, for_statement=True
    ).revision
    facts = dataclasses.replace(facts, artifacts=[f.artifact for f in files], supersedes=sup)
    [rec] = sign_and_record(recorder, [build_statement(revision.source(), facts)], key, files)
    return Attested(rec, revision)
