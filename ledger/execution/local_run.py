"""`ledger qualify` on this host: the revision's trees and fork servers, then its
claims side by side, each on devices of its own.

`started` checks the trees out and launches their fork servers before the
caller imports torch (the runners' catalog): the servers' imports and the
caller's run at the same time instead of one after the other. `run` waits for
the servers when the first claim needs them, starts each claim as soon as
devices of its own are free, and records each as it finishes.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import git

from ledger.evidence.keys import LocalKey
from ledger.execution import calibrations, sharing
from ledger.execution.claimrun import ClaimRun, Finished
from ledger.execution.devices import Device as GpuDevice
from ledger.execution.devices import DevicePool, visible_gpus
from ledger.execution.gate import Gate
from ledger.execution.local import LocalExecutor
from ledger.execution.receipts import record_finished
from ledger.execution.scheduler import claim_tag, schedule
from ledger.execution.trees import removed, worktree
from ledger.fleet.ci import ci_job
from ledger.fleet.dcgm import diagnose
from ledger.fleet.quarantine import bound, skip_quarantined
from ledger.identity.revision import Revision
from ledger.qualification.plan import ClaimSpec, Plan
from ledger.read.handle import OpenLedger
from ledger.sandbox import Sandbox
from ledger.write.record import Recorder

if TYPE_CHECKING:
    from runners.fork.forkparent import ForkServer, Launched, Spec
    from runners.fork.forkready import Ready

__all__ = ["Started", "base_spec", "run", "server_sandbox", "started"]

Recorded = list[tuple[str, str, str]]
"""(receipt id, claim, outcome) of each receipt recorded, in order."""


def server_sandbox(
    box: Sandbox, run_dir: Path, code: Sequence[Path | None], calibration: Path | None = None
) -> Callable[[list[str], dict[str, str]], tuple[list[str], dict[str, str]]] | None:
    """How the fork server starts: inside the sandbox (it imports the pull request's
    modules, and the claim processes it forks inherit its sandbox), no network,
    writing only the run's folder; ``calibration``, a folder in it, is where the
    built-in estimator keeps its fits (`ledger.execution.calibrations`)."""
    if box.mode == "none":
        return None
    scratch = run_dir / "scratch"
    scratch.mkdir(exist_ok=True)
    policy = box.policy(
        writable=[run_dir], read_only=[c for c in code if c is not None], scratch=scratch
    )
    if calibration is not None:
        # The sandbox passes no LEDGER_* variable of its own accord: this one names a
        # folder of the run's, not the host's.
        policy = policy.with_(env=(*policy.env, (calibrations.CACHE_VAR, str(calibration))))

    def wrap(argv: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
        return box.launch(policy, argv, env)

    return wrap


def server_confine(box: Sandbox, run_dir: Path) -> dict[str, Any]:
    """What a sandboxed fork server holds each claim process it forks to: the only writer
    of its own folder of ``run_dir``'s (`runners.fork.confine`), and, where the sandbox has
    a pids cgroup of its own to divide, counted in a pids cgroup of the claim's own or
    running none of its code (`runners.fork.forkserver._held`)."""
    return {"run_dir": str(run_dir), "claim_pids": box.base.pids_max is not None}


@dataclass
class Started:
    """The run's trees and its fork servers (launched, maybe still importing)."""

    root: Path
    """The revision's worktree."""
    base_root: Path | None
    """The base revision's, where a claim compares against it."""
    run_dir: Path
    """The one folder the sandboxed processes may write: the artifacts, each claim's
    request/result folder and scratch, the fork servers' sockets."""
    servers: Launched
    """The head tree's server, then the base tree's (where there is a base tree)."""
    quarantine_above: float | None = None
    """The plan's quarantine bound (`ledger.fleet.quarantine`); the runner's setting,
    where it has one, comes first."""

    @property
    def artifacts(self) -> Path:
        return self.run_dir / "artifacts"


def _refs(plan: Plan, claims: Sequence[ClaimSpec]) -> list[str]:
    """The workload entry points ``claims`` run."""
    return sorted({plan.workload_for(c) or "" for c in claims} - {""})


def _spec(root: Path, plan: Plan, claims: Sequence[ClaimSpec], modules: Sequence[str]) -> Spec:
    """What ``root``'s fork server imports and prepares before the first claim: each
    workload's module, and each workload (with its parameters) built and prepared once."""
    from runners.contract.names import SETUPS_PER_CLAIM
    from runners.fork.forkparent import Spec

    workloads = [
        (plan.workload_for(c) or "", plan.workload_params_for(c))
        for c in claims
        for _ in range(SETUPS_PER_CLAIM.get(c.check, 1))
    ]
    return Spec.of(root, workloads, modules)


def base_spec(
    base: Path,
    plan: Plan,
    base_plan: Plan | None,
    claims: Sequence[ClaimSpec],
    modules: Sequence[str],
) -> Spec:
    """What the base tree's fork server prepares for ``claims``: the workloads their base
    arms run, as the base's own definition (``base_plan``) gives them, which is what the
    arms load (`ledger.execution.definitions.claim_runs` hands them the base's
    parameters); ``plan``'s where the base tree has none."""
    theirs = base_plan or plan
    return _spec(base, theirs, [theirs.claim(c.name) or c for c in claims], modules)


