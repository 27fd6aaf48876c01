"""OffsetFetch v8 answers as kafka-python encodes them (the brokers' wire format) decoded by kdiag's reader, and the
request that names the reader handed through kafka-python's own parser."""

from __future__ import annotations

import io
import struct

import pytest
from kafka.protocol.consumer.group import OffsetFetchRequest, OffsetFetchResponse
from kafka.protocol.parser import KafkaProtocol

from kdiag.kafka.offset_fetch_answer import fast_offset_fetch, GroupAnswer, decode_groups

RESPONSE = OffsetFetchResponse[8]
GROUP = RESPONSE.OffsetFetchResponseGroup
TOPIC = GROUP.OffsetFetchResponseTopics
PARTITION = TOPIC.OffsetFetchResponsePartitions


def partition(index: int, offset: int, error: int = 0, metadata: str | None = None) -> object:
    return PARTITION(partition_index=index, committed_offset=offset, committed_leader_epoch=-1, metadata=metadata,
                     error_code=error)


def answer() -> bytes:
    """Groups of every shape: several topics, a partition never committed (-1), one with an error, metadata null,
    empty, one byte past a one-byte length and multi-byte text, a group refused (NOT_COORDINATOR), one with nothing."""
    groups = [
        GROUP(group_id="orders-é", error_code=0, topics=[
            TOPIC(name="orders", partitions=[partition(0, 10), partition(1, -1), partition(2, 7, error=3)]),
            TOPIC(name="payments", partitions=[partition(p, 100 + p, metadata="m" * (40 * p)) for p in range(5)])]),
        GROUP(group_id="moved", error_code=16, topics=[]),
        GROUP(group_id="idle", error_code=0, topics=[TOPIC(name="orders", partitions=[partition(0, 0, metadata="")])]),
        GROUP(group_id="none", error_code=0, topics=[]),
    ]
    return bytes(RESPONSE(throttle_time_ms=5, groups=groups).encode())


def kafka_python_view(data: bytes) -> list[GroupAnswer]:
    """What kafka-python's own decoder reads, in the reader's shape."""
    return [GroupAnswer(g.group_id, g.error_code, [(t.name, p.partition_index, p.committed_offset) for t in g.topics
                                                    for p in t.partitions if p.error_code == 0 and p.committed_offset >= 0])
            for g in RESPONSE.decode(io.BytesIO(data)).groups]


def test_the_reader_agrees_with_kafka_pythons_decoder():
    data = answer()
    got = decode_groups(data)
    assert got == kafka_python_view(data)
    assert got[0] == GroupAnswer("orders-é", 0, [("orders", 0, 10)] + [("payments", p, 100 + p) for p in range(5)])
    assert [(g.group_id, g.error_code, g.read) for g in got[1:]] == [("moved", 16, []), ("idle", 0, [("orders", 0, 0)]),
                                                                   ("none", 0, [])]
    assert got[0].read[0][0] is got[2].read[0][0]  # a topic's name is one string for every group


def test_tagged_fields_it_does_not_know_are_skipped():
    one = bytes(RESPONSE(throttle_time_ms=0, groups=[GROUP(group_id="g", error_code=0, topics=[
        TOPIC(name="t", partitions=[partition(1, 5), partition(2, 6)])])]).encode())
    # throttle, 1 group, "g", 1 topic, "t", 2 partitions, then the first partition's 16 bytes, null metadata, error:
    # its tagged fields (0 of them) are at byte 30. Tag 5 of 3 bytes, then tag 200 (a two-byte varint) of none.
    assert one[30] == 0
    tagged = one[:30] + b"\x02\x05\x03abc\xc8\x01\x00" + one[31:]
    assert decode_groups(tagged) == [GroupAnswer("g", 0, [("t", 1, 5), ("t", 2, 6)])]


def test_an_answer_cut_anywhere_is_refused_with_a_value_error():
    data = answer()
    for end in range(len(data)):
        with pytest.raises(ValueError):
            decode_groups(data[:end])


def test_only_a_v8_request_is_wrapped():
    entry = OffsetFetchRequest.OffsetFetchRequestGroup
    with pytest.raises(ValueError, match="v8"):
        fast_offset_fetch(OffsetFetchRequest[7](groups=[entry(group_id="g", topics=None)], require_stable=False))


def test_a_varint_past_five_bytes_is_refused():
    with pytest.raises(ValueError, match="varint"):
        decode_groups(b"\x00\x00\x00\x00" + b"\xff" * 6 + b"\x01")


def test_kafka_pythons_parser_hands_the_reader_the_answer_of_the_request_that_names_it():
    parser = KafkaProtocol(client_id="kdiag")
    entry = OffsetFetchRequest.OffsetFetchRequestGroup
    request = fast_offset_fetch(OffsetFetchRequest[8](groups=[entry(group_id="orders-é", topics=None)],
                                                    require_stable=False))
    correlation = parser.send_request(request)
    sent = parser.send_bytes()
    assert struct.unpack_from(">hhi", sent, 4) == (OffsetFetchRequest.API_KEY, 8, correlation)
    body = answer()
    # A flexible response header: the correlation id and no tagged fields.
    frame = struct.pack(">ii", 4 + 1 + len(body), correlation) + b"\x00" + body
    ((got_correlation, groups),) = parser.receive_bytes(frame)
    assert got_correlation == correlation and groups == kafka_python_view(body)
