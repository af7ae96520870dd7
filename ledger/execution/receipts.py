"""A finished claim's results signed and recorded: the facts of each receipt, the
artifact files read only inside the claim's artifact folder."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from ledger.keys import LocalKey
from ledger.record import Recorder, sign_and_record
from ledger.revision import Revision
from ledger.statement import ArtifactFile, Facts, build_statement, read_artifact, timestamp

if TYPE_CHECKING:
    from ledger.ingest import Recorded
    from runners.result import CheckResult

__all__ = ["record_results"]


def _facts(
    r: CheckResult,
    inside: Path,
    environment: Mapping[str, str] | None = None,
    uuids: Sequence[str] = (),
) -> tuple[Facts, list[ArtifactFile]]:
    # Read only inside the artifact folder: the child named these paths.
    files = [read_artifact(Path(a.path), a.name, a.media_type, inside) for a in r.artifacts]
    facts = Facts(
        claim=r.claim,
        check=r.check,
        check_version=r.check_version,
        parameters=r.params,
        scope=r.scope,
        outcome=r.outcome,
        reason=r.reason,
        measurements=r.measurements,
        observer=r.observer,
        cleanup=asdict(r.cleanup),
        artifacts=[f.artifact for f in files],
        supersedes=[],
        host=r.host,
        gpu_uuids=r.gpu_uuids or list(uuids),
        started=timestamp(r.started_ns) if r.started_ns else None,
        finished=timestamp(r.finished_ns) if r.finished_ns else None,
        environment=dict(environment or {}),
    )
    return facts, files


def record_results(
    recorder: Recorder,
    key: LocalKey,
    revision: Revision,
    results: Sequence[CheckResult],
    artifacts: Path,
    environment: Mapping[str, str] | None = None,
    uuids: Sequence[str] = (),
) -> list[Recorded]:
    """One claim's receipts, signed and recorded together with their artifacts (read only
    inside the ``artifacts`` folder)."""
    built = [_facts(r, artifacts, environment, uuids) for r in results]
    stmts = [build_statement(revision.source(), f) for f, _ in built]
    files = [a for _, fs in built for a in fs]
    return sign_and_record(recorder, stmts, key, files if recorder.stores_artifacts else ())
