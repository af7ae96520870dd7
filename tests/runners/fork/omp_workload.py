"""The example MoE workload, with a ``prepare`` and a ``setup`` that each compute on all
of torch's CPU threads (an OpenMP parallel region), as building a large model does."""

from __future__ import annotations

from typing import Any

import torch

from runners.workloads.moe import MoEConfig, MoEWorkload


def _parallel() -> None:
    # Far above torch's grain size (32,768 elements): split across the thread pool.
    (torch.ones(4_000_000) * 3).sum()


class ParallelWorkload(MoEWorkload):
    def prepare(self) -> None:
        _parallel()

    def setup(self, device: torch.device, seed: int, *, dtype: torch.dtype | None = None) -> None:
        _parallel()
        super().setup(device, seed, dtype=dtype)


def make_workload(**params: Any) -> ParallelWorkload:
    return ParallelWorkload(MoEConfig(**params))
