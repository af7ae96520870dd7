"""A third party's Qwen3-MoE + PEFT LoRA trainer, adapted to the workload protocol
as it stood in the earlier release, and FROZEN there: its ``setup`` takes no
``dtype``, its ``estimate``/``admit`` take no ``cold``, it declares no routing,
replays none and has no ``prepare``; its forward returns ``pooled_hidden``,
``nll`` and ``loss`` and it implements ``nll_chunked``, as that protocol asked.
Do not modernise it: it is the test that an earlier workload keeps every claim.
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass
from importlib import metadata
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from qwen3_frozen import estimator as _estimator
from runners.protocol import (
    AdmissionDecision,
    Batch,
    ForwardOutputs,
    MemoryEstimate,
    Phase,
    Shape,
    workload_digest,
)

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@dataclass(frozen=True, slots=True)
class FrozenConfig:
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
    experts_impl: str | None = None
    norm_topk_prob: bool = True
    lr: float = 1e-3
    reserve_permille: int = 50
    reserve_min_bytes: int = 1 << 20


class FrozenQwen3Workload:
    name = "qwen3-moe-lora-frozen"

    def __init__(self, config: FrozenConfig) -> None:
        self.config = config
        self.model: Any = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.device: torch.device | None = None

    @property
    def dtype(self) -> torch.dtype:
        return _DTYPES[self.config.dtype]

    def digest(self) -> str:
        libs = {d: metadata.version(d) for d in ("transformers", "peft")}
        return workload_digest(
            {"workload": self.name, **asdict(self.config), **libs},
            [sys.modules[__name__], _estimator],
        )

    def setup(self, device: torch.device, seed: int) -> None:
        from peft import LoraConfig, get_peft_model
        from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

        self.teardown()
        c = self.config
        cfg = Qwen3MoeConfig(
            vocab_size=c.vocab,
            hidden_size=c.hidden,
            intermediate_size=2 * c.moe_ff,
            moe_intermediate_size=c.moe_ff,
            num_hidden_layers=c.layers,
            num_attention_heads=c.heads,
            num_key_value_heads=c.kv_heads,
            head_dim=c.head_dim,
            num_experts=c.experts,
            num_experts_per_tok=c.top_k,
            norm_topk_prob=c.norm_topk_prob,
            max_position_embeddings=4096,
            tie_word_embeddings=False,
        )
        cfg._attn_implementation = c.attention
        if c.experts_impl:
            cfg._experts_implementation = c.experts_impl
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            base = Qwen3MoeForCausalLM(cfg)
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
                if "lora_B" in n:
                    with torch.no_grad():
                        p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
        self.model = model.to(device=device, dtype=self.dtype)
        self.device = device
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(trainable, lr=c.lr, foreach=False)

    def teardown(self) -> None:
        if self.optimizer is not None:
            self.optimizer.state.clear()
        self.model = None
        self.optimizer = None
        self.device = None

    def make_batch(self, shape: Shape, seed: int) -> Batch:
        gen = torch.Generator().manual_seed(seed)
        ids = torch.randint(self.config.vocab, (shape.batch, shape.seq + 1), generator=gen)
        return {"input_ids": ids[:, :-1].to(self.device), "targets": ids[:, 1:].to(self.device)}

    def estimate(self, shape: Shape, phase: Phase) -> MemoryEstimate:
        kind = self.device.type if self.device is not None else "cpu"
        return _estimator.estimate(self.config, shape, phase, kind, cold=False)

    def admit(self, shape: Shape, phase: Phase, free_bytes: int) -> AdmissionDecision:
        est = self.estimate(shape, phase)
        c = self.config
        reserve = max(c.reserve_min_bytes, free_bytes * c.reserve_permille // 1000)
        if self.device is not None and self.device.type == "cuda":
            reserve += _estimator.CUDA_OUTSIDE_POOL_RESERVE_BYTES
        usable = free_bytes - reserve
        ok = est.predicted_bytes <= usable
        return AdmissionDecision(
            admitted=ok,
            predicted_bytes=est.predicted_bytes,
            usable_bytes=usable,
            reserve_bytes=reserve,
            suggestion=None if ok else f"no batch of {shape.seq} tokens fits in {usable} bytes",
        )

    def _hidden(self, batch: Batch) -> Tensor:
        out = self.model(input_ids=batch["input_ids"], output_hidden_states=True)
        h: Tensor = out.hidden_states[-1]
        return h

    def _head(self) -> Any:
        return self.model.get_output_embeddings()

    def forward(self, batch: Batch, *, grad: bool) -> ForwardOutputs:
        with torch.set_grad_enabled(grad):
            h = self._hidden(batch)
            logits = self._head()(h)
            loss = F.cross_entropy(logits.flatten(0, 1).float(), batch["targets"].flatten())
        return ForwardOutputs(
            pooled_hidden=h.mean(dim=1).detach(),
            nll=loss.detach(),
            loss=loss if grad else loss.detach(),
        )

    def nll_chunked(self, batch: Batch, chunk_tokens: int) -> Tensor:
        with torch.no_grad():
            h = self._hidden(batch).flatten(0, 1)
            targets = batch["targets"].flatten()
            total = torch.zeros((), dtype=torch.float32, device=h.device)
            for i in range(0, h.shape[0], chunk_tokens):
                logits = self._head()(h[i : i + chunk_tokens]).float()
                total += F.cross_entropy(logits, targets[i : i + chunk_tokens], reduction="sum")
            return total / targets.numel()

    def backward(self, out: ForwardOutputs) -> None:
        assert out.loss is not None
        out.loss.backward()

    def optimizer_step(self) -> None:
        assert self.optimizer is not None
        self.optimizer.step()

    def gradients(self) -> dict[str, Tensor]:
        return {
            n.removeprefix("base_model.model."): p.grad.detach().clone()
            for n, p in self.model.named_parameters()
            if p.requires_grad and p.grad is not None
        }

    def zero_grad(self) -> None:
        assert self.optimizer is not None
        self.optimizer.zero_grad(set_to_none=True)


def make_workload(**params: Any) -> FrozenQwen3Workload:
    return FrozenQwen3Workload(FrozenConfig(**params))
