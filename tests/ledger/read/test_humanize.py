"""Values for people, and the charts drawn with them."""

from __future__ import annotations

import re

from ledger.read.humanize import columns, duration, iec, sorted_rows, value
from ledger.service.web import charts


def test_values_read_without_python_reprs() -> None:
    assert iec(149459365888) == "139 GiB" and iec(512) == "512 B"
    assert value("measured_bytes", 2768373248) == "2.58 GiB"
    assert value("ratio", 1.0000000000000002) == "1"
    assert value("admitted", True) == "yes" and value("x", None) == "–"
    assert value("phases", ["a", True, None]) == "[a, yes, –]"
    assert value("arm", {"ok": False, "peak_bytes": 1 << 30}) == "{ok: no, peak_bytes: 1.00 GiB}"
    assert value("duration_ns", 632234928) == duration(632234928) == "632.2 ms"
    # A map named for its unit: each stamp in it is a duration, not a raw integer.
    line = {"launched": 0, "forked": 92579315, "check_started": 2568362301}
    assert (
        value("claim_timeline_ns", line)
        == "{launched: 0 ns, forked: 92.6 ms, check_started: 2.6 s}"
    )
    assert value("workload_digest", "ab" * 32) == "abababababab…"


def test_key_columns_first_and_worst_rows_first() -> None:
    rows = [{"zeta": 1, "measured_bytes": 2, "shape": "1x64", "phase": "f"}]
    assert columns("shapes", rows)[:3] == ["shape", "phase", "measured_bytes"]
    tensors = [{"name": "a", "rel_l2": 0.1}, {"name": "b", "rel_l2": 0.5}]
    assert [r["name"] for r in sorted_rows("tensors", tensors)] == ["b", "a"]


def test_a_chart_has_labelled_axes_ticks_values_and_marks() -> None:
    svg = charts.bars(
        "forward: predicted vs measured",
        ["1x64", "4x2048"],
        {"predicted": [35_049_269.0, 2_516_754_432.0], "measured": [None, 2_768_373_248.0]},
        marks=["refused", "counterexample"],
        x_label="shape",
        y_label="bytes",
    )
    assert "(log scale)" in svg  # the values span two decades
    ticks = re.findall(r'class="tick" text-anchor="end">([^<]+)<', svg)
    assert len(ticks) >= 3 and all(t.endswith(("B", "KiB", "MiB", "GiB")) for t in ticks)
    assert '<text x="12"' in svg and ">bytes (log)<" in svg and ">shape<" in svg
    values = re.findall(r'class="value"[^>]*>([^<]+)<', svg)
    assert "2.58 GiB" in values  # readable without hovering
    assert "✕ counterexample" in svg and "○ refused" in svg
    linear = charts.bars("t", ["a"], {"p": [3.0 * 2**30]})
    assert "(log scale)" not in linear
