"""The rule catalog: YAML rules with CEL conditions, checked and compiled once, errors with file:line:column."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

import cel
import yaml

from kdiag.core import yamlsafe
from kdiag.core.errors import KdiagError
from kdiag.core.quote import cut, quote
from kdiag.core.units import parse_duration
from kdiag.analysis.absence import negated_has
from kdiag.analysis.subject_kinds import SUBJECT_KINDS

RuleKind = Literal["cause", "symptom", "lint"]
KINDS: tuple[RuleKind, ...] = get_args(RuleKind)
SEVERITIES = ("info", "warning", "critical")
SCOPES = ("host", "cluster")
# A rule's scope when it names none: facts every daemon of a cluster sees alike are the cluster's; the rest
# (this host, its local broker's JMX, its own probe) are the host's.
CLUSTER_SUBJECTS = ("topic", "group", "cluster")
RULE_KEYS = {"id", "kind", "severity", "each", "scope", "when", "for", "summary", "evidence", "explains",
             "remediation", "source", "absent_on_purpose", "rank_by"}
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
BARE_IT = re.compile(r"(?<![\w.])it\b")
STRING_LITERAL = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
TEMPLATE_FIELD = re.compile(r"\{(\w+)\.(\w+)(:[^}]*)?\}")


def default_rules_dir() -> Path:
    """The catalog shipped inside the package."""
    return Path(__file__).parents[1] / "rules"


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


class CatalogError(KdiagError):
    """A rule catalog that cannot be used, with every problem found."""

    def __init__(self, errors: list[RuleError]):
        super().__init__("\n".join(map(str, errors)), exit_code=1)
        self.errors = errors

    def report(self) -> str:
        """The count of problems, then one line per problem."""
        return f"the rule catalog has {len(self.errors)} error(s):\n{self}"


@dataclass
class Rule:
    """One compiled rule."""

    id: str
    kind: RuleKind
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
    # Signals whose absence the condition stands on (`!has(...)`), each with why its absence is a fact, not blindness.
    absent_on_purpose: dict[str, str] = field(default_factory=dict)
    # The evidence that ranks its subjects when /metrics keeps only the worst (diagnosis.max_subjects_per_rule): its key
    # in Diagnosis.evidence, and -1 when the smallest value is the worst; "" ranks by subject name alone.
    rank_by: str = ""
    rank_sign: float = 1.0
    # The subject's signals the condition reads (`it.name`), None when it reads `it` whole (size(it), it["name"]).
    it_reads: frozenset[str] | None = None


def default_scope(each: str) -> str:
    """The scope of a rule over `each` subjects that names none."""
    return "cluster" if each in CLUSTER_SUBJECTS else "host"


def references(expression: str) -> list[tuple[str, str, int]]:
    """(subject, signal, offset) of every `name.field` in a CEL expression, string literals ignored."""
    return [(m.group(1), m.group(2), m.start()) for m in REFERENCE.finditer(_blanked(expression))]


def _blanked(expression: str) -> str:
    """The expression with its string literals blanked, offsets kept."""
    return STRING_LITERAL.sub(lambda m: " " * len(m.group(0)), expression)


def subject_reads(expression: str) -> frozenset[str] | None:
    """The `it` signals a CEL expression reads, or None when it uses `it` other than as `it.name`."""
    fields = [name for var, name, _ in references(expression) if var == "it"]
    return frozenset(fields) if len(BARE_IT.findall(_blanked(expression))) == len(fields) else None


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
        absent = self.absence(nodes, rid, data["each"], data["when"], data.get("absent_on_purpose") or {})
        evidence = self.evidence(nodes.get("evidence", node), rid, data["each"], data.get("evidence") or [])
        rank_by, rank_sign = self.rank(nodes, rid, data.get("rank_by"), evidence)
        for var, name, offset in ((m.group(1), m.group(2), m.start()) for m in TEMPLATE_FIELD.finditer(data["summary"])):
            if problem := check_reference(data["each"], var, name):
                self.error(nodes["summary"], rid, f"summary: {problem}", offset)
        if len(self.errors) > before:
            return None
        return Rule(id=rid, kind=data["kind"], severity=data["severity"], each=data["each"], when=data["when"],
                    program=program, summary=data["summary"], remediation=data["remediation"].strip(),
                    source=data["source"], for_seconds=for_seconds, evidence=evidence,
                    explains=data.get("explains") or [], file=str(self.path),
                    line=node.start_mark.line + 1, scope=data.get("scope") or default_scope(data["each"]),
                    absent_on_purpose=absent, rank_by=rank_by, rank_sign=rank_sign, it_reads=subject_reads(data["when"]))

    def check_types(self, data: dict[str, Any], nodes: dict[str, yaml.Node], rid: str) -> None:
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

    def absence(self, nodes: dict[str, yaml.Node], rid: str, each: str, expression: str,
                declared: Any) -> dict[str, str]:
        """Refuse a condition that holds when a signal is missing, unless absent_on_purpose names it with why."""
        node = nodes.get("absent_on_purpose")
        if node is not None and not (isinstance(declared, dict) and all(
                isinstance(k, str) and isinstance(v, str) and v.strip() for k, v in declared.items())):
            self.error(node, rid, "absent_on_purpose: expected a mapping of it.<signal> to why its absence is a fact")
            return {}
        negated = negated_has(expression)
        for n in negated:
            if f"{n.var}.{n.name}" not in declared:
                self.error(nodes["when"], rid, (
                    f"when: {n.text} is negated, so a missing {n.var}.{n.name} (its source failing) makes the "
                    f"condition hold: absent evidence read as low. Require it (has({n.var}.{n.name}) && ...) or, when "
                    f"its absence is a fact the rule stands on, name it under absent_on_purpose with why; in "
                    f"{quote(' '.join(expression.split()), 300)}"), n.offset)
        for key in declared:
            var, _, name = key.partition(".")
            if not any((n.var, n.name) == (var, name) for n in negated):
                self.error(node or nodes["when"], rid,
                           f"absent_on_purpose: {quote(key)} is not tested absent (!has) in when: drop it")
            elif problem := check_reference(each, var, name):
                self.error(node or nodes["when"], rid, f"absent_on_purpose: {problem}")
        return {k: " ".join(v.split()) for k, v in declared.items()}

    def evidence(self, node: yaml.Node, rid: str, each: str, items: list[Any]) -> list[tuple[str, str]]:
        out = []
        for item in items:
            var, _, name = str(item).partition(".")
            problem = check_reference(each, var, name) if name else f"evidence {quote(item)} is not it.<signal>"
            if problem:
                self.error(node, rid, f"evidence: {problem}")
            else:
                out.append((var, name))
        return out

    def rank(self, nodes: dict[str, yaml.Node], rid: str, given: Any,
             evidence: list[tuple[str, str]]) -> tuple[str, float]:
        """rank_by: one of the rule's evidence (`-` first: the smallest is the worst) as (its evidence key, sign)."""
        if given is None:
            return "", 1.0
        text = given if isinstance(given, str) else ""
        var, _, name = text.removeprefix("-").partition(".")
        if (var, name) not in evidence:
            self.error(nodes["rank_by"], rid, f"rank_by: {quote(given)} is not one of the rule's evidence "
                       "(it.<signal>, or -it.<signal> when the smallest value is the worst)")
            return "", 1.0
        return (name if var == "it" else f"{var}.{name}"), (-1.0 if text.startswith("-") else 1.0)


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
