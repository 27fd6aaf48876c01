"""The synthetic probe: kdiag's own producer and consumer measure latency, loss and availability per broker.

Three threads, each isolated and retried with backoff, never raising into the daemon:

- manager: creates the probe topic with one preferred partition per broker (explicit assignment), polls its
  metadata, and reconciles it: adds partitions for a live broker that prefers none, elects preferred leaders
  when leadership has drifted. It touches no other topic.
- producer: every `interval`, one message to every partition, acks from the config, linger.ms=0.
- consumer: assign()ed to every partition from the high watermark seen before the producer writes there.

Idempotence is off on purpose: the probe is an instrument, and a retry that the broker wrote twice is what
a client without idempotence experiences, so it must show up as a duplicate instead of being hidden.
assign() instead of subscribe(): no group join and no rebalance pause when brokers or partitions change,
and the start offset is pinned before the first send, so nothing sent is ever skipped by "latest".

Verdicts: a send whose delivery report is an error (or that times out after `sla`) is failed, never lost;
lost means acked and not received within `sla` of the ack. Availability of a broker is acked / sent over
`availability_window` for the partitions it led at send time; a broker of the topic's replica set that leads
none (down, or back but not yet re-elected) counts one unavailable send per round.
"""

from __future__ import annotations

import logging
import struct
import threading
import time
import uuid
from bisect import bisect_left
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from kdiag.quote import quote
from kdiag.sample import COUNTER, GAUGE, HISTOGRAM, Sample, sample

log = logging.getLogger(__name__)

DEFAULT_LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0]
# magic, run id (uuid), partition, sequence, send time (epoch s), leader at send time
PAYLOAD = struct.Struct(">4s16sIQdi")
MAGIC = b"kdp1"
METADATA_INTERVAL = 5.0
MAX_BACKOFF = 30.0
REQUEST_TIMEOUT = 10.0
METADATA_TIMEOUT = 3.0  # short, so stop() never waits long on a dead cluster
COUNTERS = ("sent", "acked", "failed", "received", "lost", "duplicated", "out_of_order")

HELP = {
    "kdiag_probe_produce_latency_seconds": "Probe produce-to-ack latency, by leader at send time.",
    "kdiag_probe_end_to_end_latency_seconds": "Probe produce-to-consume latency, by leader at send time.",
    "kdiag_probe_messages_sent_total": "Probe messages sent, by leader at send time.",
    "kdiag_probe_messages_acked_total": "Probe messages acknowledged by the broker.",
    "kdiag_probe_messages_failed_total": "Probe messages whose delivery failed or timed out (never acked, so not lost).",
    "kdiag_probe_messages_received_total": "Probe messages consumed for the first time.",
    "kdiag_probe_messages_lost_total": "Probe messages acked but not consumed within the SLA.",
    "kdiag_probe_messages_duplicated_total": "Probe messages consumed again.",
    "kdiag_probe_messages_out_of_order_total": "Probe messages consumed after a later sequence of the same partition.",
    "kdiag_probe_availability_ratio": "Acked / sent probe messages over the availability window; a replica broker "
                                      "that leads no probe partition counts as unavailable.",
    "kdiag_probe_partitions": "Probe topic partitions the broker leads.",
    "kdiag_probe_up": "1 when the probe's producer and consumer run and its topic exists.",
    "kdiag_probe_slo_seconds": "Configured probe latency objective: p99 above it is high.",
}


@dataclass
class ProbeConfig:
    """The synthetic probe: its topic, rate, durability and the windows of its verdicts."""

    enabled: bool = True
    topic: str = "kdiag-probe"
    interval: float = 1.0
    acks: str = "all"
    replication_factor: int = 0
    partitions_per_broker: int = 1
    sla: float = 10.0
    availability_window: float = 60.0
    reconcile_interval: float = 60.0
    group_id: str = ""
    latency_buckets: list[float] = field(default_factory=lambda: list(DEFAULT_LATENCY_BUCKETS))
    slo_seconds: float = 0.5

    def validate(self) -> None:
        """Raise ValueError naming the first field that cannot work."""
        for name in ("interval", "sla", "availability_window", "reconcile_interval", "slo_seconds"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}: must be positive")
        if self.acks not in ("all", "-1", "0", "1"):
            raise ValueError(f"acks: {quote(self.acks)} is not all, -1, 0 or 1")
        if self.replication_factor < 0 or self.partitions_per_broker < 1:
            raise ValueError("replication_factor must be 0 or more and partitions_per_broker 1 or more")
        if not self.topic:
            raise ValueError("topic: must not be empty")
        if not self.latency_buckets or len(set(self.latency_buckets)) != len(self.latency_buckets) \
                or min(self.latency_buckets) <= 0:
            raise ValueError("latency_buckets: must be distinct positive numbers")


