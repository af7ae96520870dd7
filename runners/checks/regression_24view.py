"""24-view no-grad regression: one unchunked forward over 24 views, twice.

The pooled hidden states of the two runs must repeat (max abs difference <=
``pooled_atol``; 0 demands bitwise repetition, right on deterministic paths)
and the NLL of the unchunked forward must agree with `Workload.nll_chunked`
within ``nll_rtol`` (relative; 1e-5 suits fp32). Both forwards are measured
(cold, then warm) and the workload's admission decision for the step is
recorded, not enforced.
"""

from __future__ import annotations

import ctypes
import hashlib
from dataclasses import dataclass
from functools import partial

import torch

from runners.checks.context import CheckContext, Session, Verdict, phase_step
from runners.checks.execute import execute
from runners.checks.params import CheckParams
from runners.harness.steps import measure_step
from runners.names import REGRESSION_24VIEW
from runners.protocol import ForwardOutputs, Shape
from runners.result import CheckResult, Json

NAME = REGRESSION_24VIEW
VERSION = "1"


@dataclass(kw_only=True, slots=True, frozen=True)
class Params(CheckParams):
    views: int = 24
    """Sequences (views) in the one unchunked forward."""
    seq: int = 32
    """Tokens per view."""
    pooled_atol: float = 0.0
    """Allowed max abs difference of the pooled hidden states between the two runs
    (0: bitwise repetition)."""
    nll_rtol: float = 1e-5
    """Allowed relative difference of the unchunked and the chunked NLL."""
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
    views, seq, atol, rtol = p.views, p.seq, p.pooled_atol, p.nll_rtol
    shape = Shape(batch=views, seq=seq)
    chunk = max(1, shape.tokens // 4) if p.chunk_tokens is None else p.chunk_tokens
    w = sess.load()
    batch = sess.call("make_batch", lambda: w.make_batch(shape, sess.seed))
    decision = sess.call(
        "admit", lambda: w.admit(shape, "forward_nograd", sess.probe.available_bytes())
    )
    m: dict[str, Json] = {
        "views": views,
        "seq": seq,
        "chunk_tokens": chunk,
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
        m.update(rec.measurements(f"forward{i + 1}_{run_name}_"))
        if not rec.ok:
            return Verdict(
                outcome="infra-error" if rec.outcome.status == "infra-error" else "failed",
                reason=f"forward run {i + 1}: {rec.outcome.sentence()}",
                measurements=m,
            )
    a, b = outs[0].pooled_hidden.float(), outs[1].pooled_hidden.float()
    if a.shape != b.shape:
        return Verdict(
            outcome="failed",
            reason=f"pooled hidden shapes differ between runs: {tuple(a.shape)} vs "
            f"{tuple(b.shape)}",
            measurements=m,
        )
    diff = (a - b).abs()
    max_abs = float(diff.max().item()) if diff.numel() else 0.0
    m["pooled_max_abs_diff"] = max_abs
    m["pooled_elements_differing"] = int((diff > 0).sum().item())
    m["pooled_elements"] = int(diff.numel())
    m["pooled_sha256_run1"] = tensor_sha256(outs[0].pooled_hidden)
    m["pooled_sha256_run2"] = tensor_sha256(outs[1].pooled_hidden)
    m["pooled_nonfinite"] = int((~torch.isfinite(a)).sum().item())
    nll = float(outs[0].nll.double().item())
    nll2 = float(outs[1].nll.double().item())
    outs.clear()
    del a, b, diff
    sess.progress("chunked NLL")
    chunked_t = sess.call("nll_chunked", lambda: w.nll_chunked(batch, chunk))
    chunked = float(chunked_t.double().item())
    rel = abs(nll - chunked) / abs(nll) if nll != 0 else abs(nll - chunked)
    m.update(
        {
            "nll_unchunked_run1": nll,
            "nll_unchunked_run2": nll2,
            "nll_chunked": chunked,
            "nll_rel_diff": rel,
        }
    )
    problems = []
    if not max_abs <= atol:  # also catches NaN
        problems.append(
            f"pooled hidden states did not repeat: max abs diff {max_abs!r} > {atol!r} "
            f"({m['pooled_elements_differing']} of {m['pooled_elements']} elements differ)"
        )
    if not rel <= rtol:
        problems.append(
            f"NLL unchunked {nll!r} vs chunked {chunked!r}: rel diff {rel!r} > {rtol!r}"
        )
    if problems:
        return Verdict(outcome="failed", reason="; ".join(problems), measurements=m)
    return Verdict(outcome="passed", reason=None, measurements=m)
