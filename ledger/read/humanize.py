"""Values as people read them: bytes in IEC units (GiB is 1024^3) to three
significant digits, ratios and other floats to three significant digits (never
Python's repr), booleans as yes/no, long hex digests shortened; and recorded
sentences (a receipt's reason, a blocker) with their byte counts and long
floats in those forms (`figures`): the signed reason stays exact, the surfaces
render it. The number forms live below every room (`ledger.units.numbers`)
and are named here too, for the renderers.

Every surface that shows a receipt's values to a person goes through here;
the JSON forms keep the exact values, and the web pages put the exact
integer beside the readable one (on hover and in copy).
"""

from __future__ import annotations

from typing import Any

from ledger.units.numbers import figure_spans, figures, iec, is_digest, number, short_digest

__all__ = [
    "JUDGING",
    "KEY_COLUMNS",
    "columns",
    "duration",
    "environment_line",
    "figure_spans",
    "figures",
    "iec",
    "is_bytes_key",
    "is_digest",
    "is_ns_key",
    "number",
    "short_digest",
    "sorted_rows",
    "state_breakdown",
    "value",
]

# The key evidence of a measurement table, first, in this order (the rest follow
# as the rows name them): what a reviewer reads to judge the receipt.
KEY_COLUMNS: dict[str, tuple[str, ...]] = {
    # What judges a shape first (so a phone, reading a row top to bottom, and an
    # 80-column terminal reach the figures): predicted vs measured and their ratio.
    "shapes": (
        "shape",
        "phase",
        "predicted_bytes",
        "measured_bytes",
        "measured_over_predicted",
        "admitted",
        "counterexample",
        "status",
        "run",
        "cold",
        "usable_bytes",
    ),
    # A tensor's error beside its allowance (the floor it is judged against, and
    # how many floors it is).
    "tensors": (
        "name",
        "state",
        "err_candidate",
        "err_base",
        "multiple",
        "failed_by",
        "rel_l2",
        "noise_rel_l2",
        "over_threshold",
        "max_abs",
        "cosine",
        "numel",
    ),
    "families": (
        "family",
        "state",
        "err_candidate",
        "allowed",
        "multiple",
        "worst",
        "failed_by",
        "difference",
        "noise_floor",
    ),
}
JUDGING = 8
"""Key columns a page's first table shows; the whole table is one click away."""
# Tables read worst first: the largest differences on top (the first key the
# rows carry: how many allowances a tensor is, else its relative L2).
_SORT_DESC: dict[str, tuple[str, ...]] = {
    "tensors": ("multiple", "rel_l2"),
    "families": ("multiple", "difference"),
}

_HEX = frozenset("0123456789abcdef")


def is_bytes_key(key: str) -> bool:
    """A measurement named for bytes (`measured_bytes`, `gpu_memory_bytes`, `bytes`)."""
    k = key.lower()
    return k == "bytes" or k.endswith("_bytes") or "_bytes_" in k


def is_ns_key(key: str) -> bool:
    k = key.lower()
    return k.endswith("_ns") or k == "ns"


def duration(ns: float) -> str:
    """Nanoseconds for people: `632234928` -> `632.2 ms`."""
    x = float(ns)
    for unit, div in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if abs(x) >= div:
            return f"{x / div:.1f} {unit}"
    return f"{x:.0f} ns"


def columns(name: str, rows: list[dict[str, Any]]) -> list[str]:
    """A table's columns: its key evidence first, then the rest as first seen."""
    seen = list(dict.fromkeys(c for r in rows for c in r))
    first = [c for c in KEY_COLUMNS.get(name, ()) if c in seen]
    return first + [c for c in seen if c not in first]


