"""Gradient comparison: base vs candidate on the same device in one run.

Each arm runs in its own child process (`runners.checks.grad_arm`, owned by
the check's registry with its process group), sequentially on the same device,
saving its gradients to an owned temporary directory. With ``noise_floor`` the
base runs twice (``base`` and ``base_repeat``): the repeat against the base is
the noise floor, the candidate against the base the difference (see
`runners.checks.noise`). Tensors are compared by name: relative L2
``||c - b|| / ||b||``, cosine, max abs difference. Per tensor family the
largest noise and difference are judged against the threshold (per dtype:
``threshold_fp32`` / ``threshold_bf16`` unless ``threshold`` is given) and
``noise_margin``. The outcome is ``inconclusive`` when the arms ran on
different GPU UUIDs or started from different reserved bytes, or when a
family's noise floor exceeds the threshold; ``failed`` when the tensor sets
differ or a family's difference exceeds both the threshold and the noise
floor times the margin. The observer, when on, instruments this (parent)
process only, not the arms.
"""

from __future__ import annotations

import math
import subprocess
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch

from runners.checks import noise
from runners.checks.context import CheckContext, Session, Verdict
from runners.checks.execute import execute
from runners.checks.params import CheckParams
from runners.harness import child
from runners.names import GRADIENT_COMPARE
from runners.result import CheckResult, Json

NAME = GRADIENT_COMPARE
VERSION = "2"


@dataclass(kw_only=True, slots=True, frozen=True)
class Params(CheckParams):
    batch: int = 2
    """Sequences in each arm's forward+backward."""
    seq: int = 32
    """Tokens per sequence."""
    threshold: float | None = None
    """Largest rel-L2 ``||c - b|| / ||b||`` a gradient tensor family may have. None: the
    dtype's default (``threshold_fp32`` or ``threshold_bf16``)."""
    threshold_fp32: float = 1e-4
    """Default threshold for float32 workloads: summation-order differences are
    ~1e-6 relative; a real change to the gradient is far above 1e-4."""
    threshold_bf16: float = 3e-2
    """Default threshold for bfloat16 / float16 workloads (8 / 11 mantissa bits: a
    rounding step is ~4e-3 / 5e-4 relative, and reductions accumulate several)."""
    noise_floor: bool = True
    """Run the base arm twice and judge the candidate against that noise floor."""
    noise_margin: float = 2.0
    """The candidate's difference fails only above the noise floor times this."""
    base_workload_params: dict[str, Json] = field(default_factory=dict)
    """Workload parameters of the base arm: the claim's, updated by these. The base arm
    loads from the base revision's checkout when there is one."""
    candidate_workload_params: dict[str, Json] = field(default_factory=dict)
    """Workload parameters of the candidate arm: the claim's, updated by these."""
    arm_timeout_s: int = 600
    """Seconds both arms together may take."""
    parallel_arms: bool | None = None
    """Run the arms at the same time. None: in parallel on CPU, one after the other on
    CUDA (so that each starts from an idle device)."""
    seed: int = 0
    """Seed of every generator and of the workload's inputs."""


def compare(
    base: dict[str, torch.Tensor], cand: dict[str, torch.Tensor], threshold: float
) -> tuple[list[dict[str, Json]], list[str]]:
    """Per-tensor rows (sorted by name) and the names present in only one arm."""
    rows: list[dict[str, Json]] = []
    only = sorted(set(base) ^ set(cand))
    for name in sorted(set(base) & set(cand)):
        b = base[name].double().flatten()
        c = cand[name].double().flatten()
        if b.shape != c.shape:
            rows.append(
                {
                    "name": name,
                    "numel": int(b.numel()),
                    "shape_mismatch": True,
                    "over_threshold": True,
                    "rel_l2": None,
                    "cosine": None,
                    "max_abs": None,
                }
            )
            continue
        nb = float(torch.linalg.vector_norm(b))
        nc = float(torch.linalg.vector_norm(c))
        nd = float(torch.linalg.vector_norm(c - b))
        rel: float | None = nd / nb if nb > 0 else (0.0 if nd == 0 else None)
        cos = float(torch.dot(b, c)) / (nb * nc) if nb > 0 and nc > 0 else None
        max_abs = float((c - b).abs().max()) if b.numel() else 0.0
        finite = all(math.isfinite(x) for x in (nb, nc, nd))
        rows.append(
            {
                "name": name,
                "numel": int(b.numel()),
                "rel_l2": rel if finite else None,
                "cosine": cos if finite else None,
                "max_abs": max_abs if math.isfinite(max_abs) else None,
                "over_threshold": (not finite) or rel is None or rel > threshold,
            }
        )
    return rows, only


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
)
"""What each arm reports that the result records, as ``{arm}_{key}``."""


