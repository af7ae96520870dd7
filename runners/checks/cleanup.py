"""Cleanup: run the workload once under the resource registry; the proof is the claim.

One setup, forward+backward, optimizer step and teardown. Passed iff every
owned resource was released and proven so, nothing unregistered was left
behind (processes, temp entries) and memory returned to its baseline within
the tolerance.
"""

from __future__ import annotations

from functools import partial

from runners.checks.base import (
    CheckContext,
    Session,
    Verdict,
    execute,
    int_param,
    phase_step,
)
from runners.harness.cleanup import describe_incomplete
from runners.protocol import Shape
from runners.result import CheckResult, Json

NAME = "cleanup"
VERSION = "1"
DEFAULTS: dict[str, Json] = {"batch": 2, "seq": 32, "seed": 0, "cleanup_tolerance_bytes": None}
"""``cleanup_tolerance_bytes`` None: 64 MiB on CUDA (kernels loaded on first use stay
in the context), 0 on CPU."""


def run(ctx: CheckContext, params: dict[str, Json]) -> list[CheckResult]:
    p = {**DEFAULTS, **params}
    r = execute(ctx, check=NAME, version=VERSION, params=p, body=lambda s: _body(s, p))
    if r.outcome == "passed" and not r.cleanup.complete:
        r.outcome = "failed"
        r.reason = f"cleanup incomplete: {describe_incomplete(r.cleanup)}"
        r.measurements.pop("cleanup_incomplete", None)
    if r.outcome == "passed":
        r.measurements["resources_released"] = len(r.cleanup.resources)
    r.measurements["cleanup_tolerance_bytes"] = r.cleanup.tolerance_bytes
    return [r]


def _body(sess: Session, p: dict[str, Json]) -> Verdict:
    shape = Shape(batch=int_param(p, "batch", 2), seq=int_param(p, "seq", 32))
    w = sess.load()
    batch = sess.call("make_batch", partial(w.make_batch, shape, sess.seed))
    sess.call("forward+backward", phase_step(w, batch, grad=True))
    del batch
    sess.call("optimizer_step", w.optimizer_step)
    sess.call("zero_grad", w.zero_grad)
    sess.call("teardown", w.teardown)
    return Verdict(outcome="passed", reason=None, measurements={"shape": str(shape)})
