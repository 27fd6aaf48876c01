"""Per-topic traffic balance from every partition's log end offset: the partition_skew rule's traffic inputs while
per-partition series are off (kafka.partition_series' default)."""

from __future__ import annotations

import copy
import json

from kdiag.analysis.kafka_signals import topic_signals
from kdiag.collectors.kafka.admin_samples import samples_from_admin_state
from kdiag.collectors.kafka.partition_rates import PartitionRates
from kdiag.core.cardinality import SeriesFilter
from kdiag.core.history import History
from kdiag.families.kafka import KAFKA_TOPIC_BROKER_MESSAGES_PER_SECOND, KAFKA_TOPIC_PARTITION_TOP_SHARE
from tests.paths import FIXTURES

# The 3-broker lab's state: admintest-skew's 6 partitions all led by broker 1, admintest-balanced's by 1, 2 and 3.
STATE = json.loads((FIXTURES / "kafka" / "admin-state.json").read_text())


def written(state: dict, topic: str, per_partition: list[int]) -> dict:
    """The state after `per_partition[i]` more messages went to partition i of the topic."""
    later = copy.deepcopy(state)
    for p, n in zip(later["topics"][topic]["partitions"], per_partition, strict=True):
        p["log_end_offset"] += n
    return later


def values(samples: list, family) -> dict[tuple, float]:
    return {s.labels: s.value for s in samples if s.name == family.name}


def test_rates_per_leading_broker_and_the_top_partition_share_between_two_fetches():
    rates = PartitionRates()
    assert rates.samples(1000.0, STATE["topics"]) == []  # one fetch: nothing moved yet
    later = written(written(STATE, "admintest-balanced", [100, 0, 0, 100, 0, 0]), "admintest-skew", [0] * 6)
    got = rates.samples(1010.0, later["topics"])
    # balanced: partitions 0 and 3 (both led by broker 1) took 200 messages in 10 s; skew: nobody wrote, no series.
    assert values(got, KAFKA_TOPIC_BROKER_MESSAGES_PER_SECOND) == {
        (("broker_id", "1"), ("topic", "admintest-balanced")): 20.0}
    assert values(got, KAFKA_TOPIC_PARTITION_TOP_SHARE) == {(("topic", "admintest-balanced"),): 0.5}


def test_a_topic_made_again_or_resized_gives_no_values_for_that_fetch():
    rates = PartitionRates()
    rates.samples(1000.0, STATE["topics"])
    remade = written(STATE, "admintest-skew", [-10] * 6)  # log ends went back: the topic was deleted and made again
    remade["topics"]["admintest-balanced"]["partitions"].append(
        {"partition": 6, "leader": 1, "replicas": [1], "isr": [1], "log_end_offset": 5})
    assert rates.samples(1010.0, remade["topics"]) == []


def test_topic_signals_see_traffic_skew_with_per_partition_series_off():
    history, rates = History(), PartitionRates()
    off = SeriesFilter(allow=[])
    for t, state in ((1000.0, STATE), (1010.0, written(STATE, "admintest-skew", [900, 50, 50, 0, 0, 0]))):
        samples = samples_from_admin_state(state, partition_series=off) + rates.samples(t, state["topics"])
        assert not [s for s in samples if s.name.startswith("kdiag_kafka_partition_")]
        history.add(t, samples)
    skew = topic_signals(history, 60.0)["admintest-skew"]
    assert skew["traffic_top_broker"] == "1" and skew["traffic_skew_ratio"] == 3.0  # all of it through 1 of 3
    assert skew["partition_top_share"] == 0.9
