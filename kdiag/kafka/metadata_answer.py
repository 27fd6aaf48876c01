"""Metadata v9 answers decoded straight into kdiag's topics (kafka/state.py), for every topic of the cluster.

librdkafka's list_topics makes a Python object per partition and a list per replica set (0.3-0.45 s at 100,000
partitions), and kdiag's dicts from them cost 0.2 s more. Nearly every partition of a topic has the same replica count
in its replicas and its ISR, no offline replica and no tagged field: rows of one width, read in C per topic, the rare
other shape read field by field.
"""

from __future__ import annotations

import struct
from operator import itemgetter
from typing import Any

from kdiag.kafka.compact import skip_tags, text, uvarint
from kdiag.kafka.read_by import ReadBy
from kdiag.kafka.state import Partition, Topic

VERSION = 9  # Kafka 2.4+: the first flexible version; the batched client is only used on 3.0+
_INT32 = struct.Struct(">i")
_PARTITION_HEAD = struct.Struct(">hiii")  # error_code, partition_index, leader_id, leader_epoch
_TOPIC_AUTHORIZED = 4  # topic_authorized_operations, int32
_BY_INDEX = itemgetter("partition")
_ROWS: dict[int, struct.Struct] = {}  # replica count -> the row of a partition whose ISR is whole, nothing offline


def _row(replicas: int) -> struct.Struct:
    """The row of a partition with `replicas` replicas, all in the ISR, none offline, no tagged fields."""
    if (row := _ROWS.get(replicas)) is None:
        ids = "i" * replicas
        row = _ROWS[replicas] = struct.Struct(f">hiiiB{ids}B{ids}BB")
    return row


def decode_topics(data: bytes) -> dict[str, Topic]:
    """Every topic of a Metadata v9 answer body (after its header) but the internal ones (named __*), by name, each's
    partitions by index; ValueError when it is cut or malformed."""
    try:
        return _topics(data)
    except (IndexError, struct.error) as e:
        raise ValueError(f"Metadata v{VERSION} answer cut short or malformed: {e}") from None


def _topics(data: bytes) -> dict[str, Topic]:
    pos = _skip_brokers(data, 4)  # after throttle_time_ms
    _, pos = text(data, pos)  # cluster_id
    pos += _INT32.size  # controller_id
    # Partitions share a few replica sets: one list per set, which the answer's marshal frame keeps shared (100,000
    # partitions on 6 brokers: 120 lists, not 200,000), so the daemon reads and holds them once. Nothing changes them.
    lists: dict[tuple[int, ...], list[int]] = {}

    topics: dict[str, Topic] = {}
    count, pos = uvarint(data, pos)
    for _ in range(max(count - 1, 0)):
        name, pos = text(data, pos + 2)  # after error_code
        pos += 1  # is_internal
        partition_count, pos = uvarint(data, pos)
        partitions, pos = _partitions(data, pos, max(partition_count - 1, 0), lists)
        pos = skip_tags(data, pos + _TOPIC_AUTHORIZED)
        if not name.startswith("__"):
            partitions.sort(key=_BY_INDEX)
            topics[name] = {"partitions": partitions, "configs": {}, "config_sources": {}}
    return dict(sorted(topics.items()))


def _skip_brokers(data: bytes, pos: int) -> int:
    """The position after the brokers array (node_id, host, port, rack, tagged fields each)."""
    count, pos = uvarint(data, pos)
    for _ in range(max(count - 1, 0)):
        _, pos = text(data, pos + _INT32.size)  # host
        _, pos = text(data, pos + _INT32.size)  # rack, after port
        pos = skip_tags(data, pos)
    return pos


def _partitions(data: bytes, pos: int, count: int,
                lists: dict[tuple[int, ...], list[int]]) -> tuple[list[Partition], int]:
    """`count` partitions from pos, and the position after them: one width of row where they all have it."""
    out: list[Partition] = []
    if count:
        replicas, _ = uvarint(data, pos + _PARTITION_HEAD.size)
        n = replicas - 1
        if 0 <= n < 127:
            row = _row(n)
            end = pos + count * row.size
            if end <= len(data):
                known = lists.get
                for r in row.iter_unpack(data[pos:end]):
                    if r[4] != replicas or r[5 + n] != replicas or r[6 + 2 * n] != 1 or r[7 + 2 * n]:
                        out = []
                        break
                    replica_ids, isr = r[5:5 + n], r[6 + n:6 + 2 * n]
                    out.append({"partition": r[1], "leader": r[2],
                                "replicas": known(replica_ids) or shared_ids(lists, replica_ids),
                                "isr": known(isr) or shared_ids(lists, isr), "log_end_offset": None})
                else:
                    return out, end
    for _ in range(count):
        _, index, leader, _ = _PARTITION_HEAD.unpack_from(data, pos)
        replica_ids, pos = _ids(data, pos + _PARTITION_HEAD.size)
        isr, pos = _ids(data, pos)
        _, pos = _ids(data, pos)  # offline_replicas
        pos = skip_tags(data, pos)
        out.append({"partition": index, "leader": leader, "replicas": shared_ids(lists, replica_ids),
                    "isr": shared_ids(lists, isr), "log_end_offset": None})
    return out, pos


def shared_ids(lists: dict[tuple[int, ...], list[int]], ids: tuple[int, ...]) -> list[int]:
    """The one list of these replica ids in `lists` (made at their first sight)."""
    if (kept := lists.get(ids)) is None:
        kept = lists[ids] = list(ids)
    return kept


def _ids(data: bytes, pos: int) -> tuple[tuple[int, ...], int]:
    """A compact array of int32 (empty when null), and the position after it."""
    size, pos = uvarint(data, pos)
    n = max(size - 1, 0)
    end = pos + n * _INT32.size
    if end > len(data):
        raise ValueError(f"an array past the end of the answer at byte {pos}")
    return struct.unpack_from(f">{n}i", data, pos), end


def request() -> ReadBy:
    """A Metadata v9 request for every topic, whose answer arrives as decode_topics' dict."""
    from kafka.protocol.metadata import MetadataRequest

    shell: Any = MetadataRequest[VERSION](topics=None, allow_auto_topic_creation=False,
                                          include_cluster_authorized_operations=False,
                                          include_topic_authorized_operations=False)
    return ReadBy(shell, VERSION, decode_topics)
