"""`ledger attest`: sign and record a receipt from another harness's result.

Commit, tree, parents, PR, merge-base, dirty flag and package identity are
read from the repository; the harness supplies the facts. Everything is
checked against the governing plan before anything is signed or written.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ledger import source
from ledger.errors import InputError, UsageError
from ledger.ingest import Recorded
from ledger.keys import LocalKey
from ledger.models import Supersedes
from ledger.record import Recorder, sign_and_record
from ledger.revision import Revision
from ledger.statement import Facts, build_statement, read_artifact
from ledger.verify.strict import unsafe

__all__ = ["Attested", "attest", "rfc3339"]


@dataclass(frozen=True, slots=True)
class Attested:
    recorded: Recorded
    revision: Revision


def rfc3339(value: str, what: str) -> str:
    """An RFC 3339 time as the statement's UTC `...Z` form; a one-line refusal otherwise."""
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise InputError(f"{what} {value!r} is not an RFC 3339 time") from None
    if when.tzinfo is None:
        raise InputError(f"{what} {value!r} needs a UTC offset (e.g. ...Z)")
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _safe_numbers(facts: Facts) -> None:
    for what, value in (
        ("measurements", facts.measurements),
        ("parameters", facts.parameters),
        ("scope", facts.scope),
        ("cleanup", facts.cleanup or {}),
    ):
        found = unsafe(value, what)
        if found:
            raise InputError(
                f"{found}; pass such a value as a string (e.g. a nanosecond epoch "
                "as an RFC 3339 time, or a large count as decimal text)"
            )


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
    unplanned: bool = False,
    allow_dirty: bool = False,
    offline: bool = False,
    base: str | None = None,
) -> Attested:
    """Record one receipt about --rev/--pr; `facts` names no artifacts or
    supersessions yet: they are read and resolved here.

    Refused before anything is written: a claim the governing plan does not
    name (unless `unplanned`), a dirty work tree (unless `allow_dirty`, then
    recorded as dirty), numbers outside the RFC 8785 safe domain. An empty
    `facts.check` means the plan's check for the claim.
    """
    if artifact_paths and not recorder.stores_artifacts:
        raise UsageError("--artifact needs --db: a ledger server does not store artifact contents")
    if supersedes and not supersedes_reason:
        raise UsageError("--supersedes needs --supersedes-reason")
    _safe_numbers(facts)
    repo = source.open_repo(repo_path)
    ident = source.identify(
        repo, rev=rev, pr=pr, plan_file=plan_file, for_statement=True, offline=offline, base=base
    )
    spec = ident.plan.claim(facts.claim) if ident.plan is not None else None
    if spec is None and not unplanned:
        raise InputError(
            f"claim {facts.claim!r} is not in the governing plan; "
            "pass --unplanned to record it anyway"
        )
    if not facts.check:
        facts = dataclasses.replace(facts, check=spec.check if spec else facts.claim)
    if ident.revision.dirty and not allow_dirty:
        raise InputError(
            "the work tree is dirty (it identifies no commit); commit or stash, "
            "or pass --allow-dirty to record it as dirty"
        )
    sup = [Supersedes(id=recorder.lookup(s).id, reason=supersedes_reason or "") for s in supersedes]
    files = [read_artifact(p) for p in artifact_paths]
    facts = dataclasses.replace(facts, artifacts=[f.artifact for f in files], supersedes=sup)
    stmt = build_statement(ident.revision.source(), facts)
    [rec] = sign_and_record(recorder, [stmt], key, files)
    return Attested(rec, ident.revision)
