"""Gradient comparison: base vs candidate on the same device in one run.

Each arm runs in its own child process (`runners.checks.grad_arm`, owned by
the check's registry with its process group), sequentially on the same device,
saving its gradients to an owned temporary directory. Tensors are compared by
name. Two rules judge them (``rule``, recorded in the receipt):

- ``reference`` (default): the base runs once more in a reference precision
  (the ``reference`` arm); per tensor the candidate passes when
  ``err(candidate, ref) <= k * floor + atol``, the floor being the larger of the
  precision floor ``err(base, ref)`` and, with ``noise_floor``, the repeat-noise
  floor ``err(base_repeat, base)`` (`runners.checks.precision`). With
  ``reference_candidate`` the candidate runs in the reference precision too
  (``candidate_reference``), so a change below the low precision's resolution
  shows where rounding is small (the function part). A reference arm failing to
  run makes the comparison ``inconclusive``, with its reason.
- ``threshold`` (the rule before the reference arm): relative L2 candidate vs
  base per tensor family against a fixed threshold (per dtype) and the repeat
  noise floor times ``noise_margin`` (`runners.checks.noise`).

Both record per tensor the candidate-vs-base relative L2, cosine and max abs
difference. Where the workload declares its routing (else where the harness
finds its routers, `runners.adapt.routers`), the receipt counts the tokens
routed differently between the arms; a candidate beyond the rule only in the
low precision, beside routings it flipped there, while within it in the
reference precision on the reference's routing, is ``inconclusive``. The outcome is ``inconclusive``
when the arms ran on different GPU UUIDs or started from different reserved
bytes; ``failed`` when the tensor sets differ or tensors are beyond the rule.
The observer, when on, instruments this (parent) process only, not the arms.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal

import torch

from runners.checks import noise, precision, routing
from runners.checks.arms import Schedule, run_arms
from runners.checks.context import CheckContext, Session, Verdict
from runners.checks.execute import execute
from runners.checks.gradient_verdicts import by_reference as _by_reference
from runners.checks.gradient_verdicts import by_threshold, compare, errors, rel_l2
from runners.checks.params import CheckParams
from runners.contract.names import GRADIENT_COMPARE
from runners.contract.result import CheckResult, Json

NAME = GRADIENT_COMPARE
VERSION = "3"


@dataclass(kw_only=True, slots=True, frozen=True)
class Params(CheckParams):
    batch: int = 2
    """Sequences in each arm's forward+backward."""
    seq: int = 32
    """Tokens per sequence."""
    rule: Literal["reference", "threshold"] = "reference"
    """How tensors are judged: ``reference`` (against the base's own error relative to a
    reference-precision run) or ``threshold`` (a fixed rel-L2 against the base; the rule
    receipts without this parameter were judged by)."""
    k: float = 2.0
    """Reference rule: the candidate's error against the reference may be this many times
    the floor (as FlashAttention's tests allow twice the baseline's error)."""
    atol: float = 1e-6
    """Reference rule: slack added to ``k * floor``, in rel-L2 units, for tensors whose
    floor is near zero (a float32 base against float64 is ~1e-7..1e-6)."""
    reference_dtype: Literal["float32", "float64"] | None = None
    """Reference rule: the precision of the reference arm. None: float32 for a bfloat16 /
    float16 workload, float64 for a float32 one (float64 is for CPU; many CUDA kernels
    take no float64, and the reference arm then cannot run)."""
    reference_candidate: bool | None = None
    """Reference rule: run the candidate in the reference precision too and compare it with
    the reference (the function part: `runners.checks.precision`), so that a change the
    low precision cannot resolve (a 1 % scale on one expert, in bf16) still shows. None:
    for a bfloat16 / float16 workload only (float32 resolves such changes itself, and
    libraries keep float32 steps inside a float64 model)."""
    function_atol: float | None = None
    """Reference rule, function part: the absolute allowance in rel-L2 units. None: 1024
    roundoffs of the reference precision (6.1e-5 for float32, 1.1e-13 for float64)."""
    threshold: float | None = None
    """Threshold rule: largest rel-L2 ``||c - b|| / ||b||`` a gradient tensor family may
    have. None: the dtype's default (``threshold_fp32`` or ``threshold_bf16``)."""
    threshold_fp32: float = 1e-4
    """Default threshold for float32 workloads: summation-order differences are
    ~1e-6 relative; a real change to the gradient is far above 1e-4."""
    threshold_bf16: float = 3e-2
    """Default threshold for bfloat16 / float16 workloads (8 / 11 mantissa bits: a
    rounding step is ~4e-3 / 5e-4 relative, and reductions accumulate several)."""
    noise_floor: bool = True
    """Run the base arm twice: the repeat-noise floor (a second floor under the reference
    rule, the only one under the threshold rule)."""
    noise_margin: float = 2.0
    """Threshold rule: the candidate's difference fails only above the noise floor times
    this."""
    base_workload_params: dict[str, Json] = field(default_factory=dict)
    """Workload parameters of the base arm: the claim's, updated by these. The base arm
    loads from the base revision's checkout when there is one."""
    base_workload_ref: str = ""
    """Workload entry point of the base's arms (``module:function``) where the base's plan
    names another than the head's; empty: the claim's."""
    candidate_workload_params: dict[str, Json] = field(default_factory=dict)
    """Workload parameters of the candidate arm: the claim's, updated by these."""
    arm_timeout_s: int = 600
    """Seconds both arms together may take."""
    parallel_arms: bool | None = None
    """Run the arms at the same time. None: in parallel on CPU; on CUDA the base arm
    alone, then the others side by side on the same device when what the base arm
    held, counted for each of them (twice for a reference arm), fits in 80 % of the
    memory left free, else one after the other. The check judges gradients, never
    memory: an arm's allocator figures are its own process's either way."""
    seed: int = 0
    """Seed of every generator and of the workload's inputs."""


