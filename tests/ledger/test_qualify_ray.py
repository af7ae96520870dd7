"""`ledger qualify --executor ray` against a local Ray cluster this test starts, with two
logical GPUs on CPU: each claim a Ray task asking for its GPUs, the code shipped as a git
bundle and its tree checked, the worker's own key signing, receipts recorded through the
ledger server and naming the executor and the task."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import git
import pytest

from ledger.keys import KeyDir
from ledger.service.run import start
from tests.ledger.helpers import run
from tests.ledger.probe_repo import claim, make_probe_repo, notes

try:
    import ray
except ImportError:  # the `ray` extra (CI installs it through the test extra)
    if os.environ.get("CI"):
        raise
    pytest.skip("ray is not installed", allow_module_level=True)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[dict[str, Path]]:
    """A one-node Ray cluster with 2 logical GPUs; the worker's key lives only in the
    workers' environment (their host's $LEDGER_KEYS)."""
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
        yield {"worker_keys": worker_keys}
    finally:
        ray.shutdown()


def test_claims_run_as_ray_tasks_and_record_through_the_server(
    tmp_path: Path,
    key_dir: Path,
    cluster: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    db = f"sqlite:///{tmp_path / 'server.db'}"
    monkeypatch.setenv("LEDGER_DB", db)
    assert run(capsys, "init").code == 0
    # The worker host's key: made there, only its public half registered with the ledger.
    monkeypatch.setenv("LEDGER_KEYS", str(cluster["worker_keys"]))
    assert run(capsys, "keys", "new", "gpu-worker", "--role", "runner").code == 0
    pem = tmp_path / "worker.pub.pem"
    pem.write_text(run(capsys, "keys", "export", "gpu-worker").out)
    monkeypatch.setenv("LEDGER_KEYS", str(key_dir))
    assert (
        run(capsys, "keys", "add", str(pem), "--name", "gpu-worker", "--role", "runner").code == 0
    )
    srv = start(db, KeyDir(key_dir))
    plan = "".join(claim(f"c{i}.passes", timeout_s="300") for i in range(3))
    repo = make_probe_repo(tmp_path / "repo", plan)
    try:
        r = run(
            capsys, "qualify", "--rev", "HEAD", "--repo", str(repo), "--executor", "ray",
            "--server", srv.url, "--key", "gpu-worker", "--json",
        )  # fmt: skip
    finally:
        srv.stop()
    assert r.code == 0, r.err
    rows = json.loads(r.out)["receipts"]
    assert sorted(x["claim"] for x in rows) == ["c0.passes", "c1.passes", "c2.passes"]
    assert {x["outcome"] for x in rows} == {"passed"}
    head = git.Repo(repo).head.commit
    assert f"tree {head.tree.hexsha[:12]} checked" in r.err  # progress streamed back
    keyid = json.loads(run(capsys, "keys", "list", "--json").out)
    worker_id = next(k["keyid"] for k in keyid if k["name"] == "gpu-worker")
    jobs = set()
    for x in rows:
        shown = json.loads(run(capsys, "show", x["id"], "--json").out)
        stmt = shown["statement"]
        env = stmt["predicate"]["runner"]["environment"]
        assert env["executor"] == "ray" and env["executor_devices"] in ("0", "1")
        jobs.add(env["executor_job_id"])
        assert stmt["subject"][0]["digest"]["gitTree"] == head.tree.hexsha
        assert shown["signer"]["keyid"] == worker_id  # signed on the worker, by its key
    assert len(jobs) == 3 and "" not in jobs
    # Each claim process saw the one GPU Ray gave its task.
    seen = [n for n in notes(r.err) if n.get("event") == "setup"]
    assert len(seen) == 3 and {n["cvd"] for n in seen} <= {"0", "1"}


def test_the_worker_refuses_code_whose_tree_is_not_the_revisions(tmp_path: Path) -> None:
    from ledger.execution.ray_executor import bundle_revision
    from ledger.execution.ray_worker import _checkout

    repo = make_probe_repo(tmp_path / "repo", claim("x"))
    r = git.Repo(repo)
    head = r.head.commit
    bundle = bundle_revision(r, [head.hexsha])
    assert not [ref for ref in r.refs if "ledger" in ref.path]  # temporary refs removed
    with pytest.raises(ValueError, match="not 0000"):
        _checkout(bundle, [head.hexsha], "0" * 40, tmp_path / "w1")
    roots = _checkout(bundle, [head.hexsha], head.tree.hexsha, tmp_path / "w2")
    assert (roots[head.hexsha] / "probe_wl.py").is_file()
