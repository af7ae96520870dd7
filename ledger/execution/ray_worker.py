"""A claim's Ray task, on the worker host: check the code, run the claim, sign, record.

The task receives the revision as a git bundle and the claim run as data. It
checks the commit out (`ledger.execution.checkouts`: once per commit on this
worker, reused by the claims of that commit Ray places here later), refuses
to run unless the commit's tree is the one the driver named, runs the claim
there (`runners.claim.isolated.run_claim_isolated`: the claim's own processes,
forked from its commit's fork server on this worker, the workload imported and
prepared there once (`ledger.execution.commit_servers`), on the GPUs Ray gave
the task through ``CUDA_VISIBLE_DEVICES``), signs the results with this host's runner key
(``$LEDGER_KEYS``: keys never travel) and records them through the ledger
server by way of this host's outbox. The receipts record the executor
(``ray``) and the task id.

The task is a Ray streaming generator: it yields its progress lines as they
come, then its result, so the driver needs no actor of its own to hear from
it. Ray's cancel (the driver's Ctrl-C) ends the claim's processes before the
task ends.
"""

from __future__ import annotations

import atexit
import os
import queue
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ledger.execution.checkouts import Checkouts
from ledger.execution.claimrun import ClaimRun
from ledger.execution.commit_servers import CommitServers
from ledger.execution.ray_quarantine import declined, hold

if TYPE_CHECKING:
    from ledger.evidence.keys import LocalKey
    from ledger.sandbox import Sandbox
    from runners.contract.result import Stamped

__all__ = ["run_claim_task"]

_POLL_S = 0.25
"""How often the task's generator looks up from waiting on its claim: Ray's cancel
arrives as KeyboardInterrupt, which a thread blocked without a timeout never sees."""


