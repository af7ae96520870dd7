"""What `ledger qualify` does with a ready adapter and no estimator, as
docs/workload-protocol.md says it: the built-in estimator predicts (calibrated on
the device), so admission is judged and signed; before the change the whole run
was refused before any claim ran."""

from __future__ import annotations

import json
from pathlib import Path

import git
import pytest

from tests.ledger.helpers import run

ROOT = Path(__file__).resolve().parents[3]

PLAN = """
workload = "runners.adapt.library:module"

[workload_params]
factory = "team:build"
loss = "team:loss"
batch = "team:batch"
factory_params = {{ width = 8 }}

[[claims]]
name = "admission.no-oom-after-admit"
check = "admission"
params = {{ batches = [1], seqs = [4], warm_runs = 0 }}
{required}
"""

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
"""


def _repo(path: Path, required: str) -> Path:
    path.mkdir()
    (path / "qualification.toml").write_text(PLAN.format(required=required))
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
    assert run(capsys, "init").code == 0
    assert run(capsys, "keys", "new", "runner", "--role", "runner").code == 0


def _qualify(capsys: pytest.CaptureFixture[str], repo: Path) -> tuple[int, str]:
    r = run(capsys, "qualify", "--rev", "HEAD", "--repo", str(repo), "--device", "cpu", "--json")
    return r.code, r.err


@pytest.mark.usefixtures("ledger_env")
def test_qualify_without_an_estimator_judges_admission_on_the_builtin_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LEDGER_CALIBRATION_DIR", str(tmp_path / "calibration"))
    docs = " ".join((ROOT / "docs" / "workload-protocol.md").read_text().split())
    assert 'names none, or names `estimator = "builtin"`, by the built-in estimator' in docs

    code, err = _qualify(capsys, _repo(tmp_path / "required", ""))
    assert code == 0, err
    assert "refused before any receipt was recorded" not in err
    assert "1 claim(s): 1 can be judged (1 on the built-in estimator), 0 cannot" in err
    where = ("--rev", "HEAD", "--repo", str(tmp_path / "required"), "--json")
    history = json.loads(run(capsys, "history", *where).out)
    [entry] = history["entries"]
    shown = json.loads(run(capsys, "show", entry["id"], "--json").out)
    predicate = shown["statement"]["predicate"]
    assert predicate["outcome"] == "passed", predicate.get("reason")
    rows = predicate["measurements"]["shapes"]
    assert rows and all(str(r["calibration"]).startswith("sha256:") for r in rows)
    assert all(r["point_bytes"] <= r["predicted_bytes"] for r in rows)
