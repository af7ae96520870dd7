"""The `ray` executor: each claim a Ray task asking for ``world_size`` GPUs.

The driver (``ledger qualify --executor ray``) holds no key and runs no
claim: it ships the revision as a git bundle (the commit, and the base
commit where a check compares against it), submits one task per claim with
``num_gpus = world_size`` and streams the tasks' progress. Ray places the
tasks; the ledger schedules nothing across hosts. Each task
(`ledger.execution.ray_worker.run_claim_task`) runs on a worker host that
holds its own runner key, checks the bundle's tree against the revision's,
runs the claim there and records through the ledger server (`--server`), by
way of the worker's outbox.

Ray is an optional extra: ``pip install 'ledger-qualify[ray]'``.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import git

from ledger.errors import UsageError
from ledger.execution.claimrun import ClaimRun, ReceiptRow
from ledger.revision import Revision

__all__ = ["bundle_revision", "run_on_ray"]

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
) -> Iterator[ReceiptRow]:
    """Run every claim as a Ray task; yield the receipts each recorded, as they finish."""
    ray = _ray()
    from ray.util.queue import Queue

    from ledger.execution.ray_worker import run_claim_task

    if not ray.is_initialized():
        ray.init(
            address=address or os.environ.get("RAY_ADDRESS") or "auto",
            log_to_driver=False,
            logging_level=40,  # logging.ERROR
        )
    commits = [revision.commit]
    if revision.base and revision.base != revision.commit and any(r.needs_base for r in runs):
        commits.append(revision.base)
    bundle = ray.put(bundle_revision(repo, commits))
    say(f"ray: {len(runs)} claim(s) submitted to {address or 'the cluster'}; code: "
        f"commit {revision.commit[:12]} as a git bundle")  # fmt: skip
    queue = Queue()
    task = ray.remote(run_claim_task)
    source = {
        "repo": revision.repo,
        "commit": revision.commit,
        "tree": revision.tree,
        "pr": revision.pr,
        "parents": list(revision.parents),
        "base": revision.base,
        "package": package,
    }
    pending: dict[Any, ClaimRun] = {}
    n = len(runs)
    for run in runs:
        ref = task.options(num_gpus=run.gpus, num_cpus=1, name=f"ledger {run.claim}").remote(
            bundle,
            {
                "run": run.to_json(),
                "source": source,
                "server": server,
                "key": key_name,
                "total": n,
                "sandbox": sandbox,
                "allowed_env": list(allowed_env),
            },
            queue,
        )
        pending[ref] = run
        say(f"[{run.index}/{n}] {run.claim} ({run.check}) -> Ray task asking for {run.gpus} GPU(s)")
    try:
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.25)
            _drain(queue, say)
            for ref in ready:
                run = pending.pop(ref)
                yield from _finished(ray, ref, run, n, say)
        _drain(queue, say)
    except BaseException:
        for ref in pending:
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
        raise
    finally:
        with contextlib.suppress(Exception):
            queue.shutdown()


def _drain(queue: Any, say: Callable[[str], None]) -> None:
    with contextlib.suppress(Exception):
        while not queue.empty():
            say(str(queue.get_nowait()))


def _finished(
    ray: Any, ref: Any, run: ClaimRun, n: int, say: Callable[[str], None]
) -> Iterator[ReceiptRow]:
    tag = f"[{run.index}/{n}]"
    try:
        doc = ray.get(ref)
    except Exception as e:
        say(f"{tag} {run.claim}: not recorded: the Ray task failed: {type(e).__name__}: {e}")
        return
    if doc.get("error"):
        say(f"{tag} {run.claim}: not recorded: {doc['error']}")
        return
    where = f"task {doc['job_id'][:16]} on {doc['host']}, GPU(s) {doc['devices'] or '-'}"
    reasons = doc.get("reasons") or [""] * len(doc["receipts"])
    for (rid, claim, outcome), why in zip(doc["receipts"], reasons, strict=True):
        note = f": {why}" if why and outcome != "passed" else ""
        say(f"{tag} {claim} {outcome}{note} ({where}) -> {rid[:19]}")
        yield rid, claim, outcome
    if doc.get("kept"):
        say(
            f"{tag} {doc['kept']} signed statement(s) kept in the worker's outbox: {doc['failure']}"
        )
