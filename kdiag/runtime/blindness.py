"""What a failing collector blinds: the rules reading a signal computed from its families that is missing now.

A kind's signals are computed from the series names it read (SignalCache.reads); a collector emits its declared
families. A rule is blinded by a failing collector when a signal its condition names belongs to a kind that reads one
of the collector's families and is missing for some subject of that kind (or the kind has no subject at all), its
absence not one the rule stands on (absent_on_purpose): with the source failing kdiag cannot tell that signal's value,
so the rule cannot hold, whatever the truth. Within one kind the signals are not told apart: with two of its sources
failing, each is said to blind the rules of both.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kdiag.analysis.catalog import GLOBAL_SUBJECTS, Rule, references
from kdiag.analysis.signals import Signals
from kdiag.families.family import HISTOGRAM_SUFFIXES, Family, FamilyPattern

Families = Iterable[Family | FamilyPattern]


def emits(families: Families, name: str) -> bool:
    """Whether a series name (a histogram's _bucket/_sum/_count included) is one of these families'."""
    bases = {name, *(name.removesuffix(s) for s in HISTOGRAM_SUFFIXES if name.endswith(s))}
    return any(f.matches(name) if isinstance(f, FamilyPattern) else f.name in bases for f in families)


def kinds_fed(families: Families, reads: Mapping[str, frozenset[str]]) -> set[str]:
    """The subject kinds whose signals are computed from at least one of these families."""
    families = list(families)
    return {kind for kind, names in reads.items() if any(emits(families, n) for n in names)}


def missing(kind: str, name: str, signals: Mapping[str, Mapping[str, Signals]]) -> bool:
    """Whether a signal is missing for some subject of a kind, or the kind has no subject."""
    subjects = signals.get(kind, {})
    return not subjects or any(name not in s for s in subjects.values())


def blinded(rules: list[Rule], failing: Mapping[str, Families], reads: Mapping[str, frozenset[str]],
            signals: Mapping[str, Mapping[str, Signals]]) -> dict[str, list[str]]:
    """Per failing collector, the ids of the rules it blinds (a collector blinding none is left out)."""
    out: dict[str, list[str]] = {}
    for collector, families in sorted(failing.items()):
        fed = kinds_fed(families, reads)
        ids = [rule.id for rule in rules if any(
            kind in fed and missing(kind, name, signals)
            for kind, name in ((rule.each if var == "it" else var, name) for var, name, _ in references(rule.when)
                               # a signal absent on purpose is a fact the rule reads, not blindness
                               if (var == "it" or var in GLOBAL_SUBJECTS) and f"{var}.{name}" not in rule.absent_on_purpose))]
        if ids:
            out[collector] = sorted(ids)
    return out
