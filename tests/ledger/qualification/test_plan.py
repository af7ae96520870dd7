"""qualification.toml: parsing, defaults, and errors that name the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger.evidence.errors import InputError
from ledger.qualification.plan import ClaimSpec, Plan, load_plan, parse_plan

FULL = """
workload = "model.workload:make_workload"

[workload_params]
d_model = 64

[package]
paths = ["model/**/*.py"]

[[claims]]
name = "admission.no-oom-after-admit"
check = "admission"
params = { batches = [1, 2, 4], seqs = [16, 64], ballast = true }
scope = { device_kind = "cuda", gpu_model = "NVIDIA H200", gpu_count = 1 }
carry_over = "package"
reviews = 1
observer_off = true
cleanup = true
required = true

[[claims]]
name = "regression.24view"
check = "regression-24view"
workload = "model.other:factory"
required = false
"""


def test_full_plan_parses_into_frozen_models() -> None:
    plan = parse_plan(FULL)
    assert plan.workload == "model.workload:make_workload"
    assert plan.workload_params == {"d_model": 64}
    assert plan.package is not None and plan.package.paths == ("model/**/*.py",)
    first, second = plan.claims
    assert first.params == {"batches": [1, 2, 4], "seqs": [16, 64], "ballast": True}
    assert first.scope == {"device_kind": "cuda", "gpu_model": "NVIDIA H200", "gpu_count": 1}
    assert (first.carry_over, first.reviews, first.observer_off) == ("package", 1, True)
    assert plan.workload_for(first) == "model.workload:make_workload"
    assert plan.workload_for(second) == "model.other:factory"
    assert plan.claim("regression.24view") is second
    assert plan.claim("nope") is None
    with pytest.raises(ValueError):
        first.reviews = 3  # type: ignore[misc]


def test_claim_defaults() -> None:
    plan = parse_plan('[[claims]]\nname = "c"\ncheck = "k"\n')
    (claim,) = plan.claims
    assert claim == ClaimSpec(name="c", check="k")
    assert (claim.carry_over, claim.reviews, claim.observer_off) == ("commit", 0, False)
    assert (claim.cleanup, claim.required, claim.params, claim.scope) == (True, True, {}, {})
    assert plan.workload is None and plan.package is None
    assert plan.workload_for(claim) is None


def test_load_plan_reads_a_file_and_names_it(tmp_path: Path) -> None:
    path = tmp_path / "qualification.toml"
    path.write_text(FULL)
    assert isinstance(load_plan(path), Plan)
    path.write_text(FULL.replace('carry_over = "package"', 'carry_over = "pkg"'))
    with pytest.raises(InputError, match=r"qualification\.toml: claims\[0\]\.carry_over: "):
        load_plan(path)
    with pytest.raises(InputError, match="no such plan file"):
        load_plan(tmp_path / "missing.toml")


def _edit(old: str, new: str) -> str:
    assert old in FULL
    return FULL.replace(old, new, 1)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            _edit('carry_over = "package"', 'carry_over = "pkg"'),
            "claims[0].carry_over: must be one of commit, tree, package",
        ),
        (_edit("reviews = 1", "reveiws = 1"), "claims[0].reveiws: unknown key"),
        (_edit("required = false", "requird = false"), "claims[1].requird: unknown key"),
        (_edit('workload = "model.w', 'workloads = "model.w'), "workloads: unknown key"),
        (_edit('paths = ["model', 'glob = 1\npaths = ["model'), "package.glob: unknown key"),
        (_edit("reviews = 1", "reviews = -1"), "claims[0].reviews: must be 0 or more"),
        (_edit("reviews = 1", "reviews = true"), "claims[0].reviews: must be an integer"),
        (_edit("reviews = 1", 'reviews = "1"'), "claims[0].reviews: must be an integer"),
        (_edit("observer_off = true", 'observer_off = "yes"'), "claims[0].observer_off: must be"),
        (_edit("cleanup = true", "cleanup = 1"), "claims[0].cleanup: must be true or false"),
        (_edit("gpu_count = 1", "gpu_count = 1.5"), "claims[0].scope.gpu_count: must be a string"),
        (_edit("gpu_count = 1", "gpu_count = true"), "claims[0].scope.gpu_count: must be a string"),
        (_edit("gpu_count = 1", "GPU = 1"), "claims[0].scope.GPU: facet names are lowercase"),
        (_edit("gpu_count = 1", "gpu = { a = 1 }"), "claims[0].scope.gpu: must be a string"),
        (_edit("d_model = 64", "when = 2026-09-25"), "workload_params.when: dates and times"),
        (_edit("ballast = true", "ballast = [07:00:00]"), "claims[0].params.ballast[0]: dates"),
        (_edit('paths = ["model/**/*.py"]', "paths = []"), "package.paths: must be a non-empty"),
        (
            _edit('paths = ["model/**/*.py"]', 'paths = [""]'),
            "package.paths[0]: must be a non-empty",
        ),
        (
            _edit('[package]\npaths = ["model/**/*.py"]', ""),
            "claims[0].carry_over: 'package' needs",
        ),
        (_edit("model.workload:make_workload", "model.workload"), "workload: must be 'module:attr"),
        (_edit("model.other:factory", "x y"), "claims[1].workload: must be 'module:attribute'"),
        (_edit('name = "admission.no-oom-after-admit"\n', ""), "claims[0].name: required"),
        (_edit('check = "admission"', "check = 3"), "claims[0].check: must be a string"),
        (_edit('name = "regression.24view"', 'name = "reg ression"'), "claims[1].name: must start"),
        (
            _edit('name = "regression.24view"', 'name = "admission.no-oom-after-admit"'),
            "claims[1].name: duplicate claim 'admission.no-oom-after-admit' (also claims[0])",
        ),
        (_edit("params = {", "params = 3\nx = {"), "claims[0].params: must be a table"),
        (_edit("scope = {", "scope = 3\ny = {"), "claims[0].scope: must be a table of facets"),
        (FULL.replace("[[claims]]", "[claims]", 1).split("[[claims]]")[0], "claims: must be an"),
        (FULL.split("[[claims]]")[0], "claims: required"),
        ("claims = []", "claims: must not be empty"),
        ("claims = [1]", "claims[0]: must be a table"),
        (FULL + "\nx = ", "not valid TOML"),
    ],
)
def test_errors_name_the_field(text: str, message: str) -> None:
    with pytest.raises(InputError) as info:
        parse_plan(text, "qualification.toml")
    line = info.value.reason()
    assert line.startswith("qualification.toml: ")
    assert message in line
    assert "\n" not in str(info.value)


def test_a_plan_with_a_package_serialises_without_warnings() -> None:
    """`status --server` posts the plan as JSON: no pydantic warning on stderr."""
    import warnings

    from ledger.qualification.plan import Plan, parse_plan

    plan = parse_plan(
        '[package]\npaths = ["src/**/*.py"]\nlock = ["uv.lock"]\n'
        '[[claims]]\nname = "a"\ncheck = "admission"\n'
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        doc = plan.model_dump(mode="json")
    assert doc["package"]["paths"] == ["src/**/*.py"] and Plan.model_validate(doc) == plan
