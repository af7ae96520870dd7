"""The `ray` executor: each claim a Ray task asking for ``world_size`` GPUs.

The driver (``ledger qualify --executor ray``) holds no key and runs no
claim: it ships the revision as a git bundle (the commit, and the base
commit where a check compares against it), submits one task per claim with
``num_gpus = world_size``, all at once, and streams the tasks' progress
(each task is a streaming generator: its lines, then its result). Ray places
the tasks, and keeps its worker processes for the tasks that follow, so a
worker's checkout of the commit and its fork servers (the commit's workload
imported and prepared once) serve claim after claim;
the ledger schedules nothing across hosts. Each task
(`ledger.execution.ray_worker.run_claim_task`) runs on a worker host that
holds its own runner key, checks the bundle's tree against the revision's,
runs the claim there and records through the ledger server (`--server`), by
way of the worker's outbox. Quarantine (the server's fleet, read once here) holds
the quarantined GPUs for the run, so Ray gives them to no claim
(`ledger.execution.ray_quarantine`).

Ray is an optional extra: ``pip install 'ledger-qualify[ray]'``.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import git

from ledger.evidence.errors import UsageError
from ledger.execution.claimrun import ClaimRun, ReceiptRow
from ledger.execution.ray_quarantine import Quarantine, apply
from ledger.fleet.ci import ci_job
from ledger.identity.revision import Revision

if TYPE_CHECKING:
    from ledger.qualification.plan import Plan

__all__ = ["bundle_revision", "run_on_ray", "run_plan_on_ray", "too_wide"]

SHIP_REF = "refs/ledger/ship"


def bundle_revision(repo: git.Repo, commits: Sequence[str]) -> bytes:
    """A git bundle holding ``commits`` (and their history), under temporary refs that
    are removed again."""
    tag = secrets.token_hex(4)
    refs = [f"{SHIP_REF}/{tag}/{c}" for c in commits]
    with tempfile.TemporaryDirectory(prefix="ledger-bundle-") as d:
        path = Path(d) / "revision.bundle"
        try:
            for ref, c in zip(refs, commits, strict=True):
                repo.git.update_ref(ref, c)
            repo.git.bundle("create", str(path), *refs)
        finally:
            for ref in refs:
                with contextlib.suppress(git.GitCommandError):
                    repo.git.update_ref("-d", ref)
        return path.read_bytes()


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UsageError("--executor ray needs Ray: pip install 'ledger-qualify[ray]'") from None
    return ray


def run_on_ray(
    repo: git.Repo,
    revision: Revision,
    runs: Sequence[ClaimRun],
    *,
    address: str | None,
    server: str,
    key_name: str,
    say: Callable[[str], None],
    package: dict[str, Any] | None = None,
    sandbox: str = "auto",
    allowed_env: Sequence[str] = (),
    preload: Sequence[str] = (),
    quarantine_above: float | None = None,
) -> Iterator[ReceiptRow]:
    """Run every claim as a Ray task; yield the receipts each recorded, as they finish.
    ``preload``: the plan's modules for each worker's fork servers to import;
    ``quarantine_above``: the plan's quarantine bound (`ray_quarantine`)."""
    ray = _ray()
    from ledger.execution.ray_worker import run_claim_task

    if not ray.is_initialized():
        ray.init(
            address=address or os.environ.get("RAY_ADDRESS") or "auto",
            log_to_driver=False,
            logging_level=40,  # logging.ERROR
        )
    # Before any claim is submitted: every receipt carries what quarantine did.
    quarantine = apply(ray, server, quarantine_above, say)
    holders = quarantine.holders
    try:
        yield from _submit_and_wait(
            ray, run_claim_task, repo, revision, runs, quarantine,
            address=address, server=server, key_name=key_name, say=say, package=package,
            sandbox=sandbox, allowed_env=allowed_env, preload=preload,
        )  # fmt: skip
    finally:
        # The quarantined GPUs go back to Ray once the run is over.
        _stop(ray, holders)


def run_plan_on_ray(
    repo: git.Repo,
    revision: Revision,
    plan: Plan,
    runs: Sequence[ClaimRun],
    ray_address: str | None,
    server: str | None,
    key_name: str,
    sandbox: str,
    say: Callable[[str], None],
    receipts: list[ReceiptRow],
) -> None:
    """`ledger qualify --executor ray`: the plan's claims handed to the cluster with what
    the plan tells its workers (package, environment, preload, quarantine bound); each
    receipt appended to ``receipts`` as it is recorded."""
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
        receipts.append(row)


