"""A reference-precision arm for a workload whose ``setup`` takes no ``dtype``.

The native route is the workload's own ``setup(device, seed, dtype=...)``
(`runners.protocol.setup_in`). Without it, the *upcast* route runs the usual
``setup(device, seed)`` and then casts every ``torch.nn.Module`` the workload
holds (`runners.adapt.held`) in place with ``module.to(dtype)``: the configured
dtype's weights, upcast, as the native route promises. ``Module.to`` keeps each
parameter object (only its data changes), so an optimizer built in ``setup``
still applies to it.

An upcast can be defeated: autocast, an explicit ``.to(bfloat16)`` in the
forward, or trainable tensors held outside any module keep computing in the
low precision. So the route is confirmed on what the arm produced: every
gradient in the reference dtype and every floating output at least as precise
(a scalar loss may be float32, as libraries reduce it there). Unconfirmed, the
arm is `PrecisionUnsupported` with what was seen.

A kernel can also lack the reference dtype altogether (transformers' experts on
``torch._grouped_mm`` take no float64). The arm then takes an equivalent path the
library offers (`ReferenceArm.try_equivalent`, `runners.adapt.equivalent`) and
records it; only when none exists does the caller give up, inconclusive.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import torch

from runners.adapt.equivalent import Equivalent, switch
from runners.adapt.held import modules_held
from runners.contract.result import Json
from runners.protocol import Batch, ForwardOutputs, PrecisionUnsupported, Workload, supports_dtype
from runners.workloads import prebuilt

Route = Literal["setup-dtype", "upcast-modules"]

_BITS = {torch.bfloat16: 8, torch.float16: 11, torch.float32: 24, torch.float64: 53}


def _name(d: torch.dtype) -> str:
    return str(d).removeprefix("torch.")


@dataclass(slots=True)
class ReferenceArm:
    """How a workload was set up to compute in `dtype`, and what that was seen to do."""

    dtype: torch.dtype
    route: Route
    modules: list[str] = field(default_factory=list)
    """Upcast route: the attribute paths of the modules cast."""
    seen: dict[str, Json] = field(default_factory=dict)
    equivalent: Equivalent | None = None
    """The library's equivalent path that computed the reference (`try_equivalent`)."""

    def try_equivalent(self, w: Workload, because: str) -> bool:
        """After the arm's step failed with ``because``: switch the modules ``w`` holds to
        an equivalent path the library offers (once); whether there was one to take."""
        if self.equivalent is not None:
            return False  # taken already, and it failed too
        self.equivalent = switch(modules_held(w), because)
        return self.equivalent is not None

    def batch(self, batch: Batch) -> Batch:
        """Upcast route: floating inputs in the reference dtype too (token ids unchanged)."""
        if self.route != "upcast-modules":
            return batch
        return {k: v.to(self.dtype) if v.is_floating_point() else v for k, v in batch.items()}

    def confirm(
        self, out: ForwardOutputs | None, grads: Mapping[str, torch.Tensor] | None = None
    ) -> None:
        """Raise `PrecisionUnsupported` when the upcast route's outputs or gradients show
        a lower precision than `dtype` (module docstring); the native route is the
        workload's own word and is recorded, not judged."""
        want = _BITS[self.dtype]
        low: list[str] = []
        outs = {} if out is None else out.declared()
        self.seen["outputs"] = {k: _name(v.dtype) for k, v in sorted(outs.items())}
        for k, v in outs.items():
            floor = min(want, _BITS[torch.float32]) if v.dim() == 0 else want
            if v.is_floating_point() and _BITS.get(v.dtype, 0) < floor:
                low.append(f"output {k} in {_name(v.dtype)}")
        if grads is not None:
            kinds: list[Json] = [*sorted({_name(g.dtype) for g in grads.values()})]
            self.seen["gradients"] = kinds
            bad = sorted(n for n, g in grads.items() if g.dtype != self.dtype)
            if bad:
                low.append(f"{len(bad)} gradient(s) not in {_name(self.dtype)} (first: {bad[0]})")
        self.seen["confirmed"] = not low
        if low and self.route == "upcast-modules":
            raise PrecisionUnsupported(
                f"upcasting the workload's modules to {_name(self.dtype)} did not make it "
                f"compute there ({'; '.join(low)}): autocast or explicit casts in its forward; "
                "give its setup a dtype keyword (runners.protocol, Precision)"
            )

    def measurements(self) -> dict[str, Json]:
        m: dict[str, Json] = {"precision_route": self.route}
        if self.modules:
            m["precision_route_modules"] = list[Json](self.modules)
        if self.seen:
            m["precision_route_seen"] = dict(self.seen)
        if self.equivalent is not None:
            m["precision_route_equivalent"] = self.equivalent.to_json()
        return m


def setup_reference(
    w: Workload, device: torch.device, seed: int, dtype: torch.dtype
) -> ReferenceArm:
    """Set ``w`` up to compute in ``dtype`` by the native route when it has one, else by
    upcasting its modules; `PrecisionUnsupported` (with why) when neither can."""
    if supports_dtype(w):
        w.setup(device, seed, dtype=dtype)  # type: ignore[call-arg]
        return ReferenceArm(dtype=dtype, route="setup-dtype")
    prebuilt.setup(w, device, seed)
    return upcast_held(w, dtype)


def upcast_held(w: Workload, dtype: torch.dtype) -> ReferenceArm:
    """Cast the modules ``w`` holds (after its ``setup``) to ``dtype`` in place: the
    upcast route (module docstring); `PrecisionUnsupported` when it holds none or a
    cast would replace their parameters."""
    held = modules_held(w)
    if not held:
        raise PrecisionUnsupported(
            f"workload {w.name!r}: its setup takes no dtype keyword and it holds no "
            "torch.nn.Module to upcast; give its setup a dtype keyword (runners.protocol, "
            "Precision)"
        )
    for path, module in held:
        params = [id(p) for p in module.parameters()]
        module.to(dtype)
        if [id(p) for p in module.parameters()] != params:
            raise PrecisionUnsupported(
                f"upcasting {path} replaced its parameters (torch's "
                "overwrite_module_params_on_conversion): its optimizer would no longer apply"
            )
    return ReferenceArm(dtype=dtype, route="upcast-modules", modules=[p for p, _ in held])


def try_setup_reference(
    w: Workload, device: torch.device, seed: int, dtype: torch.dtype
) -> ReferenceArm | str:
    """`setup_reference`, or why the workload cannot compute in ``dtype`` (a value, so a
    caller that captures the workload's exceptions as failures tells the two apart)."""
    try:
        return setup_reference(w, device, seed, dtype)
    except PrecisionUnsupported as e:
        return str(e)
