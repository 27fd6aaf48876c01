"""The rule engine: evaluate the catalog's rules over signals and track each diagnosis's state."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, NamedTuple

import cel

from kdiag.analysis.catalog import GLOBAL_SUBJECTS, KINDS, TEMPLATE_FIELD, Rule
from kdiag.analysis.signals import Signals

log = logging.getLogger(__name__)

DiagnosisState = Literal["pending", "firing"]
Key = tuple[str, str]  # (rule id, subject)


@dataclass(frozen=True)
class Diagnosis:
    """A rule whose condition holds for one subject: pending until `for` has passed, then firing."""

    rule: Rule
    subject: str
    since: float
    state: DiagnosisState = "pending"
    summary: str = ""
    evidence: dict[str, float | str] = field(default_factory=dict)
    ended: float | None = None
    brokers: frozenset[str] | None = None  # from the subject's `on_brokers`; None: not tied to brokers
    reaches: frozenset[str] = frozenset()  # from its `reaches_brokers`: brokers a symptom here holds back too

    def explains(self, symptom: Diagnosis) -> bool:
        """Whether this diagnosis's rule lists the symptom's, and they share a broker when both are tied to brokers; a
        symptom explaining another also reaches the brokers it holds back (a slow follower, its leaders' ISR churn)."""
        if symptom is self or symptom.rule.id not in self.rule.explains:
            return False
        if self.brokers is None or symptom.brokers is None:
            return True
        return bool((self.brokers | self.reaches if self.rule.kind == "symptom" else self.brokers) & symptom.brokers)

    def to_json(self) -> dict[str, Any]:
        """The contract shape of one diagnosis in `kdiag diagnose --format json`."""
        return {"rule": self.rule.id, "subject": self.subject, "kind": self.rule.kind,
                "severity": self.rule.severity, "state": self.state, "since": self.since,
                "summary": self.summary, "evidence": self.evidence, "remediation": self.rule.remediation,
                "explains": self.rule.explains}


def render(template: str, scope: dict[str, Signals]) -> str:
    """A summary template with {it.signal:format} fields filled; unknown values print as '?'."""
    def fill(m: re.Match[str]) -> str:
        value = scope.get(m.group(1), {}).get(m.group(2))
        if value is None:
            return "?"
        try:
            return format(value, (m.group(3) or ":")[1:])
        except (ValueError, TypeError):
            return str(value)

    return TEMPLATE_FIELD.sub(fill, template)


def _put(context: cel.Context, variables: dict[str, Signals]) -> None:
    """Hand variables to CEL, which takes only valid Unicode: a lone surrogate (a /sys name or link that was not UTF-8,
    as os.listdir and os.readlink decode it) goes in as U+FFFD; the subject keeps its real name everywhere else."""
    try:
        context.update(variables)
    except ValueError:
        context.update({var: {name: value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
                              if isinstance(value, str) else value for name, value in signals.items()}
                        for var, signals in variables.items()})


@dataclass(frozen=True)
class EngineState:
    """What one evaluation leaves for the next: the active diagnoses and those that resolved at it."""

    active: Mapping[Key, Diagnosis] = field(default_factory=dict)
    resolved: tuple[Diagnosis, ...] = ()

    def current(self) -> list[Diagnosis]:
        """The active diagnoses, causes first, then symptoms, then lints."""
        return sorted(self.active.values(), key=lambda d: (KINDS.index(d.rule.kind), d.rule.id, d.subject))


class _KindHeld(NamedTuple):
    """What one subject kind's last evaluation stood on and found."""

    signals: dict[str, Signals]  # the kind's signals (the same object while SignalCache held them)
    reads: list[Signals]  # the global subjects its rules read
    # Each subject's signals, what its kind's conditions read of them, and the rules holding for it.
    by_subject: dict[str, tuple[Signals, Signals, list[Rule]]]
    holding: list[tuple[Signals, list[Rule]]]  # the subjects some rule holds for


class Engine:
    """Evaluates a catalog over successive signal snapshots, keeping each diagnosis's state."""

    def __init__(self, rules: list[Rule], local_broker: int | None = None):
        self.rules = rules
        # A host-scope diagnosis not about given brokers is about this host's broker (kafka.local_broker_id).
        self.local_brokers = frozenset({str(local_broker)}) if local_broker is not None else None
        self._by_subject: dict[str, list[Rule]] = {}
        for rule in rules:
            self._by_subject.setdefault(rule.each, []).append(rule)
        # Every daemon sees every broker (metadata, configs), but a host-scope rule compares a broker with this host:
        # once the local broker is known, another broker's subject is left to the daemon on its own host.
        self._foreign_rules = {each: [r for r in rules if r.scope == "cluster"] for each, rules in self._by_subject.items()}
        self._failing: set[str] = set()
        # The global subjects each kind's conditions read: a subject whose inputs did not change holds the same rules.
        self._reads = {each: sorted({v for r in rules for v in r.program.variables()} & set(GLOBAL_SUBJECTS))
                       for each, rules in self._by_subject.items()}
        # Rules reading a global subject: when only the globals moved, a subject whose signals did not is judged again
        # by these alone (1,000 topics a cycle while the cluster's JMX moves, and two of the topic rules read it).
        self._on_globals = {r.id for r in rules if set(r.program.variables()) & set(GLOBAL_SUBJECTS)}
        # The signals a kind's conditions read: CEL is handed those, not the subject's every signal.
        self._fields = {each: None if any(r.it_reads is None for r in rules) else
                        frozenset().union(*(r.it_reads or () for r in rules))
                        for each, rules in self._by_subject.items()}
        self._held: dict[str, _KindHeld] = {}

    def evaluate(self, last: EngineState, t: float, signals: dict[str, dict[str, Signals]]) -> EngineState:
        """Every rule advanced from the last judgement to time t: the diagnoses active then, and the firing ones that ended."""
        globals_ = {g: next(iter(signals.get(g, {}).values()), {}) for g in GLOBAL_SUBJECTS}
        holding: dict[Key, Diagnosis] = {}
        held_now: dict[str, _KindHeld] = {}
        # Converting signals to CEL values is the expensive part: the globals once per cycle, `it` once per subject
        # (a fresh Context per subject cost 0.4 ms each on a 128-CPU host, 80 ms a cycle).
        context = cel.Context()
        _put(context, globals_)
        for each, rules in self._by_subject.items():
            subjects = signals.get(each, {})
            reads = [globals_[g] for g in self._reads[each]]
            kind = self._held.get(each)
            # A kind whose signals are the same object (kdiag.analysis.subject_kinds.SignalCache) and globals the same holds
            # the same rules: Kafka's thousands of topics and groups are not even walked between fetches.
            if kind is None or kind.signals is not subjects or kind.reads != reads:
                before = kind.by_subject if kind else {}
                same_globals = kind is not None and kind.reads == reads
                held = {}
                fields = self._fields[each]
                for sid, subject in subjects.items():
                    old = before.get(sid)
                    applied = rules if self._local(each, sid) else self._foreign_rules[each]
                    inputs = subject if fields is None else {k: subject[k] for k in fields if k in subject}
                    # An idle topic or group keeps what the conditions read from fetch to fetch (a group's lag in
                    # seconds moves, but no condition reads it): CEL runs only on change.
                    if old and (old[0] is subject or old[1] == inputs):
                        held[sid] = (subject, inputs, old[2] if same_globals else self._evaluate(
                            applied, context, inputs, [r for r in old[2] if r.id not in self._on_globals]))
                    else:
                        held[sid] = (subject, inputs, self._evaluate(applied, context, inputs))
                kind = _KindHeld(subjects, reads, held, [(subject, rules) for subject, _, rules in held.values() if rules])
            held_now[each] = kind
            for subject, held_rules in kind.holding:
                scope = {**globals_, "it": subject}
                for rule in held_rules:
                    d = self._hold(last.active.get((rule.id, str(subject.get("name", "")))), rule, subject, scope, t)
                    holding[(rule.id, d.subject)] = d
        self._held = held_now
        resolved = tuple(replace(d, ended=t) for k, d in last.active.items() if k not in holding and d.state == "firing")
        return EngineState(holding, resolved)

    def _local(self, each: str, sid: str) -> bool:
        """Whether host-scope rules apply to this subject: any but another host's broker."""
        return each != "broker" or self.local_brokers is None or sid in self.local_brokers

    def _evaluate(self, rules: list[Rule], context: cel.Context, inputs: Signals,
                  kept: list[Rule] | None = None) -> list[Rule]:
        """The rules holding for a subject whose conditions read `inputs`; with `kept` (those that held and read no
        global), only the others are run."""
        _put(context, {"it": inputs})
        if kept is None:
            return [rule for rule in rules if self._holds(rule, context)]
        ids = {r.id for r in kept}
        return [rule for rule in rules if rule.id in ids or (rule.id in self._on_globals and self._holds(rule, context))]

    def _hold(self, was: Diagnosis | None, rule: Rule, subject: Signals, scope: dict[str, Signals],
              t: float) -> Diagnosis:
        """The diagnosis of a rule holding for subject at t: `was`'s since kept, the rest as the scope says now."""
        since = was.since if was else t
        if "on_brokers" in subject:
            brokers: frozenset[str] | None = frozenset(str(subject["on_brokers"]).split(","))
        else:
            brokers = self.local_brokers if rule.scope == "host" else None
        reaches = frozenset(str(subject["reaches_brokers"]).split(",")) if "reaches_brokers" in subject else frozenset()
        return Diagnosis(rule, str(subject.get("name", "")), since,
                         "firing" if t - since >= rule.for_seconds else "pending", render(rule.summary, scope),
                         {(name if var == "it" else f"{var}.{name}"): scope[var][name]
                          for var, name in rule.evidence if name in scope[var]}, brokers=brokers, reaches=reaches)

    def _holds(self, rule: Rule, context: cel.Context) -> bool:
        try:
            result = rule.program.execute(context)
        except KeyError:
            return False  # a signal the condition needs is absent for this subject: not evidence of anything
        except Exception as e:  # one broken evaluation must not stop the others
            if rule.id not in self._failing:
                log.warning("rule %s (%s:%d) failed to evaluate: %s", rule.id, rule.file, rule.line, e)
                self._failing.add(rule.id)
            return False
        return result is True
