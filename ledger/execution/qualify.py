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
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import git

from ledger.evidence.errors import InputError, UsageError
from ledger.evidence.keys import LocalKey
from ledger.execution import local_run
from ledger.execution.baseline import BaseRow
from ledger.execution.claimrun import ClaimRun
from ledger.execution.devices import Device as GpuDevice
from ledger.execution.devices import gpu_model, parse_gpus, visible_gpus
from ledger.identity import source as src
from ledger.identity.revision import Revision
from ledger.plans import governing
from ledger.plans.governing import Identity
from ledger.qualification.plan import PLAN_FILE, ClaimSpec, Plan
from ledger.qualification.workload_source import differences
from ledger.sandbox import Sandbox
from ledger.sandbox import resolve as resolve_sandbox
from ledger.write.record import Recorder

__all__ = ["QualifyRun", "qualify"]

Device = Literal["auto", "cpu", "cuda"]


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


def _recorded_outside() -> dict[str, str]:
    """Checks whose receipts come from outside qualify, and the command that records them."""
    from ledger.importers import CHECKS
    from ledger.write.run import CHECK

    return {**{c: "ledger import" for c in CHECKS}, CHECK: "ledger run"}


def _to_run(plan: Plan, claims: Sequence[str]) -> list[ClaimSpec]:
    """The plan claims this run will run (`_asked` checks them, once the runners are
    loaded): what the fork servers launched before that prepare for."""
    outside = _recorded_outside()
    return [c for c in plan.claims if (not claims or c.name in claims) and c.check not in outside]


def _asked(
    plan: Plan,
    claims: Sequence[str],
    known: Sequence[str],
    params_error: Callable[[str, dict[str, Any]], str | None],
) -> tuple[list[ClaimSpec], list[tuple[ClaimSpec, str]]]:
    """The plan claims to run, each checked before anything runs, and those left out
    because `ledger import` or `ledger run` records them (with that command): skipped
    from the whole plan, refused when asked for by name."""
    unknown = sorted(set(claims) - {c.name for c in plan.claims})
    if unknown:
        raise InputError(f"claims not in the plan: {', '.join(unknown)}")
    outside = _recorded_outside()
    asked, skipped = [], []
    for c in plan.claims:
        if claims and c.name not in claims:
            continue
        if c.check in outside:
            if claims:
                raise InputError(
                    f"plan claim {c.name}: check {c.check!r} is recorded by "
                    f"`{outside[c.check]}`, not run by qualify"
                )
            skipped.append((c, outside[c.check]))
            continue
        if c.check not in known:
            raise InputError(f"plan claim {c.name}: unknown check {c.check!r} ({', '.join(known)})")
        # A misspelt parameter would otherwise run the check with its default.
        bad = params_error(c.check, dict(c.params))
        if bad:
            raise InputError(f"plan claim {c.name}: {bad}")
        asked.append(c)
    return asked, skipped


def _scope_notes(claim: ClaimSpec, device: Device, gpus: Sequence[GpuDevice]) -> list[str]:
    """Why this run's receipt will not be at the scope the plan asks of ``claim``, said
    before it runs."""
    want = claim.scope
    notes = []
    cuda = device == "cuda" or (device == "auto" and bool(gpus))
    have = "cuda" if cuda else "cpu"
    kind = want.get("device_kind")
    if kind is not None and kind != have:
        why = "no GPU is visible" if have == "cpu" and device == "auto" else f"--device {device}"
        notes.append(f"its scope asks device_kind={kind}; this run is on {have} ({why})")
    model = want.get("gpu_model")
    names = {gpu_model(g) for g in gpus if g.uuid}
    if model is not None and cuda and names and model not in names:
        notes.append(f"its scope asks gpu_model={model}; this host has {', '.join(sorted(names))}")
    return notes


class _Say:
    """Progress lines from any thread, one at a time."""

    def __init__(self, progress: Callable[[str], None]) -> None:
        self.progress = progress
        self.lock = threading.Lock()

    def __call__(self, msg: str) -> None:
        with self.lock:
            self.progress(msg)


