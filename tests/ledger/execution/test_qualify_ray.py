"""`ledger qualify --executor ray` against a local Ray cluster this test starts, with two
logical GPUs on CPU: each claim a Ray task asking for its GPUs, the code shipped as a git
bundle, unpacked once per worker and its tree checked for every claim, the worker's own key
signing, receipts recorded through the ledger server and naming the executor and the task;
Ctrl-C ends every claim's processes."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import git
import pytest

from ledger.evidence.keys import KeyDir
from ledger.execution.claimrun import ClaimRun
from ledger.execution.ray_executor import too_wide
from ledger.sandbox import find_bwrap, pids
from ledger.service.run import Running, start
from tests.ledger.helpers import run
from tests.ledger.probe_repo import claim, make_probe_repo, notes

try:
    import ray
except ImportError:  # the `ray` extra (CI installs it through the test extra)
    if os.environ.get("CI"):
        raise
    pytest.skip("ray is not installed", allow_module_level=True)


BOUND_S = 900
"""How long a test on the cluster may run before it fails: a hung cluster (a task that
is never placed, a worker that never answers) fails its test instead of holding the
CI run; each test takes well under a minute here."""


@contextlib.contextmanager
def bounded(seconds: int) -> Iterator[None]:
    """Raise `TimeoutError` in this (the main) thread once ``seconds`` have passed: what
    is waiting then unwinds as on Ctrl-C (the driver cancels its tasks, their claims'
    processes end, the cluster is shut down)."""

    why = f"the test ran past its bound of {seconds} s"
    fired: list[bool] = []

    def past(signum: int, frame: object) -> None:
        fired.append(True)
        raise TimeoutError(why)

    old = signal.signal(signal.SIGALRM, past)
    signal.alarm(seconds)
    try:
        yield
    except BaseException as e:
        # Raised inside Ray's compiled wait, the handler's error arrives as a SystemError.
        if fired and not isinstance(e, TimeoutError):
            raise TimeoutError(why) from e
        raise
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_a_bound_ends_a_wait_that_would_never_end() -> None:
    with pytest.raises(TimeoutError, match="bound of 1 s"), bounded(1):
        threading.Event().wait()  # nothing ever sets it


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[dict[str, Path]]:
    """A one-node Ray cluster with 2 logical GPUs; the worker's key lives only in the
    workers' environment (their host's $LEDGER_KEYS). The test is bounded in time."""
    worker_keys = tmp_path / "worker-keys"
    env = {
        "LEDGER_KEYS": str(worker_keys),
        "LEDGER_OUTBOX": str(tmp_path / "worker-outbox"),
    }
    ray.init(
        num_cpus=4,
        num_gpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": env},
        logging_level=40,  # logging.ERROR
    )
    try:
        with bounded(BOUND_S):
            yield {"worker_keys": worker_keys}
    finally:
        ray.shutdown()


@pytest.fixture
def ledger_server(
    tmp_path: Path,
    key_dir: Path,
    cluster: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Iterator[Running]:
    """A ledger server on a fresh ledger (``$LEDGER_DB``) that knows the worker's key: made
    on the worker's host, only its public half registered."""
    db = f"sqlite:///{tmp_path / 'server.db'}"
    monkeypatch.setenv("LEDGER_DB", db)
    assert run(capsys, "init").code == 0
    monkeypatch.setenv("LEDGER_KEYS", str(cluster["worker_keys"]))
    assert run(capsys, "keys", "new", "gpu-worker", "--role", "runner").code == 0
    pem = tmp_path / "worker.pub.pem"
    pem.write_text(run(capsys, "keys", "export", "gpu-worker").out)
    monkeypatch.setenv("LEDGER_KEYS", str(key_dir))
    # The worker's key speaks for the Ray nodes' host (here, this one).
    add = ("keys", "add", str(pem), "--name", "gpu-worker", "--role", "runner")
    assert run(capsys, *add, "--host", socket.gethostname()).code == 0
    srv = start(db, KeyDir(key_dir))
    try:
        yield srv
    finally:
        srv.stop()


