"""The status report: its JSON shape and the table for people."""

from __future__ import annotations

import json

from ledger.qualification import STATES, StatusReport, render_table

from .factories import CLAIM, H200, receipt, review, revision
from .helpers import report


def _report() -> StatusReport:
    ok = receipt(seq=1, scope={**H200, "dtype": "bf16"})
    oom = receipt(seq=2, scope={**H200, "dtype": "fp32"}, outcome="failed", reason="CUDA OOM")
    return report([ok, oom], [review(ok, seq=3)], rev=revision(pr=898), reviews=1)


def test_json_shape() -> None:
    doc = _report().to_json()
    assert json.loads(json.dumps(doc)) == doc
    assert set(doc) == {"subject", "qualified", "scope", "judged", "claims"}
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


def test_table_is_aligned_plain_text_with_short_ids() -> None:
    rep = _report()
    text = render_table(rep)
    assert text.isascii() and "\x1b" not in text
    lines = text.splitlines()
    assert lines[0].endswith(": not qualified") and "PR #898" in lines[1]
    header = lines[2]
    assert header.split() == ["CLAIM", "/", "SCOPE", "/", "WHY", "STATE", "VIA", "RECEIPTS"]
    assert max(len(line) for line in lines) <= 80
    state_col = header.index("STATE")
    rows = [
        line for line in lines[3:] if line[state_col:].split()[:1] in (["failed"], ["qualified"])
    ]
    assert len(rows) == 3
    assert all(line[state_col - 2 : state_col] == "  " for line in rows)
    short = rep.claims[0].receipts[0][7:19]
    assert short in text and rep.claims[0].receipts[0] not in text
    assert "> device_kind=cuda,dtype=bf16" in text
    assert "counterexample: " in text


def test_table_for_nothing_asked() -> None:
    rep = StatusReport(subject=revision(), qualified=False, claims=())
    assert render_table(rep).splitlines()[2].split() == [
        "CLAIM", "/", "SCOPE", "/", "WHY", "STATE", "VIA", "RECEIPTS",
    ]  # fmt: skip


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
