"""Samples from an AdminClient state (kafka_admin.py fetches it): cluster, brokers, topics, partitions, groups.

Per-partition series exist only for topics kafka.partition_series lets through (and while they number at most
kafka.max_partition_series); per-topic lag only for groups kafka.group_series lets through.
"""

from __future__ import annotations

from collections import Counter

from kdiag.core.cardinality import SeriesFilter
from kdiag.core.sample import COUNTER, GAUGE, Sample, sample
from kdiag.kafka.state import AdminState, ConfigValues, Group, Partition, Topic

HELP = {
    "kdiag_kafka_cluster_info": "Kafka cluster id seen by the AdminClient (always 1).",
    "kdiag_kafka_controller_id": "Node id of the active controller.",
    "kdiag_kafka_brokers": "Number of brokers in the cluster.",
    "kdiag_kafka_broker_info": "Broker address and rack (always 1).",
    "kdiag_kafka_broker_expected": "A broker kafka.expected_brokers says should be live (always 1).",
    "kdiag_kafka_broker_leaders": "Partitions of non-internal topics led by the broker.",
    "kdiag_kafka_broker_replicas": "Replicas of non-internal topics hosted by the broker.",
    "kdiag_kafka_broker_config": "Numeric broker config value (booleans as 0/1; Long.MAX_VALUE means not set).",
    "kdiag_kafka_broker_log_dirs_info": "Broker log.dirs setting (always 1).",
    "kdiag_kafka_topic_partitions": "Partitions of the topic.",
    "kdiag_kafka_topic_replication_factor": "Replication factor of the topic (largest replica list).",
    "kdiag_kafka_topic_under_replicated_partitions": "Partitions whose ISR is smaller than their replica list.",
    "kdiag_kafka_topic_offline_partitions": "Partitions without a leader.",
    "kdiag_kafka_topic_under_min_isr_partitions": "Partitions whose ISR is smaller than min.insync.replicas.",
    "kdiag_kafka_topic_config": "Numeric topic config value (booleans as 0/1; Long.MAX_VALUE means not set).",
    "kdiag_kafka_topic_config_override": "1 for each config the topic sets itself (kafka-configs --entity-type topics), "
                                         "not inherited from the brokers.",
    "kdiag_kafka_broker_config_source_info": "Where a broker config that is not at its default is set (describe_configs "
                                             "source: DYNAMIC_DEFAULT_BROKER_CONFIG, DYNAMIC_BROKER_CONFIG, STATIC_BROKER_CONFIG).",
    "kdiag_kafka_topic_broker_leaders": "Partitions of the topic led by the broker.",
    "kdiag_kafka_topic_broker_preferred_leaders": "Partitions of the topic whose first replica is the broker.",
    "kdiag_kafka_topic_log_end_offset_total": "Sum of the log end offsets of the topic's partitions.",
    "kdiag_kafka_partition_log_end_offset_total": "Log end offset of the partition (kafka.partition_series topics, while few).",
    "kdiag_kafka_partition_leader": "Leader broker id of the partition, -1 when offline (kafka.partition_series topics, while few).",
    "kdiag_kafka_consumergroup_members": "Members of the consumer group.",
    "kdiag_kafka_consumergroup_idle_members": "Members of the consumer group with no partition assigned.",
    "kdiag_kafka_consumergroup_stable": "1 while the consumer group is Stable, 0 while it rebalances or is empty or dead.",
    "kdiag_kafka_consumergroup_lag": "Sum over partitions of log end offset minus committed offset (per topic for kafka.group_series "
                                      "groups, without a topic label for the others).",
    "kdiag_kafka_consumergroup_lag_max": "Largest partition lag of the consumer group on the topic.",
}


def config_number(value: str | None) -> float | None:
    """A config's raw string as a number (true/false as 1/0); None when null or not numeric."""
    if value is None:
        return None
    if value.lower() in ("true", "false"):
        return float(value.lower() == "true")
    try:
        return float(int(value))
    except ValueError:
        return None


def _cluster_samples(state: AdminState) -> list[Sample]:
    """Cluster id, controller, broker count and broker addresses."""
    out = [
        sample("kdiag_kafka_cluster_info", 1, GAUGE, cluster_id=state["cluster_id"]),
        sample("kdiag_kafka_controller_id", state["controller_id"]),
        sample("kdiag_kafka_brokers", len(state["brokers"])),
    ]
    for b in state["brokers"]:
        out.append(
            sample("kdiag_kafka_broker_info", 1, GAUGE, broker_id=b["id"], host=b["host"], port=b["port"], rack=b["rack"] or "")
        )
    return out


def _broker_samples(state: AdminState, broker_ids: list[int]) -> list[Sample]:
    """Leaders, replicas and configs per broker."""
    partitions = [p for t in state["topics"].values() for p in t["partitions"]]
    leaders = Counter(p["leader"] for p in partitions)
    replicas = Counter(r for p in partitions for r in p["replicas"])
    out = []
    for b in broker_ids:
        out.append(sample("kdiag_kafka_broker_leaders", leaders[b], GAUGE, broker_id=b))
        out.append(sample("kdiag_kafka_broker_replicas", replicas[b], GAUGE, broker_id=b))
    for broker, configs in state["broker_configs"].items():
        out += _config_samples("kdiag_kafka_broker_config", configs, broker_id=broker)
        if "log.dirs" in configs:
            out.append(sample("kdiag_kafka_broker_log_dirs_info", 1, GAUGE, broker_id=broker, log_dirs=configs["log.dirs"]))
    for broker, sources in state.get("broker_config_sources", {}).items():
        out += [sample("kdiag_kafka_broker_config_source_info", 1, GAUGE, broker_id=broker, name=n, source=src)
                for n, src in sources.items()]
    return out


