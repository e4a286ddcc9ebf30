"""The sticky assignors' subscription user data, in Kafka's protocol Struct encoding.

StickyAssignor (StickyAssignor.serializeTopicPartitionAssignment / deserializeTopicPartitionAssignment):
    v1: previous_assignment: [topic: STRING, partitions: [INT32]], generation: INT32
    v0: previous_assignment only (members before Kafka 2.3)
CooperativeStickyAssignor (its subscriptionUserData / memberData):
    v0: generation: INT32

Big-endian, STRING = INT16 length + UTF-8, ARRAY = INT32 count + elements; reading stops after
the schema's last field (trailing bytes are ignored, as Schema.read does)."""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from typing import TypeVar

from lib.assignors.javautil import JavaHashMap, TopicPartition, string_hash

_SHORT_MAX = 0x7FFF
T = TypeVar("T")


_REPLACEMENT = 0xFFFD


def _continuation(b: int) -> bool:
    return (b & 0xC0) == 0x80


def _malformed3_length(b1: int, b2: int) -> int:
    """String.malformed3: how many bytes one U+FFFD stands for."""
    return 1 if (b1 == 0xE0 and (b2 & 0xE0) == 0x80) or not _continuation(b2) else 2


def _malformed4_length(b1: int, b2: int, b3: int) -> int:
    """String.malformed4."""
    if b1 > 0xF4 or (b1 == 0xF0 and not 0x90 <= b2 <= 0xBF) or (b1 == 0xF4 and (b2 & 0xF0) != 0x80):
        return 1
    if not _continuation(b2):
        return 1
    return 2 if not _continuation(b3) else 3


def java_utf8_decode(data: bytes) -> str:
    """new String(bytes, UTF_8), which Kafka's Type.STRING uses: malformed input becomes U+FFFD,
    but not always as many as Python's decoder makes (an encoded surrogate, ED A0 80, is one
    U+FFFD in Java and three in Python). Follows String.decodeUTF8_UTF16 (OpenJDK 17-25)."""
    units: list[int] = []
    sp, sl = 0, len(data)
    while sp < sl:
        b1 = data[sp]
        sp += 1
        if b1 < 0x80:
            units.append(b1)
        elif 0xC2 <= b1 <= 0xDF:  # two bytes (C0 and C1 would be overlong)
            if sp < sl:
                b2 = data[sp]
                if _continuation(b2):
                    units.append(((b1 & 0x1F) << 6) | (b2 & 0x3F))
                    sp += 1
                else:
                    units.append(_REPLACEMENT)  # b2 is read again as a lead byte
                continue
            units.append(_REPLACEMENT)
            break
        elif 0xE0 <= b1 <= 0xEF:  # three bytes
            if sp + 1 < sl:
                b2, b3 = data[sp], data[sp + 1]
                if (b1 == 0xE0 and (b2 & 0xE0) == 0x80) or not _continuation(b2) or not _continuation(b3):
                    units.append(_REPLACEMENT)
                    sp = sp - 1 + _malformed3_length(b1, b2)
                else:
                    c = ((b1 & 0x0F) << 12) | ((b2 & 0x3F) << 6) | (b3 & 0x3F)
                    units.append(_REPLACEMENT if 0xD800 <= c <= 0xDFFF else c)
                    sp += 2
                continue
            if sp < sl and ((b1 == 0xE0 and (data[sp] & 0xE0) == 0x80) or not _continuation(data[sp])):
                units.append(_REPLACEMENT)
                continue
            units.append(_REPLACEMENT)  # truncated at the end: one U+FFFD for the rest
            break
        elif 0xF0 <= b1 <= 0xF7:  # four bytes
            if sp + 2 < sl:
                b2, b3, b4 = data[sp], data[sp + 1], data[sp + 2]
                uc = ((b1 & 0x07) << 18) | ((b2 & 0x3F) << 12) | ((b3 & 0x3F) << 6) | (b4 & 0x3F)
                if not (_continuation(b2) and _continuation(b3) and _continuation(b4)) or not 0x10000 <= uc <= 0x10FFFF:
                    units.append(_REPLACEMENT)
                    sp = sp - 1 + _malformed4_length(b1, b2, b3)
                else:
                    uc -= 0x10000
                    units += [0xD800 | (uc >> 10), 0xDC00 | (uc & 0x3FF)]
                    sp += 3
                continue
            if b1 > 0xF4 or (
                sp < sl
                and (
                    (b1 == 0xF0 and not 0x90 <= data[sp] <= 0xBF)
                    or (b1 == 0xF4 and (data[sp] & 0xF0) != 0x80)
                    or not _continuation(data[sp])
                )
            ):
                units.append(_REPLACEMENT)
                continue
            sp += 1
            units.append(_REPLACEMENT)
            if sp < sl and not _continuation(data[sp]):
                continue
            break
        else:  # a continuation byte, C0, C1 or F8..FF as a lead
            units.append(_REPLACEMENT)
    return b"".join(u.to_bytes(2, "big") for u in units).decode("utf-16-be", "surrogatepass")


