"""`ledger qualify --profile NAME`: the profile sizes the run and is recorded in the scope."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scripts.example_repo import make_example_repo
from tests.ledger.helpers import run

PLAN = """
workload = "model.workload:make_workload"
[workload_params]
d_model = 64

[profiles.tiny]
workload_params = { d_model = 32 }
[profiles.tiny.claims."cleanup.all-released"]
params = { batch = 1, seq = 8 }

[[claims]]
name = "cleanup.all-released"
check = "cleanup"
params = { batch = 2, seq = 32 }
workload_params = { n_layers = 1 }
"""


def test_qualify_with_a_profile_records_it_and_status_counts_it(
    tmp_path: Path,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("LEDGER_DB", str(tmp_path / "l.db"))
    assert run(capsys, "init").code == 0
    assert run(capsys, "keys", "new", "runner", "--role", "runner").code == 0
    repo = make_example_repo(tmp_path / "repo").path
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN)
    common = ("--pr", "1", "--repo", str(repo), "--plan", str(plan))
    r = run(capsys, "qualify", *common, "--profile", "tiny", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["status"]["qualified"] is True
    shown = json.loads(run(capsys, "show", doc["receipts"][0]["id"], "--json").out)
    pred = shown["statement"]["predicate"]
    assert pred["scope"]["profile"] == "tiny"
    assert pred["check"]["parameters"]["batch"] == 1 and pred["check"]["parameters"]["seq"] == 8
    # The plan's own parameters (batch 2) are not what ran: the profile is what counts.
    assert run(capsys, "status", *common).code == 0
    r = run(capsys, "qualify", *common, "--profile", "nope")
    assert r.code == 1 and "no profile 'nope'" in r.err
