"""Small SVG charts drawn on the server: grouped bars (predicted vs measured
per shape), step lines (memory over time) and a claim's figure per revision
(base commits, then a PR's heads). Every text is escaped; the
output is a standalone `<svg>` element embedded in the page."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

from ledger.read import humanize

__all__ = ["bars", "human_bytes", "lines", "trend"]

_W, _H, _PAD = 720, 300, 72


def human_bytes(n: float) -> str:
    return humanize.iec(n)


def _round_label(n: float) -> str:
    """A tick's label: `2 GiB`, `2.5 GiB`, `512 MiB` (no trailing zeros)."""
    text = humanize.iec(n)
    num, _, unit = text.partition(" ")
    if "." in num:
        num = num.rstrip("0").rstrip(".")
    return f"{num} {unit}"


def _nice(hi: float) -> float:
    """A 1, 2 or 5 x 10^k step that cuts 0..hi into about four parts."""
    step = hi / 4 if hi > 0 else 1
    mag = 10 ** math.floor(math.log10(step))
    return float(next(m * mag for m in (1, 2, 5, 10) if m * mag >= step))


def _ticks(lo: float, hi: float, log: bool, in_bytes: bool = False) -> list[float]:
    """Axis ticks on round values: on a log axis the powers of ten (of 1024 and
    10, 100 of each IEC unit for bytes); else steps of 1, 2 or 5 x 10^k from 0, in
    the IEC unit of the largest value for bytes (ticks at 1, 2, 3 GiB, not at
    1.86 GiB)."""
    if log:
        if in_bytes:
            cands = [float(1024**u * m) for u in range(6) for m in (1, 10, 100)]
            below = [c for c in cands if c <= lo] or [cands[0]]
            above = [c for c in cands if c >= hi] or [cands[-1]]
            return [c for c in cands if below[-1] <= c <= above[0]]
        out = []
        e = math.floor(math.log10(lo))
        while 10**e <= hi * 10:
            out.append(float(10**e))
            e += 1
        return out
    unit = 1.0
    if in_bytes:
        while hi / unit >= 1024 and unit < 1024**5:
            unit *= 1024
    step = _nice(hi / unit) * unit
    return [i * step for i in range(int(hi / step) + 2)]


def bars(
    title: str,
    labels: Sequence[str],
    series: dict[str, Sequence[float | None]],
    *,
    marks: Sequence[str] = (),
    x_label: str = "",
    y_label: str = "bytes",
) -> str:
    """Grouped bars: one group per label, one bar per series (None: not measured).

    The y axis is labelled and ticked in IEC units, logarithmic when the values
    span more than ~1.7 decades; each bar carries its value as text (not only on
    hover); `marks` names a label's group `counterexample` or `refused`, drawn as a
    labelled marker so it reads without colour."""
    values = [v for vs in series.values() for v in vs if v is not None and v > 0]
    hi = max(values, default=1.0)
    lo = min(values, default=1.0)
    # Values over more than ~1.7 decades: a linear axis would flatten the small ones.
    log = hi / lo > 50
    n, k = max(len(labels), 1), max(len(series), 1)
    left, right, head, foot = 86, 16, 48, 96
    plot_w = _W - left - right
    scale = _Scale.of(lo, hi, log, y_label == "bytes", _H - head)
    group = plot_w / n
    bar = group * 0.8 / k

    def tick(t: float) -> str:
        return _round_label(t) if y_label == "bytes" else f"{t:g}"

    parts = _frame(title, "chart", y_label, scale, (left, right, head, foot), tick)
    for j, (name, vals) in enumerate(series.items()):
        for i, v in enumerate(vals):
            if v is None:
                continue
            y = scale.y(v) if v > 0 else _H
            x = left + i * group + group * 0.1 + j * bar
            text = human_bytes(v) if y_label == "bytes" else humanize.number(v)
            parts.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar:.1f}" height="{_H - y:.1f}" '
                f'class="s{j}"><title>{escape(name)} {escape(labels[i])}: {escape(text)} '
                f"({v:.0f})</title></rect>"
                f'<text x="{x + bar / 2:.1f}" y="{y - 3:.1f}" class="value" '
                f'transform="rotate(-90 {x + bar / 2:.1f} {y - 3:.1f})">{escape(text)}</text>'
            )
    parts += _group_labels(labels, marks, left, group)
    if x_label:
        parts.append(
            f'<text x="{left + plot_w / 2:.0f}" y="{_H + 52}" class="label" '
            f'text-anchor="middle">{escape(x_label)}</text>'
        )
    for j, name in enumerate(series):
        parts.append(
            f'<rect x="{left + j * 120}" y="{_H + 70}" width="10" height="10" class="s{j}"/>'
            f'<text x="{left + j * 120 + 14}" y="{_H + 79}" class="tick">{escape(name)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


@dataclass(frozen=True)
class _Scale:
    """The y axis: its ticks, linear or logarithmic, and a value's height in the plot."""

    ticks: list[float]
    log: bool
    top: float
    bottom: float
    plot_h: float

    @classmethod
    def of(cls, lo: float, hi: float, log: bool, in_bytes: bool, plot_h: float) -> _Scale:
        ticks = _ticks(lo, hi, log, in_bytes)
        top = ticks[-1] if ticks else hi
        bottom = ticks[0] if log and ticks else 0.0
        return cls(ticks, log, top, bottom, plot_h)

    def y(self, v: float) -> float:
        top, bottom = self.top, self.bottom
        if self.log:
            span = math.log10(top) - math.log10(bottom) or 1
            frac = (math.log10(max(v, bottom)) - math.log10(bottom)) / span
        else:
            frac = (v - bottom) / ((top - bottom) or 1)
        return _H - self.plot_h * frac


def _frame(
    title: str,
    css: str,
    y_label: str,
    scale: _Scale,
    margins: tuple[int, int, int, int],
    tick: Callable[[float], str],
) -> list[str]:
    """A chart's opening: the `<svg>` element, its title, both axes, the y axis's
    label and its ticks with their grid lines (`margins`: left, right, head, foot)."""
    left, right, head, foot = margins
    log = scale.log
    mid = (head + _H) / 2
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_W} {_H + foot}" '
        f'role="img" aria-label="{escape(title)}" class="{css}">',
        f'<text x="{left}" y="16" class="title">{escape(title)}'
        f"{' (log scale)' if log else ''}</text>",
        f'<line x1="{left}" y1="{_H}" x2="{_W - right}" y2="{_H}" class="axis"/>',
        f'<line x1="{left}" y1="{head}" x2="{left}" y2="{_H}" class="axis"/>',
        f'<text x="12" y="{mid:.0f}" class="label" transform="rotate(-90 12 {mid:.0f})" '
        f'text-anchor="middle">{escape(y_label)}{" (log)" if log else ""}</text>',
    ]
    for t in scale.ticks:
        y = scale.y(t)
        parts.append(
            f'<line x1="{left - 4}" y1="{y:.1f}" x2="{_W - right}" y2="{y:.1f}" class="grid"/>'
            f'<text x="{left - 6}" y="{y + 4:.1f}" class="tick" text-anchor="end">'
            f"{escape(tick(t))}</text>"
        )
    return parts