def _revision(source: dict[str, Any], root: Path) -> Any:
    from ledger.identity.revision import Revision

    package = source.get("package")
    digest: str | None = None
    paths: tuple[str, ...] = ()
    parts: tuple[tuple[str, str], ...] = ()
    if package:
        import git

        from ledger.identity.source import package_identity

        # The package identity covers this host's installed distributions: computed here.
        ident = package_identity(
            git.Repo(root).commit(source["commit"]),
            package["paths"],
            lock=package.get("lock", ()),
            distributions=package.get("distributions", ()),
            # The workload definition was resolved from the plans where the run began.
            workload=package.get("workload"),
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


@dataclass
class _Worker:
    """What this Ray worker process keeps across its tasks: the checkouts of the code
    shipped to it (under ``BASE/code``), and the fork servers of the commit it last ran
    a claim of (`CommitServers`, writing only under ``BASE/work``, inside the sandbox)."""

    want: tuple[str, tuple[str, ...]]
    base: Path
    checkouts: Checkouts
    commit: CommitServers | None = None

    def servers_for(
        self,
        roots: list[Path],
        run: ClaimRun,
        preload: list[str],
        box: Sandbox,
        tree: str = "",
        meanwhile: Callable[[], object] | None = None,
    ) -> tuple[CommitServers, bool]:
        """The fork servers for a claim on ``roots`` (its commit's checkout first), and
        whether this call launched any: those of another commit are stopped first.
        ``meanwhile``: run while launched ones start (`CommitServers.ensure`)."""
        c = self.commit
        if c is None or c.head != roots[0] or not c.alive():
            if c is not None:
                c.close()
            code, work = self.base / "code", self.base / "work"
            c = self.commit = CommitServers.new(roots[0], work, box, code)
        before = len(c.servers)
        c.ensure(roots, run, preload, tree, meanwhile)
        return c, len(c.servers) > before

    def close(self) -> None:
        if self.commit is not None:
            self.commit.close()
        self.checkouts.close()
        shutil.rmtree(self.base, ignore_errors=True)


_STATE: dict[str, _Worker] = {}
_SWEPT: list[bool] = []
"""Whether this process has looked for the folders of workers that are gone."""
_PREFIX = "ledger-ray-worker-"
"""The worker's folder: ``PREFIX<pid>-<random>`` in the temporary folder."""


def _sweep() -> None:
    """Remove the folders of this host's Ray workers that are gone: Ray ends its workers
    (at the end of a job, ``ray stop``) without running their exit handlers."""
    for path in Path(tempfile.gettempdir()).glob(f"{_PREFIX}*-*"):
        pid = path.name[len(_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process
        return True
    return True


def _close_worker() -> None:
    w = _STATE.pop("worker", None)
    if w is not None:
        w.close()


def _worker(box: Any, allowed_env: Any) -> _Worker:
    """This worker's state for the sandbox mode and allowed variables asked, made at its
    first task and kept (made again if they change)."""
    want = (str(box.mode), tuple(allowed_env))
    got = _STATE.get("worker")
    if got is not None and got.want == want:
        return got
    if not _SWEPT:
        _SWEPT.append(True)
        atexit.register(_close_worker)
        _sweep()
    _close_worker()
    base = Path(tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-"))
    (base / "code").mkdir()
    (base / "work").mkdir()
    w = _Worker(want, base, Checkouts(base / "code" / "shipped"))
    _STATE["worker"] = w
    return w


def run_claim_task(bundle: bytes, payload: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Run one claim where Ray placed this task: yields ``{"progress": line}`` as the claim
    goes, then ``{"result": doc}`` (the receipts it recorded, or an error)."""
    import ray

    # In the task's own thread: the runtime context is per task, and the fork servers must
    # be started by a thread that outlives the task (the sandbox dies with the thread
    # that started it: bwrap's --die-with-parent).
    ctx = ray.get_runtime_context()
    job_id = str(ctx.get_task_id() or ctx.get_job_id())
    devices = [str(g) for g in ray.get_gpu_ids()]
    quarantined = declined(payload, devices)
    if quarantined:
        # Not run here: this task holds the quarantined GPUs (so Ray cannot give them
        # to the claim again) while the driver places the claim anew.
        yield {"declined": f"GPU(s) {','.join(devices)}: {quarantined}"}
        hold()
    task = _setup(payload, job_id, devices)
    if isinstance(task, dict):
        yield {"result": task}
        return
    placed = _place(task, bundle)
    for line in placed.lines:
        yield {"progress": line}
    if placed.error:
        yield {"result": {**task.out, "error": placed.error}}
        return
    items: queue.Queue[dict[str, Any] | BaseException] = queue.Queue()
    cancel = threading.Event()

    def body() -> None:
        try:
            say: Callable[[str], None] = lambda m: items.put({"progress": m})  # noqa: E731
            items.put({"result": _run_claim(task, placed, say, cancel)})
        except BaseException as e:
            items.put(e)

    # The claim runs in a thread; this one relays its lines, and is where Ray's cancel lands.
    claim = threading.Thread(target=body, name="ledger-claim", daemon=True)
    claim.start()
    try:
        while True:
            try:
                item = items.get(timeout=_POLL_S)
            except queue.Empty:
                continue
            if isinstance(item, BaseException):
                raise item
            yield item
            if "result" in item:
                return
    except BaseException:
        # Cancelled (the driver's Ctrl-C): the claim's processes end before the task does.
        cancel.set()
        claim.join()
        raise


@dataclass
class _Task:
    """One claim's task, set up: its key and sandbox on this host, this worker's state."""

    run: ClaimRun
    payload: dict[str, Any]
    out: dict[str, Any]
    """The result's fields known before the claim runs."""
    key: LocalKey
    box: Sandbox
    worker: _Worker


def _proven(task: _Task) -> dict[str, str]:
    """The self-tests behind a claim's code on this worker: its commit's fork servers'
    sandbox (a claim forks from them, under the sandbox they were started in, perhaps
    by an earlier task) and this task's own (a claim started afresh)."""
    commit = task.worker.commit
    return {**(commit.box.facts() if commit is not None else {}), **task.box.facts()}


def _setup(payload: dict[str, Any], job_id: str, devices: list[str]) -> _Task | dict[str, Any]:
    """The claim's key, sandbox and this worker's state; an error result where the host
    lacks one."""
    from ledger.evidence.errors import UsageError
    from ledger.evidence.keys import KeyDir
    from ledger.remote.outbox import default_dir
    from ledger.sandbox import resolve

    run = ClaimRun.from_json(payload["run"])
    host = socket.gethostname()
    out: dict[str, Any] = {
        "job_id": job_id,
        "host": host,
        "devices": ",".join(devices),
        "worker": os.getpid(),
    }
    try:
        keys = KeyDir.default()
        key = keys.load(payload["key"])
    except Exception as e:
        return {**out, "error": f"no runner key {payload['key']!r} on {host}: {e}"}
    try:
        # The claim runs sandboxed here as on a local run: the key, the outbox hidden.
        box = resolve(
            payload.get("sandbox", "auto"),
            allowed_env=payload.get("allowed_env", ()),
            hide=[keys.path, default_dir()],
        )
    except UsageError as e:
        return {**out, "error": f"on {host}: {e.reason()}"}
    return _Task(run, payload, out, key, box, _worker(box, payload.get("allowed_env", ())))


def _tag(task: _Task) -> str:
    return f"[{task.run.index}/{task.payload['total']}]  {task.out['host']}: "


@dataclass
class _Placed:
    """Where a claim runs on this worker: its checkouts, its commit's fork servers."""

    lines: list[str]
    """Progress to say before the claim starts."""
    error: str = ""
    roots: dict[str, Path] = field(default_factory=dict)
    servers: CommitServers | None = None


def _place(task: _Task, bundle: bytes) -> _Placed:
    """Check the shipped code out (or reuse its checkout), refusing a tree that is not the
    revision's, and make sure its commit's fork servers run (in this, the task's thread:
    see `run_claim_task`)."""
    run, source, worker = task.run, task.payload["source"], task.worker
    commits = [source["commit"]]
    if run.needs_base and source.get("base") and source["base"] != source["commit"]:
        commits.append(source["base"])
    try:
        shipped = worker.checkouts.get(bundle, commits, source["tree"])
    except Exception as e:
        return _Placed([], error=f"refused the shipped code: {e}")
    task.out["unpacked"] = shipped.unpacked
    how = "unpacked here" if shipped.unpacked else "checkout reused"
    lines = [
        f"{_tag(task)}{run.claim}: tree {source['tree'][:12]} checked ({how}); running on "
        f"GPU(s) {task.out['devices'] or '-'}"
    ]
    roots = [shipped.roots[c] for c in commits]
    t0 = time.monotonic()
    loaded: list[str] = []
    servers, launched = worker.servers_for(
        roots, run, list(task.payload.get("preload") or ()), task.box, str(source["tree"]),
        meanwhile=lambda: loaded.extend(load_runners()),
    )  # fmt: skip
    if launched:
        r = servers.facts()
        what = (
            f"{len(r.prepared)} workload(s) prepared, {len(r.modules)} module(s) preloaded"
            if r is not None
            else "none could start: the claim starts afresh"
        )
        meanwhile = f"; {', '.join(loaded)} loaded here meanwhile" if loaded else ""
        lines.append(
            f"{_tag(task)}fork server(s) for commit {source['commit'][:12]}: {what} "
            f"({time.monotonic() - t0:.1f} s{meanwhile})"
        )
    return _Placed(lines, roots=shipped.roots, servers=servers)


RUNNERS = "runners.claim.isolated"
"""What runs a claim in this process: it imports torch (the checks' harness)."""


def load_runners() -> list[str]:
    """Import what runs a claim here, while this worker's first fork servers start (as a
    local run loads them while its server starts): a first claim would otherwise wait for
    the servers' torch, then for this process's. The module imported now; none where it
    was already."""
    import importlib
    import sys

    if RUNNERS in sys.modules:
        return []
    # In a thread of its own, waited for here: Ray's cancel (KeyboardInterrupt in this,
    # the task's thread) ends the wait, never the import halfway (torch half imported
    # could not be imported again in this worker); a failed import is the claim's to say.
    t = threading.Thread(
        target=importlib.import_module, args=(RUNNERS,), name="ledger-load-runners", daemon=True
    )
    t.start()
    t.join()
    return [f"the runners ({RUNNERS}, torch)"] if RUNNERS in sys.modules else []


def _run_claim(
    task: _Task, placed: _Placed, say: Callable[[str], None], cancel: threading.Event
) -> dict[str, Any]:
    from ledger.execution.claimlimit import ClaimLimit
    from ledger.fleet.health import Watch, uuids_of
    from runners.claim.isolated import run_claim_isolated
    from runners.fork.preload import learned, remember_modules

    run, payload, out, box = task.run, task.payload, dict(task.out), task.box
    source = payload["source"]
    servers = placed.servers
    assert servers is not None

    def progress(msg: str) -> None:
        say(_tag(task) + msg)

    roots = placed.roots
    root = roots[source["commit"]]
    revision = _revision(source, root)
    with tempfile.TemporaryDirectory(prefix="task-", dir=servers.work) as d:
        artifacts = Path(d) / "artifacts"
        artifacts.mkdir()
        # The health of the GPUs Ray gave the claim, read before its first use of them.
        on_gpu = out["devices"] and run.device != "cpu"
        gpus = uuids_of(out["devices"].split(",")) if on_gpu else []
        watch = Watch(gpus).start() if gpus else None
        # One claim at a time forks from this worker's servers: its pids cgroup has all.
        fork = None if run.network else servers.of(root)
        limit = ClaimLimit.make(fork, run, 1, box.mode != "none")
        request = run.request(
            root,
            roots.get(source.get("base") or ""),
            artifacts,
            work_root=Path(d),
            env={**servers.env(), **limit.env()},
            # The claim's GPUs as Ray placed them: the receipt names these (the host's
            # reading), never what the claim says it ran on.
            gpu_uuids=gpus or None,
        )
        try:
            results = run_claim_isolated(
                request,
                progress=limit.said(progress),
                # Forked from its commit's server (torch imported, the workload prepared,
                # once per worker); a claim with a network, or several ranks, starts
                # afresh in its sandbox.
                fork_server=fork,
                sandbox=None if box.mode == "none" else box,
                cancel=cancel,
            )
            facts = limit.facts(_proven(task))
        finally:
            limit.close()
        health = watch.finish().to_json() if watch is not None else None
        # What the claim imported beyond the preloads: this host's next server has it.
        if run.workload_ref:
            remember_modules(
                [run.workload_ref], learned(root), str(source["tree"]), list(roots.values())
            )
        _record(task, out, revision, results, gpus, artifacts, health, facts)
    return out


def _record(
    task: _Task,
    out: dict[str, Any],
    revision: Any,
    results: list[Stamped],
    gpus: Sequence[str],
    artifacts: Path,
    health: dict[str, Any] | None,
    facts: dict[str, str],
) -> None:
    """The claim's results signed with the worker's key and recorded through the server;
    what the driver is told of them put in ``out``."""
    from ledger.execution.claimrun import Finished
    from ledger.execution.receipts import record_finished
    from ledger.write.record import RemoteRecorder

    run, payload = task.run, task.payload
    recorder = RemoteRecorder(payload["server"])
    ci = {str(k): str(v) for k, v in dict(payload.get("ci") or {}).items()}
    fin = Finished(
        run=run,
        executor="ray",
        job_id=out["job_id"],
        devices=tuple(out["devices"].split(",")) if out["devices"] else (),
        # The GPUs Ray gave the task, as a local run names its devices'.
        gpu_uuids=tuple(gpus),
        results=results,
        host=out["host"],
        # The sandboxes proved themselves before the claim's code ran, as a local run's
        # do (`ledger.sandbox.proof`): the host's observation, in the receipt.
        sandbox_facts=facts,
        artifacts=artifacts,
        health=health,
    )
    # The submitting job's facts (the node is where the claim ran), and what
    # quarantine did for the run: which devices it held back, by what figure.
    recorded = record_finished(
        fin,
        recorder,
        task.key,
        revision,
        ci={**ci, "ci_node": out["host"]} if ci else {},
        facts=(payload.get("quarantine") or {}).get("facts") or {},
    )
    out["receipts"] = [(rec.id, r.claim, r.outcome) for rec, r in recorded]
    out["reasons"] = [r.reason or "" for _, r in recorded]
    # What each receipt is (a control's several: the inner check's, the comparison).
    out["parts"] = [[r.check, r.observer] for _, r in recorded]
    out["kept"] = recorder.kept
    out["failure"] = recorder.failure
