"""A ledger with a runner key, and GPUs that exist only as a fake NVML."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.ledger.fleet.fake_nvml import FakeDevice, fake_nvml
from tests.ledger.helpers import run

GPU_A = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
GPU_B = "GPU-bbbbbbbb-0000-0000-0000-000000000000"


@pytest.fixture
def gpus(monkeypatch: pytest.MonkeyPatch) -> list[FakeDevice]:
    """Two H200s as NVML describes them, in this process only (the claim processes,
    which would need a real CUDA device, run on the CPU)."""
    from runners.harness import nvml

    devices = [FakeDevice(GPU_A), FakeDevice(GPU_B)]
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(devices))
    # GPUs seen make qualify probe the workload on CPU first (its doctor); the claims
    # here run on the CPU anyway, and a probe of the OOM mode would refuse the run.
    monkeypatch.setenv("LEDGER_QUALIFY_PROBE", "0")
    monkeypatch.setattr(nvml, "_state", {})  # the harness's cached module
    return devices


def shown(capsys: pytest.CaptureFixture[str], rid: str) -> dict[str, Any]:
    return dict(json.loads(run(capsys, "show", rid, "--json").out)["statement"]["predicate"])


def artifact(capsys: pytest.CaptureFixture[str], tmp: Path, pred: dict[str, Any], name: str) -> Any:
    [a] = [a for a in pred["artifacts"] if a["name"] == name]
    out = tmp / f"{a['digest']['sha256']}.json"
    assert (
        run(capsys, "artifact", "get", "sha256:" + a["digest"]["sha256"], "-o", str(out)).code == 0
    )
    return json.loads(out.read_text())
