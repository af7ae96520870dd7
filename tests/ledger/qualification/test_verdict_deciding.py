"""The judge decides each claim's deciding figure once (`ClaimVerdict.deciding`): the
verdict of a failed admission claim carries the figure of its counterexample, with its
bound, as the receipt page, `ledger show` and the PR page's blocker link say it, and
`status --json` gives it (validating against schemas/status.schema.json). A real git
repository, a real SQLite ledger and server; a receipt attested as another harness
would, failed for looseness, so its deciding figure is the least ratio, not the worst."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import git
import httpx
import jsonschema
import pytest

from ledger.evidence.schemas import ROOT
from ledger.evidence.status import StatusDocument
from ledger.qualification.deciding import deciding_of
from ledger.service.run import start
from tests.conftest import commit_file
from tests.ledger.helpers import run

CLAIM = "admission.loose"
PLAN = f"""
[[claims]]
name = "{CLAIM}"
check = "admission"
cleanup = false
"""
SAID = "least measured/predicted 0.0147x < bound 0.25x"


def _shape(shape: str, ratio: float) -> dict[str, Any]:
    predicted = 1 << 30
    return {
        "shape": shape,
        "phase": "forward",
        "admitted": True,
        "counterexample": False,
        "predicted_bytes": predicted,
        "measured_bytes": int(predicted * ratio),
        "measured_over_predicted": ratio,
        "run": "r1",
    }


MEASUREMENTS = {
    "shapes": [_shape("1x16", 0.0147), _shape("2x16", 0.0188)],
    "max_measured_over_predicted": 0.0188,
    "min_measured_over_predicted": 0.0147,
    "process_peak_bytes": 490 << 20,
}


def _same(d: dict[str, Any]) -> tuple[Any, ...]:
    return (d["key"], d["value"], d["bound"], d["text"], d["said"])


def test_a_failed_admission_claims_verdict_carries_the_deciding_figure_its_receipt_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    db = f"sqlite:///{tmp_path / 'l.db'}"
    monkeypatch.setenv("LEDGER_DB", db)
    monkeypatch.setenv("LEDGER_KEYS", str(tmp_path / "keys"))
    for args in (("init",), ("keys", "new", "gpu", "--role", "runner")):
        assert run(capsys, *args).code == 0
    r = git.Repo.init(tmp_path / "up", initial_branch="main")
    commit_file(r, "qualification.toml", PLAN, "plan")
    r.git.checkout("-b", "feature")
    r.git.update_ref("refs/pull/4/head", commit_file(r, "model.py", "x = 1\n", "pr head"))
    m = tmp_path / "m.json"
    m.write_text(json.dumps(MEASUREMENTS))
    repo_dir = str(r.working_tree_dir)
    common = ("--repo", repo_dir, "--offline", "--pr", "4")
    attested = run(
        capsys,
        *("attest", *common, "--key", "gpu", "--claim", CLAIM, "--measurements", str(m)),
        *("--scope", "device_kind=cuda", "--outcome", "failed"),
        *("--param", "min_measured_over_predicted=0.25", "--reason", "too loose"),
    )
    assert attested.code == 0, attested.err
    rid = attested.out.strip()
    r.git.checkout("main")

    # The verdict, as `status --json` gives it: the claim and its blocker carry it.
    st = run(capsys, "status", *common, "--json")
    doc = json.loads(st.out)
    jsonschema.validate(doc, json.loads((ROOT / "status.schema.json").read_text()))
    StatusDocument.model_validate(doc)
    (claim,) = [c for c in doc["verdict"]["claims"] if c["claim"] == CLAIM]
    assert claim["state"] == "failed" and claim["receipts"][0]["id"] == rid
    decided = claim["deciding"]
    assert decided is not None, claim
    assert _same(decided) == ("least-ratio", 0.0147, 0.25, "0.0147x", SAID)
    assert decided["direction"] == "min" and decided["past"] is True
    (blocker,) = doc["verdict"]["blockers"]
    assert blocker["deciding"] == decided

    # The receipt as `ledger show` reads it: the same figure from the signed predicate.
    shown = json.loads(run(capsys, "show", rid, "--json").out)
    of_receipt = deciding_of(shown["statement"]["predicate"])
    assert of_receipt is not None and of_receipt.to_json() == decided
    assert f"decided by {SAID}" in " ".join(run(capsys, "show", rid).out.split())

    # The receipt page and the PR page's blocker link say it in the same words.
    srv = start(db, None, mirrors=[Path(repo_dir)])
    try:
        html_ = {"Accept": "text/html"}
        page = httpx.get(f"{srv.url}/receipt/{rid}", headers=html_).text
        means = html.unescape(page.split('<p class="meaning">', 1)[1].split("</p>", 1)[0])
        assert f'data-figure="least-ratio" data-past="true">{SAID}</em>' in means
        pr = httpx.get(
            f"{srv.url}/pr", params={"repo": doc["subject"]["repo"], "pr": 4}, headers=html_
        ).text
        link = re.search(rf'data-trend="{re.escape(CLAIM)}" data-figure="([^"]+)">([^<]+)</a>', pr)
        assert link is not None, pr
        assert link.group(1) == "least-ratio" and SAID in html.unescape(link.group(2))
    finally:
        srv.stop()
