"""Consumer lag in seconds from the history of log end offsets (kdiag/collectors/kafka/lag.py), on fixture states."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import kdiag

from kdiag.analysis.catalog import load_catalog
from kdiag.analysis.engine import render
from kdiag.analysis.kafka_signals import catch_up, group_signals
from kdiag.analysis.scope import with_cluster
from kdiag.collectors.kafka.lag import LagClock, time_at_offset
from kdiag.families.kafka import CONSUMER_CATCH_UP_SECONDS, CONSUMER_LAG_SECONDS, CONSUMER_LAST_COMMIT_AGE_SECONDS
from kdiag.core.cardinality import SeriesFilter, cap_kafka_series
from kdiag.core.history import History
from kdiag.core.sample import GAUGE, sample

LAG_SECONDS, CATCH_UP = CONSUMER_LAG_SECONDS.name, CONSUMER_CATCH_UP_SECONDS.name
LAST_COMMIT_AGE = CONSUMER_LAST_COMMIT_AGE_SECONDS.name

# A topic written at 10 messages/s, fetched every 10 s from t=1000.
STEADY = [(1000.0 + 10 * i, 100.0 * i) for i in range(10)]


def state(ends: dict[str, list[int | None]], lags: dict[str, dict[str, int]]) -> dict:
    """An admin state: per topic, its partitions' log end offsets; per group, its lag per topic."""
    topics = {t: {"partitions": [{"partition": i, "log_end_offset": e} for i, e in enumerate(parts)], "configs": {}}
              for t, parts in ends.items()}
    groups = {g: {"lag": {t: {"sum": n, "max": n} for t, n in per_topic.items()}} for g, per_topic in lags.items()}
    return {"topics": topics, "consumer_groups": groups}


def lag_seconds(samples: list, **labels: str) -> float | None:
    """The value of the kdiag_consumer_lag_seconds sample with exactly these labels, None without one."""
    key = tuple(sorted(labels.items()))
    found = [s.value for s in samples if s.name == LAG_SECONDS and s.labels == key]
    assert len(found) <= 1
    return found[0] if found else None


def test_interpolates_between_fetches():
    # The end was 350 halfway between the fetches at t=1030 (300) and t=1040 (400).
    assert time_at_offset(STEADY, 350) == pytest.approx(1035.0)
    assert time_at_offset(STEADY, 300) == pytest.approx(1030.0)


def test_a_group_at_or_past_the_end_is_current():
    assert time_at_offset(STEADY, 900) == 1090.0
    assert time_at_offset(STEADY, 950) == 1090.0


def test_a_topic_without_writes_answers_its_latest_fetch():
    idle = [(1000.0 + 10 * i, 500.0) for i in range(5)]
    assert time_at_offset(idle, 500) == 1040.0


def test_the_end_standing_still_counts_until_it_moved_last():
    # Written, then still from 1010 to 1030, then written again: offset 100 was the end until 1030.
    points = [(1000.0, 0.0), (1010.0, 100.0), (1020.0, 100.0), (1030.0, 100.0), (1040.0, 200.0)]
    assert time_at_offset(points, 100) == 1030.0


def test_history_that_starts_past_the_offset_cannot_answer():
    assert time_at_offset(STEADY[3:], 250) is None
    assert time_at_offset([], 0) is None


def test_a_gap_between_fetches_is_interpolated_across():
    gap = [(1000.0, 0.0), (1010.0, 100.0), (1070.0, 700.0), (1080.0, 800.0)]
    assert time_at_offset(gap, 400) == pytest.approx(1040.0)


def test_a_counter_reset_forgets_what_came_before_it():
    # The topic was deleted and made again at about t=1025: its end fell from 2000 to 50.
    points = [(1000.0, 1000.0), (1010.0, 1500.0), (1020.0, 2000.0), (1030.0, 50.0), (1040.0, 150.0)]
    assert time_at_offset(points, 100) == pytest.approx(1035.0)
    assert time_at_offset(points, 20) is None


def test_clock_serves_seconds_per_group_and_topic():
    clock = LagClock()
    for i in range(6):  # 3 partitions, each written at 10 messages/s, fetched every 10 s
        now = 1000.0 + 10 * i
        out = clock.samples(now, state({"orders": [100 * i] * 3}, {"billing": {"orders": 450}}),
                            SeriesFilter())
    # The committed total 1050 was the end total at t=1035: 15 s ago.
    assert lag_seconds(out, group="billing", topic="orders") == pytest.approx(15.0)


