"""Observer on/off: the instrumentation an observer-off control switches off.

On, CUDA: the allocator's memory history (`_record_memory_history`), dumped at
the end as a `_snapshot()` pickle that PyTorch's memory_viz opens; plus
saved-tensor hooks counting what autograd saves.
On, CPU: the probe tracker's alloc/free event log and the same saved-tensor
hooks, written as a JSON artifact.
Off: none of this is active. The memory probe itself is not the observer:
CUDA's allocator counters are always kept, and CPU has no counters but the
probe's tracker, which then counts without logging events.

CUDA history records Python frames only (``stacks="python"``). With
``stacks="all"`` (torch's default) the allocator also captures C++ frames, and
`_snapshot()` symbolizes them by running ``addr2line`` over the shared libraries
and parsing each answer's ``file:line`` with ``std::stoi``; for frames without
line information ``addr2line`` answers ``??:?`` (or a line followed by a
discriminator), ``std::stoi`` throws, and the snapshot fails as
``RuntimeError: stoi`` raised from ``torch._C._cuda_memorySnapshot``. Python
frames are symbolized from the interpreter's own code objects and never reach
that parser, and they are the frames that say which workload line allocated.
A recorder that fails to start, or a snapshot that fails, raises `ObserverError`
naming the step; the harness records it as an infra-error of the observer-on run.
"""

from __future__ import annotations

import contextlib
import json
import pickle
from pathlib import Path
from types import TracebackType
from typing import Any, Final

import torch

from runners.contract.result import Artifact, Json, Observer
from runners.harness.probe import CpuProbe, MemoryProbe
from runners.harness.tracker import count_saved_bytes

SNAPSHOT_MEDIA_TYPE = "application/vnd.pytorch.memory-snapshot+pickle"

HISTORY_ENABLED: Final = "all"
"""Keep a history of every alloc/free, not only the state of live blocks."""
HISTORY_CONTEXT: Final = "all"
"""Record tracebacks for allocations and frees."""
HISTORY_STACKS: Final = "python"
"""Python frames only: C++ frames are symbolized through a parser that fails on frames
without line information (see the module docstring)."""


class ObserverError(RuntimeError):
    """The observer's own instrumentation failed (not the workload): an infra problem."""


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
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise ValueError(f"max_entries must be a positive int, got {max_entries!r}")
        self.enabled = enabled
        self.probe = probe
        self.artifact_dir = artifact_dir
        self.name = name
        self.max_entries = int(max_entries)
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
            self._start_cuda_history()
            self._stack.callback(self._stop_cuda_history)
        elif isinstance(self.probe, CpuProbe):
            self.probe.tracker.start_events(self.max_entries)
        counts, pack, unpack = count_saved_bytes()
        self._saved = counts
        self._stack.enter_context(torch.autograd.graph.saved_tensors_hooks(pack, unpack))
        return self

    def _start_cuda_history(self) -> None:
        # Exactly-typed arguments, all by keyword: ``max_entries`` a plain int (the C++
        # binding takes a size_t), the rest the strings the binding accepts. Recording is
        # process-wide, so no device is passed.
        try:
            torch.cuda.memory._record_memory_history(
                enabled=HISTORY_ENABLED,
                context=HISTORY_CONTEXT,
                stacks=HISTORY_STACKS,
                max_entries=self.max_entries,
            )
        except Exception as e:
            with contextlib.suppress(Exception):
                self._stop_cuda_history()
            raise ObserverError(
                f"CUDA memory history recorder did not start: {type(e).__name__}: {e}"
            ) from e

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
            try:
                snap: Any = torch.cuda.memory._snapshot()
            except Exception as e:
                raise ObserverError(f"CUDA memory snapshot failed: {type(e).__name__}: {e}") from e
            path = self.artifact_dir / f"{self.name}-snapshot.pickle"
            with open(path, "wb") as f:
                pickle.dump(snap, f)
            self.summary["observer_history_max_entries"] = self.max_entries
            self.summary["observer_history_stacks"] = HISTORY_STACKS
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
