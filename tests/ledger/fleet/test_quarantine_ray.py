"""Quarantine under `qualify --executor ray --server`: the driver reads the server's fleet
once, Ray's workers name their GPUs through NVML (a fake one, which the workers load
too), the quarantined GPU is held for the run so every claim runs on the other, and
the circuit breaker holds over a node's devices as over a host's."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ledger.evidence.keys import KeyDir
from ledger.service.auth import new_token
from ledger.service.run import Running, start
from tests.ledger.fleet.conftest import GPU_A, GPU_B
from tests.ledger.fleet.fake_nvml import FakeDevice, fake_nvml
from tests.ledger.helpers import run
from tests.ledger.probe_repo import claim, make_probe_repo

try:
    import ray
except ImportError:  # the `ray` extra (CI installs it through the test extra)
    if os.environ.get("CI"):
        raise
    pytest.skip("ray is not installed", allow_module_level=True)

from tests.ledger.execution.test_qualify_ray import BOUND_S, bounded

ROOT = Path(__file__).resolve().parents[3]
UUIDS_ENV = "LEDGER_TEST_NVML_UUIDS"
SHIM = f'''"""pynvml for a test's Ray workers: the fake NVML with the UUIDs of ${UUIDS_ENV}."""
import json
import os

from tests.ledger.fleet.fake_nvml import FakeDevice, fake_nvml

if "{UUIDS_ENV}" not in os.environ:
    # A claim's process, in the sandbox that passes no such variable: no NVML there.
    raise ModuleNotFoundError("no fake NVML in this process", name="pynvml")
