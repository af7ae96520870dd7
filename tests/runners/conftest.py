"""Fixtures for runner tests: a tiny reference workload, a CPU claim runner, GPU gates."""

from __future__ import annotations

import json
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from runners.api import run_claim
from runners.contract.result import CheckResult, Json
from runners.fork.forkparent import ForkServer
from runners.harness.child import env

REPO = Path(__file__).resolve().parents[2]
MOE = "runners.workloads.moe:make_workload"
TINY: dict[str, Json] = {
    "vocab": 128,
    "d_model": 32,
    "n_layers": 1,
    "n_heads": 2,
    "n_experts": 4,
    "d_ff": 64,
    "lora_rank": 4,
}
"""A reference workload small enough for many CPU runs under the dispatch tracker."""

RunClaim = Callable[..., list[CheckResult]]


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("gpu") and not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    if item.get_closest_marker("gpu2") and torch.cuda.device_count() < 2:
        pytest.skip("needs 2 CUDA devices")


@pytest.fixture
def artifact_dir(tmp_path: Path) -> Path:
    return tmp_path / "artifacts"


class ArmServer:
    """One fork server per test process for this checkout, started by the first
    gradient-compare that needs it: its arms fork from it, as they do under
    `ledger qualify` (which runs one per tree), instead of each importing torch in a
    fresh interpreter. The fresh-interpreter route stays covered where no server is
    named (`tests/runners/fork/`, and every arm of a temporary checkout)."""

    def __init__(self) -> None:
        self.server: ForkServer | None = None

    def sockets(self) -> str:
        if self.server is None or self.server.proc.poll() is not None:
            self.server = ForkServer.launch([(str(REPO), MOE)], env()).wait()
        return json.dumps({str(REPO): str(self.server.sock)})

    def close(self) -> None:
        if self.server is not None:
            self.server.close()


@pytest.fixture(scope="session")
def arm_server() -> Iterator[ArmServer]:
    holder = ArmServer()
    yield holder
    holder.close()


def make_runner(device: str, artifact_dir: Path, arms: ArmServer | None = None) -> RunClaim:
    def run(
        check: str,
        params: dict[str, Json] | None = None,
        *,
        ref: str = MOE,
        workload_params: dict[str, Json] | None = None,
        root: Path = REPO,
        observer_off_required: bool = False,
        base_root: Path | None = None,
        progress: Callable[[str], None] = lambda _m: None,
    ) -> list[CheckResult]:
        def go() -> list[CheckResult]:
            return run_claim(
                claim=f"test.{check}",
                check=check,
                params=params or {},
                repo_root=root,
                workload_ref=ref,
                workload_params={**TINY, **(workload_params or {})},
                device=device,  # type: ignore[arg-type]
                observer_off_required=observer_off_required,
                base_root=base_root,
                progress=progress,
                artifact_dir=artifact_dir,
            )

        if arms is None or check != "gradient-compare":
            return go()
        with pytest.MonkeyPatch.context() as m:
            m.setenv("LEDGER_FORK_SERVERS", arms.sockets())
            return go()

    return run


@pytest.fixture
def run_cpu(artifact_dir: Path, arm_server: ArmServer) -> RunClaim:
    """``run_cpu(check, params, ref=..., workload_params=...)``: `run_claim` on CPU, a
    gradient-compare's arms forked from this checkout's server (`ArmServer`)."""
    return make_runner("cpu", artifact_dir, arm_server)


@pytest.fixture
def run_cuda(artifact_dir: Path) -> RunClaim:
    return make_runner("cuda", artifact_dir)


class Recorder:
    """A workload module in a temporary checkout that keeps every workload it builds,
    so a test can read what a broken workload leaked after the check dropped it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.module = f"recorded_{uuid.uuid4().hex[:8]}"
        (root / f"{self.module}.py").write_text(
            textwrap.dedent(
                """
                from runners.workloads import broken, moe

                INSTANCES = []


                def make(kind, **params):
                    source = moe if kind == "make_workload" else broken
                    w = getattr(source, kind)(**params)
                    INSTANCES.append(w)
                    return w
                """
            )
        )

    def ref(self) -> str:
        return f"{self.module}:make"

    def instances(self) -> list[Any]:
        import sys

        return list(sys.modules[self.module].INSTANCES)


@pytest.fixture
def recorder(tmp_path: Path) -> Recorder:
    root = tmp_path / "checkout"
    root.mkdir()
    return Recorder(root)
