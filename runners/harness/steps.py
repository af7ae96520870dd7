"""Measured steps: one call under a reset-to-peak window with failure capture,
and the cold (first) / warm (repeat) pair."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runners.contract.result import Json
from runners.harness.oom import StepOutcome, capture
from runners.harness.probe import MemoryProbe, PeakIncrement


@dataclass(kw_only=True, slots=True, frozen=True)
class StepRecord:
    """One measured step: how it ended and its reset-to-peak window."""

    outcome: StepOutcome
    peak: PeakIncrement

    @property
    def ok(self) -> bool:
        return self.outcome.ok

    @property
    def increment_bytes(self) -> int:
        return self.peak.increment_bytes

    def measurements(self, prefix: str) -> dict[str, Json]:
        out = self.peak.measurements(prefix)
        out[f"{prefix}status"] = self.outcome.status
        if not self.ok:
            out[f"{prefix}error"] = self.outcome.measurements()
        return out


def measure_step(
    probe: MemoryProbe,
    what: str,
    fn: Callable[[], Any],
    *,
    keep: Callable[[Any], None] | None = None,
) -> StepRecord:
    """Run ``fn`` in a peak window; its return value stays alive until the window
    closes (outputs count in the increment) and is then handed to ``keep``, if
    given, or dropped."""
    holder: list[Any] = []

    def body() -> None:
        holder.append(fn())

    with probe.window() as w:
        cap = capture(what, body, device=probe.device)
    # Closing the window before dropping the value keeps the outputs in the peak.
    if holder and keep is not None:
        keep(holder[0])
    holder.clear()
    return StepRecord(outcome=cap.outcome, peak=w.increment)


@dataclass(kw_only=True, slots=True, frozen=True)
class ColdWarm:
    """The first execution of a step in this process and its repeats."""

    cold: StepRecord
    warm: tuple[StepRecord, ...]

    @property
    def ok(self) -> bool:
        return self.cold.ok and all(w.ok for w in self.warm)

    @property
    def records(self) -> tuple[StepRecord, ...]:
        return (self.cold, *self.warm)

    def first_failure(self) -> StepRecord | None:
        return next((r for r in self.records if not r.ok), None)

    @property
    def max_increment_bytes(self) -> int:
        return max(r.increment_bytes for r in self.records)

    def measurements(self, prefix: str) -> dict[str, Json]:
        out = self.cold.measurements(f"{prefix}cold_")
        for i, w in enumerate(self.warm):
            out.update(w.measurements(f"{prefix}warm{i + 1}_"))
        return out


def cold_warm(
    probe: MemoryProbe,
    what: str,
    fn: Callable[[], Any],
    *,
    warm_runs: int = 1,
    before_each: Callable[[], None] | None = None,
) -> ColdWarm:
    """Run ``fn`` once cold, then ``warm_runs`` times warm, each measured; stops
    after the first failure (a failed step leaves no state worth repeating on)."""
    if before_each is not None:
        before_each()
    cold = measure_step(probe, f"{what} (cold)", fn)
    warm: list[StepRecord] = []
    if cold.ok:
        for i in range(warm_runs):
            if before_each is not None:
                before_each()
            r = measure_step(probe, f"{what} (warm {i + 1})", fn)
            warm.append(r)
            if not r.ok:
                break
    return ColdWarm(cold=cold, warm=tuple(warm))
