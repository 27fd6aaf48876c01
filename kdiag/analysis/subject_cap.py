"""diagnosis.max_subjects_per_rule: each rule's worst subjects kept for /metrics, its alerts and the page; the rest counted."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from kdiag.analysis.engine import Diagnosis
from kdiag.analysis.scope import is_kafka

# A subject kept at the last render stays until another ranks this many times worse by the rule's rank_by: lags move
# every cycle, and a cut re-drawn on each small move would resolve and raise alerts at its edge over and over.
STICKY = 2.0
STATES = ("firing", "pending")


@dataclass(frozen=True)
class RuleSubjects:
    """How many subjects one rule holds for in each state, and how many of them the cap left out."""

    rule: str
    scope: str
    cluster: bool  # whether its series carry the `cluster` label
    subjects: dict[str, int]  # state -> subjects
    omitted: dict[str, int]  # state -> subjects left out


def _score(d: Diagnosis, kept: bool) -> float:
    """How bad a subject is by its rule's rank_by (larger: worse; -inf without a number), kept ones held up by STICKY."""
    value = d.evidence.get(d.rule.rank_by) if d.rule.rank_by else None
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        return -math.inf
    sign = d.rule.rank_sign
    return sign * value * (STICKY ** (sign if value >= 0 else -sign) if kept else 1.0)


def worst_first(diagnoses: list[Diagnosis], kept: frozenset[str] = frozenset()) -> list[Diagnosis]:
    """One rule's diagnoses, worst first: firing before pending, then by rank_by, then those kept before, then by name."""
    return sorted(diagnoses, key=lambda d: (STATES.index(d.state), -_score(d, d.subject in kept),
                                            d.subject not in kept, d.subject))


class SubjectCap:
    """Keeps at most `per_rule` subjects of each rule (0: all), the worst, and remembers them for the next cycle."""

    def __init__(self, per_rule: int):
        self.per_rule = per_rule
        self._kept: dict[tuple[str, str], frozenset[str]] = {}

    def select(self, diagnoses: Iterable[Diagnosis], cluster: str = "") -> tuple[list[Diagnosis], list[RuleSubjects]]:
        """The diagnoses kept, in their order, and each rule's counts."""
        given = list(diagnoses)
        by_rule: dict[tuple[str, str], list[Diagnosis]] = {}
        for d in given:
            by_rule.setdefault((d.rule.id, d.rule.scope), []).append(d)
        kept: dict[tuple[str, str], frozenset[str]] = {}
        counts = []
        for key, members in by_rule.items():
            chosen = members
            if self.per_rule and len(members) > self.per_rule:
                chosen = worst_first(members, self._kept.get(key, frozenset()))[:self.per_rule]
            kept[key] = frozenset(d.subject for d in chosen)
            subjects = {s: sum(1 for d in members if d.state == s) for s in STATES}
            left = {s: subjects[s] - sum(1 for d in chosen if d.state == s) for s in STATES}
            labelled = bool(cluster) and any(is_kafka(d) or d.brokers for d in members)  # as diagnosis_labels has it
            counts.append(RuleSubjects(key[0], key[1], labelled, subjects, left))
        self._kept = kept
        return [d for d in given if d.subject in kept[(d.rule.id, d.rule.scope)]], counts
