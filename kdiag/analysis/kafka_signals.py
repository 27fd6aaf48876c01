"""Kafka signals per topic (AdminClient), cluster-wide, per consumer group, and the probe per broker (the broker
subject is broker_signals.py)."""

from __future__ import annotations

import bisect
import math
import operator
from operator import itemgetter

from kdiag.core.units import format_duration
from kdiag.core.history import History, Points
from kdiag.analysis.latency_outliers import window_quantiles
from kdiag.analysis.brokers import ON_BROKERS, live_brokers, node_id, on_brokers, topic_rates_by_leader
from kdiag.analysis.signals import (
    Signals, latest_by, latest_per, per_1k, put, rates_by, rates_per, ratio, series_change, subject, total,
)
from kdiag.families.family import Family
from kdiag.families.kafka import (
    CONSUMER_CATCH_UP_SECONDS, CONSUMER_LAG_SECONDS, KAFKA_BROKER_CONFIG, KAFKA_BROKER_EXPECTED, KAFKA_BROKER_INFO,
    KAFKA_BYTES_IN_TOTAL, KAFKA_CONSUMERGROUP_IDLE_MEMBERS, KAFKA_CONSUMERGROUP_LAG, KAFKA_CONSUMERGROUP_MEMBERS,
    KAFKA_CONSUMERGROUP_STABLE, KAFKA_CONTROLLER_ID, KAFKA_LOG_FLUSHES_TOTAL, KAFKA_MESSAGES_IN_TOTAL,
    KAFKA_TOPIC_BROKER_LEADERS, KAFKA_TOPIC_CONFIG, KAFKA_TOPIC_CONFIG_OVERRIDE, KAFKA_TOPIC_LOG_END_OFFSET_TOTAL,
    KAFKA_TOPIC_OFFLINE_PARTITIONS, KAFKA_TOPIC_KDIAG_OWN,
    KAFKA_TOPIC_PARTITION_TOP_SHARE, KAFKA_TOPIC_PARTITIONS, KAFKA_TOPIC_REPLICATION_FACTOR,
    KAFKA_TOPIC_UNDER_MIN_ISR_PARTITIONS, KAFKA_TOPIC_UNDER_REPLICATED_PARTITIONS,
)
from kdiag.families.probe import (
    PROBE_AVAILABILITY_RATIO, PROBE_END_TO_END_LATENCY_SECONDS, PROBE_MESSAGES_FAILED_TOTAL,
    PROBE_MESSAGES_LOST_TOTAL, PROBE_MESSAGES_SENT_TOTAL, PROBE_PRODUCE_LATENCY_SECONDS, PROBE_SLO_SECONDS,
)

LAG_GROWTH_SECONDS = 120.0
CHURN_SECONDS = 300.0
TOPIC_CONFIGS = {
    "flush.messages": "flush_messages",
    "flush.ms": "flush_ms",
    "min.insync.replicas": "min_insync_replicas",
    "unclean.leader.election.enable": "unclean_leader_election",
    "segment.bytes": "segment_bytes",
}


def skew(per_broker: dict[str, float], brokers: int) -> tuple[float | None, str | None]:
    """(busiest broker's value over the mean per live broker, busiest broker) of a per-broker breakdown."""
    total = sum(per_broker.values())
    if not per_broker or not total or brokers < 1:
        return None, None
    top = max(per_broker, key=per_broker.__getitem__)
    return per_broker[top] / (total / brokers), top


