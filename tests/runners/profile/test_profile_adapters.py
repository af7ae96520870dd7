"""`ledger profile` on both ready adapters (`runners.adapt.library`), with a team's
estimator and without one (then the built-in estimator's bound, point and
calibration are reported beside the measured peak)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ledger.cli.estimate import _render_profile
from tests.ledger.helpers import run

TEAM = """
import torch

def build(width):
    layers = [torch.nn.Linear(4, width), torch.nn.GELU(), torch.nn.Linear(width, 1)]
    return torch.nn.Sequential(*layers)

def loss(model, batch):
    return ((model(batch["x"]).squeeze(-1) - batch["y"]) ** 2).mean()

def batch(shape, seed):
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(shape.batch * shape.seq, 4, generator=g),
            "y": torch.randn(shape.batch * shape.seq, generator=g)}

def estimate(params, shape, phase, device_kind, *, cold):
    return 1 << 20
"""

GPT2 = {"n_embd": 16, "n_layer": 1, "n_head": 2, "vocab_size": 64, "n_positions": 32}
GPT2.update(bos_token_id=0, eos_token_id=0)

ADAPTERS = {
    "causal_lm": [
        "--param",
        "model_type=gpt2",
        "--param",
        f"config={json.dumps(GPT2)}",
    ],
    "module": [
        "--param",
        "factory=profile_team:build",
        "--param",
        "loss=profile_team:loss",
        "--param",
        "batch=profile_team:batch",
        "--param",
        'factory_params={"width": 8}',
    ],
}


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("team")
    (root / "profile_team.py").write_text(TEAM)
    return root


def _profile(
    capsys: pytest.CaptureFixture[str], team: Path, adapter: str, *extra: str, text: bool = True
) -> tuple[str, dict]:
    """`ledger profile` as a person runs it (its text, when `text`) and as a script does."""
    args = ["profile", "--workload", f"runners.adapt.library:{adapter}", "--shape", "2x8"]
    args += ["--repo", str(team), *ADAPTERS[adapter], *extra]
    out = ""
    if text:
        said = run(capsys, *args)
        assert said.code == 0, said.err
        out = said.out
    doc = run(capsys, *args, "--json")
    assert doc.code == 0, doc.err
    return out, json.loads(doc.out)


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
def test_profile_without_an_estimator_reports_the_builtin_estimate(
    capsys: pytest.CaptureFixture[str],
    team: Path,
    adapter: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LEDGER_CALIBRATION_DIR", str(tmp_path / "calibration"))
    out, doc = _profile(capsys, team, adapter)
    assert doc["measured_increment_bytes"] > 0
    # The built-in estimator predicts: its bound, its point and its calibration.
    assert isinstance(doc["predicted_bytes"], int) and doc["no_estimator"] is None
    assert 0 < doc["point_bytes"] <= doc["predicted_bytes"]
    assert str(doc["calibration"]).startswith("sha256:")
    assert "stated_error" in doc["estimate_terms"]
    assert "measured/predicted" in out and "no estimator" not in out
    assert "Traceback" not in out and "by module:" in out


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
def test_profile_with_an_estimator_reports_the_ratio(
    capsys: pytest.CaptureFixture[str], team: Path, adapter: str
) -> None:
    estimator = ("--param", "estimator=profile_team:estimate")
    _, doc = _profile(capsys, team, adapter, *estimator, text=False)
    assert doc["predicted_bytes"] == 1 << 20
    assert doc["measured_over_predicted"] == doc["measured_increment_bytes"] / (1 << 20)
    assert doc["no_estimator"] is None
    out = _render_profile(doc)  # what the command prints from the same document
    assert "measured/predicted" in out and "no estimator" not in out
