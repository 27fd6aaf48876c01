"""Log end offsets of many partitions in one ListOffsets v5 request per leader and PARTITIONS_PER_REQUEST partitions.

librdkafka's offsets_for_times takes 500 partitions a call well (it matches each answer by a linear search), so
100,000 partitions were 200 calls and 0.3 s of CPU a fetch. Here kdiag writes the request's body and reads the answer
itself (kafka/read_by.py): a row of fixed width per partition both ways. The isolation level is read_committed, as
librdkafka's consumer asks by default: the last stable offset, what a read_committed consumer can reach.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any

from kdiag.kafka.read_by import ReadBy

VERSION = 5  # Kafka 2.2+; the batched client is only used on 3.0+
PARTITIONS_PER_REQUEST = 10_000
READ_COMMITTED = 1
LATEST = -1
_COUNT = struct.Struct(">i")
_NAME = struct.Struct(">h")
_REQUEST_HEAD = struct.Struct(">ib")  # replica_id, isolation_level
_ASKED = struct.Struct(">iiq")  # partition_index, current_leader_epoch, timestamp
_ANSWERED = struct.Struct(">ihqqi")  # partition_index, error_code, timestamp, offset, leader_epoch

# (topic, partition) -> log end offset
EndOffsets = dict[tuple[str, int], int]


def request_body(partitions: dict[str, list[int]]) -> bytes:
    """The body of a ListOffsets v5 request for the latest read_committed offset of these partitions of each topic."""
    parts = [_REQUEST_HEAD.pack(-1, READ_COMMITTED), _COUNT.pack(len(partitions))]
    for topic, indexes in partitions.items():
        name = topic.encode()
        parts += [_NAME.pack(len(name)), name, _COUNT.pack(len(indexes))]
        parts += [_ASKED.pack(p, -1, LATEST) for p in indexes]
    return b"".join(parts)


def decode_end_offsets(data: bytes) -> EndOffsets:
    """The offset of every partition a ListOffsets v5 answer body gives without error; ValueError when it is cut."""
    out: EndOffsets = {}
    try:
        (topics,) = _COUNT.unpack_from(data, 4)  # after throttle_time_ms
        pos = 8
        for _ in range(topics):
            (size,) = _NAME.unpack_from(data, pos)
            pos += _NAME.size
            if size < 0 or pos + size > len(data):
                raise ValueError(f"a topic name past the end of the answer at byte {pos}")
            topic = data[pos:pos + size].decode("utf-8")
            (count,) = _COUNT.unpack_from(data, pos + size)
            pos += size + _COUNT.size
            end = pos + count * _ANSWERED.size
            if count < 0 or end > len(data):
                raise ValueError(f"{count} partitions past the end of the answer at byte {pos}")
            out.update(((topic, p), offset) for p, error, _, offset, _ in _ANSWERED.iter_unpack(data[pos:end])
                       if error == 0 and offset >= 0)
            pos = end
    except struct.error as e:
        raise ValueError(f"ListOffsets v{VERSION} answer cut short: {e}") from None
    return out


def requests(by_leader: dict[int, list[tuple[str, int]]]) -> Iterable[tuple[int, ReadBy]]:
    """(leader, request) for each leader's partitions, PARTITIONS_PER_REQUEST a request."""
    from kafka.protocol.consumer.offsets import ListOffsetsRequest

    for leader, partitions in by_leader.items():
        for start in range(0, len(partitions), PARTITIONS_PER_REQUEST):
            asked: dict[str, list[int]] = {}
            for topic, index in partitions[start:start + PARTITIONS_PER_REQUEST]:
                asked.setdefault(topic, []).append(index)
            shell: Any = ListOffsetsRequest[VERSION](replica_id=-1, isolation_level=READ_COMMITTED, topics=[])
            yield leader, ReadBy(shell, VERSION, decode_end_offsets, body=request_body(asked))
