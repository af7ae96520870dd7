"""Scopes: coverage, merging the plan's scope with the asked one, display."""

from __future__ import annotations

import pytest

from ledger.evidence.errors import InputError
from ledger.qualification import covers, format_scope, merge_scopes
from ledger.qualification.scope import scope_key


def test_covers_needs_every_required_facet_at_the_same_value() -> None:
    h200 = {"device_kind": "cuda", "gpu_model": "NVIDIA H200"}
    assert covers(h200, {})
    assert covers(h200, {"gpu_model": "NVIDIA H200"})
    assert covers({**h200, "dtype": "bf16"}, h200)
    assert not covers({"device_kind": "cuda"}, h200)
    assert not covers({**h200, "gpu_model": "NVIDIA A100"}, h200)


def test_facets_compare_by_text() -> None:
    assert covers({"gpu_count": 2}, {"gpu_count": "2"})
    assert covers({"gpu_count": "2"}, {"gpu_count": 2})
    assert scope_key({"gpu_count": 2}) == scope_key({"gpu_count": "2"})


def test_merge_adds_query_facets_and_rejects_contradictions() -> None:
    plan: dict[str, str | int] = {"device_kind": "cuda", "gpu_count": 1}
    assert merge_scopes(plan, {"dtype": "bf16", "gpu_count": "1"}, claim="c") == {
        "device_kind": "cuda",
        "gpu_count": 1,
        "dtype": "bf16",
    }
    with pytest.raises(InputError, match=r"gpu_count=2 conflicts with claim 'c'.*gpu_count=1"):
        merge_scopes(plan, {"gpu_count": 2}, claim="c")


def test_format_scope_is_sorted_and_marks_any() -> None:
    assert format_scope({"b": 1, "a": "x"}) == "a=x,b=1"
    assert format_scope({}) == "any environment"