def sorted_rows(name: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows as a reviewer reads them (largest differences first where that applies)."""
    keys = [k for k in _SORT_DESC.get(name, ()) if any(k in r for r in rows)]
    if not keys:
        return rows
    key = keys[0]

    def k(r: dict[str, Any]) -> float:
        v = r.get(key)
        return -float(v) if isinstance(v, int | float) and not isinstance(v, bool) else 0.0

    return sorted(rows, key=k)


def _unit_key(parent: str, child: str) -> str:
    if is_ns_key(child) or is_bytes_key(child) or not (is_ns_key(parent) or is_bytes_key(parent)):
        return child
    return parent


def value(key: str, v: Any) -> str:
    """One scalar for people; the key says whether an integer counts bytes."""
    if v is None:
        return "–"
    if isinstance(v, list):
        return "[" + ", ".join(value(key, x) for x in v) + "]"
    if isinstance(v, dict):
        # A map named for its unit (`claim_timeline_ns`) gives it to names that carry none.
        return (
            "{" + ", ".join(f"{k}: {value(_unit_key(key, str(k)), x)}" for k, x in v.items()) + "}"
        )
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int | float) and is_bytes_key(key):
        return iec(v)
    if isinstance(v, int | float) and is_ns_key(key):
        return duration(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return number(v)
    if isinstance(v, str) and is_digest(v):
        return short_digest(v)
    return str(v)


# A verdict's required claims by state, in the order a reviewer acts on them.
_STATE_ORDER = (
    "failed",
    "disputed",
    "unverified",
    "inconclusive",
    "needs-review",
    "infra-error",
    "stale",
    "not-run",
    "not-applicable",
    "qualified",
)


def state_breakdown(verdict: dict[str, Any]) -> str:
    """Beside "N of M": how the required claims stand, `1 failed, 2 not-run, 5 qualified`."""
    counts: dict[str, int] = {}
    for c in verdict.get("claims", []):
        if c.get("required"):
            counts[c["state"]] = counts.get(c["state"], 0) + 1
    order = [s for s in _STATE_ORDER if s in counts] + sorted(set(counts) - set(_STATE_ORDER))
    return ", ".join(f"{counts[s]} {s}" for s in order)


def environment_line(env: dict[str, Any]) -> str:
    """`NVIDIA H200 x1 (140 GiB), driver 580.159.04, cuda 13.0, torch 2.11.0+cu130,
    bfloat16`; a host without a GPU reads `CPU (no GPU), torch 2.13.0+cpu` (with a CUDA
    build of torch: `CPU (no GPU), CUDA build 13.0, no device, torch 2.13.0+cu130`)."""
    parts: list[str] = []
    gpu = env.get("gpu_model")
    if gpu and gpu != _NONE:
        count = env.get("gpu_count")
        mem = env.get("gpu_memory_bytes")
        text = f"{gpu}" + (f" x{count}" if count else "")
        if isinstance(mem, int) and mem > 0:
            text += f" ({iec(mem)})"
        parts.append(text)
    elif gpu == _NONE or env.get("device_kind") == "cpu":
        parts.append("CPU (no GPU)")
    elif env.get("device_kind"):
        parts.append(str(env["device_kind"]))
    gpu_less = gpu == _NONE or env.get("device_kind") == "cpu" or env.get("gpu_count") == 0
    for k in ("driver", "cuda", "torch", "nccl"):
        if env.get(k) and env[k] != _NONE:
            if k == "cuda" and gpu_less:
                # The facet is the CUDA version torch was built for, not a device's.
                parts.append(f"CUDA build {env[k]}, no device")
            else:
                parts.append(f"{k} {env[k]}")
    for k in ("dtype", "workload", "profile"):
        if env.get(k):
            parts.append(str(env[k]))
    return ", ".join(parts)


_NONE = "none"
"""What the environment's facets say where a host has no GPU, driver or CUDA."""


_LEAD_MAX = 240
"""How much of a blocker's first reason leads it: the clause and its deciding
figure fit; a longer reason is read in full under its claim."""


def baseline(claim: dict[str, Any]) -> str:
    """A blocker's label beside the commit its head branched from, in one line (empty
    where there is none, as in an answer from a server that asks none)."""
    a = claim.get("attribution")
    return str(a["text"]) if isinstance(a, dict) and a.get("text") else ""


def blocker_reason(reasons: list[str] | tuple[str, ...]) -> str:
    """The reason a blocker leads with: its first deciding reason as people read
    it, cut at a word near `_LEAD_MAX` characters (the figure comes early)."""
    if not reasons:
        return ""
    text = " ".join(figures(str(reasons[0])).split())
    if len(text) <= _LEAD_MAX:
        return text
    cut = text[:_LEAD_MAX].rsplit(" ", 1)[0]
    return cut.rstrip(",;:") + " …"