@contextlib.contextmanager
def started(
    repo: git.Repo,
    revision: Revision,
    plan: Plan,
    claims: Sequence[ClaimSpec],
    box: Sandbox,
    base_plan: Plan | None = None,
) -> Iterator[Started]:
    """Check out the revision (and its base, when a claim needs it) and launch their
    fork servers; on the way out, the servers stopped and the trees removed. Imports
    no torch: the caller imports it while the servers do. The base tree's server
    prepares the workloads as ``base_plan`` (the base tree's definition) defines them,
    which its arms run; without one, as ``plan`` does."""
    from runners.contract.childenv import env
    from runners.contract.names import NEEDS_BASE
    from runners.fork.forkparent import Launched
    from runners.fork.preload import recorded_modules

    on_base = [c for c in claims if c.check in NEEDS_BASE]
    base_ctx: contextlib.AbstractContextManager[Path | None] = contextlib.nullcontext(None)
    if revision.base and revision.base != revision.commit and on_base:
        base_ctx = worktree(repo, revision.base, "base")
    run_dir = Path(tempfile.mkdtemp(prefix="ledger-run-"))
    with removed(run_dir), worktree(repo, revision.commit, "rev") as root, base_ctx as base:
        (run_dir / "artifacts").mkdir()
        # What earlier runs of this very tree learned: another tree's claims never
        # choose what this server imports (`runners.fork.preload`).
        modules = [*plan.preload, *recorded_modules(_refs(plan, claims), revision.tree)]
        specs = [_spec(root, plan, claims, modules)]
        if base is not None:
            # The base tree's arms reuse a model built once, like the head's.
            specs.append(base_spec(base, plan, base_plan, on_base, modules))
        # The fits earlier sandboxed runs of this very tree kept, handed in; what this
        # run measures is kept for the next run of the tree (`ledger.execution.calibrations`).
        # Not where the base tree's server runs beside it: its arms would read fits the
        # head's code could have written for them.
        alone = box.mode != "none" and base is None
        fits = calibrations.hand_in(run_dir, revision.tree) if alone else None
        wrap = server_sandbox(box, run_dir, [root, base], fits)
        confine = None if wrap is None else server_confine(box, run_dir)
        launched = Launched.all(specs, env(), wrap=wrap, sock_dir=run_dir, confine=confine)
        try:
            yield Started(root, base, run_dir, launched, plan.quarantine_above)
        finally:
            launched.close()
            if fits is not None:
                calibrations.take_back(run_dir, revision.tree)


def _prefixed(progress: Callable[[str], None], prefix: str) -> Callable[[str], None]:
    def say(msg: str) -> None:
        progress(prefix + msg)

    return say


def unforkable(ready: Ready) -> str | None:
    """Why a fork server that said ready will refuse every fork, or None (its own
    `runners.fork.forksafety.refusal` at ready: who initialised CUDA in it, which threads)."""
    return ready.fork_refused or None


def run(
    st: Started,
    runs: Sequence[ClaimRun],
    ledger: OpenLedger,
    key: LocalKey,
    revision: Revision,
    devices: Sequence[GpuDevice] | None,
    box: Sandbox,
    say: Callable[[str], None],
    done: Recorded,
    gate: Gate | None = None,
) -> list[tuple[str, str]]:
    """Run ``runs`` on the started trees: on ``devices`` side by side (each claim on
    devices of its own), or one after another on the default device when None. The
    claims this host cannot run as asked, with why: none of them started
    (`ledger.execution.scheduler.not_here`). Each receipt waits for ``gate`` before it
    is recorded (`ledger.execution.preflight`): its refusal stops every claim."""
    from runners.fork.preload import learned, remember_modules

    explicit = devices is not None
    quarantine: dict[str, str] = {}
    if devices is not None:
        devices = skip_quarantined(
            devices,
            visible_gpus(),
            ledger.reader,
            bound(os.environ) or st.quarantine_above,
            say,
            quarantine,
        )
    on_gpu = all(d.uuid for d in devices) if devices else bool(visible_gpus())
    pool = DevicePool(
        devices if devices is not None else [GpuDevice("default")], share=sharing.limit(on_gpu)
    )
    n = len(runs)
    servers = st.servers.wait()
    fork = servers[0]
    base_fork = servers[1] if len(servers) > 1 else None
    _say_servers(servers, say)
    if explicit and pool.size > 1:
        say(f"{n} claim(s) on {pool.size} device(s) side by side")
    beside = [r.claim for r in runs if sharing.shares(r.check, r.params)]
    if pool.share > 1 and len(beside) > 1:
        say(
            f"{len(beside)} claim(s) that judge no memory may share a device, up to "
            f"{pool.share} at once: {', '.join(beside)}"
        )
    sockets = {str(st.root): str(fork.sock)} if fork is not None else {}
    if base_fork is not None and st.base_root is not None:
        sockets[str(st.base_root)] = str(base_fork.sock)
    ex = LocalExecutor(
        root=st.root,
        base_root=st.base_root,
        artifacts=st.artifacts,
        fork=fork,
        progress_for=lambda run: _prefixed(say, f"{claim_tag(run, n)}  "),
        fork_servers=sockets or None,
        slots=pool.size * pool.share,
        sandbox=None if box.mode == "none" else box,
        work_root=st.run_dir,
    )
    _diagnose(ex, pool.devices if explicit else visible_gpus(), say)
    try:
        recording = _Recording(ledger.recorder, key, revision, done, quarantine, gate)
        skipped = schedule(ex, pool, explicit, runs, recording, say, len(visible_gpus()))
    finally:
        ex.close()
    # What the claims imported beyond the preloads: the next run's server has it.
    remember_modules(
        [r.workload_ref for r in runs],
        learned(st.root),
        revision.tree,
        [p for p in (st.root, st.base_root) if p is not None],
    )
    return skipped


