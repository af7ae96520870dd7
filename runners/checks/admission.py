"""Admission contract over a lattice of shapes: admitted => no OOM and measured <= predicted.

For every (phase, batch, seq) the workload is asked to admit at the memory
available now. A refusal is recorded with its numbers and, with
``measure_refused``, the refused step is run anyway (without ballast) to
measure over-refusal: a refused step whose measured increment fit within the
usable bytes at refusal time was over-refused. An admitted step is, under
``pressure="edge"``, re-admitted with ballast allocated (`runners.checks.edge`) so
that the available memory is just above the least the workload admits at (``edge_margin_bytes``
above it; where allocation granularity or the driver prevents that, the step
runs at the memory available and its row says ``edge_reached: false``), then
run under a reset-to-peak window, once and ``warm_runs`` more times, each run
re-admitted first. Rows say which run was the check's cold one (its first
measured step); the others are warm.
A counterexample (an OOM, or a measured increment above the prediction of the
decision that admitted it) fails the check. A check whose
every step was refused is ``refused``, not passed. An admitted step that ran on a
prediction of 0 bytes (no measured/predicted ratio) makes the check
``inconclusive``: its tightness would otherwise never be judged.

CPU: host RAM is not what the contract is about, so free memory is simulated:
the probe's budget (``budget_bytes``) less the tracked live storage bytes.
Ballast is then a tracked CPU tensor, and a run whose tracked peak exceeds the
budget counts as a (simulated) OOM.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

from runners.checks.context import CheckContext, Session, Verdict, phase_step
from runners.checks.edge import CUDA_EDGE_MARGIN, min_admitting_free, to_edge
from runners.checks.execute import execute
from runners.checks.params import CheckParams, ParamError
from runners.contract.names import ADMISSION
from runners.contract.result import CheckResult, Json
from runners.harness.distributed import agreed_decision, any_rank
from runners.harness.probe import CpuProbe
from runners.harness.steps import StepRecord, measure_step
from runners.protocol import PHASES, STEP_PHASES, AdmissionDecision, Phase, Shape, Workload

NAME = ADMISSION
VERSION = "1"


@dataclass(kw_only=True, slots=True, frozen=True)
class Params(CheckParams):
    batches: list[int] = field(default_factory=lambda: [1, 2, 4])
    """Batch sizes of the lattice."""
    seqs: list[int] = field(default_factory=lambda: [16, 64])
    """Sequence lengths of the lattice."""
    phases: list[Phase] = field(default_factory=lambda: list(PHASES))
    """Phases admitted and run at every shape (run in the order forward_nograd,
    forward_backward, optimizer_step; the last only where named: the optimizer's step
    alone, measured after an unmeasured forward and backward made its gradients)."""
    pressure: Literal["edge", "none"] = "edge"
    """``edge``: ballast brings the available memory down to just above the least the
    workload admits at; ``none``: each step runs at the memory available."""
    edge_margin_bytes: int | None = None
    """Room left above the least admitting free memory under edge pressure. None: 2 MiB
    on CUDA (allocator block granularity), 0 on CPU."""
    warm_runs: int = 1
    """Runs of each admitted step after the first, each re-admitted first."""
    measure_refused: bool = True
    """Run a refused step anyway (without ballast) to measure over-refusal."""
    budget_bytes: int | None = None
    """CPU only: the simulated device size. None: live bytes after setup plus the median,
    over the lattice, of the least free memory the workload admits at, so some shapes
    refuse."""
    seed: int = 0
    """Seed of every generator and of the workload's inputs."""
    min_measured_over_predicted: float | None = None
    """Tightness a plan requires: the least measured/predicted over the admitted steps
    that ran must be at least this, or the check fails naming the step (an estimate
    that admits safely by predicting many times what a step uses wastes the device).
    None: not judged; the figure is recorded all the same."""
    max_over_refused: int | None = None
    """Tightness a plan requires: at most this many refused steps may have fit (needs
    ``measure_refused``). None: not judged; the count is recorded all the same."""

    def constrain(self) -> None:
        if self.min_measured_over_predicted is not None and not (
            0 < self.min_measured_over_predicted <= 1
        ):
            raise ParamError(
                "parameter 'min_measured_over_predicted' must be in (0, 1], got "
                f"{self.min_measured_over_predicted!r}"
            )
        if self.max_over_refused is not None:
            if self.max_over_refused < 0:
                raise ParamError(
                    f"parameter 'max_over_refused' must be >= 0, got {self.max_over_refused!r}"
                )
            if not self.measure_refused:
                raise ParamError(
                    "parameter 'max_over_refused' needs measure_refused = true (over-refusal "
                    "is only known for a refused step run anyway)"
                )


