"""Which daemon of a cluster exports cluster-scope diagnoses, elected through Kafka's own group protocol, and what
every daemon does when no valid reporter speaks.

Every daemon (kafka.cluster_scope: auto) joins one consumer group subscribed to a one-partition topic; the member
the group assigns partition 0 is elected. It says so every ALIVE_EVERY seconds with a heartbeat record on the
compacted state topic (`<coordination_topic>_state`), beside its cluster-scope diagnoses (kdiag/runtime/handover.py),
both naming its group member id and, with a fleet key, signed (coordination_records.py). A daemon takes a record
only when it is valid and its author is the member the group assigned partition 0 to.

Any Kafka client can join the group or delete the topics. So a reporter always exists: when no valid reporter has
said it is alive for two ELECTION_INTERVALs (a foreign member holds partition 0, the topic is gone, the group does
not answer) every daemon that can read the cluster reports, and says why; Alertmanager deduplicates the identical
alerts. Vanished coordination topics are created again.

The Coordinator runs in its own process (coordination_process.py): librdkafka has aborted in its describe.
"""

from __future__ import annotations

import collections
import contextlib
import gc
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from kdiag.core.quote import quote
from kdiag.kafka.client import ClientSettings, ErrorLog, coordinator_moved
from kdiag.kafka.coordination_records import (ALIVE_SUFFIX, FORMAT, MAC_HEADER, MAX_DIAGNOSES, MAX_EVIDENCE,
                                              MAX_RECORD_BYTES, MAX_STRING, VERSION, Member, Refused, client_id, encode, mac_holds,
                                              finite, member_of, parse, record_mac)

log = logging.getLogger(__name__)

SESSION_TIMEOUT_MS = 6000  # the brokers' default group.min.session.timeout.ms: the shortest they allow
HEARTBEAT_INTERVAL_MS = 2000  # a third of the session timeout, as Kafka advises: each daemon's heartbeats cost 0.5/s
DESCRIBE_EVERY = 2.0  # seconds between looks at who holds partition 0 while elected or while nobody valid reports
# A quiet standby looks less often (each look is a DescribeGroups): the reporter's heartbeats say it is alive, and a
# heartbeat from another member, or none for an ELECTION_INTERVAL, makes it look at once.
STANDBY_DESCRIBE_EVERY = 30.0
DESCRIBE_TIMEOUT = 3.0  # a slower look is a failed look; also bounds how long a stop waits to close the consumer
RETRY_AFTER = 5.0  # seconds between attempts while the cluster does not answer
ANSWER_TIMEOUT = 5.0  # seconds the daemon's cycle waits for the coordination process (it answers from memory)
STATE_SUFFIX = "_state"
# An idle long poll of the state topic waits this long: a record ends it at once.
STATE_FETCH_WAIT_MS = 10000
OFFSET_TAIL = -2100  # librdkafka's RD_KAFKA_OFFSET_TAIL(100): the last heartbeats and the last state record
# The elected reporter says it is alive twice per interval; after two intervals without a valid word from partition
# 0's holder every daemon reports.
ELECTION_INTERVAL = 10.0
ALIVE_EVERY = ELECTION_INTERVAL / 2
TOPIC_CHECK_EVERY = 10.0  # seconds between checks that the coordination topics still exist
READABLE_WITHIN = 2 * TOPIC_CHECK_EVERY  # the cluster answered this recently: this daemon can read it
REFUSALS_LOGGED_EVERY = 60.0
CANDIDATES = 4  # records from members not (yet) seen holding partition 0, kept until the next look decides
# The state topic's reader holds at most one record's worth in flight: librdkafka bounds a fetch, and the size a
# compressed batch may decompress to, by receive.message.max.bytes.
READER_LIMITS = {"max.partition.fetch.bytes": MAX_RECORD_BYTES + 65536, "fetch.max.bytes": MAX_RECORD_BYTES + 65536,
                 "receive.message.max.bytes": MAX_RECORD_BYTES + 65536 + 512, "queued.max.messages.kbytes": 2048,
                 "queued.min.messages": 10, "fetch.queue.backoff.ms": 10}
# Each pass of the loop reads what the state topic holds for up to this long: a flood must not hold heartbeats back.
READ_BUDGET = 0.3


