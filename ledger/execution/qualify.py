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
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import git

from ledger.evidence.errors import UsageError
from ledger.evidence.keys import LocalKey
from ledger.execution import local_run, preflight
from ledger.execution.baseline import BaseRow
from ledger.execution.claimrun import ClaimRun
from ledger.execution.claims import Device, asked_claims, scope_notes, to_run
from ledger.execution.definitions import claim_runs, definitions
from ledger.execution.devices import Device as GpuDevice
from ledger.execution.devices import parse_gpus, visible_gpus
from ledger.identity import source as src
from ledger.identity.revision import Revision
from ledger.plans import governing
from ledger.plans.governing import Identity
from ledger.qualification.plan import PLAN_FILE, ClaimSpec, Plan
from ledger.read.handle import OpenLedger
from ledger.sandbox import Sandbox
from ledger.sandbox import resolve as resolve_sandbox
from ledger.write.record import Recorder

__all__ = ["QualifyRun", "qualify"]


@dataclass
class QualifyRun:
    receipts: list[tuple[str, str, str]]
    """(receipt id, claim, outcome) in the order they were recorded."""
    revision: Revision
    plan: Plan
    notes: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()
    """Plan claims asked for that another command feeds (`ledger import`, `ledger run`)."""
    baseline: list[BaseRow] = dataclasses.field(default_factory=list)
    """The base commit's receipts the head's blockers were set beside (reused or run)."""
    not_here: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    """(claim, why) for each claim this host cannot run as asked (more ranks than devices
    handed): decided before it started, nothing recorded, never run on the base either."""

    def query(self) -> Identity:
        """The status question about what was just qualified."""
        return Identity(self.revision, self.plan, self.notes)


class Interrupted(KeyboardInterrupt):
    """Ctrl-C while claims ran: every claim process was stopped and the trees
    removed; what had been recorded stays recorded (each receipt is whole)."""

    def __init__(self, recorded: Sequence[tuple[str, str, str]], asked: Sequence[str]) -> None:
        super().__init__()
        self.recorded = list(recorded)
        done = {claim for _, claim, _ in self.recorded}
        self.not_recorded = [c for c in dict.fromkeys(asked) if c not in done]

    def line(self) -> str:
        """`aborted; recorded: sha256:… (claim), …; not recorded: claim, …` (one line)."""
        rec = ", ".join(f"{rid[:19]}… ({claim})" for rid, claim, _ in self.recorded)
        return f"aborted; recorded: {rec or 'none'}; not recorded: " + (
            ", ".join(self.not_recorded) or "none"
        )


class _Say:
    """Progress lines from any thread, one at a time."""

    def __init__(self, progress: Callable[[str], None]) -> None:
        self.progress = progress
        self.lock = threading.Lock()

    def __call__(self, msg: str) -> None:
        with self.lock:
            self.progress(msg)


def qualify(
    ledger: OpenLedger | None,
    key: LocalKey | None,
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
    gpus: str | None = None,
    executor: str = "local",
    ray_address: str | None = None,
    server: str | None = None,
    key_name: str = "runner",
    baseline: bool = True,
) -> QualifyRun:
    """Run the plan's claims on the revision; each receipt is signed outside the sandbox
    that runs the pull request's code (``sandbox``: a mode of `ledger.sandbox`;
    ``secrets``: more paths to hide from it, e.g. the database).

    ``gpus`` (``all`` or ``0,1,...``) runs claims side by side, each on devices of its
    own; without it claims run one after another on the default device.
    ``executor="ray"`` hands each claim to the Ray cluster at ``ray_address``: workers
    sign with their own key ``key_name`` and record through ``server``.

    ``baseline``: a PR's claims that fail or are inconclusive on its head are judged
    on the commit it branched from too (`ledger.execution.baseline`), locally."""
    say = _Say(progress)
    p = _prepared(
        repo_path, rev, pr, plan_file, device, executor, offline, base, sandbox, secrets, profile
    )
    visible = visible_gpus()
    pool_devices = parse_gpus(gpus, visible) if gpus is not None else None
    _announce(say, pr, p.ident, p.plan, p.box, sandbox, p.differ)
    with contextlib.ExitStack() as stack:
        st = _started(stack, p, claims)
        asked, skipped = _checked(p.run_plan, claims, say)
        runs = _claim_runs(p, asked, device, profile, visible, say)
        cuda = device == "cuda" or (device == "auto" and bool(visible))
        # Judged from the plan at once, or probed beside the first claims: nothing is
        # recorded before it has judged (`ledger.execution.preflight`).
        gate = preflight.start(p.run_plan, asked, st, p.box, cuda, say)
        done = QualifyRun([], p.revision, p.plan, p.ident.notes, tuple(c.name for c, _ in skipped))
        # The governing plan first: a reader without a checkout proves it from the
        # ledger alone, for every receipt this run records (here or on Ray workers).
        _record_plan(ledger.recorder if ledger else None, p.ident, say)
        try:
            if st is None:
                if baseline and pr is not None:
                    say("baseline: not run with --executor ray (a local run judges the base)")
                _on_ray(p, runs, done, ray_address, server, key_name, sandbox, say)
                return done
            box = p.box
            assert ledger is not None and key is not None and box is not None
            done.not_here = local_run.run(
                st, runs, ledger, key, p.revision, pool_devices, box, say, done.receipts, gate
            )
            gate()  # a refusal stands where no claim finished to meet it
            if baseline and pr is not None:
                judged = p.base_plan or p.run_plan
                done.baseline = _judge_base(
                    p.repo, judged, runs, done, ledger, key, box, pool_devices is not None, say
                )
        except KeyboardInterrupt:
            # Said once, after the claims' processes and the trees are gone.
            raise Interrupted(done.receipts, [r.claim for r in runs]) from None
        return done


