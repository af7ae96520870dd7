"""Cleanup: run the workload once under the resource registry; the proof is the claim.

One setup, forward+backward, optimizer step and teardown. Passed iff every
owned resource was released and proven so, nothing unregistered was left
behind (processes, temp entries) and memory returned to its baseline within
the tolerance.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from runners.checks.context import CheckContext, Session, Verdict, phase_step
from runners.checks.execute import execute
from runners.checks.params import CheckParams
from runners.contract.names import CLEANUP
from runners.contract.result import CheckResult, Json
from runners.harness.proofs import describe_incomplete
from runners.protocol import Shape

NAME = CLEANUP
VERSION = "1"
INCOMPLETE = "cleanup incomplete"
"""How a verdict decided by the proof begins when the proof is incomplete."""


@dataclass(kw_only=True, slots=True, frozen=True)
class Params(CheckParams):
    batch: int = 2
    """Sequences in the step."""
    seq: int = 32
    """Tokens per sequence."""
    seed: int = 0
    """Seed of every generator and of the workload's inputs."""
    cleanup_tolerance_bytes: int | None = None
    """Allowed memory growth versus the baseline. None: 64 MiB on CUDA (kernels loaded on
    first use stay in the context), 0 on CPU."""


def decide(r: CheckResult, *, basis: str | None = None) -> None:
    """Decide a `cleanup` result on its proof, unless the workload itself failed.

    The check process decides on its own registry's proof; the process that ran it
    decides again once it has observed that process's exit, and records ``basis``."""
    if r.check != NAME:
        return
    decided = r.outcome == "failed" and (r.reason or "").startswith(INCOMPLETE)
    if r.outcome != "passed" and not decided:
        return
    r.measurements.pop("cleanup_incomplete", None)
    if basis is not None:
        r.measurements["verdict_basis"] = basis
    if r.cleanup.complete:
        r.outcome, r.reason = "passed", None
    else:
        r.outcome, r.reason = "failed", f"{INCOMPLETE}: {describe_incomplete(r.cleanup)}"


def run(ctx: CheckContext, p: Params, recorded: dict[str, Json]) -> list[CheckResult]:
    r = execute(
        ctx,
        check=NAME,
        version=VERSION,
        params=p,
        recorded=recorded,
        body=partial(_body, p=p),
        seed=p.seed,
        tolerance_bytes=p.cleanup_tolerance_bytes,
    )
    decide(r)
    if r.outcome == "passed":
        r.measurements["resources_released"] = len(r.cleanup.resources)
    r.measurements["cleanup_tolerance_bytes"] = r.cleanup.tolerance_bytes
    return [r]


def _body(sess: Session, p: Params) -> Verdict:
    shape = Shape(batch=p.batch, seq=p.seq)
    w = sess.load()
    batch = sess.call("make_batch", partial(w.make_batch, shape, sess.seed))
    sess.call("forward+backward", phase_step(w, batch, grad=True))
    del batch
    sess.call("optimizer_step", w.optimizer_step)
    sess.call("zero_grad", w.zero_grad)
    sess.call("teardown", w.teardown)
    return Verdict(outcome="passed", reason=None, measurements={"shape": str(shape)})
