"""The compact encodings of Kafka's flexible message versions, read from an answer's bytes: unsigned varints,
compact strings and tagged fields sections."""

from __future__ import annotations

MAX_VARINT_SHIFT = 28  # a 32-bit unsigned varint takes at most five bytes


def uvarint(data: bytes, pos: int) -> tuple[int, int]:
    """An unsigned varint at pos, and the position after it."""
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > MAX_VARINT_SHIFT:
            raise ValueError(f"a varint longer than 5 bytes at byte {pos}")


def skip_tags(data: bytes, pos: int) -> int:
    """The position after a tagged fields section (none is read: kdiag needs none of the tagged fields)."""
    count, pos = uvarint(data, pos)
    for _ in range(count):
        _, pos = uvarint(data, pos)
        size, pos = uvarint(data, pos)
        pos += size
    return pos


def text(data: bytes, pos: int) -> tuple[str, int]:
    """A compact string ('' when null), and the position after it."""
    size, pos = uvarint(data, pos)
    end = pos + size - 1 if size else pos
    if end > len(data):
        raise ValueError(f"a string past the end of the answer at byte {pos}")
    return data[pos:end].decode("utf-8"), end