@dataclass(slots=True)
class _Arm:
    name: str
    popen: subprocess.Popen[bytes]
    out_dir: Path


def _start_arm(
    sess: Session, arm: str, root: Path, wparams: dict[str, Json], p: Params, work: Path
) -> _Arm:
    ctx = sess.ctx
    out_dir = work / arm
    out_dir.mkdir()
    spec = {
        "arm": arm,
        "root": str(root),
        "ref": ctx.workload_ref,
        "params": wparams,
        "device": str(sess.device),
        "seed": sess.seed,
        "warn_only": p.deterministic_warn_only,
        "batch": p.batch,
        "seq": p.seq,
        "out_dir": str(out_dir),
    }
    spec_path = out_dir / "spec.json"
    child.write_request(spec_path, spec)
    sess.progress(f"gradient arm {arm}: {ctx.workload_ref} from {root}")
    with open(out_dir / "arm.log", "wb") as log:
        popen = sess.registry.spawn(
            child.argv("runners.checks.grad_arm", spec_path, out_dir / "arm.json"),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=child.env(),
            cwd=str(out_dir),
        )
    return _Arm(name=arm, popen=popen, out_dir=out_dir)


def _finish_arm(arm: _Arm, deadline: float) -> dict[str, Any]:
    try:
        rc: int | None = arm.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        rc = None  # the registry stops it when the check ends
    info: dict[str, Any] = {"returncode": rc, "pid": arm.popen.pid}
    got = None if rc is None else child.read_result(arm.out_dir / "arm.json")
    if rc is None:
        info["status"] = "timeout"
    elif got is not None:
        info.update(got)
    else:
        info["status"] = "no-result"
        info["log_tail"] = (arm.out_dir / "arm.log").read_text(errors="replace")[-2000:]
    return info


def _body(sess: Session, p: Params) -> Verdict:
    ctx = sess.ctx
    base_params = {**ctx.workload_params, **p.base_workload_params}
    cand_params = {**ctx.workload_params, **p.candidate_workload_params}
    work = sess.registry.make_tempdir("grad-compare-")
    base_root = ctx.base_root or ctx.repo_root
    # On a GPU the arms take turns so that each starts from an idle device; CPU arms
    # share nothing that changes their gradients and may overlap.
    parallel = sess.device.type == "cpu" if p.parallel_arms is None else p.parallel_arms
    deadline = time.monotonic() + p.arm_timeout_s
    arms: dict[str, dict[str, Any]] = {}
    plan = [("base", base_root, base_params), ("candidate", ctx.repo_root, cand_params)]
    if p.noise_floor:
        plan.append(("base_repeat", base_root, base_params))
    if parallel:
        started = [_start_arm(sess, n, r, wp, p, work) for n, r, wp in plan]
        arms = {a.name: _finish_arm(a, deadline) for a in started}
    else:
        for n, r, wp in plan:
            arms[n] = _finish_arm(_start_arm(sess, n, r, wp, p, work), deadline)
    dtype = str(arms["candidate"].get("dtype") or arms["base"].get("dtype") or "")
    threshold = noise.threshold_for(dtype, p.threshold, p.threshold_fp32, p.threshold_bf16)
    m: dict[str, Json] = {
        "threshold": threshold,
        "noise_margin": p.noise_margin,
        "base_root": str(base_root),
        "arms_in_parallel": parallel,
    }
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
    bad = _bad_arms(arms, m)
    if bad is not None:
        return bad
    return _compared(work, arms, threshold, p.noise_margin, m)


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
        return Verdict(outcome="infra-error", reason=sentence, measurements=m)
    if "candidate" in bad:
        return Verdict(outcome="failed", reason=sentence, measurements=m)
    return Verdict(
        outcome="inconclusive",
        reason=f"baseline arm failed, nothing to compare against: {sentence}",
        measurements=m,
    )