RECEIVED, DUPLICATE, OUT_OF_ORDER, LATE = "received", "duplicate", "out_of_order", "late"


@dataclass
class _Partition:
    floor: int = 0  # every sequence below is settled: received, lost or failed
    high: int = -1  # highest sequence received
    received: set[int] = field(default_factory=set)  # received sequences at or above floor
    waiting: dict[int, tuple[float, Any]] = field(default_factory=dict)  # acked, not received: seq -> (deadline, tag)
    lost: dict[int, None] = field(default_factory=dict)
    failed: dict[int, None] = field(default_factory=dict)


class SequenceTracker:
    """Per-partition sequence bookkeeping: pending, lost, duplicate, out of order; pure, times passed in."""

    MEMORY = 10000  # settled lost/failed sequences remembered below the floor, to tell late from duplicate

    def __init__(self, sla: float):
        self.sla = sla
        self.partitions: dict[int, _Partition] = {}

    def _part(self, partition: int) -> _Partition:
        return self.partitions.setdefault(partition, _Partition())

    def acked(self, partition: int, seq: int, now: float, tag: Any = None) -> None:
        """The broker acknowledged seq: expect it by now + sla unless it already arrived."""
        p = self._part(partition)
        if seq >= p.floor and seq not in p.received:
            p.waiting[seq] = (now + self.sla, tag)

    def failed(self, partition: int, seq: int) -> None:
        """The send of seq failed: it is not expected (a copy the broker wrote anyway is still welcome)."""
        p = self._part(partition)
        if seq >= p.floor and seq not in p.received:
            p.waiting.pop(seq, None)
            p.failed[seq] = None
            self._advance(p)

    def received(self, partition: int, seq: int) -> str:
        """Classify one consumed sequence: RECEIVED, DUPLICATE, OUT_OF_ORDER, or LATE (after counting as lost)."""
        p = self._part(partition)
        if seq in p.received:
            return DUPLICATE
        if seq in p.lost:
            outcome = LATE
            del p.lost[seq]
        elif seq in p.failed:
            outcome = OUT_OF_ORDER if seq < p.high else RECEIVED
            del p.failed[seq]
        elif seq < p.floor:
            return DUPLICATE
        else:
            outcome = OUT_OF_ORDER if seq < p.high else RECEIVED
            p.waiting.pop(seq, None)
        if seq >= p.floor:
            p.received.add(seq)
        p.high = max(p.high, seq)
        self._advance(p)
        return outcome

    def expire(self, now: float) -> list[tuple[int, int, Any]]:
        """Acked sequences whose deadline passed: now lost; returns (partition, seq, tag) of each."""
        lost = []
        for partition, p in self.partitions.items():
            expired = [(seq, tag) for seq, (deadline, tag) in p.waiting.items() if deadline <= now]
            for seq, tag in expired:
                del p.waiting[seq]
                p.lost[seq] = None
                lost.append((partition, seq, tag))
            if expired:
                self._advance(p)
        return lost

    def pending(self) -> int:
        """Acked sequences not received yet and still within their deadline."""
        return sum(len(p.waiting) for p in self.partitions.values())

    def _advance(self, p: _Partition) -> None:
        while p.floor in p.received or p.floor in p.lost or p.floor in p.failed:
            p.received.discard(p.floor)
            p.floor += 1
        for settled in (p.lost, p.failed):
            while settled and next(iter(settled)) < p.floor - self.MEMORY:
                del settled[next(iter(settled))]


