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

Cold and warm. The harness tells `estimate` and `admit` whether the phase is
cold: no step of that phase has run yet in this process (lazy workspaces,
library handles and kernels may still be allocated inside the step). A
workload whose methods take no ``cold`` keyword is called without it
(`estimate_of`, `admit_of`), so workloads written before it keep working.

Outputs. A forward returns the framework's own loss (``loss``, attached to
the graph with ``grad=True``) and declares what the regression compares:
``pooled_hidden`` and ``nll`` when it has them, any named tensors in
``compared`` (a logits tensor, pooled states, router probabilities). A
workload that can compute its NLL with the LM head in chunks implements
`SupportsChunkedNLL`; checks that need it say so and skip that part, with a
reason, for a workload that does not.

Precision. `Workload.setup` may take a keyword ``dtype``: build the same model
(the configured dtype's weights, upcast) and compute in ``dtype`` instead, so a
check can run the base once more in a reference precision (`setup_in`). A
workload whose ``setup`` takes no ``dtype`` still gets a reference arm: the harness
upcasts the ``torch.nn.Module`` objects it holds after ``setup`` and confirms the
arm computes in the reference dtype (`runners.adapt.upcast`); only when that fails
are the checks that need one inconclusive, with the reason.

Routing. A mixture-of-experts workload may implement `DeclaresRouting`: while
declared, each forward puts its top-k expert selections in
`ForwardOutputs.routing`, so a comparison can count the tokens routed
differently between arms. A workload that declares none is not left blind: the
harness hooks the routers of known MoE blocks it holds (`runners.adapt.routers`).

Modes. A trainer evaluates in evaluation mode (dropout off, BatchNorm on its running
statistics) and trains in training mode. A workload that implements `SupportsModes`
is told which before each step: evaluation before every no-grad forward
(``forward_nograd``: the 24-view regression and its observer-off control, admission's
and ``profile``'s no-grad phases, the reference arms), training before every gradient
step (``forward_backward``). `enter_mode` does it; a workload that does not offer it
is called as before (its forwards run in whatever mode it keeps). The ready adapters
(`runners.adapt.library`) offer it.

Batches. A batch is a dict of named tensors, as the trainer feeds its
model: ``input_ids``, ``attention_mask`` (1 real, 0 padding), ``labels``
with ``-100`` for positions that carry no loss, packed sequences with
``cu_seqlens`` / ``position_ids``. `pad_sequences` and `pack_sequences`
build those; `batch_tokens` counts the tokens that carry a loss.

Migration from the previous protocol: a workload that returned
``ForwardOutputs(pooled_hidden=..., nll=..., loss=...)`` and implemented
``nll_chunked`` still works unchanged; see docs/workload-protocol.md.
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

Phase = Literal["forward_nograd", "forward_backward", "optimizer_step"]
"""Which step `Workload.estimate` / `Workload.admit` speak about (see module docstring):
``optimizer_step`` is the optimizer's step alone, after a backward made the gradients
(its first makes the optimizer's state); asked only where a plan names it."""

PHASES: tuple[Phase, ...] = ("forward_nograd", "forward_backward")
"""The phases every workload speaks about, in the order checks usually run them."""

STEP_PHASES: tuple[Phase, ...] = (*PHASES, "optimizer_step")
"""Every phase, in the order admission runs them; ``optimizer_step`` only where asked."""

Batch = dict[str, torch.Tensor]
"""Named input tensors on the workload's device, as made by `Workload.make_batch`."""


@dataclass(kw_only=True, slots=True, frozen=True)
class Shape:
    """The size of one step's input: ``batch x seq`` and any named dimensions."""

    batch: int
    """Sequences (views) in the step; for packed input, the rows."""
    seq: int
    """Tokens per sequence (the padded length; for packed input, the packed length)."""
    dims: tuple[tuple[str, int], ...] = ()
    """Named dimensions beyond batch x seq, sorted by name: ``tokens`` (real tokens,
    when padding or packing makes them fewer than batch x seq), ``sequences`` (packed
    into the rows), or the workload's own (``experts``, ``image_patches``, ...)."""

    def __post_init__(self) -> None:
        if self.batch < 1 or self.seq < 1:
            raise ValueError(f"shape needs batch >= 1 and seq >= 1, got {self.batch}x{self.seq}")
        for name, n in self.dims:
            if not name.isidentifier() or n < 0:
                raise ValueError(f"shape dimension {name}={n}: need a name and a size >= 0")
        object.__setattr__(self, "dims", tuple(sorted(dict(self.dims).items())))

    @classmethod
    def parse(cls, text: str) -> Shape:
        """``BATCHxSEQ`` optionally followed by ``,name=N`` pairs (``4x1024,tokens=3500``)."""
        head, *rest = text.replace(" ", "").split(",")
        b, sep, q = head.partition("x")
        try:
            dims = tuple((k, int(v)) for k, _, v in (r.partition("=") for r in rest))
            return cls(batch=int(b), seq=int(q), dims=dims) if sep else cls._bad(text)
        except ValueError as e:
            raise ValueError(f"shape {text!r}: want BATCHxSEQ[,name=N...] ({e})") from None

    @classmethod
    def _bad(cls, text: str) -> Shape:
        raise ValueError("no 'x' between batch and seq")

    def dim(self, name: str, default: int | None = None) -> int | None:
        """The named dimension ``name``, or ``default``."""
        return dict(self.dims).get(name, default)

    @property
    def tokens(self) -> int:
        """Tokens in the step: the ``tokens`` dimension when given, else ``batch * seq``."""
        return self.dim("tokens") or self.batch * self.seq

    def __str__(self) -> str:
        extra = "".join(f",{k}={v}" for k, v in self.dims)
        return f"{self.batch}x{self.seq}{extra}"


@dataclass(kw_only=True, slots=True, frozen=True)
class MemoryEstimate:
    """A predicted reset-to-peak increment and the terms it is made of."""

    predicted_bytes: int
    """Predicted peak increment above the phase's baseline, in bytes."""
    terms: dict[str, int] = field(default_factory=dict)
    """Named byte counts live at the predicted peak (weights, activations, expert working
    set, logits, workspace, ...); they explain the prediction and, for the reference
    estimator, sum to `predicted_bytes`."""
    point_bytes: int | None = None
    """An estimator that states its error: the point estimate, `predicted_bytes` being
    the upper bound it is held to (point plus stated error). None: not said."""
    calibration: str | None = None
    """The calibration the prediction was fit on (``sha256:<hex>``), where it has one."""
    builtin: MemoryEstimate | None = None
    """The built-in estimator's prediction of the same step, recorded beside a team's
    estimate where the plan asks (``builtin_beside``); the team's decides."""

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
    point_bytes: int | None = None
    """The estimate's point where it states an error (`MemoryEstimate.point_bytes`)."""
    calibration: str | None = None
    """The calibration the prediction was fit on (`MemoryEstimate.calibration`)."""
    builtin: MemoryEstimate | None = None
    """The built-in estimator's prediction beside a team's (`MemoryEstimate.builtin`):
    recorded, never deciding."""

    def measurements(self) -> dict[str, int | bool | str | None]:
        """The decision as flat receipt measurements (exact integers); the point, the
        calibration and the built-in prediction beside a team's only where the estimate
        has them, so earlier receipts' rows read as they did."""
        out: dict[str, int | bool | str | None] = {
            "admitted": self.admitted,
            "predicted_bytes": self.predicted_bytes,
            "usable_bytes": self.usable_bytes,
            "reserve_bytes": self.reserve_bytes,
            "suggestion": self.suggestion,
        }
        if self.point_bytes is not None:
            out["point_bytes"] = self.point_bytes
        if self.calibration is not None:
            out["calibration"] = self.calibration
        if self.builtin is not None:
            out["builtin_predicted_bytes"] = self.builtin.predicted_bytes
            out["builtin_point_bytes"] = self.builtin.point_bytes
            out["builtin_calibration"] = self.builtin.calibration
        return out


@dataclass(kw_only=True, slots=True, frozen=True)
class ForwardOutputs:
    """What one forward returns: the loss and the outputs the regression compares."""

    pooled_hidden: torch.Tensor | None = None
    """[batch, d_model]: final hidden states mean-pooled over each sequence (detached);
    None for a workload that does not offer them."""
    nll: torch.Tensor | None = None
    """Scalar: mean next-token negative log-likelihood (detached); None: `loss` is it."""
    loss: torch.Tensor | None = None
    """The framework's own scalar loss (e.g. ``model(**batch, labels=labels).loss``),
    still attached to the graph when the forward ran with ``grad=True`` (consumed by
    `Workload.backward`)."""
    compared: dict[str, torch.Tensor] = field(default_factory=dict)
    """More named outputs the regression compares between runs (detached), e.g.
    ``logits`` (recorded by digest and max abs difference)."""
    routing: dict[str, torch.Tensor] = field(default_factory=dict)
    """Top-k expert indices ``[tokens, k]`` per routed layer (by layer name), when the
    workload declares routing (`DeclaresRouting`); empty otherwise. Not compared by the
    regression: a comparison counts the tokens whose selection differs."""

    def declared(self) -> dict[str, torch.Tensor]:
        """Every output the regression compares, by name: ``loss`` (the NLL when given,
        else the loss), ``pooled_hidden`` when given, then `compared`."""
        out: dict[str, torch.Tensor] = {}
        scalar = self.nll if self.nll is not None else self.loss
        if scalar is not None:
            out["loss"] = scalar.detach()
        if self.pooled_hidden is not None:
            out["pooled_hidden"] = self.pooled_hidden.detach()
        out.update({k: v.detach() for k, v in self.compared.items()})
        return out

    def scalar_loss(self) -> torch.Tensor | None:
        """The detached mean NLL, else the detached loss; None when neither is given."""
        t = self.nll if self.nll is not None else self.loss
        return None if t is None else t.detach()


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
        """Build model and optimizer on ``device``, deterministically from ``seed``. May
        take a keyword ``dtype`` (module docstring, Precision; see `setup_in`)."""
        ...

    def teardown(self) -> None:
        """Drop every tensor the workload holds so its memory can return."""
        ...

    def make_batch(self, shape: Shape, seed: int) -> Batch:
        """Deterministic inputs of ``shape`` on the workload's device."""
        ...

    def estimate(self, shape: Shape, phase: Phase, *, cold: bool = False) -> MemoryEstimate:
        """Predicted reset-to-peak increment of ``phase`` at ``shape``; ``cold``: no step
        of ``phase`` has run in this process yet (module docstring)."""
        ...

    def admit(
        self, shape: Shape, phase: Phase, free_bytes: int, *, cold: bool = False
    ) -> AdmissionDecision:
        """Admit ``phase`` at ``shape`` iff its estimate fits ``free_bytes`` less the reserve."""
        ...

    def forward(self, batch: Batch, *, grad: bool) -> ForwardOutputs:
        """One forward over ``batch``; with ``grad`` the loss keeps its graph."""
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


@runtime_checkable
class SupportsChunkedNLL(Protocol):
    """A workload that can compute its NLL with the LM head in chunks (the 24-view
    regression compares it with the unchunked forward's)."""

    def nll_chunked(self, batch: Batch, chunk_tokens: int) -> torch.Tensor:
        """The forward's `ForwardOutputs.nll` (no grad), computing the LM head and the
        log-softmax over at most ``chunk_tokens`` tokens at a time."""
        ...


@runtime_checkable
class DeclaresRouting(Protocol):
    """A mixture-of-experts workload that can declare its router outputs."""

    def declare_routing(self, on: bool) -> None:
        """While ``on``, every forward fills `ForwardOutputs.routing` with its top-k
        expert indices per routed layer (off by default: they cost memory)."""
        ...


@runtime_checkable
class ReplaysRouting(Protocol):
    """A mixture-of-experts workload whose routers can take given selections.

    Gradient-compare's function part runs the candidate in the reference precision
    against the base's reference arm. A router's top-k is discrete: a near tie can
    flip between two runs that compute the same function to rounding, and a token
    sent to another expert moves every gradient downstream far beyond rounding. Fed
    the reference arm's selections, both runs send the same tokens through the same
    experts, so what is left to differ is the change itself."""

    def replay_routing(self, selections: Mapping[str, torch.Tensor] | None) -> None:
        """While set, each router named in ``selections`` (as `ForwardOutputs.routing`
        names it) takes those top-k expert indices instead of its own, weighting them
        with its own probabilities; its own choice is still what `DeclaresRouting`
        reports. None: every router chooses again."""
        ...

    def replayed_layers(self) -> int:
        """Routers that took given selections in the last forward."""
        ...


@runtime_checkable
class DeclaresRouterMargins(Protocol):
    """A mixture-of-experts workload that declares its routing (`DeclaresRouting`) and
    can say, per token, how near each selection was to flipping.

    Where the head cannot replay the base's routing, the 24-view regression sets aside
    the tokens it routed otherwise than the base only where the base's margin is
    within what the precision itself moves it; without margins no token is set aside.
    The harness's router hooks record margins themselves: this is for routers they do
    not know."""

    def router_margins(self) -> Mapping[str, torch.Tensor]:
        """For the last forward while routing was declared: per routed layer (as
        `ForwardOutputs.routing` names it), one float per token, the router's k-th
        highest probability less its (k+1)-th, tokens in the routing's order."""
        ...


@runtime_checkable
class SupportsPrepare(Protocol):
    """A workload whose CPU-side work (importing its libraries, building or loading the
    model on CPU) can be done once, before any claim, and shared.

    ``ledger qualify`` calls `prepare` once in its fork server (no device, no CUDA);
    every claim process is forked from it and inherits the prepared workload, then calls
    `Workload.setup` with its device and seed as usual. `setup` must give the same
    model whether or not `prepare` ran (e.g. reuse the prepared CPU weights only for the
    seed they were built from, as a copy, never moving the prepared ones)."""

    def prepare(self) -> None:
        """CPU-only work shared by every claim; no device may be touched."""
        ...


Mode = Literal["train", "eval"]
"""How a trainer runs a step: ``train`` for a gradient step, ``eval`` for a no-grad one."""


@runtime_checkable
class SupportsModes(Protocol):
    """A workload that runs a no-grad step as its trainer evaluates (module docstring,
    Modes): the harness calls `set_mode` before each step."""

    def set_mode(self, mode: Mode) -> None:
        """``eval``: later forwards run as the trainer evaluates (``model.eval()``: no
        dropout, BatchNorm on running statistics); ``train``: as it trains."""
        ...


def mode_for(grad: bool) -> Mode:
    """The mode a step runs in: ``train`` with gradients, else ``eval``."""
    return "train" if grad else "eval"


def enter_mode(w: object, grad: bool) -> Mode | None:
    """Tell ``w`` the mode of the step about to run (`SupportsModes`); the mode, or None
    for a workload that does not offer it (called as before)."""
    if not isinstance(w, SupportsModes):
        return None
    mode = mode_for(grad)
    w.set_mode(mode)
    return mode


class EstimatorMissing(NotImplementedError):
    """The workload has no memory estimator (a ready adapter whose plan names none):
    checks that need a prediction are inconclusive and say so, never failed."""


class PrecisionUnsupported(TypeError):
    """The workload cannot compute in another dtype (its ``setup`` takes no ``dtype``)."""


def _takes(method: Callable[..., object], keyword: str) -> bool:
    try:
        params = inspect.signature(method).parameters
    except (TypeError, ValueError):
        return False
    return keyword in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def _takes_cold(method: Callable[..., object]) -> bool:
    return _takes(method, "cold")


def supports_dtype(w: Workload) -> bool:
    """Whether ``w.setup`` takes the ``dtype`` keyword (module docstring, Precision)."""
    return _takes(w.setup, "dtype")


def setup_in(w: Workload, device: torch.device, seed: int, dtype: torch.dtype | None) -> None:
    """``w.setup``, computing in ``dtype`` when given; `PrecisionUnsupported` when the
    workload's ``setup`` takes no ``dtype``."""
    if dtype is None:
        w.setup(device, seed)
        return
    if not supports_dtype(w):
        raise PrecisionUnsupported(
            f"workload {w.name!r} cannot compute in {str(dtype).removeprefix('torch.')}: its "
            f"setup takes no dtype keyword (runners.protocol, Precision)"
        )
    w.setup(device, seed, dtype=dtype)  # type: ignore[call-arg]


def estimate_of(w: Workload, shape: Shape, phase: Phase, *, cold: bool) -> MemoryEstimate:
    """``w.estimate``, told ``cold`` when it takes the keyword (older workloads do not)."""
    if _takes_cold(w.estimate):
        return w.estimate(shape, phase, cold=cold)
    return w.estimate(shape, phase)


def admit_of(
    w: Workload, shape: Shape, phase: Phase, free_bytes: int, *, cold: bool
) -> AdmissionDecision:
    """``w.admit``, told ``cold`` when it takes the keyword (older workloads do not)."""
    if _takes_cold(w.admit):
        return w.admit(shape, phase, free_bytes, cold=cold)
    return w.admit(shape, phase, free_bytes)


def pad_sequences(
    seqs: Iterable[torch.Tensor], *, pad_id: int = 0, length: int | None = None
) -> Batch:
    """Right-padded ``input_ids``, ``attention_mask`` and ``labels`` (``-100`` on padding)
    from 1-D token tensors; ``length`` defaults to the longest sequence."""
    rows = [s.reshape(-1) for s in seqs]
    n = max((r.numel() for r in rows), default=0) if length is None else length
    ids = torch.full((len(rows), n), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), n), dtype=torch.long)
    for i, r in enumerate(rows):
        k = min(n, r.numel())
        ids[i, :k] = r[:k]
        mask[i, :k] = 1
    labels = ids.masked_fill(mask == 0, -100)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def pack_sequences(seqs: Iterable[torch.Tensor]) -> Batch:
    """One packed row: ``input_ids`` [1, total], ``position_ids`` restarting at each
    sequence, ``cu_seqlens`` (int32 cumulative lengths, starting at 0) and ``labels``
    with ``-100`` at each sequence's first position (no previous token to predict it
    from)."""
    rows = [s.reshape(-1) for s in seqs]
    ids = torch.cat(rows).unsqueeze(0)
    lengths = torch.tensor([r.numel() for r in rows], dtype=torch.int32)
    cu = torch.zeros(len(rows) + 1, dtype=torch.int32)
    cu[1:] = torch.cumsum(lengths, 0)
    pos = torch.cat([torch.arange(r.numel()) for r in rows]).unsqueeze(0)
    labels = ids.clone()
    labels[0, cu[:-1].long()] = -100
    return {"input_ids": ids, "position_ids": pos, "cu_seqlens": cu, "labels": labels}


def batch_tokens(batch: Batch) -> int:
    """Tokens that carry a loss: ``labels != -100`` when there are labels, else the
    ``attention_mask``'s ones, else every element of ``input_ids``."""
    if "labels" in batch:
        return int((batch["labels"] != -100).sum())
    if "attention_mask" in batch:
        return int(batch["attention_mask"].sum())
    return int(batch["input_ids"].numel())


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