def test_a_caught_up_group_on_a_topic_without_writes_lags_0_s():
    clock = LagClock()
    for i in range(3):
        out = clock.samples(1000.0 + 10 * i, state({"idle": [40, 2]}, {"reader": {"idle": 0}}), SeriesFilter())
    assert lag_seconds(out, group="reader", topic="idle") == 0.0


NOW = 1_800_000_000.0


def test_a_group_behind_the_history_falls_back_to_its_record_time():
    clock = LagClock()
    behind = state({"orders": [1000]}, {"old": {"orders": 900}, "unknown": {"orders": 900}})
    behind["consumer_groups"]["old"]["lag"]["orders"]["record_time"] = NOW - 300
    out = clock.samples(NOW, behind, SeriesFilter())
    assert lag_seconds(out, group="old", topic="orders") == 300.0
    assert lag_seconds(out, group="unknown", topic="orders") is None
    assert clock.unanswered == [["old", "orders"], ["unknown", "orders"]]  # the next fetch reads their record times


def test_groups_outside_group_series_get_their_largest_topic_lag_without_a_topic_label():
    clock = LagClock()
    only = SeriesFilter(allow=["billing"])
    for i in range(4):
        out = clock.samples(1000.0 + 10 * i, state({"a": [100 * i], "b": [100 * i]},
                                                   {"billing": {"a": 50 * i}, "audit": {"a": 10 * i, "b": 30 * i}}), only)
    assert lag_seconds(out, group="billing", topic="a") == pytest.approx(15.0)
    assert lag_seconds(out, group="audit") == pytest.approx(9.0)  # b: 210 of 300, 9 s; a: 3 s
    assert [s for s in out if dict(s.labels).get("group") == "audit" and "topic" in dict(s.labels)] == []


def test_a_partition_without_a_known_end_leaves_a_gap_not_a_reset():
    clock = LagClock()
    for i, ends in enumerate([[0, 0], [100, 100], [None, 200], [300, 300]]):
        out = clock.samples(1000.0 + 10 * i, state({"t": ends}, {"g": {"t": 300}}), SeriesFilter())
    # The end total 300 (now 600) was reached at t=1015, interpolated across the fetch that missed a partition.
    assert lag_seconds(out, group="g", topic="t") == pytest.approx(15.0)


def test_points_older_than_the_retention_are_forgotten():
    clock = LagClock(retention=30.0)
    for i in range(10):
        out = clock.samples(1000.0 + 10 * i, state({"t": [100 * i]}, {"g": {"t": 500}}), SeriesFilter())
    # At t=1090 the end is 900; 400 was the end at t=1040, before the 30 s retention.
    assert lag_seconds(out, group="g", topic="t") is None


def test_the_kafka_series_cap_counts_lag_seconds_and_drops_its_per_topic_series_first():
    samples = [sample("kdiag_kafka_brokers", 3), sample(LAG_SECONDS, 5, GAUGE, group="g", topic="t"),
               sample(LAG_SECONDS, 9, GAUGE, group="h")]
    kept, dropped = cap_kafka_series(samples, 2)
    assert dropped == 1 and [s.labels for s in kept if s.name == LAG_SECONDS] == [(("group", "h"),)]


def test_lag_seconds_carry_the_cluster_label():
    [labelled] = with_cluster([sample(LAG_SECONDS, 5, GAUGE, group="g")], "lab")
    assert dict(labelled.labels) == {"cluster": "lab", "group": "g"}


def test_catch_up_at_the_current_consume_rate_or_never():
    clock = LagClock()
    only_a = SeriesFilter(allow=["a"])
    # Two groups on two topics: "a" drains 20 messages/s on t1 and falls behind on t2; "b" catches up on t1 only.
    for i, (a1, a2, b1) in enumerate([(7200, 10, 900), (6600, 40, 600), (6000, 70, 0)]):
        out = clock.samples(1000.0 + 30 * i, state({"t1": [10000], "t2": [10000]},
                                                   {"a": {"t1": a1, "t2": a2}, "b": {"t1": b1}}), only_a)
    values = {s.labels: s.value for s in out if s.name == CATCH_UP}
    assert values[("group", "a"), ("topic", "t1")] == pytest.approx(300.0)  # 6000 behind, 20/s faster than written
    assert values[("group", "a"), ("topic", "t2")] == math.inf  # read slower than written: never
    assert values[(("group", "b"),)] == 0.0  # caught up


