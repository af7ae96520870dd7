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
import json
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import git

from ledger import source as src
from ledger.errors import InputError, UsageError
from ledger.execution.claimrun import ClaimRun, Finished
from ledger.execution.devices import Device as GpuDevice
from ledger.execution.devices import DevicePool, gpu_model, parse_gpus, visible_gpus
from ledger.execution.local import LocalExecutor
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

__all__ = ["QualifyRun", "qualify", "record_results", "worktree"]

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
    skipped: tuple[str, ...] = ()
    """Plan claims asked for that another command feeds (`ledger import`, `ledger run`)."""

    def query(self) -> Identity:
        """The status question about what was just qualified."""
        return Identity(self.revision, self.plan, self.notes)


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


def _runs(
    run_plan: Plan, asked: Sequence[ClaimSpec], device: Device, profile: str | None
) -> list[ClaimRun]:
    from runners.api import needs_base

    return [
        ClaimRun(
            index=i,
            claim=c.name,
            check=c.check,
            params=dict(c.params),
            workload_ref=run_plan.workload_for(c) or "",
            workload_params=dict(run_plan.workload_params_for(c)),
            observer_off=c.observer_off,
            world_size=c.world_size,
            timeout_s=c.timeout_s,
            device=device,
            needs_base=needs_base(c.check),
            profile=profile,
            network=c.network,
        )
        for i, c in enumerate(asked, 1)
    ]


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
) -> QualifyRun:
    """Run the plan's claims on the revision; each receipt is signed outside the sandbox
    that runs the pull request's code (``sandbox``: a mode of `ledger.sandbox`;
    ``secrets``: more paths to hide from it, e.g. the database).

    ``gpus`` (``all`` or ``0,1,...``) runs claims side by side, each on devices of its
    own; without it claims run one after another on the default device.
    ``executor="ray"`` hands each claim to the Ray cluster at ``ray_address``: workers
    sign with their own key ``key_name`` and record through ``server``."""
    say = _Say(progress)
    repo = src.open_repo(repo_path)
    ident = src.identify(
        repo, rev=rev, pr=pr, plan_file=plan_file, for_statement=True, offline=offline, base=base
    )
    plan = ident.plan
    if plan is None:
        raise InputError(f"no {PLAN_FILE} at {ident.revision.commit[:12]}; pass --plan FILE")
    # Before anything is checked out or measured: `auto` refuses rather than run the
    # pull request's code unsandboxed (with Ray, each worker resolves it where it runs).
    box = (
        resolve_sandbox(sandbox, allowed_env=plan.runner.env, hide=secrets)
        if executor == "local"
        else None
    )
    # The first line comes before anything slow (torch, the fork server).
    what = f"PR #{pr} head" if pr is not None else "revision"
    say(
        f"qualify: {what} {ident.revision.commit[:12]} of {ident.revision.repo}: "
        f"{len(plan.claims)} claim(s) in the plan; loading the runners (torch)"
    )
    if ((box is None and sandbox == "none") or (box is not None and box.mode == "none")) and (
        plan.runner.sandbox == "required"
    ):
        say("warning: --sandbox none, and the plan requires a sandbox: no receipt will count")
    try:
        from runners.api import check_names, params_error
    except ImportError as e:
        raise UsageError(f"qualify needs the runners extra (torch): {e}") from None
    # The profile sizes the run; status judges each receipt against the profile its
    # scope names, so the plan kept for the question stays the unprofiled one.
    run_plan = plan if profile is None else plan.with_profile(profile)
    # The checks run on a fresh worktree of the commit: clean by construction,
    # whatever state the caller's own work tree is in.
    revision = dataclasses.replace(ident.revision, dirty=False)
    asked, skipped = _asked(run_plan, claims, check_names(), params_error)
    for c, fed in skipped:
        say(f"{c.name}: skipped ({c.check} receipts are recorded by `{fed}`, not by qualify)")
    visible = visible_gpus()
    pool_devices = parse_gpus(gpus, visible) if gpus is not None else None
    runs = _runs(run_plan, asked, device, profile)
    for c, r in zip(asked, runs, strict=True):
        for note in _scope_notes(c, device, visible):
            say(f"[{r.index}/{len(runs)}] {c.name}: note: {note}: its receipt will not count")
    done = QualifyRun([], revision, plan, ident.notes, tuple(c.name for c, _ in skipped))
    if executor == "ray":
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
        ):
            done.receipts.append(row)
        return done
    assert recorder is not None and key is not None and box is not None
    _run_local(repo, revision, run_plan, runs, recorder, key, pool_devices, box, say, done)
    return done


