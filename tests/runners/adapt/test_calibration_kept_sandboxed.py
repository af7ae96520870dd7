"""The built-in estimator's calibration is kept between sandboxed runs: the second
`ledger qualify` of the same tree on the same device reads the first's fit instead
of measuring again, and a fit written by another tree's sandboxed code is never read.

The sandbox passes no ``LEDGER_*`` variable, its HOME is a scratch folder removed
with the run and its /tmp is private, so a calibration written inside it was lost
with the run: every sandboxed run measured again."""

from __future__ import annotations

import json
from pathlib import Path

import git
import pytest

from ledger.evidence.errors import UsageError
from ledger.sandbox import resolve
from tests.ledger.helpers import run


def _sandboxes() -> bool:
    try:
        resolve("auto")
    except UsageError:
        return False
    return True


pytestmark = pytest.mark.skipif(not _sandboxes(), reason="bubblewrap cannot sandbox here")

PLAN = """
workload = "runners.adapt.library:module"

[workload_params]
factory = "team:build"
loss = "team:loss"
batch = "team:batch"
factory_params = { width = 8 }

[[claims]]
name = "admission.no-oom-after-admit"
check = "admission"
params = { batches = [1], seqs = [4], warm_runs = 0 }
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


def _repo(path: Path, readme: str = "") -> Path:
    path.mkdir()
    (path / "qualification.toml").write_text(PLAN)
    (path / "team.py").write_text(TEAM)
    (path / "README").write_text(readme)
    repo = git.Repo.init(path)
    repo.index.add(["qualification.toml", "team.py", "README"])
    actor = git.Actor("T", "t@example.invalid")
    repo.index.commit("plan", author=actor, committer=actor)
    return path


@pytest.fixture
def ledger_env(
    tmp_path: Path,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Path:
    monkeypatch.setenv("LEDGER_DB", str(tmp_path / "l.db"))
    store = tmp_path / "calibration"
    monkeypatch.setenv("LEDGER_CALIBRATION_DIR", str(store))
    assert run(capsys, "init").code == 0
    assert run(capsys, "keys", "new", "runner", "--role", "runner").code == 0
    return store


def _admission(capsys: pytest.CaptureFixture[str], repo: Path, seen: set[str]) -> dict[str, object]:
    """The admission receipt's measurements of one more sandboxed qualify run (the one
    receipt not in ``seen``, added to it)."""
    r = run(capsys, "qualify", "--rev", "HEAD", "--repo", str(repo), "--device", "cpu")
    assert r.code == 0, r.err
    where = ("--rev", "HEAD", "--repo", str(repo), "--json")
    history = json.loads(run(capsys, "history", *where).out)
    [newest] = [e["id"] for e in history["entries"] if e["id"] not in seen]
    seen.add(newest)
    shown = json.loads(run(capsys, "show", newest, "--json").out)
    predicate = shown["statement"]["predicate"]
    assert predicate["outcome"] == "passed", predicate.get("reason")
    assert predicate["scope"]["sandbox"] == "bwrap"
    m: dict[str, object] = predicate["measurements"]
    return m


def _ids(m: dict[str, object]) -> set[str]:
    rows = m["shapes"]
    assert isinstance(rows, list) and rows
    return {str(r["calibration"]) for r in rows}


def test_a_second_sandboxed_run_reads_the_first_runs_calibration(
    tmp_path: Path, ledger_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo, seen = _repo(tmp_path / "repo"), set[str]()
    first = _admission(capsys, repo, seen)
    assert first["calibration_source"] == "measured"
    second = _admission(capsys, repo, seen)
    # No calibration step ran in the second run: its fit is the first's, by id.
    assert second["calibration_source"] == "cache"
    assert _ids(second) == _ids(first)
    assert len(_ids(first)) == 1


def test_another_trees_calibration_is_never_read(
    tmp_path: Path, ledger_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A tree's sandboxed code could write any fit it likes for any key: another tree
    (here: the same workload, one file apart) measures its own."""
    first = _admission(capsys, _repo(tmp_path / "one", "one"), set())
    assert first["calibration_source"] == "measured"
    other = _admission(capsys, _repo(tmp_path / "two", "two"), set())
    assert other["calibration_source"] == "measured"


TWO = (
    PLAN
    + """
[[claims]]
name = "admission.forward-only"
check = "admission"
params = { batches = [1], seqs = [4], phases = ["forward_nograd"], warm_runs = 0 }
"""
)


def test_the_claims_of_one_sandboxed_run_share_one_calibration(
    tmp_path: Path, ledger_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each claim forked in the sandbox had a scratch HOME of its own: every claim that
    predicted memory calibrated again in the same run."""
    repo = _repo(tmp_path / "two")
    (repo / "qualification.toml").write_text(TWO)
    g = git.Repo(repo)
    g.index.add(["qualification.toml"])
    actor = git.Actor("T", "t@example.invalid")
    g.index.commit("two claims", author=actor, committer=actor)
    r = run(capsys, "qualify", "--rev", "HEAD", "--repo", str(repo), "--device", "cpu")
    assert r.code == 0, r.err
    where = ("--rev", "HEAD", "--repo", str(repo), "--json")
    sources, ids = [], set()
    for entry in json.loads(run(capsys, "history", *where).out)["entries"]:
        shown = json.loads(run(capsys, "show", entry["id"], "--json").out)
        m = shown["statement"]["predicate"]["measurements"]
        sources.append(m["calibration_source"])
        ids |= _ids(m)
    # One claim measured; the other read its fit (claims run one after the other here).
    assert sorted(sources) == ["cache", "measured"]
    assert len(ids) == 1