def _run_phase(sess: Session, w: Workload, shape: Shape, phase: Phase, what: str) -> StepRecord:
    grad = phase != "forward_nograd"
    if grad:
        sess.call("zero_grad", w.zero_grad)
    batch = sess.call(f"make_batch {shape}", partial(w.make_batch, shape, sess.seed))
    step = phase_step(w, batch, grad=grad)
    del batch
    if phase == "optimizer_step":
        # The gradients are made outside the window: it measures the step alone.
        sess.call("forward_backward", step)
        step = w.optimizer_step  # type: ignore[assignment]
    rec = measure_step(sess.probe, what, step)
    sess.ran(phase)
    del step
    if grad:
        sess.call("zero_grad", w.zero_grad)
    return rec


def _decision(d: AdmissionDecision, prefix: str = "") -> dict[str, Json]:
    return {f"{prefix}{k}": v for k, v in d.measurements().items()}


def run(ctx: CheckContext, p: Params, recorded: dict[str, Json]) -> list[CheckResult]:
    body = partial(_body, p=p)
    r = execute(
        ctx, check=NAME, version=VERSION, params=p, recorded=recorded, body=body, seed=p.seed
    )
    return [r]


def _body(sess: Session, p: Params) -> Verdict:
    phases = [ph for ph in STEP_PHASES if ph in p.phases]
    pressure, warm_runs, measure_refused = p.pressure, p.warm_runs, p.measure_refused
    cpu = isinstance(sess.probe, CpuProbe)
    margin_default = 0 if cpu else CUDA_EDGE_MARGIN
    margin = margin_default if p.edge_margin_bytes is None else p.edge_margin_bytes
    shapes = [Shape(batch=b, seq=s) for b in p.batches for s in p.seqs]

    w = sess.load()
    m: dict[str, Json] = {"edge_margin_bytes": margin, "pressure": str(pressure)}
    m.update(_memory(sess, w, p, shapes, phases))

    rows: list[dict[str, Json]] = []
    counterexamples: list[str] = []
    failures: list[str] = []
    for phase in phases:
        for shape in shapes:
            sess.progress(f"admission {phase} {shape}")
            rows.extend(
                _shape(
                    sess,
                    w,
                    shape,
                    phase,
                    pressure == "edge",
                    margin,
                    warm_runs,
                    measure_refused,
                    counterexamples,
                    failures,
                )
            )

    source = getattr(w, "calibration_source", None)
    if source is not None:
        # Where the built-in estimator's fit came from (measured in this claim, or kept
        # from an earlier run of the same workload on this device): a later run says
        # it measured nothing.
        m["calibration_source"] = str(source)
    return _verdict(p, rows, counterexamples, failures, m)


