"""The reference rule's function part when the two reference-precision arms routed
tokens differently: a router near a tie is not the change, so without a replay of the
reference's routing such a failure is inconclusive, never failed (nor passed)."""

from __future__ import annotations

from typing import Any

from runners.checks import gradient_compare as gc
from runners.checks import precision, routing
from runners.contract.result import Json


def _verdict(flipped: int, function_err: float = 0.00549) -> Any:
    """One expert tensor as the H200 run at the example's 0.3 B size judged attention
    eager -> SDPA: within the bf16 floor, 88x over the function part's allowance."""
    fn = precision.Function({"layers.1.mlp.experts.lora_B": function_err}, 2**-16, 1e-7)
    verdicts = precision.judge(
        {"layers.1.mlp.experts.lora_B": 0.0417},
        {"layers.1.mlp.experts.lora_B": 0.0379},
        {},
        2.0,
        1e-6,
        fn,
    )
    m: dict[str, Json] = {}
    return gc._by_reference(verdicts, [], "", gc.Params(), m, flipped)


def test_a_function_failure_after_a_routing_flip_is_inconclusive() -> None:
    v = _verdict(flipped=1)
    assert v.outcome == "inconclusive"
    assert "routed 1 token(s) differently" in (v.reason or "")
    # The same failure with the routing agreeing is a failure.
    assert _verdict(flipped=0).outcome == "failed"
    # Within the allowance it passes either way.
    assert _verdict(flipped=1, function_err=1e-9).outcome == "passed"


def test_a_precision_failure_fails_whatever_the_routing() -> None:
    fn = precision.Function({"w": 0.0}, 2**-16, 1e-7)
    verdicts = precision.judge({"w": 0.5}, {"w": 0.01}, {}, 2.0, 1e-6, fn)
    assert gc._by_reference(verdicts, [], "", gc.Params(), {}, 5).outcome == "failed"


def test_the_flip_counts_only_without_a_replay() -> None:
    m: dict[str, Json] = {"routing": {"candidate_reference_vs_reference": {"tokens_differing": 3}}}
    assert routing.flipped_unreplayed({"candidate_reference": {}}, m) == 3
    replayed = {"candidate_reference": {"routing_replay": "replayed"}}
    assert routing.flipped_unreplayed(replayed, m) == 0
    assert routing.flipped_unreplayed({}, {}) == 0
