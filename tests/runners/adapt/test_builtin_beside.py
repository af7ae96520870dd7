"""The built-in estimator beside a team's: a plan with its own ``estimator`` and
``builtin_beside = true`` records the built-in prediction (bound, point, calibration)
on each admission row, while the team's estimate decides; a plan without the key
reads as it did (no built-in figures, the same workload digest)."""

from __future__ import annotations

import json
from pathlib import Path

import git
import pytest
import torch

from runners.adapt.library import ModuleAdapter
from runners.protocol import Shape
from tests.ledger.helpers import run

TEAM = """
import torch

def build(width):
    return torch.nn.Sequential(torch.nn.Linear(4, width), torch.nn.Linear(width, 1))

def loss(model, batch):
    return ((model(batch["x"]).squeeze(-1) - batch["y"]) ** 2).mean()

def batch(shape, seed):
    g = torch.Generator().manual_seed(seed)
    n = shape.batch * shape.seq
    return {"x": torch.randn(n, 4, generator=g), "y": torch.randn(n, generator=g)}

def estimate(params, shape, phase, device_kind, cold=False):
    # Generous on purpose: whatever the step costs, well under a mebibyte here.
    return 1 << 20
"""

PLAN = """
workload = "runners.adapt.library:module"

[workload_params]
factory = "team:build"
loss = "team:loss"
batch = "team:batch"
estimator = "team:estimate"
factory_params = {{ width = 8 }}
{extra}

[[claims]]
name = "admission.no-oom-after-admit"
check = "admission"
params = {{ batches = [1, 2], seqs = [4], warm_runs = 0, budget_bytes = 268435456 }}
"""


def _repo(path: Path, extra: str) -> Path:
    path.mkdir()
    (path / "qualification.toml").write_text(PLAN.format(extra=extra))
    (path / "team.py").write_text(TEAM)
    repo = git.Repo.init(path)
    repo.index.add(["qualification.toml", "team.py"])
    actor = git.Actor("T", "t@example.invalid")
    repo.index.commit("plan", author=actor, committer=actor)
    return path


@pytest.fixture
def ledger_env(
    tmp_path: Path,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("LEDGER_DB", str(tmp_path / "l.db"))
    monkeypatch.setenv("LEDGER_CALIBRATION_DIR", str(tmp_path / "calibration"))
    assert run(capsys, "init").code == 0
    assert run(capsys, "keys", "new", "runner", "--role", "runner").code == 0


def _rows(capsys: pytest.CaptureFixture[str], repo: Path) -> list[dict[str, object]]:
    r = run(capsys, "qualify", "--rev", "HEAD", "--repo", str(repo), "--device", "cpu")
    assert r.code == 0, r.err
    where = ("--rev", "HEAD", "--repo", str(repo), "--json")
    [entry] = json.loads(run(capsys, "history", *where).out)["entries"]
    shown = json.loads(run(capsys, "show", entry["id"], "--json").out)
    predicate = shown["statement"]["predicate"]
    assert predicate["outcome"] == "passed", predicate.get("reason")
    rows: list[dict[str, object]] = predicate["measurements"]["shapes"]
    assert rows
    return rows


@pytest.mark.usefixtures("ledger_env")
def test_the_builtin_prediction_is_recorded_beside_the_teams(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _rows(capsys, _repo(tmp_path / "beside", "builtin_beside = true"))
    for r in rows:
        # The team's estimate decides ...
        assert r["predicted_bytes"] == 1 << 20 and "calibration" not in r
        # ... and the built-in one's bound, point and fit are there beside it.
        builtin, point = r["builtin_predicted_bytes"], r["builtin_point_bytes"]
        assert isinstance(builtin, int) and isinstance(point, int)
        assert 0 < point <= builtin < 1 << 20
        assert str(r["builtin_calibration"]).startswith("sha256:")
        assert isinstance(r["measured_bytes"], int) and r["measured_bytes"] <= builtin


@pytest.mark.usefixtures("ledger_env")
def test_a_plan_without_the_key_reads_as_before(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _rows(capsys, _repo(tmp_path / "plain", ""))
    assert all(not any(k.startswith("builtin_") for k in r) for r in rows)
    assert all(r["predicted_bytes"] == 1 << 20 for r in rows)


def test_the_key_changes_no_digest_where_it_is_not_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "team.py").write_text(TEAM)
    monkeypatch.syspath_prepend(str(tmp_path))
    refs = {"factory": "team:build", "loss": "team:loss", "batch": "team:batch"}
    common = {**refs, "factory_params": {"width": 8}, "estimator": "team:estimate"}
    plain = ModuleAdapter(**common)  # type: ignore[arg-type]
    off = ModuleAdapter(**common, builtin_beside=False)  # type: ignore[arg-type]
    on = ModuleAdapter(**common, builtin_beside=True)  # type: ignore[arg-type]
    assert plain.digest() == off.digest() != on.digest()
    # Before setup (as doctor asks) the team's estimate alone: nothing to calibrate yet.
    early = on.estimate(Shape(batch=1, seq=4), "forward_backward")
    assert early.predicted_bytes == 1 << 20 and early.builtin is None
    on.setup(torch.device("cpu"), 0)
    plain.setup(torch.device("cpu"), 0)
    d = on.admit(Shape(batch=1, seq=4), "forward_backward", 1 << 30)
    assert d.predicted_bytes == 1 << 20 and d.builtin is not None
    assert d.measurements()["builtin_predicted_bytes"] == d.builtin.predicted_bytes
    alone = plain.admit(Shape(batch=1, seq=4), "forward_backward", 1 << 30)
    assert alone.builtin is None and "builtin_predicted_bytes" not in alone.measurements()


def test_the_calibration_check_signs_the_fit_recorded_beside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the built-in estimator only stood beside a team's, the calibration check
    said there was nothing to calibrate, though its fit is named on every admission row."""
    from runners.api import run_claim

    (tmp_path / "team.py").write_text(TEAM)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("LEDGER_CALIBRATION_DIR", str(tmp_path / "calibration"))
    refs = {"factory": "team:build", "loss": "team:loss", "batch": "team:batch"}
    params = {**refs, "factory_params": {"width": 8}, "estimator": "team:estimate"}
    [r] = run_claim(
        claim="estimator-calibration.x",
        check="estimator-calibration",
        params={},
        repo_root=tmp_path,
        workload_ref="runners.adapt.library:module",
        workload_params={**params, "builtin_beside": True},
        device="cpu",
        observer_off_required=False,
        base_root=None,
        progress=lambda _m: None,
    )
    assert r.outcome == "passed", r.reason
    assert str(r.measurements["calibration"]).startswith("sha256:")