@subject("topic", {
    "partitions": "partitions of the topic",
    "replication_factor": "replicas per partition",
    "under_replicated_partitions": "partitions whose ISR is smaller than their replica set",
    "offline_partitions": "partitions without a leader",
    "under_min_isr_partitions": "partitions whose ISR is below min.insync.replicas",
    **{name: f"topic config {key}" for key, name in TOPIC_CONFIGS.items()},
    "messages_per_second": "messages appended per second (log end offsets)",
    "leader_skew_ratio": "leaders on the busiest broker over the ideal ceil(partitions / brokers)",
    "leader_top_broker": "the broker leading most of the topic's partitions",
    "leader_top_broker_share": "share of the topic's partitions led by that broker (0-1)",
    "traffic_skew_ratio": "messages/s through the busiest leader over the mean per live broker",
    "traffic_top_broker": "the broker whose partitions take most of the topic's messages",
    "partition_top_share": "share of the topic's messages going to its busiest partition (0-1)",
    "brokers": "live brokers in the cluster",
    "on_brokers": "brokers leading the topic's partitions, comma-separated",
    **{f"{name}_override": f"1 when the topic sets {key} itself, 0 when it inherits the brokers' value"
       for key, name in TOPIC_CONFIGS.items()},
})
def topic_signals(history: History, window: float) -> dict[str, Signals]:
    """Health, flush settings and leader and traffic balance per topic, kdiag's own topics left out."""
    brokers = len(live_brokers(history))
    gauges = {family.name.removeprefix("kdiag_kafka_topic_"): latest_per(history, family, "topic") for family in (
        KAFKA_TOPIC_PARTITIONS, KAFKA_TOPIC_REPLICATION_FACTOR, KAFKA_TOPIC_UNDER_REPLICATED_PARTITIONS,
        KAFKA_TOPIC_OFFLINE_PARTITIONS, KAFKA_TOPIC_UNDER_MIN_ISR_PARTITIONS)}
    configs = latest_by(history, KAFKA_TOPIC_CONFIG, "topic", "name")
    overrides = latest_by(history, KAFKA_TOPIC_CONFIG_OVERRIDE, "topic", "name")
    leaders: dict[str, dict[str, float]] = {}
    for (topic, broker), n in latest_by(history, KAFKA_TOPIC_BROKER_LEADERS, "topic", "broker_id").items():
        leaders.setdefault(topic, {})[broker] = n
    messages = rates_per(history, KAFKA_TOPIC_LOG_END_OFFSET_TOTAL, window, "topic")
    top_share = latest_per(history, KAFKA_TOPIC_PARTITION_TOP_SHARE, "topic")
    by_leader: dict[str, dict[str, float]] = {}
    for b, per_topic in topic_rates_by_leader(history).items():
        for topic, r in per_topic.items():
            by_leader.setdefault(topic, {})[b] = r
    own = latest_per(history, KAFKA_TOPIC_KDIAG_OWN, "topic")
    out = {}
    for topic, partitions in gauges["partitions"].items():
        if topic in own:
            continue
        topic_leaders = leaders.get(topic, {})
        top_leader = max(topic_leaders, key=topic_leaders.__getitem__) if topic_leaders else None
        ideal = math.ceil(partitions / brokers) if brokers else None
        traffic_skew, traffic_top = skew(by_leader.get(topic, {}), brokers)
        out[topic] = put(
            {"name": topic},
            **{name: values.get(topic) for name, values in gauges.items()},
            **{name: configs.get((topic, key)) for key, name in TOPIC_CONFIGS.items()},
            **{f"{name}_override": overrides.get((topic, key), 0.0) if (topic, key) in configs else None
               for key, name in TOPIC_CONFIGS.items()},
            messages_per_second=messages.get(topic),
            leader_skew_ratio=ratio(topic_leaders.get(top_leader), ideal) if top_leader else None,
            leader_top_broker=top_leader,
            leader_top_broker_share=ratio(topic_leaders.get(top_leader), partitions) if top_leader else None,
            traffic_skew_ratio=traffic_skew,
            traffic_top_broker=traffic_top,
            partition_top_share=top_share.get(topic),
            brokers=float(brokers) if brokers else None,
            on_brokers=on_brokers({b for b, n in topic_leaders.items() if n > 0}),
        )
    return out