class _SchemaError(Exception):
    """Schema.read failed (Kafka wraps every failure in a SchemaException)."""


class _Reader:
    """The reads of org.apache.kafka.common.protocol.types.Type over a ByteBuffer."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def remaining(self) -> int:
        return len(self.data) - self.pos

    def _take(self, n: int) -> bytes:
        if self.remaining() < n:
            raise _SchemaError("BufferUnderflowException")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def int16(self) -> int:
        value: int = struct.unpack(">h", self._take(2))[0]
        return value

    def int32(self) -> int:
        value: int = struct.unpack(">i", self._take(4))[0]
        return value

    def string(self) -> str:
        # Type.STRING.read / Type.stringRead
        length = self.int16()
        if length < 0:
            raise _SchemaError(f"String length {length} cannot be negative")
        if length > self.remaining():
            raise _SchemaError(f"Error reading string of length {length}")
        return java_utf8_decode(self._take(length))

    def array(self, read_element: Callable[[], T]) -> list[T]:
        # ArrayOf.read (not nullable): the count is checked against the bytes left, loosely
        size = self.int32()
        if size < 0:
            raise _SchemaError(f"Array size {size} cannot be negative")
        if size > self.remaining():
            raise _SchemaError(f"Error reading array of size {size}")
        return [read_element() for _ in range(size)]


def _read_previous_assignment(reader: _Reader) -> list[TopicPartition]:
    def topic_assignment() -> list[TopicPartition]:
        topic = reader.string()
        partitions = reader.array(reader.int32)
        return [(topic, p) for p in partitions]

    topics = reader.array(topic_assignment)
    return [tp for per_topic in topics for tp in per_topic]


def decode_sticky_user_data(data: bytes | None) -> tuple[list[TopicPartition], int | None]:
    """StickyAssignor.memberData: (previous partitions, generation or None).

    Empty or absent user data: no partitions, no generation. Otherwise the v1 schema, falling
    back to v0 (no generation); if neither parses, no partitions and generation -1
    (Optional.of(DEFAULT_GENERATION))."""
    if not data:
        return [], None
    try:
        reader = _Reader(data)
        partitions = _read_previous_assignment(reader)
        return partitions, reader.int32()
    except _SchemaError:
        pass
    try:
        return _read_previous_assignment(_Reader(data)), None
    except _SchemaError:
        return [], -1


def decode_cooperative_generation(data: bytes | None) -> int | None:
    """CooperativeStickyAssignor.memberData's fallback (subscription without a generation):
    the generation in its v0 user data; None without user data, -1 if it does not parse."""
    if data is None:
        return None
    try:
        return _Reader(data).int32()
    except _SchemaError:
        return -1


def encode_sticky_user_data(partitions: Iterable[TopicPartition], generation: int | None) -> bytes:
    """StickyAssignor.serializeTopicPartitionAssignment: the v1 layout with ``generation``.

    Topics are written in the iteration order of the HashMap that
    CollectionUtils.groupPartitionsByTopic builds (computeIfAbsent), so the bytes equal Java's.
    With ``generation`` None the v0 layout (no generation field) is written: what members
    before Kafka 2.3 sent; Java's serializer itself always has a generation."""
    by_topic: JavaHashMap[str, list[int]] = JavaHashMap(string_hash)
    for topic, partition in partitions:
        by_topic.compute_if_absent(topic, lambda _t: []).append(partition)
    out = [struct.pack(">i", len(by_topic))]
    for topic, topic_partitions in by_topic.items():
        encoded = topic.encode("utf-8", "replace")  # String.getBytes(UTF_8): lone surrogates become '?'
        if len(encoded) > _SHORT_MAX:
            raise ValueError(f"topic name of {len(encoded)} bytes is larger than the maximum string length")
        out.append(struct.pack(">h", len(encoded)) + encoded)
        out.append(struct.pack(f">i{len(topic_partitions)}i", len(topic_partitions), *topic_partitions))
    if generation is not None:
        out.append(struct.pack(">i", generation))
    return b"".join(out)