class Histogram:
    """Cumulative histogram with fixed upper bounds, rendered as Prometheus _bucket/_sum/_count samples."""

    def __init__(self, bounds: list[float]):
        self.bounds = sorted(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        """Count one observation."""
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def samples(self, name: str, **labels: object) -> list[Sample]:
        """The _bucket series (le, cumulative, +Inf last), _sum and _count."""
        out, total = [], 0
        for bound, count in zip([*self.bounds, float("inf")], self.counts, strict=True):
            total += count
            le = "+Inf" if bound == float("inf") else repr(float(bound))
            out.append(sample(f"{name}_bucket", total, HISTOGRAM, le=le, **labels))
        out.append(sample(f"{name}_sum", self.sum, HISTOGRAM, **labels))
        out.append(sample(f"{name}_count", total, HISTOGRAM, **labels))
        return out


class _BrokerStats:
    def __init__(self, buckets: list[float]):
        self.produce = Histogram(buckets)
        self.end_to_end = Histogram(buckets)
        self.counts: Counter[str] = Counter()
        self.outcomes: deque[tuple[float, bool]] = deque()  # (send time, acked) for availability


@dataclass
class _Topology:
    leaders: dict[int, int]  # partition -> leader (last known when offline)
    replicas: dict[int, list[int]]
    isrs: dict[int, list[int]]
    live: set[int]


class _Backoff:
    def __init__(self):
        self.delay = 0.0

    def next(self) -> float:
        self.delay = min(MAX_BACKOFF, self.delay * 2 or 1.0)
        return self.delay

    def reset(self) -> None:
        self.delay = 0.0


class ProbeService:
    """The probe's threads and the metrics they keep; start() never raises, samples() is cheap."""

    def __init__(self, bootstrap_servers: str, config: ProbeConfig, instance: str):
        self.bootstrap = bootstrap_servers
        self.config = config
        self.instance = instance
        self.run_id = uuid.uuid4()
        self.group_id = config.group_id or f"kdiag-probe-{instance}"
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._refresh = threading.Event()  # asks the manager for fresh metadata now
        self._threads: list[threading.Thread] = []
        self._topology: _Topology | None = None
        self._assigned: set[int] = set()  # partitions the consumer reads; the producer sends only to these
        self._positions: dict[int, int] = {}  # next offset per partition, for a recreated consumer
        self._seq: dict[int, int] = {}
        self._tracker = SequenceTracker(config.sla)
        self._brokers: dict[int, _BrokerStats] = {}
        self._running = {"manager": False, "producer": False, "consumer": False}
        self._errors = {"manager": "", "producer": "", "consumer": ""}

    # -- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the manager, producer and consumer threads (nothing when disabled); returns at once."""
        if not self.config.enabled or self._threads:
            return
        try:
            self.config.validate()
        except ValueError as e:
            log.error("probe not started: bad config: %s", e)
            self._errors["manager"] = f"bad config: {e}"
            return
        self._stopping.clear()
        for name, target in (("manager", self._manage), ("producer", self._produce), ("consumer", self._consume)):
            t = threading.Thread(target=self._guard, args=(name, target), name=f"kdiag-probe-{name}", daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the threads and wait for them up to timeout seconds in all."""
        self._stopping.set()
        self._refresh.set()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        self._threads = []

    def health(self) -> tuple[bool, str]:
        """Whether the probe is up, and what is wrong when it is not."""
        with self._lock:
            return self._up(), self._error()

    def _up(self) -> bool:
        return all(self._running.values()) and self._topology is not None and not self._errors["manager"]

    def _error(self) -> str:
        if not self.config.enabled:
            return "probe disabled"
        errors = [f"{name}: {e}" for name, e in self._errors.items() if e]
        if not errors:
            errors = [f"{name}: not running" for name, ok in self._running.items() if not ok]
            if not errors and self._topology is None:
                errors = ["manager: probe topic not seen yet"]
        return "; ".join(errors)

    def _guard(self, name: str, loop) -> None:
        """Run one thread's loop, recreating its client after any exception, with backoff."""
        backoff = _Backoff()
        while not self._stopping.is_set():
            try:
                loop(name, backoff)
            except Exception as e:  # anything: the probe degrades, the exporter goes on
                self._failed(name, e)
                self._stopping.wait(backoff.next())
        with self._lock:
            self._running[name] = False

    def _ok(self, name: str) -> None:
        with self._lock:
            self._running[name] = True
            if self._errors[name]:
                log.info("probe %s recovered", name)
                self._errors[name] = ""

    def _failed(self, name: str, e: Exception) -> None:
        message = f"{type(e).__name__}: {e}"
        with self._lock:
            self._running[name] = False
            if not self._errors[name]:
                log.warning("probe %s failed (retrying with backoff): %s", name, message)
            self._errors[name] = message

    def _client_config(self, **extra: Any) -> dict[str, Any]:
        return {
            "bootstrap.servers": self.bootstrap,
            "client.id": f"kdiag-probe-{self.instance}",
            # Metadata lookups of a missing probe topic must not auto-create it with broker defaults.
            "allow.auto.create.topics": False,
            # librdkafka logs every failed reconnect; the probe reports outages through its own metrics.
            "log_level": 0,
            "logger": logging.getLogger("kdiag.probe.librdkafka"),
            **extra,
        }

    def _broker(self, broker: int) -> _BrokerStats:
        stats = self._brokers.get(broker)
        if stats is None:
            stats = self._brokers[broker] = _BrokerStats(self.config.latency_buckets)
        return stats

    # -- manager: topic, metadata, reconcile -----------------------------------------------------------

    def _manage(self, name: str, backoff: _Backoff) -> None:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient(self._client_config())
        last_state = None
        next_due = 0.0
        reconcile_error = ""
        while not self._stopping.is_set():
            topology = self._describe(admin)
            if topology is None:
                self._create_topic(admin)
                continue
            with self._lock:
                self._topology = topology
            self._ok(name)
            backoff.reset()
            state = (frozenset(topology.live), tuple(sorted((p, tuple(isr)) for p, isr in topology.isrs.items())))
            if self._needs_reconcile(topology) and (state != last_state or time.monotonic() >= next_due):
                last_state, next_due = state, time.monotonic() + self.config.reconcile_interval
                try:
                    self._reconcile(admin, topology)
                    reconcile_error = ""
                except Exception as e:  # the probe still measures; only its topic layout stays stale
                    if not reconcile_error:
                        log.warning("probe topic %s: reconcile failed (retrying in %.0fs): %s: %s", self.config.topic,
                                    self.config.reconcile_interval, type(e).__name__, e)
                    reconcile_error = str(e)
                continue
            self._refresh.wait(min(METADATA_INTERVAL, self.config.reconcile_interval))
            self._refresh.clear()

    def _describe(self, admin) -> _Topology | None:
        """The probe topic's partitions and the live brokers, or None when the topic does not exist."""
        from confluent_kafka import KafkaError, KafkaException

        meta = admin.list_topics(topic=self.config.topic, timeout=METADATA_TIMEOUT)
        topic = meta.topics.get(self.config.topic)
        if topic is None or (topic.error and topic.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
            return None
        if topic.error or not topic.partitions:
            raise KafkaException(topic.error or f"topic {self.config.topic} has no partitions")
        old = self._topology.leaders if self._topology else {}
        leaders = {p: m.leader if m.leader >= 0 else old.get(p, m.replicas[0]) for p, m in topic.partitions.items()}
        return _Topology(leaders, {p: list(m.replicas) for p, m in topic.partitions.items()},
                         {p: sorted(m.isrs) for p, m in topic.partitions.items()}, set(meta.brokers))

    def _create_topic(self, admin) -> None:
        from confluent_kafka import KafkaError
        from confluent_kafka.admin import NewTopic

        brokers = sorted(admin.list_topics(timeout=METADATA_TIMEOUT).brokers)
        rf = self.config.replication_factor or min(3, len(brokers))
        if not 0 < rf <= len(brokers):
            raise ValueError(f"cannot create {self.config.topic} with replication factor {rf} on {len(brokers)} broker(s)")
        count = max(1, len(brokers) * self.config.partitions_per_broker)
        # Explicit rotation: every broker is the preferred leader of partitions_per_broker partitions.
        assignment = [[brokers[(i + k) % len(brokers)] for k in range(rf)] for i in range(count)]
        config = {"min.insync.replicas": str(max(1, rf - 1)), "retention.ms": "3600000", "segment.ms": "3600000"}
        future = admin.create_topics([NewTopic(self.config.topic, count, replica_assignment=assignment, config=config)],
                                     request_timeout=REQUEST_TIMEOUT)[self.config.topic]
        try:
            future.result(timeout=REQUEST_TIMEOUT + 1)
            log.info("probe created topic %s: %d partitions, replication factor %d", self.config.topic, count, rf)
        except Exception as e:
            if not (e.args and isinstance(e.args[0], KafkaError) and e.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS):
                raise
        self._stopping.wait(1.0)  # creation propagates to the brokers' metadata

    def _lacking(self, topology: _Topology) -> list[int]:
        """Live brokers that are the preferred leader of no probe partition."""
        preferred = {replicas[0] for replicas in topology.replicas.values()}
        return sorted(topology.live - preferred)

    def _off_preferred(self, topology: _Topology) -> list[int]:
        """Partitions led by another broker than their preferred one, while that one is live and in sync."""
        return sorted(p for p, replicas in topology.replicas.items()
                      if topology.leaders[p] != replicas[0] and replicas[0] in topology.live
                      and replicas[0] in topology.isrs[p])

    def _needs_reconcile(self, topology: _Topology) -> bool:
        return bool(self._lacking(topology) or self._off_preferred(topology))

    def _reconcile(self, admin, topology: _Topology) -> None:
        """Add partitions for brokers that prefer none, then move leadership back to preferred replicas."""
        from confluent_kafka import ElectionType, TopicPartition
        from confluent_kafka.admin import NewPartitions

        lacking = self._lacking(topology)
        if lacking:
            rf = min(len(next(iter(topology.replicas.values()))), len(topology.live))
            load = Counter(b for replicas in topology.replicas.values() for b in replicas)
            new = []
            for broker in lacking:
                for _ in range(self.config.partitions_per_broker):
                    others = sorted(topology.live - {broker}, key=lambda b: (load[b], b))[: rf - 1]
                    load.update(others)
                    new.append([broker, *others])
            total = len(topology.replicas) + len(new)
            admin.create_partitions([NewPartitions(self.config.topic, total, replica_assignment=new)],
                                    request_timeout=REQUEST_TIMEOUT)[self.config.topic].result(timeout=REQUEST_TIMEOUT + 1)
            log.info("probe topic %s: %d partitions now, added for broker(s) %s", self.config.topic, total, lacking)
        off = self._off_preferred(topology)
        if off:
            partitions = [TopicPartition(self.config.topic, p) for p in off]
            # No request_timeout kwarg: confluent-kafka 2.16 raises SystemError on any elect_leaders kwarg.
            result = admin.elect_leaders(ElectionType.PREFERRED, partitions).result(timeout=REQUEST_TIMEOUT)
            refused = {tp.partition: str(err) for tp, err in result.items() if err is not None}
            log.info("probe topic %s: preferred leader election for partitions %s%s", self.config.topic, off,
                     f" (refused: {refused})" if refused else "")

    # -- producer --------------------------------------------------------------------------------------

    def _produce(self, name: str, backoff: _Backoff) -> None:
        from confluent_kafka import Producer

        producer = Producer(self._client_config(**{
            "acks": self.config.acks,
            "linger.ms": 0,
            "enable.idempotence": False,
            "message.timeout.ms": max(1000, int(self.config.sla * 1000)),
            "request.timeout.ms": max(1000, min(30000, int(self.config.sla * 1000))),
        }))
        try:
            next_round = time.monotonic()
            while not self._stopping.is_set():
                if time.monotonic() >= next_round:
                    self._round(producer)
                    next_round = max(next_round + self.config.interval, time.monotonic())
                self._ok(name)
                backoff.reset()
                producer.poll(max(0.0, min(next_round - time.monotonic(), 0.2)))
                self._expire()
        finally:
            # Outstanding sends get their delivery report (an error when purged): none stays unsettled.
            producer.flush(1.0)
            producer.purge()
            producer.flush(0.5)

    def _round(self, producer) -> None:
        """One message to every partition the consumer reads; one unavailable mark for each idle replica broker."""
        with self._lock:
            topology = self._topology
            partitions = sorted(self._assigned)
        if topology is None:
            return
        now = time.time()
        leaders = {p: topology.leaders[p] for p in partitions if p in topology.leaders}
        for p, leader in leaders.items():
            seq = self._seq.get(p, 0)
            self._seq[p] = seq + 1
            value = PAYLOAD.pack(MAGIC, self.run_id.bytes, p, seq, time.time(), leader)
            with self._lock:
                self._broker(leader).counts["sent"] += 1
            try:
                producer.produce(self.config.topic, value, partition=p, on_delivery=self._delivered)
            except BufferError:
                self._settle(p, seq, now, leader, None)
        idle = {b for replicas in topology.replicas.values() for b in replicas} | topology.live
        with self._lock:
            for b in idle - set(topology.leaders.values()):
                self._broker(b).outcomes.append((now, False))
            self._prune(now)

    def _delivered(self, err, msg) -> None:
        _magic, _run, p, seq, sent, leader = PAYLOAD.unpack(msg.value())
        latency = msg.latency()
        self._settle(p, seq, sent, leader, None if err else (latency if latency is not None else time.time() - sent))
        if err:
            self._refresh.set()  # leadership may have moved: attribute the next sends right

    def _settle(self, p: int, seq: int, sent: float, leader: int, latency: float | None) -> None:
        with self._lock:
            stats = self._broker(leader)
            stats.outcomes.append((sent, latency is not None))
            if latency is None:
                stats.counts["failed"] += 1
                self._tracker.failed(p, seq)
            else:
                stats.counts["acked"] += 1
                stats.produce.observe(latency)
                self._tracker.acked(p, seq, time.monotonic(), leader)

    def _expire(self) -> None:
        with self._lock:
            for _p, _seq, leader in self._tracker.expire(time.monotonic()):
                self._broker(leader).counts["lost"] += 1

    def _prune(self, now: float) -> None:
        cutoff = now - self.config.availability_window
        for stats in self._brokers.values():
            while stats.outcomes and stats.outcomes[0][0] < cutoff:
                stats.outcomes.popleft()

    # -- consumer --------------------------------------------------------------------------------------

    def _consume(self, name: str, backoff: _Backoff) -> None:
        from confluent_kafka import Consumer

        consumer = Consumer(self._client_config(**{
            "group.id": self.group_id,
            "enable.auto.commit": False,
            "auto.offset.reset": "latest",
            # A fetch is answered as soon as data arrives, so a longer wait adds no latency; it only spares
            # the brokers idle fetches (measured: the probe's broker CPU fell from +1.3 to +0.3 s/min vs 100 ms).
            "fetch.wait.max.ms": 500,
        }))
        mine: set[int] = set()
        try:
            while not self._stopping.is_set():
                self._assign_new(consumer, mine)
                self._ok(name)
                backoff.reset()
                # poll(), not consume(): a batch call waits for its whole timeout and would inflate latency.
                msg = consumer.poll(0.2)
                if msg is None or msg.error():
                    continue  # fetch errors are transient: librdkafka retries them itself
                self._positions[msg.partition()] = msg.offset() + 1
                self._receive(msg.value(), time.time())
        finally:
            consumer.close()

    def _assign_new(self, consumer, mine: set[int]) -> None:
        """Assign partitions not read yet, from the last position read or else the current high watermark."""
        from confluent_kafka import TopicPartition

        with self._lock:
            known = set(self._topology.leaders) if self._topology else set()
        new = []
        for p in sorted(known - mine):
            offset = self._positions.get(p)
            if offset is None:
                _low, offset = consumer.get_watermark_offsets(TopicPartition(self.config.topic, p),
                                                             timeout=REQUEST_TIMEOUT, cached=False)
            self._positions[p] = offset
            new.append(TopicPartition(self.config.topic, p, offset))
        if new:
            consumer.incremental_assign(new)
            mine.update(tp.partition for tp in new)
            with self._lock:
                self._assigned.update(tp.partition for tp in new)

    def _receive(self, value: bytes | None, now: float) -> None:
        if value is None or len(value) != PAYLOAD.size:
            return
        magic, run, p, seq, sent, leader = PAYLOAD.unpack(value)
        if magic != MAGIC or run != self.run_id.bytes:
            return  # another kdiag's probe, or an older run of this one
        with self._lock:
            stats = self._broker(leader)
            outcome = self._tracker.received(p, seq)
            if outcome == DUPLICATE:
                stats.counts["duplicated"] += 1
                return
            stats.counts["received"] += 1
            stats.end_to_end.observe(max(0.0, now - sent))
            if outcome == OUT_OF_ORDER:
                stats.counts["out_of_order"] += 1

    # -- metrics ---------------------------------------------------------------------------------------

    def samples(self) -> list[Sample]:
        """Every probe series as of now; cheap (no I/O), safe from any thread."""
        out = [sample("kdiag_probe_slo_seconds", self.config.slo_seconds)]
        with self._lock:
            out.append(sample("kdiag_probe_up", 1.0 if self._up() else 0.0))
            topology = self._topology
            led = Counter(topology.leaders.values()) if topology else Counter()
            brokers = set(self._brokers)
            if topology:
                brokers |= topology.live | {b for replicas in topology.replicas.values() for b in replicas}
            self._prune(time.time())
            for b in sorted(brokers):
                stats = self._broker(b)
                out += stats.produce.samples("kdiag_probe_produce_latency_seconds", broker_id=b)
                out += stats.end_to_end.samples("kdiag_probe_end_to_end_latency_seconds", broker_id=b)
                for counter in COUNTERS:
                    out.append(sample(f"kdiag_probe_messages_{counter}_total", stats.counts[counter], COUNTER, broker_id=b))
                if stats.outcomes:
                    ratio = sum(ok for _t, ok in stats.outcomes) / len(stats.outcomes)
                    out.append(sample("kdiag_probe_availability_ratio", ratio, GAUGE, broker_id=b))
                if topology:
                    out.append(sample("kdiag_probe_partitions", led[b], GAUGE, broker_id=b))
        return out
