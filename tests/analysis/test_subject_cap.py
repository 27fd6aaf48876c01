"""diagnosis.max_subjects_per_rule: the worst subjects of each rule kept, the same from cycle to cycle (issue 34)."""

from __future__ import annotations

import pytest

from kdiag.analysis.catalog import default_rules_dir, load_catalog
from kdiag.analysis.engine import Diagnosis, Engine, EngineState
from kdiag.analysis.subject_cap import SubjectCap

pytestmark = pytest.mark.unit

RULES = load_catalog([default_rules_dir()])


def group(name: str, lag_seconds: float) -> dict[str, float | str]:
    """A consumer group's signals: behind and falling further behind (consumer_lag_growing holds)."""
    return {"name": name, "lag_messages": 5000.0, "lag_seconds": lag_seconds, "lag_growth_per_second": 10.0,
            "members": 1.0, "idle_members": 0.0, "catch_up": "never"}


def judged(lags: dict[str, float], firing: set[str]) -> list[Diagnosis]:
    """The engine's consumer_lag_growing diagnoses: those in `firing` held for its 2 minutes, the others just began."""
    engine = Engine(RULES)
    early = engine.evaluate(EngineState(), 0.0, {"group": {g: group(g, lags[g]) for g in firing}})
    now = engine.evaluate(early, 600.0, {"group": {g: group(g, lag) for g, lag in lags.items()}}).current()
    assert {d.subject for d in now if d.state == "firing"} == firing
    return now


def kept(cap: SubjectCap, diagnoses: list[Diagnosis]) -> list[str]:
    return sorted(d.subject for d in cap.select(diagnoses)[0])


def test_the_worst_are_kept_firing_first_then_by_lag_then_by_name() -> None:
    lags = {f"g{i:03d}": float(i) for i in range(100)}
    lags |= {"tie-b": 97.0, "tie-a": 97.0, "tie-c": 97.0}
    firing = {f"g{i:03d}" for i in range(90)} | {"tie-b", "tie-a", "tie-c"}
    # g090-g099 lag most but only begin: pending, they come after every firing group.
    assert kept(SubjectCap(5), judged(lags, firing)) == ["g088", "g089", "tie-a", "tie-b", "tie-c"]
    assert kept(SubjectCap(2), judged(lags, firing)) == ["tie-a", "tie-b"]  # equal lags: by name
    assert kept(SubjectCap(103), judged(lags, firing)) == sorted(lags)  # as many as the cap: all
    assert "g090" not in kept(SubjectCap(100), judged(lags, firing))  # the pending with the least lag go first
    assert kept(SubjectCap(0), judged(lags, firing)) == sorted(lags)  # 0: no cap


def test_the_kept_set_stays_while_lags_move_until_another_is_twice_as_bad() -> None:
    lags = {f"g{i:03d}": 100.0 + i for i in range(100)}
    cap = SubjectCap(10)
    first = kept(cap, judged(lags, set(lags)))
    assert first == [f"g{i:03d}" for i in range(90, 100)]
    assert kept(cap, judged(lags, set(lags))) == first
    # Lags move every cycle: the kept ones fall back a little, some others pass them, not by twice: nothing flaps.
    moved = {g: lag * (0.7 if g in first else 1.3) for g, lag in lags.items()}
    assert kept(cap, judged(moved, set(lags))) == first
    # One group falls twice as far behind as the least bad kept: it takes that one's place, and keeps it.
    moved["g000"] = 2 * min(moved[g] for g in first) + 1
    second = kept(cap, judged(moved, set(lags)))
    assert second == sorted([*first[1:], "g000"])
    assert kept(cap, judged(moved, set(lags))) == second


def test_each_rule_counts_its_subjects_and_those_left_out() -> None:
    lags = {f"g{i:03d}": float(i) for i in range(30)}
    diagnoses = judged(lags, {f"g{i:03d}" for i in range(20)})
    chosen, counts = SubjectCap(8).select(diagnoses, cluster="c1")
    assert len(chosen) == 8 and all(d.state == "firing" for d in chosen)
    (lag,) = counts
    assert (lag.rule, lag.scope, lag.cluster) == ("consumer_lag_growing", "cluster", True)
    assert lag.subjects == {"firing": 20, "pending": 10}
    assert lag.omitted == {"firing": 12, "pending": 10}
