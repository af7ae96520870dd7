"""`ledger import admission-events` on ART planner reports as ART writes them.

The spool under fixtures/art_spool/ is written from ART's published report
schema: one canonical JSON object per `<id>.json`, `kind: "art-planner-miss"`,
format 2 (event, decision, failure) and format 1 (neither), nulls where a
report has no figure (an OOM or a refusal has no observed peak).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import git
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.ledger.helpers import run
from tests.ledger.importers.test_import import _import, ready  # noqa: F401  (fixture)

SPOOL = Path(__file__).resolve().parents[1] / "fixtures" / "art_spool"
CLAIM = "admission.no-oom-after-admit"
GIB = 1024**3


def _spool(tmp_path: Path, *ids: str) -> Path:
    """A spool directory holding the named fixture reports."""
    d = tmp_path / "spool"
    d.mkdir(exist_ok=True)
    for i in ids:
        shutil.copy(SPOOL / f"{i}.json", d)
    return d


def _records(p: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in p["measurements"]["records"]}


def test_a_spool_directory_with_both_formats_and_nulls_imports_every_figure(
    ready: git.Repo,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    [p] = _import(capsys, ready, "admission-events", SPOOL, CLAIM, extra=("--admitted", "40"))
    m = p["measurements"]
    assert m["events"] == 8 and m["imported"]["files"] == 8
    assert len(p["artifacts"]) == 8  # every report attached by digest
    recs = _records(p)
    # An OOM after admission has no observed peak: null is kept, not refused.
    oom = recs["0001-oom-after-admit"]
    assert oom["observed_peak_bytes"] is None and oom["partial_peak_bytes"] == 34 * GIB
    assert oom["predicted_peak_bytes"] == 30 * GIB and oom["admission_peak_bytes"] == 31 * GIB
    assert (oom["phase"], oom["decision"], oom["finding"]) == (
        "forward_backward",
        "admitted",
        "oom-after-admit",
    )
    assert oom["failure"]["type"] == "torch.OutOfMemoryError"
    assert recs["0002-over-estimate"]["error_pct"] == -33.333
    assert recs["0002-over-estimate"]["finding"] == "over-prediction"
    assert recs["0003-under-estimate"]["finding"] == "under-prediction"
    assert recs["0004-refused"]["finding"] == "refusal"
    assert recs["0005-planning-error"]["finding"] == "planning-error"
    assert recs["0006-oversized-oom"]["finding"] == "user-override"
    # Format 1: no event, decision or failure; `oom: true` is an OOM.
    assert recs["0007-format1-oom"]["format"] == 1
    assert recs["0007-format1-oom"]["finding"] == "oom-after-admit"
    assert recs["0008-format1-over"]["finding"] == "over-prediction"
    assert p["outcome"] == "failed"
    assert (m["oom_after_admit_count"], m["under_prediction_count"]) == (2, 1)
    assert "admitted_oversized: a user override, not the planner's fault" in p["reason"]
    assert m["estimator_tightness"]["over_predictions"] == 2
    assert m["estimator_tightness"]["max_over_prediction_bytes"] == 20 * GIB


def test_an_over_estimate_is_a_tightness_finding_never_a_failure(
    ready: git.Repo,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Observed 40 GiB below the 60 GiB predicted: the estimate was loose, not unsafe.
    spool = _spool(tmp_path, "0002-over-estimate", "0008-format1-over", "0004-refused")
    [p] = _import(capsys, ready, "admission-events", spool, CLAIM, extra=("--admitted", "12"))
    assert p["outcome"] == "passed", p["reason"]
    assert p["measurements"]["counterexamples"] == []
    assert p["measurements"]["estimator_tightness"]["max_over_prediction_pct"] == 33.333
    assert p["measurements"]["refused_count"] == 1


def test_a_clean_spool_is_inconclusive_until_the_admitted_count_is_given(
    ready: git.Repo,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    spool = _spool(tmp_path, "0002-over-estimate")
    [p] = _import(capsys, ready, "admission-events", spool, CLAIM)
    assert p["outcome"] == "inconclusive" and "count of admitted steps" in p["reason"]
    manifest = tmp_path / "run.json"
    manifest.write_text(json.dumps({"admitted_steps": 30}))
    [p] = _import(
        capsys, ready, "admission-events", spool, CLAIM, extra=("--manifest", str(manifest))
    )
    assert p["outcome"] == "passed" and p["measurements"]["admitted_steps"] == 30
    empty = tmp_path / "empty"
    empty.mkdir()
    [p] = _import(capsys, ready, "admission-events", empty, CLAIM, extra=("--admitted", "7"))
    assert p["outcome"] == "passed" and p["measurements"]["events"] == 0


def test_refusals_count_for_nothing_and_a_planning_error_is_inconclusive(
    ready: git.Repo,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    refused = _spool(tmp_path, "0004-refused")
    [p] = _import(capsys, ready, "admission-events", refused, CLAIM, extra=("--admitted", "0"))
    assert p["outcome"] == "refused"
    planning = SPOOL / "0005-planning-error.json"  # one file, not a directory
    [p] = _import(capsys, ready, "admission-events", planning, CLAIM, extra=("--admitted", "3"))
    assert p["outcome"] == "inconclusive" and "planning error" in p["reason"]


def test_an_oom_after_an_oversized_admission_is_the_users_override(
    ready: git.Repo,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    spool = _spool(tmp_path, "0006-oversized-oom")
    [p] = _import(capsys, ready, "admission-events", spool, CLAIM)
    assert p["outcome"] == "inconclusive"
    assert "user override, not the planner's fault" in p["reason"]
    [p] = _import(capsys, ready, "admission-events", spool, CLAIM, extra=("--admitted", "5"))
    assert p["outcome"] == "passed" and p["measurements"]["counterexamples"] == []
    [note] = p["measurements"]["user_overrides"]
    assert "user override" in note and "0006-oversized-oom.json" in note


def test_a_json_lines_file_of_both_formats(
    ready: git.Repo,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    lines = tmp_path / "reports.jsonl"
    lines.write_text(
        "".join(
            (SPOOL / f"{i}.json").read_text() + "\n"
            for i in ("0003-under-estimate", "0008-format1-over")
        )
    )
    [p] = _import(capsys, ready, "admission-events", lines, CLAIM, extra=("--admitted", "9"))
    assert p["outcome"] == "failed" and "observed peak above the prediction" in p["reason"]
    assert "reports.jsonl:1 in forward_backward" in p["reason"]
    assert p["measurements"]["over_prediction_count"] == 1


def test_calibrate_reads_imported_admission_receipts(
    ready: git.Repo,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    [_p] = _import(capsys, ready, "admission-events", SPOOL, CLAIM, extra=("--admitted", "40"))
    r = run(
        capsys,
        "calibrate",
        "--claim",
        CLAIM,
        "--rev",
        "main",
        "--repo",
        str(ready.working_tree_dir),
        "--json",
    )
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert len(doc["receipts"]) == 1
    rows = {(s["shape"], s["phase"]): s for s in doc["shapes"]}
    fwd = rows[("imported", "forward")]
    assert fwd["min_ratio"] == pytest.approx(40 / 60)
    fb = rows[("imported", "forward_backward")]
    assert fb["max_ratio"] == pytest.approx(36 / 30) and fb["admitted_over_prediction"] == 1
    assert rows[("imported", "planning")]["refused"] == 1


_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)
_KEYS = st.sampled_from(
    [
        "format",
        "kind",
        "event",
        "decision",
        "failure",
        "phase",
        "oom",
        "threshold_pct",
        "predicted_peak_bytes",
        "admission_peak_bytes",
        "observed_peak_bytes",
        "partial_peak_bytes",
        "error_pct",
        "replay_complete",
    ]
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(report=st.dictionaries(_KEYS, _VALUES, max_size=10))
@example(report={"predicted_peak_bytes": 2**60, "observed_peak_bytes": 1})
@example(report={"event": "estimate_miss", "error_pct": float("nan")})
@example(report={"event": "estimate_miss", "threshold_pct": float("inf")})
def test_any_report_is_read_or_refused_in_one_line(tmp_path: Path, report: dict[str, Any]) -> None:
    from ledger.evidence.errors import InputError
    from ledger.importers import events
    from ledger.verify.strict import unsafe

    f = tmp_path / "r.json"
    f.write_text(json.dumps({"kind": "art-planner-miss", **report}))
    try:
        found = events._finding(events.load(f), admitted_given=3)
    except InputError as e:
        assert "\n" not in e.reason()
        return
    # What is kept is signable: no number outside the RFC 8785 safe domain.
    assert unsafe(found.measurements, "measurements") is None
