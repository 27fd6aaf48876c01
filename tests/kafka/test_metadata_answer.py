"""Metadata v9 answers read into kdiag's topics: a real answer with a shrunk ISR and an offline partition, the one-width
rows of whole ISRs, internal topics left out, replica sets shared, a cut answer refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kafka.protocol.metadata import MetadataResponse

from kdiag.kafka.metadata_answer import decode_topics

FIXTURE = Path(__file__).parent.parent / "fixtures" / "kafka" / "metadata-v9.json"
Topic = MetadataResponse.MetadataResponseTopic
Part = Topic.MetadataResponsePartition


def _part(index: int, leader: int, replicas: list[int], isr: list[int], offline: list[int] | None = None) -> Part:
    return Part(error_code=0, partition_index=index, leader_id=leader, leader_epoch=3, replica_nodes=replicas,
                isr_nodes=isr, offline_replicas=offline or [], version=9)


def _answer(topics: list[Topic]) -> bytes:
    """The body of a Metadata v9 answer, through kafka-python's encoder."""
    broker = MetadataResponse.MetadataResponseBroker
    return MetadataResponse(throttle_time_ms=0, brokers=[broker(node_id=1, host="127.0.0.1", port=9092, rack=None, version=9),
                                                         broker(node_id=2, host="127.0.0.1", port=9102, rack="r2", version=9)],
                            cluster_id="kdiag-test", controller_id=1, topics=topics,
                            version=9).encode()


def test_a_real_answer_with_a_shrunk_isr_and_an_offline_partition_reads_as_librdkafka_does():
    captured = json.loads(FIXTURE.read_text())
    assert decode_topics(bytes.fromhex(captured["answer"])) == captured["topics"]


def test_whole_isrs_read_as_rows_internal_topics_left_out_and_replica_sets_shared():
    data = _answer([
        Topic(error_code=0, name="orders", is_internal=False, version=9,
              partitions=[_part(2, 1, [1, 2], [1, 2]), _part(0, 2, [2, 1], [2, 1]), _part(1, 1, [1, 2], [1, 2])]),
        Topic(error_code=0, name="__consumer_offsets", is_internal=True, version=9,
              partitions=[_part(0, 1, [1, 2], [1, 2])]),
        Topic(error_code=0, name="audit", is_internal=False, version=9,
              partitions=[_part(0, 1, [1, 2], [1, 2]), _part(1, -1, [2, 1], [2], offline=[2])])])
    topics = decode_topics(data)
    assert list(topics) == ["audit", "orders"]
    orders = topics["orders"]["partitions"]
    assert orders == [
        {"partition": 0, "leader": 2, "replicas": [2, 1], "isr": [2, 1], "log_end_offset": None},
        {"partition": 1, "leader": 1, "replicas": [1, 2], "isr": [1, 2], "log_end_offset": None},
        {"partition": 2, "leader": 1, "replicas": [1, 2], "isr": [1, 2], "log_end_offset": None}]
    assert topics["audit"]["partitions"][1] == {"partition": 1, "leader": -1, "replicas": [2, 1], "isr": [2],
                                                "log_end_offset": None}
    assert orders[1]["replicas"] is orders[2]["replicas"] is orders[1]["isr"] is topics["audit"]["partitions"][0]["isr"]
    assert topics["orders"]["configs"] == {} and topics["orders"]["config_sources"] == {}


def test_a_cut_answer_is_refused():
    data = bytes.fromhex(json.loads(FIXTURE.read_text())["answer"])
    with pytest.raises(ValueError, match="Metadata v9 answer cut short"):
        decode_topics(data[:len(data) // 2])
