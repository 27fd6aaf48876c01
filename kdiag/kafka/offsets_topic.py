"""Committed offsets read from `__consumer_offsets` (kafka.committed_offsets: offsets_topic): no request per group.

OffsetsTable folds the topic's records (offsets_records.py decodes them) into each group's committed offsets and
commit times, as the group coordinator does when it loads the topic; OffsetsTopicReader keeps one unjoined
read_committed Consumer assigned to every partition of the topic and folds its records in a thread as they come; an
admin fetch waits until the table reaches the ends the fetch began with, so the offsets are those the brokers would
answer to OffsetFetch then. Its cost grows with the commit rate, not with the number of groups.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from kdiag.kafka.offsets_records import GroupKey, GroupValue, OffsetKey, RecordError, decode_group_value, \
    decode_key, decode_offset_value

TOPIC = "__consumer_offsets"
BATCH = 10_000
# Decoded keys kept for the next record of the same key (a group commits the same partitions again and again).
MAX_KEYS = 1_000_000

log = logging.getLogger(__name__)


class OffsetsTable:
    """Per group, topic and partition: the committed offset and its commit time; per classic group its metadata."""

    def __init__(self) -> None:
        self._offsets: dict[str, dict[str, dict[int, tuple[int, int]]]] = {}  # group -> topic -> partition -> (o, ms)
        self.groups: dict[str, GroupValue] = {}
        self.malformed = 0  # records whose key or value did not decode
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

    def get(self, group: str) -> dict[str, list[tuple[int, int]]]:
        """Per topic, (partition, offset) of every committed partition of the group, as CommittedCache.get."""
        return {t: sorted((p, o) for p, (o, _) in parts.items()) for t, parts in self._offsets.get(group, {}).items()}

    def last_commit(self, group: str) -> float | None:
        """Epoch seconds of the group's newest commit still in the table; None when it has none."""
        newest = max((ms for parts in self._offsets.get(group, {}).values() for _, ms in parts.values()), default=-1)
        return newest / 1000 if newest >= 0 else None


class OffsetsTopicReader:
    """The unjoined Consumer of __consumer_offsets, the thread that folds its records into the table as they come
    (its first read, of the whole topic, takes longer than a fetch may), and the table; in the AdminClient's process."""

    def __init__(self, conf: dict[str, Any]):
        self.conf = conf
        self.table = OffsetsTable()
        self._consumer: Any = None
        self._ends: Any = None  # asks the ends: offsets_for_times waits on a Consumer another thread consumes from
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._read = threading.Condition()  # guards the table and _position; notified after each batch
        self._position: dict[int, int] = {}

    def catch_up(self, deadline: float) -> bool:
        """Wait until the table holds every record up to the topic's ends now (the last stable offsets: a
        transactional commit counts once committed); False when the deadline passes first."""
        from confluent_kafka import OFFSET_END, TopicPartition

        left = max(deadline - time.monotonic(), 0.05)
        if self._consumer is None and not self._start(left):
            return True  # no group ever committed: the topic is made at the first commit
        wanted = [TopicPartition(TOPIC, p, OFFSET_END) for p in self._position]
        got = self._ends.offsets_for_times(wanted, timeout=max(deadline - time.monotonic(), 0.05))
        ends = {tp.partition: tp.offset for tp in got if not tp.error}
        with self._read:
            return self._read.wait_for(lambda: all(self._position[p] >= end for p, end in ends.items()),
                                       timeout=max(deadline - time.monotonic(), 0.0))

    def _start(self, timeout: float) -> bool:
        """Assign every partition of the topic from its start and start the thread; False when there is no topic."""
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        conf = {**self.conf, "enable.auto.commit": False, "isolation.level": "read_committed"}
        self._ends = self._ends or Consumer(conf)
        topic = self._ends.list_topics(TOPIC, timeout=timeout).topics.get(TOPIC)
        if topic is None or topic.error is not None or not topic.partitions:
            return False
        # While groups commit without pause, a fetch per answer would be a Fetch request every few milliseconds:
        # the broker holds each until it has 1 MB or 500 ms passed.
        consumer = Consumer({**conf, "enable.partition.eof": True, "auto.offset.reset": "earliest",
                             "queued.max.messages.kbytes": 16384, "fetch.min.bytes": 1 << 20,
                             "fetch.wait.max.ms": 500})
        self._position = {p: 0 for p in topic.partitions}
        consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in sorted(topic.partitions)])
        self._consumer = consumer
        self._stopping.clear()
        self._thread = threading.Thread(target=self._run, name="consumer-offsets", daemon=True)
        self._thread.start()
        return True

    def _run(self) -> None:
        from confluent_kafka import KafkaError

        while not self._stopping.is_set():
            messages = self._consumer.consume(BATCH, timeout=0.5)
            with self._read:
                for msg in messages:
                    if (error := msg.error()) is None:
                        self.table.apply(msg.key(), msg.value())
                        self._position[msg.partition()] = msg.offset() + 1
                    elif error.code() == KafkaError._PARTITION_EOF:  # past a trailing transaction marker too
                        self._position[msg.partition()] = max(self._position[msg.partition()], msg.offset())
                self._read.notify_all()

    def offsets(self, groups: list[str]) -> dict[str, tuple[dict[str, list[tuple[int, int]]], float | None]]:
        """Per group, its committed offsets (as OffsetsTable.get) and last commit time, read while no batch folds in."""
        with self._read:
            return {g: (self.table.get(g), self.table.last_commit(g)) for g in groups}

    def close(self) -> None:
        """Stop the thread, close the Consumers and forget the table: the next catch_up reads the topic from its start."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
        consumers = (self._consumer, self._ends)
        self._consumer, self._ends, self._thread = None, None, None
        # Read again from the start, the table would keep groups whose tombstones were compacted away meanwhile.
        self._position, self.table = {}, OffsetsTable()
        for consumer in consumers:
            if consumer is not None:
                consumer.close()
