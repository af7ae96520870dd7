"""Which claims may share a GPU, how many at once, and what a shared run proves.

A claim whose verdict reads no device memory (a 24-view regression, a gradient
comparison, an observer-off control of either) runs beside others on one GPU: on
an H200 each such claim of a ~0.9 B model leaves most of the device idle, and run
in turn they were most of a plan's time. A claim that measures memory (admission,
full-prefix backward, cleanup, mesh handoff, and any check not named here) keeps
an idle device to itself, as before.

What sharing may change is ruled out, not argued away: a neighbour can only take
memory and time, so a shared run can fail (out of memory, a decision taken at
less free memory) where an idle device would not, never pass where it would
fail. Only a shared run that passed is recorded; any other outcome is thrown
away and the claim runs again alone (`rerun_why`). Each receipt names the claims
its run shared a device with (``device_shared_with`` in the runner's
environment), and a shared run's exit proof reads its own processes alone (the
device's used memory moves with its neighbours').
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ledger.evidence.errors import UsageError

if TYPE_CHECKING:
    from runners.contract.result import CheckResult, Stamped

__all__ = ["CHILD_VAR", "DEFAULT_ON_GPU", "SHAREABLE", "VAR", "limit", "rerun_why", "shares"]

SHAREABLE = frozenset({"regression-24view", "gradient-compare"})
"""Checks whose verdict reads no device memory (`runners.contract.names`' spellings: the ledger
imports no runner module at import time)."""

VAR = "LEDGER_SHARE_DEVICE"
"""Claims at most on one device at once: ``1`` turns sharing off; unset: `DEFAULT_ON_GPU`
on a GPU, 1 on a CPU slot (its cores are already divided among the claims)."""

DEFAULT_ON_GPU = 4

CHILD_VAR = "LEDGER_DEVICE_SHARED"
"""``1`` in a claim process whose device may hold other claims (`runners.harness.proofs`
then leaves the device's used memory out of its cleanup proof)."""


def shares(check: str, params: Mapping[str, Any]) -> bool:
    """Whether a claim of ``check`` with ``params`` may run beside others."""
    if check == "observer-off-control":
        return str(params.get("check", "regression-24view")) in SHAREABLE
    return check in SHAREABLE


def limit(on_gpu: bool, environ: Mapping[str, str] | None = None) -> int:
    """Claims at most on one device at once (`VAR`); `UsageError` for a bad value."""
    text = (os.environ if environ is None else environ).get(VAR, "").strip()
    if not text:
        return DEFAULT_ON_GPU if on_gpu else 1
    if not text.isdigit() or int(text) < 1:
        raise UsageError(f"{VAR}={text!r}: want a whole number of claims, 1 or more")
    return int(text)


def rerun_why(results: Iterable[CheckResult | Stamped]) -> str | None:
    """Why a shared run's results are not recorded (it runs again alone), or None: an
    outcome other than passed, or a cleanup proof that is not complete."""
    results = list(results)
    bad: list[str] = sorted({r.outcome for r in results if r.outcome != "passed"})
    if any(r.cleanup is not None and not r.cleanup.complete for r in results):
        bad.append("cleanup not proven")
    if not bad:
        return None
    return f"{', '.join(bad)} on a shared device"