def test_catch_up_needs_two_fetches_and_forgets_gone_groups():
    clock = LagClock()
    out = clock.samples(1000.0, state({"t": [100]}, {"g": {"t": 50}}), SeriesFilter())
    assert [s for s in out if s.name == CATCH_UP] == []
    clock.samples(1030.0, state({"t": [100]}, {}), SeriesFilter())
    out = clock.samples(1060.0, state({"t": [100]}, {"g": {"t": 40}}), SeriesFilter())
    assert [s for s in out if s.name == CATCH_UP] == []  # its old lag was forgotten with it


def test_catch_up_text():
    assert catch_up(300.0) == {"catch_up_seconds": 300.0, "catch_up": "in 5m"}
    assert catch_up(math.inf) == {"catch_up": "never"}
    assert catch_up(0.0) == {"catch_up_seconds": 0.0, "catch_up": "now"}
    assert catch_up(None) == {}


def test_consumer_lag_growing_says_how_far_behind_in_seconds_and_when_it_catches_up():
    history = History()
    for t in range(0, 181, 30):
        history.add(float(t), [sample("kdiag_kafka_consumergroup_members", 2, GAUGE, group="orders-app"),
                               sample("kdiag_kafka_consumergroup_lag", 5000 + 10 * t, GAUGE, group="orders-app", topic="a"),
                               sample(LAG_SECONDS, 40 + t, GAUGE, group="orders-app", topic="a"),
                               sample(LAG_SECONDS, 7, GAUGE, group="orders-app", topic="b"),
                               sample(CATCH_UP, math.inf, GAUGE, group="orders-app", topic="a"),
                               sample(CATCH_UP, 60, GAUGE, group="orders-app", topic="b")])
    group = group_signals(history, 30.0)["orders-app"]
    assert group["lag_seconds"] == 220.0 and group["catch_up"] == "never"
    [rule] = [r for r in load_catalog([Path(kdiag.__file__).parent / "rules"]) if r.id == "consumer_lag_growing"]
    summary = render(rule.summary, {"it": group})
    assert "6800 messages (220 s) behind" in summary and "catches up never" in summary, summary


@pytest.mark.parametrize("record_time, retention_ms", [
    (1.0, "-1"),  # a producer that stamped CreateTime=1: 57 years of lag (issue 30)
    (1.0, None),
    (NOW - 3 * 86400, "86400000"),  # older than the topic's retention and an hour's segment: deleted by now
    (NOW + 3600, "604800000"),  # an hour ahead of this host's clock
])
def test_an_implausible_record_time_is_not_taken(record_time: float, retention_ms: str | None):
    clock = LagClock()
    for i in range(3):  # 20 s of history: the group's offset is older than all of it
        t = NOW - 20 + 10 * i
        behind = state({"orders": [1000 + 100 * i]}, {"old": {"orders": 900 + 100 * i}})
        behind["topics"]["orders"]["configs"] = {"retention.ms": retention_ms, "segment.ms": "3600000"} \
            if retention_ms else {}
        behind["consumer_groups"]["old"]["lag"]["orders"]["record_time"] = record_time
        out = clock.samples(t, behind, SeriesFilter())
    assert lag_seconds(out, group="old", topic="orders") is None  # until the history reaches back to the offset


def test_a_record_within_the_retention_and_a_segment_is_plausible():
    clock = LagClock()
    behind = state({"orders": [1000]}, {"old": {"orders": 900}})
    behind["topics"]["orders"]["configs"] = {"retention.ms": "86400000", "segment.ms": "3600000"}
    behind["consumer_groups"]["old"]["lag"]["orders"]["record_time"] = NOW - 86400 - 1800
    assert lag_seconds(clock.samples(NOW, behind, SeriesFilter()), group="old", topic="orders") == 88200.0


def test_last_commit_age_per_group_only_where_the_commit_time_is_known():
    fetched = state({"orders": [100]}, {"billing": {"orders": 0}, "audit": {"orders": 0}})
    fetched["consumer_groups"]["billing"]["last_commit"] = 1990.5
    fetched["consumer_groups"]["late"] = {"lag": {}, "last_commit": 2100.0}  # a commit time ahead of this clock
    out = LagClock().samples(2000.0, fetched, SeriesFilter())
    ages = {s.labels: s.value for s in out if s.name == LAST_COMMIT_AGE}
    assert ages == {(("group", "billing"),): 9.5, (("group", "late"),): 0.0}
