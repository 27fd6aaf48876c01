"""Samples from an AdminClient state (kafka_admin.py fetches it): cluster, brokers, topics, partitions, groups.

Per-partition series exist only for topics kafka.partition_series lets through (and while they number at most
kafka.max_partition_series); per-topic lag only for groups kafka.group_series lets through.
"""

from __future__ import annotations

from collections import Counter

from kdiag.core.cardinality import SeriesFilter
from kdiag.core.sample import Canonical, Sample, same_labels
from kdiag.families.family import Family
from kdiag.families.kafka import (
    KAFKA_BROKER_CONFIG,
    KAFKA_BROKER_CONFIG_SOURCE_INFO,
    KAFKA_BROKER_EXPECTED,
    KAFKA_BROKER_INFO,
    KAFKA_BROKER_LEADERS,
    KAFKA_BROKER_LOG_DIRS_INFO,
    KAFKA_BROKER_REPLICAS,
    KAFKA_BROKERS,
    KAFKA_CLUSTER_INFO,
    KAFKA_CONSUMERGROUP_IDLE_MEMBERS,
    KAFKA_CONSUMERGROUP_LAG,
    KAFKA_CONSUMERGROUP_LAG_MAX,
    KAFKA_CONSUMERGROUP_MEMBERS,
    KAFKA_CONSUMERGROUP_STABLE,
    KAFKA_CONTROLLER_ID,
    KAFKA_PARTITION_LEADER,
    KAFKA_PARTITION_LOG_END_OFFSET_TOTAL,
    KAFKA_TOPIC_BROKER_LEADERS,
    KAFKA_TOPIC_BROKER_PREFERRED_LEADERS,
    KAFKA_TOPIC_CONFIG,
    KAFKA_TOPIC_CONFIG_OVERRIDE,
    KAFKA_TOPIC_LOG_END_OFFSET_TOTAL,
    KAFKA_TOPIC_OFFLINE_PARTITIONS,
    KAFKA_TOPIC_PARTITIONS,
    KAFKA_TOPIC_REPLICATION_FACTOR,
    KAFKA_TOPIC_UNDER_MIN_ISR_PARTITIONS,
    KAFKA_TOPIC_UNDER_REPLICATED_PARTITIONS,
)
from kdiag.kafka.state import AdminState, ConfigValues, Group, Partition, Topic

FAMILIES = (
    KAFKA_CLUSTER_INFO, KAFKA_CONTROLLER_ID, KAFKA_BROKERS, KAFKA_BROKER_INFO, KAFKA_BROKER_EXPECTED,
    KAFKA_BROKER_LEADERS, KAFKA_BROKER_REPLICAS, KAFKA_BROKER_CONFIG, KAFKA_BROKER_LOG_DIRS_INFO,
    KAFKA_TOPIC_PARTITIONS, KAFKA_TOPIC_REPLICATION_FACTOR, KAFKA_TOPIC_UNDER_REPLICATED_PARTITIONS,
    KAFKA_TOPIC_OFFLINE_PARTITIONS, KAFKA_TOPIC_UNDER_MIN_ISR_PARTITIONS, KAFKA_TOPIC_CONFIG,
    KAFKA_TOPIC_CONFIG_OVERRIDE, KAFKA_BROKER_CONFIG_SOURCE_INFO, KAFKA_TOPIC_BROKER_LEADERS,
    KAFKA_TOPIC_BROKER_PREFERRED_LEADERS, KAFKA_TOPIC_LOG_END_OFFSET_TOTAL, KAFKA_PARTITION_LOG_END_OFFSET_TOTAL,
    KAFKA_PARTITION_LEADER, KAFKA_CONSUMERGROUP_MEMBERS, KAFKA_CONSUMERGROUP_IDLE_MEMBERS,
    KAFKA_CONSUMERGROUP_STABLE, KAFKA_CONSUMERGROUP_LAG, KAFKA_CONSUMERGROUP_LAG_MAX,
)


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
        KAFKA_CLUSTER_INFO.sample(1, cluster_id=state["cluster_id"]),
        KAFKA_CONTROLLER_ID.sample(state["controller_id"]),
        KAFKA_BROKERS.sample(len(state["brokers"])),
    ]
    for b in state["brokers"]:
        out.append(
            KAFKA_BROKER_INFO.sample(1, broker_id=b["id"], host=b["host"], port=b["port"], rack=b["rack"] or "")
        )
    return out


def _broker_samples(state: AdminState, broker_ids: list[int]) -> list[Sample]:
    """Leaders, replicas and configs per broker."""
    partitions = [p for t in state["topics"].values() for p in t["partitions"]]
    leaders = Counter(p["leader"] for p in partitions)
    replicas = Counter(r for p in partitions for r in p["replicas"])
    out = []
    for b in broker_ids:
        out.append(KAFKA_BROKER_LEADERS.sample(leaders[b], broker_id=b))
        out.append(KAFKA_BROKER_REPLICAS.sample(replicas[b], broker_id=b))
    for broker, configs in state["broker_configs"].items():
        out += _config_samples(KAFKA_BROKER_CONFIG, configs, broker_id=broker)
        if "log.dirs" in configs:
            out.append(KAFKA_BROKER_LOG_DIRS_INFO.sample(1, broker_id=broker, log_dirs=configs["log.dirs"]))
    for broker, sources in state.get("broker_config_sources", {}).items():
        out += [KAFKA_BROKER_CONFIG_SOURCE_INFO.sample(1, broker_id=broker, name=n, source=src)
                for n, src in sources.items()]
    return out


