"""The harness a check runs a workload under.

One module per concept: `probe` (memory figures), `tracker` (CPU storage
counting), `steps` (measured steps, cold/warm), `oom` (failures as outcomes),
`observer` (instrumentation on/off), `fingerprint` (scope facets),
`determinism` (settings applied and recorded), `processes` (observing and
stopping processes), `registry` (owned resources and their proven release),
`proofs` (memory back to baseline, proofs merged), `child` (how runners start a
Python child), `nvml` (optional NVML access), `collect` (garbage collection that
leaves out what was imported before the claim).
"""

from runners.harness.determinism import apply_determinism
from runners.harness.fingerprint import Fingerprint, fingerprint
from runners.harness.observer import ObserverError, ObserverSession
from runners.harness.oom import Captured, StepOutcome, capture
from runners.harness.probe import (
    CpuProbe,
    CudaProbe,
    MemoryProbe,
    MemorySample,
    PeakIncrement,
    make_probe,
)
from runners.harness.registry import ResourceRegistry
from runners.harness.steps import ColdWarm, StepRecord, cold_warm, measure_step

__all__ = [
    "Captured",
    "ColdWarm",
    "CpuProbe",
    "CudaProbe",
    "Fingerprint",
    "MemoryProbe",
    "MemorySample",
    "ObserverError",
    "ObserverSession",
    "PeakIncrement",
    "ResourceRegistry",
    "StepOutcome",
    "StepRecord",
    "apply_determinism",
    "capture",
    "cold_warm",
    "fingerprint",
    "make_probe",
    "measure_step",
]
