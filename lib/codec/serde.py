"""Coordinator records of __consumer_offsets: key = int16 type + key struct, value = int16
version + value struct (spec 2.1). One decoder per record family, dispatched on the type id,
as Kafka's GroupCoordinatorRecordSerde does. Offset commits, the hot path, have a hand-written
decoder; every other type goes through the schema-driven one."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from lib.codec.errors import DecodeError, UnknownRecordTypeError, UnknownRecordVersionError
from lib.codec.generic import encode_message, read_message
from lib.codec.primitives import Reader, uuid_text
from schemas.records import (
    CONSUMER_PROTOCOL_ASSIGNMENT,
    CONSUMER_PROTOCOL_SUBSCRIPTION,
    OFFSET_COMMIT_TYPES,
    RECORD_TYPES,
    RecordType,
)

_H = struct.Struct(">h")
_OC_V0 = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class CoordinatorKey:
    record_type: int
    group_id: str
    topic: str | None = None
    partition: int | None = None
    member_id: str | None = None
    regular_expression: str | None = None

    @property
    def type_name(self) -> str:
        return RECORD_TYPES[self.record_type][0]


def record_type_of(key: bytes) -> int:
    if key is None or len(key) < 2:
        raise DecodeError(f"coordinator key of {0 if key is None else len(key)} bytes has no type")
    return _H.unpack_from(key, 0)[0]


def decode_key(key: bytes) -> CoordinatorKey:
    """Decode a key. Raises UnknownRecordTypeError for a type this decoder does not know."""
    record_type = record_type_of(key)
    if record_type in OFFSET_COMMIT_TYPES:
        group, topic, partition = _offset_commit_key(key)
        return CoordinatorKey(record_type, group, topic, partition)
    spec = RECORD_TYPES.get(record_type)
    if spec is None:
        raise UnknownRecordTypeError(record_type)
    data = read_message(Reader(key, 2), spec[1], 0)
    if record_type == RecordType.GROUP_METADATA:
        return CoordinatorKey(2, data["group"])
    return CoordinatorKey(
        record_type, data["groupId"], member_id=data.get("memberId"), regular_expression=data.get("regularExpression")
    )


def key_data(key: CoordinatorKey) -> dict:
    """The key as Kafka's JsonConverter prints it."""
    if key.record_type in OFFSET_COMMIT_TYPES:
        return {"group": key.group_id, "topic": key.topic, "partition": key.partition}
    if key.record_type == RecordType.GROUP_METADATA:
        return {"group": key.group_id}
    out = {"groupId": key.group_id}
    if key.member_id is not None:
        out["memberId"] = key.member_id
    if key.regular_expression is not None:
        out["regularExpression"] = key.regular_expression
    return out


def encode_key(key: CoordinatorKey) -> bytes:
    spec = RECORD_TYPES[key.record_type]
    return _H.pack(key.record_type) + encode_message(spec[1], 0, key_data(key))


def _read_str16(buf, pos: int, what: str) -> tuple[str, int]:
    if pos + 2 > len(buf):
        raise DecodeError(f"truncated {what} length at position {pos}")
    n = _H.unpack_from(buf, pos)[0]
    pos += 2
    if n < 0:
        raise DecodeError(f"non-nullable {what} was serialized as null")
    if pos + n > len(buf):
        raise DecodeError(f"truncated {what}: need {n} bytes at position {pos}, {len(buf) - pos} left")
    try:
        return bytes(buf[pos : pos + n]).decode("utf-8"), pos + n
    except UnicodeDecodeError as e:
        raise DecodeError(f"{what} is not valid UTF-8: {e}") from None


def _offset_commit_key(key) -> tuple[str, str, int]:
    group, pos = _read_str16(key, 2, "group")
    topic, pos = _read_str16(key, pos, "topic")
    if pos + 4 > len(key):
        raise DecodeError(f"truncated partition at position {pos}")
    return group, topic, struct.unpack_from(">i", key, pos)[0]


@dataclass(frozen=True, slots=True)
class OffsetCommit:
    version: int
    offset: int
    leader_epoch: int  # -1 when absent
    metadata: str
    commit_timestamp: int
    expire_timestamp: int  # -1 when absent
    topic_id: str | None  # None when absent or zero


