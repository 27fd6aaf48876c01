"""Which daemon of a cluster exports cluster-scope diagnoses, elected through Kafka's own group protocol.

Every daemon (kafka.cluster_scope: auto) joins one consumer group subscribed to a one-partition topic; the
member the group assigns partition 0 is the reporter. Its client.id names the daemon (`kdiag/HOST/BROKER`),
so any daemon learns who reports from describe_consumer_groups. When the reporter leaves (close() sends
LeaveGroup) or stops heartbeating (session.timeout.ms), the group coordinator rebalances and partition 0 goes
to another member. A daemon that cannot describe the group for a session timeout stops reporting: cut off
from the cluster, it must assume the others have elected someone else.

The Coordinator runs in its own process (`python -m kdiag.kafka.coordination`, a `CoordinatorProcess` in the daemon):
librdkafka has aborted in its describe (rd_kafka_enq_once_del_source_return) while a fresh cluster answered
NOT_COORDINATOR. Such a death costs the election only: the daemon does not report until a new process has joined.

The reporter also publishes its cluster-scope diagnoses (with their since) to a compacted one-partition topic
(`<coordination_topic>_state`, one key per group) that every daemon's coordination process reads: the others list
them, and whoever is elected next starts from them (kdiag/runtime/handover.py).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import json
import logging
import threading
import time
import dataclasses
from dataclasses import dataclass
from typing import Any

from kdiag.core.worker_process import WorkerError, WorkerProcess, serve
from kdiag.kafka.client import ClientSettings, ErrorLog

log = logging.getLogger(__name__)

SESSION_TIMEOUT_MS = 6000  # the brokers' default group.min.session.timeout.ms: the shortest they allow
HEARTBEAT_INTERVAL_MS = 2000  # a third of the session timeout, as Kafka advises: each daemon's heartbeats cost 0.5/s
DESCRIBE_EVERY = 2.0  # seconds between the reporter's looks at who holds partition 0 (a third of the session timeout)
# A standby looks less often (each look is a DescribeGroups and a ConsumerGroupDescribe): it learns of an assignment
# change from the group protocol itself and looks at once then; the look only names the reporter for reported_by.
STANDBY_DESCRIBE_EVERY = 30.0
# A look slower than this is a failed look (the session timeout judges); it also bounds how long a stop waits for
# the thread to close the consumer, whose LeaveGroup hands partition 0 over at once.
DESCRIBE_TIMEOUT = 3.0
RETRY_AFTER = 5.0  # seconds between attempts while the cluster does not answer
CLIENT_ID_PREFIX = "kdiag/"
ANSWER_TIMEOUT = 5.0  # seconds the daemon's cycle waits for the coordination process (it answers from memory)
STATE_SUFFIX = "_state"
# An idle long poll (of the state topic, of the coordination topic's partition 0) waits this long: a published record
# ends it at once, and each daemon costs the brokers one Fetch per 10 s instead of two a second.
STATE_FETCH_WAIT_MS = 10000
OFFSET_TAIL_1 = -2001  # librdkafka's RD_KAFKA_OFFSET_TAIL(1): start at the last record


@dataclass(frozen=True)
class Member:
    """One daemon as the others name it: its host and the broker it runs beside (None on a load host)."""

    host: str
    broker_id: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The `reported_by` object of /api/diagnoses."""
        return {"host": self.host, "broker_id": self.broker_id}


@dataclass(frozen=True)
class Reporting:
    """Whether this daemon exports its cluster-scope diagnoses now, and which daemon does (None: unknown)."""

    reporting: bool = True
    reporter: Member | None = None


def client_id(me: Member) -> str:
    """The coordination consumer's client.id: how the other daemons learn who reports."""
    return f"{CLIENT_ID_PREFIX}{me.host}/{'' if me.broker_id is None else me.broker_id}"


def member_of(client: str) -> Member | None:
    """The daemon a client.id names, None for a client that is not a kdiag coordination consumer."""
    if not client.startswith(CLIENT_ID_PREFIX):
        return None
    host, _, broker = client[len(CLIENT_ID_PREFIX):].rpartition("/")
    return Member(host, int(broker) if broker.isdigit() else None)


