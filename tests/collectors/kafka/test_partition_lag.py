"""kdiag_consumer_partition_lag_seconds of the partitions lagging most: the AdminClient process's pick by messages,
and the seconds from a bounded log end history, else the record time at the committed offset."""

from __future__ import annotations

from kdiag.collectors.kafka.partition_lag import PartitionLagClock
from kdiag.families.kafka import CONSUMER_PARTITION_LAG_SECONDS
from kdiag.kafka.partition_lag import TopPartitions


def state(ends: dict[str, list[int]], top: list[dict]) -> dict:
    topics = {t: {"partitions": [{"partition": i, "log_end_offset": e} for i, e in enumerate(parts)], "configs": {}}
              for t, parts in ends.items()}
    return {"topics": topics, "consumer_groups": {}, "top_partitions": top}


def seconds(samples: list) -> dict[tuple, float]:
    return {tuple(v for _, v in s.labels): s.value for s in samples if s.name == CONSUMER_PARTITION_LAG_SECONDS.name}


def test_top_partitions_keeps_the_n_furthest_behind_over_every_group():
    top = TopPartitions(2)
    ends = {"a": {0: 100, 1: 100}, "b": {0: 10}}
    top.add("g1", {"a": [(0, 90), (1, 100)]}, ends)  # 10 behind, and caught up
    top.add("g2", {"a": [(0, 50)], "b": [(0, 0), (1, 0)]}, ends)  # 50, 10; b-1 has no known end
    top.add("g3", {"a": [(1, 99)]}, ends)  # 1 behind
    assert [(e["group"], e["topic"], e["partition"], e["lag"]) for e in top.result()] == [
        ("g2", "a", 0, 50), ("g2", "b", 0, 10)]  # ties: the larger name first, the same at every fetch
    assert TopPartitions(0).result() == []


def test_lag_per_topic_sums_and_tops_partitions_with_a_known_end():
    committed = {"a": [(0, 5), (1, 9), (2, 3)], "b": [(0, 1)], "c": [(0, 0)]}
    ends = {"a": {0: 8, 1: 7, 2: None}, "b": {0: None}}  # a's 1 ahead of its end (a reset log): 0, not negative
    top = TopPartitions(1)
    assert top.add("g", committed, ends) == {"a": {"sum": 3, "max": 3}}
    assert [(e["topic"], e["partition"], e["lag"]) for e in top.result()] == [("a", 0, 3)]
    assert TopPartitions(0).add("g", committed, ends) == {"a": {"sum": 3, "max": 3}}  # none kept, lag still summed


def test_seconds_from_the_partitions_own_log_end_history():
    clock = PartitionLagClock()
    entry = {"group": "g", "topic": "a", "partition": 1, "committed": 150, "lag": 50}
    # Partition 1 is written 10 messages/s; partition 0 ten times faster (a topic total would blur them).
    assert seconds(clock.samples(1000.0, state({"a": [1000, 100]}, [{**entry, "committed": 90, "lag": 10}]))) == {}
    clock.samples(1010.0, state({"a": [2000, 200]}, [{**entry, "committed": 190, "lag": 10}]))
    got = seconds(clock.samples(1020.0, state({"a": [3000, 300]}, [entry | {"lag": 150}])))
    assert got == {("g", "1", "a"): 15.0}  # the end was at 150 at 1005


NOW = 1_800_000_000  # 2027


def test_before_the_history_reaches_back_the_record_time_answers_when_plausible():
    clock = PartitionLagClock()
    entry = {"group": "g", "topic": "a", "partition": 0, "committed": 5, "lag": 95}
    assert seconds(clock.samples(NOW, state({"a": [100]}, [entry]))) == {}
    assert seconds(clock.samples(NOW + 10, state({"a": [100]}, [entry | {"record_time": NOW - 300.0}]))) == {
        ("g", "0", "a"): 310.0}
    assert seconds(clock.samples(NOW + 20, state({"a": [100]}, [entry | {"record_time": 1.0}]))) == {}  # 1970


def test_partitions_out_of_the_top_for_the_retention_are_forgotten():
    clock = PartitionLagClock(retention=60.0)
    clock.samples(1000.0, state({"a": [10]}, [{"group": "g", "topic": "a", "partition": 0, "committed": 5, "lag": 5}]))
    clock.samples(1030.0, state({"a": [10]}, []))
    assert clock._ends
    clock.samples(1070.0, state({"a": [10]}, []))
    assert not clock._ends and not clock._seen
