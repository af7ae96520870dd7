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

from ledger.evidence.errors import InputError, UsageError
from ledger.evidence.keys import LocalKey
from ledger.evidence.models import Supersedes
from ledger.evidence.statement import ArtifactFile, Facts, build_statement, read_artifact
from ledger.identity import source
from ledger.identity.revision import Revision
from ledger.plans import governing
from ledger.plans.governing import Identity
from ledger.qualification.plan import ClaimSpec
from ledger.verify.strict import unsafe
from ledger.write.ingest import Recorded
from ledger.write.record import Recorder, record_governing, sign_and_record

__all__ = ["Attested", "Target", "attest", "record_all", "rfc3339", "target"]


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


@dataclass(frozen=True, slots=True)
class Target:
    """What receipts will speak of, checked before any work: the revision, its
    governing plan's spec of each claim (None: recorded unplanned)."""

    identity: Identity
    specs: dict[str, ClaimSpec | None]

    @property
    def revision(self) -> Revision:
        return self.identity.revision


def target(
    claims: Sequence[str],
    *,
    repo_path: Path | None,
    rev: str | None,
    pr: int | None,
    plan_file: Path | None,
    unplanned: bool = False,
    allow_dirty: bool = False,
    offline: bool = False,
    base: str | None = None,
    fresh_checkout: bool = False,
) -> Target:
    """The revision and each claim's plan entry; refused before anything runs or
    is written: a claim the governing plan does not name (unless `unplanned`), a
    dirty work tree (unless `allow_dirty`, then recorded as dirty, or
    `fresh_checkout`: the work runs on a clean checkout of the commit)."""
    repo = source.open_repo(repo_path)
    ident = governing.identify(
        repo, rev=rev, pr=pr, plan_file=plan_file, for_statement=True, offline=offline, base=base
    )
    specs = {c: ident.plan.claim(c) if ident.plan is not None else None for c in claims}
    missing = [c for c, spec in specs.items() if spec is None]
    if missing and not unplanned:
        raise InputError(
            f"claim {missing[0]!r} is not in the governing plan; "
            "pass --unplanned to record it anyway"
        )
    if fresh_checkout:
        ident = dataclasses.replace(
            ident, revision=dataclasses.replace(ident.revision, dirty=False)
        )
    elif ident.revision.dirty and not allow_dirty:
        raise InputError(
            "the work tree is dirty (it identifies no commit); commit or stash, "
            "or pass --allow-dirty to record it as dirty"
        )
    return Target(ident, specs)


def record_all(
    recorder: Recorder,
    key: LocalKey,
    tgt: Target,
    all_facts: Sequence[Facts],
    *,
    artifact_paths: Sequence[Path] = (),
    artifact_files: Sequence[ArtifactFile] = (),
    supersedes: Sequence[str] = (),
    supersedes_reason: str | None = None,
) -> list[Recorded]:
    """Sign and record one receipt per facts, all in one transaction or none."""
    if (artifact_paths or artifact_files) and not recorder.stores_artifacts:
        raise UsageError("--artifact needs --db: a ledger server does not store artifact contents")
    if supersedes and not supersedes_reason:
        raise UsageError("--supersedes needs --supersedes-reason")
    for f in all_facts:
        _safe_numbers(f)
    sup = [Supersedes(id=recorder.lookup(s).id, reason=supersedes_reason or "") for s in supersedes]
    files = [*artifact_files, *(read_artifact(p) for p in artifact_paths)]
    stmts = []
    for facts in all_facts:
        spec = tgt.specs.get(facts.claim)
        if not facts.check:
            facts = dataclasses.replace(facts, check=spec.check if spec else facts.claim)
        facts = dataclasses.replace(facts, artifacts=[f.artifact for f in files], supersedes=sup)
        stmts.append(build_statement(tgt.revision.source(), facts))
    # The plan that governs these receipts goes with them: a reader without a
    # checkout proves it from the ledger alone.
    record_governing(recorder, tgt.identity)
    return sign_and_record(recorder, stmts, key, files)


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
    tgt = target(
        [facts.claim],
        repo_path=repo_path,
        rev=rev,
        pr=pr,
        plan_file=plan_file,
        unplanned=unplanned,
        allow_dirty=allow_dirty,
        offline=offline,
        base=base,
    )
    [rec] = record_all(
        recorder,
        key,
        tgt,
        [facts],
        artifact_paths=artifact_paths,
        supersedes=supersedes,
        supersedes_reason=supersedes_reason,
    )
    return Attested(rec, tgt.revision)