def holder(description: Any, topic: str) -> tuple[str, str] | None:
    """(member id, client id) of the group member assigned the topic's partition 0, None while nobody is."""
    for m in description.members:
        tps = m.assignment.topic_partitions if m.assignment else []
        if any(tp.topic == topic and tp.partition == 0 for tp in tps):
            return m.member_id, m.client_id
    return None


class Coordinator:
    """The election's client side on its own thread; reporting() is what the collection thread asks each cycle."""

    def __init__(self, bootstrap: str, settings: ClientSettings, me: Member, topic: str, group: str,
                 mode: str = "auto", timeout: float = 10.0):
        self.bootstrap = bootstrap
        self.settings = settings
        self.me = me
        self.topic = topic
        self.group = group
        self.mode = mode
        self.timeout = timeout
        self.errors = ErrorLog(settings, bootstrap)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._reporter: Member | None = None
        self._mine = False  # whether our own consumer holds partition 0 at the last look
        self._seen = -float("inf")  # monotonic time of the last successful look
        self._consumer: Any = None
        self._look_now = False  # set by the group protocol's assign and revoke callbacks (inside poll)
        self.problem = ""
        self.state_topic = topic + STATE_SUFFIX
        self._reader: Any = None  # reads the state topic (assigned, never joins a group)
        self._producer: Any = None  # publishes to it while reporting
        self.published: dict[str, Any] | None = None  # the last record read from the state topic

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
        """Whether this daemon reports now, and who does; not while the group was not seen for a session timeout."""
        if self.mode == "always":
            return Reporting(True, self.me)
        with self._lock:
            age = time.monotonic() - self._seen
            fresh = age < SESSION_TIMEOUT_MS / 1000 and not self._stop.is_set()
            mine = self._mine and fresh and self.mode == "auto"
            known = age < STANDBY_DESCRIBE_EVERY + SESSION_TIMEOUT_MS / 1000 and not self._stop.is_set()
            return Reporting(mine, self.me if mine else self._reporter if known else None)

    def _run(self) -> None:
        from confluent_kafka.admin import AdminClient

        admin = None
        try:
            while not self._stop.is_set():
                try:
                    admin = admin or AdminClient(self._conf({}))
                    if self._reader is None:
                        self._ensure_topics(admin)
                        self._reader = self._read_state()
                    if self._consumer is None and self.mode == "auto":  # `never` only looks at the group
                        self._consumer = self._join()
                    self._loop(admin)
                except Exception as e:  # the election never takes the daemon down: it only stops reporting
                    self._failed(e)
                    self._stop.wait(RETRY_AFTER)
        finally:
            log.info("leaving coordination group %s", self.group)
            if self._consumer is not None:
                # A clean LeaveGroup hands partition 0 over at once instead of after session.timeout.ms.
                with contextlib.suppress(Exception):
                    self._consumer.close()
                self._consumer = None
            with contextlib.suppress(Exception):
                if self._producer is not None:
                    self._producer.flush(1.0)
                if self._reader is not None:
                    self._reader.close()
            self._reader = self._producer = None
            # The AdminClient is destroyed here, on this Python thread: failed futures keep their exceptions, whose
            # frames keep the client, and a garbage collection on a librdkafka thread destroying it aborts the process.
            gc.collect()
            del admin

    def _conf(self, base: dict[str, Any]) -> dict[str, Any]:
        return self.settings.client_conf(self.bootstrap, client_id(self.me), self.errors, self.timeout, base)

    def _ensure_topics(self, admin: Any) -> None:
        """Create the one-partition coordination and (compacted) state topics, replicated min(3, brokers) times,
        unless they exist."""
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import NewTopic

        metadata = admin.list_topics(timeout=self.timeout)
        replicas = min(3, len(metadata.brokers))
        # Compaction keeps the last record per group; short segments let it run at all on so small a topic.
        wanted = {self.topic: {}, self.state_topic: {"cleanup.policy": "compact", "segment.ms": "600000"}}
        missing = [NewTopic(t, 1, replicas, config=c) for t, c in wanted.items() if t not in metadata.topics]
        for name, future in (admin.create_topics(missing, request_timeout=self.timeout) if missing else {}).items():
            try:
                future.result(timeout=self.timeout)
                log.info("created the coordination topic %s (1 partition, %d replicas)", name, replicas)
            except KafkaException as e:
                if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:  # another daemon was first: fine
                    raise

    def _read_state(self) -> Any:
        """A consumer of the state topic from its last record on; it never joins its group or commits."""
        from confluent_kafka import Consumer, TopicPartition

        reader = Consumer(self._conf({"group.id": self.group + STATE_SUFFIX, "enable.auto.commit": False,
                                      "fetch.wait.max.ms": STATE_FETCH_WAIT_MS}))
        reader.assign([TopicPartition(self.state_topic, 0, OFFSET_TAIL_1)])
        return reader

    def _take_state(self) -> None:
        """Keep the newest well-formed record of this group read from the state topic."""
        for message in self._reader.consume(100, 0) if self._reader is not None else []:
            if message.error() or message.key() != self.group.encode():
                continue
            with contextlib.suppress(ValueError, UnicodeDecodeError):
                record = json.loads(message.value())
                if isinstance(record, dict):
                    self.published = record  # one reference swapped: the request thread reads it without a lock

    def publish(self, record: dict[str, Any]) -> None:
        """Publish the reporter's cluster-scope state (only while this daemon reports; a no-op otherwise)."""
        if not self.reporting().reporting:
            return
        if self._producer is None:
            from confluent_kafka import Producer

            self._producer = Producer(self._conf({"acks": "all", "linger.ms": 0}))
        self._producer.produce(self.state_topic, key=self.group.encode(), value=json.dumps(record).encode())
        self._producer.poll(0)

    def _join(self) -> Any:
        from confluent_kafka import Consumer

        consumer = Consumer(self._conf({
            "group.id": self.group, "session.timeout.ms": SESSION_TIMEOUT_MS,
            "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS, "enable.auto.commit": False,
            "auto.offset.reset": "latest",
            # Nothing is written to its partition: an idle long poll costs the reporter's broker one Fetch per 10 s.
            "fetch.wait.max.ms": STATE_FETCH_WAIT_MS,
            # Sticky: a daemon joining (a restart elsewhere) leaves partition 0, and the reporter, where they are.
            "partition.assignment.strategy": "cooperative-sticky"}))
        # An assignment change (partition 0 coming or going) makes the next poll look at the group at once.
        consumer.subscribe([self.topic], on_assign=self._changed, on_revoke=self._changed)
        log.info("joined coordination group %s on topic %s as %s", self.group, self.topic, client_id(self.me))
        return consumer

    def _loop(self, admin: Any) -> None:
        """Serve the group protocol (poll) and look at who holds partition 0 every DESCRIBE_EVERY seconds."""
        next_look = 0.0
        self._look_now = False
        while not self._stop.is_set():
            if self._consumer is not None:
                self._consumer.poll(0.5)  # heartbeats and rebalances run inside poll; no message is ever read
            else:
                self._stop.wait(0.5)
            self._take_state()
            if time.monotonic() >= next_look or self._look_now:
                self._look_now = False
                next_look = time.monotonic() + (DESCRIBE_EVERY if self._mine else STANDBY_DESCRIBE_EVERY)
                try:
                    self._look(admin)
                except Exception as e:  # keep polling: the consumer's heartbeats must go on while this fails
                    self._failed(e)

    def _changed(self, _consumer: Any, _partitions: list[Any]) -> None:
        self._look_now = True

    def _look(self, admin: Any) -> None:
        futures = admin.describe_consumer_groups([self.group], request_timeout=DESCRIBE_TIMEOUT)
        description = futures[self.group].result(timeout=DESCRIBE_TIMEOUT + 1.0)
        admin.poll(0)  # serves error_cb and the log lines for self.errors
        held = holder(description, self.topic)
        mine = self._consumer is not None and held is not None and held[0] == self._consumer.memberid()
        if mine != self._mine:
            log.info("%s cluster-scope diagnoses (coordination group %s)", "now reporting" if mine else "no longer reporting",
                     self.group)
        with self._lock:
            self._reporter = member_of(held[1]) if held else None
            self._mine, self._seen = mine, time.monotonic()
        if self.problem:
            log.info("coordination group %s answers again", self.group)
            self.problem = ""
        self.errors.clear()

    def _failed(self, e: Exception) -> None:
        reason = self.errors.reason() or self.settings.redact(f"{type(e).__name__}: {e}")
        if reason != self.problem:
            log.warning("coordination through %s failed (not reporting cluster-scope diagnoses): %s", self.bootstrap,
                        reason)
        self.problem = reason


