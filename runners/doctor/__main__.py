"""``python -m runners.doctor REQUEST.json RESULT.json``: probe a workload and judge the
plan's claims (`runners.doctor.probe`, `runners.doctor.claims`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

from runners.doctor.claims import judge, summary
from runners.doctor.probe import probe
from runners.harness import child


def _prepare_note(p: dict[str, Any]) -> str:
    """How a workload without ``prepare()`` is built per claim ("" with one)."""
    prep = p.get("capabilities", {}).get("prepare", {})
    if prep.get("state") != "fallback":
        return ""
    name = p.get("workload", "?")
    if not prep.get("add"):
        return f"note: {name}: no prepare(): {prep.get('detail', '')}"
    return (
        f"note: {name}: no prepare(): {prep.get('detail', '')} "
        "(add `def prepare(self)`: runners.protocol.SupportsPrepare)"
    )


def run(request: dict[str, Any]) -> dict[str, Any]:
    """``request``: ``root``, and ``claims`` (each ``claim``, ``check``, ``params``,
    ``workload``, ``workload_params``); one probe per distinct workload."""
    torch.manual_seed(0)
    probes: dict[str, dict[str, Any]] = {}
    reports = []
    required = []
    for c in request["claims"]:
        key = repr((c["workload"], sorted(c["workload_params"].items())))
        if key not in probes:
            child.say(f"probing {c['workload']} at a tiny shape on CPU")
            probes[key] = probe(Path(request["root"]), c["workload"], c["workload_params"])
        caps = probes[key]["capabilities"]
        reports.append(judge(c["claim"], c["check"], c["params"], caps))
        required.append(bool(c.get("required", True)))
    notes = sorted({_prepare_note(p) for p in probes.values()} - {""})
    return {
        "summary": summary(reports),
        "notes": notes,
        "claims": [{**r.to_json(), "required": q} for r, q in zip(reports, required, strict=True)],
        "lines": [r.line() for r in reports],
        "probes": list(probes.values()),
    }


if __name__ == "__main__":
    sys.exit(child.serve(run))