def _config_samples(family: Family, configs: ConfigValues, **labels: object) -> list[Sample]:
    """One sample per numeric config value."""
    numbers = {k: config_number(v) for k, v in configs.items()}
    return [family.sample(v, **labels, name=k) for k, v in numbers.items() if v is not None]


def _offline(p: Partition) -> bool:
    return p["leader"] < 0


def _topic_samples(topic: str, t: Topic, broker_ids: list[int], canonical: Canonical) -> list[Sample]:
    """Partition health, configs, leader spread and log end offset total of one topic."""
    parts = t["partitions"]
    labels = canonical((("topic", topic),))
    out = [
        KAFKA_TOPIC_PARTITIONS.labelled(len(parts), labels),
        KAFKA_TOPIC_REPLICATION_FACTOR.labelled(max((len(p["replicas"]) for p in parts), default=0), labels),
        KAFKA_TOPIC_UNDER_REPLICATED_PARTITIONS.labelled(sum(len(p["isr"]) < len(p["replicas"]) for p in parts),
                                                         labels),
        KAFKA_TOPIC_OFFLINE_PARTITIONS.labelled(sum(_offline(p) for p in parts), labels),
    ]
    min_isr = config_number(t["configs"].get("min.insync.replicas"))
    if min_isr is not None:
        out.append(KAFKA_TOPIC_UNDER_MIN_ISR_PARTITIONS.labelled(sum(len(p["isr"]) < min_isr for p in parts), labels))
    out += _config_samples(KAFKA_TOPIC_CONFIG, t["configs"], topic=topic)
    out += [KAFKA_TOPIC_CONFIG_OVERRIDE.sample(1, topic=topic, name=n)
            for n, src in t.get("config_sources", {}).items() if src == "DYNAMIC_TOPIC_CONFIG"]
    leaders = Counter(p["leader"] for p in parts if not _offline(p))
    preferred = Counter(p["replicas"][0] for p in parts if p["replicas"])
    for b in sorted(set(broker_ids) | set(leaders) | set(preferred)):
        by_broker = canonical((("broker_id", str(b)), ("topic", topic)))
        out.append(KAFKA_TOPIC_BROKER_LEADERS.labelled(leaders[b], by_broker))
        out.append(KAFKA_TOPIC_BROKER_PREFERRED_LEADERS.labelled(preferred[b], by_broker))
    ends = [p["log_end_offset"] for p in parts if p["log_end_offset"] is not None]
    if ends:
        out.append(KAFKA_TOPIC_LOG_END_OFFSET_TOTAL.labelled(sum(ends), labels))
    return out


def _partition_samples(topic: str, t: Topic) -> list[Sample]:
    """Log end offset and leader of each partition of one topic."""
    out = []
    for p in t["partitions"]:
        labels = {"topic": topic, "partition": p["partition"]}
        if p["log_end_offset"] is not None:
            out.append(KAFKA_PARTITION_LOG_END_OFFSET_TOTAL.sample(p["log_end_offset"], **labels))
        out.append(KAFKA_PARTITION_LEADER.sample(-1 if _offline(p) else p["leader"], **labels))
    return out


def _group_samples(group: str, g: Group, per_topic: bool, canonical: Canonical) -> list[Sample]:
    """Members, and total and largest partition lag (per topic, or over all topics), of one consumer group."""
    labels = canonical((("group", group),))
    out = [KAFKA_CONSUMERGROUP_MEMBERS.labelled(g["members"], labels),
           KAFKA_CONSUMERGROUP_STABLE.labelled(g["state"] == "STABLE", labels)]
    if "idle_members" in g:  # only known while the group is stable
        out.append(KAFKA_CONSUMERGROUP_IDLE_MEMBERS.labelled(g["idle_members"], labels))
    lags = g["lag"]
    if per_topic:
        for topic, totals in lags.items():
            by_topic = canonical((("group", group), ("topic", topic)))
            out.append(KAFKA_CONSUMERGROUP_LAG.labelled(totals["sum"], by_topic))
            out.append(KAFKA_CONSUMERGROUP_LAG_MAX.labelled(totals["max"], by_topic))
    elif lags:
        out.append(KAFKA_CONSUMERGROUP_LAG.labelled(sum(t["sum"] for t in lags.values()), labels))
        out.append(KAFKA_CONSUMERGROUP_LAG_MAX.labelled(max(t["max"] for t in lags.values()), labels))
    return out


def samples_from_admin_state(state: AdminState, max_partition_series: int = 2000,
                             partition_series: SeriesFilter | None = None,
                             group_series: SeriesFilter | None = None,
                             canonical: Canonical = same_labels) -> list[Sample]:
    """Samples of one admin state: per-partition series for the topics partition_series lets through while those
    number at most max_partition_series partitions, per-topic lag for the groups group_series lets through; the
    topics' and groups' labels through `canonical` (the collector's LabelPool: the last fetch's objects)."""
    partition_series, group_series = partition_series or SeriesFilter(), group_series or SeriesFilter()
    broker_ids = [b["id"] for b in state["brokers"]]
    out = _cluster_samples(state) + _broker_samples(state, broker_ids)
    topics = state["topics"]
    detailed = {name for name in topics if partition_series.matches(name)}
    if sum(len(topics[name]["partitions"]) for name in detailed) > max_partition_series:
        detailed = set()
    for name, t in topics.items():
        out += _topic_samples(name, t, broker_ids, canonical)
        if name in detailed:
            out += _partition_samples(name, t)
    for group, g in state["consumer_groups"].items():
        out += _group_samples(group, g, group_series.matches(group), canonical)
    return out