class CoordinatorProcess:
    """The daemon's handle on the election, held by a Coordinator in its own process; while that process is dead
    (or waits out its restart backoff) this daemon does not report and knows no reporter."""

    def __init__(self, bootstrap: str, settings: ClientSettings, me: Member, topic: str, group: str,
                 mode: str = "auto", timeout: float = 10.0):
        self.me = me
        self._reporting = Reporting(True, me) if mode == "always" else Reporting(False, None)
        self.outgoing: dict[str, Any] | None = None  # the record the next poll publishes
        self.published: dict[str, Any] | None = None  # the last record read from the state topic
        self.worker = None if mode == "always" else WorkerProcess(__name__, {
            "bootstrap": bootstrap, "me": [me.host, me.broker_id], "topic": topic, "group": group, "mode": mode,
            "timeout": timeout, "client": dataclasses.asdict(settings)},
            "the coordination process")

    def start(self) -> None:
        """Start the coordination process (none with cluster_scope: always); returns at once."""
        if self.worker:
            self.worker.start()

    def poll(self) -> tuple[bool, str]:
        """Ask the coordination process who reports now (kept for reporting()); (working, what is wrong)."""
        assert self.worker is not None
        request: dict[str, Any] = {"reporting": True}
        if self.outgoing is not None:
            request["publish"], self.outgoing = self.outgoing, None
        try:
            answer = self.worker.request(request, ANSWER_TIMEOUT)
        except WorkerError as e:
            self._reporting = Reporting(False, None)
            return False, str(e)
        self.published = answer.get("published")
        reporter = answer["reporter"]
        self._reporting = Reporting(answer["reporting"], Member(*reporter) if reporter else None)
        return not answer["problem"], answer["problem"]

    def reporting(self) -> Reporting:
        """Whether this daemon reports, as of the last poll()."""
        return self._reporting

    def publish(self, record: dict[str, Any]) -> None:
        """Hand the reporter's cluster-scope state to the next poll(), which publishes it to the state topic."""
        self.outgoing = record

    def stop(self) -> None:
        """Leave the group (the process's Coordinator closes its consumer) and end the process."""
        if self.worker:
            self.worker.close()