def _runs(
    run_plan: Plan,
    asked: Sequence[ClaimSpec],
    device: Device,
    profile: str | None,
    base_plan: Plan | None = None,
    sources: dict[str, str] | None = None,
    files: dict[str, str] | None = None,
) -> list[ClaimRun]:
    """The claims as runs: the workload definition `run_plan`'s (the head's), the base's
    arms built with `base_plan`'s (the base tree's) where it differs, and `sources`
    naming both plans in each receipt, with how the workload's parameters and its file
    (`files`, by entry point) differ between head and base."""
    from runners.api import needs_base

    out = []
    for i, c in enumerate(asked, 1):
        params = dict(c.params)
        base = needs_base(c.check)
        differs = (
            differences(base_plan, run_plan, base_plan.claim(c.name) or c)
            if base_plan is not None
            else []
        )
        if base and differs and "base_workload_params" not in params and base_plan is not None:
            # The base's arms run the base tree's model as the base's plan defines it: a
            # comparison of the head's definition with itself would test nothing.
            params["base_workload_params"] = dict(
                base_plan.workload_params_for(base_plan.claim(c.name) or c)
            )
        said = dict(sources or {})
        changed = [
            *differs,
            *([f] if (f := (files or {}).get(run_plan.workload_for(c) or "")) else []),
        ]
        if changed:
            said["workload_differs"] = "; ".join(changed)
        out.append(
            ClaimRun(
                index=i,
                claim=c.name,
                check=c.check,
                params=params,
                workload_ref=run_plan.workload_for(c) or "",
                workload_params=dict(run_plan.workload_params_for(c)),
                observer_off=c.observer_off,
                world_size=c.world_size,
                timeout_s=c.timeout_s,
                device=device,
                needs_base=base,
                profile=profile,
                network=c.network,
                sources=said,
            )
        )
    return out


def _definitions(
    repo: git.Repo, ident: Identity, gate: Plan, pr: int | None, plan_file: Path | None
) -> tuple[Plan, Plan | None, dict[str, str], list[str], dict[str, str]]:
    """The plan to run (the governing plan's claims with the head's workload definition),
    the base tree's definition for the base's arms, what each receipt names of both
    sources, notes where they differ, and which workload files differ between the base
    tree and the head (by entry point). With --plan FILE or --rev, the one plan."""
    from ledger.qualification.workload_source import workload_from

    if pr is None or plan_file is not None:
        return gate, None, {}, [], {}
    r = ident.revision
    head = _plan_in(repo, r.commit, "the PR's head")
    base_tree = _plan_in(repo, r.base, "the base tree") if r.base else None
    run_plan = workload_from(gate, head)
    base_plan = workload_from(gate, base_tree)
    plan_note = next((n for n in ident.notes if n.startswith("plan: ")), "plan: the base's")
    sources = {
        "plan_source": plan_note.removeprefix("plan: ")
        + ": claims, checks, parameters, thresholds, scopes",
        "workload_source": f"{PLAN_FILE} at head {r.commit}"
        + ("" if head is not None else " (none there: the base's)")
        + ": workload, workload_params, preload",
    }
    if r.base:
        sources["base_workload_source"] = f"{PLAN_FILE} at base tree {r.base}"
    notes = []
    for c in gate.claims:
        d = differences(base_plan, run_plan, c)
        if d:
            notes.append(
                f"{c.name}: the head's workload definition differs from the base's "
                f"({'; '.join(d)}): the head's is run, the base's arms run the base's"
            )
    files = {}
    if r.base:
        for ref in {run_plan.workload_for(c) or "" for c in run_plan.claims} - {""}:
            said = _file_differs(repo, r.base, r.commit, ref)
            if said is not None:
                files[ref] = said
    return run_plan, base_plan, sources, notes, files


def _file_differs(repo: git.Repo, base: str, head: str, ref: str) -> str | None:
    """How the file of entry point `ref` (`package.module:attr`) differs between the base
    tree and the head, or None (the same, or not a file of the repository: a library)."""
    mod = ref.split(":", 1)[0].replace(".", "/")
    for path in (f"{mod}.py", f"{mod}/__init__.py"):
        blobs: list[str | None] = []
        for commit in (base, head):
            try:
                blobs.append((repo.commit(commit).tree / path).hexsha)
            except KeyError:
                blobs.append(None)
        if blobs == [None, None]:
            continue
        if blobs[0] == blobs[1]:
            return None
        b, h = (x[:12] if x else "(none)" for x in blobs)
        return f"workload file {path}: {b} -> {h}"
    return None


def _plan_in(repo: git.Repo, commit: str, what: str) -> Plan | None:
    """The plan committed at `commit` (None: none there); one that does not read is the
    head's own definition broken: refused (exit 2), naming it."""
    try:
        return governing.plan_at(repo, commit, None)
    except UsageError as e:
        raise UsageError(f"{what}'s workload definition: {e.reason()}") from None