def _started(
    stack: contextlib.ExitStack[Any], p: _Prepared, claims: Sequence[str]
) -> local_run.Started | None:
    """The trees and their fork servers first (a local run): the servers import torch
    and the workload while this process imports the runners."""
    if p.box is None:
        return None
    planned = to_run(p.run_plan, claims)
    return stack.enter_context(
        local_run.started(p.repo, p.revision, p.run_plan, planned, p.box, p.base_plan)
    )


def _claim_runs(
    p: _Prepared,
    asked: Sequence[ClaimSpec],
    device: Device,
    profile: str | None,
    visible: Sequence[GpuDevice],
    say: Callable[[str], None],
) -> list[ClaimRun]:
    """The asked claims as runs, each said where its receipt will not be at the scope
    the plan asks."""
    runs = claim_runs(p.run_plan, asked, device, profile, p.base_plan, p.sources, p.files)
    for c, r in zip(asked, runs, strict=True):
        for note in scope_notes(c, device, visible):
            say(f"[{r.index}/{len(runs)}] {c.name}: note: {note}: its receipt will not count")
    return runs


def _on_ray(
    p: _Prepared,
    runs: Sequence[ClaimRun],
    done: QualifyRun,
    ray_address: str | None,
    server: str | None,
    key_name: str,
    sandbox: str,
    say: Callable[[str], None],
) -> None:
    """The claims handed to the Ray cluster (`ledger.execution.ray_executor`)."""
    from ledger.execution.ray_executor import run_plan_on_ray

    run_plan_on_ray(
        p.repo,
        p.revision,
        p.run_plan,
        runs,
        ray_address,
        server,
        key_name,
        sandbox,
        say,
        done.receipts,
    )


def _checked(
    run_plan: Plan, claims: Sequence[str], say: Callable[[str], None]
) -> tuple[list[ClaimSpec], list[tuple[ClaimSpec, str]]]:
    """The runners loaded (torch) and the claims asked for checked against their
    checks; those another command records said skipped."""
    try:
        from runners.api import check_names, params_error
    except ImportError as e:
        raise UsageError(f"qualify needs the runners extra (torch): {e}") from None
    asked, skipped = asked_claims(run_plan, claims, check_names(), params_error)
    for c, fed in skipped:
        say(f"{c.name}: skipped ({c.check} receipts are recorded by `{fed}`, not by qualify)")
    return asked, skipped


def _judge_base(
    repo: git.Repo,
    plan: Plan,
    runs: Sequence[ClaimRun],
    done: QualifyRun,
    ledger: OpenLedger,
    key: LocalKey,
    box: Sandbox,
    pool: bool,
    say: Callable[[str], None],
) -> list[BaseRow]:
    """The head's failing or inconclusive claims judged on the commit the PR branched
    from (`ledger.execution.baseline`), on the same devices."""
    from ledger.execution.baseline import baseline as judge_base

    return judge_base(repo, done.revision, plan, runs, done.receipts, ledger, key, box, pool, say)


