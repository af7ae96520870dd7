"""A finished claim's results signed and recorded: the facts of each receipt, the
artifact files read beneath the claim's artifact folder, never through a link
(`ledger.outputs.beneath`). An artifact refused there is named in the receipt's
``refused_outputs``; a pass that lost one is inconclusive, any other outcome stands.

`record_finished` is the one way from a finished claim to its receipts, for every
executor: the local one records in the qualifying process, a Ray task where the
claim ran."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ledger.evidence.keys import LocalKey
from ledger.evidence.models import Outcome
from ledger.evidence.statement import (
    ArtifactFile,
    Facts,
    build_statement,
    describe_artifact,
    timestamp,
)
from ledger.fleet.evidence import health_evidence
from ledger.identity.revision import Revision
from ledger.outputs.beneath import Folder, Refused
from ledger.outputs.declared import refusal
from ledger.write.artifacts import MAX_ARTIFACT_BYTES
from ledger.write.record import Recorder, sign_and_record

if TYPE_CHECKING:
    from ledger.execution.claimrun import Finished
    from ledger.write.ingest import Recorded
    from runners.contract.result import CheckResult, Stamped

__all__ = ["claim_artifacts", "record_finished", "record_results"]


def claim_artifacts(
    r: CheckResult | Stamped, inside: Path
) -> tuple[list[ArtifactFile], list[Refused]]:
    """The artifacts a claim's result names, read beneath ``inside`` (the claim's
    artifact folder), and those refused there, each with why."""
    files: list[ArtifactFile] = []
    refused: list[Refused] = []
    if not r.artifacts:
        return files, refused
    try:
        folder = Folder(inside)
    except OSError as e:
        why = f"the artifact folder cannot be opened: {e.strerror}"
        return files, [Refused(a.path, why) for a in r.artifacts]
    with folder:
        for a in r.artifacts:
            # The child named the path (checked lexically inside the folder already,
            # `runners.contract.result.check_result`); what it is is decided only here.
            try:
                rel = _below(Path(a.path), inside)
                files.append(
                    describe_artifact(folder.read(rel, MAX_ARTIFACT_BYTES), a.name, a.media_type)
                )
            except Refused as e:
                refused.append(Refused(str(inside / e.path), e.why))
            except ValueError:
                refused.append(Refused(a.path, "not below the claim's artifact folder"))
            except FileNotFoundError:
                refused.append(Refused(a.path, "missing: the claim never wrote it"))
    return files, refused


def _below(path: Path, inside: Path) -> str:
    for root in (inside, inside.resolve()):
        if path.is_relative_to(root) and path != root:
            return path.relative_to(root).as_posix()
    raise ValueError(path)


def _facts(
    r: CheckResult | Stamped,
    inside: Path,
    environment: Mapping[str, str] | None = None,
    uuids: Sequence[str] = (),
) -> tuple[Facts, list[ArtifactFile]]:
    files, refused = claim_artifacts(r, inside)
    outcome: Outcome = r.outcome
    reason = r.reason
    measurements: dict[str, Any] = dict(r.measurements)
    # The parent names what it refused; the child cannot speak for it.
    measurements.pop("refused_outputs", None)
    if refused:
        measurements["refused_outputs"] = [refusal(x) for x in refused]
        if outcome == "passed":
            x = refused[0]
            outcome, reason = "inconclusive", f"artifact {x.path} was refused: {x.why}"
    facts = Facts(
        claim=r.claim,
        check=r.check,
        check_version=r.check_version,
        parameters=dict(r.params),
        scope=dict(r.scope),
        outcome=outcome,
        reason=reason,
        measurements=measurements,
        observer=r.observer,
        cleanup=asdict(r.cleanup),
        artifacts=[f.artifact for f in files],
        supersedes=[],
        # The host's readings, set over the claim's word by the parent once the claim
        # ended (`runners.claim.authors`); the executor's devices where none was used.
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
    results: Sequence[CheckResult | Stamped],
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


def record_finished(
    fin: Finished,
    recorder: Recorder,
    key: LocalKey,
    revision: Revision,
    *,
    ci: Mapping[str, str],
    facts: Mapping[str, str] | None = None,
) -> list[tuple[Recorded, Stamped]]:
    """A finished claim's receipts, one per result, signed and recorded (in the order of
    ``fin.results``), each with the result it says. The results came stamped with the
    host's facts (`runners.claim.authors`) and are judged by the health of their GPUs,
    read by the parent, as new values; each receipt's environment names the executor
    (and its job), ``ci`` (the job that ran the qualification), the GPUs' health, the
    devices the claim had to itself, ``facts`` (what the executor alone knows of this
    run: its wait for devices, the claims beside it, what quarantine did), the plans
    that defined the claim and the sandbox's self-tests."""
    assert fin.artifacts is not None
    environment = {"executor": fin.executor}
    if fin.job_id:
        environment["executor_job_id"] = fin.job_id
    environment.update(ci)
    # Judged by the parent's readings, never by what the claim says of itself.
    results, health = health_evidence(
        fin.results or [], fin.health, fin.artifacts, str(fin.run.index)
    )
    environment.update(health)
    if fin.devices:
        environment["executor_devices"] = ",".join(fin.devices)
    environment.update(facts or {})
    # Which plans defined the claim: the gate the base's, the workload the head's.
    environment.update(fin.run.sources)
    # The sandbox proved itself before the claim's code ran (`ledger.sandbox.proof`).
    environment.update(fin.sandbox_facts)
    recs = record_results(
        recorder, key, revision, results, fin.artifacts, environment, fin.gpu_uuids
    )
    return list(zip(recs, results, strict=True))
