"""Hugging Face transformers' Qwen3-MoE from a tiny config, random init, PEFT LoRA.

LoRA adapters sit on the attention projections (``q/k/v/o_proj``) and on the
3-D expert weights (``mlp.experts.gate_up_proj``, ``mlp.experts.down_proj``,
through PEFT's ``target_parameters``); AdamW trains them. The workload speaks
the protocol the way a trainer does: batches with ``attention_mask`` and
``-100`` labels on padding, the model's own loss (``model(**batch).loss``),
and the logits declared as the output the regression compares. It offers no
chunked NLL, so checks that need one skip that part with a reason. It can
compute in a reference precision (``setup(..., dtype=...)``) and declares its
router's top-k selections (`runners.protocol.DeclaresRouting`) and takes given ones
(`runners.protocol.ReplaysRouting`).
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from importlib import metadata
from typing import Any

import torch
from torch import Tensor

from qwen3_lora import estimator as _estimator
from runners.protocol import (
    AdmissionDecision,
    Batch,
    ForwardOutputs,
    MemoryEstimate,
    Phase,
    Shape,
    pad_sequences,
    workload_digest,
)

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@dataclass(frozen=True, slots=True)
class Qwen3Config:
    vocab: int = 512
    hidden: int = 64
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 16
    experts: int = 8
    top_k: int = 2
    moe_ff: int = 64
    lora_rank: int = 8
    lora_alpha: int = 16
    dtype: str = "float32"
    attention: str = "eager"
    """transformers attention implementation: ``eager`` (seq x seq scores) or ``sdpa``."""
    experts_impl: str | None = None
    """transformers experts implementation: ``eager`` (a loop over experts), ``grouped_mm``
    or ``batched_mm`` (fused); None: the library's default."""
    padding: int = 4
    """Padding tokens at the end of every other row (labels -100, attention mask 0)."""
    lr: float = 1e-3
    perturb: float = 0.0
    """Added to every LoRA B weight after setup (a candidate that really differs)."""
    reserve_permille: int = 50
    reserve_min_bytes: int = 1 << 20

    def __post_init__(self) -> None:
        if self.dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(_DTYPES)}, got {self.dtype!r}")
        if self.attention not in ("eager", "sdpa"):
            raise ValueError(f"attention must be eager or sdpa, got {self.attention!r}")
        if self.experts_impl not in (None, "eager", "grouped_mm", "batched_mm"):
            raise ValueError(
                f"experts_impl must be eager, grouped_mm or batched_mm: {self.experts_impl}"
            )


def _hf_config(c: Qwen3Config, experts: str | None = None) -> Any:
    # Imported here, as trainers do: importing transformers costs seconds, paid where
    # the model is built (once, in `prepare`, under ledger qualify's fork server).
    from transformers import Qwen3MoeConfig

    cfg = Qwen3MoeConfig(
        vocab_size=c.vocab,
        hidden_size=c.hidden,
        intermediate_size=2 * c.moe_ff,
        moe_intermediate_size=c.moe_ff,
        num_hidden_layers=c.layers,
        num_attention_heads=c.heads,
        num_key_value_heads=c.kv_heads,
        head_dim=c.head_dim,  # type: ignore[call-arg]  # a Qwen3 key the stub lacks
        num_experts=c.experts,
        num_experts_per_tok=c.top_k,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
    )
    cfg._attn_implementation = c.attention
    if experts or c.experts_impl:
        cfg._experts_implementation = experts or c.experts_impl
    return cfg


