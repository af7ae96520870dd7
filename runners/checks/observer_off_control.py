"""Observer-off control: the same check with the observer on, then off, compared.

Both runs happen in this process, each with a fresh workload instance, setup
and resource registry (whose release returns library workspaces too), so they
start alike. Compared: the outcomes and every measurement that does not depend
on allocator cache state, timing or the observer itself (reset-to-peak
increments, predictions, admission decisions, statuses, output digests, NLLs,
gradient comparisons). The results are the observer-on run, the observer-off
run (the control receipt) and a comparison saying whether the observer changed
anything: passed iff nothing compared differs. A check that compares against the
base (`runners.contract.names.NEEDS_BASE`) runs the base's arms in the first run only:
the second reuses them, so what differs is the head's run alone.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from runners.checks.context import CheckContext, could_not_run
from runners.checks.execute import json_safe
from runners.checks.params import CheckParams, ParamError
from runners.contract.names import NEEDS_BASE, OBSERVER_OFF_CONTROL, REGRESSION_24VIEW
from runners.contract.result import CheckResult, Json
from runners.harness.proofs import merge_proofs

NAME = OBSERVER_OFF_CONTROL
VERSION = "2"

Runner = Callable[[CheckContext, dict[str, Json]], list[CheckResult]]
"""A check as the control calls it: context and plan parameters in, results out."""


@dataclass(kw_only=True, slots=True, frozen=True)
class Params(CheckParams):
    check: str = REGRESSION_24VIEW
    """The check to run with the observer on, then off."""
    params: dict[str, Json] = field(default_factory=dict)
    """That check's parameters."""
    float_rtol: float = 0.0
    """Allowed relative difference of compared floats (0: exact)."""
    base_workload_params: dict[str, Json] = field(default_factory=dict)
    """Workload parameters of the base's arms, handed to a check that compares against
    the base (unless its own ``params`` give them): what the runner sets where the base
    tree defines the workload otherwise."""
    base_workload_ref: str = ""
    """The base's arms' workload entry point, handed on likewise (empty: the claim's)."""

    def constrain(self) -> None:
        if self.check == OBSERVER_OFF_CONTROL:
            raise ParamError(f"parameter 'check' must name another check, got {self.check!r}")


_EXACT_SUFFIXES = ("increment_bytes", "measured_bytes", "predicted_bytes", "_over_predicted")
_EXACT_NAMES = frozenset(
    {
        "admitted",
        "status",
        "counterexample",
        "over_refused",
        "over_threshold",
        "rel_l2",
        "cosine",
        "max_abs",
        "name",
        "numel",
        "shape",
        "phase",
        "run",
        "admitted_count",
        "refused_count",
        "counterexample_count",
        "over_refused_count",
        "tensors_compared",
        "tensors_over_threshold",
        "target_admitted",
    }
)
_EXACT_PREFIXES = ("nll", "pooled", "max_rel_l2", "min_cosine")


def compared(key: str) -> bool:
    """Whether a flattened measurement key is compared between the two runs."""
    last = key.rsplit(".", 1)[-1].split("[", 1)[0]
    if last.startswith("observer_") or last.endswith("_ns"):
        return False
    return (
        last.endswith(_EXACT_SUFFIXES)
        or last in _EXACT_NAMES
        or last.startswith(_EXACT_PREFIXES)
        or "sha256" in last
    )


def flatten(value: Json, prefix: str = "") -> dict[str, Json]:
    """``{"a": {"b": [1]}}`` -> ``{"a.b[0]": 1}``."""
    out: dict[str, Json] = {}
    if isinstance(value, dict):
        for k, v in value.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.update(flatten(v, f"{prefix}[{i}]"))
    else:
        out[prefix] = value
    return out


def _same(a: Json, b: Json, rtol: float) -> bool:
    if isinstance(a, float) and isinstance(b, float) and rtol > 0:
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return abs(a - b) <= rtol * max(abs(a), abs(b))
    return a == b and type(a) is type(b)


