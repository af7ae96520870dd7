"""The workload protocol's value types and the entry-point loader."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
import torch

from runners.protocol import (
    PHASES,
    AdmissionDecision,
    ForwardOutputs,
    MemoryEstimate,
    Shape,
    Workload,
    workload_digest,
)
from runners.workloads import moe
from runners.workloads.loader import WorkloadLoadError, load_workload, parse_ref


def test_shape_tokens_and_validation() -> None:
    assert Shape(batch=24, seq=256).tokens == 6144
    assert str(Shape(batch=2, seq=3)) == "2x3"
    with pytest.raises(ValueError, match="batch >= 1"):
        Shape(batch=0, seq=4)
    with pytest.raises(ValueError):
        Shape(batch=1, seq=0)


def test_value_types() -> None:
    with pytest.raises(ValueError):
        MemoryEstimate(predicted_bytes=-1)
    refused = AdmissionDecision(
        admitted=False, predicted_bytes=10, usable_bytes=5, reserve_bytes=1, suggestion="x"
    )
    assert refused.measurements() == {
        "admitted": False,
        "predicted_bytes": 10,
        "usable_bytes": 5,
        "reserve_bytes": 1,
        "suggestion": "x",
    }
    out = ForwardOutputs(pooled_hidden=torch.zeros(2, 3), nll=torch.tensor(1.0))
    assert out.loss is None
    assert PHASES == ("forward_nograd", "forward_backward")


def test_reference_workload_implements_protocol() -> None:
    assert isinstance(moe.make_workload(), Workload)
    assert not isinstance(object(), Workload)


def test_workload_digest_covers_config_and_sources() -> None:
    base = workload_digest({"a": 1}, ["src"])
    assert len(base) == 64
    assert workload_digest({"a": 1}, ["src"]) == base
    assert workload_digest({"a": 2}, ["src"]) != base
    assert workload_digest({"a": 1}, ["src2"]) != base
    # Source boundaries are part of the hash.
    assert workload_digest({}, ["ab", "c"]) != workload_digest({}, ["a", "bc"])
    assert workload_digest({}, [moe]) == workload_digest({}, [Path(moe.__file__).read_text()])
    w = moe.make_workload()
    assert w.digest() == moe.make_workload().digest()
    assert w.digest() != moe.make_workload(d_model=32).digest()


@pytest.mark.parametrize("ref", ["nocolon", ":attr", "mod:", "a:b:c"])
def test_parse_ref_rejects_malformed(ref: str) -> None:
    with pytest.raises(WorkloadLoadError, match="module:attribute"):
        parse_ref(ref)


def _checkout(root: Path, package: str, body: str) -> Path:
    pkg = root / package
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "entry.py").write_text(textwrap.dedent(body))
    return root


MOE_ENTRY = """
    from runners.workloads.moe import MoEConfig, MoEWorkload

    MARK = {mark!r}
    NOT_CALLABLE = 3

    def make(**params):
        w = MoEWorkload(MoEConfig(**params))
        w.mark = MARK
        return w

    def not_a_workload(**params):
        return object()
"""


def test_loads_two_checkouts_of_one_package_in_turn(tmp_path: Path) -> None:
    path_before = list(sys.path)
    a = _checkout(tmp_path / "a", "qualpkg", MOE_ENTRY.format(mark="a"))
    b = _checkout(tmp_path / "b", "qualpkg", MOE_ENTRY.format(mark="b"))
    wa = load_workload(a, "qualpkg.entry:make", {"d_model": 32})
    assert getattr(wa, "mark") == "a"  # noqa: B009
    assert isinstance(wa, moe.MoEWorkload) and wa.config.d_model == 32
    assert sys.path == path_before
    wb = load_workload(b, "qualpkg.entry:make", {})
    assert getattr(wb, "mark") == "b"  # noqa: B009
    assert Path(sys.modules["qualpkg.entry"].__file__ or "").is_relative_to(b)
    assert sys.path == path_before


def test_load_errors_name_the_ref(tmp_path: Path) -> None:
    root = _checkout(tmp_path, "errpkg", MOE_ENTRY.format(mark="e"))
    cases = {
        "errpkg.missing:make": "cannot import module 'errpkg.missing'",
        "errpkg.entry:nope": "has no attribute 'nope'",
        "errpkg.entry:NOT_CALLABLE": "not callable",
        "errpkg.entry:not_a_workload": "does not implement the Workload protocol",
        "nosuchpkg_xyz.mod:make": "cannot import module",
    }
    for ref, message in cases.items():
        with pytest.raises(WorkloadLoadError, match=message) as info:
            load_workload(root, ref, {})
        assert ref in str(info.value)


def test_bad_params_are_a_load_error(tmp_path: Path) -> None:
    root = _checkout(tmp_path, "parampkg", "def make(*, width: int):\n    return width\n")
    with pytest.raises(WorkloadLoadError, match="do not fit"):
        load_workload(root, "parampkg.entry:make", {"height": 1})


def test_import_error_inside_module_is_a_load_error(tmp_path: Path) -> None:
    root = _checkout(tmp_path, "brokenpkg", "import definitely_not_installed_xyz\n")
    with pytest.raises(WorkloadLoadError, match="definitely_not_installed_xyz"):
        load_workload(root, "brokenpkg.entry:make", {})


def test_installed_module_when_checkout_lacks_it(tmp_path: Path) -> None:
    w = load_workload(tmp_path, "runners.workloads.broken:raises_in_forward", {"n_layers": 1})
    assert w.name == "moe-lora-raises-in-forward"


def test_the_checkout_already_imported_is_kept(tmp_path: Path) -> None:
    project = Path(__file__).resolve().parents[3]
    w = load_workload(project, "runners.workloads.moe:make_workload", {})
    assert type(w) is moe.MoEWorkload  # not a second copy of the module
    assert sys.modules["runners.workloads.moe"] is moe
