"""Receipts judged by the fixed rel-L2 threshold (before the reference rule) keep their
meaning: the ledger reads the outcome a receipt states, and a receipt's parameters say
which rule judged it (a receipt without ``rule`` was judged by the threshold)."""

from __future__ import annotations

from .factories import receipt
from .helpers import status, why

CHECK = "gradient-compare"
OLD = {"batch": 2, "seq": 32, "threshold": 0.03, "noise_floor": True, "noise_margin": 2.0}
"""Parameters as a receipt of the threshold rule recorded them: no ``rule``."""
OLD_MEASURED = {"threshold": 0.03, "tensors_over_threshold": 0, "max_rel_l2": 0.004}
PLANNED = {"batch": 2, "seq": 32, "threshold": 0.03}
"""The plan that ran them (the example repository's)."""


def test_an_old_rule_pass_still_qualifies_under_the_plan_that_ran_it() -> None:
    old = receipt(seq=1, check=CHECK, params=OLD, measurements=OLD_MEASURED)
    row = status([old], check=CHECK, params=PLANNED)
    assert row.state == "qualified", why(row)


def test_an_old_rule_failure_is_still_a_counterexample() -> None:
    failed = receipt(
        seq=1,
        check=CHECK,
        params=OLD,
        outcome="failed",
        reason="70 of 96 gradient tensors over rel-L2 0.05 and over 2.0x their family's noise "
        "floor",
        measurements={**OLD_MEASURED, "tensors_over_threshold": 70},
    )
    assert status([failed], check=CHECK, params=PLANNED).state == "failed"
    # A later pass of the reference rule does not outweigh it unless it supersedes it.
    new = receipt(seq=2, check=CHECK, params={**OLD, "rule": "reference", "k": 2.0})
    assert status([failed, new], check=CHECK, params=PLANNED).state == "failed"


def test_a_plan_that_asks_for_the_reference_rule_does_not_take_an_old_pass() -> None:
    old = receipt(seq=1, check=CHECK, params=OLD, measurements=OLD_MEASURED)
    asked = {**PLANNED, "rule": "reference"}
    row = status([old], check=CHECK, params=asked)
    assert row.state == "unverified" and "rule=nothing" in why(row)
    new = receipt(seq=2, check=CHECK, params={**OLD, "rule": "reference", "k": 2.0})
    assert status([new], check=CHECK, params=asked).state == "qualified"
    # ... and one that asks for the threshold rule by name takes only receipts that say so.
    by_name = {**PLANNED, "rule": "threshold"}
    assert status([old], check=CHECK, params=by_name).state == "unverified"
    said = receipt(seq=3, check=CHECK, params={**OLD, "rule": "threshold"})
    assert status([said], check=CHECK, params=by_name).state == "qualified"
