"""The probe's replica pairs: per broker one partition it follows, led by the next broker, so that acks=all latency
tells which broker holds a write back (the one common to every slow pair), leader or follower."""

from __future__ import annotations

import logging
import struct
import threading
import time
from typing import TYPE_CHECKING

from kdiag.probe import topic as probe_topic
from kdiag.probe.metrics import Histogram
from kdiag.probe.topic import METADATA_TIMEOUT, REQUEST_TIMEOUT, Topology
from kdiag.config.probe import REPLICAS_TOPIC_SUFFIX
from kdiag.core.sample import Sample
from kdiag.families.probe import PROBE_REPLICA_FAILED_TOTAL, PROBE_REPLICA_LATENCY_SECONDS

if TYPE_CHECKING:
    from confluent_kafka import KafkaError, Message, Producer
    from confluent_kafka.admin import AdminClient

log = logging.getLogger(__name__)

PAIR_PAYLOAD = struct.Struct(">4sIdii")  # magic, partition, send time (epoch s), leader, follower at send time
PAIR_MAGIC = b"kdr1"
# 1 ms to 13 s in steps of 1.5x: a pair's p90 is compared with the others', and the probe's default buckets (2.5x
# apart around 0.1-0.5 s) made a 0.4 s stall and a 0.15 s hiccup of a loaded host read alike after interpolation.
PAIR_BUCKETS = [round(0.001 * 1.5 ** i, 6) for i in range(24)]

def pair_assignment(brokers: list[int]) -> list[list[int]]:
    """Per broker (sorted) one partition it follows, led by the next broker: each leads one and follows one."""
    ids = sorted(brokers)
    return [[ids[(i + 1) % len(ids)], b] for i, b in enumerate(ids)] if len(ids) > 1 else []


def following(topology: Topology) -> set[int]:
    """Brokers that are the preferred follower of a pair partition."""
    return {replicas[-1] for replicas in topology.replicas.values()}


class ReplicaPairs:
    """The pairs topic: kept one partition per live broker, sent one message per partition each probe round."""

    def __init__(self, topic_name: str):
        self.topic = topic_name + REPLICAS_TOPIC_SUFFIX
        self._lock = threading.Lock()
        self._topology: Topology | None = None
        self._latency: dict[tuple[int, int], Histogram] = {}  # (follower, leader) -> histogram
        self._failed: dict[tuple[int, int], int] = {}
        self._error = ""

    def keep(self, admin: AdminClient) -> None:
        """manage(), its failure logged once until it succeeds again: the per-leader probe goes on regardless."""
        try:
            self.manage(admin)
            self._error = ""
        except Exception as e:  # any: a pairs topic out of shape must not stop the probe
            if not self._error:
                log.warning("probe topic %s: %s: %s (retrying)", self.topic, type(e).__name__, e)
            self._error = str(e)

    def manage(self, admin: AdminClient) -> None:
        """Create the topic, add a partition for each live broker following none, restore preferred leaders."""
        from confluent_kafka.admin import NewPartitions, NewTopic

        old = self._topology.leaders if self._topology else {}
        topology = probe_topic.describe(admin, self.topic, old)
        if topology is None:
            brokers = sorted(admin.list_topics(timeout=METADATA_TIMEOUT).brokers)
            pairs = pair_assignment(brokers)
            if pairs:
                # min.insync.replicas=2: a follower dropped from the ISR fails its pair's sends (counted as slow as
                # they took) rather than leaving the leader to ack alone, fast, as if the follower were well.
                new = NewTopic(self.topic, len(pairs), replica_assignment=pairs,
                               config={"min.insync.replicas": "2", "retention.ms": "3600000", "segment.ms": "3600000"})
                probe_topic.create_topic(admin, new)
            return
        with self._lock:
            self._topology = topology
        missing = sorted(topology.live - following(topology))
        if missing and len(topology.live) > 1:
            live = sorted(topology.live)
            new_pairs = [[live[(live.index(b) + 1) % len(live)], b] for b in missing]
            total = len(topology.replicas) + len(new_pairs)
            admin.create_partitions([NewPartitions(self.topic, total, replica_assignment=new_pairs)],
                                    request_timeout=REQUEST_TIMEOUT)[self.topic].result(timeout=REQUEST_TIMEOUT + 1)
            log.info("probe topic %s: %d partitions now, added for follower(s) %s", self.topic, total, missing)
        probe_topic.elect_preferred(admin, self.topic, probe_topic.off_preferred(topology))

    def send(self, producer: Producer) -> None:
        """One message to every pair partition whose leader and follower are known."""
        from confluent_kafka import KafkaException

        with self._lock:
            topology = self._topology
        if topology is None:
            return
        for p, replicas in sorted(topology.replicas.items()):
            leader = topology.leaders[p]
            followers = [b for b in replicas if b != leader]
            if not followers:
                continue
            value = PAIR_PAYLOAD.pack(PAIR_MAGIC, p, time.time(), leader, followers[0])
            try:
                producer.produce(self.topic, value, partition=p, on_delivery=self._delivered)
            except (BufferError, KafkaException):
                self._count_failed(followers[0], leader)

    def _delivered(self, err: KafkaError | None, msg: Message) -> None:
        value = msg.value()
        assert value is not None  # a report on a message send() made
        _magic, _p, sent, leader, follower = PAIR_PAYLOAD.unpack(value)
        if err:
            self._count_failed(follower, leader)
        latency = None if err else msg.latency()
        with self._lock:
            histogram = self._latency.setdefault((follower, leader), Histogram(PAIR_BUCKETS))
            histogram.observe(latency if latency is not None else time.time() - sent)

    def _count_failed(self, follower: int, leader: int) -> None:
        with self._lock:
            self._failed[(follower, leader)] = self._failed.get((follower, leader), 0) + 1

    def samples(self) -> list[Sample]:
        """The latency histogram and failure counter per (follower, leader) pair."""
        out: list[Sample] = []
        with self._lock:
            for (follower, leader), histogram in sorted(self._latency.items()):
                out += histogram.samples(PROBE_REPLICA_LATENCY_SECONDS, broker_id=follower, leader_id=leader)
            for (follower, leader), n in sorted(self._failed.items()):
                out.append(PROBE_REPLICA_FAILED_TOTAL.sample(n, broker_id=follower, leader_id=leader))
        return out