def _verdict(
    p: Params,
    rows: list[dict[str, Json]],
    counterexamples: list[str],
    failures: list[str],
    m: dict[str, Json],
) -> Verdict:
    """The lattice's rows tallied into the measurements, and the outcome: a
    counterexample or a failed step fails, every step refused is a refusal, and
    admissions looser than the plan's bounds fail after safety was judged."""
    admitted = [r for r in rows if r["admitted"]]
    refused = [r for r in rows if not r["admitted"]]
    ratios = [r["measured_over_predicted"] for r in admitted if r["measured_bytes"] is not None]
    loosest = min(
        (r for r in admitted if isinstance(r["measured_over_predicted"], float)),
        key=lambda r: float(r["measured_over_predicted"]),  # type: ignore[arg-type]
        default=None,
    )
    over_refused = sum(1 for r in refused if r.get("over_refused") is True)
    m.update(
        {
            "attempts": len(rows),
            "admitted_count": len(admitted),
            "refused_count": len(refused),
            "counterexample_count": len(counterexamples),
            "over_refused_count": over_refused,
            "max_measured_over_predicted": max(
                (float(x) for x in ratios if isinstance(x, float)), default=None
            ),
            "min_measured_over_predicted": (
                None if loosest is None else loosest["measured_over_predicted"]
            ),
            "shapes": rows,  # type: ignore[dict-item]
        }
    )
    if counterexamples:
        return Verdict(
            outcome="failed",
            reason=counterexamples[0]
            + (
                f" (and {len(counterexamples) - 1} more counterexamples)"
                if len(counterexamples) > 1
                else ""
            ),
            measurements=m,
        )
    if failures:
        return Verdict(outcome="failed", reason=failures[0], measurements=m)
    if not admitted:
        return Verdict(
            outcome="refused",
            reason=f"every one of {len(rows)} lattice steps was refused; first: "
            f"{refused[0]['phase']} {refused[0]['shape']} predicted "
            f"{refused[0]['predicted_bytes']} > usable {refused[0]['usable_bytes']}",
            measurements=m,
        )
    unjudged = _no_ratio(admitted)
    if unjudged:
        return Verdict(outcome="inconclusive", reason=unjudged, measurements=m)
    loose = _too_loose(p, loosest, over_refused)
    if loose:
        return Verdict(outcome="failed", reason=loose, measurements=m)
    return Verdict(outcome="passed", reason=None, measurements=m)


