"""Estimator calibration: the built-in estimator's fit, measured on the device, as a receipt.

A ready adapter whose plan names no estimator (or ``"builtin"``) predicts memory
from a calibration (`runners.adapt.calibrate`): small shapes measured on the device,
an upper envelope fit per phase, its stated error (``error_bytes`` and
``error_permille`` of the point), the validation steps. This check measures that
calibration in the claim (``fresh``) and records it whole in the
receipt's measurements, with its id: the admission and full-prefix receipts that
used it name the same id (``calibration`` on each row), so the fit behind a bound
is signed evidence of its own. Passed when the calibration was measured; a workload
predicting with its own estimator has nothing to calibrate (inconclusive, saying so).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial
from typing import Any

from runners.checks.context import CheckContext, Session, Verdict
from runners.checks.execute import execute
from runners.checks.params import CheckParams
from runners.contract.names import ESTIMATOR_CALIBRATION
from runners.contract.result import CheckResult, Json

NAME = ESTIMATOR_CALIBRATION
VERSION = "1"


@dataclass(kw_only=True, slots=True, frozen=True)
class Params(CheckParams):
    fresh: bool = True
    """Measure the calibration in this claim even where one is kept for the workload's
    digest and device (it then replaces the kept one). False: a kept one is recorded
    as it was (``calibration_source`` says ``cache``)."""
    seed: int = 0
    """Seed of every generator and of the workload's inputs."""


def run(ctx: CheckContext, p: Params, recorded: dict[str, Json]) -> list[CheckResult]:
    r = execute(
        ctx,
        check=NAME,
        version=VERSION,
        params=p,
        recorded=recorded,
        body=partial(_body, p=p),
        seed=p.seed,
    )
    return [r]


def _body(sess: Session, p: Params) -> Verdict:
    w: Any = sess.load()
    # Beside a team's estimator (builtin_beside) the built-in fit is recorded on each
    # admission row: it is measured and signed here as where it decides.
    if not (getattr(w, "builtin_estimator", False) or getattr(w, "builtin_beside", False)):
        return Verdict(
            outcome="inconclusive",
            reason=(
                f"{w.name} predicts memory with an estimator of its own: there is no "
                "built-in calibration to measure (a ready adapter uses one where its plan "
                'names no estimator, or estimator = "builtin")'
            ),
        )
    t0 = time.monotonic_ns()
    cal = sess.call("calibrate", lambda: w.calibration(fresh=p.fresh))
    took = time.monotonic_ns() - t0
    record: dict[str, Json] = cal.json()
    return Verdict(
        outcome="passed",
        reason=None,
        measurements={
            "calibration": cal.id,
            "calibration_source": str(w.calibration_source),
            "calibration_ns": took,
            "measured_up_to_tokens": cal.measured_up_to_tokens,
            # The stated error per phase, both parts: bytes and a permille of the point.
            "error_bytes": {k: f.error_bytes for k, f in sorted(cal.phases.items())},
            "error_permille": {k: f.error_permille for k, f in sorted(cal.phases.items())},
            "record": record,
        },
    )
