"""The optimizer step as a phase admission judges where a plan asks for it
(``phases = ["optimizer_step"]``): the built-in estimator predicts it from the model's
bytes (the optimizer's state, created by the first step, and the step's temporaries),
the check measures the step alone (the gradients made before its window), cold and
warm, and holds it to the prediction. A plan that names no phase runs the two it did."""

from __future__ import annotations

from pathlib import Path

import pytest

from runners.api import run_claim
from runners.checks.admission import Params
from runners.contract.result import CheckResult, Json

TEAM = """
import torch

def build(width):
    layers = [torch.nn.Linear(16, width), torch.nn.ReLU(), torch.nn.Linear(width, 1)]
    return torch.nn.Sequential(*layers)

def loss(model, batch):
    return ((model(batch["x"]).squeeze(-1) - batch["y"]) ** 2).mean()

def batch(shape, seed):
    g = torch.Generator().manual_seed(seed)
    n = shape.batch * shape.seq
    return {"x": torch.randn(n, 16, generator=g), "y": torch.randn(n, generator=g)}
"""

PARAMS: dict[str, Json] = {
    "factory": "opt_team:build",
    "loss": "opt_team:loss",
    "batch": "opt_team:batch",
    "factory_params": {"width": 64},
}


def _admission(root: Path, given: dict[str, Json]) -> CheckResult:
    [r] = run_claim(
        claim="admission.x",
        check="admission",
        params=given,
        repo_root=root,
        workload_ref="runners.adapt.library:module",
        workload_params=PARAMS,
        device="cpu",
        observer_off_required=False,
        base_root=None,
        progress=lambda _m: None,
    )
    return r


@pytest.fixture
def team(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "opt_team.py").write_text(TEAM)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("LEDGER_CALIBRATION_DIR", str(tmp_path / "calibration"))
    return tmp_path


def test_the_optimizer_step_is_predicted_measured_and_held_to_its_bound(team: Path) -> None:
    given: dict[str, Json] = {
        "batches": [1, 2],
        "seqs": [4],
        "phases": ["optimizer_step"],
        "warm_runs": 1,
        "pressure": "none",
        "budget_bytes": 1 << 30,
    }
    r = _admission(team, given)
    assert r.outcome == "passed", r.reason
    rows = [x for x in r.measurements["shapes"] if isinstance(x, dict)]  # type: ignore[union-attr]
    assert {x["phase"] for x in rows} == {"optimizer_step"}
    assert all(x["admitted"] and x["counterexample"] is False for x in rows)
    # AdamW's two moments of 16x64 + 64 + 64 + 1 float32 parameters, and a step counter
    # each: the first step makes them (cold), the later ones only their temporaries.
    trainable = (16 * 64 + 64 + 64 + 1) * 4
    state = 2 * trainable + 4 * 4
    cold, *warm = rows
    assert cold["cold"] is True and isinstance(cold["measured_bytes"], int)
    assert cold["measured_bytes"] >= state
    assert all(isinstance(x["measured_bytes"], int) and x["measured_bytes"] < state for x in warm)
    assert all(x["measured_bytes"] <= x["predicted_bytes"] for x in rows)  # type: ignore[operator]


def test_a_plan_that_names_no_phase_runs_the_two_it_did() -> None:
    assert Params().phases == ["forward_nograd", "forward_backward"]
