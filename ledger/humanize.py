"""Values as people read them: bytes in IEC units (GiB is 1024^3), booleans as
yes/no, floats to six significant digits, long hex digests shortened.

Every surface that shows a receipt's values to a person goes through here;
the JSON forms keep the exact values, and the web pages put the exact
integer beside the readable one (on hover and in copy).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "KEY_COLUMNS",
    "columns",
    "duration",
    "environment_line",
    "iec",
    "is_bytes_key",
    "is_digest",
    "is_ns_key",
    "short_digest",
    "sorted_rows",
    "value",
]

# The key evidence of a measurement table, first, in this order (the rest follow
# as the rows name them): what a reviewer reads to judge the receipt.
KEY_COLUMNS: dict[str, tuple[str, ...]] = {
    "shapes": (
        "shape",
        "phase",
        "run",
        "cold",
        "status",
        "admitted",
        "counterexample",
        "predicted_bytes",
        "measured_bytes",
        "measured_over_predicted",
        "usable_bytes",
    ),
    "tensors": ("name", "rel_l2", "noise_rel_l2", "over_threshold", "max_abs", "cosine", "numel"),
    "families": ("family", "state", "difference", "noise_floor"),
}
# Tables read worst first: the largest differences on top.
_SORT_DESC: dict[str, str] = {"tensors": "rel_l2", "families": "difference"}

_HEX = frozenset("0123456789abcdef")


def iec(n: float) -> str:
    """`149459365888` -> `139.19 GiB` (1 KiB = 1024 bytes)."""
    sign = "-" if n < 0 else ""
    x = abs(float(n))
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if x < 1024 or unit == "TiB":
            return f"{sign}{x:.0f} {unit}" if unit == "B" else f"{sign}{x:.2f} {unit}"
        x /= 1024
    raise AssertionError("unreachable")


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
    key = _SORT_DESC.get(name)
    if key is None:
        return rows

    def k(r: dict[str, Any]) -> float:
        v = r.get(key)
        return -float(v) if isinstance(v, int | float) and not isinstance(v, bool) else 0.0

    return sorted(rows, key=k)


def is_digest(v: Any) -> bool:
    text = str(v).removeprefix("sha256:")
    return len(text) >= 32 and set(text) <= _HEX


def short_digest(v: Any) -> str:
    text = str(v)
    prefix = "sha256:" if text.startswith("sha256:") else ""
    return prefix + text.removeprefix("sha256:")[:12] + "…"


def value(key: str, v: Any) -> str:
    """One scalar for people; the key says whether an integer counts bytes."""
    if v is None:
        return "–"
    if isinstance(v, list):
        return "[" + ", ".join(value(key, x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {value(str(k), x)}" for k, x in v.items()) + "}"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int | float) and is_bytes_key(key):
        return iec(v)
    if isinstance(v, int | float) and is_ns_key(key):
        return duration(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, str) and is_digest(v):
        return short_digest(v)
    return str(v)


def environment_line(env: dict[str, Any]) -> str:
    """`NVIDIA H200 x1 (139.80 GiB), driver 580.159.04, cuda 13.0, torch 2.11.0+cu130, bfloat16`."""
    parts: list[str] = []
    gpu = env.get("gpu_model")
    if gpu:
        count = env.get("gpu_count")
        mem = env.get("gpu_memory_bytes")
        text = f"{gpu}" + (f" x{count}" if count else "")
        if isinstance(mem, int):
            text += f" ({iec(mem)})"
        parts.append(text)
    elif env.get("device_kind"):
        parts.append(str(env["device_kind"]))
    for k in ("driver", "cuda", "torch", "nccl"):
        if env.get(k):
            parts.append(f"{k} {env[k]}")
    for k in ("dtype", "workload", "profile"):
        if env.get(k):
            parts.append(str(env[k]))
    return ", ".join(parts)