_fake = fake_nvml([FakeDevice(u) for u in json.loads(os.environ["{UUIDS_ENV}"])])
globals().update({{k: v for k, v in vars(_fake).items() if not k.startswith("__")}})
'''


@contextlib.contextmanager
def sick_fleet(
    tmp_path: Path,
    key_dir: Path,
    sick: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Iterator[tuple[Running, Path, str]]:
    """A ledger server whose fleet records faults of the GPUs ``sick`` (a local run on
    this host's two fake GPUs, each with a row remap pending), and a one-node Ray cluster
    with 2 logical GPUs whose workers' NVML names them GPU_A and GPU_B; the repository
    of four claims, and a token of the runner and read roles."""
    from runners.harness import nvml

    repo = make_probe_repo(tmp_path / "repo", "".join(claim(f"c{i}") for i in range(4)))
    devices = [FakeDevice(GPU_A), FakeDevice(GPU_B)]
    for d in devices:
        if d.uuid in sick:
            d.readings["remapped"] = (0, 0, 1, 0)
    with monkeypatch.context() as m:
        m.setitem(sys.modules, "pynvml", fake_nvml(devices))
        m.setattr(nvml, "_state", {})
        m.setenv("LEDGER_QUALIFY_PROBE", "0")
        local = ("qualify", "--rev", "HEAD", "--repo", str(repo), "--gpus", "all")
        assert run(capsys, *local, "--json").code == 0
    # The workers' key: made on their host, only its public half registered.
    worker_keys = tmp_path / "worker-keys"
    monkeypatch.setenv("LEDGER_KEYS", str(worker_keys))
    assert run(capsys, "keys", "new", "gpu-worker", "--role", "runner").code == 0
    pem = tmp_path / "worker.pub.pem"
    pem.write_text(run(capsys, "keys", "export", "gpu-worker").out)
    monkeypatch.setenv("LEDGER_KEYS", str(key_dir))
    # The worker's key speaks for the Ray nodes' host (here, this one).
    add = ("keys", "add", str(pem), "--name", "gpu-worker", "--role", "runner")
    assert run(capsys, *add, "--host", socket.gethostname()).code == 0
    tokens = tmp_path / "tokens"
    host = new_token("gpu-host", tokens, ["runner", "read"])
    runner_only = new_token("other-host", tokens, ["runner"])
    monkeypatch.setenv("LEDGER_TOKEN", host)
    shim = tmp_path / "nvml-shim"
    shim.mkdir()
    (shim / "pynvml.py").write_text(SHIM)
    srv = start(f"sqlite:///{tmp_path / 'l.db'}", KeyDir(key_dir), tokens=tokens)
    ray.init(
        num_cpus=4,
        num_gpus=2,
        include_dashboard=False,
        log_to_driver=False,
        logging_level=40,  # logging.ERROR
        runtime_env={
            "env_vars": {
                "LEDGER_KEYS": str(worker_keys),
                "LEDGER_OUTBOX": str(tmp_path / "worker-outbox"),
                "LEDGER_TOKEN": host,
                # The workers import the fake as pynvml; the tests package from the tree.
                "PYTHONPATH": f"{shim}:{ROOT}",
                UUIDS_ENV: json.dumps([GPU_A, GPU_B]),
            }
        },
    )
    try:
        with bounded(BOUND_S):
            yield srv, repo, runner_only
    finally:
        ray.shutdown()
        srv.stop()


def _qualify(capsys: pytest.CaptureFixture[str], repo: Path, url: str, *more: str) -> Any:
    return run(
        capsys, "qualify", "--rev", "HEAD", "--repo", str(repo), "--executor", "ray",
        "--server", url, "--key", "gpu-worker", "--json", *more,
    )  # fmt: skip


def _runners(capsys: pytest.CaptureFixture[str], out: str) -> list[dict[str, Any]]:
    return [
        json.loads(run(capsys, "show", x["id"], "--json").out)["statement"]["predicate"]["runner"]
        for x in json.loads(out)["receipts"]
    ]


def test_ray_claims_avoid_the_gpu_the_servers_fleet_quarantines(
    tmp_path: Path,
    ledger_env: Path,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with sick_fleet(tmp_path, key_dir, [GPU_B], monkeypatch, capsys) as (srv, repo, runner_only):
        monkeypatch.setenv("LEDGER_QUARANTINE_ABOVE", "0.3")
        r = _qualify(capsys, repo, srv.url)
        assert r.code == 0, r.err
        # Named once, by the driver, with the figure and the bound that decided.
        skipped = (
            f"gpu 1 on node {socket.gethostname()} ({GPU_B}) quarantined: fault rate >= "
            "0.342 > 0.3: skipped"
        )
        assert r.err.count(skipped) == 1, r.err
        assert "not applied" not in r.err and "circuit breaker" not in r.err
        runners = _runners(capsys, r.out)
        assert len(runners) == 4
        for x in runners:
            # Every claim on the other GPU, and every receipt says what quarantine did.
            assert x["gpu_uuids"] == [GPU_A], x
            assert x["environment"]["executor_devices"] == "0"
            assert x["environment"]["quarantine_skipped"] == skipped

        # A token without the read role: the run says quarantine was not applied, and why.
        monkeypatch.setenv("LEDGER_TOKEN", runner_only)
        r = _qualify(capsys, repo, srv.url, "--claim", "c0")
        assert r.code == 0, r.err
        assert "quarantine: the server's fleet could not be read" in r.err
        assert "lacks the 'read' role" in r.err and "; not applied" in r.err
        [x] = _runners(capsys, r.out)
        assert "lacks the 'read' role" in x["environment"]["quarantine_not_applied"]


def test_on_ray_the_breaker_reports_a_node_whose_every_gpu_is_above_the_bound(
    tmp_path: Path,
    ledger_env: Path,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with sick_fleet(tmp_path, key_dir, [GPU_A, GPU_B], monkeypatch, capsys) as (srv, repo, _):
        monkeypatch.setenv("LEDGER_QUARANTINE_ABOVE", "0.3")
        monkeypatch.setenv("LEDGER_QUARANTINE_MAX_SHARE", "0.5")
        r = _qualify(capsys, repo, srv.url)
        assert r.code == 0, r.err
        host = socket.gethostname()
        breaker = (
            f"quarantine: circuit breaker: 2 of 2 of node {host}'s devices are above the bound, "
            "more than the share 0.5 (LEDGER_QUARANTINE_MAX_SHARE) quarantine may take at "
            "once: reported, none skipped"
        )
        assert r.err.count(breaker) == 1, r.err
        for i, uuid in enumerate((GPU_A, GPU_B)):
            assert (
                f"gpu {i} on node {host} ({uuid}) above the quarantine bound: fault rate >= "
                in (r.err)
            )
        assert ": skipped" not in r.err
        # A fresh worker loads what runs a claim while its fork servers start, not after.
        assert "(runners.claim.isolated, torch) loaded here meanwhile)" in r.err, r.err
        runners = _runners(capsys, r.out)
        assert len(runners) == 4
        for x in runners:
            # None held back: each claim where Ray placed it, on either GPU.
            assert x["environment"]["executor_devices"] in ("0", "1")
            assert x["environment"]["quarantine_breaker"] == breaker
            assert x["environment"]["quarantine_reported"].count("above the quarantine bound") == 2


def test_a_task_placed_on_a_quarantined_gpu_declines_it(gpus: list[FakeDevice]) -> None:
    from ledger.execution.ray_quarantine import declined

    payload = {"quarantine": {"avoid": {GPU_B: "gpu 1 on node n (GPU-b...) quarantined"}}}
    # Ray's GPU ids are NVML's indices on the task's node: 1 is GPU_B, 0 is GPU_A.
    assert declined(payload, ["1"]) == "gpu 1 on node n (GPU-b...) quarantined"
    assert declined(payload, ["0"]) == ""
    assert declined({"quarantine": {"avoid": {}}}, ["1"]) == ""


def test_a_claim_wider_than_every_nodes_gpus_outside_quarantine_is_not_run_and_said() -> None:
    from ledger.execution.claimrun import ClaimRun
    from ledger.execution.ray_quarantine import Quarantine

    runs = [
        ClaimRun(
            index=i,
            claim=f"w{w}",
            check="cleanup",
            workload_ref="",
            world_size=w,
            timeout_s=60,
            device="cpu",
        )
        for i, w in ((1, 1), (2, 2))
    ]
    said: list[str] = []
    assert Quarantine().unplaceable(runs, said.append) == set()  # nothing held
    q = Quarantine(avoid={GPU_B: "skipped"}, widest=1)
    assert q.unplaceable(runs, said.append) == {2}
    line = (
        "w2: not run: it needs 2 GPUs on one node and no node has 2 outside quarantine "
        "(the widest has 1), and quarantined GPUs are held for this run"
    )
    assert said == [f"[2/2] {line}"]
    assert q.facts == {"quarantine_not_run": line}
    assert q.payload()["facts"] == q.facts  # what every claim's task carries
