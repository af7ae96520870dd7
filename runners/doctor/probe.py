"""Probing a workload's capabilities at a tiny shape on CPU.

Each capability a check may use is exercised once, natively or through the
harness's generic route (`runners.adapt`), and the outcome recorded as a
`Capability`: ``native``, ``fallback`` (which route), ``missing`` (why, and the
line that would add it) or ``broken`` (the error).
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from runners.adapt.held import modules_held
from runners.adapt.routers import RouterHooks, find_routers, holds_experts
from runners.adapt.upcast import setup_reference, upcast_held
from runners.checks import precision
from runners.checks.context import dtype_name
from runners.protocol import (
    PHASES,
    DeclaresRouting,
    ForwardOutputs,
    PrecisionUnsupported,
    ReplaysRouting,
    Shape,
    SupportsChunkedNLL,
    SupportsPrepare,
    Workload,
    admit_of,
    estimate_of,
    supports_dtype,
)
from runners.workloads import prebuilt
from runners.workloads.loader import load_workload

State = Literal["native", "fallback", "missing", "broken", "absent"]
"""``absent``: not applicable (routing in a model with no experts)."""

TINY = Shape(batch=2, seq=8)
CPU = torch.device("cpu")


@dataclass(frozen=True, slots=True)
class Capability:
    state: State
    detail: str = ""
    """The route (fallback), why (missing/broken)."""
    add: str = ""
    """missing: the line a workload adds to have it."""


def _err(e: BaseException) -> str:
    last = traceback.extract_tb(e.__traceback__)[-1:] if e.__traceback__ else []
    where = f" ({Path(last[0].filename).name}:{last[0].lineno})" if last else ""
    return f"{type(e).__name__}: {str(e)[:300]}{where}"


def probe(root: Path, ref: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """Every capability of the workload at ``ref`` (module docstring), as JSON."""
    caps: dict[str, Capability] = {}
    out: dict[str, Any] = {"shape": str(TINY)}
    try:
        w = load_workload(root, ref, dict(params))
    except Exception as e:  # the workload's code: any failure is a finding
        caps["load"] = Capability("broken", _err(e))
        return {**out, "capabilities": {k: asdict(v) for k, v in caps.items()}}
    out.update(workload=w.name, dtype=dtype_name(w.dtype))
    caps["load"] = Capability("native")
    caps["prepare"] = Capability("native")
    caps["estimate"] = _estimate(w)
    held = _steps(w, caps)
    if not isinstance(w, SupportsPrepare):
        caps["prepare"] = _prebuilt(caps)
    if held is not None:
        caps["chunked_nll"] = (
            Capability("native")
            if isinstance(w, SupportsChunkedNLL)
            else Capability(
                "missing",
                "no nll_chunked: the 24-view regression skips that part (recorded)",
                "def nll_chunked(self, batch, chunk_tokens) -> Tensor",
            )
        )
        caps.update(_routing(w, held))
        caps["precision"] = _precision(w)
    _call(caps, "teardown", w.teardown)
    return {**out, "capabilities": {k: asdict(v) for k, v in caps.items()}}


BUILTIN_ESTIMATOR = (
    "the built-in estimator: calibrated on the claim's device at small shapes (once per "
    "workload definition and device), it predicts a point plus its stated error and is "
    'held to that bound; a team\'s own: workload_params.estimator = "module:function"'
)
"""What doctor says of a ready adapter that names no estimator (or ``"builtin"``)."""


def _estimate(w: Workload) -> Capability:
    if getattr(w, "builtin_estimator", False) is True:
        # It measures the set-up model on the claim's device: nothing to probe here.
        return Capability("fallback", BUILTIN_ESTIMATOR)
    try:
        for phase in PHASES:
            estimate_of(w, TINY, phase, cold=True)
            admit_of(w, TINY, phase, 1 << 40, cold=True)
    except NotImplementedError as e:
        return Capability(
            "missing",
            str(e) or "estimate is not implemented",
            'workload_params: estimator = "your_module:estimate"',
        )
    except Exception as e:
        return Capability("broken", _err(e))
    return Capability("native")


def _call(caps: dict[str, Capability], what: str, fn: Callable[[], Any]) -> tuple[bool, Any]:
    try:
        value = fn()
    except Exception as e:
        caps[what] = Capability("broken", _err(e))
        return False, None
    caps[what] = Capability("native")
    return True, value


def _steps(w: Workload, caps: dict[str, Capability]) -> list[tuple[str, torch.nn.Module]] | None:
    """Setup, a forward of each kind, backward, gradients and an optimizer step, the
    workload left set up; the modules it holds (None when a step broke)."""
    # Forked from a fork server, a copy of the model it built once (`prebuilt`).
    ok, _ = _call(caps, "setup", lambda: prebuilt.setup(w, CPU, 0))
    if not ok:
        return None
    # What a fork server would keep to copy (runners.workloads.prebuilt), before any step.
    caps["prebuilt"] = Capability("native", prebuilt.refusal(w))
    held = modules_held(w)
    ok, batch = _call(caps, "make_batch", lambda: w.make_batch(TINY, 0))
    ok = ok and _call(caps, "forward", lambda: w.forward(batch, grad=False))[0]
    ok2, out = _call(caps, "forward_backward", lambda: _fb(w, batch)) if ok else (False, None)
    if ok2:
        _call(caps, "gradients", lambda: len(w.gradients()) or _no_grads())
        _call(caps, "optimizer_step", w.optimizer_step)
        _call(caps, "zero_grad", w.zero_grad)
    del out
    return held if ok and ok2 else None


def _prebuilt(caps: dict[str, Capability]) -> Capability:
    """Without ``prepare()``: whether the harness builds the model once and copies it."""
    seen = caps.pop("prebuilt", None)
    why = "setup failed" if seen is None else seen.detail
    if not why:
        return Capability("fallback", "built once in the fork server, copied per setup (harness)")
    return Capability(
        "fallback",
        f"each claim builds the model in its setup ({why})",
        "def prepare(self) -> None  (runners.protocol.SupportsPrepare)",
    )


def _no_grads() -> int:
    raise ValueError("no trainable parameter got a gradient")


def _fb(w: Workload, batch: Any) -> ForwardOutputs:
    out = w.forward(batch, grad=True)
    w.backward(out)
    return out


def _routing(w: Workload, held: list[tuple[str, torch.nn.Module]]) -> dict[str, Capability]:
    routers = find_routers(held)
    moe = bool(routers) or holds_experts(held)
    if isinstance(w, DeclaresRouting):
        seen = Capability("native")
    elif routers:
        seen = Capability("fallback", f"harness hooks on {len(routers)} router(s)")
    elif moe:
        seen = Capability(
            "missing",
            "a mixture of experts whose routers the harness does not know: flipped "
            "routings go uncounted",
            "def declare_routing(self, on: bool) -> None  (runners.protocol.DeclaresRouting)",
        )
    else:
        return {"routing": Capability("absent"), "replay": Capability("absent")}
    if isinstance(w, ReplaysRouting):
        replay = Capability("native")
    elif routers and _replayable(w, routers):
        replay = Capability("fallback", "harness hooks (the router's softmax over its top k)")
    else:
        replay = Capability(
            "missing",
            "routers cannot take given selections: a difference beside flipped routings "
            "is inconclusive",
            "def replay_routing(self, selections) -> None  (runners.protocol.ReplaysRouting)",
        )
    return {"routing": seen, "replay": replay}


def _replayable(w: Workload, routers: Mapping[str, torch.nn.Module]) -> bool:
    """Replay each router's own choice once: the harness's formula must give back the
    router's own weights (`runners.adapt.routers`)."""
    hooks = RouterHooks(routers)
    try:
        hooks.recording = True
        batch = w.make_batch(TINY, 0)
        w.forward(batch, grad=False)
        own = hooks.take()
        hooks.replay(own)
        w.forward(batch, grad=False)
        return bool(own) and hooks.replayed > 0 and not hooks.broken
    except Exception:
        return False
    finally:
        hooks.detach()


