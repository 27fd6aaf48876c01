"""The one HTML renderer: the daemon's live page at `/`, `diagnose --format html` and the drill report.

Causes come first with the symptoms they explain nested under them; each diagnosis shows its summary, evidence with
units, fix, since when, and plots of its evidence. Every outside string (subjects, summaries, hostnames, command lines,
errors) goes through plots.shown (printable, then html.escape), and the page loads nothing: its style, plots and script are inline.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import math
import threading
from collections import deque
from collections.abc import Callable, Reversible, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

from kdiag.core.finite import dumps
from kdiag.analysis.catalog import GLOBAL_SUBJECTS, Rule
from kdiag.analysis.engine import Diagnosis
from kdiag.analysis.subject_cap import RuleSubjects, SubjectCap
from kdiag.report.host import host_section
from kdiag.report.plots import STATE_COLORS, clock, formatted, plot, shown
from kdiag.runtime.pipeline import State

log = logging.getLogger(__name__)
MAX_PLOTS = 6  # evidence plots per diagnosis
Key = tuple[str, str]  # (rule id, subject)

STYLE = """
*{box-sizing:border-box}body{font:15px/1.45 system-ui,sans-serif;margin:0;color:#1d1d1f;background:#f6f7f9}
header,main{max-width:1100px;margin:0 auto;padding:12px 16px}h1{font-size:1.4em;margin:.3em 0}
h2{font-size:1.15em;margin:1.2em 0 .4em}h3{font-size:1em;margin:1em 0 .3em}
p,td,th,li,h1,h2,h3,summary,dd,dt{overflow-wrap:anywhere}
.diagnosis{background:#fff;border:1px solid #ddd;border-left:5px solid #888;border-radius:4px;margin:10px 0;padding:8px 12px}
.diagnosis.firing{border-left-color:#c9302c}.diagnosis.pending{border-left-color:#b06f00}
.diagnosis.resolved{border-left-color:#3c8d40}.diagnosis .diagnosis{margin-left:8px}
.head{display:flex;flex-wrap:wrap;gap:4px 10px;align-items:baseline}.rule{font-weight:600}
.badge{font-size:.8em;padding:0 6px;border-radius:3px;background:#e8e8ea}.badge.firing{background:#f6d4d3}
.badge.pending{background:#f7e3c2}.badge.critical{background:#c9302c;color:#fff}.badge.warning{background:#f0ad4e}
.fix{background:#eef5ee;padding:4px 8px;border-radius:3px}.scroll{overflow-x:auto}
table{border-collapse:collapse;font-size:.9em}th{overflow-wrap:normal}
td,th{border-bottom:1px solid #e3e3e3;padding:2px 8px;text-align:left}
.plots{display:grid;grid-template-columns:repeat(auto-fill,minmax(280px,1fr));gap:6px}
.plots figure{margin:0}.plots figcaption{font-size:.85em;color:#444}svg.plot{width:100%;height:auto;display:block}
svg.plot text{font:10px system-ui,sans-serif;fill:#333}.ok{color:#2d7a31}.bad{color:#c9302c}.none{color:#666}
#status{font-size:.85em;color:#555}.legend span{padding:0 6px;margin-right:8px;border-radius:3px}
.legend .pending{background:#f7e3c2}.legend .firing{background:#f6d4d3}.legend .fault{background:#d6e2f5}
"""

# Fetches the daemon's JSON every cycle and swaps the main part in: no reload, and without script the page as served
# is a correct snapshot. The fragment is the server's own escaped rendering.
SCRIPT = """
(function(){var main=document.getElementById('main'),status=document.getElementById('status');
var every=Math.max(1000,(+main.dataset.interval||10)*1000);
status.textContent='live: updates every '+every/1000+' s';
function tick(){fetch('api/page',{cache:'no-store',credentials:'same-origin'}).then(function(r){
if(!r.ok)throw new Error('HTTP '+r.status);return r.json();}).then(function(p){main.innerHTML=p.main;
status.textContent='live: updated '+p.updated;}).catch(function(e){status.textContent='update failed: '+e.message;})
.then(function(){setTimeout(tick,every);});}
setTimeout(tick,every);})();
"""


def _digest(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


# Only the page's own style and script run, and it may fetch only its own origin: escaping is the defence, this the
# second one.
POLICY = (f"default-src 'none'; style-src {_digest(STYLE)}; script-src {_digest(SCRIPT)}; connect-src 'self'; "
          "img-src 'none'; base-uri 'none'; form-action 'none'")


def evidence_values(rule: Rule, subject: str, state: State) -> dict[str, float]:
    """The rule's numeric evidence signals for the subject in one state, named as the engine quotes them."""
    it = next((v for v in state.signals.get(rule.each, {}).values() if str(v.get("name", "")) == subject), {})
    scope = {**{g: next(iter(state.signals.get(g, {}).values()), {}) for g in GLOBAL_SUBJECTS}, "it": it}
    values = {}
    for var, name in rule.evidence:
        value = scope.get(var, {}).get(name)
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            values[name if var == "it" else f"{var}.{name}"] = float(value)
    return values


@dataclass
class EvidenceHistory:
    """Each tracked diagnosis's state and evidence at every cycle, over the last `window` seconds.

    A diagnosis is tracked from the cycle it first holds (or from the start, for a report over known states) until
    `window` seconds after it last held.
    """

    window: float = math.inf
    start: float = math.inf
    end: float = -math.inf
    rules: dict[Key, Rule] = field(default_factory=dict)
    last: dict[Key, Diagnosis] = field(default_factory=dict)
    lanes: dict[Key, deque[tuple[float, str]]] = field(default_factory=dict)
    series: dict[Key, dict[str, deque[tuple[float, float]]]] = field(default_factory=dict)
    _held: dict[Key, float] = field(default_factory=dict)
    _times: deque[float] = field(default_factory=deque)

    def track(self, d: Diagnosis) -> None:
        """Follow this diagnosis from now on (also before it is active again)."""
        key = (d.rule.id, d.subject)
        self.rules[key] = d.rule
        self.last[key] = d
        self.lanes.setdefault(key, deque())
        self.series.setdefault(key, {})

    def record(self, state: State) -> None:
        """Add one cycle: the state of every tracked diagnosis and the values of its evidence."""
        active = {(d.rule.id, d.subject): d for d in state.diagnoses}
        for d in active.values():
            self.track(d)
            self._held[(d.rule.id, d.subject)] = state.time
        self._times.append(state.time)
        self.end = state.time
        while self._times and self._times[0] < state.time - self.window:
            self._times.popleft()
        self.start = self._times[0]
        for key, rule in list(self.rules.items()):
            if self._held.get(key, state.time) < state.time - self.window:
                self.forget(key)
                continue
            now = active.get(key)
            self.lanes[key].append((state.time, now.state if now else ""))
            for name, value in evidence_values(rule, key[1], state).items():
                self.series[key].setdefault(name, deque()).append((state.time, value))
            _trim(self.lanes[key], self.start)
            for points in self.series[key].values():
                _trim(points, self.start)

    @classmethod
    def of(cls, states: list[State]) -> EvidenceHistory:
        """The history of a run of states, every diagnosis tracked from the first state."""
        history = cls()
        for s in states:
            for d in s.diagnoses:
                history.track(d)
        for s in states:
            history.record(s)
        return history

    def forget(self, key: Key) -> None:
        """Stop showing this diagnosis."""
        for table in (self.rules, self.last, self.lanes, self.series, self._held):
            table.pop(key, None)


_Point = TypeVar("_Point")


def _trim(points: deque[tuple[float, _Point]], start: float) -> None:
    while points and points[0][0] < start:
        points.popleft()


def _reported_by(d: Diagnosis, state: State | None) -> str:
    if d.rule.scope != "cluster" or state is None or (state.reporting.reporting and not state.reporting.why):
        return ""
    now = state.reporting
    signed = "" if now.authenticated or not now.why else " (unauthenticated: no kafka.coordination_key_file)"
    if now.reporting:
        why = "" if now.why == "elected" else f": {now.why}"
        return f'<p class="reported">cluster scope: reported by this daemon{shown(why + signed)}</p>'
    who = now.reporter
    name = "an unknown daemon" if who is None else who.host + ("" if who.broker_id is None else f" (broker {who.broker_id})")
    return f'<p class="reported">cluster scope: reported_by {shown(name + signed)}</p>'


def _when(d: Diagnosis, now: str, lane: Reversible[tuple[float, str]]) -> str:
    """'firing since 10:01:05', or for one no longer active 'resolved: held 10:01:05 to 10:03:10'."""
    if now:
        return f"{now} since {clock(d.since)}"
    last = next((t for t, state in reversed(lane) if state), None)
    return f"resolved: held {clock(d.since)} to {clock(last)}" if last is not None else "resolved"


def diagnosis_html(d: Diagnosis, now: str, history: EvidenceHistory, state: State | None,
                   fault: tuple[float, float] | None, nested: str = "") -> str:
    """One diagnosis: heading, summary, evidence with units, fix, plots; `now` is its state at the end."""
    key = (d.rule.id, d.subject)
    status = now or "resolved"
    evidence = "".join(f"<tr><th>{shown(k)}</th><td>{shown(formatted(k, v))}</td></tr>" for k, v in d.evidence.items())
    plots = "".join(f"<figure><figcaption>{shown(name)}</figcaption>"
                    f"{plot(name, list(points), history.start, history.end, fault, list(history.lanes.get(key, ())))}"
                    "</figure>" for name, points in list(history.series.get(key, {}).items())[:MAX_PLOTS])
    return (f'<article class="diagnosis {shown(d.rule.kind)} {status}" data-rule="{shown(d.rule.id)}" '
            f'data-subject="{shown(d.subject)}"><div class="head"><span class="badge">{shown(d.rule.kind)}</span>'
            f'<span class="rule">{shown(d.rule.id)}</span><span class="subject">{shown(d.subject)}</span>'
            f'<span class="badge {shown(d.rule.severity)}">{shown(d.rule.severity)}</span>'
            f'<span class="badge {status}">{_when(d, now, history.lanes.get(key, ()))}</span></div>'
            f'<p class="summary">{shown(d.summary)}</p>'
            + (f'<div class="scroll"><table class="evidence">{evidence}</table></div>' if evidence else "")
            + f'<p class="fix"><strong>Fix:</strong> {shown(d.rule.remediation)}</p>' + _reported_by(d, state)
            + (f'<div class="plots">{plots}</div>' if plots else "") + nested + "</article>")


def diagnoses_html(history: EvidenceHistory, state: State | None, fault: tuple[float, float] | None = None) -> str:
    """Causes with the symptoms they explain nested, then unexplained symptoms, then lints."""
    now = {key: (lane[-1][1] if lane else "") for key, lane in history.lanes.items()}
    ds = sorted(history.last.values(), key=lambda d: (now[(d.rule.id, d.subject)] == "", d.rule.id, d.subject))
    causes = [d for d in ds if d.rule.kind == "cause"]
    symptoms = [d for d in ds if d.rule.kind == "symptom"]
    lints = [d for d in ds if d.rule.kind == "lint"]
    explained: set[int] = set()

    def one(d: Diagnosis, path: frozenset[int] = frozenset()) -> str:
        """d with the symptoms it explains nested (a symptom may explain another: a slow replica, its leaders' ISR
        churn), none twice on one path."""
        under = [s for s in symptoms if id(s) not in path and d.explains(s)]
        explained.update(id(s) for s in under)
        nested = "".join(one(s, path | {id(d)}) for s in under)
        return diagnosis_html(d, now[(d.rule.id, d.subject)], history, state, fault,
                              "<h3>explains</h3>" + nested if nested else "")

    parts = [one(c) for c in causes]
    # A symptom another symptom explains shows under it; the rest stand alone unless a cause explains them.
    tops = [(s, one(s)) for s in symptoms if not any(o.explains(s) for o in symptoms)]
    alone = [html for s, html in tops if id(s) not in explained]
    sections = [("Causes", "".join(parts)), ("Symptoms no known cause explains", "".join(alone)),
                ("Configuration lints", "".join(one(d) for d in lints))]
    body = "".join(f"<h2>{title}</h2>{html}" for title, html in sections if html)
    return body or '<p class="none">Nothing to report: no rule holds.</p>'


def legend(fault: bool) -> str:
    """What the plots' bands mean (the fault window only where a drill made one)."""
    return ('<p class="legend">plots: ' + "".join(f'<span class="{s}">{s}</span>' for s in STATE_COLORS)
            + ('<span class="fault">fault window</span>' if fault else "") + "</p>")


def document(title: str, main: str, interval: float = 0.0) -> str:
    """The whole self-contained page; with an interval, the script that refreshes `main` every cycle."""
    script = f"<script>{SCRIPT}</script>" if interval else ""
    status = ('<p id="status">snapshot; live updates need script</p><p class="facts"><a href="/metrics">metrics</a>'
              ' · <a href="/api/diagnoses">diagnoses as JSON</a></p>' if interval else "")
    return ('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{POLICY}">'
            '<meta name="viewport" content="width=device-width,initial-scale=1">'
            f"<title>{shown(title)}</title><style>{STYLE}</style></head><body><header><h1>{shown(title)}</h1>"
            f'{status}</header><main id="main" data-interval="{interval:g}">{main}</main>{script}</body></html>\n')


def live_main(state: State, history: EvidenceHistory, kafka_version: str = "", off: Sequence[str] = (),
              counts: Sequence[RuleSubjects] = ()) -> str:
    """The part of the live page the script swaps in: the diagnoses (and how many `counts` says are not shown), then
    the host (with the collectors `off`)."""
    cluster = f", cluster {shown(state.cluster)}" if state.cluster else ""
    head = (f'<p class="facts">{shown(state.host)}{cluster}: snapshot at {clock(state.time)}; plots cover '
            f"{clock(history.start)} to {clock(history.end)}</p>{legend(False)}")
    return (head + blind_html(state) + omitted_html(counts) + diagnoses_html(history, state)
            + host_section(state, kafka_version, off))


def omitted_html(counts: Sequence[RuleSubjects]) -> str:
    """The rules with more subjects than the page shows (diagnosis.max_subjects_per_rule): how many of each state."""
    rows = "".join(f"<li><b>{shown(c.rule)}</b>: {sum(c.subjects.values())} subjects, {c.omitted['firing']} firing "
                   f"and {c.omitted['pending']} pending not shown</li>" for c in counts if any(c.omitted.values()))
    return (f'<h2>Only the worst subjects of each rule are shown</h2><p class="facts">diagnosis.max_subjects_per_rule; '
            f'<a href="/api/diagnoses">diagnoses as JSON</a> lists every one</p><ul class="blind">{rows}</ul>'
            if rows else "")


def blind_html(state: State) -> str:
    """The failing collectors and the rules each blinds: those rules cannot hold while it fails, whatever the truth."""
    rows = "".join(f"<li><b>{shown(f['collector'])}</b> fails ({shown(f['error'])}): blinds "
                   f"{', '.join(shown(r) for r in f['blinds']) or 'no rule'}</li>" for f in state.failing_sources())
    return (f'<h2>Sources failing: kdiag is blind to what they read</h2><ul class="blind">{rows}</ul>'
            if rows else "")


# Draws one cycle's page at `/` and its JSON at `/api/page`; None (logged once) when it cannot be drawn.
PageDraw = Callable[[], "tuple[bytes, bytes] | None"]


class LivePage:
    """The daemon's page: each cycle recorded into the history window; drawn when someone asks (serve/exporter.py)."""

    def __init__(self, window: float, kafka_version: str = "", off: Sequence[str] = (), max_subjects: int = 0):
        self.history = EvidenceHistory(window)
        # At 10,000 lagging groups a page of every diagnosis took 30 s and 35 MB a cycle: the worst of each rule only.
        self.cap = SubjectCap(max_subjects)
        self.kafka_version = kafka_version  # from the broker's class path, when its command line does not name it
        self.off = off  # the registered collectors that do not run
        self._failing = False
        self._lock = threading.Lock()  # the cycle records, a web server's thread draws

    def update(self, state: State, interval: float) -> PageDraw | None:
        """Record this cycle; how to draw its page (None, logged once, when it cannot even be recorded)."""
        try:
            kept, counts = self.cap.select(state.diagnoses)
            if len(kept) < len(state.diagnoses):
                # A diagnosis left out is still active: not shown as resolved, not shown at all.
                shown_keys = {(d.rule.id, d.subject) for d in kept}
                for d in state.diagnoses:
                    if (d.rule.id, d.subject) not in shown_keys:
                        self.history.forget((d.rule.id, d.subject))
                state = replace(state, diagnoses=kept)
            with self._lock:
                self.history.record(state)
        except Exception as e:  # the page never holds back the cycle: the last one drawn stays
            self._failed(e)
            return None
        return lambda: self._draw(state, interval, counts)

    def _draw(self, state: State, interval: float, counts: list[RuleSubjects]) -> tuple[bytes, bytes] | None:
        try:
            with self._lock:
                main = live_main(state, self.history, self.kafka_version, self.off, counts)
        except Exception as e:  # the last page drawn stays
            self._failed(e)
            return None
        self._failing = False
        page = document(f"kdiag on {state.host}", main, interval).encode("utf-8", "backslashreplace")
        data = dumps({"time": state.time, "updated": clock(state.time), "main": main}, "page").encode("utf-8", "backslashreplace")
        return page, data

    def _failed(self, e: Exception) -> None:
        if not self._failing:
            log.warning("the page at / could not be drawn, the last one stays: %s: %s", type(e).__name__, e)
        self._failing = True