def _group_labels(
    labels: Sequence[str], marks: Sequence[str], left: float, group: float
) -> list[str]:
    """Each group's label under it, and its mark (counterexample ✕, refused ○) below."""
    parts = []
    for i, label in enumerate(labels):
        x = left + i * group + group / 2
        parts.append(
            f'<text x="{x:.1f}" y="{_H + 16}" class="tick" text-anchor="middle">'
            f"{escape(label)}</text>"
        )
        mark = marks[i] if i < len(marks) else ""
        if mark:
            shape = "✕" if mark == "counterexample" else "○"
            parts.append(
                f'<text x="{x:.1f}" y="{_H + 32}" class="mark {escape(mark)}" '
                f'text-anchor="middle">{shape} {escape(mark)}</text>'
            )
    return parts


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
        f'<text x="{_PAD}" y="{_H + 36}" class="label">time since the first event</text>',
    ]
    for t in _ticks(1, top, False, True):
        if t > top:
            break
        parts.append(
            f'<line x1="{_PAD}" y1="{py(t):.1f}" x2="{_W - _PAD}" y2="{py(t):.1f}" class="grid"/>'
            f'<text x="{_PAD - 4}" y="{py(t) + 4:.1f}" class="tick" text-anchor="end">'
            f"{escape(_round_label(t))}</text>"
        )
    for j, (name, pts) in enumerate(series.items()):
        d = []
        last_y = 0.0
        for x, y in pts:
            d.append(f"{px(x):.1f},{py(last_y):.1f} {px(x):.1f},{py(y):.1f}")
            last_y = y
        parts.append(f'<polyline points="{" ".join(d)}" class="l{j}"/>')
        parts.append(
            f'<rect x="{_PAD + 220 + j * 140}" y="{_H + 26}" width="10" height="10" class="s{j}"/>'
            f'<text x="{_PAD + 234 + j * 140}" y="{_H + 35}" class="tick">{escape(name)}</text>'
        )
    if mark is not None:
        mx, my, label = mark
        parts.append(
            f'<circle cx="{px(mx):.1f}" cy="{py(my):.1f}" r="4" class="peak"/>'
            f'<text x="{px(mx) + 6:.1f}" y="{py(my) - 6:.1f}" class="tick">{escape(label)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _tick_label(t: float, in_bytes: bool) -> str:
    return _round_label(t) if in_bytes else humanize.number(t)


def trend(
    title: str,
    columns: Sequence[tuple[str, str]],
    points: Sequence[tuple[int, float, str, str, int]],
    *,
    in_bytes: bool,
    y_label: str,
    x_label: str = "revision: base branch commits (oldest first), then the PR's heads",
    bound: float | None = None,
) -> str:
    """A claim's figure per revision: `columns` are (where, short commit) along x;
    each point is (column, value, kind, text, line) with kind `base` (a square),
    `head` (a circle) or `superseded` (a cross labelled so, beside its revision's
    point); points of one `line` (a scope) are joined in order, superseded ones
    never. The y axis is ticked in IEC units for bytes, else to three significant
    digits, logarithmic when the values span more than ~1.7 decades; every point
    carries its value as text, so the plot reads without colour or hover."""
    values = [v for _, v, *_ in points]
    # The bound is drawn inside the frame: the scale covers it.
    values += [bound] if bound is not None else []
    positive = [v for v in values if v > 0]
    hi = max(values, default=1.0) or 1.0
    lo = min(positive, default=hi)
    log = len(positive) == len(values) and hi / lo > 50
    n = max(len(columns), 1)
    left, right, head, foot = 86, 16, 40, 112
    plot_w = _W - left - right
    scale = _Scale.of(lo, hi, log, in_bytes, _H - head)

    def px(i: float) -> float:
        return left + plot_w * (i + 0.5) / n

    def tick(t: float) -> str:
        return _tick_label(t, in_bytes)

    parts = _frame(title, "chart trend", y_label, scale, (left, right, head, foot), tick)
    for i, (where, commit) in enumerate(columns):
        x = px(i)
        parts.append(
            f'<text x="{x:.1f}" y="{_H + 16}" class="tick" text-anchor="middle">'
            f"{escape(where)}</text>"
            f'<text x="{x:.1f}" y="{_H + 30}" class="tick" text-anchor="middle">'
            f"{escape(commit)}</text>"
        )
    lines: dict[int, list[str]] = {}
    for i, v, kind, _, line in points:
        if kind != "superseded":
            lines.setdefault(line, []).append(f"{px(i):.1f},{scale.y(v):.1f}")
    for pts in lines.values():
        if len(pts) > 1:
            parts.append(f'<polyline points="{" ".join(pts)}" class="l0"/>')
    if bound is not None and (bound > 0 or not log):
        # The bound the figure is judged against, as a dashed line labelled with it.
        y = scale.y(bound)
        said = human_bytes(bound) if in_bytes else humanize.number(bound)
        parts.append(
            f'<g class="bound" data-bound="{bound!r}"><line x1="{left}" x2="{_W - right}" '
            f'y1="{y:.1f}" y2="{y:.1f}" stroke-dasharray="6 4" class="bound"/>'
            f'<text x="{_W - right - 4}" y="{y - 4:.1f}" class="tick" text-anchor="end">'
            f"bound {escape(said)}</text></g>"
        )
    for i, v, kind, text, _ in points:
        parts += _trend_point(px(i), scale.y(v), kind, text, columns[i])
    parts.append(
        f'<text x="{left + plot_w / 2:.0f}" y="{_H + 52}" class="label" '
        f'text-anchor="middle">{escape(x_label)}</text>'
    )
    legend = f'<g class="legend" transform="translate({left} {_H + 78})">'
    legend += '<rect x="0" y="0" width="10" height="10" class="s0"/>'
    legend += '<text x="14" y="9" class="tick">base commit</text>'
    legend += '<circle cx="135" cy="5" r="5" class="s1"/>'
    legend += '<text x="144" y="9" class="tick">PR head</text>'
    legend += '<text x="245" y="10" class="mark" text-anchor="middle">✕</text>'
    legend += '<text x="254" y="9" class="tick">superseded receipt</text></g>'
    parts.append(legend)
    parts.append("</svg>")
    return "".join(parts)


def _trend_point(x: float, y: float, kind: str, text: str, column: tuple[str, str]) -> list[str]:
    """One point of the trend: its mark by kind (base ■, head ●, superseded ✕ beside
    its revision's point), its tooltip and its value as text."""
    parts = []
    tip = f"<title>{escape(column[0])} {escape(column[1])}: {escape(text)}</title>"
    if kind == "base":
        mark = f'<rect x="{x - 5:.1f}" y="{y - 5:.1f}" width="10" height="10" class="s0">'
        parts.append(f'<g class="point base" data-kind="base">{mark}{tip}</rect></g>')
    elif kind == "head":
        mark = f'<circle cx="{x:.1f}" cy="{y:.1f}" r="5" class="s1">'
        parts.append(f'<g class="point head" data-kind="head">{mark}{tip}</circle></g>')
    else:
        # Beside its revision's point (a little left), so both read.
        x -= 12
        parts.append(
            f'<g class="point superseded" data-kind="superseded">'
            f'<text x="{x:.1f}" y="{y + 4:.1f}" class="mark" text-anchor="middle">✕'
            f"{tip}</text></g>"
        )
    label = f"{text} (superseded)" if kind == "superseded" else text
    anchor = "end" if kind == "superseded" else "start"
    dx = -8 if kind == "superseded" else 8
    parts.append(
        f'<text x="{x + dx:.1f}" y="{y - 6:.1f}" class="value" text-anchor="{anchor}">'
        f"{escape(label)}</text>"
    )
    return parts
