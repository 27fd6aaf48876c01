"""Inline SVG plots of evidence series: the data's own min and max on the y axis, wall-clock time on the x axis."""

from __future__ import annotations

import html

from kdiag.core.finite import local_text
from kdiag.core.quote import printable

WIDTH, HEIGHT = 360, 110
LEFT, RIGHT, TOP, BOTTOM = 66, 26, 8, 20
STATE_COLORS = {"pending": "#b06f00", "firing": "#c9302c"}
BINARY = ((1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"))
DECIMAL = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e4, "k"))


def number(value: float, digits: int = 4) -> str:
    """A value in `digits` significant digits, large ones with k, M, G or T (420k, not 4.2e+05)."""
    if abs(value) >= 1e15:  # Long.MAX_VALUE, Kafka's "not set"
        return f"{value:.{digits}g}"
    scale, prefix = next(((s, p) for s, p in DECIMAL if abs(value) >= s), (1.0, ""))
    if prefix == "k":
        scale = 1e3
    return f"{value / scale:.{digits}g}{prefix}"


def formatted(name: str, value: float | str, digits: int = 4) -> str:
    """A signal's value with the unit its name ends in (seconds, bytes, ratio, per second)."""
    if isinstance(value, str):
        return value
    if name.endswith("_ratio"):
        return f"{value * 100:.{digits}g} %"
    per_second = "/s" if name.endswith(("_per_second", "_rate")) else ""
    if "bytes" in name:
        scale, unit = next(((s, u) for s, u in BINARY if abs(value) >= s), (1, "B"))
        return f"{value / scale:.{digits}g} {unit}{per_second}"
    if name.endswith("_seconds") and not per_second:
        return f"{value * 1000:.{digits}g} ms" if abs(value) < 1 and value else f"{value:.{digits}g} s"
    return number(value, digits) + (" " + per_second if per_second else "")


def bounds(name: str, low: float, high: float) -> tuple[str, str]:
    """The axis labels of a moving series: as many digits as it takes for them to differ."""
    digits = 4
    while formatted(name, low, digits) == formatted(name, high, digits) and digits < 12:
        digits += 1
    return formatted(name, low, digits), formatted(name, high, digits)


def shown(text: str) -> str:
    """Outside text as HTML text: controls, separators and bidi overrides shown as escapes, markup escaped."""
    return html.escape(printable(text))


def clock(t: float) -> str:
    """A wall-clock time of day (local time), as the axis shows it."""
    return local_text(t, "%H:%M:%S", "page")


def _text(x: float, y: float, s: str, anchor: str = "start", cls: str = "") -> str:
    klass = f' class="{cls}"' if cls else ""
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{klass}>{shown(s)}</text>'


def plot(name: str, points: list[tuple[float, float]], start: float, end: float,
         fault: tuple[float, float] | None = None, states: list[tuple[float, str]] | None = None) -> str:
    """One series as an SVG: a band per pending/firing stretch, the fault window when a drill made one, the line."""
    span = max(end - start, 1e-9)
    inner_w, inner_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(t: float) -> float:
        return LEFT + (min(max(t, start), end) - start) / span * inner_w

    values = [v for _, v in points]
    low, high = (min(values), max(values)) if values else (0.0, 0.0)

    def y(v: float) -> float:
        # A flat series is a flat line across the middle, labelled with its one value.
        return TOP + inner_h / 2 if high == low else TOP + (high - v) / (high - low) * inner_h

    parts = [f'<svg class="plot" role="img" viewBox="0 0 {WIDTH} {HEIGHT}" preserveAspectRatio="xMinYMin meet" '
             f'xmlns="http://www.w3.org/2000/svg"><title>{shown(name)}</title>']
    lane = states or []
    for (t, state), (t_next, _) in zip(lane, [*lane[1:], (end, "")], strict=False):
        if state in STATE_COLORS:
            parts.append(f'<rect class="band {state}" x="{x(t):.1f}" y="{TOP}" width="{max(x(t_next) - x(t), 1):.1f}" '
                         f'height="{inner_h}" fill="{STATE_COLORS[state]}" opacity="0.12"/>')
    if fault:
        a, b = x(fault[0]), x(fault[1])
        parts.append(f'<rect class="fault" x="{a:.1f}" y="{TOP}" width="{max(b - a, 1):.1f}" height="{inner_h}" '
                     'fill="#3d7bd9" opacity="0.15"/>')
    parts.append(f'<rect x="{LEFT}" y="{TOP}" width="{inner_w}" height="{inner_h}" fill="none" stroke="#bbb"/>')
    if high == low:
        parts.append(_text(LEFT - 4, TOP + inner_h / 2 + 4, formatted(name, high) if values else "no data", "end"))
    else:
        bottom, top = bounds(name, low, high)
        parts.append(_text(LEFT - 4, TOP + 10, top, "end", "ymax"))
        parts.append(_text(LEFT - 4, TOP + inner_h, bottom, "end", "ymin"))
    if points:
        path = " ".join(f"{'M' if i == 0 else 'L'}{x(t):.1f},{y(v):.1f}" for i, (t, v) in enumerate(points))
        parts.append(f'<path class="signal" d="{path}" fill="none" stroke="#1f5fbf" stroke-width="1.6"/>')
        if len(points) == 1:
            parts.append(f'<circle cx="{x(points[0][0]):.1f}" cy="{y(points[0][1]):.1f}" r="2.5" fill="#1f5fbf"/>')
    base = HEIGHT - 6
    parts += [_text(LEFT, base, clock(start)), _text(LEFT + inner_w / 2, base, clock(start + span / 2), "middle"),
              _text(WIDTH - RIGHT, base, clock(end), "end"), "</svg>"]
    return "".join(parts)
