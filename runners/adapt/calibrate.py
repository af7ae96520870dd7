"""Calibrating the built-in estimator on the device (`runners.workloads.envelope`).

The ready adapter's own steps are measured at small shapes under the harness's
probe (the reset-to-peak increment a check measures): every phase at a grid of
``batch x seq`` shapes up to half the calibration's token budget, its first step
measured cold. Each phase's step cost (the increment less the gradients the model
is known to allocate) is fit to an upper envelope, then checked against one larger
shape (the whole budget), the stated error widening to cover it if it must.

Calibrating leaves the workload as it found it: the random state is forked, buffers
a training-mode forward updates (BatchNorm's running statistics) are put back, and
gradients are dropped.

A calibration is kept keyed by the workload's digest (its parameters, code and
library versions), the device and the method's version: in this process, and as a
file under ``$LEDGER_CALIBRATION_DIR`` (default ``$XDG_CACHE_HOME/ledger/calibration``),
so a later run of the same workload definition on the same device does not measure
again. A calibration of another device, package or definition has another key and is
never reused.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

import torch

from runners.adapt.model_bytes import model_bytes
from runners.harness.probe import CpuProbe, make_probe
from runners.harness.steps import measure_step
from runners.protocol import Batch, ForwardOutputs, Shape
from runners.workloads.envelope import (
    PHASE_NAMES,
    VERSION,
    Calibration,
    PhaseFit,
    Point,
    fit,
    widened,
    with_cold,
)

CACHE_VAR = "LEDGER_CALIBRATION_DIR"
DEFAULT_MAX_TOKENS = 256
"""Tokens of the largest calibration step where the plan says none."""

_MEMO: dict[str, Calibration] = {}


class Calibrated(Protocol):
    """What calibration needs of a workload: a ready adapter set up on its device."""

    model: Any
    optimizer: torch.optim.Optimizer | None
    device: torch.device | None

    def digest(self) -> str: ...
    def make_batch(self, shape: Shape, seed: int) -> Batch: ...
    def forward(self, batch: Batch, *, grad: bool) -> ForwardOutputs: ...
    def backward(self, out: ForwardOutputs) -> None: ...
    def zero_grad(self) -> None: ...


def device_key(device: torch.device) -> str:
    """The device a calibration holds for: its kind, and on CUDA its model, memory and
    compute capability."""
    if device.type != "cuda":
        return device.type
    props = torch.cuda.get_device_properties(device)
    return f"cuda {props.name} {props.total_memory} sm{props.major}{props.minor}"


def cache_dir(env: Mapping[str, str] = os.environ) -> Path:
    """Where calibrations are kept between runs (module docstring)."""
    if env.get(CACHE_VAR):
        return Path(env[CACHE_VAR])
    base = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".cache")
    return Path(base) / "ledger" / "calibration"


def shapes(max_tokens: int) -> tuple[list[Shape], Shape]:
    """The fit's grid (batches 1 and 2, three sequence lengths, up to half of
    ``max_tokens``) and the validation shape (one sequence of ``max_tokens``)."""
    s = max(1, max_tokens // 16)
    grid = [Shape(batch=b, seq=q) for b in (1, 2) for q in (s, 2 * s, 4 * s)]
    return grid, Shape(batch=1, seq=16 * s)


def _key(digest: str, device: str, terms: tuple[str, ...], max_tokens: int) -> str:
    text = f"{VERSION}\n{digest}\n{device}\n{','.join(terms)}\n{max_tokens}"
    return hashlib.sha256(text.encode()).hexdigest()


@contextlib.contextmanager
def _untouched(model: torch.nn.Module, device: torch.device) -> Iterator[None]:
    """Leave the random state and the model's buffers as they were (module docstring)."""
    saved = {n: b.detach().clone() for n, b in model.named_buffers()}
    training = model.training
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        try:
            yield
        finally:
            with torch.no_grad():
                for n, b in model.named_buffers():
                    if n in saved:
                        b.copy_(saved[n])
            model.train(training)


def _step(w: Calibrated, shape: Shape, grad: bool) -> Callable[[], ForwardOutputs]:
    batch = w.make_batch(shape, 0)

    def step() -> ForwardOutputs:
        out = w.forward(batch, grad=grad)
        if grad:
            w.backward(out)
        return out

    return step


def measure(w: Calibrated, terms: tuple[str, ...], max_tokens: int) -> Calibration:
    """Calibrate ``w`` on its device now (module docstring)."""
    if w.model is None or w.device is None:
        raise RuntimeError("the built-in estimator calibrates a workload set up on its device")
    device = w.device
    mb = model_bytes(w.model, w.optimizer)
    grid, check = shapes(max_tokens)
    probe = make_probe(device)
    fits: dict[str, PhaseFit] = {}
    try:
        with _untouched(w.model, device), probe.session():
            for phase in PHASE_NAMES:
                grad = phase == "forward_backward"
                known = mb.gradient_bytes if grad else 0

                def one(shape: Shape, grad: bool = grad, known: int = known) -> Point:
                    w.zero_grad()
                    rec = measure_step(probe, f"calibrate {shape}", _step(w, shape, grad))
                    w.zero_grad()
                    if not rec.ok:
                        raise RuntimeError(
                            f"calibration step {shape} failed: {rec.outcome.sentence()}"
                        )
                    return Point(shape.batch, shape.seq, max(0, rec.increment_bytes - known))

                cold = one(grid[0])
                f = fit(terms, [one(s) for s in grid])
                f = widened(with_cold(f, cold), one(check), known_bytes=known)
                fits[phase] = f
    finally:
        if isinstance(probe, CpuProbe):
            probe.close()
    return Calibration(
        workload_digest=w.digest(),
        device=device_key(device),
        terms=terms,
        model=mb,
        phases=fits,
        measured_up_to_tokens=check.tokens,
    )


def calibration(
    w: Calibrated,
    terms: tuple[str, ...],
    max_tokens: int,
    env: Mapping[str, str] = os.environ,
) -> tuple[Calibration, str]:
    """``w``'s calibration and where it came from (``memo``, ``cache`` or ``measured``):
    kept ones first, else measured now and kept (module docstring)."""
    if w.device is None:
        raise RuntimeError("the built-in estimator calibrates a workload set up on its device")
    digest, device = w.digest(), device_key(w.device)
    key = _key(digest, device, terms, max_tokens)
    if key in _MEMO:
        return _MEMO[key], "memo"
    path = cache_dir(env) / f"{key}.json"
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        got = Calibration.from_json(json.loads(path.read_text()))
        # The file's own words must agree with its name: a copied or stale file is refit.
        if (got.workload_digest, got.device, got.terms, got.version) == (
            digest,
            device,
            terms,
            VERSION,
        ):
            _MEMO[key] = got
            return got, "cache"
    got = measure(w, terms, max_tokens)
    _MEMO[key] = got
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(got.json(), sort_keys=True, indent=1))
        tmp.replace(path)
    return got, "measured"