@dataclass(frozen=True)
class _Prepared:
    """What a run qualifies and with which definitions, decided before anything runs."""

    repo: git.Repo
    ident: Identity
    plan: Plan
    """The governing plan, unprofiled: the one the status question keeps."""
    run_plan: Plan
    """The head's workload definition under the governing plan's claims, profiled."""
    base_plan: Plan | None
    sources: dict[str, str]
    differ: list[str]
    files: dict[str, str]
    box: Sandbox | None
    revision: Revision


def _prepared(
    repo_path: Path | None,
    rev: str | None,
    pr: int | None,
    plan_file: Path | None,
    device: Device,
    executor: str,
    offline: bool,
    base: str | None,
    sandbox: str,
    secrets: Sequence[Path],
    profile: str | None,
) -> _Prepared:
    """What is qualified, the plan that governs it, the workload definitions and the
    sandbox; refused before anything runs where the host or the plan cannot serve."""
    if device == "cuda" and executor == "local" and not visible_gpus():
        # Known before anything runs: refused here rather than signed and recorded
        # as infra-error receipts that measured nothing.
        raise UsageError(
            "--device cuda: this host has no CUDA device (NVML sees no GPU); "
            "use --device cpu or --device auto"
        )
    repo = src.open_repo(repo_path)
    ident = governing.identify(
        repo, rev=rev, pr=pr, plan_file=plan_file, for_statement=True, offline=offline, base=base
    )
    plan = ident.plan
    if plan is None:
        raise UsageError(f"no {PLAN_FILE} at {ident.revision.commit[:12]}; pass --plan FILE")
    # What is judged comes from the head (its workload definition is code under test);
    # how it is judged, from the governing plan (`ledger.qualification.workload_source`).
    head_plan, base_plan, sources, differ, files = definitions(repo, ident, plan, pr, plan_file)
    # Before anything is checked out or measured: `auto` refuses rather than run the
    # pull request's code unsandboxed (with Ray, each worker resolves it where it runs).
    box = (
        resolve_sandbox(sandbox, allowed_env=plan.runner.env, hide=secrets)
        if executor == "local"
        else None
    )
    # The profile sizes the run; status judges each receipt against the profile its
    # scope names, so the plan kept for the question stays the unprofiled one.
    run_plan = head_plan if profile is None else head_plan.with_profile(profile)
    if base_plan is not None and profile is not None:
        base_plan = base_plan.with_profile(profile)
    # The checks run on a fresh worktree of the commit: clean by construction,
    # whatever state the caller's own work tree is in.
    revision = dataclasses.replace(ident.revision, dirty=False)
    return _Prepared(repo, ident, plan, run_plan, base_plan, sources, differ, files, box, revision)


def _announce(
    say: Callable[[str], None],
    pr: int | None,
    ident: Identity,
    plan: Plan,
    box: Sandbox | None,
    sandbox: str,
    differ: Sequence[str],
) -> None:
    """The run's first lines, before anything slow (torch, the fork server): what is
    qualified, where the head's workload definition differs, a sandbox the plan lacks."""
    what = f"PR #{pr} head" if pr is not None else "revision"
    say(
        f"qualify: {what} {ident.revision.commit[:12]} of {ident.revision.repo}: "
        f"{len(plan.claims)} claim(s) in the plan; "
        + (
            "starting the fork server (torch and the workload, imported once) "
            "while loading the runners (torch)"
            if box is not None
            else "loading the runners (torch)"
        )
    )
    for note in differ:
        say(f"note: {note}")
    if ((box is None and sandbox == "none") or (box is not None and box.mode == "none")) and (
        plan.runner.sandbox == "required"
    ):
        say("warning: --sandbox none, and the plan requires a sandbox: no receipt will count")


def _record_plan(recorder: Recorder | None, ident: Identity, say: Callable[[str], None]) -> None:
    """The governing plan into a local ledger the receipts go to. Through a server nothing
    is sent: which plan governs is said there by the base branch's job (a `plans` token)
    or the ledger's host, never by a runner token running the pull request's code."""
    from ledger.evidence.errors import Error
    from ledger.write.record import record_governing

    if recorder is None:
        return
    try:
        record_governing(recorder, ident)
    except Error as e:
        say(f"note: the governing plan was not recorded at {recorder.where}: {e.reason()}")
