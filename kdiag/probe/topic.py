"""The probe topic: create it with one preferred partition per broker, describe it, and reconcile its layout."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient, NewTopic

log = logging.getLogger(__name__)

REQUEST_TIMEOUT = 10.0
METADATA_TIMEOUT = 3.0  # short, so stop() never waits long on a dead cluster


@dataclass
class Topology:
    """The probe topic's partitions and the live brokers."""

    leaders: dict[int, int]  # partition -> leader (last known when offline)
    replicas: dict[int, list[int]]
    isrs: dict[int, list[int]]
    live: set[int]


def describe(admin: AdminClient, topic_name: str, old_leaders: dict[int, int]) -> Topology | None:
    """The topic's partitions and the live brokers, or None when the topic does not exist."""
    from confluent_kafka import KafkaError, KafkaException

    meta = admin.list_topics(topic=topic_name, timeout=METADATA_TIMEOUT)
    topic = meta.topics.get(topic_name)
    if topic is None or (topic.error and topic.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
        return None
    if topic.error or not topic.partitions:
        raise KafkaException(topic.error or f"topic {topic_name} has no partitions")
    leaders = {p: m.leader if m.leader >= 0 else old_leaders.get(p, m.replicas[0]) for p, m in topic.partitions.items()}
    return Topology(leaders, {p: list(m.replicas) for p, m in topic.partitions.items()},
                    {p: sorted(m.isrs) for p, m in topic.partitions.items()}, set(meta.brokers))


def create(admin: AdminClient, topic_name: str, replication_factor: int, partitions_per_broker: int) -> None:
    """Create the topic, every broker the preferred leader of partitions_per_broker partitions; exists is fine."""
    from confluent_kafka.admin import NewTopic

    brokers = sorted(admin.list_topics(timeout=METADATA_TIMEOUT).brokers)
    rf = replication_factor or min(3, len(brokers))
    if not 0 < rf <= len(brokers):
        raise ValueError(f"cannot create {topic_name} with replication factor {rf} on {len(brokers)} broker(s)")
    count = max(1, len(brokers) * partitions_per_broker)
    assignment = [[brokers[(i + k) % len(brokers)] for k in range(rf)] for i in range(count)]
    config = {"min.insync.replicas": str(max(1, rf - 1)), "retention.ms": "3600000", "segment.ms": "3600000"}
    create_topic(admin, NewTopic(topic_name, count, replica_assignment=assignment, config=config))


def create_topic(admin: AdminClient, new: NewTopic) -> None:
    """Create one topic; one that exists already is fine."""
    from confluent_kafka import KafkaError

    future = admin.create_topics([new], request_timeout=REQUEST_TIMEOUT)[new.topic]
    try:
        future.result(timeout=REQUEST_TIMEOUT + 1)
        log.info("probe created topic %s: %d partitions", new.topic, new.num_partitions)
    except Exception as e:
        if not (e.args and isinstance(e.args[0], KafkaError) and e.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS):
            raise


def lacking(topology: Topology) -> list[int]:
    """Live brokers that are the preferred leader of no probe partition."""
    preferred = {replicas[0] for replicas in topology.replicas.values()}
    return sorted(topology.live - preferred)


def off_preferred(topology: Topology) -> list[int]:
    """Partitions led by another broker than their preferred one, while that one is live and in sync."""
    return sorted(p for p, replicas in topology.replicas.items()
                  if topology.leaders[p] != replicas[0] and replicas[0] in topology.live
                  and replicas[0] in topology.isrs[p])


def needs_reconcile(topology: Topology) -> bool:
    """Whether a broker prefers no partition or a partition is off its preferred leader."""
    return bool(lacking(topology) or off_preferred(topology))


def reconcile(admin: AdminClient, topic_name: str, topology: Topology, partitions_per_broker: int) -> None:
    """Add partitions for brokers that prefer none, then move leadership back to preferred replicas."""
    from confluent_kafka.admin import NewPartitions

    missing = lacking(topology)
    if missing:
        rf = min(len(next(iter(topology.replicas.values()))), len(topology.live))
        load = Counter(b for replicas in topology.replicas.values() for b in replicas)
        new = []
        for broker in missing:
            for _ in range(partitions_per_broker):
                others = sorted(topology.live - {broker}, key=lambda b: (load[b], b))[: rf - 1]
                load.update(others)
                new.append([broker, *others])
        total = len(topology.replicas) + len(new)
        admin.create_partitions([NewPartitions(topic_name, total, replica_assignment=new)],
                                request_timeout=REQUEST_TIMEOUT)[topic_name].result(timeout=REQUEST_TIMEOUT + 1)
        log.info("probe topic %s: %d partitions now, added for broker(s) %s", topic_name, total, missing)
    elect_preferred(admin, topic_name, off_preferred(topology))


def elect_preferred(admin: AdminClient, topic_name: str, partitions: list[int]) -> None:
    """Move leadership of these partitions back to their preferred replicas."""
    from confluent_kafka import ElectionType, TopicPartition

    if not partitions:
        return
    wanted = [TopicPartition(topic_name, p) for p in partitions]
    # No request_timeout kwarg: confluent-kafka 2.16 raises SystemError on any elect_leaders kwarg.
    result = admin.elect_leaders(ElectionType.PREFERRED, wanted).result(timeout=REQUEST_TIMEOUT)
    refused = {tp.partition: str(err) for tp, err in result.items() if err is not None}
    log.info("probe topic %s: preferred leader election for partitions %s%s", topic_name, partitions,
             f" (refused: {refused})" if refused else "")