def _precision(w: Workload) -> Capability:
    """The reference precision on the workload as set up: its own ``dtype`` keyword (a
    setup of its own), else its held modules upcast in place."""
    low = dtype_name(w.dtype)
    ref = precision.reference_dtype_for(low, None)
    add = "def setup(self, device, seed, *, dtype=None)  (runners.protocol, Precision)"
    try:
        if supports_dtype(w):
            w.teardown()
            arm = setup_reference(w, CPU, 0, getattr(torch, ref))
        else:
            arm = upcast_held(w, getattr(torch, ref))
        batch = arm.batch(w.make_batch(TINY, 0))
        w.zero_grad()
        try:
            out = _fb(w, batch)
        except Exception as e:
            # As the checks do: a kernel without the reference dtype is tried once more on
            # the library's equivalent path (`runners.adapt.equivalent`).
            if not arm.try_equivalent(w, _err(e)):
                raise
            w.zero_grad()
            out = _fb(w, batch)
        arm.confirm(out, w.gradients())
    except PrecisionUnsupported as e:
        return Capability("missing", str(e), add)
    except Exception as e:
        # No path computes the reference: the claims that need it will be inconclusive.
        return Capability(
            "broken",
            f"in {ref}: {_err(e)}",
            f"{add} on kernels that compute in {ref}, or the claim's params: "
            'rule = "threshold" (judges without a reference)',
        )
    via = "" if arm.equivalent is None else f", {arm.equivalent.sentence()}"
    if arm.route == "setup-dtype" and not via:
        return Capability("native", f"setup(dtype={ref})")
    if arm.route == "setup-dtype":
        return Capability("fallback", f"setup(dtype={ref}){via}")
    return Capability("fallback", f"upcast-modules to {ref} ({', '.join(arm.modules)}){via}")
