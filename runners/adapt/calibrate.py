"""Calibrating the built-in estimator on the device (`runners.workloads.envelope`).

The ready adapter's own steps are measured at small shapes under the harness's
probe (the reset-to-peak increment a check measures): every phase at a grid of
``batch x seq`` shapes up to the calibration's token budget, its first step
measured cold. Each phase's step cost is fit to an upper envelope above the
gradients the model is known to allocate (a backward's grid steps accumulate into
the gradients the cold step left, so each measures its own cost alone), its stated
error (an absolute and a relative part) the least that covers them at the largest
shape a plan runs, then checked against shapes it was not fit on (one long sequence
and eight short ones of that size, ``validate_tokens``, where the device affords them).
Where the fit does not cover one, it is made again on every step measured (the
record says ``refit``), so the stated error covers the validation steps too.

A mixture of experts is calibrated under the worst routing its routers allow: through
the harness's router hooks (`runners.adapt.routers`, the replay the checks use),
every token is sent to the same top-k experts, so an expert's working set is priced
at every token, not at the share random inputs give it. Where the routers cannot be
replayed that way the calibration says so (``routing.forced``: false). The largest
step of the grid is measured under both, and the record states the share of its bound
that the routing costs (``routing.share_permille``).

Calibrating leaves the workload as it found it: the random state is forked, buffers
a training-mode forward updates (BatchNorm's running statistics) are put back, and
gradients are dropped.

A calibration is kept keyed by the workload's digest (its parameters, code and
library versions), the device and the method's version: in this process, and as a
file under ``$LEDGER_CALIBRATION_DIR`` (default ``$XDG_CACHE_HOME/ledger/calibration``),
so a later run of the same workload definition on the same device does not measure
again. A calibration of another device, package or definition has another key and is
never reused. A sandboxed run is handed a folder of its own by that variable, filled
with what earlier runs of the same tree kept (`ledger.execution.calibrations`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import torch

from runners.adapt.held import modules_held
from runners.adapt.model_bytes import model_bytes
from runners.adapt.routers import RouterHooks, _experts_of, find_routers
from runners.harness.probe import CpuProbe, make_probe
from runners.harness.steps import measure_step
from runners.protocol import Batch, ForwardOutputs, Shape
from runners.workloads.calibration_record import PHASE_NAMES, Calibration
from runners.workloads.envelope import (
    VERSION,
    PhaseFit,
    Point,
    fit,
    least_at_smallest,
    refit,
    unaffordable,
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


@dataclass(frozen=True, slots=True)
class Budget:
    """How large the calibration's steps are."""

    max_tokens: int = DEFAULT_MAX_TOKENS
    """Tokens of the largest step the fit is measured on (1/8 of the plan's largest)."""
    validate_tokens: int | None = None
    """Tokens of the validation steps: the largest a plan runs. None: 8 x max_tokens."""
    max_seq: int | None = None
    """The longest sequence the model takes (a causal LM's positions); None: any."""

    def key(self) -> str:
        return f"{self.max_tokens},{self.validate_tokens},{self.max_seq}"


def _seq(n: int, budget: Budget) -> int:
    return max(1, n if budget.max_seq is None else min(n, budget.max_seq))


GRID = ((1, 1), (1, 4), (1, 16), (2, 8), (4, 1), (4, 4), (8, 2))
"""The fit's grid as (batch, sequence in 1/16 of ``max_tokens``): each term of the
basis varies apart from the others (sequences, tokens, batch x seq² from 1 to 256 units)
in seven steps a phase. A step's cost on a small model is mostly its fixed per-step
overhead, so the grid's size is the calibration's time: the fourteen steps of every
doubling it was measured on before stated no smaller error (benchmarks/estimator_accuracy.py)."""


