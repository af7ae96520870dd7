"""24-view no-grad regression: one unchunked forward over 24 views, twice.

Every output the workload declares (`ForwardOutputs.declared`: the loss, the
pooled hidden states, any named tensors such as logits) must repeat between
the two runs: max abs difference <= ``pooled_atol`` (0 demands bitwise
repetition, right on deterministic paths); each is recorded by digest. For a
workload offering `SupportsChunkedNLL`, the unchunked NLL must agree with the
chunked one, judged against the noise floor of the same run (the difference
between the two unchunked runs; `runners.checks.noise`): failed only above
both ``nll_rtol`` (per dtype by default) and the noise times ``noise_margin``,
inconclusive when the noise alone exceeds the threshold. Without chunked NLL
that part is skipped with the reason recorded. Both forwards are measured
(cold, then warm) and the workload's admission decision for the step is
recorded, not enforced.
"""

from __future__ import annotations

import ctypes
import hashlib
from dataclasses import dataclass
from functools import partial

import torch

from runners.checks import noise
from runners.checks.context import CheckContext, Session, Verdict, dtype_name, phase_step
from runners.checks.execute import execute
from runners.checks.params import CheckParams
from runners.harness.steps import measure_step
from runners.names import REGRESSION_24VIEW
from runners.protocol import ForwardOutputs, Shape, SupportsChunkedNLL
from runners.result import CheckResult, Json

NAME = REGRESSION_24VIEW
VERSION = "2"


@dataclass(kw_only=True, slots=True, frozen=True)
class Params(CheckParams):
    views: int = 24
    """Sequences (views) in the one unchunked forward."""
    seq: int = 32
    """Tokens per view."""
    pooled_atol: float = 0.0
    """Allowed max abs difference of the pooled hidden states between the two runs
    (0: bitwise repetition)."""
    nll_rtol: float | None = None
    """Allowed relative difference of the unchunked and the chunked NLL. None: the
    dtype's default (``nll_rtol_fp32`` / ``nll_rtol_bf16``)."""
    nll_rtol_fp32: float = 1e-5
    """Default for float32: a chunked sum reorders additions (~1e-7 relative)."""
    nll_rtol_bf16: float = 1e-2
    """Default for bfloat16 / float16 logits (the loss itself is accumulated in fp32)."""
    noise_margin: float = 2.0
    """The chunked NLL fails only above the run-to-run noise times this."""
    chunk_tokens: int | None = None
    """Tokens per chunk of the chunked NLL. None: a quarter of the step's tokens
    (at least 1)."""
    seed: int = 0
    """Seed of every generator and of the workload's inputs."""


def tensor_sha256(t: torch.Tensor) -> str:
    """sha256 hex of a tensor's bytes (CPU, contiguous), with dtype and shape."""
    c = t.detach().to("cpu").contiguous()
    h = hashlib.sha256(f"{c.dtype}:{tuple(c.shape)}:".encode())
    # The raw bytes through ctypes: no NumPy needed (the torch wheel does not bring it).
    h.update(ctypes.string_at(c.data_ptr(), c.numel() * c.element_size()) if c.numel() else b"")
    return h.hexdigest()


def run(ctx: CheckContext, p: Params, recorded: dict[str, Json]) -> list[CheckResult]:
    body = partial(_body, p=p)
    r = execute(
        ctx, check=NAME, version=VERSION, params=p, recorded=recorded, body=body, seed=p.seed
    )
    return [r]