def differences(on: CheckResult, off: CheckResult, rtol: float) -> list[dict[str, Json]]:
    """Compared measurements (and the outcome) that differ between the runs."""
    diffs: list[dict[str, Json]] = []
    if on.outcome != off.outcome:
        diffs.append({"key": "outcome", "on": on.outcome, "off": off.outcome})
    fa, fb = flatten(dict(on.measurements)), flatten(dict(off.measurements))
    for key in sorted(set(fa) | set(fb)):
        if not compared(key):
            continue
        a, b = fa.get(key), fb.get(key)
        if key not in fa or key not in fb or not _same(a, b, rtol):
            diffs.append({"key": key, "on": a, "off": b})
    return diffs


def run(
    ctx: CheckContext, p: Params, recorded: dict[str, Json], *, lookup: Callable[[str], Runner]
) -> list[CheckResult]:
    """Run ``p.check`` (found by ``lookup``, KeyError when unknown) on, then off."""
    try:
        inner = lookup(p.check)
    except KeyError as e:
        return [could_not_run(ctx, check=NAME, version=VERSION, params=recorded, why=str(e))]
    given = dict(p.params)
    if p.base_workload_params and p.check in NEEDS_BASE:
        given.setdefault("base_workload_params", dict(p.base_workload_params))
    if p.base_workload_ref and p.check in NEEDS_BASE:
        given.setdefault("base_workload_ref", p.base_workload_ref)
    # Both runs share one `CheckContext.shared`: a check comparing against the base runs
    # the base's arms once (they do not depend on the observer) and reuses them.
    ctx.progress(f"observer-off control of {p.check}: observer on")
    on = inner(dataclasses.replace(ctx, observer="on"), dict(given))
    ctx.progress(f"observer-off control of {p.check}: observer off")
    off = inner(dataclasses.replace(ctx, observer="off"), dict(given))
    if len(on) != 1 or len(off) != 1:
        reason = f"{p.check} gave {len(on)}/{len(off)} results, expected 1/1"
        bad = could_not_run(ctx, check=NAME, version=VERSION, params=recorded, why=reason)
        return [*on, *off, bad]
    return [on[0], off[0], _control(ctx, p, recorded, on[0], off[0])]


def _control(
    ctx: CheckContext, p: Params, recorded: dict[str, Json], a: CheckResult, b: CheckResult
) -> CheckResult:
    inner_name, inner_params, rtol = p.check, p.params, recorded.get("float_rtol", 0.0)
    diffs = differences(a, b, p.float_rtol)
    keys = [
        k
        for k in set(flatten(dict(a.measurements))) | set(flatten(dict(b.measurements)))
        if compared(k)
    ]
    m: dict[str, Json] = {
        "order": ["on", "off"],
        "on_outcome": a.outcome,
        "off_outcome": b.outcome,
        "compared_keys": len(keys),
        "differences": diffs,  # type: ignore[dict-item]
        "observer_changed_anything": bool(diffs),
        "duration_on_ns": a.finished_ns - a.started_ns,
        "duration_off_ns": b.finished_ns - b.started_ns,
    }
    if "infra-error" in (a.outcome, b.outcome):
        outcome, reason = (
            "inconclusive",
            (f"a run was an infra-error (on: {a.reason}; off: {b.reason})"),
        )
    elif diffs:
        first = diffs[0]
        outcome, reason = (
            "failed",
            (
                f"the observer changed {len(diffs)} of {len(keys)} compared values; first "
                f"{first['key']}: on {first['on']!r}, off {first['off']!r}"
            ),
        )
    else:
        outcome, reason = "passed", None
    return CheckResult(
        claim=ctx.claim,
        check=NAME,
        check_version=VERSION,
        params={
            "check": inner_name,
            "params": inner_params,
            "float_rtol": rtol,
            "inner_check_version": b.check_version,
        },
        scope=dict(b.scope),
        outcome=outcome,  # type: ignore[arg-type]
        reason=reason,
        measurements=safe if isinstance(safe := json_safe(m), dict) else {},
        observer="off",
        cleanup=merge_proofs(a.cleanup, b.cleanup),
        artifacts=[],
        gpu_uuids=list(b.gpu_uuids),
        host=b.host,
        started_ns=a.started_ns,
        finished_ns=b.finished_ns,
    )
