"""The rule engine: load YAML rules with CEL conditions, evaluate them over signals, track their state."""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import cel
import yaml

from kdiag import yamlsafe
from kdiag.quote import cut, quote
from kdiag.signals import Signals
from kdiag.subject_kinds import SUBJECT_KINDS

log = logging.getLogger(__name__)

KINDS = ("cause", "symptom", "lint")
SEVERITIES = ("info", "warning", "critical")
SCOPES = ("host", "cluster")
# A rule's scope when it names none: facts every daemon of a cluster sees alike are the cluster's; the rest
# (this host, its local broker's JMX, its own probe) are the host's.
CLUSTER_SUBJECTS = ("topic", "group", "cluster")
RULE_KEYS = {"id", "kind", "severity", "each", "scope", "when", "for", "summary", "evidence", "explains",
             "remediation", "source"}
REQUIRED_KEYS = ("id", "kind", "severity", "each", "when", "summary", "remediation", "source")
TEXT_KEYS = REQUIRED_KEYS
LIST_KEYS = ("evidence", "explains")
# The longest shipped condition is ~200 characters; the CEL library crashes the process (SIGSEGV) compiling
# ~100 KB of `1 + 1 + ...`, and 4096 characters of every nesting tried compile and run in a thread.
MAX_WHEN = 4096
MAX_FOR = 86400.0
# `it` is the subject a rule runs for; `host` and `cluster` are always there for cross-references.
GLOBAL_SUBJECTS = ("host", "cluster")
REFERENCE = re.compile(r"\b([A-Za-z_]\w*)\s*\.\s*([A-Za-z_]\w*)")
STRING_LITERAL = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
TEMPLATE_FIELD = re.compile(r"\{(\w+)\.(\w+)(:[^}]*)?\}")
DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)?$")
DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def default_rules_dir() -> Path:
    """The catalog shipped inside the package."""
    return Path(__file__).parent / "rules"


