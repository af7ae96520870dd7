"""A failure only one GPU shows, at the head and at the base alike, while the same
claim passes on another: labelled as that GPU's, with what the fleet counts there
(`tests/ledger/execution/test_baseline.py` has the other labels)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.ledger.execution.test_baseline import _label, _pr_repo, _qualify
from tests.ledger.fleet.conftest import GPU_A, GPU_B
from tests.ledger.fleet.fake_nvml import FakeDevice
from tests.ledger.helpers import run


def test_a_failure_only_one_gpu_shows_is_that_gpus(
    tmp_path: Path,
    ledger_env: Path,
    gpus: list[FakeDevice],
    capsys: pytest.CaptureFixture[str],
) -> None:
    # On GPU 1 the workload's forward fails, on GPU 0 it passes, at the head and at
    # the base alike. GPU 1 also had a row remap pending once: a fault no code causes,
    # recorded in the fleet by a run that ended in infra-error.
    repo, base, _ = _pr_repo(tmp_path / "repo", "oom-on-1", "oom-on-1")
    r0, doc0 = _qualify(capsys, repo, "--gpus", "0")
    assert r0.code == 0, r0.err
    assert doc0["baseline"] == []  # nothing failed: nothing of the base runs
    gpus[1].readings["remapped"] = (0, 0, 1, 0)
    sick, _ = _qualify(capsys, repo, "--gpus", "1")
    assert "GPU fault the code under test cannot cause" in sick.err
    assert "baseline: running" not in sick.err  # an infra-error blames no code
    gpus[1].readings["remapped"] = (0, 0, 0, 0)
    r1, doc1 = _qualify(capsys, repo, "--gpus", "1")
    assert r1.code == 1, r1.err
    [ran] = doc1["baseline"]
    assert ran["outcome"] == "failed" and ran["commit"] == base
    assert f"baseline: running r on the base {base[:12]} (the same device, {GPU_B})" in r1.err
    a = _label(doc1)
    assert a["label"] == "device-only", a
    assert a["device"] == GPU_B and a["passes_on"] == GPU_A
    assert a["text"].startswith(f"fails only on {GPU_B}: the base {base[:12]} fails there")
    # Counted in the fleet: the figures `ledger fleet` keeps for the device.
    counted = "the fleet counts 2 failed and 1 infra-error of 3 claim runs on it, 1 with a device"
    assert counted in a["text"], a["text"]
    fleet = json.loads(run(capsys, "fleet", "--json").out)
    [dev] = [d for d in fleet["devices"] if d["uuid"] == GPU_B]
    assert (dev["runs"], dev["failures"], dev["infra_errors"]) == (3, 2, 1)
    # The label explains; the claim stays failed on the head's evidence.
    assert doc1["status"]["verdict"]["blockers"][0]["state"] == "failed"