@subject("cluster", {
    "brokers": "live brokers the AdminClient lists",
    "controller_id": "the active controller's node id",
    "log_flushes_per_second": "log flushes per second over all brokers",
    "log_flushes_per_1k_messages": "log flushes over all brokers per 1,000 messages produced to the cluster",
    "bytes_in_per_second": "bytes produced per second over all brokers",
    "under_replicated_partitions": "under-replicated partitions over all topics",
    "offline_partitions": "partitions without a leader over all topics",
    "log_flush_scheduler_interval_ms": "the smallest log.flush.scheduler.interval.ms of the brokers (flush.ms is only "
                                       "enforced when it is set)",
    "expected_brokers": "brokers in kafka.expected_brokers or seen in the last 15 minutes of history",
    "missing_brokers": "brokers seen in the last 15 minutes that the cluster no longer lists (down or fenced)",
    "missing_broker_ids": "ids of the missing brokers, comma-separated",
})
def cluster_signals(history: History, window: float) -> dict[str, Signals]:
    """Cluster-wide totals, for rules about one topic or broker to compare against."""
    brokers = live_brokers(history)
    controller = latest_by(history, KAFKA_CONTROLLER_ID)
    if not brokers and not controller:
        return {}

    seen = {labels.get("broker_id", "") for labels, _ in history.recent_series(KAFKA_BROKER_INFO.name)}
    seen |= {b for (b,) in latest_by(history, KAFKA_BROKER_EXPECTED, "broker_id")}
    missing = seen - set(brokers)
    flushes = total(rates_by(history, KAFKA_LOG_FLUSHES_TOTAL, window))
    return {"cluster": put(
        {"name": "cluster"},
        brokers=float(len(brokers)),
        expected_brokers=float(len(seen)),
        missing_brokers=float(len(missing)),
        missing_broker_ids=on_brokers(missing) or "",
        controller_id=total(controller),
        log_flushes_per_second=flushes,
        log_flushes_per_1k_messages=per_1k(flushes, total(rates_by(history, KAFKA_MESSAGES_IN_TOTAL, window))),
        bytes_in_per_second=total(rates_by(history, KAFKA_BYTES_IN_TOTAL, window)),
        under_replicated_partitions=total(latest_by(history, KAFKA_TOPIC_UNDER_REPLICATED_PARTITIONS)),
        offline_partitions=total(latest_by(history, KAFKA_TOPIC_OFFLINE_PARTITIONS)),
        log_flush_scheduler_interval_ms=min((v for (_, name), v in latest_by(
            history, KAFKA_BROKER_CONFIG, "broker_id", "name").items()
            if name == "log.flush.scheduler.interval.ms"), default=None),
    )}


@subject("group", {
    "members": "members of the consumer group",
    "idle_members": "members with no partition assigned (more consumers than partitions)",
    "lag_messages": "messages between the committed offsets and the log ends, over every topic it consumes",
    "lag_growth_per_second": f"change of the lag per second over the last {LAG_GROWTH_SECONDS:.0f} s (> 0: falling behind)",
    "membership_changes_per_minute": f"changes of member count or Stable state per minute over the last {CHURN_SECONDS:.0f} s",
    "stable": "1 while the group is Stable",
    "lag_seconds": "how long ago the log end was where its committed offset is now, on its furthest-behind topic",
    "catch_up_seconds": "seconds until the lag is gone at the current consume and write rates (absent when never)",
    "catch_up": "when the lag is gone at the current consume and write rates: 'in 5m 20s', 'now', or 'never' while "
                "the group reads slower than its topics are written",
})
def group_signals(history: History, window: float) -> dict[str, Signals]:
    """Members, idle members, lag and its growth per consumer group."""
    members, member_changes = latest_and_changes(history, KAFKA_CONSUMERGROUP_MEMBERS)
    stable, stable_changes = latest_and_changes(history, KAFKA_CONSUMERGROUP_STABLE)
    idle = latest_per(history, KAFKA_CONSUMERGROUP_IDLE_MEMBERS, "group")
    lag: dict[str, float] = {}
    growth: dict[str, float] = {}
    for group, points in history.series_of(KAFKA_CONSUMERGROUP_LAG.name, "group"):
        lag[group] = lag.get(group, 0.0) + points[-1][1]
        # Over minutes, not the signal window: the AdminClient reports lag every kafka.interval only.
        if (change := series_change(points, LAG_GROWTH_SECONDS)) and change[1] > 0:
            growth[group] = growth.get(group, 0.0) + change[0] / change[1]
    lag_seconds = largest_per_group(history, CONSUMER_LAG_SECONDS)
    catch_up_seconds = largest_per_group(history, CONSUMER_CATCH_UP_SECONDS)
    out = {}
    for g, n in sorted(members.items()):
        churn = [c for c in (member_changes.get(g), stable_changes.get(g)) if c is not None]
        out[g] = put({"name": g}, members=n, idle_members=idle.get(g), lag_messages=lag.get(g),
                     lag_growth_per_second=growth.get(g), stable=stable.get(g),
                     membership_changes_per_minute=sum(churn) if churn else None,
                     lag_seconds=lag_seconds.get(g), **catch_up(catch_up_seconds.get(g)))
    return out