def shapes(budget: Budget) -> tuple[list[Shape], list[Shape]]:
    """The fit's grid (`GRID`, up to ``max_tokens`` a step: the longest sequence a
    single one) and the validation shapes: one long sequence and eight short ones of
    ``validate_tokens`` (the largest a plan runs)."""
    s = max(1, budget.max_tokens // 16)
    grid = [Shape(batch=b, seq=_seq(q * s, budget)) for b, q in GRID]
    checks: list[Shape] = []
    for n in (budget.validate_tokens or 8 * budget.max_tokens,):
        long = _seq(n, budget)
        many = Shape(batch=8, seq=_seq(n // 8, budget))
        for shape in (Shape(batch=max(1, n // long), seq=long), many):
            if shape not in checks and shape not in grid:
                checks.append(shape)
    return list(dict.fromkeys(grid)), checks


def _key(digest: str, device: str, terms: tuple[str, ...], budget: Budget) -> str:
    text = f"{VERSION}\n{digest}\n{device}\n{','.join(terms)}\n{budget.key()}"
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


def fitted(
    terms: tuple[str, ...],
    grid: list[Point],
    known: int,
    validated: list[tuple[int, int, Point | None]],
    cold: Point | None,
) -> PhaseFit:
    """One phase's fit from its measured steps: the grid's envelope, its cold allowance
    (``cold``: the phase's first step; None keeps none), each validation step
    ``(batch, seq, measured or None where the device could not afford it)`` widening
    the stated error, and a refit on every step where one was not covered."""
    # The stated error is made least at the largest shape a plan runs (the validation
    # shapes), not at the small ones it is measured on.
    ref = [(b, s) for b, s, _ in validated]
    f = fit(terms, grid, known, ref)
    if cold is not None:
        f = with_cold(f, cold)
    seen: list[Point] = []
    for b, s, got in validated:
        if got is None:
            f = unaffordable(f, b, s)
            continue
        seen.append(got)
        f = widened(f, got, ref)
    if not all(v.get("covered", True) for v in f.validation):
        # Extrapolating from the small shapes fell short: fit on every step measured,
        # so the slopes follow the large ones (recorded as refit).
        f = refit(f, terms, seen, ref)
        if cold is not None:
            f = with_cold(f, cold)
    return f


def measure(w: Calibrated, terms: tuple[str, ...], budget: Budget) -> Calibration:
    """Calibrate ``w`` on its device now (module docstring)."""
    if w.model is None or w.device is None:
        raise RuntimeError("the built-in estimator calibrates a workload set up on its device")
    device = w.device
    mb = model_bytes(w.model, w.optimizer)
    grid, checks = shapes(budget)
    probe = make_probe(device)
    phase_fits: dict[str, PhaseFit] = {}
    routing = _WorstRouting(w)
    share: dict[str, int] = {}
    try:
        with _untouched(w.model, device), probe.session():
            for phase in PHASE_NAMES:
                grad = phase == "forward_backward"
                known = mb.gradient_bytes if grad else 0

                def one(
                    shape: Shape,
                    grad: bool = grad,
                    worst: bool = True,
                    fresh: bool = True,
                    affordable: bool = False,
                ) -> Point | None:
                    # affordable: a validation step the device may not fit (None then).
                    # fresh: from no gradients, as a check runs it; else accumulating
                    # into the gradients the last step left (its own cost alone).
                    if fresh:
                        w.zero_grad()
                    if worst:
                        routing.on(shape)
                    try:
                        rec = measure_step(probe, f"calibrate {shape}", _step(w, shape, grad))
                    finally:
                        routing.off()
                    if rec.outcome.status == "oom" and affordable:
                        w.zero_grad()
                        return None
                    if not rec.ok:
                        w.zero_grad()
                        raise RuntimeError(
                            f"calibration step {shape} failed: {rec.outcome.sentence()}"
                        )
                    with_known = fresh or not grad
                    return Point(shape.batch, shape.seq, rec.increment_bytes, with_known)

                def fits(shape: Shape) -> Point:
                    got = one(shape, fresh=False)
                    assert got is not None
                    return got

                cold = one(grid[0])
                assert cold is not None
                # The gradients the cold step left stay: the grid accumulates into them.
                # A backward's grid is also measured fresh, each step before the one
                # accumulating into the gradients it left (`PhaseFit.fresh`).
                fresh: list[Point] = []
                steps: list[Point] = []
                for s in grid:
                    if grad:
                        got = one(s)
                        assert got is not None
                        fresh.append(got)
                    steps.append(fits(s))
                validated = [(c.batch, c.seq, one(c, affordable=True)) for c in checks]
                f = fitted(terms, steps, known, validated, cold)
                if fresh:
                    g = least_at_smallest(fitted(terms, fresh, known, validated, None))
                    f = replace(f, fresh=with_cold(g, cold))
                phase_fits[phase] = f
                if routing.count:
                    # The routing's share at the largest step of the grid (a validation
                    # step measured once more cost as much again as the whole grid).
                    top = max(grid, key=lambda g: (g.batch * g.seq, g.seq))
                    own, bound = one(top, worst=False), one(top)
                    assert own is not None and bound is not None
                    cost = bound.measured_bytes - own.measured_bytes
                    total = bound.measured_bytes
                    share[phase] = max(0, cost) * 1000 // total if total else 0
                w.zero_grad()
    finally:
        routing.detach()
        if isinstance(probe, CpuProbe):
            probe.close()
    return Calibration(
        workload_digest=w.digest(),
        device=device_key(device),
        terms=terms,
        model=mb,
        phases=phase_fits,
        measured_up_to_tokens=max(
            int(v["batch"]) * int(v["seq"])
            for f in phase_fits.values()
            for v in f.validation
            if "measured_bytes" in v
        ),
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
    budget: Budget,
    env: Mapping[str, str] = os.environ,
    *,
    fresh: bool = False,
) -> tuple[Calibration, str]:
    """``w``'s calibration and where it came from (``memo``, ``cache`` or ``measured``):
    kept ones first, else measured now and kept (module docstring). ``fresh``: measured
    now whatever is kept, and kept in its place."""
    if w.device is None:
        raise RuntimeError("the built-in estimator calibrates a workload set up on its device")
    digest, device = w.digest(), device_key(w.device)
    key = _key(digest, device, terms, budget)
    if key in _MEMO and not fresh:
        return _MEMO[key], "memo"
    path = cache_dir(env) / f"{key}.json"
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        if fresh:
            raise OSError("measured afresh")
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
    got = measure(w, terms, budget)
    _MEMO[key] = got
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(got.json(), sort_keys=True, indent=1))
        tmp.replace(path)
    return got, "measured"
