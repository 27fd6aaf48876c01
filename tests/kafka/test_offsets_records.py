"""The __consumer_offsets decoder on the bytes real brokers wrote (Kafka 2.8.2 and 4.4.0, captured by
tests/fixtures/capture_consumer_offsets.py), on the older versions built to the schemas, and on hostile bytes."""

from __future__ import annotations

import json
import struct

import pytest

from tests.paths import FIXTURES

from kdiag.kafka.offsets_records import (MAX_GROUP, GroupKey, OffsetKey, OffsetValue, RecordError, decode_group_value,
                                         decode_key, decode_offset_value)

CAPTURES = sorted((FIXTURES / "kafka" / "consumer-offsets").glob("kafka-*.json"))


def _string(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack(">h", len(raw)) + raw


def _offset_key(group: str | bytes, topic: str = "t", partition: int = 0, kind: int = 1) -> bytes:
    return struct.pack(">h", kind) + _string(group) + _string(topic) + struct.pack(">i", partition)


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.stem)
def test_every_record_a_real_broker_wrote_decodes(path):
    capture = json.loads(path.read_text())
    kinds = set()
    for record in capture["records"]:
        key = decode_key(bytes.fromhex(record["key"]))
        assert isinstance(key, (OffsetKey, GroupKey))
        assert key.group in capture["groups"].values()
        if record["value"] is None:
            kinds.add("tombstone")
        elif isinstance(key, OffsetKey):
            value = decode_offset_value(bytes.fromhex(record["value"]))
            assert key.topic == capture["topic"] and value.offset >= 0 and value.commit_ms > 1.7e12
            kinds.add("offset")
        else:
            group = decode_group_value(bytes.fromhex(record["value"]))
            assert group.protocol_type in ("", "consumer") and group.members in (0, 1)
            kinds.add("group")
    assert kinds == {"offset", "group", "tombstone"}


def test_kafka_4_writes_flexible_offset_values_and_2_8_the_older_version():
    versions = {}
    for path in CAPTURES:
        capture = json.loads(path.read_text())
        versions[path.stem] = {struct.unpack(">h", bytes.fromhex(r["value"])[:2])[0]
                               for r in capture["records"] if r["value"] and r["key"].startswith("0001")}
    assert versions == {"kafka-2.8.2": {3}, "kafka-4.4.0": {4}}


def test_offset_value_versions_0_to_2_as_the_schema_lays_them_out():
    v0 = struct.pack(">hq", 0, 42) + _string("meta") + struct.pack(">q", 1700000000000)
    v1 = struct.pack(">hq", 1, 42) + _string("") + struct.pack(">qq", 1700000000000, 1700000600000)
    v2 = struct.pack(">hq", 2, 42) + _string("m") + struct.pack(">q", 1700000000000)
    assert decode_offset_value(v0) == OffsetValue(42, 1700000000000)
    assert decode_offset_value(v1) == OffsetValue(42, 1700000000000, 1700000600000)
    assert decode_offset_value(v2) == OffsetValue(42, 1700000000000)


def test_key_types_of_the_new_group_coordinator_are_left_aside():
    assert decode_key(struct.pack(">h", 3) + _string("g")) is None
    assert decode_key(_offset_key("g", kind=0)) == OffsetKey("g", "t", 0)


@pytest.mark.parametrize("data, error", [
    (b"", "truncated"),
    (_offset_key("g")[:-1], "truncated"),
    (_offset_key("g") + b"\x00", "left over"),
    (_offset_key("g", partition=-1), "negative partition"),
    (_offset_key("x" * (MAX_GROUP + 1)), "more than"),
    (_offset_key("g", topic="t" * 250), "more than"),
    (_offset_key(b"\xff\xfe"), "not UTF-8"),
    (struct.pack(">h", -1) + _string("g"), "unknown key type"),
    (struct.pack(">hh", 1, -1), "negative string length"),
])
def test_a_hostile_key_is_refused_with_the_reason(data, error):
    with pytest.raises(RecordError, match=error):
        decode_key(data)


@pytest.mark.parametrize("data, error", [
    (struct.pack(">hq", 5, 1), "unknown OffsetCommitValue version 5"),
    (struct.pack(">hq", 3, 1), "truncated"),
    (struct.pack(">hqi", 4, 1, 0) + b"\xff\xff\xff\xff\xff\x01", "varint longer"),
    (struct.pack(">hqi", 4, 1, 0) + b"\x01" + struct.pack(">q", 0) + b"\x01\x00\x05ab", "truncated"),
])
def test_a_hostile_offset_value_is_refused_with_the_reason(data, error):
    with pytest.raises(RecordError, match=error):
        decode_offset_value(data)


def test_a_group_value_claiming_more_members_than_its_bytes_is_refused():
    value = struct.pack(">h", 0) + _string("consumer") + struct.pack(">i", 1) + _string("range") + _string("m") + \
        struct.pack(">i", 1_000_000_000)
    with pytest.raises(RecordError, match="truncated"):
        decode_group_value(value)
