"""The text form of a diagnosis: causes grouped under the symptoms they explain (on the same broker).

Subjects, summaries, evidence, the host name and source errors carry outside strings (process names and command
lines, topic names, group ids, paths): each is printable() here, so none can move the cursor or retitle the terminal.
"""

from __future__ import annotations


from kdiag.core.finite import local_text
from kdiag.analysis.engine import Diagnosis
from kdiag.runtime.pipeline import State
from kdiag.core.quote import printable


# ANSI colours of severities and states on a terminal (NO_COLOR and pipes get plain text: the caller decides).
COLORS = {"critical": "1;31", "warning": "33", "info": "36", "firing": "31", "pending": "33"}


def _paint(text: str, key: str, color: bool) -> str:
    return f"\x1b[{COLORS[key]}m{text}\x1b[0m" if color and key in COLORS else text


def _when(t: float) -> str:
    return local_text(t, "%Y-%m-%d %H:%M:%S", "report")


def _value(v: float | str) -> str:
    return printable(v) if isinstance(v, str) else f"{v:.4g}"


def _block(d: Diagnosis, indent: str, color: bool) -> list[str]:
    severity, state = _paint(d.rule.severity, d.rule.severity, color), _paint(d.state, d.state, color)
    head = f"{indent}{d.rule.kind.upper()} {d.rule.id} [{severity}, {state} since {_when(d.since)}] {printable(d.subject)}"
    lines = [head, f"{indent}  {printable(d.summary)}"]
    if d.evidence:
        lines.append(f"{indent}  evidence: " + ", ".join(f"{printable(k)}={_value(v)}" for k, v in d.evidence.items()))
    lines.append(f"{indent}  fix: {d.rule.remediation}")
    return lines


def render_text(state: State, color: bool = False) -> str:
    """A human report: symptoms with the causes that explain them, then other causes, then lints; severities and
    states in colour when `color`."""
    symptoms = [d for d in state.diagnoses if d.rule.kind == "symptom"]
    causes = [d for d in state.diagnoses if d.rule.kind == "cause"]
    lints = [d for d in state.diagnoses if d.rule.kind == "lint"]
    lines = [f"kdiag on {printable(state.host)} at {_when(state.time)}: "
             f"{len(causes)} causes, {len(symptoms)} symptoms, {len(lints)} lints"]
    if not state.diagnoses:
        lines.append("nothing to report: no rule holds")
    placed: set[int] = set()
    # Each symptom against the diagnoses whose rules name it: against every one took 3 s at 10,000 lagging groups.
    by_target: dict[str, list[Diagnosis]] = {}
    for c in [*causes, *symptoms]:
        for target in dict.fromkeys(c.rule.explains):
            by_target.setdefault(target, []).append(c)
    for s in symptoms:
        lines += ["", *_block(s, "", color)]
        explaining = [c for c in by_target.get(s.rule.id, []) if c.explains(s)]
        if explaining:
            lines.append("  explained by:")
            for c in explaining:
                lines += _block(c, "    ", color)
                placed.add(id(c))
        else:
            lines.append("  no known cause holds: see the remediation")
    rest = [c for c in causes if id(c) not in placed]
    if rest:
        lines += ["", "causes:" if symptoms else "causes found:"]
        for c in rest:
            lines += _block(c, "  ", color)
    if lints:
        lines += ["", "configuration lints:"]
        for d in lints:
            lines += _block(d, "  ", color)
    for r in state.refused_brokers():
        lines += ["", f"not taken for a broker: pid {r['pid']} ({printable(r['comm'])}): {printable(r['why'])}"]
    failing = state.failing_sources()
    if failing:
        lines += ["", "sources that could not be read (the rules they blind cannot hold while they fail):"]
        lines += [f"  {printable(f['collector'])} ({printable(f['error'])}): blinds "
                  f"{', '.join(f['blinds']) or 'no rule'}" for f in failing]
    return "\n".join(lines) + "\n"
