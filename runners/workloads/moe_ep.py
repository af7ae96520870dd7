"""The reference workload, expert-parallel: experts split across ranks, all-to-all dispatch.

Every rank builds the same model from the same seed (so the weights agree with
the single-rank workload's) and keeps only its own slice of the experts, rank
``r`` holding experts ``[r * E/N, (r+1) * E/N)``. Each rank routes its own
tokens; the routed rows travel to the rank owning their expert through one
all-to-all (after an all-to-all of the per-expert counts), the local experts
run as grouped matmuls, and a second all-to-all brings the results back.
The collectives are autograd-aware, so the backward runs the reverse
exchange. Needs a torch.distributed process group; the number of experts must
divide by the world size.

Admission prices the worst dispatch: every token of every rank routed to this
rank's experts. Each rank's prediction is its own; the harness agrees on them
(MAX required, MIN usable) before any rank runs.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_nn
import torch.nn.functional as F
from torch import Tensor, nn

from runners.protocol import Batch, MemoryEstimate, Phase, Shape

from .moe import MoEConfig, MoELayer, MoEModel, MoEWorkload


def _rank_world() -> tuple[int, int]:
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("the expert-parallel workload needs a torch.distributed process group")
    return dist.get_rank(), dist.get_world_size()


class EPMoELayer(MoELayer):
    """`MoELayer` holding only this rank's experts; routed rows cross ranks."""

    def __init__(self, cfg: MoEConfig, gen: torch.Generator) -> None:
        # The full draw first, so every rank consumes the generator identically.
        super().__init__(cfg, gen)
        rank, world = _rank_world()
        if cfg.n_experts % world:
            raise ValueError(f"n_experts {cfg.n_experts} does not divide by world size {world}")
        local = cfg.n_experts // world
        lo, hi = rank * local, (rank + 1) * local
        self.world, self.local = world, local
        self.w1 = nn.Parameter(self.w1.data[lo:hi].clone(), requires_grad=False)
        self.w2 = nn.Parameter(self.w2.data[lo:hi].clone(), requires_grad=False)
        self.lora_a1 = nn.ParameterList(list(self.lora_a1)[lo:hi])
        self.lora_b1 = nn.ParameterList(list(self.lora_b1)[lo:hi])
        self.lora_a2 = nn.ParameterList(list(self.lora_a2)[lo:hi])
        self.lora_b2 = nn.ParameterList(list(self.lora_b2)[lo:hi])

    def _experts(self, rows: Tensor, counts: list[int]) -> Tensor:
        scale = self.cfg.lora_alpha / self.cfg.lora_rank
        outs = []
        for e, xe in enumerate(torch.split_with_sizes(rows, counts)):
            pre = torch.addmm(xe @ self.w1[e], xe @ self.lora_a1[e], self.lora_b1[e], alpha=scale)
            act = F.silu(pre)
            del pre
            outs.append(
                torch.addmm(act @ self.w2[e], act @ self.lora_a2[e], self.lora_b2[e], alpha=scale)
            )
            del act
        return torch.cat(outs)

    def _moe(self, x: Tensor) -> Tensor:
        cfg, world, local = self.cfg, self.world, self.local
        tokens, k, d = x.shape[0], cfg.top_k, cfg.d_model
        h = F.layer_norm(x, (d,))
        probs = torch.softmax((h @ self.router).float(), dim=-1)
        top_p, top_i = probs.topk(k, dim=-1)
        weights = (top_p / top_p.sum(dim=-1, keepdim=True)).to(x.dtype)
        flat = top_i.view(-1)
        order = torch.argsort(flat, stable=True)
        inverse = torch.argsort(order)
        # Sorted by global expert is sorted by owning rank, then by its local expert.
        rows = h.index_select(0, order // k)
        send = torch.bincount(flat, minlength=cfg.n_experts).view(world, local)
        recv = torch.empty_like(send)
        dist.all_to_all_single(recv, send)
        out_splits: list[int] = recv.sum(dim=1).tolist()
        in_splits: list[int] = send.sum(dim=1).tolist()
        got = dist_nn.all_to_all_single(  # type: ignore[no-untyped-call]
            rows.new_empty(sum(out_splits), d), rows, out_splits, in_splits
        )
        # Received rows come grouped by source rank; regroup them by local expert.
        expert_of = torch.repeat_interleave(
            torch.arange(local, device=x.device).repeat(world), recv.view(-1)
        )
        regroup = torch.argsort(expert_of, stable=True)
        done = self._experts(got.index_select(0, regroup), recv.sum(dim=0).tolist())
        done = done.index_select(0, torch.argsort(regroup))
        back = dist_nn.all_to_all_single(  # type: ignore[no-untyped-call]
            rows.new_empty(sum(in_splits), d), done, in_splits, out_splits
        )
        per_token = back.index_select(0, inverse).view(tokens, k, d)
        return x + torch.bmm(weights.unsqueeze(1), per_token).squeeze(1)


class EPMoEWorkload(MoEWorkload):
    """`MoEWorkload` with its experts split across the ranks of the process group."""

    name = "moe-lora-ep"

    def setup(self, device: torch.device, seed: int, *, dtype: torch.dtype | None = None) -> None:
        """Every rank builds the model from ``seed`` and keeps its experts (``dtype``: a
        reference precision, as `MoEWorkload.setup`)."""
        self.teardown()
        model = MoEModel(self.config, seed, kind=EPMoELayer)
        self.model = model.to(device=device, dtype=self.dtype)
        if dtype is not None:
            self.model = self.model.to(dtype=dtype)
        self.device = device
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(trainable, lr=self.config.lr, foreach=False)

    def make_batch(self, shape: Shape, seed: int) -> Batch:
        """This rank's share of the data: its own tokens, drawn from ``seed`` and the rank."""
        rank, world = _rank_world()
        return super().make_batch(shape, seed * world + rank)

    def estimate(self, shape: Shape, phase: Phase, *, cold: bool = False) -> MemoryEstimate:
        """The single-rank estimate at every rank's tokens (the worst dispatch brings them
        all here), plus the exchange buffers: rows sent, received, regrouped and returned,
        per layer, kept for the backward."""
        _, world = _rank_world()
        worst = replace(shape, batch=shape.batch * world)
        base = super().estimate(worst, phase, cold=cold)
        rows = world * shape.tokens * self.config.top_k * self.config.d_model
        exchange = 6 * rows * self.dtype.itemsize * self.config.n_layers
        return MemoryEstimate(
            predicted_bytes=base.predicted_bytes + exchange,
            terms={**base.terms, "ep_exchange": exchange},
        )


def make_workload(**params: Any) -> EPMoEWorkload:
    """Entry point: ``make_workload(**workload_params)`` -> `EPMoEWorkload`."""
    return EPMoEWorkload(MoEConfig(**params))
