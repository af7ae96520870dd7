"""The literals runners and the ledger exchange: check names, outcomes, devices.

Plain strings, no torch: the ledger reads these without loading a runner.
"""

from __future__ import annotations

from typing import Final, Literal

Outcome = Literal["passed", "failed", "inconclusive", "refused", "infra-error"]
OUTCOMES: Final[tuple[Outcome, ...]] = (
    "passed",
    "failed",
    "inconclusive",
    "refused",
    "infra-error",
)

Observer = Literal["on", "off"]

Device = Literal["auto", "cpu", "cuda"]
"""What a caller asks for; ``auto`` resolves to CUDA when available, else CPU."""
DEVICES: Final[tuple[Device, ...]] = ("auto", "cpu", "cuda")

DeviceKind = Literal["cuda", "cpu"]
"""What a run happened on (the ``device_kind`` scope facet)."""

ADMISSION: Final = "admission"
CLEANUP: Final = "cleanup"
ESTIMATOR_CALIBRATION: Final = "estimator-calibration"
FULL_PREFIX_BACKWARD: Final = "full-prefix-backward"
GRADIENT_COMPARE: Final = "gradient-compare"
MESH_HANDOFF: Final = "mesh-handoff"
OBSERVER_OFF_CONTROL: Final = "observer-off-control"
REGRESSION_24VIEW: Final = "regression-24view"

DEVICE_SHARED_VAR: Final = "LEDGER_DEVICE_SHARED"
"""``1`` in a claim process whose GPU may hold other claims' processes meanwhile
(`ledger.execution.sharing`): the device's used memory is then not the claim's."""

NEEDS_BASE: Final = frozenset({GRADIENT_COMPARE, REGRESSION_24VIEW, OBSERVER_OFF_CONTROL})
"""Checks that compare the candidate against a checkout of the base revision (the
observer-off control for the check it wraps, the 24-view regression by default)."""

SETUPS_PER_CLAIM: Final = {
    GRADIENT_COMPARE: 2,  # on each tree: base, reference, repeat / candidate, its reference
    "regression-24view": 2,  # the configured dtype and the reference one (each tree)
    "observer-off-control": 4,  # the wrapped check twice
}
"""How many times a claim of each check sets its workload up in one tree's processes (1
when not listed): what a fork server's one build saves (`runners.workloads.prebuilt`)."""