def test_claims_run_as_ray_tasks_and_record_through_the_server(
    tmp_path: Path, ledger_server: Running, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = "".join(claim(f"c{i}.passes", timeout_s="300") for i in range(3))
    repo = make_probe_repo(tmp_path / "repo", plan, head='preload = ["wave"]\n')
    r = run(
        capsys, "qualify", "--rev", "HEAD", "--repo", str(repo), "--executor", "ray",
        "--server", ledger_server.url, "--key", "gpu-worker", "--json",
    )  # fmt: skip
    assert r.code == 0, r.err
    rows = json.loads(r.out)["receipts"]
    assert sorted(x["claim"] for x in rows) == ["c0.passes", "c1.passes", "c2.passes"]
    assert {x["outcome"] for x in rows} == {"passed"}
    head = git.Repo(repo).head.commit
    assert f"tree {head.tree.hexsha[:12]} checked" in r.err  # progress streamed back
    # Each Ray worker unpacked the commit once; a claim Ray placed on a worker that had
    # already run one reused its checkout.
    workers = set(re.findall(r"worker pid (\d+)\)", r.err))
    assert len(workers) in (1, 2, 3)
    assert r.err.count("(unpacked here)") == len(workers), r.err
    assert r.err.count("(checkout reused)") == 3 - len(workers), r.err
    keyid = json.loads(run(capsys, "keys", "list", "--json").out)
    worker_id = next(k["keyid"] for k in keyid if k["name"] == "gpu-worker")
    jobs = set()
    for x in rows:
        shown = json.loads(run(capsys, "show", x["id"], "--json").out)
        stmt = shown["statement"]
        env = stmt["predicate"]["runner"]["environment"]
        assert env["executor"] == "ray" and env["executor_devices"] in ("0", "1")
        # The worker's sandbox proved itself before the claim ran, as a local run's does.
        if find_bwrap() is not None:
            assert stmt["predicate"]["scope"]["sandbox"] == "bwrap"
            assert env["sandbox_selftest"].startswith("bwrap, self-test "), env
            assert env["sandbox_host_uid"] == "65534", env
        jobs.add(env["executor_job_id"])
        assert stmt["subject"][0]["digest"]["gitTree"] == head.tree.hexsha
        assert shown["signer"]["keyid"] == worker_id  # signed on the worker, by its key
    assert len(jobs) == 3 and "" not in jobs
    # Each claim process saw the one GPU Ray gave its task.
    seen = [n for n in notes(r.err) if n.get("event") == "setup"]
    assert len(seen) == 3 and {n["cvd"] for n in seen} <= {"0", "1"}
    # Each forked from its commit's fork server on its worker, which imported the plan's
    # preload list and prepared the workload once, before the worker's first claim.
    assert all(n["wave_preloaded"] for n in seen), seen
    assert all(n["prepared_in"] not in (None, n["pid"]) for n in seen), seen
    assert len({n["prepared_in"] for n in seen}) <= len(workers)
    assert r.err.count("1 workload(s) prepared") == len(workers), r.err
    # A claim wider than every node of this cluster is named before Ray waits on it.
    runs = [ClaimRun(index=i, claim=f"w{w}", check="cleanup", workload_ref="", world_size=w,
                     timeout_s=60, device="cpu")
            for i, w in ((1, 2), (2, 3))]  # fmt: skip
    assert too_wide(runs, ray.nodes()) == [
        "[2/2] w3: waits: it needs 3 GPUs on one node and the widest node of the cluster "
        "has 2 now; it runs when a node that fits joins (Ctrl-C stops the run)"
    ]


def test_gradient_compare_arms_fork_from_the_worker_servers_of_their_own_trees(
    tmp_path: Path, ledger_server: Running, capsys: pytest.CaptureFixture[str]
) -> None:
    from scripts.example_repo import make_example_repo

    ex = make_example_repo(tmp_path / "ex")
    r = run(
        capsys, "qualify", "--pr", "1", "--repo", str(ex.path), "--claim",
        "numerics.gradient-compare", "--executor", "ray", "--server", ledger_server.url,
        "--key", "gpu-worker", "--json",
    )  # fmt: skip
    [rec] = json.loads(r.out)["receipts"]
    assert rec["outcome"] == "passed", r.err
    # The worker shipped both commits and started a server for each tree; each arm forked
    # from the server of the tree it runs.
    head, base = ex.pr_head[:16], ex.base_commit[:16]  # the checkouts' folder names
    arms = [x for x in r.err.splitlines() if "gradient arm " in x]
    assert len(arms) >= 2 and all("forked from its tree's fork server" in x for x in arms), arms
    assert any(f"/{base}" in x for x in arms) and any(f"/{head}" in x for x in arms), arms
    if find_bwrap() is None or os.geteuid() != 0 or pids.controller() is None:
        return
    # The claim ran alone on the worker's servers, in a pids cgroup of its own below their
    # sandbox's, and each arm forked from either tree's server was placed there too.
    shown = json.loads(run(capsys, "show", rec["id"], "--json").out)
    env = shown["statement"]["predicate"]["runner"]["environment"]
    assert env["sandbox_claim_pids"].endswith("; 1 at once)"), env
    proof = env["sandbox_claim_pids_proof"]
    assert proof.startswith("proved from inside before its code ran"), proof
    assert f"; {len(arms)} process(es) it started forked from a fork server placed" in proof


def test_ctrl_c_ends_every_claims_processes_before_the_driver_returns(
    tmp_path: Path, cluster: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from ledger.evidence.keys import KeyDir
    from ledger.execution.definitions import claim_runs
    from ledger.execution.ray_executor import run_on_ray
    from ledger.identity.revision import Revision
    from ledger.qualification.plan import load_plan

    KeyDir(cluster["worker_keys"]).create("gpu-worker")
    repo = make_probe_repo(tmp_path / "repo", claim("a.hangs", "hang") + claim("b.hangs", "hang"))
    head = git.Repo(repo).head.commit
    plan = load_plan(repo / "qualification.toml")
    runs = claim_runs(plan, plan.claims, "cpu", None)
    revision = Revision(repo=str(repo), commit=head.hexsha, tree=head.tree.hexsha)
    lines: list[str] = []
    started: dict[int, str | None] = {}

    def say(line: str) -> None:
        lines.append(line)
        if sum("probe: hanging now" in x for x in lines) == 2:
            # Each claim process as it is now: a pid the host hands to another process
            # after the claim's ended (a busy host wraps pid_max) is not the claim.
            for n in notes(lines):
                if n.get("event") == "setup":
                    started[int(str(n["pid"]))] = _started(int(str(n["pid"])))
            raise KeyboardInterrupt  # Ctrl-C once both claims' workloads are running

    driver = run_on_ray(
        git.Repo(repo), revision, runs, address=None, server="http://127.0.0.1:9",
        key_name="gpu-worker", say=say,
    )  # fmt: skip
    with pytest.raises(KeyboardInterrupt):
        list(driver)
    pids = [int(str(n["pid"])) for n in notes(lines) if n.get("event") == "setup"]
    assert len(pids) == 2
    assert sorted(started) == sorted(pids) and None not in started.values()
    for pid in pids:  # the claim processes are gone (or reaped any moment now)
        assert _started(pid) != started[pid] or _zombie(pid)


def _started(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22 of its stat), which
    tells it from a later process given the same pid; None where there is no process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].split()[19]
    except OSError:
        return None


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except OSError:
        return True


def _bundle(repo: git.Repo, *commits: str) -> bytes:
    from ledger.execution.ray_executor import bundle_revision

    return bundle_revision(repo, list(commits))


def test_the_worker_refuses_code_whose_tree_is_not_the_revisions(tmp_path: Path) -> None:
    from ledger.execution.checkouts import Checkouts

    repo = make_probe_repo(tmp_path / "repo", claim("x"))
    r = git.Repo(repo)
    head = r.head.commit
    bundle = _bundle(r, head.hexsha)
    assert not [ref for ref in r.refs if "ledger" in ref.path]  # temporary refs removed
    with pytest.raises(ValueError, match="not 0000"):
        Checkouts(tmp_path / "w1").get(bundle, [head.hexsha], "0" * 40)
    shipped = Checkouts(tmp_path / "w2").get(bundle, [head.hexsha], head.tree.hexsha)
    assert (shipped.roots[head.hexsha] / "probe_wl.py").is_file()


def test_claims_of_one_commit_on_a_worker_unpack_it_once(tmp_path: Path) -> None:
    from ledger.execution.checkouts import Checkouts

    repo = make_probe_repo(tmp_path / "repo", claim("x"))
    r = git.Repo(repo)
    base = r.head.commit
    (repo / "more.py").write_text("X = 1\n")
    r.index.add(["more.py"])
    head = r.index.commit("more")
    bundle = _bundle(r, head.hexsha, base.hexsha)
    trees = Checkouts(tmp_path / "worker")
    first = trees.get(bundle, [head.hexsha], head.tree.hexsha)
    second = trees.get(bundle, [head.hexsha], head.tree.hexsha)
    assert first.unpacked and not second.unpacked and trees.fetches == 1
    assert second.roots == first.roots
    # A claim that also needs the base: checked out from what was fetched, no second fetch.
    both = trees.get(bundle, [head.hexsha, base.hexsha], head.tree.hexsha)
    assert (
        both.unpacked and trees.fetches == 1 and both.roots[head.hexsha] == first.roots[head.hexsha]
    )
    assert not (both.roots[base.hexsha] / "more.py").exists()
    # The tree is checked for every claim, reused checkout or not.
    with pytest.raises(ValueError, match="not 0000"):
        trees.get(bundle, [head.hexsha], "0" * 40)
    # A checkout whose files changed (a claim without a sandbox can write there) is
    # replaced, not reused.
    (first.roots[head.hexsha] / "more.py").write_text("X = 2\n")
    again = trees.get(bundle, [head.hexsha], head.tree.hexsha)
    assert again.unpacked and (again.roots[head.hexsha] / "more.py").read_text() == "X = 1\n"
    assert trees.fetches == 1
    trees.close()
    assert not (tmp_path / "worker").exists()


def test_a_worker_removes_the_folders_of_workers_that_are_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess
    import sys
    import tempfile

    from ledger.execution import ray_worker

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead = tmp_path / f"ledger-ray-worker-{gone.pid}-abc"
    live = tmp_path / f"ledger-ray-worker-{os.getpid()}-abc"
    other = tmp_path / "ledger-ray-worker-abc"
    for d in (dead, live, other):
        (d / "code").mkdir(parents=True)
    ray_worker._sweep()
    assert not dead.exists() and live.exists() and other.exists()
