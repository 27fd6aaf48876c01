"""What drills showed: per-drill results, the timings and false attributions read from monitor rows, the table."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kdiag.analysis.catalog import Rule
from kdiag.tools.drill.catalog import Drill
from kdiag.runtime.pipeline import State
from kdiag.report.html import Timeline


@dataclass
class DrillResult:
    """What one drill showed: detection, timings from the injection (resolved: from the revert), the revert."""

    name: str
    expected: list[str]
    detected: bool = False
    seconds_to_pending: float | None = None
    seconds_to_firing: float | None = None
    seconds_to_resolved: float | None = None
    seconds_to_alert: float | None = None
    reverted: bool = False
    false_attributions: list[str] = field(default_factory=list)
    failed_checks: list[str] = field(default_factory=list)
    error: str = ""
    replayed: str = ""
    rule_for_seconds: dict[str, float] = field(default_factory=dict)  # each expected rule's `for`
    intervals: dict[str, float] = field(default_factory=dict)  # how often kdiag looked: cycle, JMX poll, signal window
    timeline: Timeline | None = None

    def not_injected(self, error: str = "") -> None:
        """Nothing was injected, so nothing is left to revert; error says why (none: the run was interrupted)."""
        self.reverted = True
        self.error = error or self.error

    def failed(self, error: str) -> None:
        """The drill went wrong (its injection, its revert, an alert that never came); the first error stays."""
        self.error = self.error or error

    def revert_done(self) -> None:
        """The fault is reverted."""
        self.reverted = True

    def alerted_after(self, seconds: float | None) -> None:
        """Alertmanager had an alert for each expected rule this long after the injection (None: not within the wait)."""
        self.seconds_to_alert = seconds

    def measured(self, pending: float | None, firing: float | None, resolved: float | None,
                 false_attributions: list[str], failed_checks: list[str], timeline: Timeline) -> None:
        """What the monitor's states showed: seconds to pending, to firing (detected) and to resolved, the causes
        wrongly attributed, the checks that never held, and the timeline."""
        self.seconds_to_pending, self.seconds_to_firing, self.seconds_to_resolved = pending, firing, resolved
        self.detected = firing is not None
        self.false_attributions, self.failed_checks, self.timeline = false_attributions, failed_checks, timeline

    @property
    def passed(self) -> bool:
        return (self.detected and self.reverted and not self.false_attributions and not self.failed_checks
                and not self.error)

    def notes(self) -> list[str]:
        """What went wrong, and where a replayed drill's recording is."""
        notes = [f"false attributions: {', '.join(self.false_attributions)}"] if self.false_attributions else []
        notes += [f"checks failed: {'; '.join(self.failed_checks)}"] if self.failed_checks else []
        notes += [self.error] if self.error else []
        notes += [] if self.detected or self.error else [f"{', '.join(self.expected)} did not fire"]
        return notes + ([f"replayed {self.replayed}"] if self.replayed else [])

    def to_json(self) -> dict[str, Any]:
        """One drill in `kdiag drill run --json`."""
        keys = ("name", "expected", "detected", "seconds_to_pending", "seconds_to_firing", "seconds_to_alert",
                "seconds_to_resolved", "reverted", "false_attributions", "failed_checks", "error", "replayed",
                "rule_for_seconds", "intervals")
        return {**{k: getattr(self, k) for k in keys}, "passed": self.passed}


def first_time(rows: list[tuple[float, set[tuple[str, str, str]]]], rules: list[str], states: tuple[str, ...],
               since: float) -> float | None:
    """Seconds after `since` by which every rule of `rules` had been seen in one of `states` (on any subject)."""
    # Each rule on its own: a loss is an event whose symptom clears after a window, while its cause goes on firing.
    firsts = [next((t for t, active in rows if t >= since and any(r == rule and s in states for r, _, s in active)),
                   None) for rule in rules]
    found = [t for t in firsts if t is not None]
    return round(max(found) - since, 1) if found and len(found) == len(firsts) else None


def false_attributions(rows: list[tuple[float, set[tuple[str, str, str]]]], owned: Callable[[str, str], bool],
                       causes: set[str], baseline: set[tuple[str, str]], since: float) -> list[str]:
    """Causes that fired after `since` on a (rule, subject) no drill owns and were not already active at the baseline."""
    found = {f"{r} ({s})" for t, active in rows if t >= since for r, s, state in active
             if state == "firing" and r in causes and not owned(r, s) and (r, s) not in baseline}
    return sorted(found)


def owner(drills: list[Drill]) -> Callable[[str, str], bool]:
    """Whether a (rule, subject) is what one of the drills expects, on a subject it names."""
    return lambda rule, subject: any(d.owns(rule, subject) for d in drills)


def accounted(drills: list[Drill]) -> Callable[[str, str], bool]:
    """Whether a (rule, subject) is what one of the drills expects or names as a side effect of its fault."""
    return lambda rule, subject: any(d.accounts_for(rule, subject) for d in drills)


def owned_rows(rows: list[tuple[float, set[tuple[str, str, str]]]], drill: Drill) -> list[tuple[float, set[tuple[str, str, str]]]]:
    """The rows without the drill's expected rules on subjects it does not name (those detect nothing)."""
    return [(t, {(r, s, st) for r, s, st in active if r not in drill.expected or drill.owns(r, s)})
            for t, active in rows]


def waves(drills: list[Drill], serial: bool = False) -> list[list[Drill]]:
    """Consecutive drills that may share the cluster run as one wave; the others one at a time."""
    out: list[list[Drill]] = []
    for d in drills:
        if not serial and d.shares and out and out[-1][0].shares:
            out[-1].append(d)
        else:
            out.append([d])
    return out


def rule_for(rules: Iterable[Rule], drill: Drill) -> dict[str, float]:
    """The `for` of each rule the drill expects."""
    return {r.id: r.for_seconds for r in rules if r.id in drill.expected}


def active_of(state: State) -> set[tuple[str, str, str]]:
    """(rule, subject, state) of every active diagnosis."""
    return {(d.rule.id, d.subject, d.state) for d in state.diagnoses}


def table(results: list[DrillResult]) -> str:
    """The terminal report: one row per drill."""
    def num(v: float | None) -> str:
        return "-" if v is None else f"{v:.1f}"

    lines = [f"{'drill':22} {'expected':34} {'detected':8} {'pending':>7} {'firing':>7} {'resolved':>8} "
             f"{'reverted':8} result"]
    for r in results:
        verdict = "ok" if r.passed else "FAILED"
        notes = r.notes()
        lines.append(f"{r.name:22} {','.join(r.expected):34} {'yes' if r.detected else 'no':8} "
                     f"{num(r.seconds_to_pending):>7} {num(r.seconds_to_firing):>7} {num(r.seconds_to_resolved):>8} "
                     f"{'yes' if r.reverted else 'no':8} {verdict}" + (f"  ({'; '.join(notes)})" if notes else ""))
    return "\n".join(lines) + "\n"
