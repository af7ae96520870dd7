"""`ledger qualify` end to end with a multi-rank plan (2 gloo ranks) and per-claim timeouts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import git
import pytest

from scripts.example_repo import MULTI_RANK_PLAN_FILE, make_example_repo
from tests.conftest import commit_file
from tests.ledger.helpers import run

HANG = "import time\n\n\ndef make_workload(**params):\n    time.sleep(600)\n"
HANG_PLAN = """\
workload = "model.workload:make_workload"

[[claims]]
name = "hangs"
check = "cleanup"
workload = "model.hang:make_workload"
timeout_s = 3

[[claims]]
name = "cleanup.all-released"
check = "cleanup"
params = { batch = 1, seq = 8 }
"""


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


def _predicate(capsys: pytest.CaptureFixture[str], rid: str) -> dict[str, Any]:
    shown = run(capsys, "show", rid, "--json")
    assert shown.code == 0, shown.err
    p: dict[str, Any] = json.loads(shown.out)["statement"]["predicate"]
    return p


def test_a_claim_past_its_timeout_is_killed_and_the_next_claim_runs(
    ledger_env: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ex = make_example_repo(tmp_path / "repo", with_remote=False)
    repo = git.Repo(ex.path)
    commit_file(repo, "model/hang.py", HANG, "a workload that hangs")
    plan = tmp_path / "hang.toml"
    plan.write_text(HANG_PLAN)
    r = run(
        capsys,
        "qualify",
        "--rev",
        "main",
        "--repo",
        str(ex.path),
        "--plan",
        str(plan),
        "--device",
        "cpu",
        "--json",
    )
    doc = json.loads(r.out)
    outcomes = [(x["claim"], x["outcome"]) for x in doc["receipts"]]
    assert outcomes == [("hangs", "failed"), ("cleanup.all-released", "passed")], r.err
    hung = _predicate(capsys, doc["receipts"][0]["id"])
    assert hung["reason"].startswith("timed out after 3 s")


@pytest.mark.slow
def test_two_gloo_ranks_qualify_the_expert_parallel_workload(
    ledger_env: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ex = make_example_repo(tmp_path / "repo", with_remote=False, multi_rank=True)
    claims = [
        "ep2.admission.no-oom-after-admit",
        "ep2.regression.24view-nograd",
        "ep2.backward.full-prefix",
        "ep2.cleanup.all-released",
    ]
    r = run(
        capsys,
        "qualify",
        "--rev",
        "main",
        "--repo",
        str(ex.path),
        "--plan",
        str(ex.path / MULTI_RANK_PLAN_FILE),
        "--device",
        "cpu",
        *[x for c in claims for x in ("--claim", c)],
        "--json",
    )
    # A subset ran: the exit status follows the whole plan (the mesh claim is not run).
    assert r.code == 1, r.err
    doc = json.loads(r.out)
    assert [x["outcome"] for x in doc["receipts"]] == ["passed"] * 4, r.err
    for rec in doc["receipts"]:
        p = _predicate(capsys, rec["id"])
        assert p["scope"]["world_size"] == 2 and p["scope"]["workload"] == "moe-lora-ep"
        # Both ranks ran sandboxed, rendezvousing over a loopback only they share.
        assert (p["scope"]["sandbox"], p["scope"]["network"]) == ("bwrap", "off")
        ranks = p["measurements"]["ranks"]
        assert [m["rank"] for m in ranks] == [0, 1]
        assert all(m["process_group"]["backend"] == "gloo" for m in ranks)
        groups = [x for x in p["cleanup"]["resources"] if x["kind"] == "dist-group"]
        assert [g["id"] for g in groups] == ["rank0:default-gloo", "rank1:default-gloo"]
        assert all(g["released"] for g in groups) and p["cleanup"]["complete"]
        if p["check"]["name"] == "admission":
            # Every rank decided on the agreed figures: MAX required, MIN usable.
            for m in ranks:
                rows = [x for x in m["shapes"] if "rank_predicted_bytes" in x]
                assert rows and all(x["predicted_bytes"] >= x["rank_predicted_bytes"] for x in rows)
                assert all(x["usable_bytes"] <= x["rank_usable_bytes"] for x in rows)
            assert sum(m["admitted_count"] for m in ranks) > 0