class _Say:
    """Progress lines from any thread, one at a time."""

    def __init__(self, progress: Callable[[str], None]) -> None:
        self.progress = progress
        self.lock = threading.Lock()

    def __call__(self, msg: str) -> None:
        with self.lock:
            self.progress(msg)


def _fork_preload(
    root: Path, run_plan: Plan, runs: Sequence[ClaimRun], roots_refs: Sequence[str]
) -> dict[str, Any]:
    """What the revision's fork server imports and prepares before the first claim."""
    from runners.preload import recorded_modules

    refs = sorted(set(roots_refs) - {""})
    prepare = {
        (r.workload_ref, json.dumps(r.workload_params, sort_keys=True)): r
        for r in runs
        if r.workload_ref
    }
    return {
        "preload": [(str(root), ref) for ref in refs],
        "modules": [*run_plan.preload, *recorded_modules(refs)],
        "prepare": [(str(root), r.workload_ref, r.workload_params) for r in prepare.values()],
    }


def _run_local(
    repo: git.Repo,
    revision: Revision,
    run_plan: Plan,
    runs: Sequence[ClaimRun],
    recorder: Recorder,
    key: LocalKey,
    devices: Sequence[GpuDevice] | None,
    box: Sandbox,
    say: Callable[[str], None],
    done: QualifyRun,
) -> None:
    from runners.forkserver import Spec, serving_all
    from runners.harness.child import env as child_env
    from runners.preload import learned, remember_modules

    base_ctx: contextlib.AbstractContextManager[Path | None] = contextlib.nullcontext(None)
    if revision.base and revision.base != revision.commit and any(r.needs_base for r in runs):
        base_ctx = worktree(repo, revision.base, "base")
    # The one folder the sandboxed processes may write: the artifacts, each claim's
    # request/result folder and scratch, the fork servers' sockets.
    run_dir = Path(tempfile.mkdtemp(prefix="ledger-run-"))
    artifacts = run_dir / "artifacts"
    artifacts.mkdir()
    explicit = devices is not None
    pool = DevicePool(devices if devices is not None else [GpuDevice("default")])
    n = len(runs)
    say(
        f"{n} claim(s)"
        + (f" on {pool.size} device(s) side by side" if explicit and pool.size > 1 else "")
        + "; starting the fork server (imports torch and the workload once)"
    )
    with (
        worktree(repo, revision.commit, "rev") as root,
        base_ctx as base_root,
        _removed(run_dir),
    ):
        pre = _fork_preload(root, run_plan, runs, [r.workload_ref for r in runs])
        env = child_env()
        wrap = server_sandbox(box, run_dir, [root, base_root])
        base_pre = [(str(base_root), r.workload_ref) for r in runs if r.needs_base and base_root]
        specs = [Spec(pre["preload"], pre["modules"], pre["prepare"])]
        if base_pre and base_root is not None:
            # The base tree's arms reuse a model built once, like the head's.
            prepare = [
                (str(base_root), r.workload_ref, r.workload_params)
                for r in runs
                if r.needs_base and r.workload_ref
            ]
            specs.append(Spec(sorted(set(base_pre)), pre["modules"], prepare))
        with serving_all(specs, env, wrap=wrap, sock_dir=run_dir) as servers:
            fork = servers[0]
            base_fork = servers[1] if len(servers) > 1 else None
            if fork is not None:
                r = fork.ready
                extra = (
                    f", {len(r.get('prepared', []))} workload(s) prepared"
                    if r.get("prepared")
                    else ""
                )
                say(
                    f"fork server: torch, {len(r['preloaded'])} workload module(s) and "
                    f"{len(r.get('modules', []))} more module(s) imported once{extra} "
                    f"({r['seconds']:.1f} s)"
                )
            sockets = {str(root): str(fork.sock)} if fork is not None else {}
            if base_fork is not None and base_root is not None:
                sockets[str(base_root)] = str(base_fork.sock)
            ex = LocalExecutor(
                root=root,
                base_root=base_root,
                artifacts=artifacts,
                fork=fork,
                progress_for=lambda run: _prefixed(say, f"{_tag(run, n)}  "),
                fork_servers=sockets or None,
                slots=pool.size,
                sandbox=None if box.mode == "none" else box,
                work_root=run_dir,
            )
            try:
                _schedule(ex, pool, explicit, runs, recorder, key, revision, say, done)
            finally:
                ex.close()
            # What the claims imported beyond the preloads: the next run's server has it.
            remember_modules([r.workload_ref for r in runs], learned())