def start(settings: dict[str, Any]) -> Any:
    """The request handler of the coordination process: its Coordinator's thread runs the election here."""
    client = ClientSettings(**settings["client"])
    coordinator = Coordinator(settings["bootstrap"], client, Member(*settings["me"]), settings["topic"],
                              settings["group"], settings["mode"], settings["timeout"])
    coordinator.start()
    atexit.register(coordinator.stop)  # stdin closed: the daemon stops, and LeaveGroup hands partition 0 over at once

    def handle(request: dict[str, Any]) -> dict[str, Any]:
        if "publish" in request:
            try:
                coordinator.publish(request["publish"])
            except Exception as e:  # BufferError, KafkaException: this record is lost, the next cycle sends another
                log.warning("publishing to %s failed: %s", coordinator.state_topic,
                            coordinator.settings.redact(f"{type(e).__name__}: {e}"))
        now = coordinator.reporting()
        reporter = [now.reporter.host, now.reporter.broker_id] if now.reporter else None
        return {"reporting": now.reporting, "reporter": reporter, "problem": coordinator.problem,
                "published": coordinator.published}

    return handle


if __name__ == "__main__":
    # The handler of the module imported by its name, whose log lines then say kdiag.kafka.coordination, not __main__.
    serve(importlib.import_module(__spec__.name).start)
