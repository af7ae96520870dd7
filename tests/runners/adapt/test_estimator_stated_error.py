"""The built-in estimator's stated error in two parts (method 3): an absolute part for
what a step costs whatever its size, a relative part for what grows with it, chosen
near the least bound at the largest shape a plan runs; and a record of method 2 (a
relative part alone) read as it was, predicting the same bytes under the same id."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from runners.workloads.calibration_record import Calibration
from runners.workloads.envelope import (
    PhaseFit,
    Point,
    _error_permille,
    fit,
    predict_step,
    refit,
    widened,
)
from runners.workloads.stated_error import SLACK_PERMILLE

DATA = Path(__file__).resolve().parent / "data"
MIB = 1 << 20
TERMS = ("constant", "tokens")


def _method2(f: PhaseFit, points: list[Point]) -> PhaseFit:
    """``f``'s coefficients with method 2's stated error: a relative part alone."""
    bare = replace(f, error_bytes=0, error_permille=0)
    return replace(bare, error_permille=_error_permille(bare, points))


def _noisy(slope: int = 4096) -> tuple[list[Point], list[Point]]:
    """A step of ``slope`` bytes a token measured as a GPU's allocator shows it: a few
    MiB of workspace and rounding above the cost at the calibration's small shapes
    (up to 1024 tokens), the same 2 MiB above it at validation shapes of 8x as many."""
    grid = [(1, 16), (1, 64), (1, 256), (2, 128), (4, 16), (4, 64), (8, 32), (4, 256)]
    noise = [3 * MIB, 5 * MIB, 2 * MIB, 4 * MIB, 6 * MIB, 1 * MIB, 3 * MIB, 2 * MIB]
    points = [Point(b, s, slope * b * s + n) for (b, s), n in zip(grid, noise, strict=True)]
    checks = [Point(b, s, slope * b * s + 2 * MIB) for b, s in ((32, 256), (8, 1024))]
    return points, checks


def test_fixed_noise_at_small_shapes_is_not_multiplied_into_large_ones() -> None:
    # As calibration runs it: fit on the grid, validate at 8x its largest, refit on
    # every step where a validation step was not covered.
    points, checks = _noisy()
    f = fit(TERMS, points)
    for c in checks:
        f = widened(f, c)
    if not all(v.get("covered", True) for v in f.validation):
        f = refit(f, TERMS, checks)
    for p in [*points, *checks]:
        assert p.measured_bytes <= predict_step(f, p.batch, p.seq), p
    # At 8x the largest shape measured the bound is the cost and its 2 MiB, where a
    # relative error alone (to cover the small shapes' noise) made it twice that.
    for c in checks:
        assert predict_step(f, c.batch, c.seq) <= 1.25 * c.measured_bytes, c
        old = predict_step(_method2(f, [*points, *checks]), c.batch, c.seq)
        assert old >= 2 * c.measured_bytes, c


def _cover(f: PhaseFit, points: list[Point], permille: int) -> PhaseFit:
    """``f`` with ``permille`` and the least absolute part that covers ``points``."""
    rel = replace(f, error_bytes=0, error_permille=permille)
    need = max([0, *(p.measured_bytes - predict_step(rel, p.batch, p.seq) for p in points)])
    return replace(rel, error_bytes=need)


def test_the_stated_error_is_near_least_at_the_reference_and_as_relative_as_that_allows() -> None:
    points, _ = _noisy()
    ref = (32, 256)
    f = fit(TERMS, points, reference=[ref])
    # The absolute part is exactly what coverage needs beside the permille: one byte
    # less leaves a measured point above the bound.
    assert f.error_bytes > 0 and f.error_permille > 0
    less = replace(f, error_bytes=f.error_bytes - 1)
    assert any(p.measured_bytes > predict_step(less, p.batch, p.seq) for p in points)
    # Every pair that covers the points (each permille with its least absolute part):
    # none is lower at the reference by more than the slack, and a larger permille
    # (a smaller absolute part) is above the slack.
    slack = f.total(*ref) * SLACK_PERMILLE // 1000
    got = predict_step(f, *ref)
    least = min(predict_step(_cover(f, points, r), *ref) for r in range(0, 3000))
    assert least <= got <= least + slack
    more = _cover(f, points, f.error_permille + 1)
    assert more.error_bytes < f.error_bytes and predict_step(more, *ref) > least + slack
    # Against the absolute part alone (the least here): the bound at 8x the largest
    # shape is within 2 %, and grows with the shape.
    alone = _cover(f, points, 0)
    assert predict_step(alone, *ref) == least
    assert predict_step(f, *ref) <= 1.02 * predict_step(alone, *ref)


def test_a_validation_step_not_covered_widens_or_refits_with_both_parts() -> None:
    points, _ = _noisy()
    slope = 4096
    ref = [(32, 256)]
    f = fit(TERMS, points, reference=ref)
    # The validation step costs twice the slope: not covered, and the widened pair
    # covers it and every grid step, recorded as not covered before it.
    big = Point(32, 256, 2 * slope * 32 * 256)
    wider = widened(f, big, ref)
    assert wider.validation[-1]["covered"] is False
    assert wider.validation[-1]["predicted_bytes"] == predict_step(f, 32, 256)
    for p in [*points, big]:
        assert p.measured_bytes <= predict_step(wider, p.batch, p.seq), p
    # Refit on every step: the slope follows the large step, the pair covers them all.
    again = refit(wider, TERMS, [big], ref)
    assert again.refit and again.validation == wider.validation
    for p in [*points, big]:
        assert p.measured_bytes <= predict_step(again, p.batch, p.seq), p
    assert predict_step(again, 32, 256) <= 1.25 * big.measured_bytes
    # A step covered (on its bound, to the byte) leaves the pair as it was.
    small = Point(32, 256, predict_step(f, 32, 256))
    same = widened(f, small, ref)
    assert (same.error_bytes, same.error_permille) == (f.error_bytes, f.error_permille)
    assert same.validation[-1]["covered"] is True


SHAPES = [(1, 1), (1, 4), (1, 16), (2, 8), (4, 1), (4, 4), (8, 2), (2, 2), (8, 8)]


@settings(max_examples=300, deadline=None)
@given(
    costs=st.lists(st.integers(min_value=0, max_value=1 << 34), min_size=4, max_size=9),
    terms=st.sampled_from(
        [("constant", "tokens"), ("constant", "sequences", "tokens"), ("tokens",)]
    ),
    known=st.sampled_from([0, 4096, 3 * MIB]),
    with_known=st.booleans(),
    scale=st.sampled_from([1, 16, 256]),
)
def test_every_point_is_covered_and_the_reference_bound_is_never_above_method2s_floored(
    costs: list[int], terms: tuple[str, ...], known: int, with_known: bool, scale: int
) -> None:
    points = [Point(b, s * scale, c, with_known) for (b, s), c in zip(SHAPES, costs, strict=False)]
    ref = (64, 16 * scale)
    f = fit(terms, points, known, reference=[ref])
    assert f.error_bytes >= 0 and f.error_permille >= 0
    for p in points:
        assert p.bound(known) <= predict_step(f, p.batch, p.seq), p
    # Method 2's relative part alone is one of the pairs considered: never lower.
    if all(f.total(p.batch, p.seq) > 0 for p in points):
        old = _method2(f, points)
        # ... with the least relative part (method 4's floor) where it needed less.
        floor = replace(old, error_permille=max(old.error_permille, SLACK_PERMILLE))
        assert predict_step(f, *ref) <= predict_step(floor, *ref)
    # The relative part never falls under the floor, however exact the fit.
    assert f.error_permille >= SLACK_PERMILLE


def test_a_method2_record_keeps_its_id_and_every_prediction() -> None:
    # A record measured on CPU by method 2 (a Qwen3-MoE + LoRA, before this method),
    # and what that method predicted from it.
    text = (DATA / "calibration-v2.json").read_text()
    was = json.loads((DATA / "calibration-v2.estimates.json").read_text())
    cal = Calibration.from_json(json.loads(text))
    assert cal.version == "2" and cal.id == was["id"]
    assert all(f.error_bytes == 0 for f in cal.phases.values())
    # Written again, byte for byte: no error_bytes where there was none.
    assert json.dumps(cal.json(), sort_keys=True, indent=1) + "\n" == text
    assert len(was["estimates"]) >= 20
    for e in was["estimates"]:
        predicted, point, terms = cal.estimate(e["batch"], e["seq"], e["phase"], cold=e["cold"])
        assert (predicted, point, terms) == (e["predicted_bytes"], e["point_bytes"], e["terms"])


def test_a_record_with_an_absolute_part_says_so_and_reads_back() -> None:
    doc = json.loads((DATA / "calibration-v2.json").read_text())
    cal = Calibration.from_json(doc)
    phase = cal.phases["forward_backward"]
    two = replace(
        cal,
        phases={**cal.phases, "forward_backward": replace(phase, error_bytes=5 * MIB)},
        version="3",
    )
    body = two.json()
    assert body["phases"]["forward_backward"]["error_bytes"] == 5 * MIB
    assert "error_bytes" not in body["phases"]["forward_nograd"]
    back = Calibration.from_json(json.loads(json.dumps(body)))
    assert back == two and back.id == two.id != cal.id
    # The absolute part is in the stated error at every shape, beside the relative one.
    for b, s in ((1, 1), (8, 64)):
        got, point, terms = two.estimate(b, s, "forward_backward", cold=False)
        was, _, _ = cal.estimate(b, s, "forward_backward", cold=False)
        assert got == was + 5 * MIB and got - point == terms["stated_error"]
