"""When the record at a group's committed offset was written: the fallback of lag in seconds where kdiag's history of
log end offsets does not reach back that far (kdiag/collectors/kafka/lag.py asks, naming the group and topic).

Bounded: only for the (group, topic) pairs asked, at most MAX_READS partitions per fetch (those furthest behind
first), one record each with fetch sizes capped at FETCH_BYTES, within READ_SECONDS in all; a timestamp is kept per
(topic, partition, offset), so a group stuck at one offset costs one read, not one per fetch.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from kdiag.kafka.committed import Committed
from kdiag.kafka.state import AdminState, PartitionLag

MAX_READS = 8
READ_SECONDS = 2.0
FETCH_BYTES = 65536
KEPT = 4096  # timestamps kept for offsets read before (about 0.5 MB)


class RecordTimes:
    """Timestamps of the records at committed offsets, read through a Consumer of its own that never joins its group."""

    def __init__(self, conf: Callable[..., dict[str, Any]]):
        self._conf = conf
        self._consumer: Any = None
        self._known: OrderedDict[tuple[str, int, int], float | None] = OrderedDict()

    def consumer(self) -> Any:
        """The Consumer, created on first use: small fetches, no commits."""
        if self._consumer is None:
            from confluent_kafka import Consumer

            self._consumer = Consumer(self._conf(**{
                "group.id": "kdiag-record-times", "enable.auto.commit": False, "enable.partition.eof": True,
                "message.max.bytes": FETCH_BYTES, "fetch.max.bytes": FETCH_BYTES,
                "max.partition.fetch.bytes": FETCH_BYTES, "fetch.wait.max.ms": 100,
                "queued.max.messages.kbytes": FETCH_BYTES // 1024}))
        return self._consumer

    def close(self) -> None:
        """Close the Consumer."""
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            consumer.close()

    def add_to(self, state: AdminState, asked: list[list[str]], committed: Callable[[str], Committed]) -> None:
        """Set `record_time` (seconds since the epoch) on the lag of each asked (group, topic) in state: the oldest
        record at its committed offsets that are behind the log end."""
        ends = {t: {p["partition"]: p["log_end_offset"] for p in d["partitions"]} for t, d in state["topics"].items()}
        behind: dict[tuple[str, str], list[tuple[int, int, int]]] = {}  # (group, topic) -> (lag, partition, offset)
        for group, topic in asked:
            if (g := state["consumer_groups"].get(group)) is None or topic not in g["lag"]:
                continue
            topic_ends = ends.get(topic, {})
            behind[group, topic] = sorted(((end - offset, p, offset) for p, offset in committed(group).get(topic, [])
                                           if (end := topic_ends.get(p)) is not None and end > offset), reverse=True)
        wanted = {(t, p, o) for (_, t), parts in behind.items() for _, p, o in parts}
        unread = sorted({(lag, t, p, o) for (_, t), parts in behind.items() for lag, p, o in parts
                         if (t, p, o) not in self._known}, reverse=True)
        # One offset per partition per read (two groups on one partition wait their turn), the furthest behind first.
        first = {(t, p): o for _, t, p, o in reversed(unread)}
        self._read([(t, p, o) for (t, p), o in list(reversed(first.items()))[:MAX_READS]])
        for (group, topic), parts in behind.items():
            times = [at for _, p, o in parts if (at := self._known.get((topic, p, o))) is not None]
            if times:
                state["consumer_groups"][group]["lag"][topic]["record_time"] = min(times)
        for key in wanted & self._known.keys():
            self._known.move_to_end(key)
        while len(self._known) > KEPT:
            self._known.popitem(last=False)

    def add_to_partitions(self, lagging: list[PartitionLag]) -> None:
        """Set `record_time` on each of the partitions lagging most whose record at the committed offset is known,
        reading the furthest behind of those not read yet."""
        unread = list(dict.fromkeys((e["topic"], e["partition"], e["committed"]) for e in lagging
                                    if (e["topic"], e["partition"], e["committed"]) not in self._known))
        first = {(t, p): o for t, p, o in reversed(unread)}  # one offset per partition per read
        self._read([(t, p, o) for (t, p), o in list(reversed(first.items()))[:MAX_READS]])
        for e in lagging:
            if (at := self._known.get((e["topic"], e["partition"], e["committed"]))) is not None:
                e["record_time"] = at
                self._known.move_to_end((e["topic"], e["partition"], e["committed"]))
        while len(self._known) > KEPT:
            self._known.popitem(last=False)

    def _read(self, offsets: list[tuple[str, int, int]]) -> None:
        """Read the record at each (topic, partition, offset) and keep its timestamp (None when it has none); where that
        offset holds no record (compacted away, a transaction marker) the next record answers."""
        if not offsets:
            return
        from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, KafkaError, TopicPartition

        consumer = self.consumer()
        pending = {(t, p): o for t, p, o in offsets}
        consumer.incremental_assign([TopicPartition(t, p, o) for t, p, o in offsets])
        deadline = time.monotonic() + READ_SECONDS
        try:
            while pending and (left := deadline - time.monotonic()) > 0:
                for message in consumer.consume(len(pending), timeout=min(left, 0.5)):
                    where = (message.topic(), message.partition())
                    if where not in pending:
                        continue
                    if error := message.error():
                        if error.code() != KafkaError._PARTITION_EOF:
                            continue
                        pending.pop(where)  # no record there (yet): nothing to keep, ask again next time
                    elif message.offset() >= pending[where]:
                        kind, millis = message.timestamp()
                        at = None if kind == TIMESTAMP_NOT_AVAILABLE else millis / 1000.0
                        self._known[(*where, pending.pop(where))] = at
                    else:
                        continue
                    # One record per partition: the rest of its batch is not wanted.
                    consumer.incremental_unassign([TopicPartition(*where)])
        finally:
            if pending:
                consumer.incremental_unassign([TopicPartition(t, p) for t, p in pending])
