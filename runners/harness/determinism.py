"""Determinism settings, applied in one place and recorded."""

from __future__ import annotations

import os
import random

import torch

from runners.contract.result import Json

CUBLAS_WORKSPACE = ":4096:8"


def apply_determinism(*, seed: int, warn_only: bool) -> dict[str, Json]:
    """Seed every generator and force deterministic kernels; return what was applied."""
    applied: dict[str, Json] = {"seed": seed, "warn_only": warn_only}
    # cuBLAS picks reduction splits per call unless its workspace is pinned; it reads
    # this when a handle is created, so a handle made earlier keeps its old config.
    previous = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    if previous is None:
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = CUBLAS_WORKSPACE
    applied["CUBLAS_WORKSPACE_CONFIG"] = os.environ["CUBLAS_WORKSPACE_CONFIG"]
    applied["CUBLAS_WORKSPACE_CONFIG_preset"] = previous is not None
    # Python's own RNG: workloads may shuffle or sample with it.
    random.seed(seed)
    # Seeds the CPU generator and every CUDA device's generator.
    torch.manual_seed(seed)
    # Ops without a deterministic kernel raise (or warn, with warn_only) instead of
    # silently varying run to run.
    torch.use_deterministic_algorithms(True, warn_only=warn_only)
    # cuDNN: deterministic convolution algorithms only, and no autotuning, whose
    # choice depends on timing.
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    # TF32 matmuls round differently from fp32 ones; "highest" keeps fp32 exact so
    # chunked and unchunked computations are comparable at fp32 tolerances.
    torch.set_float32_matmul_precision("highest")
    applied["float32_matmul_precision"] = torch.get_float32_matmul_precision()
    applied["deterministic_algorithms"] = torch.are_deterministic_algorithms_enabled()
    applied["cudnn_deterministic"] = bool(torch.backends.cudnn.deterministic)
    applied["cudnn_benchmark"] = bool(torch.backends.cudnn.benchmark)
    # With deterministic algorithms on, torch fills uninitialised memory so that
    # reads of it (a bug, but one that must repeat) give the same values.
    applied["fill_uninitialized_memory"] = bool(torch.utils.deterministic.fill_uninitialized_memory)  # type: ignore[attr-defined]
    return applied
