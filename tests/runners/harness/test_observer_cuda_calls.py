"""The observer's CUDA memory-history calls, checked on CPU with torch's entry points
replaced: exact arguments, Python-only stacks, and failures named as observer errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest
import torch

from runners.harness import MemoryProbe, ObserverError, ObserverSession


class _FakeCudaProbe:
    device = torch.device("cuda", 0)


def _session(tmp_path: Path, max_entries: int = 1000) -> ObserverSession:
    return ObserverSession(
        enabled=True,
        probe=cast(MemoryProbe, _FakeCudaProbe()),
        artifact_dir=tmp_path,
        name="t",
        max_entries=max_entries,
    )


def _patch(
    monkeypatch: pytest.MonkeyPatch,
    *,
    start_error: Exception | None = None,
    snapshot_error: Exception | None = None,
) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []

    def record(*args: Any, **kwargs: Any) -> None:
        assert not args, "arguments are passed by keyword"
        calls.append(kwargs)
        if start_error is not None and kwargs.get("enabled") is not None:
            raise start_error

    def snapshot(*args: Any, **kwargs: Any) -> dict[str, Any]:
        assert not args and not kwargs
        if snapshot_error is not None:
            raise snapshot_error
        return {"segments": [], "device_traces": [[]]}

    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history", record)
    monkeypatch.setattr(torch.cuda.memory, "_snapshot", snapshot)
    return calls


def test_history_records_python_stacks_with_exact_arguments(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls = _patch(monkeypatch)
    with _session(tmp_path) as obs:
        pass
    start, stop = calls
    assert start == {"enabled": "all", "context": "all", "stacks": "python", "max_entries": 1000}
    assert type(start["max_entries"]) is int
    assert stop == {"enabled": None}
    assert [a.name for a in obs.artifacts] == ["t-snapshot.pickle"]
    assert obs.summary["observer_history_max_entries"] == 1000


def test_recorder_that_fails_to_start_is_an_observer_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls = _patch(monkeypatch, start_error=RuntimeError("stoi"))
    started = "history recorder did not start: RuntimeError: stoi"
    with pytest.raises(ObserverError, match=started), _session(tmp_path):
        pytest.fail("the body must not run without the recorder")
    assert calls[-1] == {"enabled": None}  # stopped again, nothing left recording


def test_snapshot_failure_is_an_observer_error_and_recording_stops(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls = _patch(monkeypatch, snapshot_error=RuntimeError("stoi"))
    with (
        pytest.raises(ObserverError, match="snapshot failed: RuntimeError: stoi"),
        _session(tmp_path),
    ):
        pass
    assert calls[-1] == {"enabled": None}


@pytest.mark.parametrize("bad", [0, -1, True, 10.0, "100"])
def test_max_entries_must_be_a_positive_int(tmp_path: Path, bad: Any) -> None:
    with pytest.raises(ValueError, match="max_entries"):
        _session(tmp_path, max_entries=bad)
