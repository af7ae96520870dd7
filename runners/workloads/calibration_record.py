"""The built-in estimator's record: what the model is (`ModelBytes`) and its fit on one
device (`Calibration`), signed as a calibration receipt and read back by admission.

A record of an earlier method reads back with its id and predicts what it did: what a
later method added is written only where present.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from runners.workloads.envelope import VERSION, PhaseFit, tighter


@dataclass(frozen=True, slots=True)
class ModelBytes:
    """What the model is, in exact bytes, read from the built model."""

    parameters: dict[str, int]
    """``trainable.<dtype>`` / ``frozen.<dtype>`` -> bytes."""
    trainable_bytes: int
    frozen_bytes: int
    gradient_bytes: int
    """What a backward allocates for the gradients of the trainable parameters."""
    optimizer_state_bytes: int
    """What the optimizer keeps per trainable parameter (Adam: two moments and a step)."""

    def json(self) -> dict[str, Any]:
        return {
            "parameters": dict(self.parameters),
            "trainable_bytes": self.trainable_bytes,
            "frozen_bytes": self.frozen_bytes,
            "gradient_bytes": self.gradient_bytes,
            "optimizer_state_bytes": self.optimizer_state_bytes,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ModelBytes:
        return cls(
            parameters={str(k): int(v) for k, v in d["parameters"].items()},
            trainable_bytes=int(d["trainable_bytes"]),
            frozen_bytes=int(d["frozen_bytes"]),
            gradient_bytes=int(d["gradient_bytes"]),
            optimizer_state_bytes=int(d["optimizer_state_bytes"]),
        )


PHASE_NAMES = ("forward_nograd", "forward_backward")


@dataclass(frozen=True, slots=True)
class Calibration:
    """A workload's fit on one device: what `estimate` predicts from."""

    workload_digest: str
    device: str
    """The device it was measured on (kind, model, memory), as a key."""
    terms: tuple[str, ...]
    model: ModelBytes
    phases: dict[str, PhaseFit]
    measured_up_to_tokens: int
    """The stated error holds for shapes up to this many tokens; beyond, extrapolated."""
    routing: dict[str, Any] = field(default_factory=dict)
    """A mixture of experts: its routers, whether they were forced to the worst routing
    while measuring (``forced``), and per phase the share of the validation shape's
    bound that routing costs (``share_permille``: worst less the routers' own choice).
    Empty: no routers."""
    version: str = VERSION

    def json(self) -> dict[str, Any]:
        return {
            "method": "ledger.builtin-envelope",
            "version": self.version,
            "workload_digest": self.workload_digest,
            "device": self.device,
            "terms": list(self.terms),
            "model": self.model.json(),
            "phases": {k: v.json() for k, v in sorted(self.phases.items())},
            "measured_up_to_tokens": self.measured_up_to_tokens,
            "routing": dict(self.routing),
        }

    @property
    def id(self) -> str:
        """``sha256:<hex>`` of the record's canonical JSON: what admission rows name."""
        body = json.dumps(self.json(), sort_keys=True, separators=(",", ":")).encode()
        return "sha256:" + hashlib.sha256(body).hexdigest()

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Calibration:
        if d.get("method") != "ledger.builtin-envelope":
            raise ValueError("not a built-in estimator calibration")
        return cls(
            workload_digest=str(d["workload_digest"]),
            device=str(d["device"]),
            terms=tuple(str(t) for t in d["terms"]),
            model=ModelBytes.from_json(d["model"]),
            phases={str(k): PhaseFit.from_json(v) for k, v in d["phases"].items()},
            measured_up_to_tokens=int(d["measured_up_to_tokens"]),
            routing=dict(d.get("routing", {})),
            version=str(d["version"]),
        )

    def estimate(
        self, batch: int, seq: int, phase: str, *, cold: bool
    ) -> tuple[int, int, dict[str, int]]:
        """(predicted upper bound, point estimate, terms summing to the bound), from the
        phase's fit, or its fresh envelope where that predicts less."""
        f = tighter(self.phases[phase], batch, seq, cold=cold)
        terms = {f"step.{t}": v for t, v in f.point(batch, seq).items()}
        if f.known_bytes:
            terms["model.gradients"] = f.known_bytes
        terms["stated_error"] = f.error(f.total(batch, seq))
        if cold and f.cold_extra_bytes:
            terms["cold"] = f.cold_extra_bytes
        predicted = sum(terms.values())
        return predicted, predicted - terms["stated_error"], terms
