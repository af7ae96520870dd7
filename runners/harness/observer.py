"""Observer on/off: the instrumentation an observer-off control switches off.

On, CUDA: the allocator's memory history (`_record_memory_history`), dumped at
the end as a `_snapshot()` pickle that PyTorch's memory_viz opens; plus
saved-tensor hooks counting what autograd saves.
On, CPU: the probe tracker's alloc/free event log and the same saved-tensor
hooks, written as a JSON artifact.
Off: none of this is active. The memory probe itself is not the observer:
CUDA's allocator counters are always kept, and CPU has no counters but the
probe's tracker, which then counts without logging events.
"""

from __future__ import annotations

import contextlib
import json
import pickle
from pathlib import Path
from types import TracebackType
from typing import Any

import torch

from runners.harness.probe import CpuProbe, MemoryProbe
from runners.harness.tracker import count_saved_bytes
from runners.result import Artifact, Json, Observer

SNAPSHOT_MEDIA_TYPE = "application/vnd.pytorch.memory-snapshot+pickle"


class ObserverSession:
    """Context manager: instrumentation active inside iff ``enabled``."""

    def __init__(
        self,
        *,
        enabled: bool,
        probe: MemoryProbe,
        artifact_dir: Path,
        name: str = "memory",
        max_entries: int = 100_000,
    ) -> None:
        self.enabled = enabled
        self.probe = probe
        self.artifact_dir = artifact_dir
        self.name = name
        self.max_entries = max_entries
        self.artifacts: list[Artifact] = []
        self.summary: dict[str, Json] = {}
        self._stack = contextlib.ExitStack()
        self._saved: dict[str, int] = {}

    @property
    def state(self) -> Observer:
        return "on" if self.enabled else "off"

    def __enter__(self) -> ObserverSession:
        if not self.enabled:
            return self
        self.artifact_dir.mkdir(parents=True, exist_ok=True)
        if self.probe.device.type == "cuda":
            torch.cuda.memory._record_memory_history(
                max_entries=self.max_entries, device=self.probe.device
            )
            self._stack.callback(self._stop_cuda_history)
        elif isinstance(self.probe, CpuProbe):
            self.probe.tracker.start_events(self.max_entries)
        counts, pack, unpack = count_saved_bytes()
        self._saved = counts
        self._stack.enter_context(torch.autograd.graph.saved_tensors_hooks(pack, unpack))
        return self

    @staticmethod
    def _stop_cuda_history() -> None:
        torch.cuda.memory._record_memory_history(enabled=None)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self.enabled:
            return
        try:
            self._write_artifacts()
        finally:
            self._stack.close()

    def _write_artifacts(self) -> None:
        saved = dict(self._saved)
        self.summary = {f"observer_{k}": v for k, v in saved.items()}
        if self.probe.device.type == "cuda":
            snap: Any = torch.cuda.memory._snapshot(self.probe.device)
            path = self.artifact_dir / f"{self.name}-snapshot.pickle"
            with open(path, "wb") as f:
                pickle.dump(snap, f)
            self.summary["observer_history_max_entries"] = self.max_entries
            self.artifacts.append(
                Artifact(name=path.name, path=str(path), media_type=SNAPSHOT_MEDIA_TYPE)
            )
        elif isinstance(self.probe, CpuProbe):
            events = self.probe.tracker.stop_events()
            self.summary["observer_events_recorded"] = len(events)
            self.summary["observer_events_dropped"] = self.probe.tracker.events_dropped
            path = self.artifact_dir / f"{self.name}-events.json"
            doc = {
                "format": "ledger.cpu-storage-events.v1",
                "max_entries": self.max_entries,
                "dropped": self.probe.tracker.events_dropped,
                "saved_tensors": saved,
                "events": events,
            }
            path.write_text(json.dumps(doc, separators=(",", ":")))
            self.artifacts.append(
                Artifact(name=path.name, path=str(path), media_type="application/json")
            )
