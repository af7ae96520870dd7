"""Snapshot rendering costs the server at most one bounded parse per artifact: it runs
in a worker process with CPU, memory and time limits, is stopped at the deadline,
and its answer (or refusal) is cached per digest."""

from __future__ import annotations

import hashlib
import pickle
import time

import pytest

from ledger.evidence.errors import InputError
from ledger.service.web import snapshot
from ledger.service.web.snapshot import read_snapshot, timeline_of


def _snap(trace: list[object]) -> bytes:
    return pickle.dumps({"device_traces": [trace], "segments": []})


def _frame(name: str) -> dict[str, object]:
    return {"filename": "train.py", "line": 7, "name": name}


def test_a_real_snapshot_is_replayed_with_the_frames_at_its_peak() -> None:
    trace = [
        {"action": "segment_alloc", "size": 1 << 20, "time_us": 1},
        {"action": "alloc", "addr": 1, "size": 100, "time_us": 2, "frames": [_frame("a")]},
        {"action": "alloc", "addr": 2, "size": 300, "time_us": 3, "frames": [_frame("b")]},
        {"action": "free_completed", "addr": 1, "size": 100, "time_us": 4},
        {"action": "alloc", "addr": 3, "size": 50, "time_us": 5, "frames": [_frame("c")]},
    ]
    tl = read_snapshot(_snap(trace))
    assert tl.peak == (3.0, 400.0) and tl.events == 5
    assert [a["size"] for a in tl.top] == [300, 100]
    assert tl.top[0]["frames"] == ["train.py:7 b"]
    data = _snap(trace)
    assert timeline_of(hashlib.sha256(data).hexdigest(), data).peak == tl.peak


def test_shared_huge_frame_lists_cost_a_bounded_walk() -> None:
    frames = [_frame("f")] * 200_000  # one list, pickled once, shared by every event
    ev = {"action": "alloc", "addr": None, "size": 1, "frames": frames}
    tl = read_snapshot(_snap([ev] * 2_000))
    assert tl.events == 2_000 and len(tl.top[0]["frames"]) <= 6


def test_a_crafted_snapshot_is_stopped_at_the_deadline_and_parsed_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Two million references to one event: a small pickle, a long replay.
    ev = {"action": "alloc", "addr": 1, "size": 1, "frames": []}
    data = _snap([ev] * 2_000_000)
    digest = hashlib.sha256(data).hexdigest()
    spawned = []
    real = snapshot._parse_in_worker

    def counting(d: bytes, deadline_s: float) -> object:
        spawned.append(time.monotonic())
        return real(d, deadline_s)

    monkeypatch.setattr(snapshot, "_parse_in_worker", counting)
    t0 = time.monotonic()
    with pytest.raises(InputError, match="not read"):
        timeline_of(digest, data, deadline_s=0.3)
    took = time.monotonic() - t0
    with pytest.raises(InputError, match="not read"):
        timeline_of(digest, data, deadline_s=0.3)  # the refusal is cached
    assert len(spawned) == 1
    assert took < 30  # stopped at its deadline, not after the whole replay
