"""Tightness a plan can require of admission: an estimator 1000x too loose stays safe
(every admitted step fits), so it passes a plan that bounds nothing and fails one
that bounds looseness, with the figure and the bound named. Real runs on CPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger.qualification.figures import figure_of, least_of
from ledger.read.render import render_trend
from ledger.trend import Point, Trend
from runners.contract.result import CheckResult, Json
from tests.runners.conftest import MOE, make_runner

LATTICE: dict[str, Json] = {"batches": [1, 2], "seqs": [8, 16]}
LOOSE = "runners.workloads.broken:over_predicting"
_BOUNDS = ("min_measured_over_predicted", "max_over_refused")


def _run(tmp: Path, params: dict[str, Json], ref: str) -> CheckResult:
    [r] = make_runner("cpu", tmp)("admission", params, ref=ref)
    return r


@pytest.fixture(scope="module")
def unbounded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, CheckResult]:
    """The reference estimator and the 1000x looser one under a plan with no bound (as a
    plan written before the bounds existed reads)."""
    tmp = tmp_path_factory.mktemp("unbounded")
    return {ref: _run(tmp / ref.rsplit(":", 1)[1], dict(LATTICE), ref) for ref in (MOE, LOOSE)}


def test_a_looser_estimator_passes_where_no_bound_is_set(
    unbounded: dict[str, CheckResult],
) -> None:
    ref, loose = unbounded[MOE], unbounded[LOOSE]
    assert ref.outcome == loose.outcome == "passed" and loose.reason is None
    for r in (ref, loose):
        m = r.measurements
        assert m["counterexample_count"] == 0 and m["admitted_count"] == 10
        # Recorded all the same; not judged.
        assert r.params["min_measured_over_predicted"] is None
        assert r.params["max_over_refused"] is None
    least_ref = ref.measurements["min_measured_over_predicted"]
    least_loose = loose.measurements["min_measured_over_predicted"]
    assert isinstance(least_ref, float) and isinstance(least_loose, float)
    assert least_ref > 0.1 > 0.001 > least_loose
    assert least_loose <= loose.measurements["max_measured_over_predicted"]  # type: ignore[operator]
    rows = [x for x in loose.measurements["shapes"] if isinstance(x, dict) and x["admitted"]]  # type: ignore[union-attr]
    assert least_loose == min(float(str(x["measured_over_predicted"])) for x in rows)


def test_a_bound_on_the_least_ratio_fails_the_looser_estimator(tmp_path: Path) -> None:
    bound: dict[str, Json] = {**LATTICE, "min_measured_over_predicted": 0.1}
    loose = _run(tmp_path / "loose", bound, LOOSE)
    assert loose.outcome == "failed"
    least = loose.measurements["min_measured_over_predicted"]
    assert loose.reason is not None and loose.reason.startswith(
        f"too loose: least measured/predicted {least:g} < bound min_measured_over_predicted 0.1 ("
    )
    # Safety held: it is the looseness, not a counterexample, that failed it.
    assert loose.measurements["counterexample_count"] == 0
    # The reference estimator meets the same bound in the same run of the check.
    ref = _run(tmp_path / "ref", bound, MOE)
    assert ref.outcome == "passed", ref.reason


def test_a_bound_on_over_refusals_fails_the_looser_estimator(tmp_path: Path) -> None:
    bound: dict[str, Json] = {**LATTICE, "max_over_refused": 0}
    loose = _run(tmp_path / "loose", bound, LOOSE)
    n = loose.measurements["over_refused_count"]
    assert isinstance(n, int) and n > 0
    assert loose.outcome == "failed"
    assert loose.reason is not None and loose.reason.startswith(
        f"too loose: over-refused {n} > bound max_over_refused 0 "
    )
    ref = _run(tmp_path / "ref", bound, MOE)
    assert ref.outcome == "passed" and ref.measurements["over_refused_count"] == 0


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"min_measured_over_predicted": 0}, "must be in (0, 1]"),
        ({"min_measured_over_predicted": 2.0}, "must be in (0, 1]"),
        ({"max_over_refused": -1}, "must be >= 0"),
        ({"max_over_refused": 1, "measure_refused": False}, "needs measure_refused"),
    ],
)
def test_a_bound_that_cannot_be_judged_is_the_plans_error(
    tmp_path: Path, given: dict[str, Json], said: str
) -> None:
    r = _run(tmp_path, {**LATTICE, **given}, MOE)
    assert r.outcome == "inconclusive"
    assert r.reason is not None and said in r.reason and "bad parameter" in r.reason


def _point(r: CheckResult, where: str) -> Point:
    pred = {"check": {"name": r.check}, "measurements": r.measurements}
    return Point(
        commit=("b" if where == "base" else "h") * 40,
        where=where,
        receipt="sha256:" + "0" * 64,
        outcome=r.outcome,
        recorded="",
        figure=figure_of(pred),
        least=least_of(pred),
    )


def test_trend_shows_the_least_ratio_against_the_base(
    unbounded: dict[str, CheckResult],
) -> None:
    base, head = _point(unbounded[MOE], "base"), _point(unbounded[LOOSE], "PR #7 head 1")
    assert base.least is not None and head.least is not None
    t = Trend("admission.no-oom-after-admit", [base, head], base_asked=1)
    text = render_trend("example/repo", 7, [t])
    change = base.least.value / head.least.value
    assert 500 < change < 2000  # the margin of 1000x, less what the reference already had
    said = (
        f"estimate looser than the base's: least measured/predicted {head.least.text}"
        f" vs {base.least.text} on the base (-99.9 %)"
    )
    assert said in " ".join(x.strip() for x in text.splitlines())
    assert max(len(x) for x in text.splitlines()) <= 80
    got = t.to_json()["points"][1]
    assert got["least"]["value"] == head.least.value
    assert got["least_change_vs_base"]["percent"] == -99.9
    assert got["least_change_text"] == said


def test_a_plan_and_receipts_from_before_the_bounds_keep_their_verdicts(
    unbounded: dict[str, CheckResult],
) -> None:
    from tests.ledger.qualification.factories import receipt
    from tests.ledger.qualification.helpers import status, why

    old_plan = dict(LATTICE)
    # A receipt recorded before the bounds existed: its parameters lack them.
    before = {k: v for k, v in unbounded[MOE].params.items() if k not in _BOUNDS}
    now = dict(unbounded[MOE].params)
    assert set(now) - set(before) == set(_BOUNDS)
    for params in (before, now):
        row = status([receipt(seq=1, params=params)], params=old_plan)
        assert row.state == "qualified", why(row)
    # A plan that sets a bound counts only a receipt whose run judged it.
    bounded = {**old_plan, "min_measured_over_predicted": 0.1}
    row = status([receipt(seq=1, params=before)], params=bounded)
    assert row.state == "unverified"
    assert "min_measured_over_predicted=nothing" in why(row)
    row = status([receipt(seq=1, params={**before, **bounded})], params=bounded)
    assert row.state == "qualified", why(row)
    # An old receipt's failure stands as it did: the bounds judge nothing after the fact.
    row = status([receipt(seq=1, params=before, outcome="failed")], params=old_plan)
    assert row.state == "failed"
