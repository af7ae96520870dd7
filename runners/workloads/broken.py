"""Deliberately broken variants of the reference workload, for testing checks.

Each factory takes the same parameters as `runners.workloads.moe.make_workload` and
breaks exactly one property a check is meant to catch.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from typing import Any

import torch

from runners.protocol import Batch, ForwardOutputs, MemoryEstimate, Phase, Shape

from .moe import MoEConfig, MoEWorkload

UNDER_PREDICTION_DIVISOR = 4
"""`under_predicting` reports this fraction (1/n) of the true estimate."""


class UnderPredicting(MoEWorkload):
    """Estimates a quarter of the real peak, so admission admits what may not fit."""

    name = "moe-lora-under-predicting"

    def estimate(self, shape: Shape, phase: Phase, *, cold: bool = False) -> MemoryEstimate:
        true = super().estimate(shape, phase, cold=cold)
        terms = {k: v // UNDER_PREDICTION_DIVISOR for k, v in true.terms.items()}
        return MemoryEstimate(predicted_bytes=sum(terms.values()), terms=terms)


OVER_PREDICTION_MARGIN = 1000
"""`over_predicting` adds this multiple of the true estimate as a margin term."""


class OverPredicting(MoEWorkload):
    """Adds a margin of 1000x the real estimate: every admitted step fits (admission's
    safety holds) while the prediction is three orders of magnitude too loose."""

    name = "moe-lora-over-predicting"

    def estimate(self, shape: Shape, phase: Phase, *, cold: bool = False) -> MemoryEstimate:
        true = super().estimate(shape, phase, cold=cold)
        margin = true.terms.get("margin", 0) + true.predicted_bytes * OVER_PREDICTION_MARGIN
        terms = {**true.terms, "margin": margin}
        return MemoryEstimate(predicted_bytes=sum(terms.values()), terms=terms)


class Nondeterministic(MoEWorkload):
    """Adds noise from an OS-entropy-seeded generator to the pooled hidden states, so
    repeated forwards differ even under a fixed global seed."""

    name = "moe-lora-nondeterministic"

    def forward(self, batch: Batch, *, grad: bool) -> ForwardOutputs:
        out = super().forward(batch, grad=grad)
        gen = torch.Generator().manual_seed(int.from_bytes(os.urandom(8), "little"))
        assert out.pooled_hidden is not None
        noise = torch.randn(out.pooled_hidden.shape, generator=gen) * 1e-3
        pooled = out.pooled_hidden + noise.to(out.pooled_hidden)
        return ForwardOutputs(pooled_hidden=pooled, nll=out.nll, loss=out.loss)


class LeaksProcess(MoEWorkload):
    """`setup` starts ``sleep 600`` and nothing ever stops it; its pid is `leaked_pid`."""

    name = "moe-lora-leaks-process"

    def __init__(self, config: MoEConfig) -> None:
        super().__init__(config)
        self.leaked_pid: int | None = None
        self._child: subprocess.Popen[bytes] | None = None

    def setup(self, device: torch.device, seed: int, *, dtype: torch.dtype | None = None) -> None:
        super().setup(device, seed, dtype=dtype)
        self._child = subprocess.Popen(["sleep", "600"])
        self.leaked_pid = self._child.pid


class LeaksTempdir(MoEWorkload):
    """`setup` creates a temporary directory that nothing removes; its path is
    `leaked_path`."""

    name = "moe-lora-leaks-tempdir"

    def __init__(self, config: MoEConfig) -> None:
        super().__init__(config)
        self.leaked_path: str | None = None

    def setup(self, device: torch.device, seed: int, *, dtype: torch.dtype | None = None) -> None:
        super().setup(device, seed, dtype=dtype)
        self.leaked_path = tempfile.mkdtemp(prefix="moe-lora-leak-")


class RaisesInForward(MoEWorkload):
    """`forward` raises `RuntimeError` before computing anything."""

    name = "moe-lora-raises-in-forward"

    def forward(self, batch: Batch, *, grad: bool) -> ForwardOutputs:
        raise RuntimeError(f"{self.name}: deliberate failure in forward")


def under_predicting(**params: Any) -> UnderPredicting:
    """Factory for `UnderPredicting`."""
    return UnderPredicting(MoEConfig(**params))


def over_predicting(**params: Any) -> OverPredicting:
    """Factory for `OverPredicting`."""
    return OverPredicting(MoEConfig(**params))


def nondeterministic(**params: Any) -> Nondeterministic:
    """Factory for `Nondeterministic`."""
    return Nondeterministic(MoEConfig(**params))


def leaks_process(**params: Any) -> LeaksProcess:
    """Factory for `LeaksProcess`."""
    return LeaksProcess(MoEConfig(**params))


def leaks_tempdir(**params: Any) -> LeaksTempdir:
    """Factory for `LeaksTempdir`."""
    return LeaksTempdir(MoEConfig(**params))


def raises_in_forward(**params: Any) -> RaisesInForward:
    """Factory for `RaisesInForward`."""
    return RaisesInForward(MoEConfig(**params))


class NoisyGradients(MoEWorkload):
    """Gradients carry OS-entropy noise of relative size ``noise`` (workload parameter
    ``gradient_noise``, default 1e-3): two runs of the same code differ, as a
    nondeterministic kernel makes them."""

    name = "moe-lora-noisy-gradients"

    def __init__(self, config: MoEConfig, noise: float) -> None:
        super().__init__(config)
        self.noise = noise

    def gradients(self) -> dict[str, torch.Tensor]:
        gen = torch.Generator().manual_seed(int.from_bytes(os.urandom(8), "little"))
        out = {}
        for k, g in super().gradients().items():
            scale = float(g.float().norm()) / max(1, g.numel()) ** 0.5
            noise = torch.randn(g.shape, generator=gen) * (self.noise * scale)
            out[k] = g + noise.to(g)
        return out


def noisy_gradients(gradient_noise: float = 1e-3, **params: Any) -> NoisyGradients:
    return NoisyGradients(MoEConfig(**params), gradient_noise)