def decode_offset_commit_value(record_type: int, value) -> OffsetCommit:
    """OffsetCommitValue v0-v4 (type 1) or LegacyOffsetCommitValue v0 (type 0)."""
    if len(value) < 2:
        raise DecodeError("offset commit value has no version")
    version = _H.unpack_from(value, 0)[0]
    # Kafka 4.1+ accepts only LegacyOffsetCommitValue v0 under a type-0 key (4.0 read any
    # OffsetCommitValue version there; no broker ever wrote such a record).
    if not 0 <= version <= (0 if record_type == RecordType.LEGACY_OFFSET_COMMIT else 4):
        raise UnknownRecordVersionError(record_type, version)
    r = Reader(value, 2)
    offset = r.int64()
    leader_epoch = r.int32() if version >= 3 else -1
    if version >= 4:
        n = r.uvarint() - 1
        if n < 0:
            raise DecodeError("non-nullable metadata was serialized as null")
        metadata = _utf8(r.raw(n, "metadata"), "metadata")
    else:
        n = r.int16()
        if n < 0:
            raise DecodeError("non-nullable metadata was serialized as null")
        metadata = _utf8(r.raw(n, "metadata"), "metadata")
    commit_ts = r.int64()
    expire_ts = r.int64() if version == 1 else -1
    topic_id = None
    if version >= 4:
        for _ in range(r.uvarint()):
            tag = r.uvarint()
            size = r.uvarint()
            if tag == 0:
                if size != 16:
                    raise DecodeError(f"topicId tag of {size} bytes, expected 16")
                tid = uuid_text(r.raw(16, "topicId"))
                topic_id = None if tid == "AAAAAAAAAAAAAAAAAAAAAA" else tid
            else:
                r.raw(size, f"tagged field {tag}")
    return OffsetCommit(version, offset, leader_epoch, metadata, commit_ts, expire_ts, topic_id)


def _utf8(raw: bytes, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DecodeError(f"{what} is not valid UTF-8: {e}") from None


def value_version(value) -> int:
    if value is None or len(value) < 2:
        raise DecodeError("value has no version")
    return _H.unpack_from(value, 0)[0]


def decode_value(record_type: int, value) -> tuple[int, dict] | None:
    """(version, data) in Kafka's JsonConverter form; None for a tombstone."""
    if value is None:
        return None
    spec = RECORD_TYPES.get(record_type)
    if spec is None:
        raise UnknownRecordTypeError(record_type)
    version = value_version(value)
    message = spec[2]
    if not message.valid_in(version):
        raise UnknownRecordVersionError(record_type, version)
    return version, read_message(Reader(value, 2), message, version)


def encode_value(record_type: int, version: int, data: dict) -> bytes:
    message = RECORD_TYPES[record_type][2]
    return _H.pack(version) + encode_message(message, version, data)


# --- consumer protocol (spec 3) ----------------------------------------------------------------


def decode_subscription(buf) -> dict:
    """ConsumerProtocolSubscription; a higher version than known is read with the newest layout."""
    return decode_consumer_protocol(buf, CONSUMER_PROTOCOL_SUBSCRIPTION, "subscription")


def decode_assignment(buf) -> dict:
    return decode_consumer_protocol(buf, CONSUMER_PROTOCOL_ASSIGNMENT, "assignment")


def decode_consumer_protocol(buf, message, what: str) -> dict:
    if buf is None or len(buf) < 2:
        raise DecodeError(f"consumer protocol {what} of {0 if buf is None else len(buf)} bytes has no version")
    version = _H.unpack_from(buf, 0)[0]
    if version < 0:
        raise DecodeError(f"consumer protocol {what} has negative version {version}")
    return read_message(Reader(buf, 2), message, min(version, 3))


def consumer_protocol_version(buf) -> int:
    return _H.unpack_from(buf, 0)[0]


def encode_subscription(version: int, data: dict) -> bytes:
    return _H.pack(version) + encode_message(CONSUMER_PROTOCOL_SUBSCRIPTION, version, data)


def encode_assignment(version: int, data: dict) -> bytes:
    return _H.pack(version) + encode_message(CONSUMER_PROTOCOL_ASSIGNMENT, version, data)


# --- control records (spec 1.8) -------------------------------------------------------------


def decode_control_key(key) -> tuple[int, int]:
    """(version, type): 0 = ABORT, 1 = COMMIT. A higher version is read with the v0 layout."""
    if key is None or len(key) < 4:
        raise DecodeError(f"control record key of {0 if key is None else len(key)} bytes, expected 4")
    return _H.unpack_from(key, 0)[0], _H.unpack_from(key, 2)[0]


def decode_end_txn_marker(value) -> tuple[int, int]:
    """(version, coordinatorEpoch) of an ABORT/COMMIT marker value."""
    if value is None or len(value) < 6:
        raise DecodeError(f"end transaction marker of {0 if value is None else len(value)} bytes, expected 6")
    return _H.unpack_from(value, 0)[0], struct.unpack_from(">i", value, 2)[0]


def encode_control_key(control_type: int, version: int = 0) -> bytes:
    return struct.pack(">hh", version, control_type)


def encode_end_txn_marker(coordinator_epoch: int, version: int = 0) -> bytes:
    return struct.pack(">hi", version, coordinator_epoch)