def run(ctx: CheckContext, p: Params, recorded: dict[str, Json]) -> list[CheckResult]:
    body = partial(_body, p=p)
    r = execute(
        ctx, check=NAME, version=VERSION, params=p, recorded=recorded, body=body, seed=p.seed
    )
    return [r]


_ARM_KEYS = (
    "pid",
    "returncode",
    "status",
    "gpu_uuid",
    "reserved_at_start_bytes",
    "allocated_at_start_bytes",
    "reserved_after_setup_bytes",
    "forward_backward_increment_bytes",
    "duration_ns",
    "workload_digest",
    "error",
    "routing_replay",
    "routing_replayed_layers",
    "precision_route",
    "precision_route_modules",
    "precision_route_seen",
    "precision_route_equivalent",
    "routing_route",
    "routing_unseen",
    "routers_found",
    "routing_replay_route",
    "setup_routes",
)
"""What each arm reports that the result records, as ``{arm}_{key}``."""


def _settings(p: Params) -> dict[str, Json]:
    """What every arm is told besides its tree and workload."""
    return {"warn_only": p.deterministic_warn_only, "batch": p.batch, "seq": p.seq}


def _body(sess: Session, p: Params) -> Verdict:
    ctx = sess.ctx
    base_params = {**ctx.workload_params, **p.base_workload_params}
    cand_params = {**ctx.workload_params, **p.candidate_workload_params}
    work = sess.registry.make_tempdir("grad-compare-")
    base_root = ctx.base_root or ctx.repo_root
    # CPU arms share nothing that changes their gradients and may overlap; on a GPU the
    # base arm's footprint decides whether the others fit beside each other.
    mode: Schedule = (
        ("side-by-side" if sess.device.type == "cpu" else "by-room")
        if p.parallel_arms is None
        else ("side-by-side" if p.parallel_arms else "in-turn")
    )
    deadline = time.monotonic() + p.arm_timeout_s
    plan = [("base", base_root, base_params), ("candidate", ctx.repo_root, cand_params)]
    if p.rule == "reference":
        plan.append(("reference", base_root, base_params))
        if p.reference_candidate is not False:
            plan.append(("candidate_reference", ctx.repo_root, cand_params))
    if p.noise_floor:
        plan.append(("base_repeat", base_root, base_params))
    ref_spec: dict[str, Json] = {"reference": True, "reference_dtype": p.reference_dtype}
    # The base's arms load the base's own entry point: a module the head added is not in
    # the base's tree.
    on_base: dict[str, Json] = {"ref": p.base_workload_ref} if p.base_workload_ref else {}
    specs = {
        "base": on_base,
        "base_repeat": on_base,
        "reference": {**ref_spec, **on_base},
        "candidate_reference": {
            **ref_spec,
            "low_precision_only": p.reference_candidate is None,
            # The reference arm's router choices (ReplaysRouting), so that a near tie
            # flipping between the two does not pass for the change.
            "replay_routing": str(work / "reference" / "routing.pt"),
        },
    }
    told = _settings(p)
    arms, waves = run_arms(sess, plan, told, work, specs, deadline, mode)
    skipped = arms.get("candidate_reference", {}).get("status") == "skipped"
    if skipped:
        # A float32 workload: the function part adds nothing the precision part misses.
        arms.pop("candidate_reference")
    dtype = str(arms["candidate"].get("dtype") or arms["base"].get("dtype") or "")
    threshold = noise.threshold_for(dtype, p.threshold, p.threshold_fp32, p.threshold_bf16)
    m: dict[str, Json] = {
        "rule": p.rule,
        "base_root": str(base_root),
        "arms_in_parallel": any(len(w) > 1 for w in waves),
    }
    if mode == "by-room":
        m["arms_waves"] = [list[Json](w) for w in waves]
    if p.rule == "threshold":
        m.update(threshold=threshold, noise_margin=p.noise_margin)
    else:
        m.update(k=p.k, atol=p.atol, reference_dtype=arms.get("reference", {}).get("dtype"))
        if skipped:
            m["candidate_reference_status"] = "skipped"
    for arm, info in arms.items():
        for k in _ARM_KEYS:
            if k in info:
                m[f"{arm}_{k}"] = info[k]
    if "workload" in arms["candidate"]:
        sess.workload_scope = {
            "workload": arms["candidate"]["workload"],
            "workload_digest": arms["candidate"].get("workload_digest", ""),
            "dtype": arms["candidate"].get("dtype", ""),
        }
    bad = _bad_arms({a: i for a, i in arms.items() if a not in _REFERENCE_ARMS}, m)
    if bad is not None:
        return bad
    for name in _REFERENCE_ARMS:
        ref = arms.get(name)
        if ref is not None and ref.get("status") != "ok":
            why = str(ref.get("error") or ref.get("log_tail") or "").strip()
            return Verdict(
                outcome="inconclusive",
                reason=f"the {name.replace('_', ' ')} arm could not run ({ref.get('status')}: "
                f"{why}); the reference rule needs it; what would fix it: a setup(device, seed, "
                "*, dtype) on kernels that compute in the reference dtype (runners.protocol, "
                "Precision), or rule = 'threshold' (judges without one)",
                measurements=m,
            )
    return _compared(work, arms, threshold, p, m)


