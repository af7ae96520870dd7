"""The check catalog: typed parameters, their description, and what a plan may give."""

from __future__ import annotations

import json

import pytest

from runners.api import check_names, needs_base, params_error
from runners.checks.admission import Params as AdmissionParams
from runners.checks.catalog import describe
from runners.checks.params import ParamError
from tests.runners.conftest import RunClaim


def test_describe_lists_every_check_with_documented_parameters() -> None:
    doc = describe()
    json.dumps(doc, allow_nan=False)
    assert [c["name"] for c in doc] == check_names()
    for check in doc:
        assert check["version"] and check["summary"]
        params = check["params"]
        assert isinstance(params, list) and params
        for p in params:
            assert isinstance(p, dict) and set(p) == {"name", "type", "default", "doc"}
            assert p["doc"], (check["name"], p["name"])
    admission = next(c for c in doc if c["name"] == "admission")
    by_name = {p["name"]: p for p in admission["params"]}  # type: ignore[union-attr]
    assert by_name["batches"]["type"] == "list[int]"
    assert by_name["batches"]["default"] == [1, 2, 4]
    assert by_name["edge_margin_bytes"]["type"] == "int | None"
    assert "2 MiB on CUDA" in str(by_name["edge_margin_bytes"]["doc"])
    assert by_name["observer"]["default"] == "off"


def test_params_name_the_field_and_what_it_must_be() -> None:
    with pytest.raises(ParamError, match="'warm_runs' must be an integer, got 'x'"):
        AdmissionParams(warm_runs="x")  # type: ignore[arg-type]
    with pytest.raises(ParamError, match="'pressure' must be one of 'edge', 'none'"):
        AdmissionParams.parse({"pressure": "max"})
    assert AdmissionParams.parse({"seqs": [8]}).seqs == [8]


def test_unknown_parameter_is_refused_in_one_line(run_cpu: RunClaim) -> None:
    why = params_error("cleanup", {"batch": 1, "ballast": True})
    assert why is not None and "unknown parameter 'ballast'" in why and "\n" not in why
    assert params_error("cleanup", {"batch": 1, "observer": "on"}) is None
    (r,) = run_cpu("cleanup", {"ballast": True})
    assert r.outcome == "inconclusive" and "unknown parameter 'ballast'" in (r.reason or "")
    assert r.params["ballast"] is True and r.params["batch"] == 2


def test_the_checks_comparing_against_the_base_need_its_checkout() -> None:
    assert [c for c in check_names() if needs_base(c)] == [
        "gradient-compare",
        "observer-off-control",
        "regression-24view",
    ]