class Qwen3LoraWorkload:
    """A `runners.protocol.Workload` around ``Qwen3MoeForCausalLM`` + PEFT LoRA."""

    name = "qwen3-moe-lora"

    def __init__(self, config: Qwen3Config) -> None:
        self.config = config
        self.model: Any = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.device: torch.device | None = None
        self._routing = False
        self._routed: dict[str, Tensor] = {}
        self._replay: dict[str, Tensor] = {}
        self._replayed = 0
        self._prepared: tuple[int, Any] | None = None
        """(seed, model on CPU in the configured dtype) built by `prepare`."""

    def prepare(self) -> None:
        """Build the model on CPU once (`runners.protocol.SupportsPrepare`): every claim
        forked afterwards copies it instead of building it; for seed 0, the checks'."""
        self._prepared = (0, self._build(0, None).to(dtype=self.dtype))

    def _build(self, seed: int, experts: str | None) -> Any:
        """Qwen3-MoE with LoRA on CPU, deterministic from ``seed``."""
        from peft import LoraConfig, get_peft_model
        from transformers import Qwen3MoeForCausalLM

        c = self.config
        # transformers initialises from the global generator: fork it so the seed
        # fixes the weights without changing the caller's random state.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            base = Qwen3MoeForCausalLM(_hf_config(c, experts))
            lora = LoraConfig(
                r=c.lora_rank,
                lora_alpha=c.lora_alpha,
                lora_dropout=0.0,
                target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                target_parameters=["mlp.experts.gate_up_proj", "mlp.experts.down_proj"],
            )
            model = get_peft_model(base, lora)
            gen = torch.Generator().manual_seed(seed + 1)
            for n, p in model.named_parameters():
                # PEFT starts B at zero (A then gets no gradient): start mid-training.
                if "lora_B" in n:
                    with torch.no_grad():
                        p.copy_(torch.randn(p.shape, generator=gen) * 0.02 + c.perturb)
        return model

    def declare_routing(self, on: bool) -> None:
        """While ``on``, forwards declare each MoE layer's top-k selections, by the router's
        module name (``model.layers.N.mlp.gate``)."""
        self._routing = on

    def replay_routing(self, selections: Mapping[str, Tensor] | None) -> None:
        """Routers take these top-k indices (`runners.protocol.ReplaysRouting`)."""
        self._replay = dict(selections or {})

    def replayed_layers(self) -> int:
        return self._replayed

    @property
    def dtype(self) -> torch.dtype:
        return _DTYPES[self.config.dtype]

    def digest(self) -> str:
        """Over the config, this module and its estimator, and the library versions (a
        transformers or peft upgrade is a different workload)."""
        libs = {d: metadata.version(d) for d in ("transformers", "peft")}
        return workload_digest(
            {"workload": self.name, **asdict(self.config), **libs},
            [sys.modules[__name__], _estimator],
        )

    def setup(self, device: torch.device, seed: int, *, dtype: torch.dtype | None = None) -> None:
        """Build the model and optimizer; ``dtype``: compute in it instead, from the
        configured dtype's weights upcast (a reference precision). A reference runs the
        experts' loop (the unfused reference computation): fused expert kernels take
        bfloat16 only on CUDA and no float64 anywhere."""
        self.teardown()
        c = self.config
        prepared = self._prepared[1] if self._prepared and self._prepared[0] == seed else None
        if prepared is not None:
            # The prepared weights stay as built, for the next setup.
            model = _private_copy(prepared, device)
            if dtype is not None:
                model.set_experts_implementation("eager")
        else:
            model = self._build(seed, "eager" if dtype is not None else None)
        self.model = model.to(device=device, dtype=self.dtype)
        if dtype is not None:
            self.model = self.model.to(dtype=dtype)
        for name, module in self.model.named_modules():
            if name.endswith("mlp.gate"):
                module.register_forward_hook(
                    self._keep_route(name.removeprefix("base_model.model."))
                )
        self.device = device
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(trainable, lr=c.lr, foreach=False)

    def _keep_route(self, name: str) -> Any:
        def hook(module: Any, _inputs: Any, output: Any) -> Any:
            # The router returns (logits, weights, top-k indices): the indices are the one
            # integer tensor; a router returning only its logits is ranked here.
            outs = output if isinstance(output, tuple) else (output,)
            found = [t for t in outs if isinstance(t, Tensor) and not t.is_floating_point()]
            logits = outs[0]
            if self._routing:
                if found:
                    self._routed[name] = found[0].detach()
                elif isinstance(logits, Tensor) and logits.shape[-1] == self.config.experts:
                    top = logits.detach().reshape(-1, self.config.experts).topk(self.config.top_k)
                    self._routed[name] = top.indices
            given = self._replay.get(name)
            if given is None or len(outs) != 3 or not found:
                return None
            # The given experts, weighted as the router weights its own choice: softmax
            # in float32, renormalised over the top k where the model does that.
            index = given.to(device=logits.device, dtype=found[0].dtype).reshape(found[0].shape)
            probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
            weights = probs.gather(-1, index)
            if getattr(module, "norm_topk_prob", False):
                weights = weights / weights.sum(dim=-1, keepdim=True)
            self._replayed += 1
            return (logits, weights.to(outs[1].dtype), index)

        return hook

    def teardown(self) -> None:
        self._routed = {}
        if self.optimizer is not None:
            self.optimizer.state.clear()
        self.model = None
        self.optimizer = None
        self.device = None

    def _model(self) -> Any:
        if self.model is None:
            raise RuntimeError(f"workload {self.name!r} used before setup()")
        return self.model

    def make_batch(self, shape: Shape, seed: int) -> Batch:
        """``input_ids``, ``attention_mask`` and ``labels``: every other row ends in
        `Qwen3Config.padding` padding tokens (mask 0, label -100)."""
        self._model()
        gen = torch.Generator().manual_seed(seed)
        pad = min(self.config.padding, shape.seq - 1)
        rows = [
            torch.randint(self.config.vocab, (shape.seq - (pad if i % 2 else 0),), generator=gen)
            for i in range(shape.batch)
        ]
        batch = pad_sequences(rows, length=shape.seq)
        return {k: v.to(self.device) for k, v in batch.items()}

    def estimate(self, shape: Shape, phase: Phase, *, cold: bool = False) -> MemoryEstimate:
        kind = self.device.type if self.device is not None else "cpu"
        return _estimator.estimate(self.config, shape, phase, kind, cold=cold)

    def admit(
        self, shape: Shape, phase: Phase, free_bytes: int, *, cold: bool = False
    ) -> AdmissionDecision:
        est = self.estimate(shape, phase, cold=cold)
        c = self.config
        reserve = max(c.reserve_min_bytes, free_bytes * c.reserve_permille // 1000)
        if kind_is_cuda(self.device):
            reserve += _estimator.CUDA_OUTSIDE_POOL_RESERVE_BYTES
        usable = free_bytes - reserve
        ok = est.predicted_bytes <= usable
        suggestion = None if ok else _suggest(self, shape, phase, usable, cold)
        return AdmissionDecision(
            admitted=ok,
            predicted_bytes=est.predicted_bytes,
            usable_bytes=usable,
            reserve_bytes=reserve,
            suggestion=suggestion,
        )

    def forward(self, batch: Batch, *, grad: bool) -> ForwardOutputs:
        """The model's own loss; the logits declared for the regression."""
        model = self._model()
        self._replayed = 0
        with torch.set_grad_enabled(grad):
            out = model(**batch)
        routing, self._routed = self._routed, {}
        return ForwardOutputs(
            loss=out.loss if grad else out.loss.detach(),
            compared={"logits": out.logits.detach()},
            routing=routing,
        )

    def backward(self, out: ForwardOutputs) -> None:
        if out.loss is None or not out.loss.requires_grad:
            raise ValueError("backward needs outputs of forward(grad=True)")
        torch.autograd.backward(out.loss)

    def optimizer_step(self) -> None:
        if self.optimizer is None:
            raise RuntimeError(f"workload {self.name!r} used before setup()")
        self.optimizer.step()

    def gradients(self) -> dict[str, Tensor]:
        return {
            n.removeprefix("base_model.model."): p.grad.detach().clone()
            for n, p in self._model().named_parameters()
            if p.requires_grad and p.grad is not None
        }

    def zero_grad(self) -> None:
        if self.optimizer is None:
            raise RuntimeError(f"workload {self.name!r} used before setup()")
        self.optimizer.zero_grad(set_to_none=True)


def _private_copy(model: Any, device: torch.device) -> Any:
    """A copy of ``model`` that training on ``device`` cannot change ``model`` through.

    For another device the copy's parameters alias the CPU weights (no bytes copied):
    moving it to the device replaces them with device tensors and leaves the originals
    as they are, so a claim costs one host-to-device copy, not a CPU copy of the whole
    model first. On the CPU itself nothing would move, so the weights are copied."""
    if device.type == "cpu":
        return copy.deepcopy(model)
    memo: dict[int, Any] = {id(b): b for b in model.buffers()}
    for p in model.parameters():
        memo[id(p)] = torch.nn.Parameter(p.data, requires_grad=p.requires_grad)
    return copy.deepcopy(model, memo)


def kind_is_cuda(device: torch.device | None) -> bool:
    return device is not None and device.type == "cuda"


def _suggest(w: Qwen3LoraWorkload, shape: Shape, phase: Phase, usable: int, cold: bool) -> str:
    for batch in range(shape.batch - 1, 0, -1):
        smaller = Shape(batch=batch, seq=shape.seq)
        if w.estimate(smaller, phase, cold=cold).predicted_bytes <= usable:
            return f"batch {batch} of {shape.seq} tokens fits"
    return f"no batch of {shape.seq} tokens fits in {usable} usable bytes"


def make_workload(**params: Any) -> Qwen3LoraWorkload:
    """Entry point: ``make_workload(**workload_params)``."""
    return Qwen3LoraWorkload(Qwen3Config(**params))
