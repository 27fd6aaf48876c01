"""The records of `__consumer_offsets`, decoded strictly: offset commits and classic group metadata.

A record's key starts with an int16 type: 0 and 1 are offset commits (group, topic, partition), 2 a classic group's
metadata (group); the new group coordinator's records (3 and up: consumer, share and streams groups) are recognised
and left aside. A value starts with its int16 version: OffsetCommitValue 0-4 and GroupMetadataValue 0-4 as Kafka 2.x
to 4.x write them (4 is the first flexible version: compact strings, tagged fields). A null value is a tombstone: the
offset expired or was deleted, or the group is gone. The bytes are hostile input (group ids are chosen by clients):
every length is checked against what is left, group ids and topic names are bounded, and anything else raises
RecordError.
"""

from __future__ import annotations

import contextlib
import struct
from dataclasses import dataclass

OFFSET_KEY_TYPES = (0, 1)
GROUP_KEY_TYPE = 2
# Kafka refuses topic names longer than 249; group ids have no limit of their own but the int16 length, and
# any longer one is kept out of kdiag's series and state.
MAX_TOPIC = 249
MAX_GROUP = 1024


class RecordError(ValueError):
    """The bytes are not a record of `__consumer_offsets` kdiag knows."""


@dataclass(frozen=True)
class OffsetKey:
    """The key of a committed offset."""

    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupKey:
    """The key of a classic group's metadata."""

    group: str


@dataclass(frozen=True)
class OffsetValue:
    """A committed offset and when it was committed (epoch milliseconds; -1 when unknown)."""

    offset: int
    commit_ms: int
    expire_ms: int = -1  # only version 1 has it


@dataclass(frozen=True)
class GroupValue:
    """A classic group's metadata: protocol type, generation, member count and when its state last changed."""

    protocol_type: str
    generation: int
    members: int
    state_ms: int = -1  # from version 2


class _Reader:
    """A cursor over the bytes of one key or value; each read checks the bytes are there."""

    def __init__(self, data: bytes):
        self.data = data
        self.at = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.at + n > len(self.data):
            raise RecordError(f"truncated at byte {self.at}: {n} more wanted, {len(self.data) - self.at} left")
        chunk = self.data[self.at:self.at + n]
        self.at += n
        return chunk

    def int16(self) -> int:
        return int(struct.unpack(">h", self.take(2))[0])

    def int32(self) -> int:
        return int(struct.unpack(">i", self.take(4))[0])

    def int64(self) -> int:
        return int(struct.unpack(">q", self.take(8))[0])

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self.take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise RecordError(f"varint longer than 5 bytes at byte {self.at}")

    def string(self, flexible: bool, nullable: bool = False, limit: int | None = None) -> str | None:
        length = self.uvarint() - 1 if flexible else self.int16()
        if length < 0:
            if nullable and length == -1:
                return None
            raise RecordError(f"null or negative string length {length} at byte {self.at}")
        if limit is not None and length > limit:
            raise RecordError(f"string of {length} bytes at byte {self.at}, more than {limit}")
        try:
            return self.take(length).decode("utf-8")
        except UnicodeDecodeError as e:
            raise RecordError(f"string not UTF-8 at byte {self.at}: {e.reason}") from None

    def text(self, flexible: bool, limit: int | None = None) -> str:
        value = self.string(flexible, limit=limit)
        assert value is not None  # not nullable: string() raised on a null
        return value

    def skip_bytes(self, flexible: bool) -> None:
        self.take(self.uvarint() - 1 if flexible else self.int32())

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())

    def done(self) -> None:
        if self.at != len(self.data):
            raise RecordError(f"{len(self.data) - self.at} bytes left over after byte {self.at}")


def decode_key(data: bytes) -> OffsetKey | GroupKey | None:
    """The key as an OffsetKey or GroupKey; None for a record type of the new group coordinator (3 and up)."""
    r = _Reader(data)
    kind = r.int16()
    key: OffsetKey | GroupKey
    if kind in OFFSET_KEY_TYPES:
        group, topic, partition = r.text(False, MAX_GROUP), r.text(False, MAX_TOPIC), r.int32()
        if partition < 0:
            raise RecordError(f"negative partition {partition}")
        key = OffsetKey(group, topic, partition)
    elif kind == GROUP_KEY_TYPE:
        key = GroupKey(r.text(False, MAX_GROUP))
    elif kind > GROUP_KEY_TYPE:
        return None
    else:
        raise RecordError(f"unknown key type {kind}")
    r.done()
    return key


_V3 = struct.Struct(">hqih")
_V4 = struct.Struct(">hqiB")
_MS = struct.Struct(">q")


def decode_offset_value(data: bytes) -> OffsetValue:
    """An OffsetCommitValue of version 0 to 4."""
    # The versions Kafka 2.1 to 4.x write, at thousands of commits a second: laid out in one go when the metadata
    # string is short (one length byte in version 4) and nothing follows (no tagged fields); else read field by field.
    if len(data) >= 17 and data[1] in (3, 4) and data[0] == 0:
        version, offset, _, length = (_V3 if data[1] == 3 else _V4).unpack_from(data)
        at = 16 if version == 3 else 15
        length -= version == 4  # a compact string's length is stored plus one
        if 0 <= length < (128 if version == 4 else 32768) and len(data) == at + length + 8 + (version == 4) and \
                (version == 3 or data[-1] == 0):
            with contextlib.suppress(UnicodeDecodeError):
                data[at:at + length].decode("utf-8")
                return OffsetValue(offset, _MS.unpack_from(data, at + length)[0])
    r = _Reader(data)
    version = r.int16()
    if not 0 <= version <= 4:
        raise RecordError(f"unknown OffsetCommitValue version {version}")
    flexible = version >= 4
    offset = r.int64()
    if version >= 3:
        r.int32()  # leader epoch
    r.text(flexible)  # the client's metadata string: read to be skipped, never kept
    commit_ms = r.int64()
    expire_ms = r.int64() if version == 1 else -1
    if flexible:
        r.skip_tags()
    r.done()
    return OffsetValue(offset, commit_ms, expire_ms)


def decode_group_value(data: bytes) -> GroupValue:
    """A GroupMetadataValue of version 0 to 4 (members counted, their subscriptions and assignments skipped)."""
    r = _Reader(data)
    version = r.int16()
    if not 0 <= version <= 4:
        raise RecordError(f"unknown GroupMetadataValue version {version}")
    flexible = version >= 4
    protocol_type = r.text(flexible, MAX_GROUP)
    generation = r.int32()
    r.string(flexible, nullable=True)  # protocol
    r.string(flexible, nullable=True)  # leader
    state_ms = r.int64() if version >= 2 else -1
    members = r.uvarint() - 1 if flexible else r.int32()
    if members < 0:
        raise RecordError(f"negative member count {members}")
    for _ in range(members):
        r.text(flexible)  # member id
        if version >= 3:
            r.string(flexible, nullable=True)  # group instance id
        r.text(flexible)  # client id
        r.text(flexible)  # client host
        if version >= 1:
            r.int32()  # rebalance timeout
        r.int32()  # session timeout
        r.skip_bytes(flexible)  # subscription
        r.skip_bytes(flexible)  # assignment
        if flexible:
            r.skip_tags()
    if flexible:
        r.skip_tags()
    r.done()
    return GroupValue(protocol_type, generation, members, state_ms)
