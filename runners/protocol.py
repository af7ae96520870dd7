"""The workload protocol: what a repository implements to be qualified.

A plan names an entry point ``module:attribute``; the attribute is a
`WorkloadFactory`, called with the plan's ``workload_params`` to build one
`Workload`. Checks then drive the workload through this interface only.

Memory contract. `Workload.estimate` predicts the *reset-to-peak increment*
of one phase: the peak of bytes allocated during the phase minus the bytes
allocated just before it. The batch (from `Workload.make_batch`), the model,
its optimizer state and any gradients already present are part of the
baseline. The phases are:

- ``forward_nograd``: ``out = forward(batch, grad=False)``, with ``out`` held
  until the measurement ends.
- ``forward_backward``: ``out = forward(batch, grad=True); backward(out)``,
  with ``out`` held until the measurement ends. Gradient buffers created by
  the backward (after `Workload.zero_grad`, which frees them) count in the
  increment. The optimizer step is not part of the phase.

`Workload.admit` compares that prediction with the usable budget (free bytes
less a reserve the workload states) and refuses with numbers instead of
running out of memory.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Literal, Protocol, runtime_checkable

import torch

Phase = Literal["forward_nograd", "forward_backward"]
"""Which step `Workload.estimate` / `Workload.admit` speak about (see module docstring)."""

PHASES: tuple[Phase, ...] = ("forward_nograd", "forward_backward")
"""All phases, in the order checks usually run them."""

Batch = dict[str, torch.Tensor]
"""Named input tensors on the workload's device, as made by `Workload.make_batch`."""


@dataclass(kw_only=True, slots=True, frozen=True)
class Shape:
    """The size of one step's input."""

    batch: int
    """Sequences (views) in the step."""
    seq: int
    """Tokens per sequence."""

    def __post_init__(self) -> None:
        if self.batch < 1 or self.seq < 1:
            raise ValueError(f"shape needs batch >= 1 and seq >= 1, got {self.batch}x{self.seq}")

    @property
    def tokens(self) -> int:
        """Tokens in the step: ``batch * seq``."""
        return self.batch * self.seq

    def __str__(self) -> str:
        return f"{self.batch}x{self.seq}"


@dataclass(kw_only=True, slots=True, frozen=True)
class MemoryEstimate:
    """A predicted reset-to-peak increment and the terms it is made of."""

    predicted_bytes: int
    """Predicted peak increment above the phase's baseline, in bytes."""
    terms: dict[str, int] = field(default_factory=dict)
    """Named byte counts live at the predicted peak (weights, activations, expert working
    set, logits, workspace, ...); they explain the prediction and, for the reference
    estimator, sum to `predicted_bytes`."""

    def __post_init__(self) -> None:
        if self.predicted_bytes < 0:
            raise ValueError(f"predicted_bytes must be >= 0, got {self.predicted_bytes}")


@dataclass(kw_only=True, slots=True, frozen=True)
class AdmissionDecision:
    """Whether a phase at a shape may run within the free memory, with the numbers."""

    admitted: bool
    """True when ``predicted_bytes <= usable_bytes``."""
    predicted_bytes: int
    """The estimate's prediction for the phase and shape."""
    usable_bytes: int
    """Free bytes less `reserve_bytes` (may be negative when the reserve exceeds free)."""
    reserve_bytes: int
    """Bytes held back from the free memory, by the workload's stated reserve rule."""
    suggestion: str | None = None
    """For a refusal: a smaller step that would fit (e.g. 'split into 2 chunks of 512
    tokens'), or why none exists. None when admitted."""

    def measurements(self) -> dict[str, int | bool | str | None]:
        """The decision as flat receipt measurements (exact integers)."""
        return {
            "admitted": self.admitted,
            "predicted_bytes": self.predicted_bytes,
            "usable_bytes": self.usable_bytes,
            "reserve_bytes": self.reserve_bytes,
            "suggestion": self.suggestion,
        }


@dataclass(kw_only=True, slots=True, frozen=True)
class ForwardOutputs:
    """What one forward returns."""

    pooled_hidden: torch.Tensor
    """[batch, d_model]: final hidden states mean-pooled over each sequence (detached)."""
    nll: torch.Tensor
    """Scalar: mean next-token negative log-likelihood over all tokens (detached)."""
    loss: torch.Tensor | None = None
    """Scalar loss still attached to the autograd graph when the forward ran with
    ``grad=True`` (consumed by `Workload.backward`); None otherwise."""


@runtime_checkable
class Workload(Protocol):
    """A trainable model a check can build, measure, run and tear down.

    Call order: `setup`, then any number of steps, then `teardown`. Every method
    other than `name`, `digest`, `estimate` and `admit` needs a prior `setup`.
    """

    @property
    def name(self) -> str:
        """Short identifier recorded as the scope's ``workload`` facet."""
        ...

    @property
    def dtype(self) -> torch.dtype:
        """Parameter / activation dtype from the config (the scope's ``dtype`` facet)."""
        ...

    def digest(self) -> str:
        """sha256 hex over the config and the workload's source (``workload_digest``)."""
        ...

    def setup(self, device: torch.device, seed: int) -> None:
        """Build model and optimizer on ``device``, deterministically from ``seed``."""
        ...

    def teardown(self) -> None:
        """Drop every tensor the workload holds so its memory can return."""
        ...

    def make_batch(self, shape: Shape, seed: int) -> Batch:
        """Deterministic inputs of ``shape`` on the workload's device."""
        ...

    def estimate(self, shape: Shape, phase: Phase) -> MemoryEstimate:
        """Predicted reset-to-peak increment of ``phase`` at ``shape`` (module docstring)."""
        ...

    def admit(self, shape: Shape, phase: Phase, free_bytes: int) -> AdmissionDecision:
        """Admit ``phase`` at ``shape`` iff its estimate fits ``free_bytes`` less the reserve."""
        ...

    def forward(self, batch: Batch, *, grad: bool) -> ForwardOutputs:
        """One forward over ``batch``; with ``grad`` the loss keeps its graph."""
        ...

    def nll_chunked(self, batch: Batch, chunk_tokens: int) -> torch.Tensor:
        """The forward's `ForwardOutputs.nll` (no grad), computing the LM head and the
        log-softmax over at most ``chunk_tokens`` tokens at a time."""
        ...

    def backward(self, out: ForwardOutputs) -> None:
        """Backpropagate ``out.loss``, accumulating into the trainable parameters' grads."""
        ...

    def optimizer_step(self) -> None:
        """Apply one optimizer update from the accumulated gradients."""
        ...

    def gradients(self) -> dict[str, torch.Tensor]:
        """Detached copies of the trainable parameters' gradients, by parameter name;
        a parameter without a gradient is left out."""
        ...

    def zero_grad(self) -> None:
        """Free the accumulated gradients (set them to None)."""
        ...


WorkloadFactory = Callable[..., Workload]
"""What a plan's ``module:attribute`` entry point names: ``factory(**workload_params)``."""


def workload_digest(config: Mapping[str, object], sources: Iterable[ModuleType | str]) -> str:
    """sha256 hex over ``config`` (canonical JSON, non-JSON values by ``str``) and the
    source text of ``sources`` (modules, or source strings), in the order given."""
    h = hashlib.sha256()
    h.update(json.dumps(dict(config), sort_keys=True, separators=(",", ":"), default=str).encode())
    for src in sources:
        text = src if isinstance(src, str) else inspect.getsource(src)
        data = text.encode()
        # Length prefix keeps the boundary between sources unambiguous.
        h.update(len(data).to_bytes(8, "big"))
        h.update(data)
    return h.hexdigest()
