"""Run a workload callable so that its failure becomes an outcome, never a crash.

`torch.OutOfMemoryError` becomes ``oom`` with the allocator's counters at the
failure; import problems become ``infra-error``; any other `Exception` from
the workload becomes ``failed``. `KeyboardInterrupt` and `SystemExit` are not
`Exception` and propagate, so callers' ``finally`` blocks still release.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar

import torch

from runners.contract.result import Json
from runners.harness.collect import collect

T = TypeVar("T")
Status = Literal["ok", "oom", "failed", "infra-error"]

INFRA_ERRORS: tuple[type[BaseException], ...] = (ImportError,)
"""Exception types that say the environment, not the workload, failed."""

_MESSAGE_LIMIT = 2000

# Device memory exhausted outside the caching allocator: CUDA libraries and
# the driver report it as a RuntimeError, not torch.OutOfMemoryError. Seen on
# an H200 at the admission edge: "CUBLAS_STATUS_ALLOC_FAILED when calling
# `cublasCreate(handle)`". It is an out-of-memory all the same.
_OOM_MARKERS = (
    "CUBLAS_STATUS_ALLOC_FAILED",
    "CUSOLVER_STATUS_ALLOC_FAILED",
    "CUSPARSE_STATUS_ALLOC_FAILED",
    "CUFFT_ALLOC_FAILED",
    "CUDNN_STATUS_ALLOC_FAILED",
    "CUDA error: out of memory",
    "cudaErrorMemoryAllocation",
)


def _is_device_oom(e: Exception) -> bool:
    return isinstance(e, RuntimeError) and any(m in str(e) for m in _OOM_MARKERS)


@dataclass(kw_only=True, slots=True, frozen=True)
class StepOutcome:
    """How one captured call ended."""

    what: str
    """Name of the step (e.g. 'setup', 'forward_backward 4x128')."""
    status: Status
    error_type: str | None = None
    message: str | None = None
    where: str | None = None
    """Innermost frame of the traceback, 'file:line in function'."""
    memory_stats: dict[str, int] = field(default_factory=dict)
    """CUDA OOM: allocator counters right after the failure."""
    duration_ns: int = 0

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def sentence(self) -> str:
        """One line for a result's reason."""
        if self.ok:
            return f"{self.what}: ok"
        at = f" at {self.where}" if self.where else ""
        return f"{self.what}: {self.status}: {self.error_type}: {self.message}{at}"

    def measurements(self) -> dict[str, Json]:
        out: dict[str, Json] = {
            "what": self.what,
            "status": self.status,
            "error_type": self.error_type,
            "message": self.message,
            "where": self.where,
            "duration_ns": self.duration_ns,
        }
        if self.memory_stats:
            out["memory_stats"] = dict(self.memory_stats)
        return out


@dataclass(kw_only=True, slots=True)
class Captured(Generic[T]):
    value: T | None
    outcome: StepOutcome


def _cuda_stats(device: torch.device | None) -> dict[str, int]:
    if device is None or device.type != "cuda":
        return {}
    try:
        s = torch.cuda.memory_stats(device)
    except Exception:
        return {}
    keep = (
        "allocated_bytes.all.current",
        "allocated_bytes.all.peak",
        "reserved_bytes.all.current",
        "reserved_bytes.all.peak",
        "active_bytes.all.peak",
        "inactive_split_bytes.all.current",
        "num_ooms",
        "num_alloc_retries",
    )
    return {k: int(s.get(k, 0)) for k in keep}


def _where(exc: BaseException) -> str | None:
    tb = traceback.extract_tb(exc.__traceback__)
    if not tb:
        return None
    f = tb[-1]
    return f"{f.filename}:{f.lineno} in {f.name}"


def capture(
    what: str,
    fn: Callable[[], T],
    *,
    device: torch.device | None = None,
    infra_errors: tuple[type[BaseException], ...] = INFRA_ERRORS,
) -> Captured[T]:
    """Call ``fn``; return its value or the way it failed."""
    t0 = time.perf_counter_ns()
    try:
        value = fn()
    except torch.OutOfMemoryError as e:
        out = StepOutcome(
            what=what,
            status="oom",
            error_type=type(e).__name__,
            message=str(e)[:_MESSAGE_LIMIT],
            where=_where(e),
            memory_stats=_cuda_stats(device),
            duration_ns=time.perf_counter_ns() - t0,
        )
        # The traceback's frames hold the failed step's tensors: drop them now.
        e.__traceback__ = None
        del e
        collect()
        return Captured(value=None, outcome=out)
    except Exception as e:
        oom = _is_device_oom(e)
        status: Status = (
            "oom" if oom else "infra-error" if isinstance(e, infra_errors) else "failed"
        )
        out = StepOutcome(
            what=what,
            status=status,
            error_type=type(e).__name__,
            message=str(e)[:_MESSAGE_LIMIT],
            where=_where(e),
            memory_stats=_cuda_stats(device) if oom else {},
            duration_ns=time.perf_counter_ns() - t0,
        )
        e.__traceback__ = None
        del e
        collect()
        return Captured(value=None, outcome=out)
    return Captured(
        value=value,
        outcome=StepOutcome(what=what, status="ok", duration_ns=time.perf_counter_ns() - t0),
    )
