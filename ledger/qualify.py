"""`ledger qualify`: run a plan's checks on a revision and record one receipt each.

The revision is checked out into a temporary git worktree (removed
afterwards, also on Ctrl-C); the plan and the workload come from that
checkout. Each finished claim is signed and recorded at once, in its own
transaction, so an interruption leaves complete receipts or none. torch is
imported here lazily, through `runners`, and nowhere else in `ledger`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import git

from ledger import source as src
from ledger.errors import InputError, UsageError
from ledger.keys import LocalKey
from ledger.qualification.plan import PLAN_FILE, ClaimSpec, Plan
from ledger.record import Recorder, sign_and_record
from ledger.revision import Revision
from ledger.sandbox import Sandbox
from ledger.sandbox import resolve as resolve_sandbox
from ledger.source import Identity
from ledger.statement import ArtifactFile, Facts, build_statement, read_artifact, timestamp

if TYPE_CHECKING:
    from ledger.ingest import Recorded
    from runners.result import CheckResult

__all__ = ["QualifyRun", "qualify", "worktree"]

Device = Literal["auto", "cpu", "cuda"]


@contextlib.contextmanager
def worktree(repo: git.Repo, commit: str, label: str) -> Iterator[Path]:
    """A detached temporary worktree at `commit`, removed on the way out."""
    parent = Path(tempfile.mkdtemp(prefix=f"ledger-{label}-"))
    path = parent / "src"
    repo.git.worktree("add", "--detach", "--force", str(path), commit)
    try:
        yield path
    finally:
        with contextlib.suppress(git.GitCommandError):
            repo.git.worktree("remove", "--force", str(path))
        shutil.rmtree(parent, ignore_errors=True)
        with contextlib.suppress(git.GitCommandError):
            repo.git.worktree("prune")


def _prefixed(progress: Callable[[str], None], prefix: str) -> Callable[[str], None]:
    def say(msg: str) -> None:
        progress(prefix + msg)

    return say


@contextlib.contextmanager
def _removed(path: Path) -> Iterator[None]:
    try:
        yield
    finally:
        shutil.rmtree(path, ignore_errors=True)


@dataclass
class QualifyRun:
    receipts: list[tuple[str, str, str]]
    """(receipt id, claim, outcome) in the order they were recorded."""
    revision: Revision
    plan: Plan
    notes: tuple[str, ...] = ()

    def query(self) -> Identity:
        """The status question about what was just qualified."""
        return Identity(self.revision, self.plan, self.notes)


def _facts(r: CheckResult, inside: Path) -> tuple[Facts, list[ArtifactFile]]:
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
        gpu_uuids=r.gpu_uuids,
        started=timestamp(r.started_ns) if r.started_ns else None,
        finished=timestamp(r.finished_ns) if r.finished_ns else None,
    )
    return facts, files


def _recorded_outside() -> dict[str, str]:
    """Checks whose receipts come from outside qualify, and the command that records them."""
    from ledger.importers import CHECKS
    from ledger.run import CHECK

    return {**{c: "ledger import" for c in CHECKS}, CHECK: "ledger run"}


def _asked(
    plan: Plan,
    claims: Sequence[str],
    known: Sequence[str],
    params_error: Callable[[str, dict[str, Any]], str | None],
) -> list[ClaimSpec]:
    """The plan claims to run, each checked before anything runs. Claims whose
    receipts `ledger import` or `ledger run` record are not run here: left out of
    the whole plan, refused when asked for by name."""
    unknown = sorted(set(claims) - {c.name for c in plan.claims})
    if unknown:
        raise InputError(f"claims not in the plan: {', '.join(unknown)}")
    outside = _recorded_outside()
    asked = [c for c in plan.claims if c.name in claims or (not claims and c.check not in outside)]
    for c in asked:
        if c.check in outside:
            raise InputError(
                f"plan claim {c.name}: check {c.check!r} is recorded by `{outside[c.check]}`, "
                "not run by qualify"
            )
        if c.check not in known:
            raise InputError(f"plan claim {c.name}: unknown check {c.check!r} ({', '.join(known)})")
        # A misspelt parameter would otherwise run the check with its default.
        bad = params_error(c.check, dict(c.params))
        if bad:
            raise InputError(f"plan claim {c.name}: {bad}")
    return asked


def _record(
    recorder: Recorder,
    key: LocalKey,
    revision: Revision,
    results: Sequence[CheckResult],
    artifacts: Path,
) -> list[Recorded]:
    """One claim's receipts, signed and recorded together with their artifacts."""
    built = [_facts(r, artifacts) for r in results]
    stmts = [build_statement(revision.source(), f) for f, _ in built]
    files = [a for _, fs in built for a in fs]
    return sign_and_record(recorder, stmts, key, files if recorder.stores_artifacts else ())