def _body(sess: Session, p: Params) -> Verdict:
    views, seq, atol = p.views, p.seq, p.pooled_atol
    shape = Shape(batch=views, seq=seq)
    chunk = max(1, shape.tokens // 4) if p.chunk_tokens is None else p.chunk_tokens
    w = sess.load()
    rtol = noise.threshold_for(dtype_name(w.dtype), p.nll_rtol, p.nll_rtol_fp32, p.nll_rtol_bf16)
    batch = sess.call("make_batch", lambda: w.make_batch(shape, sess.seed))
    decision = sess.admit(w, shape, "forward_nograd", sess.probe.available_bytes())
    m: dict[str, Json] = {
        "views": views,
        "seq": seq,
        "chunk_tokens": chunk,
        "nll_rtol": rtol,
        **{f"admission_{k}": v for k, v in decision.measurements().items()},
    }
    outs: list[ForwardOutputs] = []
    keep = outs.append

    for i, run_name in enumerate(("cold", "warm")):
        sess.progress(f"24-view forward {i + 1}/2 ({run_name})")
        rec = measure_step(
            sess.probe,
            f"forward_nograd {shape} run {i + 1}",
            phase_step(w, batch, grad=False),
            keep=keep,
        )
        sess.ran("forward_nograd")
        m.update(rec.measurements(f"forward{i + 1}_{run_name}_"))
        if not rec.ok:
            return Verdict(
                outcome="infra-error" if rec.outcome.status == "infra-error" else "failed",
                reason=f"forward run {i + 1}: {rec.outcome.sentence()}",
                measurements=m,
            )
    problems = _repeats(outs[0], outs[1], atol, m)
    first, second = outs[0].scalar_loss(), outs[1].scalar_loss()
    outs.clear()
    state: noise.FamilyState = "passed"
    if not isinstance(w, SupportsChunkedNLL):
        m["nll_chunked_skipped"] = (
            f"workload {w.name!r} offers no nll_chunked (runners.protocol.SupportsChunkedNLL)"
        )
    elif first is None or second is None:
        m["nll_chunked_skipped"] = "the forward returned neither nll nor loss"
    else:
        sess.progress("chunked NLL")
        chunked_t = sess.call("nll_chunked", lambda: w.nll_chunked(batch, chunk))
        state = _nll(float(first.double()), float(second.double()), chunked_t, rtol, p, m)
        if state == "failed":
            problems.append(
                f"NLL unchunked {m['nll_unchunked_run1']!r} vs chunked {m['nll_chunked']!r}: "
                f"rel diff {m['nll_rel_diff']!r} > {rtol!r} and > {p.noise_margin}x the "
                f"run-to-run noise {m['nll_noise_rel_diff']!r}"
            )
    if problems:
        return Verdict(outcome="failed", reason="; ".join(problems), measurements=m)
    if state == "inconclusive":
        return Verdict(
            outcome="inconclusive",
            reason=f"NLL noise floor (run 1 vs run 2, rel {m['nll_noise_rel_diff']!r}) is over "
            f"the threshold {rtol!r}: the chunked NLL cannot be told apart from noise",
            measurements=m,
        )
    return Verdict(outcome="passed", reason=None, measurements=m)


def _repeats(a: ForwardOutputs, b: ForwardOutputs, atol: float, m: dict[str, Json]) -> list[str]:
    """Compare every declared output of two runs; record per-output rows; the problems."""
    da, db = a.declared(), b.declared()
    rows: list[dict[str, Json]] = []
    problems: list[str] = []
    for name in sorted(set(da) | set(db)):
        if name not in da or name not in db:
            problems.append(f"output {name!r} declared by one run only")
            continue
        x, y = da[name].float(), db[name].float()
        if x.shape != y.shape:
            problems.append(
                f"{name} shapes differ between runs: {tuple(x.shape)} vs {tuple(y.shape)}"
            )
            continue
        diff = (x - y).abs()
        row: dict[str, Json] = {
            "name": name,
            "elements": int(diff.numel()),
            "max_abs_diff": float(diff.max().item()) if diff.numel() else 0.0,
            "elements_differing": int((diff > 0).sum().item()),
            "nonfinite": int((~torch.isfinite(x)).sum().item()),
            "sha256_run1": tensor_sha256(da[name]),
            "sha256_run2": tensor_sha256(db[name]),
        }
        rows.append(row)
        max_abs = row["max_abs_diff"]
        assert isinstance(max_abs, float)
        if not max_abs <= atol:  # also catches NaN
            problems.append(
                f"{name} did not repeat: max abs diff {max_abs!r} > {atol!r} "
                f"({row['elements_differing']} of {row['elements']} elements differ)"
            )
        if name == "pooled_hidden":
            # The names receipts have always carried for the pooled hidden states.
            m["pooled_max_abs_diff"] = max_abs
            m["pooled_elements_differing"] = row["elements_differing"]
            m["pooled_elements"] = row["elements"]
            m["pooled_sha256_run1"] = row["sha256_run1"]
            m["pooled_sha256_run2"] = row["sha256_run2"]
            m["pooled_nonfinite"] = row["nonfinite"]
    m["outputs"] = rows  # type: ignore[assignment]
    return problems


def _rel(a: float, b: float) -> float:
    return abs(a - b) / abs(a) if a != 0 else abs(a - b)


def _nll(
    nll: float, nll2: float, chunked_t: torch.Tensor, rtol: float, p: Params, m: dict[str, Json]
) -> noise.FamilyState:
    chunked = float(chunked_t.double().item())
    rel, floor = _rel(nll, chunked), _rel(nll, nll2)
    state = noise.judge(floor, rel if rel == rel else None, rtol, p.noise_margin)
    m.update(
        {
            "nll_unchunked_run1": nll,
            "nll_unchunked_run2": nll2,
            "nll_chunked": chunked,
            "nll_rel_diff": rel,
            "nll_noise_rel_diff": floor,
            "families": [
                {
                    "family": "nll",
                    "tensors": 1,
                    "noise_floor": floor,
                    "difference": rel,
                    "state": state,
                }
            ],
        }
    )
    return state
