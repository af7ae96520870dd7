"""A claim's Ray task, on the worker host: check the code, run the claim, sign, record.

The task receives the revision as a git bundle and the claim run as data. It
fetches the bundle into a fresh repository, refuses to run unless the
commit's tree is the one the driver named, runs the claim in a worktree of
it (`runners.isolated.run_claim_isolated`: the claim's own processes, on the
GPUs Ray gave the task through ``CUDA_VISIBLE_DEVICES``), signs the results
with this host's runner key (``$LEDGER_KEYS``: keys never travel) and records
them through the ledger server by way of this host's outbox. The receipts
record the executor (``ray``) and the task id.
"""

from __future__ import annotations

import contextlib
import socket
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["run_claim_task"]


def _checkout(bundle: bytes, commits: list[str], tree: str, into: Path) -> dict[str, Path]:
    """Worktrees of ``commits`` from the bundle; the first commit's tree must be ``tree``."""
    import git

    into.mkdir(parents=True, exist_ok=True)
    (into / "head.bundle").write_bytes(bundle)
    repo = git.Repo.init(into / "repo")
    repo.git.fetch(str(into / "head.bundle"), "+refs/ledger/ship/*:refs/ledger/ship/*")
    got = repo.git.rev_parse(f"{commits[0]}^{{tree}}")
    if got != tree:
        raise ValueError(f"the shipped commit {commits[0][:12]} has tree {got}, not {tree}")
    roots = {}
    for c in commits:
        path = into / c[:12]
        repo.git.worktree("add", "--detach", str(path), c)
        roots[c] = path
    return roots


def _revision(source: dict[str, Any], root: Path) -> Any:
    from ledger.revision import Revision

    package = source.get("package")
    digest: str | None = None
    paths: tuple[str, ...] = ()
    parts: tuple[tuple[str, str], ...] = ()
    if package:
        import git

        from ledger.source import package_identity

        # The package identity covers this host's installed distributions: computed here.
        ident = package_identity(
            git.Repo(root).commit(source["commit"]),
            package["paths"],
            lock=package.get("lock", ()),
            distributions=package.get("distributions", ()),
        )
        digest, paths = ident.digest, tuple(package["paths"])
        parts = tuple(sorted((ident.parts or {}).items()))
    return Revision(
        repo=source["repo"],
        commit=source["commit"],
        tree=source["tree"],
        package_digest=digest,
        pr=source.get("pr"),
        package_paths=paths,
        package_parts=parts,
        parents=tuple(source.get("parents") or ()),
        base=source.get("base"),
    )


_SERVER: dict[str, Any] = {}
"""This worker process's fork server, kept across its tasks."""


def _fork_server(box: Any, allowed_env: Any) -> tuple[Any, Path]:
    """A fork server for this Ray worker process, started at its first task and kept:
    torch, the harness and the checks imported once per worker, not per claim. It runs
    no pull request's code itself (no workload is preloaded or prepared in it: tasks of
    different pull requests share it); it reads every task's checkout under
    ``BASE/code`` and writes only under ``BASE/work``, inside the sandbox."""
    import atexit

    from ledger.qualify import server_sandbox
    from runners.forkserver import ForkServer
    from runners.harness.child import env as child_env

    want = (box.mode, tuple(allowed_env))
    got = _SERVER.get("entry")
    if got is not None and got[0] == want and got[1] is not None and got[1].proc.poll() is None:
        return got[1], got[2]
    base = Path(tempfile.mkdtemp(prefix="ledger-ray-worker-"))
    (base / "code").mkdir()
    (base / "work").mkdir()
    wrap = server_sandbox(box, base / "work", [base / "code"])
    try:
        server = ForkServer.start([], child_env(), wrap=wrap, sock_dir=base / "work")
    except (OSError, RuntimeError):
        server = None
    if server is not None:
        atexit.register(server.close)
    _SERVER["entry"] = (want, server, base)
    return server, base