def server_sandbox(
    box: Sandbox, run_dir: Path, code: Sequence[Path | None]
) -> Callable[[list[str], dict[str, str]], tuple[list[str], dict[str, str]]] | None:
    """How the fork server starts: inside the sandbox (it imports the pull request's
    modules, and the claim processes it forks inherit its sandbox), no network,
    writing only the run's folder."""
    if box.mode == "none":
        return None
    scratch = run_dir / "scratch"
    scratch.mkdir(exist_ok=True)
    policy = box.policy(
        writable=[run_dir], read_only=[c for c in code if c is not None], scratch=scratch
    )

    def wrap(argv: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
        return box.launch(policy, argv, env)

    return wrap


def qualify(
    recorder: Recorder,
    key: LocalKey,
    *,
    repo_path: Path | None,
    rev: str | None,
    pr: int | None,
    plan_file: Path | None,
    claims: Sequence[str],
    device: Device,
    progress: Callable[[str], None],
    offline: bool = False,
    base: str | None = None,
    profile: str | None = None,
    sandbox: str = "auto",
    secrets: Sequence[Path] = (),
) -> QualifyRun:
    """Run the plan's claims on the revision; each receipt is signed here, outside
    the sandbox that runs the pull request's code (``sandbox``: a mode of
    `ledger.sandbox`; ``secrets``: more paths to hide from it, e.g. the database)."""
    try:
        from runners.api import check_names, needs_base, params_error
        from runners.forkserver import serving
        from runners.harness.child import env as child_env
        from runners.isolated import run_claim_isolated
    except ImportError as e:
        raise UsageError(f"qualify needs the runners extra (torch): {e}") from None

    repo = src.open_repo(repo_path)
    ident = src.identify(
        repo, rev=rev, pr=pr, plan_file=plan_file, for_statement=True, offline=offline, base=base
    )
    plan = ident.plan
    if plan is None:
        raise InputError(f"no {PLAN_FILE} at {ident.revision.commit[:12]}; pass --plan FILE")
    # The profile sizes the run; status judges each receipt against the profile its
    # scope names, so the plan kept for the question stays the unprofiled one.
    run_plan = plan if profile is None else plan.with_profile(profile)
    # The checks run on a fresh worktree of the commit: clean by construction,
    # whatever state the caller's own work tree is in.
    revision = dataclasses.replace(ident.revision, dirty=False)
    asked = _asked(run_plan, claims, check_names(), params_error)
    # Before anything is checked out or measured: `auto` refuses rather than run the
    # pull request's code unsandboxed.
    box = resolve_sandbox(sandbox, allowed_env=plan.runner.env, hide=secrets)
    if box.mode == "none" and plan.runner.sandbox == "required":
        progress("warning: --sandbox none, and the plan requires a sandbox: no receipt will count")
    out: list[tuple[str, str, str]] = []
    base_ctx: contextlib.AbstractContextManager[Path | None] = contextlib.nullcontext(None)
    if (
        revision.base
        and revision.base != revision.commit
        and any(needs_base(c.check) for c in asked)
    ):
        base_ctx = worktree(repo, revision.base, "base")
    # The one folder the sandboxed processes may write: the artifacts, each claim's
    # request/result folder and scratch, the fork server's socket.
    run_dir = Path(tempfile.mkdtemp(prefix="ledger-run-"))
    artifacts = run_dir / "artifacts"
    artifacts.mkdir()
    # Imports paid once: claims fork from a server that preloaded torch, the checks and
    # the workloads' modules (no CUDA there); each claim is still a new process.
    refs = sorted({plan.workload_for(c) or "" for c in asked} - {""})
    with (
        worktree(repo, revision.commit, "rev") as root,
        base_ctx as base_root,
        _removed(run_dir),
        serving(
            [(str(root), r) for r in refs],
            child_env(),
            wrap=server_sandbox(box, run_dir, [root, base_root]),
            sock_dir=run_dir,
        ) as fork,
    ):
        if fork is not None:
            progress(f"fork server: torch and {len(refs)} workload module(s) imported once")
        for i, claim in enumerate(asked, 1):
            t0 = time.monotonic()
            tag = f"[{i}/{len(asked)}]"
            ranks = f", {claim.world_size} ranks" if claim.world_size > 1 else ""
            progress(f"{tag} {claim.name} ({claim.check}{ranks}) ...")
            results = run_claim_isolated(
                claim=claim.name,
                check=claim.check,
                params=dict(claim.params),
                repo_root=root,
                workload_ref=plan.workload_for(claim) or "",
                workload_params=dict(run_plan.workload_params_for(claim)),
                device=device,
                observer_off_required=claim.observer_off,
                base_root=base_root,
                progress=_prefixed(progress, tag + "  "),
                artifact_dir=artifacts,
                # All ranks of the claim are one process group, killed on the timeout.
                world_size=claim.world_size,
                timeout_s=claim.timeout_s,
                # The fork server has no network: a claim that needs one starts afresh.
                fork_server=None if claim.network else fork,
                sandbox=None if box.mode == "none" else box,
                network=claim.network,
                work_root=run_dir,
            )
            for r in results:
                # Set here, after the child: what it says about itself does not count.
                r.scope["sandbox"] = box.facet
                r.scope["network"] = "on" if claim.network else "off"
                if profile is not None:
                    r.scope["profile"] = profile
            recs = _record(recorder, key, revision, results, artifacts)
            for rec, r in zip(recs, results, strict=True):
                out.append((rec.id, r.claim, r.outcome))
                note = "" if r.outcome == "passed" else f": {r.reason}"
                progress(
                    f"{tag} {r.claim} {r.outcome}{note} "
                    f"({time.monotonic() - t0:.1f} s) -> {rec.id[:19]}"
                )
    return QualifyRun(out, revision, plan, ident.notes)
