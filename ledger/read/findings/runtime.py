"""Findings of the checks that watch a run rather than a number it computes: the
mesh handoff's memory outside the pool, the observer-off control, cleanup's
resources left behind, and `ledger run`'s command (exit, leaks, declared outputs)."""

from __future__ import annotations

import re
from typing import Any

from ledger.read.findings.model import (
    _ROWS,
    COUNTEREXAMPLE,
    Findings,
    Table,
    _b,
    _num,
)
from ledger.read.humanize import iec, value


def mesh(m: dict[str, Any], _: dict[str, Any], __: dict[str, Any]) -> Findings | None:
    world = m.get("world_size")
    if not isinstance(world, int) or "mode" not in m:
        return None
    mode, tol = m.get("mode"), m.get("flat_tolerance_bytes")
    step = "keep" if mode == "keep" else "after_destroy"
    rows, marks, worst = [], [], None
    for r in range(world):
        d = m.get(f"rank{r}_{step}_outside_pool_bytes_delta")
        past = (_num(d) and _num(tol) and d > tol) or m.get(f"rank{r}_gather_matches") is False
        rows.append(
            (
                str(r),
                _b(m.get(f"rank{r}_keep_outside_pool_bytes_delta")),
                _b(m.get(f"rank{r}_first_allgather_outside_pool_bytes_delta")),
                _b(m.get(f"rank{r}_after_destroy_outside_pool_bytes_delta")),
                _b(tol),
                value("b", m.get(f"rank{r}_gather_matches")),
            )
        )
        marks.append(COUNTEREXAMPLE if past else "")
        if _num(d) and (worst is None or d > worst[1]):
            worst = (r, d)
    what = "in-place handoff" if mode == "keep" else "all-gather handoff, after destroy"
    if worst is None:
        lead = (
            f"Mode {mode} on {world} ranks ({m.get('backend')}): no memory outside the pool "
            "was measured."
        )
        over = None
    else:
        over = any(marks)
        lead = (
            f"Mode {mode} on {world} ranks ({m.get('backend')}): memory outside the pool grew at "
            f"most {_b(worst[1])} (rank {worst[0]}) across the {what}, against tolerance "
            f"{_b(tol)}."
        )
    matches = all(m.get(f"rank{r}_gather_matches") is True for r in range(world))
    second = (
        f"The gathered weight {'matches' if matches else 'does not match'} the shards on "
        "every rank."
    )
    cols = ("rank", "keep", "first all-gather", "after destroy", "tolerance", "gather matches")
    return Findings((lead, second), Table(cols, tuple(rows), tuple(marks)), over)


def observer(m: dict[str, Any], _: dict[str, Any], __: dict[str, Any]) -> Findings | None:
    if "compared_keys" not in m:
        return None
    diffs = [d for d in m.get("differences") or [] if isinstance(d, dict)]
    lead = (
        f"The observer changed {len(diffs)} of {value('n', m['compared_keys'])} compared values "
        f"(observer on: {m.get('on_outcome')}, off: {m.get('off_outcome')})."
    )
    if diffs:
        rows = tuple(
            (
                str(d.get("key")),
                value(str(d.get("key")), d.get("on")),
                value(str(d.get("key")), d.get("off")),
            )
            for d in diffs[:_ROWS]
        )
        return Findings(
            (lead,), Table(("value", "on", "off"), rows, (COUNTEREXAMPLE,) * len(rows)), True
        )
    rows = (
        ("on", str(m.get("on_outcome")), value("duration_ns", m.get("duration_on_ns"))),
        ("off", str(m.get("off_outcome")), value("duration_ns", m.get("duration_off_ns"))),
    )
    return Findings((lead,), Table(("observer", "outcome", "duration"), rows), False)


_DELTA = re.compile(r"delta (-?\d+) > tolerance (\d+)")


def cleanup(_: dict[str, Any], __: dict[str, Any], p: dict[str, Any]) -> Findings | None:
    c = p.get("cleanup")
    if not isinstance(c, dict):
        return None
    res = [r for r in c.get("resources") or [] if isinstance(r, dict)]
    held = [r for r in res if not r.get("released")]
    lead = (
        f"{len(res) - len(held)} of {len(res)} resources released "
        f"(tolerance {_b(c.get('tolerance_bytes') or 0)})."
    )
    if not held:
        after = (
            "."
            if p.get("outcome") == "passed"
            else "; the outcome is the run's own (its reason above)."
        )
        return Findings((lead, f"Nothing was left behind{after}"), over=False)
    said = []
    for r in held[:3]:
        d = _DELTA.search(str(r.get("proof", "")))
        grew = f" grew {iec(int(d.group(1)))} against {iec(int(d.group(2)))}" if d else ""
        said.append(f"{r.get('kind')} {r.get('id')}{grew}")
    more = f" and {len(held) - 3} more" if len(held) > 3 else ""
    return Findings((lead, f"Left behind: {'; '.join(said)}{more}."), over=True)


def command(m: dict[str, Any], _: dict[str, Any], p: dict[str, Any]) -> Findings | None:
    if "exit_status" not in m:
        return None
    rc = m.get("exit_status")
    how = (
        f"was killed by {m['signal']}"
        if m.get("signal")
        else "timed out"
        if rc is None
        else f"exited with status {rc}"
    )
    leaked = [x for x in m.get("leaked_processes") or [] if isinstance(x, dict)]
    names = ", ".join(f"pid {x.get('pid')} ({x.get('comm')})" for x in leaked[:5])
    left = f"{len(leaked)} process{'es' if len(leaked) != 1 else ''} leaked" + (
        f": {names}" if names else ""
    )
    kept = len(p.get("artifacts") or [])
    refused = len(m.get("refused_outputs") or [])
    unmatched = len(m.get("artifact_globs_unmatched") or [])
    lead = (
        f"The command {how} after {value('duration_ns', m.get('duration_ns'))}; {left}; "
        f"{kept} declared output{'s' if kept != 1 else ''} kept, {refused} refused, "
        f"{unmatched} pattern{'s' if unmatched != 1 else ''} matched nothing."
    )
    rows: list[tuple[str, str]] = [
        ("exit status", value("n", rc)),
        ("duration", value("duration_ns", m.get("duration_ns"))),
        ("leaked processes", str(len(leaked))),
        ("declared outputs kept", str(kept)),
        ("outputs refused", str(refused)),
    ]
    before, after = m.get("nvml_used_before_bytes"), m.get("nvml_used_after_bytes")
    if isinstance(before, dict) and isinstance(after, dict):
        for gpu, b in before.items():
            a = after.get(gpu)
            rows.append((f"GPU memory used {gpu}", f"{_b(b)} before, {_b(a)} after"))
        memory = "GPU memory is read through NVML before and after (no peak is sampled)."
    else:
        memory = "No GPU memory was read (NVML did not answer): no peak is recorded."
    return Findings(
        (lead, memory),
        Table(("figure", "value"), tuple(rows)),
        bool(leaked) or rc != 0,
        by="command",
    )