class CoordinatorMoved(Exception):
    """The group's coordinator moved: the election's AdminClient is replaced (`coordinator_moved`)."""


@dataclass(frozen=True)
class Reporting:
    """Whether this daemon exports its cluster-scope diagnoses now, which daemon does (None: unknown), why, and
    whether the fleet's coordination is signed."""

    reporting: bool = True
    reporter: Member | None = None
    why: str = ""
    authenticated: bool = False


class Coordinator:
    """The election's client side on its own thread; reporting() is what the collection thread asks each cycle."""

    def __init__(self, bootstrap: str, settings: ClientSettings, me: Member, topic: str, group: str,
                 mode: str = "auto", timeout: float = 10.0, key: bytes | None = None,
                 rule_ids: frozenset[str] = frozenset()):
        self.bootstrap = bootstrap
        self.settings = settings
        self.me = me
        self.topic = topic
        self.group = group
        self.mode = mode
        self.timeout = timeout
        self.key = key
        self.rule_ids = rule_ids
        self.client_id = client_id(me, group, key)
        self.errors = ErrorLog(settings, bootstrap)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._holder: tuple[str, str] | None = None  # (member id, client id) of partition 0's holder at the last look
        self._holder_since = time.monotonic()
        self._mine = False  # whether our own consumer holds partition 0 at the last look
        self._seen = -float("inf")  # monotonic time of the last successful look
        self._readable = -float("inf")  # of the last time the cluster answered (a look or a topic check)
        self._valid = time.monotonic()  # of the last time a valid reporter was known (start: a grace period)
        self._alive: dict[str, tuple[float, float, Member]] = {}  # member id: (received, saved, author) of heartbeats
        self._candidates: collections.OrderedDict[str, dict[str, Any]] = collections.OrderedDict()
        self._consumer: Any = None
        self._look_now = False  # set by the group protocol's callbacks and by records of another author
        self._last_look = -float("inf")
        self._topics_checked = -float("inf")
        self._alive_sent = -float("inf")
        self.problem = ""
        self.state_topic = topic + STATE_SUFFIX
        self._reader: Any = None  # reads the state topic (assigned, never joins a group)
        self._producer: Any = None  # publishes to it while elected
        self.published: dict[str, Any] | None = None  # the newest valid state record of partition 0's holder
        self.published_seq = 0  # how many were taken: the daemon asks for the record only when this moved
        self.foreign: list[str] = []  # client ids of the group's foreign members at the last look
        self.refused: collections.Counter[str] = collections.Counter()  # refused records by reason, since start
        self._refusals_logged = (-float("inf"), 0)
        self._skipping = (-1, 0)  # (offset, step) of the undecodable batch being skipped

    def start(self) -> None:
        """Start the election thread (a no-op with cluster_scope: always)."""
        if self.mode == "always":
            return
        self._thread = threading.Thread(target=self._run, name="coordination", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Leave the group (so another daemon takes over at once) and end the thread."""
        self._stop.set()
        if self._thread:
            self._thread.join(self.timeout + 5.0)

    def reporting(self) -> Reporting:
        """Whether this daemon reports now, who does and why (module docstring)."""
        signed = self.key is not None
        if self.mode == "always":
            return Reporting(True, self.me, "kafka.cluster_scope is always", signed)
        now = time.monotonic()
        with self._lock:
            fresh = now - self._seen < SESSION_TIMEOUT_MS / 1000 and not self._stop.is_set()
            if self._mine and fresh and self.mode == "auto":
                return Reporting(True, self.me, "elected", signed)
            if (author := self._valid_reporter(now)) is not None:
                return Reporting(False, author, "another daemon is elected", signed)
            silent = now - self._valid
            readable = now - self._readable < READABLE_WITHIN and not self._stop.is_set()
            if self.mode == "auto" and readable and silent >= 2 * ELECTION_INTERVAL:
                return Reporting(True, self.me, f"no valid reporter for {silent:.0f} s: {self._why_silent()}", signed)
            return Reporting(False, None, "waiting for a valid reporter" if readable else "the cluster does not answer",
                             signed)

    @property
    def looked_at(self) -> float:
        """When (time.monotonic) this daemon last described its group."""
        with self._lock:
            return self._seen

    def _valid_reporter(self, now: float) -> Member | None:
        """The author of the holder's last heartbeat when it is recent (under the lock)."""
        heard = self._alive.get(self._holder[0]) if self._holder else None
        return heard[2] if heard and now - heard[0] < 2 * ELECTION_INTERVAL else None

    def _why_silent(self) -> str:
        if self._holder is None:
            return f"no member of group {quote(self.group)} holds partition 0 of {quote(self.topic)}"
        if self._holder[1] in self.foreign:
            return f"foreign member {quote(self._holder[1], 120)} holds partition 0"
        return f"partition 0's holder {quote(self._holder[1], 120)} publishes no valid heartbeat"

    def _run(self) -> None:
        from confluent_kafka.admin import AdminClient

        admin = None
        try:
            while not self._stop.is_set():
                moved = False
                try:
                    admin = admin or AdminClient(self._conf({}))
                    if self._reader is None:
                        self._ensure_topics(admin)
                        self._reader = self._read_state()
                    if self._consumer is None and self.mode == "auto":  # `never` only looks at the group
                        self._consumer = self._join()
                    self._loop(admin)
                except CoordinatorMoved:
                    moved = True
                except Exception as e:  # the election never takes the daemon down: it only stops reporting
                    self._failed(e)
                    self._stop.wait(RETRY_AFTER)
                if moved:  # out of the except block, whose traceback holds the old client
                    log.info("the coordinator of group %s moved: looking at it through a new admin client", self.group)
                    admin = None
                    gc.collect()
        finally:
            log.info("leaving coordination group %s", self.group)
            self._close_clients()
            # The AdminClient is destroyed here, on this Python thread: failed futures keep their exceptions, whose
            # frames keep the client, and a garbage collection on a librdkafka thread destroying it aborts the process.
            gc.collect()
            del admin

    def _close_clients(self) -> None:
        """Close the group consumer (its LeaveGroup hands partition 0 over at once), the reader and the producer."""
        with contextlib.suppress(Exception):
            if self._consumer is not None:
                # librdkafka 2.16's cooperative close sends no LeaveGroup when the member holds no partition (every
                # daemon but the reporter): the group then waits a session timeout. An unsubscribe first always leaves.
                self._consumer.unsubscribe()
                self._consumer.close()
        with contextlib.suppress(Exception):
            if self._producer is not None:
                self._producer.flush(1.0)
            if self._reader is not None:
                self._reader.close()
        self._consumer = self._reader = self._producer = None
        with self._lock:
            self._mine = False

    def _conf(self, base: dict[str, Any]) -> dict[str, Any]:
        return self.settings.client_conf(self.bootstrap, self.client_id, self.errors, self.timeout, base)

    def _missing_topics(self, admin: Any) -> list[str]:
        """Which coordination topics the cluster does not have (one Metadata request per topic, never all topics)."""
        missing = []
        for name in (self.topic, self.state_topic):
            topic = admin.list_topics(topic=name, timeout=self.timeout).topics.get(name)
            if topic is None or topic.error is not None:
                missing.append(name)
        return missing

    def _ensure_topics(self, admin: Any) -> bool:
        """Create the one-partition coordination and (compacted) state topics, replicated min(3, brokers) times,
        unless they exist; whether any was missing."""
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import NewTopic

        missing = self._missing_topics(admin)
        self._readable = self._topics_checked = time.monotonic()
        if not missing:
            return False
        replicas = min(3, len(admin.list_topics(topic=self.topic, timeout=self.timeout).brokers))
        # Compaction keeps the last record per key; short segments let it run at all on so small a topic.
        configs = {self.topic: {}, self.state_topic: {"cleanup.policy": "compact", "segment.ms": "600000",
                                                      "max.message.bytes": str(MAX_RECORD_BYTES + 65536)}}
        new = [NewTopic(t, 1, replicas, config=configs[t]) for t in missing]
        for name, future in admin.create_topics(new, request_timeout=self.timeout).items():
            try:
                future.result(timeout=self.timeout)
                log.info("created the coordination topic %s (1 partition, %d replicas)", name, replicas)
            except KafkaException as e:
                if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:  # another daemon was first: fine
                    raise
        return True

    def _read_state(self) -> Any:
        """A consumer of the state topic from its last records on; it never joins its group or commits."""
        from confluent_kafka import Consumer, TopicPartition

        reader = Consumer(self._conf({"group.id": self.group + STATE_SUFFIX, "enable.auto.commit": False,
                                      "fetch.wait.max.ms": STATE_FETCH_WAIT_MS, **READER_LIMITS}))
        reader.assign([TopicPartition(self.state_topic, 0, OFFSET_TAIL)])
        return reader

    def _take_state(self) -> None:
        """Take the valid records read from the state topic; count and log the others."""
        group = self.group.encode()
        deadline = time.monotonic() + READ_BUDGET
        skipped = False
        while self._reader is not None and (left := deadline - time.monotonic()) > 0:
            # Past a skipped batch the next fetch is in flight: wait for its first message within the budget (a
            # consume of n waits for all n), or a flood of bad batches is read one per pass of the loop (0.5 s).
            if not (batch := self._reader.consume(1, left) if skipped else self._reader.consume(50, 0)):
                break
            skipped = self._take_batch(batch, group)

    def _take_batch(self, batch: list[Any], group: bytes) -> bool:
        """Take a batch of the state topic's messages; whether a bad batch was skipped (a seek)."""
        from confluent_kafka import KafkaError

        for message in batch:
            if message.error():
                if message.error().code() in (KafkaError._BAD_COMPRESSION, KafkaError.MSG_SIZE_TOO_LARGE):
                    self._skip_batch(message.offset(), message.error().str())
                    return True  # the rest was fetched before the seek: the same batch failing again, not larger
                continue  # else a vanished topic: the next topic check creates it again
            if message.key() not in (group, group + ALIVE_SUFFIX):
                continue  # another fleet's group sharing the topic
            try:
                self._take(message.key(), message.value() or b"", message.headers())
            except Refused as e:
                self._refuse(e, message.offset())
        return False

    def _skip_batch(self, offset: int, error: str) -> None:
        """Seek past a batch librdkafka will not decompress (it would fetch it again forever): its size is unknown,
        so each time the same batch fails again the step doubles; past it, at most as many records are skipped as
        the batch held, and the reporter says again what they said (a heartbeat every ALIVE_EVERY)."""
        from confluent_kafka import TopicPartition

        step = self._skipping[1] * 2 if self._skipping[0] == offset else 1
        if step == 1:
            self._refuse(Refused("too_large", f"a batch that decompresses past {MAX_RECORD_BYTES} bytes ({error})"),
                         offset)
        self._skipping = (offset, step)
        with contextlib.suppress(Exception):  # not fetching yet: the next error seeks again
            self._reader.seek(TopicPartition(self.state_topic, 0, offset + step))

    def _take(self, key: bytes, value: bytes, headers: list[tuple[str, bytes]] | None) -> None:
        if len(value) > MAX_RECORD_BYTES:
            raise Refused("too_large", f"{len(value)} bytes")
        if self.key is not None and not mac_holds(self.key, key, value, headers):
            raise Refused("bad_mac", "no valid kdiag-mac header")
        record = parse(value, time.time(), self.rule_ids, self.group)
        if (record["kind"] == "alive") != key.endswith(ALIVE_SUFFIX):
            raise Refused("schema", "the record's kind does not match its key")
        with self._lock:
            holder = self._holder[0] if self._holder else None
            if record["member_id"] != holder:
                self._candidates[record["member_id"] + record["kind"]] = record
                while len(self._candidates) > CANDIDATES:
                    self._candidates.popitem(last=False)
                self._look_now = True
                return
            self._accept(record)

    def _accept(self, record: dict[str, Any]) -> None:
        """Take a valid record of partition 0's holder (under the lock); Refused when it is older than one taken."""
        member = record["member_id"]
        last = self._alive.get(member)
        if record["kind"] == "alive":
            if last and record["saved"] <= last[1]:
                raise Refused("replayed", "a heartbeat no newer than the last one")
            self._alive = {member: (time.monotonic(), record["saved"], Member(record["host"], record["broker_id"]))}
            return
        if self.published and self.published["member_id"] == member and record["saved"] <= self.published["saved"]:
            raise Refused("replayed", "a state record no newer than the last one")
        self.published = record
        self.published_seq += 1

    def _refuse(self, e: Refused, offset: int) -> None:
        """Count a refused record; log the refusals at most once a minute, with the last one's offset and reason."""
        self.refused[e.reason] += 1
        now, total = time.monotonic(), sum(self.refused.values())
        if now - self._refusals_logged[0] >= REFUSALS_LOGGED_EVERY:
            log.warning("refused %d record(s) of %s since the last report (%s), the last at offset %d: %s",
                        total - self._refusals_logged[1], self.state_topic,
                        ", ".join(f"{r} {n}" for r, n in sorted(self.refused.items())), offset, quote(str(e), 200))
            self._refusals_logged = (now, total)

    def publish(self, record: dict[str, Any]) -> None:
        """Publish the reporter's cluster-scope state (only while elected; a no-op otherwise)."""
        if not self._elected():
            return
        # What a reader would refuse is cut or left out here, so that one odd value never costs the whole record.
        diagnoses = [d for d in record.get("diagnoses", []) if len(d.get("subject", "")) <= MAX_STRING
                     and finite(d.get("since"))]
        diagnoses.sort(key=lambda d: d.get("state") != "firing")
        for d in diagnoses:
            d["summary"] = str(d.get("summary", ""))[:MAX_STRING]
            d["evidence"] = {str(k)[:MAX_STRING]: v[:MAX_STRING] if isinstance(v, str) else v if finite(v) else None
                             for k, v in list((d.get("evidence") or {}).items())[:MAX_EVIDENCE]}
        count = min(len(diagnoses), MAX_DIAGNOSES)
        while True:
            value = encode(self._envelope("state", saved=record.get("saved", time.time()), diagnoses=diagnoses[:count]))
            if len(value) <= MAX_RECORD_BYTES or count == 0:
                break
            count //= 2
        if count < len(record.get("diagnoses", [])):
            log.warning("published %d of %d cluster-scope diagnoses: a state record holds at most %d and %d bytes",
                        count, len(record.get("diagnoses", [])), MAX_DIAGNOSES, MAX_RECORD_BYTES)
        self._produce(self.group.encode(), value)

    def _envelope(self, kind: str, **fields: Any) -> dict[str, Any]:
        member_id = (self._consumer.memberid() if self._consumer is not None else None) or ""
        return {"format": FORMAT, "version": VERSION, "group": self.group, "kind": kind, "host": self.me.host,
                "broker_id": self.me.broker_id, "member_id": member_id, **fields}

    def _produce(self, key: bytes, value: bytes) -> None:
        if self._producer is None:
            from confluent_kafka import Producer

            self._producer = Producer(self._conf({"acks": "all", "linger.ms": 0,
                                                  "message.max.bytes": MAX_RECORD_BYTES + 65536}))
        headers = [(MAC_HEADER, record_mac(self.key, key, value).encode())] if self.key is not None else None
        self._producer.produce(self.state_topic, key=key, value=value, headers=headers)
        self._producer.poll(0)

    def _elected(self) -> bool:
        return self.reporting().why == "elected"

    def _join(self) -> Any:
        from confluent_kafka import Consumer

        consumer = Consumer(self._conf({
            "group.id": self.group, "session.timeout.ms": SESSION_TIMEOUT_MS,
            "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS, "enable.auto.commit": False,
            "auto.offset.reset": "latest", "fetch.wait.max.ms": STATE_FETCH_WAIT_MS,
            # Sticky: a daemon joining (a restart elsewhere) leaves partition 0, and the reporter, where they are.
            "partition.assignment.strategy": "cooperative-sticky"}))
        # An assignment change (partition 0 coming or going) makes the next poll look at the group at once.
        consumer.subscribe([self.topic], on_assign=self._changed, on_revoke=self._changed)
        log.info("joined coordination group %s on topic %s as %s", self.group, self.topic, quote(self.client_id, 120))
        return consumer

    def _loop(self, admin: Any) -> None:
        """Serve the group protocol (poll), read the state topic, look at the group, say this daemon is alive."""
        self._look_now = False
        while not self._stop.is_set():
            if self._consumer is not None:
                self._consumer.poll(0.5)  # heartbeats and rebalances run inside poll; no message is ever read
            else:
                self._stop.wait(0.5)
            self._take_state()
            now = time.monotonic()
            if now - self._topics_checked >= TOPIC_CHECK_EVERY and self._ensure_topics(admin):
                log.warning("the coordination topics of group %s had vanished and were created again: rejoining",
                            self.group)
                self._close_clients()
                return
            with self._lock:
                doubtful = self._valid_reporter(now) is None or now - self._alive.get(
                    self._holder[0] if self._holder else "", (0.0,))[0] >= ELECTION_INTERVAL
            every = DESCRIBE_EVERY if self._mine or doubtful else STANDBY_DESCRIBE_EVERY
            if now - self._last_look >= every or (self._look_now and now - self._last_look >= 1.0):
                self._look_now = False
                self._last_look = now
                try:
                    self._look(admin)
                except Exception as e:  # keep polling: the consumer's heartbeats must go on while this fails
                    self._failed(e)
                    if coordinator_moved(e):
                        raise CoordinatorMoved from None  # the consumer stays in the group meanwhile
            if self._elected() and now - self._alive_sent >= ALIVE_EVERY:
                self._produce(self.group.encode() + ALIVE_SUFFIX, encode(self._envelope("alive", saved=time.time())))
                self._alive_sent = now
            elif not self._mine:
                self._alive_sent = -float("inf")  # elected again: say so at once
            with self._lock:
                if self._mine or self._valid_reporter(now) is not None:
                    self._valid = now

    def _changed(self, _consumer: Any, _partitions: list[Any]) -> None:
        self._look_now = True

    def _look(self, admin: Any) -> None:
        futures = admin.describe_consumer_groups([self.group], request_timeout=DESCRIBE_TIMEOUT)
        description = futures[self.group].result(timeout=DESCRIBE_TIMEOUT + 1.0)
        admin.poll(0)  # serves error_cb and the log lines for self.errors
        held = holder(description, self.topic)
        mine = self._consumer is not None and held is not None and held[0] == self._consumer.memberid()
        if mine != self._mine:
            log.info("%s cluster-scope diagnoses (coordination group %s)", "elected to report" if mine else
                     "no longer elected to report", self.group)
        now = time.monotonic()
        foreign = sorted(m.client_id for m in description.members if member_of(m.client_id, self.group, self.key) is None)
        with self._lock:
            if held != self._holder:
                self._holder, self._holder_since = held, now
            if held and self.key is not None and held[1] not in foreign and self._valid_reporter(now) is None \
                    and now - self._holder_since >= 2 * ELECTION_INTERVAL and not mine:
                foreign.append(held[1])  # a copied client.id: it holds partition 0 but cannot sign a heartbeat
            self._mine, self._seen, self._readable = mine, now, now
            for name, record in list(self._candidates.items()):
                if held and record["member_id"] == held[0]:
                    with contextlib.suppress(Refused):
                        self._accept(record)
                else:
                    self.refused["wrong_author"] += 1
                del self._candidates[name]
        if foreign != self.foreign:
            if foreign:
                log.warning("foreign member(s) in coordination group %s (no valid kdiag membership%s): %s", self.group,
                            "" if self.key else "; set kafka.coordination_key_file to sign the fleet's",
                            ", ".join(quote(c, 120) for c in foreign[:5]))
            self.foreign = foreign
        self.problem = self._problem(now)
        self.errors.clear()

    def _problem(self, now: float) -> str:
        """What is wrong with the election, "" when a valid reporter exists and no foreign member is in the group."""
        with self._lock:
            silent = not self._mine and self._valid_reporter(now) is None and now - self._valid >= 2 * ELECTION_INTERVAL
            why = self._why_silent() if silent else ""
        if self.foreign:
            why = f"{why}; " if why else ""
            why += f"{len(self.foreign)} foreign member(s) in group {quote(self.group)}"
        if why and why != self.problem:
            log.warning("coordination group %s: %s%s", self.group, why, ": every daemon that can read the cluster "
                        "reports its cluster-scope diagnoses" if silent else "")
        return why

    def _failed(self, e: Exception) -> None:
        reason = self.errors.reason() or self.settings.redact(f"{type(e).__name__}: {e}")
        if reason != self.problem:
            log.warning("coordination through %s failed: %s", self.bootstrap, reason)
        self.problem = reason


def holder(description: Any, topic: str) -> tuple[str, str] | None:
    """(member id, client id) of the group member assigned the topic's partition 0, None while nobody is."""
    for m in description.members:
        tps = m.assignment.topic_partitions if m.assignment else []
        if any(tp.topic == topic and tp.partition == 0 for tp in tps):
            return m.member_id, m.client_id
    return None
