"""Small SVG charts drawn on the server: grouped bars (predicted vs measured
per shape) and step lines (memory over time). Every text is escaped; the
output is a standalone `<svg>` element embedded in the page."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

__all__ = ["bars", "human_bytes", "lines"]

_W, _H, _PAD = 640, 240, 48


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def bars(title: str, labels: Sequence[str], series: dict[str, Sequence[float | None]]) -> str:
    """Grouped bars: one group per label, one bar per series (None: not measured)."""
    top = max((v for vs in series.values() for v in vs if v is not None), default=0) or 1
    n, k = max(len(labels), 1), max(len(series), 1)
    group = (_W - 2 * _PAD) / n
    bar = group * 0.8 / k
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_W} {_H + 60}" '
        f'role="img" aria-label="{escape(title)}" class="chart">',
        f'<text x="{_PAD}" y="16" class="title">{escape(title)}</text>',
        f'<line x1="{_PAD}" y1="{_H}" x2="{_W - _PAD}" y2="{_H}" class="axis"/>',
        f'<text x="4" y="{_PAD}" class="tick">{escape(human_bytes(top))}</text>',
    ]
    for j, (name, values) in enumerate(series.items()):
        for i, v in enumerate(values):
            if v is None:
                continue
            h = (_H - _PAD) * v / top
            x = _PAD + i * group + group * 0.1 + j * bar
            parts.append(
                f'<rect x="{x:.1f}" y="{_H - h:.1f}" width="{bar:.1f}" height="{h:.1f}" '
                f'class="s{j}"><title>{escape(name)} {escape(labels[i])}: '
                f"{escape(human_bytes(v))}</title></rect>"
            )
        parts.append(
            f'<rect x="{_PAD + j * 120}" y="{_H + 40}" width="10" height="10" class="s{j}"/>'
            f'<text x="{_PAD + j * 120 + 14}" y="{_H + 49}" class="tick">{escape(name)}</text>'
        )
    for i, label in enumerate(labels):
        x = _PAD + i * group + group / 2
        parts.append(
            f'<text x="{x:.1f}" y="{_H + 16}" class="tick" text-anchor="middle">'
            f"{escape(label)}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def lines(
    title: str,
    series: dict[str, Sequence[tuple[float, float]]],
    mark: tuple[float, float, str] | None = None,
) -> str:
    """Step lines of (x, y) points; `mark` puts a labelled dot at one point (the peak)."""
    xs = [x for pts in series.values() for x, _ in pts] or [0.0]
    ys = [y for pts in series.values() for _, y in pts] or [0.0]
    x0, x1 = min(xs), max(xs) or 1
    top = max(ys) or 1
    span = (x1 - x0) or 1

    def px(x: float) -> float:
        return _PAD + (_W - 2 * _PAD) * (x - x0) / span

    def py(y: float) -> float:
        return _H - (_H - _PAD) * y / top

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_W} {_H + 40}" '
        f'role="img" aria-label="{escape(title)}" class="chart">',
        f'<text x="{_PAD}" y="16" class="title">{escape(title)}</text>',
        f'<line x1="{_PAD}" y1="{_H}" x2="{_W - _PAD}" y2="{_H}" class="axis"/>',
        f'<text x="4" y="{_PAD}" class="tick">{escape(human_bytes(top))}</text>',
    ]
    for j, (name, pts) in enumerate(series.items()):
        d = []
        last_y = 0.0
        for x, y in pts:
            d.append(f"{px(x):.1f},{py(last_y):.1f} {px(x):.1f},{py(y):.1f}")
            last_y = y
        parts.append(f'<polyline points="{" ".join(d)}" class="l{j}"/>')
        parts.append(
            f'<rect x="{_PAD + j * 140}" y="{_H + 20}" width="10" height="10" class="s{j}"/>'
            f'<text x="{_PAD + j * 140 + 14}" y="{_H + 29}" class="tick">{escape(name)}</text>'
        )
    if mark is not None:
        mx, my, label = mark
        parts.append(
            f'<circle cx="{px(mx):.1f}" cy="{py(my):.1f}" r="4" class="peak"/>'
            f'<text x="{px(mx) + 6:.1f}" y="{py(my) - 6:.1f}" class="tick">{escape(label)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)