def parse_duration(text: str | float) -> float:
    """Seconds in '20s', '1m', '500ms', '2h' or a bare number of seconds (callers check the range)."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        number, unit = text, "s"
    elif isinstance(text, str) and (m := DURATION.match(text.strip())):
        number, unit = m.group(1), m.group(2) or "s"
    else:
        raise ValueError(f"{quote(text)} is not a duration like 30s, 5m or 500ms")
    try:
        return float(number) * DURATION_UNITS[unit]
    except OverflowError:  # an integer beyond float: outside every range
        return math.inf


@dataclass
class RuleError:
    """One problem in a rule file, with its position."""

    file: str
    line: int
    column: int
    rule: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}:{self.column}" if self.line else self.file
        return f"{where}: rule {quote(self.rule)}: {self.message}" if self.rule else f"{where}: {self.message}"


class CatalogError(Exception):
    """A rule catalog that cannot be used, with every problem found."""

    def __init__(self, errors: list[RuleError]):
        super().__init__("\n".join(map(str, errors)))
        self.errors = errors


@dataclass
class Rule:
    """One compiled rule."""

    id: str
    kind: str
    severity: str
    each: str
    when: str
    program: Any
    summary: str
    remediation: str
    source: str
    for_seconds: float = 0.0
    evidence: list[tuple[str, str]] = field(default_factory=list)
    explains: list[str] = field(default_factory=list)
    file: str = ""
    line: int = 0
    scope: str = "host"


def default_scope(each: str) -> str:
    """The scope of a rule over `each` subjects that names none."""
    return "cluster" if each in CLUSTER_SUBJECTS else "host"


def references(expression: str) -> list[tuple[str, str, int]]:
    """(subject, signal, offset) of every `name.field` in a CEL expression, string literals ignored."""
    blanked = STRING_LITERAL.sub(lambda m: " " * len(m.group(0)), expression)
    return [(m.group(1), m.group(2), m.start()) for m in REFERENCE.finditer(blanked)]


def check_reference(each: str, var: str, name: str) -> str | None:
    """Why `var.name` is not a signal a rule over `each` subjects can read, or None when it is."""
    kind = each if var == "it" else var
    if var != "it" and var not in GLOBAL_SUBJECTS:
        return f"unknown variable '{var}' (use it.<signal> or {', '.join(g + '.<signal>' for g in GLOBAL_SUBJECTS)})"
    if name not in SUBJECT_KINDS[kind].schema:
        return f"unknown signal '{var}.{name}': {kind} signals are {', '.join(sorted(SUBJECT_KINDS[kind].schema))}"
    return None


class _Loader:
    """Validates and compiles the rules of one file, collecting errors with positions."""

    def __init__(self, path: Path):
        self.path = path
        self.errors: list[RuleError] = []
        self.lines: list[str] = []

    def error(self, node: yaml.Node, rule: str, message: str, offset: int = 0) -> None:
        line, column = self.position(node, offset)
        self.errors.append(RuleError(str(self.path), line, column, rule, message))

    def position(self, node: yaml.Node, offset: int) -> tuple[int, int]:
        """1-based file line and column of the character at `offset` in a scalar's value."""
        mark = node.start_mark
        style = getattr(node, "style", None)
        if style in ("'", '"'):
            return mark.line + 1, mark.column + 2 + offset  # past the opening quote
        if style not in (">", "|"):
            return mark.line + 1, mark.column + 1 + offset
        # Block scalar: its content starts on the next line; folding or not, each line ends in one character.
        content = [line for line in self.lines[mark.line + 1:]]
        indent = next((len(x) - len(x.lstrip()) for x in content if x.strip()), 0)
        start = 0
        for i, raw in enumerate(content):
            text = raw[indent:]
            if offset <= start + len(text):
                return mark.line + 2 + i, indent + offset - start + 1
            start += len(text) + 1
        return mark.line + 1, mark.column + 1

    def load(self) -> list[Rule]:
        try:
            text, root = yamlsafe.compose(self.path)
        except yamlsafe.YamlError as e:
            self.errors.append(RuleError(e.path, e.line, e.column, "", e.message))
            return []
        self.lines = text.splitlines()
        if root is None:
            return []
        if not isinstance(root, yaml.SequenceNode):
            self.error(root, "", "a rule file is a YAML list of rules")
            return []
        return [r for node in root.value if (r := self.rule(node)) is not None]

    def rule(self, node: yaml.Node) -> Rule | None:
        if not isinstance(node, yaml.MappingNode):
            self.error(node, "", "each rule is a mapping with id, kind, severity, each, when, ...")
            return None
        try:
            data = yamlsafe.construct(node, self.path)
        except yamlsafe.YamlError as e:  # e.g. a list as a key
            self.errors.append(RuleError(e.path, e.line, e.column, "", e.message))
            return None
        nodes = {k.value: v for k, v in node.value}
        rid = data["id"] if isinstance(data.get("id"), str) else ""
        before = len(self.errors)
        for key, _ in node.value:
            if key.value not in RULE_KEYS:
                self.error(key, rid, f"unknown key {quote(key.value)} (expected one of {', '.join(sorted(RULE_KEYS))})")
        for key in REQUIRED_KEYS:
            if key not in data:
                self.error(node, rid, f"missing key '{key}'")
        if len(self.errors) > before:
            return None
        self.check_types(data, nodes, rid)
        if len(self.errors) > before:
            return None
        for key, allowed in (("kind", KINDS), ("severity", SEVERITIES), ("each", tuple(SUBJECT_KINDS)),
                             ("scope", SCOPES)):
            if key in data and data[key] not in allowed:
                self.error(nodes[key], rid, f"{key} {quote(data[key])} is not one of {', '.join(allowed)}")
        try:
            for_seconds = parse_duration(data.get("for", 0))
            if not 0 <= for_seconds <= MAX_FOR:  # also false for NaN
                raise ValueError(f"{quote(data['for'])} is out of range (expected from 0s to {MAX_FOR:g}s)")
        except ValueError as e:
            self.error(nodes["for"], rid, f"for: {e}")
            for_seconds = 0.0
        if len(self.errors) > before:
            return None
        program = self.condition(nodes["when"], rid, data["each"], data["when"])
        evidence = self.evidence(nodes.get("evidence"), rid, data["each"], data.get("evidence") or [])
        for var, name, offset in ((m.group(1), m.group(2), m.start()) for m in TEMPLATE_FIELD.finditer(data["summary"])):
            if problem := check_reference(data["each"], var, name):
                self.error(nodes["summary"], rid, f"summary: {problem}", offset)
        if len(self.errors) > before:
            return None
        return Rule(id=rid, kind=data["kind"], severity=data["severity"], each=data["each"], when=data["when"],
                    program=program, summary=data["summary"], remediation=data["remediation"].strip(),
                    source=data["source"], for_seconds=for_seconds, evidence=evidence,
                    explains=data.get("explains") or [], file=str(self.path),
                    line=node.start_mark.line + 1, scope=data.get("scope") or default_scope(data["each"]))

    def check_types(self, data: dict, nodes: dict[str, yaml.Node], rid: str) -> None:
        """Text where text is expected, lists of text for evidence and explains, a bounded condition."""
        for key in TEXT_KEYS:
            if not isinstance(data[key], str):
                self.error(nodes[key], rid, f"{key}: expected text, got {quote(data[key])}")
        for key in LIST_KEYS:
            value = data.get(key)
            if value is not None and not (isinstance(value, list) and all(isinstance(x, str) for x in value)):
                self.error(nodes[key], rid, f"{key}: expected a list of text, got {quote(value)}")
        if isinstance(data["when"], str) and len(data["when"]) > MAX_WHEN:
            self.error(nodes["when"], rid, f"when: {len(data['when'])} characters, more than {MAX_WHEN}")

    def condition(self, node: yaml.Node, rid: str, each: str, expression: str) -> Any:
        try:
            program = cel.compile(expression)
        except ValueError as e:
            m = re.search(r"<input>:(\d+):(\d+): (.*)", str(e))
            line, col, msg = (int(m.group(1)), int(m.group(2)), m.group(3)) if m else (1, 1, str(e))
            offset = sum(len(x) + 1 for x in expression.split("\n")[: line - 1]) + col - 1
            self.error(node, rid, f"when: CEL {cut(msg, 200)}", offset)
            return None
        for var in program.variables():
            if var not in ("it", *GLOBAL_SUBJECTS):
                self.error(node, rid, f"when: unknown variable '{var}'")
        for var, name, offset in references(expression):
            if var in ("it", *GLOBAL_SUBJECTS) and (problem := check_reference(each, var, name)):
                self.error(node, rid, f"when: {problem}", offset)
        return program

    def evidence(self, node: yaml.Node | None, rid: str, each: str, items: list) -> list[tuple[str, str]]:
        out = []
        for item in items:
            var, _, name = str(item).partition(".")
            problem = check_reference(each, var, name) if name else f"evidence {quote(item)} is not it.<signal>"
            if problem:
                self.error(node, rid, f"evidence: {problem}")
            else:
                out.append((var, name))
        return out


