"""Committed offsets read from `__consumer_offsets` (kafka.committed_offsets: offsets_topic): no request per group.

OffsetsTable folds the topic's records (offsets_records.py decodes them) into each group's committed offsets and
commit times, as the group coordinator does when it loads the topic (the latest commit per group, topic and partition;
tombstones, written at deletions and expirations, remove it); OffsetsTopicReader keeps one unjoined read_committed
Consumer assigned to every partition of the topic and folds its records in a thread as they come, in its own process
(kdiag/kafka/offsets_worker.py) that outlives the AdminClient's; OffsetsView is the AdminClient process's copy of the
table, updated at each fetch with the groups that changed, used once the reader has read up to the ends it saw when
it began.
Its cost grows with the commit rate, not with the number of groups.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from kdiag.kafka.committed import PartitionOffsets
from kdiag.kafka.offsets_records import GroupKey, GroupValue, OffsetKey, RecordError, decode_group_value, \
    decode_key, decode_offset_value

TOPIC = "__consumer_offsets"
BATCH = 2_000  # records folded per hold of the lock: a view waits for one batch at most
ASSIGN_RETRY = 10.0  # seconds between looks for the topic while there is none (or no broker answers)
# Decoded keys kept for the next record of the same key (a group commits the same partitions again and again): the
# keys of the groups that commit (500 groups of 100 partitions: 50,000), not every key of the topic (a million
# decoded keys held 150 MB).
MAX_KEYS = 100_000

log = logging.getLogger(__name__)


class OffsetsTable:
    """Per group, topic and partition: the committed offset and its commit time; per classic group its metadata."""

    def __init__(self) -> None:
        self._offsets: dict[str, dict[str, dict[int, tuple[int, int]]]] = {}  # group -> topic -> partition -> (o, ms)
        self.groups: dict[str, GroupValue] = {}
        self.malformed = 0  # records whose key or value did not decode
        self.changed: set[str] = set()  # groups whose offsets changed since the last view
        self._keys: dict[bytes, OffsetKey | GroupKey | None] = {}

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        """Fold one record in: a commit replaces the partition's offset, a tombstone removes it (or the group's
        metadata); an undecodable record is counted and left out."""
        try:
            decoded = self._key(key or b"")
            if isinstance(decoded, OffsetKey):
                self._offset(decoded, value)
            elif isinstance(decoded, GroupKey):
                if value is None:
                    self.groups.pop(decoded.group, None)
                else:
                    self.groups[decoded.group] = decode_group_value(value)
        except RecordError as e:
            self.malformed += 1
            if self.malformed == 1:
                log.warning("a record of %s kdiag cannot decode (more are only counted): %s", TOPIC, e)

    def _key(self, key: bytes) -> OffsetKey | GroupKey | None:
        if (decoded := self._keys.get(key)) is None and key not in self._keys:
            decoded = decode_key(key)
            if len(self._keys) >= MAX_KEYS:
                self._keys.clear()
            self._keys[key] = decoded
        return decoded

    def _offset(self, key: OffsetKey, value: bytes | None) -> None:
        self.changed.add(key.group)
        topics = self._offsets.get(key.group)
        if value is None or (committed := decode_offset_value(value)).offset < 0:
            # OffsetFetch answers no offset for a partition committed at -1: the same as none.
            if topics is not None and (parts := topics.get(key.topic)) is not None:
                parts.pop(key.partition, None)
                if not parts:
                    del topics[key.topic]
                if not topics:
                    del self._offsets[key.group]
            return
        if topics is None:
            topics = self._offsets[key.group] = {}
        topics.setdefault(key.topic, {})[key.partition] = (committed.offset, committed.commit_ms)

    def view(self, full: bool) -> dict[str, tuple[int, dict[str, list[int]]] | None]:
        """Per group (every group when full, else those changed since the last view), its newest commit time (epoch ms,
        -1 when unknown) and per topic [partition, offset, ...]; None for a group that has no offsets left."""
        out: dict[str, tuple[int, dict[str, list[int]]] | None] = {}
        for group in self._offsets if full else self.changed:
            if (topics := self._offsets.get(group)) is None:
                out[group] = None
                continue
            newest = max(ms for parts in topics.values() for _, ms in parts.values())
            out[group] = (newest, {t: [n for p, (o, _) in parts.items() for n in (p, o)] for t, parts in topics.items()})
        self.changed = set()
        return out

    def get(self, group: str) -> dict[str, list[tuple[int, int]]]:
        """Per topic, (partition, offset) of every committed partition of the group, as CommittedCache.get."""
        return {t: sorted((p, o) for p, (o, _) in parts.items()) for t, parts in self._offsets.get(group, {}).items()}

    def last_commit(self, group: str) -> float | None:
        """Epoch seconds of the group's newest commit still in the table; None when it has none."""
        newest = max((ms for parts in self._offsets.get(group, {}).values() for _, ms in parts.values()), default=-1)
        return newest / 1000 if newest >= 0 else None


