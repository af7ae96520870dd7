"""The checks a plan can name, by name.

Each check module has ``NAME``, ``VERSION``, ``DEFAULTS`` (its parameters with
their defaults) and ``run(ctx, params) -> list[CheckResult]``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from runners.checks import (
    admission,
    cleanup,
    full_prefix_backward,
    gradient_compare,
    mesh_handoff,
    observer_off_control,
    regression_24view,
)
from runners.checks.base import CheckContext
from runners.result import CheckResult, Json


@dataclass(frozen=True, slots=True)
class CheckSpec:
    name: str
    version: str
    defaults: dict[str, Json]
    run: Callable[[CheckContext, dict[str, Json]], list[CheckResult]]
    needs_cuda_devices: int = 0
    """CUDA devices the check needs on a CUDA run (0: any device, CPU included)."""


CHECKS: dict[str, CheckSpec] = {
    m.NAME: CheckSpec(name=m.NAME, version=m.VERSION, defaults=dict(m.DEFAULTS), run=m.run)
    for m in (
        admission,
        regression_24view,
        full_prefix_backward,
        gradient_compare,
        observer_off_control,
        cleanup,
    )
}
CHECKS[mesh_handoff.NAME] = CheckSpec(
    name=mesh_handoff.NAME,
    version=mesh_handoff.VERSION,
    defaults=dict(mesh_handoff.DEFAULTS),
    run=mesh_handoff.run,
    needs_cuda_devices=2,
)


def get_check(name: str) -> CheckSpec:
    """The check called ``name``; KeyError naming the known checks otherwise."""
    try:
        return CHECKS[name]
    except KeyError:
        raise KeyError(f"unknown check {name!r}; known: {', '.join(sorted(CHECKS))}") from None


__all__ = ["CHECKS", "CheckContext", "CheckSpec", "get_check"]