def load_catalog(paths: list[Path]) -> list[Rule]:
    """Rules from every *.yaml file in the given files or directories; CatalogError lists every problem."""
    files = sorted(f for p in paths for f in (sorted(Path(p).glob("*.yaml")) if Path(p).is_dir() else [Path(p)]))
    rules: list[Rule] = []
    errors: list[RuleError] = []
    for f in files:
        loader = _Loader(f)
        rules.extend(loader.load())
        errors.extend(loader.errors)
    seen: dict[str, Rule] = {}
    for r in rules:
        if r.id in seen:
            errors.append(RuleError(r.file, r.line, 1, r.id, f"duplicate id, first defined at {seen[r.id].file}:{seen[r.id].line}"))
        seen[r.id] = r
    ids = set(seen)
    for r in rules:
        for target in r.explains:
            if target not in ids:
                errors.append(RuleError(r.file, r.line, 1, r.id, f"explains unknown rule {quote(target)}"))
    if not files:
        errors.append(RuleError(", ".join(map(str, paths)), 0, 0, "", "no rule files (*.yaml) found"))
    if errors:
        raise CatalogError(errors)
    return rules


@dataclass
class Diagnosis:
    """A rule whose condition holds for one subject: pending until `for` has passed, then firing."""

    rule: Rule
    subject: str
    since: float
    state: str = "pending"
    summary: str = ""
    evidence: dict[str, float | str] = field(default_factory=dict)
    ended: float | None = None
    brokers: frozenset[str] | None = None  # from the subject's `on_brokers`; None: not tied to brokers

    def explains(self, symptom: Diagnosis) -> bool:
        """Whether this cause's rule lists the symptom's, and they share a broker when both are tied to brokers."""
        return symptom.rule.id in self.rule.explains and (
            self.brokers is None or symptom.brokers is None or bool(self.brokers & symptom.brokers))

    def to_json(self) -> dict[str, Any]:
        """The contract shape of one diagnosis in `kdiag diagnose --format json`."""
        return {"rule": self.rule.id, "subject": self.subject, "kind": self.rule.kind,
                "severity": self.rule.severity, "state": self.state, "since": self.since,
                "summary": self.summary, "evidence": self.evidence, "remediation": self.rule.remediation,
                "explains": self.rule.explains}