def _say_servers(servers: Sequence[ForkServer | None], say: Callable[[str], None]) -> None:
    """What the fork servers imported and built once, and each one claims cannot be
    forked from (each of its claims then starts a fresh interpreter)."""
    fork = servers[0]
    if fork is not None:
        r = fork.ready
        extra = f", {len(r.prepared)} workload(s) prepared" if r.prepared else ""
        if r.prebuilt:
            extra += f", {len(r.prebuilt)} workload(s) built once (each setup a copy)"
        for why in r.not_prebuilt:
            extra += f"; not built once: {why}"
        say(
            f"fork server: torch, {len(r.preloaded)} workload module(s) and "
            f"{len(r.modules)} more module(s) imported once{extra} ({r.seconds:.1f} s)"
        )
    for server in servers:
        refused = None if server is None else unforkable(server.ready)
        if refused:
            say(
                f"fork server: claims cannot be forked from it ({refused}): each claim "
                "starts a fresh interpreter and imports and builds again"
            )


def _diagnose(ex: LocalExecutor, devices: Sequence[GpuDevice], say: Callable[[str], None]) -> None:
    """``dcgmi diag -r 1`` on each GPU once, before any claim runs on it (its minutes
    apart from the claims'); where dcgmi is not installed, that is recorded."""
    for d in devices:
        if d.uuid is None:
            continue
        got = ex.diagnosed[d.uuid] = diagnose(d.index)
        if got["result"] == "not installed":
            say("dcgmi not installed: no DCGM diagnostic (the NVML health snapshot still is)")
            for rest in devices:
                if rest.uuid is not None:
                    ex.diagnosed[rest.uuid] = got
            return
        say(f"dcgmi diag -r 1 on {d.label}: {got['result']} ({got.get('wall_ns', 0) / 1e9:.1f} s)")


@dataclass
class _Recording:
    """Where each finished claim's receipts go: signed by ``key`` for ``revision`` and
    recorded, their (id, claim, outcome) appended to ``done``."""

    recorder: Recorder
    key: LocalKey
    revision: Revision
    done: Recorded
    run_facts: dict[str, str] = field(default_factory=dict)
    """Facts of the whole run every receipt carries: what quarantine did."""
    gate: Gate | None = None
    """Returns once the run may be recorded, or raises its refusal (`preflight.Gate`),
    which the scheduler answers by stopping every claim."""

    def poll(self) -> None:
        if self.gate is not None:
            self.gate.poll()

    def judged(self) -> bool:
        return self.gate is None or self.gate.is_judged()

    def finished(
        self,
        fut: Any,
        run: ClaimRun,
        t0: float,
        n: int,
        say: Callable[[str], None],
        wait_ns: int | None = None,
        extra: dict[str, str] | None = None,
        ended: float | None = None,
    ) -> None:
        tag = claim_tag(run, n)
        if self.gate is not None:
            self.gate()
        try:
            fin: Finished = fut.result()
        except Exception as e:  # one claim's failure must not stop the others
            say(f"{tag} {run.claim}: not recorded: the runner failed: {type(e).__name__}: {e}")
            return
        facts: dict[str, str] = {}
        if wait_ns is not None:
            # queued (the run's start) -> started (devices of its own were free)
            facts["device_wait_ns"] = str(wait_ns)
        # Which claims ran on its device meanwhile (`ledger.execution.sharing`).
        facts.update(extra or {})
        # Which devices quarantine left out, or reported, and by what figure and bound.
        facts.update(self.run_facts)
        recorded = record_finished(
            fin,
            self.recorder,
            self.key,
            self.revision,
            ci=ci_job(os.environ, fin.host or None),
            facts=facts,
        )
        from ledger.execution.said import Said, finished_line

        for rec, r in recorded:
            self.done.append((rec.id, r.claim, r.outcome))
        # The claim's own time: it may have waited for the doctor's judgement since.
        took = f"{(ended if ended is not None else time.monotonic()) - t0:.1f} s"
        said = [Said(rec.id, r.check, r.observer, r.outcome, r.reason) for rec, r in recorded]
        # One line per claim: a control's several receipts say what each is.
        say(finished_line(tag, run.claim, run.check, said, took))
