"""Independent readings of what a broker wrote, from Kafka's protocol and source rather than
from lib/: which __consumer_offsets partition holds a group, and the zigzag varints of v2
records (for tests that find batches and records in segment files themselves)."""

from __future__ import annotations


def offsets_partition_for(group_id: str, partitions: int) -> int:
    """The __consumer_offsets partition of a group: Utils.abs(groupId.hashCode()) % partitions,
    where Utils.abs is Math.abs except that Integer.MIN_VALUE maps to 0."""
    data = group_id.encode("utf-16-be")  # String.hashCode runs over UTF-16 code units
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    signed = h - (1 << 32) if h >= 1 << 31 else h
    return (0 if signed == -(1 << 31) else abs(signed)) % partitions


def varint(data: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint of a v2 record at pos: (value, position after it)."""
    shift = value = 0
    while True:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return (value >> 1) ^ -(value & 1), pos
