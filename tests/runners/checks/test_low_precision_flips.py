"""Gradient-compare's reference rule beside routings flipped in the low precision: a
candidate beyond the rule only there, while every tensor matches in the reference
precision on the reference's routing, is inconclusive with the count, not failed."""

from __future__ import annotations

from runners.checks import routing
from runners.checks.gradient_compare import Params, _by_reference
from runners.checks.precision import TensorVerdict
from runners.contract.result import Json


def verdict(name: str, err_candidate: float, err_function: float) -> TensorVerdict:
    return TensorVerdict(
        name,
        err_candidate,
        0.01,
        None,
        2.0,
        1e-6,
        err_function=err_function,
        function_ran=True,
        function_scale=2.0**-16,
        function_atol=6.1e-5,
    )


def judged(verdicts: list[TensorVerdict], flipped_low: int) -> tuple[str, str | None]:
    rows: list[dict[str, Json]] = [{"name": v.name} for v in verdicts]
    v = _by_reference(verdicts, rows, "", Params(), {}, 0, flipped_low)
    return v.outcome, v.reason


def test_low_precision_only_beside_flips_is_inconclusive_with_the_count() -> None:
    vs = [verdict("a.weight", 0.05, 1e-6), verdict("b.weight", 0.001, 1e-6)]
    outcome, reason = judged(vs, flipped_low=3)
    assert outcome == "inconclusive"
    assert reason is not None and "beside 3 token(s) the candidate routed differently" in reason
    assert judged(vs, flipped_low=0)[0] == "failed"  # no flips: the difference is the change


def test_a_difference_in_the_reference_precision_still_fails_beside_flips() -> None:
    vs = [verdict("a.weight", 0.05, 0.01)]  # beyond the function part too
    assert judged(vs, flipped_low=3)[0] == "failed"


def test_flips_count_only_when_the_function_part_replayed_the_routing() -> None:
    m: dict[str, Json] = {"routing": {"candidate_vs_reference": {"tokens_differing": 4}}}
    arms = {"candidate_reference": {"routing_replay": "replayed"}}
    assert routing.flipped_low(arms, m) == 4
    assert routing.flipped_low({"candidate_reference": {}}, m) == 0