def _memory(
    sess: Session, w: Workload, p: Params, shapes: list[Shape], phases: list[Phase]
) -> dict[str, Json]:
    """How memory is had: on a GPU the device's own; on the CPU a simulated budget
    (the parameter, or the live tensors after setup plus the median least free
    memory that admits a lattice step)."""
    m: dict[str, Json] = {}
    if isinstance(sess.probe, CpuProbe):
        probe = sess.probe
        m["memory_simulated"] = True
        m["memory_note"] = (
            "CPU run: free memory is simulated as budget_bytes less tracked live tensor "
            "storage; host RAM is not the constraint"
        )
        live = probe.sample().allocated_bytes
        if p.budget_bytes is None:
            needs = sorted(
                n
                for s in shapes
                for ph in phases
                if (n := min_admitting_free(w, s, ph)) is not None
            )
            if not needs:
                raise ParamError("no lattice shape is admitted at any budget")
            probe.budget_bytes = live + needs[len(needs) // 2]
            m["budget_rule"] = "live after setup + median least-admitting free over the lattice"
        else:
            probe.budget_bytes = p.budget_bytes
            m["budget_rule"] = "parameter"
        m["live_after_setup_bytes"] = live
        m["budget_bytes"] = probe.budget_bytes
    else:
        m["memory_simulated"] = False
    return m


def _no_ratio(admitted: list[dict[str, Json]]) -> str | None:
    """Why an admitted step that ran cannot be judged against its prediction (a
    prediction of 0 bytes or less has no measured/predicted ratio: it held only
    because nothing was measured above it, and its tightness is never known), or None."""
    for r in admitted:
        if r["measured_bytes"] is not None and r["measured_over_predicted"] is None:
            return (
                f"{r['phase']} at shape {r['shape']} ({r['run']}) was admitted on a "
                f"prediction of {r['predicted_bytes']} bytes and measured "
                f"{r['measured_bytes']}: no measured/predicted ratio, so the estimate's "
                "tightness cannot be judged; an estimate must predict a positive size"
            )
    return None


def _too_loose(p: Params, loosest: dict[str, Json] | None, over_refused: int) -> str | None:
    """Why the admissions were looser than the plan's bounds allow, or None (judged
    after safety: a counterexample is the worse news and is reported first)."""
    bound = p.min_measured_over_predicted
    if bound is not None and loosest is not None:
        ratio = loosest["measured_over_predicted"]
        if isinstance(ratio, float) and ratio < bound:
            return (
                f"too loose: least measured/predicted {ratio:g} < bound "
                f"min_measured_over_predicted {bound:g} ({loosest['phase']} at shape "
                f"{loosest['shape']} ({loosest['run']}): measured {loosest['measured_bytes']} "
                f"of predicted {loosest['predicted_bytes']})"
            )
    if p.max_over_refused is not None and over_refused > p.max_over_refused:
        return (
            f"too loose: over-refused {over_refused} > bound max_over_refused "
            f"{p.max_over_refused} (refused steps that fit when run anyway)"
        )
    return None


def _shape(
    sess: Session,
    w: Workload,
    shape: Shape,
    phase: Phase,
    edge: bool,
    margin: int,
    warm_runs: int,
    measure_refused: bool,
    counterexamples: list[str],
    failures: list[str],
) -> list[dict[str, Json]]:
    """One shape in one phase, its first run and its warm repeats: each asked for
    admission (at the edge of free memory under ``edge``), run where admitted, and
    judged against its prediction; a refusal ends the repeats."""
    probe = sess.probe
    rows: list[dict[str, Json]] = []

    def keep(row: dict[str, Json]) -> None:
        # The whole attempt, from releasing the cache to the ballast's release: what the
        # harness spent around the measured step is this less ``duration_ns``.
        row["attempt_ns"] = time.perf_counter_ns() - t0
        rows.append(row)

    for i in range(1 + warm_runs):
        run_name = "first" if i == 0 else f"repeat{i}"
        t0 = time.perf_counter_ns()
        probe.release_cached()
        available0 = probe.available_bytes()
        d0: AdmissionDecision = sess.admit(w, shape, phase, available0)
        row = _row(sess, shape, phase, run_name, available0)
        d0 = agreed_decision(d0, row)
        if not d0.admitted:
            keep(_refused(sess, w, shape, phase, d0, available0, row, measure_refused))
            # A refusal at natural free memory repeats for the warm runs: stop here.
            break

        decision, ballast = d0, None
        if edge:
            t_edge = time.perf_counter_ns()
            decision, ballast, tries, reached = to_edge(sess, w, shape, phase, available0, margin)
            row["edge_tries"] = tries
            row["edge_reached"] = reached
            # The edge search and the ballast's allocation: the harness's own cost of
            # putting the step at its edge, beside the step's own (``duration_ns``).
            row["edge_ns"] = time.perf_counter_ns() - t_edge
        try:
            if edge:
                decision = agreed_decision(decision, row)
            row.update(_decision(decision))
            row["ballast_bytes"] = 0 if ballast is None else int(ballast.payload.nbytes)
            available = probe.available_bytes()
            row["available_with_ballast_bytes"] = available
            if not decision.admitted:
                # Admitted a moment ago, refused now (memory moved under us): record
                # the refusal with its numbers; it is not a counterexample.
                row["over_refused"] = None
                keep(row)
                continue
            rec = _run_phase(sess, w, shape, phase, f"{phase} {shape} ({run_name})")
        finally:
            if ballast is not None:
                sess.registry.release_now(ballast)
        halt = any_rank(not rec.ok)
        row["status"] = _status(rec, available, probe)
        row["duration_ns"] = rec.peak.duration_ns
        row["measured_bytes"] = rec.increment_bytes if rec.outcome.status != "failed" else None
        row["measured_over_predicted"] = _ratio(rec.increment_bytes, decision.predicted_bytes)
        if rec.outcome.status == "failed" or rec.outcome.status == "infra-error":
            failures.append(f"{phase} {shape} ({run_name}): {rec.outcome.sentence()}")
            row["error"] = rec.outcome.measurements()
            keep(row)
            break
        said = _counterexample(rec, decision, row, f"{phase} at shape {shape} ({run_name})")
        if said is not None:
            counterexamples.append(said)
        keep(row)
        if halt:
            break
    return rows


def _row(
    sess: Session, shape: Shape, phase: Phase, run_name: str, available: int
) -> dict[str, Json]:
    """One run's row before it is asked for admission."""
    return {
        "shape": str(shape),
        "batch": shape.batch,
        "seq": shape.seq,
        "phase": phase,
        "run": run_name,
        # Cold: no step of this phase ran in the process yet (what the estimate
        # was told); first_in_process: the check's very first measured step.
        "cold": sess.cold(phase),
        "first_in_process": sess.steps_measured == 0,
        "available_bytes": available,
        "ballast_bytes": 0,
        "measured_bytes": None,
        "measured_over_predicted": None,
        "status": None,
        "counterexample": False,
    }


def _refused(
    sess: Session,
    w: Workload,
    shape: Shape,
    phase: Phase,
    d: AdmissionDecision,
    available: int,
    row: dict[str, Json],
    measure_refused: bool,
) -> dict[str, Json]:
    """A refused run's row: the decision, and (``measure_refused``) the step run
    anyway, whether it would have fit."""
    row.update(_decision(d))
    row["over_refused"] = None
    if measure_refused:
        rec = _run_phase(sess, w, shape, phase, f"{phase} {shape} (refused, measured)")
        row["status"] = _status(rec, available, sess.probe)
        if rec.ok:
            row["measured_bytes"] = rec.increment_bytes
            row["measured_over_predicted"] = _ratio(rec.increment_bytes, d.predicted_bytes)
            row["over_refused"] = rec.increment_bytes <= d.usable_bytes
        row["duration_ns"] = rec.peak.duration_ns
    return row


def _counterexample(
    rec: StepRecord, decision: AdmissionDecision, row: dict[str, Json], where: str
) -> str | None:
    """What makes an admitted run a counterexample (out of memory, or measured above
    its own rank's prediction), marked on its row; None where it held."""
    oom = row["status"] in ("oom", "simulated-oom")
    # Each rank against its own prediction: the agreed one is only the largest.
    own = row.get("rank_predicted_bytes", decision.predicted_bytes)
    over = rec.increment_bytes > (own if isinstance(own, int) else decision.predicted_bytes)
    if not (oom or over):
        return None
    row["counterexample"] = True
    what = (
        "ran out of memory"
        if row["status"] == "oom"
        else (
            f"measured increment {rec.increment_bytes} > predicted "
            f"{decision.predicted_bytes}"
            + (" (simulated OOM: peak above the budget)" if oom else "")
        )
    )
    if row["status"] == "oom":
        row["error"] = rec.outcome.measurements()
    return (
        f"counterexample: {where} was admitted "
        f"(predicted {decision.predicted_bytes} <= usable {decision.usable_bytes}, "
        f"ballast {row['ballast_bytes']}) but {what}"
    )


def _status(rec: StepRecord, available: int, probe: Any) -> str:
    if rec.outcome.status != "ok":
        return rec.outcome.status
    if (
        isinstance(probe, CpuProbe)
        and probe.budget_bytes is not None
        and (rec.increment_bytes > available)
    ):
        probe.note_oom()
        return "simulated-oom"
    return "ok"


def _ratio(measured: int, predicted: int) -> float | None:
    return None if predicted <= 0 else round(measured / predicted, 6)
