"""The status report: its JSON shape and the table for people."""

from __future__ import annotations

import json

from ledger.qualification import STATES, StatusReport
from ledger.read.render import render_table

from .factories import CLAIM, H200, receipt, review, revision
from .helpers import report


def _report() -> StatusReport:
    ok = receipt(seq=1, scope={**H200, "dtype": "bf16"})
    oom = receipt(seq=2, scope={**H200, "dtype": "fp32"}, outcome="failed", reason="CUDA OOM")
    return report([ok, oom], [review(ok, seq=3)], rev=revision(pr=898), reviews=1)


def test_json_shape() -> None:
    doc = _report().to_json()
    assert json.loads(json.dumps(doc)) == doc
    assert set(doc) == {
        "subject",
        "qualified",
        "scope",
        "judged",
        "claims",
        "verdict",
        "problems",
        "governed",
    }
    assert doc["problems"] == []
    assert set(doc["subject"]) == {"repo", "commit", "tree", "package_digest", "pr"}
    assert doc["subject"]["pr"] == 898 and doc["qualified"] is False
    required, *evidence = doc["claims"]
    assert set(required) == {
        "claim", "scope", "scope_role", "state", "receipts", "via", "reasons", "required",
        "in_plan",
    }  # fmt: skip
    assert (required["claim"], required["scope_role"], required["state"]) == (
        CLAIM,
        "required",
        "failed",
    )
    assert required["scope"] == H200 and required["via"] == "commit"
    assert required["receipts"][0].startswith("sha256:")
    assert all(isinstance(r, str) and ": " in r for r in required["reasons"])
    assert [(e["scope"]["dtype"], e["state"]) for e in evidence] == [
        ("bf16", "qualified"),
        ("fp32", "failed"),
    ]
    assert {row["state"] for row in doc["claims"]} <= set(STATES)


def test_terminal_answer_is_headline_blockers_then_one_block_per_claim() -> None:
    rep = _report()
    text = render_table(rep)
    assert text.isascii() and "\x1b" not in text
    lines = text.splitlines()
    assert lines[0] == "not qualified: 0 of 1 required claims qualified"
    assert "PR #898" in lines[1]
    assert lines.index("Blocking:") < lines.index("Claims:")
    assert max(len(line) for line in lines) <= 80
    # Every line under a claim is indented: nothing wraps back to column 0.
    claims_at = lines.index("Claims:")
    body = [line for line in lines[claims_at + 1 :] if line]
    assert body[0].startswith("[XX] ") and all(line.startswith("    ") for line in body[1:])
    short = rep.claims[0].receipts[0][7:19]
    assert short in text and rep.claims[0].receipts[0] not in text
    assert "counterexample: " in text and "-> counterexample: fails the claim" in text
    assert "-> a pass outweighed by a counterexample" in text
    assert "ledger qualify --pr 898 --claim" in text


def test_terminal_answer_at_40_columns_stays_inside() -> None:
    text = render_table(_report(), width=40)
    assert max(len(line) for line in text.splitlines()) <= 40


def test_table_for_nothing_asked() -> None:
    rep = StatusReport(subject=revision(), qualified=False, claims=())
    text = render_table(rep)
    assert "not qualified: 0 of 0 required claims qualified" in text.splitlines()[0]


def test_a_qualified_control_row_does_not_list_other_receipts_as_faults() -> None:
    """A dedicated observer-off control claim qualified by its control receipt: a
    receipt of the inner check logged under the same claim explains nothing about
    the qualified row, so its planned-check mismatch is not shown there."""
    control = receipt(
        seq=1, check="observer-off-control", params={"check": "regression-24view"}, scope=H200
    )
    inner = receipt(seq=2, check="regression-24view", scope=H200)
    rep = report(
        [control, inner], check="observer-off-control", params={"check": "regression-24view"}
    )
    row = rep.at_required_scope(CLAIM)
    assert row.state == "qualified"
    assert any(str(r).startswith("planned-check") for r in row.reasons)  # JSON keeps them all
    table = render_table(rep, width=100)
    assert "qualified" in table and "planned-check" not in table