def _config_samples(name: str, configs: ConfigValues, **labels: object) -> list[Sample]:
    """One sample per numeric config value."""
    numbers = {k: config_number(v) for k, v in configs.items()}
    return [sample(name, v, GAUGE, **labels, name=k) for k, v in numbers.items() if v is not None]


def _offline(p: Partition) -> bool:
    return p["leader"] < 0


def _topic_samples(topic: str, t: Topic, broker_ids: list[int]) -> list[Sample]:
    """Partition health, configs, leader spread and log end offset total of one topic."""
    parts = t["partitions"]
    out = [
        sample("kdiag_kafka_topic_partitions", len(parts), GAUGE, topic=topic),
        sample("kdiag_kafka_topic_replication_factor", max((len(p["replicas"]) for p in parts), default=0), GAUGE, topic=topic),
        sample(
            "kdiag_kafka_topic_under_replicated_partitions", sum(len(p["isr"]) < len(p["replicas"]) for p in parts), GAUGE, topic=topic
        ),
        sample("kdiag_kafka_topic_offline_partitions", sum(_offline(p) for p in parts), GAUGE, topic=topic),
    ]
    min_isr = config_number(t["configs"].get("min.insync.replicas"))
    if min_isr is not None:
        out.append(
            sample("kdiag_kafka_topic_under_min_isr_partitions", sum(len(p["isr"]) < min_isr for p in parts), GAUGE, topic=topic)
        )
    out += _config_samples("kdiag_kafka_topic_config", t["configs"], topic=topic)
    out += [sample("kdiag_kafka_topic_config_override", 1, GAUGE, topic=topic, name=n)
            for n, src in t.get("config_sources", {}).items() if src == "DYNAMIC_TOPIC_CONFIG"]
    leaders = Counter(p["leader"] for p in parts if not _offline(p))
    preferred = Counter(p["replicas"][0] for p in parts if p["replicas"])
    for b in sorted(set(broker_ids) | set(leaders) | set(preferred)):
        out.append(sample("kdiag_kafka_topic_broker_leaders", leaders[b], GAUGE, topic=topic, broker_id=b))
        out.append(sample("kdiag_kafka_topic_broker_preferred_leaders", preferred[b], GAUGE, topic=topic, broker_id=b))
    ends = [p["log_end_offset"] for p in parts if p["log_end_offset"] is not None]
    if ends:
        out.append(sample("kdiag_kafka_topic_log_end_offset_total", sum(ends), COUNTER, topic=topic))
    return out


def _partition_samples(topic: str, t: Topic) -> list[Sample]:
    """Log end offset and leader of each partition of one topic."""
    out = []
    for p in t["partitions"]:
        labels = {"topic": topic, "partition": p["partition"]}
        if p["log_end_offset"] is not None:
            out.append(sample("kdiag_kafka_partition_log_end_offset_total", p["log_end_offset"], COUNTER, **labels))
        out.append(sample("kdiag_kafka_partition_leader", -1 if _offline(p) else p["leader"], GAUGE, **labels))
    return out


def _group_samples(group: str, g: Group, per_topic: bool) -> list[Sample]:
    """Members, and total and largest partition lag (per topic, or over all topics), of one consumer group."""
    out = [sample("kdiag_kafka_consumergroup_members", g["members"], GAUGE, group=group),
           sample("kdiag_kafka_consumergroup_stable", int(g["state"] == "STABLE"), GAUGE, group=group)]
    if "idle_members" in g:  # only known while the group is stable
        out.append(sample("kdiag_kafka_consumergroup_idle_members", g["idle_members"], GAUGE, group=group))
    lags = g["lag"]
    if per_topic:
        for topic, totals in lags.items():
            out.append(sample("kdiag_kafka_consumergroup_lag", totals["sum"], GAUGE, group=group, topic=topic))
            out.append(sample("kdiag_kafka_consumergroup_lag_max", totals["max"], GAUGE, group=group, topic=topic))
    elif lags:
        out.append(sample("kdiag_kafka_consumergroup_lag", sum(t["sum"] for t in lags.values()), GAUGE, group=group))
        out.append(sample("kdiag_kafka_consumergroup_lag_max", max(t["max"] for t in lags.values()), GAUGE, group=group))
    return out


def samples_from_admin_state(state: AdminState, max_partition_series: int = 2000,
                             partition_series: SeriesFilter | None = None,
                             group_series: SeriesFilter | None = None) -> list[Sample]:
    """Samples of one admin state: per-partition series for the topics partition_series lets through while those
    number at most max_partition_series partitions, per-topic lag for the groups group_series lets through."""
    partition_series, group_series = partition_series or SeriesFilter(), group_series or SeriesFilter()
    broker_ids = [b["id"] for b in state["brokers"]]
    out = _cluster_samples(state) + _broker_samples(state, broker_ids)
    topics = state["topics"]
    detailed = {name for name in topics if partition_series.matches(name)}
    if sum(len(topics[name]["partitions"]) for name in detailed) > max_partition_series:
        detailed = set()
    for name, t in topics.items():
        out += _topic_samples(name, t, broker_ids)
        if name in detailed:
            out += _partition_samples(name, t)
    for group, g in state["consumer_groups"].items():
        out += _group_samples(group, g, group_series.matches(group))
    return out
