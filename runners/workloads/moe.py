"""Reference workload: a small mixture-of-experts transformer with LoRA experts.

Each layer is pre-norm causal attention followed by a top-k routed MoE whose
experts are frozen base weights ``[E, d, ff]`` / ``[E, ff, d]`` plus trainable
LoRA adapters per expert. Routed rows are sorted by expert and each expert runs
grouped matmuls over its contiguous slice: the group sizes depend on the data.
Only the LoRA adapters train; embedding, attention, router and LM head are
frozen. The memory estimator lives in `estimator` beside this module.

The module imports its siblings relatively so that it can be copied, together
with ``estimator.py``, into any package.
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from runners.protocol import (
    AdmissionDecision,
    Batch,
    ForwardOutputs,
    MemoryEstimate,
    Phase,
    Shape,
    workload_digest,
)

from . import estimator as _estimator

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


@dataclass(kw_only=True, frozen=True)
class MoEConfig:
    """Model, optimizer and admission settings (the plan's ``workload_params``)."""

    vocab: int = 512
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    n_experts: int = 8
    top_k: int = 2
    d_ff: int = 128
    lora_rank: int = 8
    lora_alpha: float = 16.0
    dtype: str = "float32"
    """One of `DTYPES`; parameters and activations use it, the loss runs in float32."""
    lr: float = 1e-3
    """AdamW learning rate for the LoRA adapters."""
    perturb: float = 0.0
    """Added to the LoRA B initialisation (times an independent normal draw); 0 gives
    the base model, anything else a candidate whose gradients differ."""
    reserve_permille: int = 50
    """Admission reserve as a fraction of free bytes, in thousandths."""
    reserve_min_bytes: int = 1 << 20
    """Admission reserve floor in bytes."""
    reserve_outside_pool_bytes: int = _estimator.CUDA_OUTSIDE_POOL_RESERVE_BYTES
    """Admission allowance, on CUDA devices only, for device memory taken outside the
    caching allocator's pool (lazy kernel module loading, CUDA context growth, library
    handles; see `estimator.CUDA_OUTSIDE_POOL_RESERVE_BYTES`). Added to the reserve
    above; a CPU device takes none, whatever this says."""

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {self.dtype!r}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}")
        if not 1 <= self.top_k <= self.n_experts:
            raise ValueError(f"top_k {self.top_k} must be in [1, n_experts={self.n_experts}]")
        for name in ("vocab", "d_model", "n_layers", "n_heads", "d_ff", "lora_rank"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if not 0 <= self.reserve_permille < 1000 or self.reserve_min_bytes < 0:
            raise ValueError("reserve_permille must be in [0, 1000) and reserve_min_bytes >= 0")
        if self.reserve_outside_pool_bytes < 0:
            raise ValueError("reserve_outside_pool_bytes must be >= 0")

    @property
    def torch_dtype(self) -> torch.dtype:
        """`dtype` as a torch dtype."""
        return DTYPES[self.dtype]


def _loss_dtype(dtype: torch.dtype) -> torch.dtype:
    """Router softmax and loss: float32, or float64 when the model computes in it."""
    return torch.promote_types(dtype, torch.float32)


def _normal(gen: torch.Generator, *shape: int, std: float) -> Tensor:
    return torch.randn(*shape, generator=gen) * std


class MoELayer(nn.Module):
    """Causal attention + top-k routed LoRA experts, both pre-norm residual."""

    def __init__(self, cfg: MoEConfig, gen: torch.Generator) -> None:
        super().__init__()
        d, ff, e, r = cfg.d_model, cfg.d_ff, cfg.n_experts, cfg.lora_rank
        self.cfg = cfg

        def frozen(*shape: int, fan_in: int) -> nn.Parameter:
            return nn.Parameter(_normal(gen, *shape, std=fan_in**-0.5), requires_grad=False)

        self.qkv = frozen(d, 3 * d, fan_in=d)
        self.proj = frozen(d, d, fan_in=d)
        self.router = frozen(d, e, fan_in=d)
        self.w1 = frozen(e, d, ff, fan_in=d)
        self.w2 = frozen(e, ff, d, fan_in=ff)
        # One parameter per expert and adapter, so gradients compare tensor by tensor.
        self.lora_a1 = nn.ParameterList(_normal(gen, d, r, std=d**-0.5) for _ in range(e))
        self.lora_b1 = nn.ParameterList(_normal(gen, r, ff, std=0.02) for _ in range(e))
        self.lora_a2 = nn.ParameterList(_normal(gen, ff, r, std=ff**-0.5) for _ in range(e))
        self.lora_b2 = nn.ParameterList(_normal(gen, r, d, std=0.02) for _ in range(e))
        self.keep_routing = False
        self.routed: Tensor | None = None
        """The last forward's top-k expert indices, while `keep_routing`."""

    def perturb_(self, gen: torch.Generator, amount: float) -> None:
        """Add ``amount`` times a fresh normal draw to every LoRA B."""
        with torch.no_grad():
            for p in [*self.lora_b1, *self.lora_b2]:
                p.add_(torch.randn(p.shape, generator=gen) * amount)

    def forward(self, x: Tensor, batch: int, seq: int) -> Tensor:
        return self._moe(self._attention(x, batch, seq))

    def _attention(self, x: Tensor, batch: int, seq: int) -> Tensor:
        cfg = self.cfg
        heads, hd = cfg.n_heads, cfg.d_model // cfg.n_heads
        qkv = F.layer_norm(x, (cfg.d_model,)) @ self.qkv
        q, k, v = qkv.view(batch, seq, 3, heads, hd).permute(2, 0, 3, 1, 4).unbind(0)
        del qkv
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        del q, k, v
        return x + o.transpose(1, 2).reshape(batch * seq, cfg.d_model) @ self.proj

    def _moe(self, x: Tensor) -> Tensor:
        cfg = self.cfg
        tokens, k = x.shape[0], cfg.top_k
        h = F.layer_norm(x, (cfg.d_model,))
        probs = torch.softmax((h @ self.router).to(_loss_dtype(x.dtype)), dim=-1)
        top_p, top_i = probs.topk(k, dim=-1)
        del probs
        if self.keep_routing:
            self.routed = top_i.detach()
        weights = (top_p / top_p.sum(dim=-1, keepdim=True)).to(x.dtype)
        del top_p
        flat = top_i.view(-1)
        # Stable sort keeps each expert's rows in token order: grouping is deterministic.
        order = torch.argsort(flat, stable=True)
        counts: list[int] = torch.bincount(flat, minlength=cfg.n_experts).tolist()
        del top_i, flat
        inverse = torch.argsort(order)
        rows = h.index_select(0, order // k)
        del h, order
        scale = cfg.lora_alpha / cfg.lora_rank
        # Popping the per-expert views lets `rows` die before the concatenation
        # when nothing saved it for backward.
        chunks = list(torch.split_with_sizes(rows, counts))
        chunks.reverse()
        del rows
        outs = []
        e = 0
        # Every expert runs, even on zero rows, so every adapter always gets a gradient.
        while chunks:
            xe = chunks.pop()
            pre = torch.addmm(xe @ self.w1[e], xe @ self.lora_a1[e], self.lora_b1[e], alpha=scale)
            del xe
            act = F.silu(pre)
            del pre
            outs.append(
                torch.addmm(act @ self.w2[e], act @ self.lora_a2[e], self.lora_b2[e], alpha=scale)
            )
            del act
            e += 1
        routed = torch.cat(outs)
        del outs
        # Unsort by gather and combine by a batched matmul: no atomics in the forward.
        per_token = routed.index_select(0, inverse).view(tokens, k, cfg.d_model)
        del routed, inverse
        return x + torch.bmm(weights.unsqueeze(1), per_token).squeeze(1)


class MoEModel(nn.Module):
    """Embedding, `MoELayer` stack, final norm and LM head."""

    def __init__(self, cfg: MoEConfig, seed: int, kind: type[MoELayer] | None = None) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.cfg = cfg
        self.embed = nn.Parameter(
            _normal(gen, cfg.vocab, cfg.d_model, std=1.0), requires_grad=False
        )
        make = MoELayer if kind is None else kind
        self.layers = nn.ModuleList(make(cfg, gen) for _ in range(cfg.n_layers))
        self.head = nn.Parameter(
            _normal(gen, cfg.d_model, cfg.vocab, std=cfg.d_model**-0.5), requires_grad=False
        )
        if cfg.perturb:
            # A separate stream leaves the base draws identical to the unperturbed model.
            pgen = torch.Generator().manual_seed(seed + 1)
            for layer in self.layers:
                assert isinstance(layer, MoELayer)
                layer.perturb_(pgen, cfg.perturb)

    def hidden(self, input_ids: Tensor) -> Tensor:
        """Final normalised hidden states ``[tokens, d_model]``."""
        batch, seq = input_ids.shape
        x = F.embedding(input_ids.reshape(-1), self.embed)
        for layer in self.layers:
            assert isinstance(layer, MoELayer)
            # Not through nn.Module.__call__: global module hooks (MemTracker's registers a
            # gradient hook on every parameter and fails on frozen ones) stay out of the step.
            x = layer.forward(x, batch, seq)
        return F.layer_norm(x, (self.cfg.d_model,))

    def nll(self, hidden: Tensor, targets: Tensor) -> Tensor:
        """Mean next-token NLL of ``hidden`` rows against ``targets`` (float32 loss)."""
        return F.cross_entropy((hidden @ self.head).to(_loss_dtype(hidden.dtype)), targets)

    def nll_sum(self, hidden: Tensor, targets: Tensor) -> Tensor:
        """Summed next-token NLL (float32), for chunked evaluation."""
        logits = (hidden @ self.head).to(_loss_dtype(hidden.dtype))
        return F.cross_entropy(logits, targets, reduction="sum")


class MoEWorkload:
    """The reference `runners.protocol.Workload`: `MoEModel` trained by AdamW on LoRA."""

    name = "moe-lora"

    def __init__(self, config: MoEConfig) -> None:
        self.config = config
        self.model: MoEModel | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.device: torch.device | None = None
        self._routing = False

    def declare_routing(self, on: bool) -> None:
        """While ``on``, forwards declare each layer's top-k selections (`ForwardOutputs.
        routing`, ``layers.N``)."""
        self._routing = on
        for layer in self.model.layers if self.model is not None else ():
            assert isinstance(layer, MoELayer)
            layer.keep_routing = on

    @property
    def dtype(self) -> torch.dtype:
        """Parameter and activation dtype."""
        return self.config.torch_dtype

    def digest(self) -> str:
        """sha256 hex over the config and the source of the modules defining this workload."""
        modules = {sys.modules[MoEWorkload.__module__], _estimator}
        modules |= {sys.modules[c.__module__] for c in type(self).__mro__[:-1]}
        ordered = sorted(modules, key=lambda m: m.__name__)
        return workload_digest(
            {"workload": self.name, "class": type(self).__qualname__, **asdict(self.config)},
            ordered,
        )

    def setup(self, device: torch.device, seed: int, *, dtype: torch.dtype | None = None) -> None:
        """Build model and optimizer on ``device`` from ``seed`` (initialised on the CPU, so
        every device starts from the same weights); ``dtype``: compute in it, from the
        configured dtype's weights upcast (a reference precision)."""
        self.teardown()
        model = MoEModel(self.config, seed).to(device=device, dtype=self.dtype)
        if dtype is not None:
            model = model.to(dtype=dtype)
        for layer in model.layers:
            assert isinstance(layer, MoELayer)
            layer.keep_routing = self._routing
        self.model = model
        self.device = device
        trainable = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(trainable, lr=self.config.lr, foreach=False)

    def teardown(self) -> None:
        """Drop model, optimizer state and gradients."""
        if self.optimizer is not None:
            self.optimizer.state.clear()
        self.model = None
        self.optimizer = None
        self.device = None

    def _model(self) -> MoEModel:
        if self.model is None:
            raise RuntimeError(f"workload {self.name!r} used before setup()")
        return self.model

    def make_batch(self, shape: Shape, seed: int) -> Batch:
        """Uniform random token ids: ``input_ids`` and next-token ``targets``, ``[batch, seq]``."""
        self._model()
        gen = torch.Generator().manual_seed(seed)
        ids = torch.randint(self.config.vocab, (shape.batch, shape.seq + 1), generator=gen)
        return {
            "input_ids": ids[:, :-1].contiguous().to(self.device),
            "targets": ids[:, 1:].contiguous().to(self.device),
        }

    def estimate(self, shape: Shape, phase: Phase, *, cold: bool = False) -> MemoryEstimate:
        """Reset-to-peak increment of ``phase`` (see `estimator.estimate`). A cold phase
        may create a cuBLAS workspace on each thread that runs a matmul: the forward's
        and, for forward_backward, the autograd thread's (counted even when an earlier
        forward_nograd warmed the first: over, never under)."""
        kind = self.device.type if self.device is not None else "cpu"
        threads = (1 + (phase == "forward_backward")) if cold else 0
        return _estimator.estimate(
            _estimator.Dims.of(self.config), shape, phase, kind, cold_threads=threads
        )

    def outside_pool_reserve_bytes(self) -> int:
        """The admission allowance for memory outside the allocator's pool: the configured
        `MoEConfig.reserve_outside_pool_bytes` on a CUDA device, 0 otherwise."""
        on_cuda = self.device is not None and self.device.type == "cuda"
        return self.config.reserve_outside_pool_bytes if on_cuda else 0

    def admit(
        self, shape: Shape, phase: Phase, free_bytes: int, *, cold: bool = False
    ) -> AdmissionDecision:
        """Admit iff the estimate fits ``free_bytes`` less the reserve (`estimator.admit`):
        ``max(reserve_min_bytes, free * reserve_permille / 1000)``, plus on CUDA the
        allowance for memory outside the allocator's pool."""
        return _estimator.admit(
            lambda s: self.estimate(s, phase, cold=cold),
            shape,
            free_bytes,
            reserve_permille=self.config.reserve_permille,
            reserve_min_bytes=self.config.reserve_min_bytes,
            outside_pool_bytes=self.outside_pool_reserve_bytes(),
        )

    def forward(self, batch: Batch, *, grad: bool) -> ForwardOutputs:
        """Hidden states, pooled mean per sequence, and the mean NLL."""
        model = self._model()
        ids, targets = batch["input_ids"], batch["targets"]
        with torch.set_grad_enabled(grad):
            hidden = model.hidden(ids)
            pooled = hidden.detach().view(*ids.shape, -1).mean(dim=1)
            loss = model.nll(hidden, targets.reshape(-1))
            del hidden
        routing: dict[str, Tensor] = {}
        for i, layer in enumerate(model.layers):
            assert isinstance(layer, MoELayer)
            if layer.routed is not None:
                routing[f"layers.{i}"], layer.routed = layer.routed, None
        return ForwardOutputs(
            pooled_hidden=pooled, nll=loss.detach(), loss=loss if grad else None, routing=routing
        )

    def nll_chunked(self, batch: Batch, chunk_tokens: int) -> Tensor:
        """`forward`'s NLL with the LM head and loss over ``chunk_tokens`` rows at a time."""
        if chunk_tokens < 1:
            raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
        model = self._model()
        targets = batch["targets"].reshape(-1)
        with torch.no_grad():
            hidden = model.hidden(batch["input_ids"])
            total = torch.zeros((), dtype=torch.float32, device=hidden.device)
            for start in range(0, hidden.shape[0], chunk_tokens):
                stop = start + chunk_tokens
                total += model.nll_sum(hidden[start:stop], targets[start:stop])
            return total / hidden.shape[0]

    def backward(self, out: ForwardOutputs) -> None:
        """Backpropagate the loss into the LoRA adapters' gradients."""
        if out.loss is None:
            raise ValueError("backward needs outputs of forward(grad=True)")
        torch.autograd.backward(out.loss)

    def optimizer_step(self) -> None:
        """One AdamW update of the LoRA adapters."""
        if self.optimizer is None:
            raise RuntimeError(f"workload {self.name!r} used before setup()")
        self.optimizer.step()

    def gradients(self) -> dict[str, Tensor]:
        """Detached copies of the LoRA gradients, by parameter name."""
        return {
            name: p.grad.detach().clone()
            for name, p in self._model().named_parameters()
            if p.requires_grad and p.grad is not None
        }

    def zero_grad(self) -> None:
        """Free the gradients."""
        if self.optimizer is None:
            raise RuntimeError(f"workload {self.name!r} used before setup()")
        self.optimizer.zero_grad(set_to_none=True)


def make_workload(**params: Any) -> MoEWorkload:
    """Entry point: ``make_workload(**workload_params)`` -> `MoEWorkload`."""
    return MoEWorkload(MoEConfig(**params))