def run_claim_task(bundle: bytes, payload: dict[str, Any], queue: Any = None) -> dict[str, Any]:
    """Run one claim where Ray placed this task; the receipts it recorded, or an error."""
    import ray

    from ledger.execution.claimrun import ClaimRun
    from ledger.keys import KeyDir
    from ledger.qualify import record_results
    from ledger.record import RemoteRecorder

    run = ClaimRun.from_json(payload["run"])
    source = payload["source"]
    ctx = ray.get_runtime_context()
    job_id = str(ctx.get_task_id() or ctx.get_job_id())
    devices = [str(g) for g in ray.get_gpu_ids()]
    host = socket.gethostname()
    tag = f"[{run.index}/{payload['total']}]"

    def progress(msg: str) -> None:
        if queue is not None:
            with contextlib.suppress(Exception):
                queue.put_nowait(f"{tag}  {host}: {msg}")

    out: dict[str, Any] = {"job_id": job_id, "host": host, "devices": ",".join(devices)}
    try:
        keys = KeyDir.default()
        key = keys.load(payload["key"])
    except Exception as e:
        return {**out, "error": f"no runner key {payload['key']!r} on {host}: {e}"}
    from ledger.errors import UsageError
    from ledger.outbox import default_dir
    from ledger.sandbox import resolve

    try:
        # The claim runs sandboxed here as on a local run: the key, the outbox hidden.
        box = resolve(
            payload.get("sandbox", "auto"),
            allowed_env=payload.get("allowed_env", ()),
            hide=[keys.path, default_dir()],
        )
    except UsageError as e:
        return {**out, "error": f"on {host}: {e.reason()}"}
    from runners.isolated import run_claim_isolated

    fork, base = _fork_server(box, payload.get("allowed_env", ()))
    with (
        tempfile.TemporaryDirectory(prefix="task-", dir=base / "code") as code,
        tempfile.TemporaryDirectory(prefix="task-", dir=base / "work") as d,
    ):
        commits = [source["commit"]]
        if run.needs_base and source.get("base") and source["base"] != source["commit"]:
            commits.append(source["base"])
        try:
            roots = _checkout(bundle, commits, source["tree"], Path(code))
        except Exception as e:
            return {**out, "error": f"refused the shipped code: {e}"}
        root = roots[source["commit"]]
        revision = _revision(source, root)
        (Path(d) / "artifacts").mkdir()
        progress(f"{run.claim}: tree {source['tree'][:12]} checked; running on GPU(s) "
                 f"{out['devices'] or '-'}")  # fmt: skip
        results = run_claim_isolated(
            claim=run.claim,
            check=run.check,
            params=dict(run.params),
            repo_root=root,
            workload_ref=run.workload_ref,
            workload_params=dict(run.workload_params),
            device=run.device,
            observer_off_required=run.observer_off,
            base_root=roots.get(source.get("base") or ""),
            progress=progress,
            artifact_dir=Path(d) / "artifacts",
            world_size=run.world_size,
            timeout_s=run.timeout_s,
            sandbox=None if box.mode == "none" else box,
            network=run.network,
            work_root=Path(d),
            # Forked from this worker's server (torch imported once per worker process);
            # a claim with a network, or several ranks, starts afresh in its sandbox.
            fork_server=None if run.network else fork,
        )
        for r in results:
            r.scope["sandbox"] = box.facet
            r.scope["network"] = "on" if run.network else "off"
            if run.profile is not None:
                r.scope["profile"] = run.profile
        recorder = RemoteRecorder(payload["server"])
        environment = {"executor": "ray", "executor_job_id": job_id}
        if devices:
            environment["executor_devices"] = ",".join(devices)
        recs = record_results(recorder, key, revision, results, Path(d) / "artifacts", environment)
        out["receipts"] = [
            (rec.id, r.claim, r.outcome) for rec, r in zip(recs, results, strict=True)
        ]
        out["reasons"] = [r.reason or "" for r in results]
        out["kept"] = recorder.kept
        out["failure"] = recorder.failure
    return out
