"""Committed offsets read from `__consumer_offsets` (kafka.committed_offsets: offsets_topic): no request per group.

OffsetsTable folds the topic's records (offsets_records.py decodes them) into each group's committed offsets and
commit times, as the group coordinator does when it loads the topic; OffsetsTopicReader keeps one unjoined
read_committed Consumer assigned to every partition of the topic, and at each admin fetch reads up to the ends the
fetch began with, so the offsets are those the brokers would answer to OffsetFetch then. Its cost grows with the
commit rate, not with the number of groups.
"""

from __future__ import annotations

import logging
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
    """The unjoined Consumer of __consumer_offsets and the table it fills; lives in the AdminClient's process."""

    def __init__(self, conf: dict[str, Any]):
        self.conf = conf
        self.table = OffsetsTable()
        self._consumer: Any = None
        self._position: dict[int, int] = {}

    def catch_up(self, deadline: float) -> bool:
        """Read the records up to the topic's ends now (the last stable offsets: transactional commits count once
        committed); False when the deadline passed first (the table is then behind by what is left)."""
        from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, KafkaError, TopicPartition

        if self._consumer is None:
            from confluent_kafka import Consumer

            self._consumer = Consumer({**self.conf, "enable.auto.commit": False, "enable.partition.eof": True,
                                       "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                                       "queued.max.messages.kbytes": 16384})
        metadata = self._consumer.list_topics(TOPIC, timeout=max(deadline - time.monotonic(), 0.05))
        partitions = sorted(metadata.topics[TOPIC].partitions) if TOPIC in metadata.topics else []
        if not partitions or metadata.topics[TOPIC].error is not None:
            return True  # no group ever committed: the topic is made at the first commit
        if new := [p for p in partitions if p not in self._position]:
            self._position.update({p: 0 for p in new})
            self._consumer.incremental_assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in new])
        wanted = [TopicPartition(TOPIC, p, OFFSET_END) for p in partitions]
        ends = {tp.partition: tp.offset for tp in self._consumer.offsets_for_times(
            wanted, timeout=max(deadline - time.monotonic(), 0.05)) if not tp.error}
        behind = {p for p, end in ends.items() if self._position[p] < end}
        while behind and time.monotonic() < deadline:
            for msg in self._consumer.consume(BATCH, timeout=min(0.2, max(deadline - time.monotonic(), 0.01))):
                partition = msg.partition()
                if (error := msg.error()) is None:
                    self.table.apply(msg.key(), msg.value())
                    self._position[partition] = msg.offset() + 1
                elif error.code() == KafkaError._PARTITION_EOF:  # past a trailing transaction marker too
                    self._position[partition] = max(self._position[partition], msg.offset())
                if partition in behind and self._position[partition] >= ends[partition]:
                    behind.discard(partition)
        return not behind

    def close(self) -> None:
        """Close the Consumer and forget the table: the next catch_up reads the topic from its start."""
        consumer, self._consumer = self._consumer, None
        # Read again from the start, the table would keep groups whose tombstones were compacted away meanwhile.
        self._position, self.table = {}, OffsetsTable()
        if consumer is not None:
            consumer.close()
