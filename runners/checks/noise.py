"""Judging a difference against the noise floor measured in the same run.

A numerical comparison runs the base twice: the second base run against the
first is the noise floor (the nondeterminism the workload allows, on this
device, at this dtype); the candidate against the first base run is the
difference. Per tensor family (parameter names with their layer indices
folded, e.g. ``layers.*.attn.q.lora_A``):

- ``inconclusive`` when the noise floor itself exceeds the threshold: nothing
  below it can be told apart from noise;
- ``failed`` when the difference exceeds the threshold *and* the noise floor
  times the margin;
- ``passed`` otherwise.

Thresholds have documented defaults per dtype family (fp32, bf16/fp16), both
check parameters; a threshold given explicitly overrides them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from runners.contract.result import Json

FamilyState = Literal["passed", "failed", "inconclusive"]

_INDEX = re.compile(r"(?<=\.)\d+(?=\.|$)")


def family(name: str) -> str:
    """``name`` with its numeric components (layer, expert indices) replaced by ``*``."""
    return _INDEX.sub("*", name)


def low_precision(dtype: str) -> bool:
    """Whether ``dtype`` (as recorded, e.g. ``bfloat16``) is a 16-bit float type."""
    return dtype in ("bfloat16", "float16", "half")


def threshold_for(dtype: str, explicit: float | None, fp32: float, bf16: float) -> float:
    """The threshold in force: ``explicit`` when given, else the dtype family's default."""
    if explicit is not None:
        return explicit
    return bf16 if low_precision(dtype) else fp32


def judge(noise: float | None, diff: float | None, threshold: float, margin: float) -> FamilyState:
    """One family's state (module docstring); a missing or non-finite figure fails."""
    if diff is None:
        return "failed"
    if noise is not None and noise > threshold:
        return "inconclusive"
    floor = 0.0 if noise is None else noise * margin
    return "failed" if diff > threshold and diff > floor else "passed"


@dataclass(frozen=True, slots=True)
class FamilyRow:
    family: str
    tensors: int
    noise: float | None
    diff: float | None
    state: FamilyState

    def to_json(self) -> dict[str, Json]:
        return {
            "family": self.family,
            "tensors": self.tensors,
            "noise_floor": self.noise,
            "difference": self.diff,
            "state": self.state,
        }


def by_family(
    noise: Mapping[str, float | None],
    diff: Mapping[str, float | None],
    threshold: float,
    margin: float,
) -> list[FamilyRow]:
    """Per family (sorted): the largest noise and difference of its tensors, judged.
    A tensor whose figure is None (non-finite) makes its family's figure None."""
    fams: dict[str, list[str]] = {}
    for name in diff:
        fams.setdefault(family(name), []).append(name)
    rows = []
    for fam, names in sorted(fams.items()):
        n = _worst(noise.get(x) for x in names) if noise else 0.0
        d = _worst(diff[x] for x in names)
        rows.append(FamilyRow(fam, len(names), n, d, judge(n, d, threshold, margin)))
    return rows


def _worst(values: Iterable[float | None]) -> float | None:
    out = 0.0
    for v in values:
        if v is None:
            return None
        out = max(out, v)
    return out


def verdict_of(rows: list[FamilyRow]) -> FamilyState:
    """``failed`` if any family failed, else ``inconclusive`` if any was, else passed."""
    states = {r.state for r in rows}
    if "failed" in states:
        return "failed"
    return "inconclusive" if "inconclusive" in states else "passed"
