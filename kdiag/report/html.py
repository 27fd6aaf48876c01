"""The HTML reports of a recording (`diagnose --format html`) and of drills (`drill run --html`), drawn by report.page."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from kdiag.report.host import host_section
from kdiag.report.page import EvidenceHistory, diagnoses_html, document, legend
from kdiag.report.plots import clock, shown
from kdiag.runtime.pipeline import State


@dataclass
class Timeline:
    """One run of states to report: its diagnoses' histories, the last state, and the fault window a drill made."""

    title: str
    history: EvidenceHistory
    last: State | None
    fault: tuple[float, float] | None = None

    @classmethod
    def from_states(cls, title: str, states: list[State], focus: list[str] | None,
                    fault: tuple[float, float] | None) -> Timeline:
        """Every diagnosis seen; with a focus (a drill's rules), lints only when focused (standing lints of the machine
        say nothing about a fault)."""
        history = EvidenceHistory.of(states)
        for key in [k for k, r in history.rules.items() if focus is not None and r.kind == "lint" and r.id not in focus]:
            history.forget(key)
        return cls(title, history, states[-1] if states else None, fault)

    def html(self, note: str) -> str:
        """The section: heading, note, time span, the diagnoses."""
        span = (f"{clock(self.history.start)} to {clock(self.history.end)}"
                if self.history.end >= self.history.start else "no states")
        fault = f"; fault injected {clock(self.fault[0])} to {clock(self.fault[1])}" if self.fault else ""
        return (f'<section class="run"><h2>{shown(self.title)}</h2><p>{shown(note)}</p>'
                f'<p class="facts">{span}{fault}</p>{legend(bool(self.fault))}'
                f"{diagnoses_html(self.history, self.last, self.fault)}</section>")


def frozen(state: State) -> State:
    """A copy of the state whose diagnoses later steps cannot change (the engine updates them in place)."""
    return dataclasses.replace(state, diagnoses=[dataclasses.replace(d) for d in state.diagnoses])


def render(title: str, sections: list[tuple[Timeline, str]], host: State | None = None) -> str:
    """The whole report: each timeline under its note, then the host of `host` when given."""
    body = "".join(tl.html(note) for tl, note in sections)
    return document(title, body + (host_section(host) if host else ""))


def recording_report(source: str, states: list[State]) -> str:
    """The report of a replayed recording: every diagnosis with its evidence over the recording, then the host."""
    start, end = (states[0].time, states[-1].time) if states else (0.0, 0.0)
    timeline = Timeline.from_states(f"recording {source}", states, None, None)
    return render(f"kdiag diagnosis of {source}", [(timeline, f"{len(states)} snapshots over {end - start:.0f} s")],
                  states[-1] if states else None)