def _shipped(ray: Any, repo: git.Repo, revision: Revision, runs: Sequence[ClaimRun]) -> Any:
    """The revision as a git bundle in Ray's object store (its base too where a claim's
    arms run on it), shipped once to every worker."""
    commits = [revision.commit]
    if revision.base and revision.base != revision.commit and any(r.needs_base for r in runs):
        commits.append(revision.base)
    return ray.put(bundle_revision(repo, commits))


def _source(revision: Revision, package: dict[str, Any] | None) -> dict[str, Any]:
    """What a worker is told of the revision it checks out, and the plan's package."""
    return {
        "repo": revision.repo,
        "commit": revision.commit,
        "tree": revision.tree,
        "pr": revision.pr,
        "parents": list(revision.parents),
        "base": revision.base,
        # The workload definition is resolved from the plans here, where the checkout is.
        "package": (
            {**package, "workload": revision.definition}
            if package is not None and revision.definition is not None
            else package
        ),
    }


def _submit_and_wait(
    ray: Any,
    run_claim_task: Callable[..., Any],
    repo: git.Repo,
    revision: Revision,
    runs: Sequence[ClaimRun],
    quarantine: Quarantine,
    *,
    address: str | None,
    server: str,
    key_name: str,
    say: Callable[[str], None],
    package: dict[str, Any] | None,
    sandbox: str,
    allowed_env: Sequence[str],
    preload: Sequence[str],
) -> Iterator[ReceiptRow]:
    bundle = _shipped(ray, repo, revision, runs)
    say(f"ray: {len(runs)} claim(s) submitted to {address or 'the cluster'}; code: "
        f"commit {revision.commit[:12]} as a git bundle")  # fmt: skip
    task = ray.remote(run_claim_task)
    source = _source(revision, package)
    pending: dict[Any, ClaimRun] = {}
    n = len(runs)
    for line in too_wide(runs, ray.nodes()):
        say(line)
    not_run = quarantine.unplaceable(runs, say)
    placed: dict[int, int] = {}

    def submit(run: ClaimRun) -> None:
        # No retry: a claim that ran (and may have recorded) is not run a second time.
        gen = task.options(
            num_gpus=run.gpus, num_cpus=1, max_retries=0, name=f"ledger {run.claim}"
        ).remote(
            bundle,
            {
                "run": run.to_json(),
                "source": source,
                "server": server,
                "key": key_name,
                "total": n,
                "sandbox": sandbox,
                "allowed_env": list(allowed_env),
                "preload": list(preload),
                # The CI job that submitted the claim (the worker is not in it).
                "ci": ci_job(os.environ),
                "quarantine": quarantine.payload(),
            },
        )
        pending[gen] = run
        placed[run.index] = placed.get(run.index, 0) + 1

    def again(gen: Any, run: ClaimRun, why: str) -> None:
        """The task ``gen`` found itself on quarantined GPUs: it holds them for the run
        and the claim is placed again, at most once per quarantined device."""
        quarantine.holders.append(gen)
        tag = f"[{run.index}/{n}] {run.claim}"
        if placed[run.index] > len(quarantine.avoid):
            say(f"{tag}: not run: placed on quarantined GPUs {placed[run.index]} time(s): {why}")
            return
        say(f"{tag}: not run where Ray placed it: {why}; placed again")
        submit(run)

    try:
        # Every claim is submitted before any is waited on: Ray runs as many at once as
        # it has GPUs for.
        for run in runs:
            if run.index in not_run:
                continue
            submit(run)
            say(f"[{run.index}/{n}] {run.claim} ({run.check}) -> Ray task asking for "
                f"{run.gpus} GPU(s)")  # fmt: skip
        while pending:
            # The timeout only keeps Ctrl-C prompt: wait returns as soon as a task speaks.
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=_WAIT_S)
            for gen in ready:
                yield from _next(ray, gen, pending, n, say, again)
    except BaseException:
        _stop(ray, list(pending))
        raise


