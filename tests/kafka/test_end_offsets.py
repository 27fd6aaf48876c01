"""ListOffsets v5 as kdiag writes and reads it, against kafka-python's own encoding of the same request and answer,
and the request handed through kafka-python's parser."""

from __future__ import annotations

import io
import struct

import pytest
from kafka.protocol.consumer.offsets import ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.parser import KafkaProtocol

from kdiag.kafka import end_offsets
from kdiag.kafka.end_offsets import decode_end_offsets, request_body, requests
from kdiag.kafka.read_by import ReadBy

REQUEST = ListOffsetsRequest[5]
ASKED_TOPIC = REQUEST.ListOffsetsTopic
ASKED = ASKED_TOPIC.ListOffsetsPartition
RESPONSE = ListOffsetsResponse[5]
TOPIC = RESPONSE.ListOffsetsTopicResponse
PARTITION = TOPIC.ListOffsetsPartitionResponse


def answer() -> bytes:
    """Two topics (one with a multi-byte name), a partition whose leader moved (NOT_LEADER_OR_FOLLOWER), one without an
    offset (-1), and an empty topic entry."""
    def partition(index: int, offset: int, error: int = 0) -> object:
        return PARTITION(partition_index=index, error_code=error, timestamp=-1, offset=offset, leader_epoch=4)

    return bytes(RESPONSE(throttle_time_ms=7, topics=[
        TOPIC(name="orders-é", partitions=[partition(0, 10), partition(1, 0), partition(2, 99, error=6)]),
        TOPIC(name="payments", partitions=[partition(5, 2**40), partition(6, -1)]),
        TOPIC(name="empty", partitions=[]),
    ]).encode())


def test_the_reader_agrees_with_kafka_pythons_decoder():
    data = answer()
    decoded = RESPONSE.decode(io.BytesIO(data))
    expected = {(t.name, p.partition_index): p.offset for t in decoded.topics for p in t.partitions
                if p.error_code == 0 and p.offset >= 0}
    assert decode_end_offsets(data) == expected == {("orders-é", 0): 10, ("orders-é", 1): 0, ("payments", 5): 2**40}


def test_an_answer_cut_anywhere_is_refused_with_a_value_error():
    data = answer()
    for end in range(len(data)):
        with pytest.raises(ValueError):
            decode_end_offsets(data[:end])


def test_the_body_is_kafka_pythons_encoding_of_the_same_request():
    asked = {"orders-é": [0, 1, 2], "payments": [7]}
    theirs = REQUEST(replica_id=-1, isolation_level=1, topics=[
        ASKED_TOPIC(name=t, partitions=[ASKED(partition_index=p, current_leader_epoch=-1, timestamp=-1) for p in ps])
        for t, ps in asked.items()])
    assert request_body(asked) == bytes(theirs.encode())


def test_each_leaders_partitions_are_split_into_requests_of_at_most_the_limit(monkeypatch):
    monkeypatch.setattr(end_offsets, "PARTITIONS_PER_REQUEST", 3)
    by_leader = {1: [("a", 0), ("a", 1), ("b", 0), ("b", 1), ("b", 2)], 2: [("a", 2)]}
    sent = [(leader, request) for leader, request in requests(by_leader)]
    assert [leader for leader, _ in sent] == [1, 1, 2]
    bodies = [request._body for _, request in sent]
    assert bodies == [request_body({"a": [0, 1], "b": [0]}), request_body({"b": [1, 2]}), request_body({"a": [2]})]


def test_kafka_pythons_parser_sends_the_header_and_body_and_hands_the_reader_the_answer():
    parser = KafkaProtocol(client_id="kdiag")
    ((_, request),) = requests({1: [("orders-é", 0), ("orders-é", 1)]})
    correlation = parser.send_request(request)
    sent = parser.send_bytes()
    theirs = REQUEST(replica_id=-1, isolation_level=1, topics=[ASKED_TOPIC(name="orders-é", partitions=[
        ASKED(partition_index=p, current_leader_epoch=-1, timestamp=-1) for p in (0, 1)])])
    theirs.with_header(correlation_id=correlation, client_id="kdiag")
    assert sent == bytes(theirs.encode(framed=True, header=True))
    body = answer()
    frame = struct.pack(">ii", 4 + len(body), correlation) + body  # a v5 answer's header: the correlation id only
    ((got_correlation, offsets),) = parser.receive_bytes(frame)
    assert got_correlation == correlation and offsets == decode_end_offsets(body)


def test_only_a_request_of_the_named_version_is_wrapped():
    with pytest.raises(ValueError, match="v5 request, not v4"):
        ReadBy(ListOffsetsRequest[4](replica_id=-1, isolation_level=1, topics=[]), 5, decode_end_offsets)
