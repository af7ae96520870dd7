"""An equivalent path a library offers, for a reference arm its usual kernels cannot run.

A reference arm computes the workload's function in a higher precision. A fused
kernel may take no such dtype: transformers' mixture-of-experts blocks run their
experts on ``torch._grouped_mm`` by default, which has no float64 kernel, so the
float64 reference of a float32 model raises in its first expert. That says nothing
about the code under test: the same function is computable on another path the
library offers, here the ``eager`` experts (a loop over experts, the computation
each fused implementation is checked against), chosen on the loaded model with
``PreTrainedModel.set_experts_implementation("eager")``.

`switch` takes that path on the modules a reference arm holds once its own path has
failed, and says what it switched (`Equivalent`, recorded in the receipt as
``precision_route_equivalent``); None when no module holds a path to switch, so the
caller gives up (inconclusive, with why). The arms under test keep their kernels:
only the reference arm, whose job is the function and not the kernel, changes path.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from runners.contract.result import Json

EAGER = "eager"
"""transformers' experts implementation that is a plain loop over experts."""


@dataclass(slots=True)
class Equivalent:
    """The path that computed the reference instead of the workload's own."""

    path: str
    """``experts_implementation=eager``."""
    instead_of: str
    """The implementation(s) replaced (``grouped_mm``)."""
    models: list[str] = field(default_factory=list)
    """Where the models switched sit (attribute paths in the workload)."""
    because: str = ""
    """Why the workload's own path could not compute (its error)."""

    def to_json(self) -> dict[str, Json]:
        return {
            "path": self.path,
            "instead_of": self.instead_of,
            "models": list[Json](self.models),
            "because": self.because,
        }

    def sentence(self) -> str:
        return f"{self.path} instead of {self.instead_of} ({', '.join(self.models)})"


def fused_experts(held: Sequence[tuple[str, torch.nn.Module]]) -> list[tuple[str, Any, str]]:
    """The transformers models among ``held`` (outermost only) whose experts run on an
    implementation other than the eager loop: (path, model, implementation)."""
    base = _pretrained_class()
    if base is None:
        return []  # transformers not imported: no module held can be one of its models
    out: list[tuple[str, Any, str]] = []
    for path, module in held:
        for name, sub in module.named_modules():
            where = f"{path}.{name}" if name else path
            if any(where.startswith(f"{p}.") for p, _, _ in out):
                continue  # inside a model found already: switched with it
            if not isinstance(sub, base):
                continue
            model: Any = sub
            if not model._can_set_experts_implementation():
                continue
            impl = model.config._experts_implementation
            if impl not in (None, EAGER):
                out.append((where, model, str(impl)))
    return out


def switch(held: Sequence[tuple[str, torch.nn.Module]], because: str) -> Equivalent | None:
    """Put every fused-experts model in ``held`` on the eager experts; what was switched,
    or None when nothing held offers that path."""
    found = fused_experts(held)
    for _, model, _ in found:
        model.set_experts_implementation(EAGER)
    if not found:
        return None
    return Equivalent(
        path=f"experts_implementation={EAGER}",
        instead_of=", ".join(sorted({impl for _, _, impl in found})),
        models=[where for where, _, _ in found],
        because=because,
    )


def _pretrained_class() -> type | None:
    mod = sys.modules.get("transformers.modeling_utils")
    got = getattr(mod, "PreTrainedModel", None)
    return got if isinstance(got, type) else None
