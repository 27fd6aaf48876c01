"""A self-contained HTML report: per timeline, the fault window, rule states and evidence signals as inline SVG."""

from __future__ import annotations

import dataclasses
import html
import math
from dataclasses import dataclass, field

from kdiag.analysis.catalog import GLOBAL_SUBJECTS, Rule
from kdiag.runtime.pipeline import State

WIDTH, LEFT, RIGHT = 1000, 330, 20
LANE, CHART = 20, 60
COLORS = {"pending": "#f0ad4e", "firing": "#d9534f"}
MAX_CHARTS = 8


@dataclass
class Timeline:
    """What one plot shows: rule states per (rule, subject) and evidence series, over [start, end]."""

    title: str
    start: float
    end: float
    fault: tuple[float, float] | None = None
    lanes: dict[str, list[tuple[float, str]]] = field(default_factory=dict)
    series: dict[str, list[tuple[float, float]]] = field(default_factory=dict)

    @classmethod
    def from_states(cls, title: str, states: list[State], focus: list[str] | None,
                    fault: tuple[float, float] | None) -> Timeline:
        """Lanes for the focus rules and every cause or symptom seen; series of the focus rules' evidence."""
        times = [s.time for s in states] or [0.0]
        timeline = cls(title, times[0], times[-1], fault)
        for (rule_id, subject), rule in seen(states).items():
            if focus is not None and rule_id not in focus and rule.kind == "lint":
                continue  # standing lints of the machine say nothing about the fault
            timeline.lanes[f"{rule_id} · {subject}"] = lane(states, rule_id, subject)
            if focus is None or rule_id in focus:
                for name, points in evidence_series(rule, subject, states).items():
                    if len(timeline.series) < MAX_CHARTS:
                        timeline.series[f"{name} ({subject})"] = points
        return timeline


def frozen(state: State) -> State:
    """A copy of the state whose diagnoses later steps cannot change (the engine updates them in place)."""
    return dataclasses.replace(state, diagnoses=[dataclasses.replace(d) for d in state.diagnoses])


def seen(states: list[State]) -> dict[tuple[str, str], Rule]:
    """Every (rule id, subject) active in any state, in order of appearance."""
    found: dict[tuple[str, str], Rule] = {}
    for s in states:
        for d in s.diagnoses:
            found.setdefault((d.rule.id, d.subject), d.rule)
    return found


def lane(states: list[State], rule_id: str, subject: str) -> list[tuple[float, str]]:
    """The diagnosis's state ('' when not active) at every state's time."""
    return [(s.time, next((d.state for d in s.diagnoses if (d.rule.id, d.subject) == (rule_id, subject)), ""))
            for s in states]


def evidence_series(rule: Rule, subject: str, states: list[State]) -> dict[str, list[tuple[float, float]]]:
    """The rule's numeric evidence signals for the subject at every state, as the engine would quote them."""
    series: dict[str, list[tuple[float, float]]] = {}
    for s in states:
        it = next((v for v in s.signals.get(rule.each, {}).values() if str(v.get("name", "")) == subject), {})
        scope = {**{g: next(iter(s.signals.get(g, {}).values()), {}) for g in GLOBAL_SUBJECTS}, "it": it}
        for var, name in rule.evidence:
            value = scope.get(var, {}).get(name)
            if isinstance(value, int | float) and math.isfinite(value):
                series.setdefault(name if var == "it" else f"{var}.{name}", []).append((s.time, float(value)))
    return series


def _x(t: float, tl: Timeline) -> float:
    span = max(tl.end - tl.start, 1e-9)
    return LEFT + (t - tl.start) / span * (WIDTH - LEFT - RIGHT)


def _text(x: float, y: float, s: str, anchor: str = "end", size: int = 11) -> str:
    return f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}">{html.escape(s)}</text>'


