"""A workload loaded from a checkout of this project keeps the harness's own modules:
the loader forgets and re-imports the checkout's `runners`, and `load_preserving` puts
back the modules a check holds (its results' classes) and the packages they lie in."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import runners.contract.result  # noqa: F401  (loaded before the workload, as in a claim)
from runners.checks.context import load_preserving
from tests.runners.conftest import REPO, TINY

KEPT = ("runners", "runners.contract", "runners.contract.result", "runners.protocol")


def test_a_load_from_this_project_keeps_the_contract_and_its_package(tmp_path: Path) -> None:
    # Another checkout of this project: its `runners` is not the one imported here.
    shutil.copytree(REPO / "runners", tmp_path / "runners")
    before = {name: sys.modules[name] for name in KEPT}
    load_preserving(tmp_path, "runners.workloads.moe:make_workload", TINY)
    replaced = [name for name, module in before.items() if sys.modules.get(name) is not module]
    assert not replaced, f"replaced by the checkout's copy: {replaced}"
    # The package's attribute is the module a check imported, not a second copy.
    assert sys.modules["runners.contract"].result is before["runners.contract.result"]
