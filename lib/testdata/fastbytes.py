"""The coordinator records a busy log repeats millions of times, packed with `struct`: offset
commit values (v3, v4) and GroupMetadata values (v0-v3) with their consumer-protocol
subscriptions and assignments (v0-v3), and the records of a batch. Byte for byte what
`lib.codec.serde`'s schema-driven encoders and `lib.codec.writer.encode_record` write
(tests/test_busy_generator.py compares them), at a small fraction of the cost: those walk the
schema per field and take about a millisecond for a group of ten members. Only the
non-flexible layouts (GroupMetadataValue v4 was never written by a broker)."""

from __future__ import annotations

import base64
import struct
from collections.abc import Iterable, Sequence
from functools import lru_cache

from lib.codec.primitives import encode_varint

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_COMMIT_V3 = struct.Struct(">hqi")  # version, offset, leaderEpoch
_TS = struct.Struct(">q")
_NULL_STRING = _I16.pack(-1)
_NULL_BYTES = _I32.pack(-1)


@lru_cache(maxsize=1 << 16)
def string(text: str | None) -> bytes:
    """A non-flexible (nullable) string: int16 length + UTF-8."""
    if text is None:
        return _NULL_STRING
    raw = text.encode("utf-8")
    return _I16.pack(len(raw)) + raw


def nullable_bytes(data: bytes | None) -> bytes:
    return _NULL_BYTES if data is None else _I32.pack(len(data)) + data


def topic_id_bytes(topic_id: str) -> bytes:
    """A topic id's 16 bytes from its text form (URL-safe base64 without padding)."""
    return base64.urlsafe_b64decode(topic_id + "==")


def offset_commit_value(
    offset: int, commit_ts: int, leader_epoch: int, metadata: bytes, version: int, topic_id: bytes | None
) -> bytes:
    """OffsetCommitValue v3 (offset, leaderEpoch, metadata, commitTimestamp) or v4 (the same,
    flexible: compact metadata, then the tagged topicId when given). `metadata`: UTF-8."""
    return offset_commit_values(version, commit_ts, metadata, [(offset, leader_epoch, topic_id)])[0]


def offset_commit_values(
    version: int, commit_ts: int, metadata: bytes, entries: Iterable[tuple[int, int, bytes | None]]
) -> list[bytes]:
    """The values of one commit request, (offset, leader epoch, topic id) each: what they share
    (metadata, timestamp) packed once."""
    if version == 3:
        tail = _I16.pack(len(metadata)) + metadata + _TS.pack(commit_ts)
        return [_COMMIT_V3.pack(3, offset, epoch) + tail for offset, epoch, _ in entries]
    if version != 4:
        raise ValueError(f"offset commit value v{version} is not packed here")
    tail = _uvarint(len(metadata) + 1) + metadata + _TS.pack(commit_ts)
    # no tagged field, or one: tag 0, 16 bytes
    return [
        _COMMIT_V3.pack(4, offset, epoch) + tail + (b"\x00" if tid is None else b"\x01\x00\x10" + tid)
        for offset, epoch, tid in entries
    ]


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


@lru_cache(maxsize=1 << 14)
def topic_partitions(partitions: tuple[tuple[str, int], ...]) -> bytes:
    """[Topic string, Partitions []int32] as the consumer protocol writes it, topics and
    partitions in order (remembered: a member's owned partitions are its last assignment)."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    out = [_I32.pack(len(by_topic))]
    for topic, numbers in by_topic.items():
        out.append(string(topic))
        out.append(struct.pack(f">i{len(numbers)}i", len(numbers), *numbers))
    return b"".join(out)


def subscription(
    version: int,
    topics: Sequence[str],
    user_data: bytes | None,
    owned: tuple[tuple[str, int], ...] = (),
    generation_id: int = -1,
    rack_id: str | None = None,
) -> bytes:
    """ConsumerProtocolSubscription v0-v3: each field only in the versions that have it."""
    out = [_I16.pack(version), _strings(tuple(topics)), nullable_bytes(user_data)]
    if version >= 1:
        out.append(topic_partitions(owned))
    if version >= 2:
        out.append(_I32.pack(generation_id))
    if version >= 3:
        out.append(string(rack_id))
    return b"".join(out)


@lru_cache(maxsize=4096)
def _strings(items: tuple[str, ...]) -> bytes:
    """[]string: int32 count, then each string."""
    return _I32.pack(len(items)) + b"".join(map(string, items))


def assignment(version: int, assigned: tuple[tuple[str, int], ...], user_data: bytes | None = None) -> bytes:
    """ConsumerProtocolAssignment v0-v3 (one layout)."""
    return _I16.pack(version) + topic_partitions(assigned) + nullable_bytes(user_data)


def member_head(
    version: int,
    member_id: str,
    instance_id: str | None,
    client_id: str,
    client_host: str,
    rebalance_timeout: int,
    session_timeout: int,
) -> bytes:
    """A GroupMetadataValue member's fields before its subscription and assignment: fixed for
    the member's life, so a generator packs them once."""
    out = [string(member_id)]
    if version >= 3:
        out.append(string(instance_id))
    out += [string(client_id), string(client_host)]
    if version >= 1:
        out.append(_I32.pack(rebalance_timeout))
    out.append(_I32.pack(session_timeout))
    return b"".join(out)


def member(head: bytes, subscription_bytes: bytes, assignment_bytes: bytes) -> bytes:
    return head + nullable_bytes(subscription_bytes) + nullable_bytes(assignment_bytes)


def group_metadata_value(
    version: int,
    protocol_type: str,
    generation: int,
    protocol: str | None,
    leader: str | None,
    state_ts: int,
    members: Sequence[bytes],
) -> bytes:
    """GroupMetadataValue v0-v3 around members packed by `member`."""
    if not 0 <= version <= 3:
        raise ValueError(f"GroupMetadataValue v{version} is not packed here")
    out = [_I16.pack(version), string(protocol_type), _I32.pack(generation), string(protocol), string(leader)]
    if version >= 2:
        out.append(_TS.pack(state_ts))
    out.append(_I32.pack(len(members)))
    out.extend(members)
    return b"".join(out)


# --- records of a magic-2 batch ----------------------------------------------------------------

# zig-zag varints of small numbers, looked up: the lengths and offset deltas of coordinator records
_VARINTS = [encode_varint(i) for i in range(1 << 14)]


def _varint(n: int) -> bytes:
    return _VARINTS[n] if n < len(_VARINTS) else encode_varint(n)


def record(offset_delta: int, key: bytes, value: bytes | None) -> bytes:
    """A record as `lib.codec.writer.encode_record` writes it with timestamp delta 0 and no
    headers: every record of a coordinator batch has the batch's timestamp."""
    tail = b"\x01\x00" if value is None else _varint(len(value)) + value + b"\x00"  # -1: a tombstone
    body = b"\x00\x00" + _varint(offset_delta) + _varint(len(key)) + key + tail
    return _varint(len(body)) + body


def records(items: Sequence[tuple[bytes, bytes | None]]) -> bytes:
    """The records of one batch, offset deltas 0..n-1 (`record`, inlined: the hot path)."""
    out = []
    varints, small = _VARINTS, len(_VARINTS)
    for i, (key, value) in enumerate(items):
        if value is None:
            tail = b"\x01\x00"
        else:
            n = len(value)
            tail = (varints[n] if n < small else encode_varint(n)) + value + b"\x00"
        body = b"\x00\x00" + varints[i] + varints[len(key)] + key + tail
        n = len(body)
        out.append(varints[n] if n < small else encode_varint(n))
        out.append(body)
    return b"".join(out)