_REFERENCE_ARMS = ("reference", "candidate_reference")
"""The arms that run in the reference precision."""


def _bad_arms(arms: dict[str, dict[str, Any]], m: dict[str, Json]) -> Verdict | None:
    """The verdict when an arm did not finish with gradients; None when both did."""
    bad = {a: i for a, i in arms.items() if i.get("status") != "ok"}
    if not bad:
        return None
    sentence = "; ".join(
        f"{a} arm {i.get('status')}: {i.get('error') or i.get('log_tail') or ''}".strip()
        for a, i in bad.items()
    )
    statuses = {i.get("status") for i in bad.values()}
    if statuses & {"infra-error", "timeout", "no-result"}:
        # An arm that did not finish judged nothing; whose it was only the parent's
        # readings can say (a device fault makes its infra-error).
        return Verdict(outcome="inconclusive", reason=sentence, measurements=m)
    if "candidate" in bad:
        return Verdict(outcome="failed", reason=sentence, measurements=m)
    return Verdict(
        outcome="inconclusive",
        reason=f"baseline arm failed, nothing to compare against: {sentence}; what would fix "
        "it: a base revision whose workload runs with these parameters (base_workload_params)",
        measurements=m,
    )


def _load(work: Path, arm: str, what: str = "grads.pt") -> dict[str, torch.Tensor]:
    path = work / arm / what
    if not path.exists():
        return {}
    got: dict[str, torch.Tensor] = torch.load(path, weights_only=True)
    return got


def _compared(
    work: Path,
    arms: dict[str, dict[str, Any]],
    threshold: float,
    p: Params,
    m: dict[str, Json],
) -> Verdict:
    """The verdict on the arms' gradients."""
    base = _load(work, "base")
    cand = _load(work, "candidate")
    rows, only = compare(base, cand, threshold)
    noise_rel = _noise(work, arms, base, threshold, rows, m)
    verdicts: list[precision.TensorVerdict] = []
    if p.rule == "reference":
        verdicts = _against_reference(work, arms, p, base, cand, noise_rel, rows, m)
    del base, cand
    routed = routing.record({a: _load(work, a, "routing.pt") for a in arms}, m)
    rels = [float(r["rel_l2"]) for r in rows if isinstance(r["rel_l2"], float)]
    coss = [float(r["cosine"]) for r in rows if isinstance(r["cosine"], float)]
    m.update(
        {
            "tensors_compared": len(rows),
            "tensors_only_in_one_arm": only,  # type: ignore[dict-item]
            "max_rel_l2": max(rels, default=None),
            "min_cosine": min(coss, default=None),
        }
    )
    unlike = _unlike(arms, only, rows, m)
    if unlike is not None:
        return unlike
    if p.rule == "reference":
        flips = routing.flipped_unreplayed(arms, m)
        return _by_reference(verdicts, rows, routed, p, m, flips, routing.flipped_low(arms, m))
    return by_threshold(rows, noise_rel, threshold, p.noise_margin, m)