def svg(tl: Timeline) -> str:
    """One timeline as an SVG element: time axis, fault window, a lane per diagnosis, a chart per signal."""
    height = 30 + LANE * len(tl.lanes) + (CHART + 10) * len(tl.series) + 20
    parts = [f'<svg class="timeline" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
             f'viewBox="0 0 {WIDTH} {height}">']
    if tl.fault:
        a, b = (_x(min(max(t, tl.start), tl.end), tl) for t in tl.fault)
        parts.append(f'<rect class="fault" x="{a:.1f}" y="0" width="{max(b - a, 1):.1f}" height="{height - 20}" '
                     'fill="#cfe2ff" opacity="0.6"/>')
        parts.append(_text(a + 3, 12, "fault injected", "start"))
    y = 20
    for label, points in tl.lanes.items():
        parts.append(_text(LEFT - 6, y + 14, label))
        for (t, state), (t_next, _) in zip(points, [*points[1:], (tl.end, "")], strict=True):
            if state:
                parts.append(f'<rect class="state {state}" x="{_x(t, tl):.1f}" y="{y + 3}" '
                             f'width="{max(_x(t_next, tl) - _x(t, tl), 1):.1f}" height="{LANE - 6}" '
                             f'fill="{COLORS.get(state, "#999")}"><title>{state}</title></rect>')
        y += LANE
    y += 10
    for label, values in tl.series.items():
        low, high = min(v for _, v in values), max(v for _, v in values)
        # A constant signal is drawn across the middle of its chart.
        levels = [y + CHART / 2 if high == low else y + CHART - (v - low) / (high - low) * CHART for _, v in values]
        path = " ".join(f"{'M' if i == 0 else 'L'}{_x(t, tl):.1f},{levels[i]:.1f}"
                        for i, (t, v) in enumerate(values))
        parts.append(_text(LEFT - 6, y + CHART / 2, label))
        parts.append(_text(LEFT - 6, y + CHART / 2 + 13, f"{low:.3g} … {high:.3g}", size=10))
        parts.append(f'<rect x="{LEFT}" y="{y}" width="{WIDTH - LEFT - RIGHT}" height="{CHART}" fill="none" '
                     'stroke="#ddd"/>')
        parts.append(f'<path class="signal" d="{path}" fill="none" stroke="#0d6efd" stroke-width="1.5"/>')
        y += CHART + 10
    parts.append(f'<line x1="{LEFT}" y1="{y}" x2="{WIDTH - RIGHT}" y2="{y}" stroke="#333"/>')
    parts.append(_text(LEFT, y + 14, "0 s", "start"))
    parts.append(_text(WIDTH - RIGHT, y + 14, f"{tl.end - tl.start:.0f} s"))
    parts.append("</svg>")
    return "".join(parts)


def render(title: str, sections: list[tuple[Timeline, str]]) -> str:
    """The whole page: each timeline with a line of text under its heading (no external resources)."""
    body = "".join(f'<section class="drill"><h2>{html.escape(tl.title)}</h2><p>{html.escape(note)}</p>{svg(tl)}'
                   "</section>" for tl, note in sections)
    legend = "".join(f'<span style="background:{c};padding:0 6px;margin-right:8px">{s}</span>'
                     for s, c in COLORS.items())
    return (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title><style>"
            "body{font-family:sans-serif;margin:20px}svg text{font-family:sans-serif}</style></head><body>"
            f"<h1>{html.escape(title)}</h1><p>{legend}"
            '<span style="background:#cfe2ff;padding:0 6px">fault window</span></p>'
            f"{body}</body></html>\n")


def recording_report(source: str, states: list[State]) -> str:
    """The page for a replayed recording: every diagnosis's states, then each one's evidence over the recording."""
    start, end = states[0].time, states[-1].time
    overview = Timeline.from_states(f"recording {source}: every diagnosis", states, [], None)
    sections = [(overview, f"{len(states)} snapshots over {end - start:.0f} s")]
    for (rule_id, subject), rule in seen(states).items():
        if rule.kind == "lint":
            continue
        final = lane(states, rule_id, subject)[-1][1] or "resolved"
        tl = Timeline(f"{rule_id} · {subject}", start, end, lanes={rule_id: lane(states, rule_id, subject)},
                      series=dict(list(evidence_series(rule, subject, states).items())[:MAX_CHARTS]))
        last = next(d for s in reversed(states) for d in s.diagnoses if (d.rule.id, d.subject) == (rule_id, subject))
        sections.append((tl, f"{rule.kind}, {final} at the end: {last.summary}"))
    return render(f"kdiag diagnosis of {source}", sections)
