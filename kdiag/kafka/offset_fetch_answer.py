"""OffsetFetch v8 answers (KIP-709: many groups a request) decoded straight into what kdiag keeps of them.

kafka-python's generated decoder makes an object for every partition of every group (2.5 us each): a fetch at 10,000
groups reads about 370,000 committed partitions, a second of CPU. This reads the answer's bytes once into, per group,
its error code and the (topic, partition, offset) of each partition committed without error, through
`fast_offset_fetch` (kafka/read_by.py).
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

from kdiag.kafka.compact import skip_tags, text, uvarint
from kdiag.kafka.read_by import ReadBy

_PARTITION = struct.Struct(">iqi")  # partition_index, committed_offset, committed_leader_epoch
_ERROR = struct.Struct(">h")
# A partition with null (0) or empty (1) metadata and no tagged fields: the three above, the metadata's length byte,
# error_code and the tagged fields' count.
_PLAIN = struct.Struct(">iqiBhB")


class GroupAnswer(NamedTuple):
    """One group of an answer: its error code and its partitions committed without error."""

    group_id: str
    error_code: int
    read: list[tuple[str, int, int]]  # (topic, partition, offset)


def decode_groups(data: bytes) -> list[GroupAnswer]:
    """The groups of an OffsetFetch v8 answer body (after its header); ValueError when it is cut or malformed."""
    try:
        return _groups(data)
    except (IndexError, struct.error) as e:
        raise ValueError(f"OffsetFetch v8 answer cut short or malformed: {e}") from None


def _groups(data: bytes) -> list[GroupAnswer]:
    topics: dict[str, str] = {}  # each topic name once, shared by every group that committed on it
    groups = []
    count, pos = uvarint(data, 4)  # after throttle_time_ms
    for _ in range(max(count - 1, 0)):
        group, pos = text(data, pos)
        read: list[tuple[str, int, int]] = []
        topic_count, pos = uvarint(data, pos)
        for _ in range(max(topic_count - 1, 0)):
            name, pos = text(data, pos)
            topic = topics.setdefault(name, name)
            partition_count, pos = uvarint(data, pos)
            partitions = max(partition_count - 1, 0)
            # Nearly always every partition has null or empty metadata and no tagged fields: 20 bytes each, read in C.
            end = pos + partitions * _PLAIN.size
            rows = list(_PLAIN.iter_unpack(data[pos:end])) if end <= len(data) else []
            if len(rows) == partitions and all(r[3] < 2 and r[5] == 0 for r in rows):
                read.extend((topic, r[0], r[1]) for r in rows if r[4] == 0 and r[1] >= 0)
                pos = end
            else:
                pos = _partitions(data, pos, partitions, topic, read)
            pos = pos + 1 if data[pos] == 0 else skip_tags(data, pos)
        (group_error,) = _ERROR.unpack_from(data, pos)
        pos = skip_tags(data, pos + _ERROR.size)
        groups.append(GroupAnswer(group, group_error, read))
    skip_tags(data, pos)
    return groups


def _partitions(data: bytes, pos: int, count: int, topic: str, read: list[tuple[str, int, int]]) -> int:
    """`count` partitions of any shape from pos, those committed without error added to read; the position after."""
    for _ in range(count):
        partition, offset, _epoch = _PARTITION.unpack_from(data, pos)
        _, pos = text(data, pos + _PARTITION.size)  # metadata
        (error,) = _ERROR.unpack_from(data, pos)
        pos = skip_tags(data, pos + _ERROR.size)
        if error == 0 and offset >= 0:
            read.append((topic, partition, offset))
    return pos


def fast_offset_fetch(request: Any) -> ReadBy:
    """An OffsetFetch v8 request (kafka-python's) whose answer arrives as decode_groups' list, not as objects."""
    return ReadBy(request, 8, decode_groups)