def qualify(
    recorder: Recorder | None,
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
        raise InputError(f"no {PLAN_FILE} at {ident.revision.commit[:12]}; pass --plan FILE")
    # What is judged comes from the head (its workload definition is code under test);
    # how it is judged, from the governing plan (`ledger.qualification.workload_source`).
    head_plan, base_plan, sources, differ, files = _definitions(repo, ident, plan, pr, plan_file)
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
    visible = visible_gpus()
    pool_devices = parse_gpus(gpus, visible) if gpus is not None else None
    # The first line comes before anything slow (torch, the fork server).
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
    with contextlib.ExitStack() as stack:
        # The trees and their fork servers first: the servers import torch and the
        # workload while this process imports the runners below.
        st = (
            stack.enter_context(
                local_run.started(repo, revision, run_plan, _to_run(run_plan, claims), box)
            )
            if box is not None
            else None
        )
        try:
            from runners.api import check_names, params_error
        except ImportError as e:
            raise UsageError(f"qualify needs the runners extra (torch): {e}") from None
        asked, skipped = _asked(run_plan, claims, check_names(), params_error)
        for c, fed in skipped:
            say(f"{c.name}: skipped ({c.check} receipts are recorded by `{fed}`, not by qualify)")
        runs = _runs(run_plan, asked, device, profile, base_plan, sources, files)
        for c, r in zip(asked, runs, strict=True):
            for note in _scope_notes(c, device, visible):
                say(f"[{r.index}/{len(runs)}] {c.name}: note: {note}: its receipt will not count")
        cuda = device == "cuda" or (device == "auto" and bool(visible))
        _conformance(run_plan, asked, st, box, cuda, say)
        done = QualifyRun([], revision, plan, ident.notes, tuple(c.name for c, _ in skipped))
        # The governing plan first: a reader without a checkout proves it from the
        # ledger alone, for every receipt this run records (here or on Ray workers).
        _record_plan(recorder, ident, say)
        try:
            if st is None:
                if baseline and pr is not None:
                    say("baseline: not run with --executor ray (a local run judges the base)")
                _run_on_ray(
                    repo,
                    revision,
                    run_plan,
                    runs,
                    ray_address,
                    server,
                    key_name,
                    sandbox,
                    say,
                    done,
                )
                return done
            assert recorder is not None and key is not None and box is not None
            local_run.run(st, runs, recorder, key, revision, pool_devices, box, say, done.receipts)
            if baseline and pr is not None:
                from ledger.execution.baseline import baseline as judge_base

                done.baseline = judge_base(
                    repo,
                    revision,
                    base_plan or run_plan,
                    runs,
                    done.receipts,
                    recorder,
                    key,
                    box,
                    pool_devices is not None,
                    say,
                )
        except KeyboardInterrupt:
            # Said once, after the claims' processes and the trees are gone.
            raise Interrupted(done.receipts, [r.claim for r in runs]) from None
        return done


PROBE_VAR = "LEDGER_QUALIFY_PROBE"
"""``1``: qualify probes the workload (`ledger doctor`'s probe) before the first claim;
``0``: it judges from the plan alone; unset: it probes when the run uses CUDA."""


def _conformance(
    plan: Plan,
    asked: Sequence[ClaimSpec],
    st: local_run.Started | None,
    box: Sandbox | None,
    cuda: bool,
    say: Callable[[str], None],
) -> None:
    """Before the first claim: the doctor's one-line summary, and a refusal (exit 2,
    nothing measured) when a required claim cannot be judged at all."""
    from ledger.conformance.plan_level import judge_from_plan
    from ledger.conformance.probe import cannot_judge, plan_claims, probe

    claims = plan_claims(plan, asked)
    if not claims:
        return
    want = os.environ.get(PROBE_VAR, "")
    if st is not None and box is not None and (want == "1" or (cuda and want != "0")):
        fork = st.servers.wait()[0]
        if fork is not None and local_run.unforkable(fork.ready):
            fork = None
        how = "forked from the fork server" if fork is not None else "in a fresh interpreter"
        say(f"doctor: probing the workload at a tiny shape on CPU before the first claim ({how})")
        report = probe(st.root, claims, box, fork, st.run_dir)
    else:
        report = judge_from_plan(claims)
    say(report["summary"])
    bad = {str(c["claim"]) for c in cannot_judge(report, required_only=True)}
    if bad:
        said = [ln for ln in report["lines"] if ln.split(":", 1)[0] in bad]
        raise UsageError(
            f"refused before any claim ran: {len(bad)} required claim(s) cannot be judged: "
            + "; ".join(said)
        )


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


def _run_on_ray(
    repo: git.Repo,
    revision: Revision,
    plan: Plan,
    runs: Sequence[ClaimRun],
    ray_address: str | None,
    server: str | None,
    key_name: str,
    sandbox: str,
    say: Callable[[str], None],
    done: QualifyRun,
) -> None:
    from ledger.execution.ray_executor import run_on_ray

    if server is None:
        raise UsageError("--executor ray records through a ledger server: give --server URL")
    spec = plan.package
    package = (
        {
            "paths": list(spec.paths),
            "lock": list(spec.lock),
            "distributions": list(spec.distributions),
        }
        if spec is not None
        else None
    )
    for row in run_on_ray(
        repo,
        revision,
        runs,
        address=ray_address,
        server=server,
        key_name=key_name,
        say=say,
        package=package,
        sandbox=sandbox,
        allowed_env=list(plan.runner.env),
        preload=list(plan.preload),
        quarantine_above=plan.quarantine_above,
    ):
        done.receipts.append(row)
