"""Whose failure it is, on a real GPU, offline.

`scripts/device_baseline.sh` on an H100 host (driver 580.159.04), 2026-12-05: two
example repositories whose PR 1 fails admission on the GPU (`scripts/baseline_repos.py`:
a 1 GiB scratch buffer in each block's forward that the estimator never predicts). In
``introduced`` the PR's head plants it and the base passes; in ``base-too`` the base
has it already. Each was qualified twice (`--gpus all`, admission only): the first run
judged the base on the same GPU, the second reused that receipt. No H200 was lent
that day.

The label each status carries is recomputed here from the ledger's signed receipts
alone (`ledger.qualification.attribution`), so a label no receipt supports fails.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from ledger.identity.revision import Revision
from ledger.qualification.attribution import attribute
from ledger.read.evidence import read_evidence
from ledger.store.store import Store
from ledger.transparency.audit import audit

RUN = Path(__file__).resolve().parents[3] / "evidence" / "h100-baseline"
CLAIM = "admission.no-oom-after-admit"
CASES = {"introduced": "passed", "base-too": "failed"}


def _doc(name: str) -> Any:
    return json.loads((RUN / name).read_text())


def _gpu() -> str:
    [row] = (RUN / "nvidia-smi.csv").read_text().splitlines()[1:]
    return row.split(", ")[1]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    copy = tmp_path_factory.mktemp("baseline") / "ledger.db"
    shutil.copy(RUN / "ledger.db", copy)  # opening a ledger may write
    return Store.open(f"sqlite:///{copy}")


def test_the_ledger_audits_clean_but_for_the_artifacts_left_on_the_host(store: Store) -> None:
    # The receipts' artifact files (health snapshots, shape tables) stayed on the GPU
    # host; everything else the audit checks holds.
    rep = audit(store)
    assert rep.entries == 10
    assert all(p.startswith("artifact ") and ": no artifact sha256:" in p for p in rep.problems)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_base_ran_once_on_the_same_gpu_and_was_reused(case: str) -> None:
    base, head = (RUN / f"{case}-commits.txt").read_text().split()
    first, second = (_doc(f"{case}-qualify-{n}.json") for n in (1, 2))
    for run in (first, second):
        assert [r["outcome"] for r in run["receipts"]] == ["failed"]
        assert json.loads((RUN / f"{case}-qualify-1-wall.json").read_text())["exit"] == 1
    [ran], [again] = first["baseline"], second["baseline"]
    assert (ran["commit"], ran["outcome"], ran["reused"]) == (base, CASES[case], False)
    assert (again["id"], again["reused"]) == (ran["id"], True)
    assert "baseline: running" in (RUN / f"{case}-qualify-1.log").read_text()
    assert "baseline: running" not in (RUN / f"{case}-qualify-2.log").read_text()
    assert head != base


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_label_is_what_the_signed_receipts_say(case: str, store: Store) -> None:
    base, head = (RUN / f"{case}-commits.txt").read_text().split()
    status = _doc(f"{case}-status.json")
    [blocker] = [b for b in status["verdict"]["blockers"] if b["claim"] == CLAIM]
    said = blocker["attribution"]
    assert blocker["state"] == "failed"  # the label explains; it never unblocks
    assert said["label"] == ("introduced" if case == "introduced" else "base-too")
    assert said["device"] == _gpu() and said["base_commit"] == base
    assert said["base_receipt"] == _doc(f"{case}-qualify-1.json")["baseline"][0]["id"]
    # Recomputed from the ledger alone: the head's receipts and the base commit's.
    repo = status["subject"]["repo"]
    [claim] = [c for c in status["verdict"]["claims"] if c["claim"] == CLAIM]
    head_ev = read_evidence(store, Revision(repo=repo, commit=head, tree=""), [CLAIM]).receipts
    base_ev = read_evidence(store, Revision(repo=repo, commit=base, tree=""), [CLAIM]).receipts
    got = attribute(CLAIM, "admission", claim["scope"], head_ev, base_ev)
    assert got is not None
    # The same label today; receipts from before the base branch was recorded say so.
    now = got.to_json()
    assert {k: now[k] for k in said if k != "text"} == {
        k: v for k, v in said.items() if k != "text"
    }
    assert now["text"] == said["text"] + (
        "; the base is the merge-base with the default branch (the head's receipt names no "
        "base branch)"
    )
    assert now["base_branch"] is None and now["base_receipts"] == [said["base_receipt"]]
    # Every receipt names the GPU it ran on, as the host read it through NVML.
    assert {tuple(r.predicate.runner.gpu_uuids) for r in (*head_ev, *base_ev)} == {(_gpu(),)}
    text = (RUN / f"{case}-status.txt").read_text()
    assert f"baseline: {said['text'][:40]}" in " ".join(text.split())