def _tag(run: ClaimRun, n: int) -> str:
    return f"[{run.index}/{n}]"


def _schedule(
    ex: LocalExecutor,
    pool: DevicePool,
    explicit: bool,
    runs: Sequence[ClaimRun],
    recorder: Recorder,
    key: LocalKey,
    revision: Revision,
    say: Callable[[str], None],
    done: QualifyRun,
) -> None:
    """Start each claim as soon as devices of its own are free (plan order, a later
    claim may pass one that waits for more devices); record each as it finishes."""
    import concurrent.futures as cf

    n = len(runs)
    pending: list[ClaimRun] = []
    for run in runs:
        if explicit and run.gpus > pool.size:
            say(
                f"{_tag(run, n)} {run.claim}: not run: it needs {run.gpus} devices of its own "
                f"and --gpus gives {pool.size}"
            )
        else:
            pending.append(run)
    running: dict[cf.Future[Finished], tuple[ClaimRun, list[GpuDevice], float]] = {}

    def side_by_side() -> None:
        if explicit and len(running) > 1:
            now = time.monotonic()
            cells = [
                f"{_tag(r, n)} {r.claim} ({', '.join(d.label for d in ds)}, {now - t:.0f} s)"
                for r, ds, t in sorted(running.values(), key=lambda x: x[0].index)
            ]
            say("running: " + " | ".join(cells))

    try:
        while pending or running:
            for run in list(pending):
                got = pool.take(run.gpus if explicit else 1)
                if got is None:
                    continue
                pending.remove(run)
                ranks = f", {run.world_size} ranks" if run.world_size > 1 else ""
                where = f" on {', '.join(d.label for d in got)}" if explicit else ""
                say(f"{_tag(run, n)} {run.claim} ({run.check}{ranks}){where} ...")
                running[ex.submit(run, got, explicit)] = (run, got, time.monotonic())
                side_by_side()
            finished, _ = cf.wait(list(running), timeout=0.25, return_when=cf.FIRST_COMPLETED)
            for fut in finished:
                run, got, t0 = running.pop(fut)
                pool.give_back(got)
                _finished(fut, run, t0, n, recorder, key, revision, say, done)
            if finished:
                side_by_side()
    except BaseException:
        # Ctrl-C (or any failure here): every running claim's processes are stopped
        # before the worktrees go.
        ex.cancel.set()
        cf.wait(list(running))
        raise


def _finished(
    fut: Any,
    run: ClaimRun,
    t0: float,
    n: int,
    recorder: Recorder,
    key: LocalKey,
    revision: Revision,
    say: Callable[[str], None],
    done: QualifyRun,
) -> None:
    tag = _tag(run, n)
    try:
        fin: Finished = fut.result()
    except Exception as e:  # one claim's failure must not stop the others
        say(f"{tag} {run.claim}: not recorded: the runner failed: {type(e).__name__}: {e}")
        return
    results = fin.results or []
    for r in results:
        # Set here, after the child: what it says about itself does not count.
        r.scope["sandbox"] = fin.sandbox
        r.scope["network"] = "on" if run.network else "off"
        if run.profile is not None:
            r.scope["profile"] = run.profile
    environment = {"executor": fin.executor}
    if fin.devices:
        environment["executor_devices"] = ",".join(fin.devices)
    assert fin.artifacts is not None
    recs = record_results(
        recorder, key, revision, results, fin.artifacts, environment, fin.gpu_uuids
    )
    for rec, r in zip(recs, results, strict=True):
        done.receipts.append((rec.id, r.claim, r.outcome))
        note = "" if r.outcome == "passed" else f": {r.reason}"
        say(f"{tag} {r.claim} {r.outcome}{note} ({time.monotonic() - t0:.1f} s) -> {rec.id[:19]}")
