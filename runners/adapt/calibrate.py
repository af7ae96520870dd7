"""Calibrating the built-in estimator on the device (`runners.workloads.envelope`).

The ready adapter's own steps are measured at small shapes under the harness's
probe (the reset-to-peak increment a check measures): every phase at a grid of
``batch x seq`` shapes up to the calibration's token budget, its first step
measured cold. Each phase's step cost (the increment less the gradients the model
is known to allocate) is fit to an upper envelope, then checked against two shapes
of the whole budget it was not fit on (one long sequence, many short ones), the
stated error widening to cover them if it must.

A mixture of experts is calibrated under the worst routing its routers allow: through
the harness's router hooks (`runners.adapt.routers`, the replay the checks use),
every token is sent to the same top-k experts, so an expert's working set is priced
at every token, not at the share random inputs give it. Where the routers cannot be
replayed that way the calibration says so (``routing.forced``: false). The same
validation shape is measured once more under the routers' own choice, and the
record states the share of the bound that the routing costs (``routing.share_permille``).

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

from runners.adapt.held import modules_held
from runners.adapt.model_bytes import model_bytes
from runners.adapt.routers import RouterHooks, _experts_of, find_routers
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


def shapes(max_tokens: int) -> tuple[list[Shape], list[Shape]]:
    """The fit's grid (batches 1, 2 and 4 at three sequence lengths, up to
    ``max_tokens``) and the validation shapes, each of ``max_tokens`` too but of
    another aspect: one long sequence, and many short ones."""
    s = max(1, max_tokens // 16)
    grid = [Shape(batch=b, seq=q) for b in (1, 2, 4) for q in (s, 2 * s, 4 * s)]
    return grid, [Shape(batch=1, seq=16 * s), Shape(batch=8, seq=2 * s)]


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


class _WorstRouting:
    """Every token routed to experts ``0..k-1`` of every router that can be replayed
    (module docstring); `off` leaves the routers their own choice."""

    def __init__(self, w: Calibrated) -> None:
        routers = find_routers(modules_held(w))
        self.top_k = {n: k for n, m in routers.items() if (k := _experts_of(m)[1])}
        self.hooks = RouterHooks({n: routers[n] for n in self.top_k}) if self.top_k else None
        self.count = len(routers)

    def on(self, shape: Shape) -> None:
        if self.hooks is not None:
            self.hooks.replay(
                {
                    n: torch.arange(k).expand(shape.batch * shape.seq, k)
                    for n, k in self.top_k.items()
                }
            )

    def off(self) -> None:
        if self.hooks is not None:
            self.hooks.replay(None)

    def forced(self) -> bool:
        """Whether every router took the worst routing (none refused the replay)."""
        h = self.hooks
        return h is not None and len(self.top_k) == len(h.replayable) == self.count and not h.broken

    def detach(self) -> None:
        if self.hooks is not None:
            self.hooks.detach()


def measure(w: Calibrated, terms: tuple[str, ...], max_tokens: int) -> Calibration:
    """Calibrate ``w`` on its device now (module docstring)."""
    if w.model is None or w.device is None:
        raise RuntimeError("the built-in estimator calibrates a workload set up on its device")
    device = w.device
    mb = model_bytes(w.model, w.optimizer)
    grid, checks = shapes(max_tokens)
    probe = make_probe(device)
    fits: dict[str, PhaseFit] = {}
    routing = _WorstRouting(w)
    share: dict[str, int] = {}
    try:
        with _untouched(w.model, device), probe.session():
            for phase in PHASE_NAMES:
                grad = phase == "forward_backward"
                known = mb.gradient_bytes if grad else 0

                def one(shape: Shape, grad: bool = grad, worst: bool = True) -> Point:
                    w.zero_grad()
                    if worst:
                        routing.on(shape)
                    try:
                        rec = measure_step(probe, f"calibrate {shape}", _step(w, shape, grad))
                    finally:
                        routing.off()
                    w.zero_grad()
                    if not rec.ok:
                        raise RuntimeError(
                            f"calibration step {shape} failed: {rec.outcome.sentence()}"
                        )
                    return Point(shape.batch, shape.seq, rec.increment_bytes)

                cold = one(grid[0])
                f = with_cold(fit(terms, [one(s) for s in grid], known), cold)
                for check in checks:
                    worst = one(check)
                    f = widened(f, worst)
                fits[phase] = f
                if routing.count:
                    own = one(checks[-1], worst=False)
                    bound = worst.measured_bytes
                    cost = worst.measured_bytes - own.measured_bytes
                    share[phase] = max(0, cost) * 1000 // bound if bound else 0
    finally:
        routing.detach()
        if isinstance(probe, CpuProbe):
            probe.close()
    return Calibration(
        workload_digest=w.digest(),
        device=device_key(device),
        terms=terms,
        model=mb,
        phases=fits,
        measured_up_to_tokens=max(c.tokens for c in checks),
        routing={
            "routers": routing.count,
            "forced": routing.forced(),
            "share_permille": dict(share),
        }
        if routing.count
        else {},
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