def too_wide(runs: Sequence[ClaimRun], nodes: Sequence[dict[str, Any]]) -> list[str]:
    """What to say of each claim that asks for more GPUs than any node of the cluster
    has now (``ray.nodes()``): Ray waits for such a task, silently, until a node that
    fits joins (an autoscaler may add one), so the wait is named before it starts."""
    alive = [x for x in nodes if x.get("Alive")]
    widest = max((int(x.get("Resources", {}).get("GPU", 0)) for x in alive), default=0)
    return [
        f"[{r.index}/{len(runs)}] {r.claim}: waits: it needs {r.gpus} GPUs on one node and "
        f"the widest node of the cluster has {widest} now; it runs when a node that fits "
        "joins (Ctrl-C stops the run)"
        for r in runs
        if r.gpus > widest
    ]


_WAIT_S = 0.25
STOP_GRACE_S = 30.0
"""After Ctrl-C, how long the tasks have to end their claims' processes (a claim's
process group gets 10 s to go, `runners.harness.launch.STOP_GRACE_S`) before Ray kills
their workers."""


def _next(
    ray: Any,
    gen: Any,
    pending: dict[Any, ClaimRun],
    n: int,
    say: Callable[[str], None],
    again: Callable[[Any, ClaimRun, str], None],
) -> Iterator[ReceiptRow]:
    """Take what the task ``gen`` said next: a progress line, its result, or that it was
    placed on quarantined GPUs (``again`` places the claim anew)."""
    run = pending[gen]
    tag = f"[{run.index}/{n}]"
    try:
        item = ray.get(next(gen))
    except StopIteration:
        pending.pop(gen)
        say(f"{tag} {run.claim}: not recorded: the Ray task ended without a result")
        return
    except Exception as e:
        pending.pop(gen)
        say(f"{tag} {run.claim}: not recorded: the Ray task failed: {type(e).__name__}: {e}")
        return
    if "progress" in item:
        say(str(item["progress"]))
        return
    if "declined" in item:
        pending.pop(gen)
        again(gen, run, str(item["declined"]))
        return
    pending.pop(gen)
    yield from _finished(item["result"], run, n, say)


def _stop(ray: Any, gens: list[Any]) -> None:
    """Cancel the tasks: each ends its claim's processes, then its worker process is
    free again; one that has not ended within `STOP_GRACE_S` (or a second Ctrl-C) has
    its worker killed."""
    for gen in gens:
        with contextlib.suppress(Exception):
            ray.cancel(gen)
    left = set(gens)
    end = time.monotonic() + STOP_GRACE_S
    try:
        while left and (wait := end - time.monotonic()) > 0:
            ready, _ = ray.wait(list(left), num_returns=1, timeout=min(wait, _WAIT_S))
            for gen in ready:
                try:
                    ray.get(next(gen))  # a line said before the cancel reached it
                except Exception:  # StopIteration, or the cancellation itself
                    left.discard(gen)
    finally:
        for gen in left:
            with contextlib.suppress(Exception):
                ray.cancel(gen, force=True)


def _finished(
    doc: dict[str, Any], run: ClaimRun, n: int, say: Callable[[str], None]
) -> Iterator[ReceiptRow]:
    tag = f"[{run.index}/{n}]"
    if doc.get("error"):
        say(f"{tag} {run.claim}: not recorded: {doc['error']}")
        return
    where = (
        f"task {doc['job_id'][:16]} on {doc['host']} (worker pid {doc.get('worker', '?')}), "
        f"GPU(s) {doc['devices'] or '-'}"
    )
    from ledger.execution.said import Said, finished_line

    reasons = doc.get("reasons") or [""] * len(doc["receipts"])
    parts = doc.get("parts") or [[run.check, "off"]] * len(doc["receipts"])
    said = [
        Said(rid, str(check), str(observer), outcome, why or None)
        for (rid, _, outcome), why, (check, observer) in zip(
            doc["receipts"], reasons, parts, strict=True
        )
    ]
    if said:
        # One line per claim: a control's several receipts say what each is.
        say(finished_line(tag, run.claim, run.check, said, where))
    yield from ((str(rid), str(claim), str(out)) for rid, claim, out in doc["receipts"])
    if doc.get("kept"):
        say(
            f"{tag} {doc['kept']} signed statement(s) kept in the worker's outbox: {doc['failure']}"
        )