def render(template: str, scope: dict[str, Signals]) -> str:
    """A summary template with {it.signal:format} fields filled; unknown values print as '?'."""
    def fill(m: re.Match) -> str:
        value = scope.get(m.group(1), {}).get(m.group(2))
        if value is None:
            return "?"
        try:
            return format(value, (m.group(3) or ":")[1:])
        except (ValueError, TypeError):
            return str(value)

    return TEMPLATE_FIELD.sub(fill, template)


class _KindHeld(NamedTuple):
    """What one subject kind's last evaluation stood on and found."""

    signals: dict[str, Signals]  # the kind's signals (the same object while SignalCache held them)
    reads: list[Signals]  # the global subjects its rules read
    by_subject: dict[str, tuple[Signals, list[Rule]]]  # each subject's signals and the rules holding for it
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
        self.active: dict[tuple[str, str], Diagnosis] = {}
        self.resolved: list[Diagnosis] = []
        self._failing: set[str] = set()
        # The global subjects each kind's conditions read: a subject whose inputs did not change holds the same rules.
        self._reads = {each: sorted({v for r in rules for v in r.program.variables()} & set(GLOBAL_SUBJECTS))
                       for each, rules in self._by_subject.items()}
        self._held: dict[str, _KindHeld] = {}

    def evaluate(self, t: float, signals: dict[str, dict[str, Signals]]) -> list[Diagnosis]:
        """Advance every rule to time t; returns the active diagnoses and sets `resolved`."""
        globals_ = {g: next(iter(signals.get(g, {}).values()), {}) for g in GLOBAL_SUBJECTS}
        holding: dict[tuple[str, str], Diagnosis] = {}
        held_now: dict[str, _KindHeld] = {}
        # Converting signals to CEL values is the expensive part: the globals once per cycle, `it` once per subject
        # (a fresh Context per subject cost 0.4 ms each on a 128-CPU host, 80 ms a cycle).
        context = cel.Context(globals_)
        for each, rules in self._by_subject.items():
            subjects = signals.get(each, {})
            reads = [globals_[g] for g in self._reads[each]]
            kind = self._held.get(each)
            # A kind whose signals are the same object (kdiag.subject_kinds.SignalCache) and globals the same holds
            # the same rules: Kafka's thousands of topics and groups are not even walked between fetches.
            if kind is None or kind.signals is not subjects or kind.reads != reads:
                before = kind.by_subject if kind and kind.reads == reads else {}
                held = {}
                for sid, subject in subjects.items():
                    old = before.get(sid)
                    # An idle topic or group keeps its signals from fetch to fetch: CEL runs only on change.
                    held[sid] = old if old and (old[0] is subject or old[0] == subject) else (
                        subject, self._evaluate(rules if self._local(each, sid) else self._foreign_rules[each],
                                                context, subject))
                kind = _KindHeld(subjects, reads, held, [(subject, rules) for subject, rules in held.values() if rules])
            held_now[each] = kind
            for subject, held_rules in kind.holding:
                scope = {**globals_, "it": subject}
                for rule in held_rules:
                    self._hold(rule, subject, scope, t, holding)
        self._held = held_now
        self.resolved = [d for k, d in self.active.items() if k not in holding and d.state == "firing"]
        for d in self.resolved:
            d.ended = t
        self.active = holding
        return self.current()

    def _local(self, each: str, sid: str) -> bool:
        """Whether host-scope rules apply to this subject: any but another host's broker."""
        return each != "broker" or self.local_brokers is None or sid in self.local_brokers

    def _evaluate(self, rules: list[Rule], context: cel.Context, subject: Signals) -> list[Rule]:
        context.update({"it": subject})
        return [rule for rule in rules if self._holds(rule, context)]

    def current(self) -> list[Diagnosis]:
        """The active diagnoses, causes first, then symptoms, then lints."""
        return sorted(self.active.values(), key=lambda d: (KINDS.index(d.rule.kind), d.rule.id, d.subject))

    def _hold(self, rule: Rule, subject: Signals, scope: dict[str, Signals], t: float,
              holding: dict[tuple[str, str], Diagnosis]) -> None:
        key = (rule.id, str(subject.get("name", "")))
        d = self.active.get(key) or Diagnosis(rule, key[1], since=t)
        d.state = "firing" if t - d.since >= rule.for_seconds else "pending"
        d.summary = render(rule.summary, scope)
        d.evidence = {(name if var == "it" else f"{var}.{name}"): scope[var][name]
                      for var, name in rule.evidence if name in scope[var]}
        if "on_brokers" in subject:
            d.brokers = frozenset(str(subject["on_brokers"]).split(","))
        else:
            d.brokers = self.local_brokers if rule.scope == "host" else None
        holding[key] = d

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