def _noise(
    work: Path,
    arms: dict[str, dict[str, Any]],
    base: dict[str, torch.Tensor],
    threshold: float,
    rows: list[dict[str, Json]],
    m: dict[str, Json],
) -> dict[str, float | None]:
    """The repeat noise (base against its repeat, where it ran) per tensor, beside
    each row; empty without the repeat."""
    noise_rel: dict[str, float | None] = {}
    if "base_repeat" in arms:
        again = _load(work, "base_repeat")
        noise_rows, noise_only = compare(base, again, threshold)
        del again
        noise_rel = rel_l2(noise_rows)
        m["noise_tensors_only_in_one_arm"] = noise_only  # type: ignore[assignment]
        m["max_noise_rel_l2"] = max((v for v in noise_rel.values() if v is not None), default=None)
        for r in rows:
            r["noise_rel_l2"] = noise_rel.get(str(r["name"]))
    return noise_rel


def _against_reference(
    work: Path,
    arms: dict[str, dict[str, Any]],
    p: Params,
    base: dict[str, torch.Tensor],
    cand: dict[str, torch.Tensor],
    noise_rel: dict[str, float | None],
    rows: list[dict[str, Json]],
    m: dict[str, Json],
) -> list[precision.TensorVerdict]:
    """The reference rule per tensor: the candidate's error against the reference
    arm within k floors (and the function part, where the candidate ran in the
    reference precision too); each verdict's figures beside its row."""
    ref = _load(work, "reference")
    shared = {n: t for n, t in cand.items() if n in base}
    function = None
    if "candidate_reference" in arms:
        low = str(arms["base"].get("dtype") or "")
        ref_dtype = str(arms["reference"].get("dtype") or "")
        function = precision.Function(
            errors=errors(_load(work, "candidate_reference"), ref),
            scale=precision.roundoff_ratio(ref_dtype, low),
            atol=precision.function_atol_for(ref_dtype, p.function_atol),
        )
        m.update(function_scale=function.scale, function_atol=function.atol)
    verdicts = precision.judge(
        errors(shared, ref), errors(base, ref), noise_rel, p.k, p.atol, function
    )
    del ref
    by_name = {v.name: v for v in verdicts}
    for r in rows:
        v = by_name.get(str(r["name"]))
        if v is not None:
            j = v.to_json()
            r.update({key: j[key] for key in ("err_candidate", "err_base", "floor_from")})
            r.update(multiple=j["multiple"], state=j["state"], failed_by=j["failed_by"])
            if v.function_ran:
                r.update(err_function=j["err_function"])
            r["over_threshold"] = v.state == "failed"
    return verdicts


def _unlike(
    arms: dict[str, dict[str, Any]],
    only: list[str],
    rows: list[dict[str, Json]],
    m: dict[str, Json],
) -> Verdict | None:
    """The verdict where the arms cannot be compared as they ran: on different GPUs,
    from different reserved bytes, or with different tensor sets; None otherwise."""
    uuids = {a: i.get("gpu_uuid") for a, i in arms.items()}
    reserved = {a: i.get("reserved_at_start_bytes") for a, i in arms.items()}
    if len(set(uuids.values())) > 1:
        seen = ", ".join(f"{a} {u}" for a, u in uuids.items())
        m["tensors"] = rows  # type: ignore[assignment]
        return Verdict(
            outcome="inconclusive", reason=f"arms ran on different GPUs: {seen}", measurements=m
        )
    if len(set(reserved.values())) > 1:
        seen = ", ".join(f"{a} {r}" for a, r in reserved.items())
        m["tensors"] = rows  # type: ignore[assignment]
        return Verdict(
            outcome="inconclusive",
            reason=f"arms started from different reserved bytes: {seen}",
            measurements=m,
        )
    if only:
        m["tensors"] = rows  # type: ignore[assignment]
        return Verdict(
            outcome="failed",
            reason=f"gradient tensor sets differ: {len(only)} names in only one arm "
            f"(first: {only[0]})",
            measurements=m,
        )
    return None