def latest_and_changes(history: History, family: Family) -> tuple[dict[str, float], dict[str, float]]:
    """Per group, the latest value of a gauge and how often it changed per minute (changes_per_minute)."""
    latest: dict[str, float] = {}
    changes: dict[str, float] = {}
    for group, points in history.series_of(family.name, "group"):
        latest[group] = points[-1][1]
        if (n := changes_per_minute(points, CHURN_SECONDS)) is not None:
            changes[group] = n
    return latest, changes


def largest_per_group(history: History, family: Family) -> dict[str, float]:
    """Per group, the largest latest value of a gauge over its topics."""
    out: dict[str, float] = {}
    for group, points in history.series_of(family.name, "group"):
        out[group] = max(out.get(group, -math.inf), points[-1][1])
    return out


def catch_up(seconds: float | None) -> dict[str, float | str]:
    """catch_up_seconds and its text from a group's time to catch up (+Inf: never, and no catch_up_seconds)."""
    if seconds is None:
        return {}
    if math.isinf(seconds):
        return {"catch_up": "never"}
    return {"catch_up_seconds": seconds, "catch_up": f"in {format_duration(seconds)}" if seconds > 0 else "now"}


def changes_per_minute(points: Points, seconds: float) -> float | None:
    """How often a gauge changed value per minute over the last `seconds`; None before a minute of points."""
    recent = points[bisect.bisect_left(points, points[-1][0] - seconds, key=itemgetter(0)):]
    span = recent[-1][0] - recent[0][0]
    if span < 60.0:
        return None
    values = [v for _, v in recent]
    changes: int = sum(map(operator.ne, values, values[1:]))
    return changes / (span / 60.0)


@subject("probe", {
    "broker_id": "the broker leading the probed partitions",
    "on_brokers": ON_BROKERS,
    "produce_p99_seconds": "99th percentile produce-ack latency over the signal window",
    "end_to_end_p99_seconds": "99th percentile produce-to-consume latency over the signal window",
    "slo_seconds": "the configured latency objective",
    "availability_ratio": "share of probe sends acknowledged over the availability window (0-1)",
    "sent_per_second": "probe messages sent per second",
    "failed_per_second": "probe sends failing per second",
    "lost_per_second": "acknowledged probe messages the log lost (their offsets read without them), per second",
    "lost_in_window": "acknowledged probe messages lost within the signal window",
})
def probe_signals(history: History, window: float) -> dict[str, Signals]:
    """The synthetic probe's latency, availability and loss per broker."""
    produce = window_quantiles(history, PROBE_PRODUCE_LATENCY_SECONDS, window, 0.99)
    e2e = window_quantiles(history, PROBE_END_TO_END_LATENCY_SECONDS, window, 0.99)
    availability = latest_per(history, PROBE_AVAILABILITY_RATIO, "broker_id")
    sent = rates_per(history, PROBE_MESSAGES_SENT_TOTAL, window, "broker_id")
    failed = rates_per(history, PROBE_MESSAGES_FAILED_TOTAL, window, "broker_id")
    lost = rates_per(history, PROBE_MESSAGES_LOST_TOTAL, window, "broker_id")
    slo = next(iter(latest_by(history, PROBE_SLO_SECONDS).values()), None)
    out = {}
    for b in sorted(set(availability) | set(sent) | set(produce)):
        out[b] = put(
            {"name": f"broker {b}"},
            broker_id=node_id(b),
            on_brokers=on_brokers([b]),
            produce_p99_seconds=produce.get(b),
            end_to_end_p99_seconds=e2e.get(b),
            slo_seconds=slo,
            availability_ratio=availability.get(b),
            sent_per_second=sent.get(b),
            failed_per_second=failed.get(b),
            lost_per_second=lost.get(b),
            lost_in_window=lost[b] * window if b in lost else None,
        )
    return out