class OffsetsTopicReader:
    """One unjoined read_committed Consumer of every partition of __consumer_offsets and the thread that folds its
    records into the table as they come; the Consumer is made, used and closed by that thread alone (librdkafka
    handles are not to be polled while another thread closes them). Lives in its own process (offsets_worker):
    an admin fetch takes the table's current view at once and a new AdminClient process keeps what was read."""

    def __init__(self, conf: dict[str, Any]):
        self.conf = conf
        self.table = OffsetsTable()
        self._lock = threading.Lock()  # guards the table and the positions; held for one batch at a time
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._first: dict[int, tuple[int, int]] = {}  # partition -> (start, end) when the reader began: the first read
        self._position: dict[int, int] = {}
        self._assigned = False  # the topic exists and its partitions are assigned
        self._looked = False  # the topic was looked for once: without it, nothing is left to read
        self.error = ""  # why the topic cannot be read now, for the log

    def start(self) -> None:
        """Start the thread unless it runs."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="consumer-offsets", daemon=True)
            self._thread.start()

    def read(self) -> float:
        """The share of the first read done (records up to the ends the reader saw when it began): 1.0 once caught
        up, and while there is no topic yet (no group ever committed)."""
        with self._lock:
            if not self._assigned:
                return 1.0 if self._looked and not self.error else 0.0
            total = sum(end - start for start, end in self._first.values())
            done = sum(min(self._position[p], end) - start for p, (start, end) in self._first.items())
            return 1.0 if done >= total else done / total

    def view(self, full: bool) -> dict[str, tuple[int, dict[str, list[int]]] | None]:
        """OffsetsTable.view of the table now."""
        with self._lock:
            return self.table.view(full)

    def _run(self) -> None:
        from confluent_kafka import Consumer, KafkaError, KafkaException

        # While groups commit without pause, a fetch per answer would be a Fetch request every few milliseconds:
        # the broker holds each until it has 1 MB or 500 ms passed.
        consumer: Any = Consumer({**self.conf, "enable.auto.commit": False, "isolation.level": "read_committed",
                             "enable.partition.eof": True, "auto.offset.reset": "earliest",
                             "queued.max.messages.kbytes": 16384, "fetch.min.bytes": 1 << 20, "fetch.wait.max.ms": 500})
        try:
            while not self._stopping.is_set():
                if not self._assigned:
                    try:
                        self._assign(consumer)
                    except KafkaException as e:
                        self.error = str(e)
                    self._looked = True
                    if not self._assigned:
                        self._stopping.wait(ASSIGN_RETRY)
                    continue
                messages = consumer.consume(BATCH, timeout=0.5)
                with self._lock:
                    for msg in messages:
                        if (error := msg.error()) is None:
                            self.table.apply(msg.key(), msg.value())
                            self._position[msg.partition()] = msg.offset() + 1
                        elif error.code() == KafkaError._PARTITION_EOF:  # past a trailing transaction marker too
                            self._position[msg.partition()] = max(self._position[msg.partition()], msg.offset())
        finally:
            consumer.close()

    def _assign(self, consumer: Any) -> None:
        """Assign every partition of the topic from its start, noting its start and end offsets now; nothing while
        there is no topic (it is made at the first commit)."""
        from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, TopicPartition

        topic = consumer.list_topics(TOPIC, timeout=ASSIGN_RETRY).topics.get(TOPIC)
        if topic is None or topic.error is not None or not topic.partitions:
            self.error = ""
            return
        parts = sorted(topic.partitions)
        starts = consumer.offsets_for_times([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in parts],
                                            timeout=ASSIGN_RETRY)
        ends = consumer.offsets_for_times([TopicPartition(TOPIC, p, OFFSET_END) for p in parts], timeout=ASSIGN_RETRY)
        low = {tp.partition: max(tp.offset, 0) for tp in starts if not tp.error}
        high = {tp.partition: tp.offset for tp in ends if not tp.error}
        first = {p: (low.get(p, 0), max(high.get(p, 0), low.get(p, 0))) for p in parts}
        consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in parts])
        with self._lock:
            self._first, self._position = first, {p: start for p, (start, _) in first.items()}
            self._assigned, self.error = True, ""
        log.info("reading %s from its start: %d records in %d partitions", TOPIC,
                 sum(end - start for start, end in first.values()), len(first))

    def close(self) -> None:
        """Stop the thread (it closes the Consumer)."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None


class OffsetsView:
    """The AdminClient process's copy of the reader's table, kept up to date from the reader's answers (passed on by
    the collector: every group at first, then the groups that changed), and how much of its first read is done."""

    def __init__(self) -> None:
        self.read = 0.0
        self._groups: dict[str, tuple[dict[str, PartitionOffsets], float | None]] = {}

    @property
    def caught_up(self) -> bool:
        """Whether the reader has read up to the ends it saw when it began: the copy holds every group."""
        return self.read >= 1.0

    def update(self, answer: dict[str, Any]) -> None:
        """Take in a reader's answer: `read`, and `groups` (every group when `full`, else the changed ones; None for
        a group gone)."""
        self.read = answer["read"]
        if (groups := answer.get("groups")) is None:
            return
        if answer.get("full"):
            self._groups = {}
        for group, entry in groups.items():
            if entry is None:
                self._groups.pop(group, None)
                continue
            newest, topics = entry
            self._groups[group] = ({t: PartitionOffsets(zip(flat[::2], flat[1::2], strict=True)) for t, flat in topics.items()},
                                   newest / 1000 if newest >= 0 else None)

    def offsets(self, group: str) -> tuple[dict[str, PartitionOffsets], float | None]:
        """The group's committed offsets (per topic, (partition, offset)) and newest commit time (epoch s; None when
        unknown)."""
        return self._groups.get(group) or ({}, None)