def _rel(rows: list[dict[str, Json]]) -> dict[str, float | None]:
    return {
        str(r["name"]): float(r["rel_l2"]) if isinstance(r["rel_l2"], float) else None for r in rows
    }


def _compared(
    work: Path,
    arms: dict[str, dict[str, Any]],
    threshold: float,
    margin: float,
    m: dict[str, Json],
) -> Verdict:
    """The verdict on the arms' gradients."""
    base = torch.load(work / "base" / "grads.pt", weights_only=True)
    cand = torch.load(work / "candidate" / "grads.pt", weights_only=True)
    rows, only = compare(base, cand, threshold)
    del cand
    noise_rel: dict[str, float | None] = {}
    if "base_repeat" in arms:
        again = torch.load(work / "base_repeat" / "grads.pt", weights_only=True)
        noise_rows, noise_only = compare(base, again, threshold)
        del again
        noise_rel = _rel(noise_rows)
        m["noise_tensors_only_in_one_arm"] = noise_only  # type: ignore[assignment]
        m["max_noise_rel_l2"] = max((v for v in noise_rel.values() if v is not None), default=None)
        for r in rows:
            r["noise_rel_l2"] = noise_rel.get(str(r["name"]))
    del base
    families = noise.by_family(noise_rel, _rel(rows), threshold, margin)
    m["families"] = [f.to_json() for f in families]
    failed_fams = {f.family for f in families if f.state == "failed"}
    over = [r for r in rows if r["over_threshold"] and noise.family(str(r["name"])) in failed_fams]
    rels = [float(r["rel_l2"]) for r in rows if isinstance(r["rel_l2"], float)]
    coss = [float(r["cosine"]) for r in rows if isinstance(r["cosine"], float)]
    m.update(
        {
            "tensors_compared": len(rows),
            "tensors_over_threshold": len(over),
            "tensors_only_in_one_arm": only,  # type: ignore[dict-item]
            "max_rel_l2": max(rels, default=None),
            "min_cosine": min(coss, default=None),
            "tensors": rows,  # type: ignore[dict-item]
        }
    )
    uuids = {a: i.get("gpu_uuid") for a, i in arms.items()}
    reserved = {a: i.get("reserved_at_start_bytes") for a, i in arms.items()}
    if len(set(uuids.values())) > 1:
        seen = ", ".join(f"{a} {u}" for a, u in uuids.items())
        return Verdict(
            outcome="inconclusive", reason=f"arms ran on different GPUs: {seen}", measurements=m
        )
    if len(set(reserved.values())) > 1:
        seen = ", ".join(f"{a} {r}" for a, r in reserved.items())
        return Verdict(
            outcome="inconclusive",
            reason=f"arms started from different reserved bytes: {seen}",
            measurements=m,
        )
    if only:
        return Verdict(
            outcome="failed",
            reason=f"gradient tensor sets differ: {len(only)} names in only one arm "
            f"(first: {only[0]})",
            measurements=m,
        )
    if over:
        worst = max(
            over, key=lambda r: float(r["rel_l2"]) if isinstance(r["rel_l2"], float) else math.inf
        )
        return Verdict(
            outcome="failed",
            reason=f"{len(over)} of {len(rows)} gradient tensors over rel-L2 {threshold} and "
            f"over {margin}x their family's noise floor; worst {worst['name']} rel-L2 "
            f"{worst['rel_l2']} (noise {worst.get('noise_rel_l2', 0.0)}) cosine {worst['cosine']}",
            measurements=m,
        )
    if failed_fams:
        names = ", ".join(sorted(failed_fams))
        return Verdict(
            outcome="failed",
            reason=f"gradient families over threshold {threshold} with non-finite figures: {names}",
            measurements=m,
        )
    noisy = [f for f in families if f.state == "inconclusive"]
    if noisy:
        worst_f = max(noisy, key=lambda f: f.noise or 0.0)
        return Verdict(
            outcome="inconclusive",
            reason=f"noise floor over the threshold {threshold} in {len(noisy)} of "
            f"{len(families)} gradient families (base against base); worst {worst_f.family} "
            f"noise rel-L2 {worst_f.noise}, difference {worst_f.diff}",
            measurements=m,
        )
    if not rows:
        return Verdict(
            outcome="inconclusive", reason="no gradient tensors to compare", measurements=m
        )
    return Verdict(outcome="passed", reason=None, measurements=m)
