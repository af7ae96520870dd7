"""A claim this host cannot run as asked (more ranks than the devices it would be
handed) is decided by the parent before it starts: not run here, with why, nothing
recorded, so nothing reads failed and nothing is run again on the base. The GPU exists
only as a fake NVML (outside the product); the claims that run, run on the CPU."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import git
import pytest

from ledger.execution.claimrun import ClaimRun
from ledger.execution.scheduler import not_here
from tests.ledger.fleet.fake_nvml import FakeDevice, fake_nvml
from tests.ledger.helpers import run
from tests.ledger.probe_repo import claim, make_probe_repo

PR = 7


@pytest.fixture
def one_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    from runners.harness import nvml

    devices = [FakeDevice("GPU-aaaaaaaa-0000-0000-0000-000000000000")]
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(devices))
    monkeypatch.setenv("LEDGER_QUALIFY_PROBE", "0")  # its doctor would probe on CPU first
    monkeypatch.setattr(nvml, "_state", {})


def _run(world_size: int, device: str = "auto") -> ClaimRun:
    return ClaimRun(
        index=1,
        claim="c",
        check="mesh-handoff",
        workload_ref="w:m",
        world_size=world_size,
        timeout_s=60,
        device=device,
    )


@pytest.mark.parametrize(
    ("run_", "explicit", "handed", "visible", "why"),
    [
        (_run(2), False, 1, 1, "it needs 2 CUDA devices (world_size) and this host shows 1"),
        (
            _run(2, "cuda"),
            False,
            1,
            0,
            "it needs 2 CUDA devices (world_size) and this host shows 0",
        ),
        (_run(2), False, 1, 2, None),
        (_run(2), False, 1, 0, None),  # no GPU: its ranks run on the CPU
        (_run(2, "cpu"), False, 1, 1, None),
        (_run(3), True, 2, 2, "it needs 3 devices of its own and --gpus gives 2"),
        (_run(2), True, 2, 2, None),
    ],
)
def test_what_the_host_hands_out_decides(
    run_: ClaimRun, explicit: bool, handed: int, visible: int, why: str | None
) -> None:
    assert not_here(run_, explicit, handed, visible) == why


def test_a_two_rank_claim_on_one_gpu_is_not_run_never_failed_never_on_the_base(
    tmp_path: Path, ledger_env: Path, one_gpu: None, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "repo"
    make_probe_repo(path, claim("mesh.wide", world_size="2") + claim("narrow"))
    repo = git.Repo(path)
    base = repo.head.commit.hexsha
    (path / "notes.txt").write_text("the pull request's change\n")
    repo.index.add(["notes.txt"])
    actor = git.Actor("Probe", "probe@ledger.invalid")
    repo.git.update_ref(
        f"refs/pull/{PR}/head", repo.index.commit("pr", author=actor, committer=actor).hexsha
    )
    repo.git.reset("--hard", base)
    r = run(capsys, "qualify", "--pr", str(PR), "--repo", str(path), "--json")
    doc = json.loads(r.out)
    assert [(x["claim"], x["outcome"]) for x in doc["receipts"]] == [("narrow", "passed")], r.err
    assert doc["not_run_here"] == [
        {
            "claim": "mesh.wide",
            "why": "not run here: it needs 2 CUDA devices (world_size) and this host shows 1",
        }
    ]
    assert "mesh.wide: not run: it needs 2 CUDA devices" in r.err
    assert doc["baseline"] == [] and "baseline: running" not in r.err
    states = {c["claim"]: c["state"] for c in doc["status"]["verdict"]["claims"]}
    assert states == {"mesh.wide": "not-run", "narrow": "qualified"}
    assert r.code == 1, r.err
