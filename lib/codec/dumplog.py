"""The key and payload text that Kafka's DumpLogSegments --offsets-decoder prints (4.1+),
so our decoder can be compared with Kafka's record by record."""

from __future__ import annotations

import base64
import json
import re
import struct

from lib.codec.errors import DecodeError, UnknownRecordTypeError, UnknownRecordVersionError
from lib.codec.generic import read_message
from lib.codec.primitives import Reader
from lib.codec.serde import decode_consumer_protocol, decode_key, key_data, record_type_of, value_version
from schemas.records import CONSUMER_PROTOCOL_ASSIGNMENT, CONSUMER_PROTOCOL_SUBSCRIPTION, RECORD_TYPES, RecordType

_CONTROL_ESCAPE = re.compile(r"\\u00([0-9a-f]{2})")


def to_json(obj) -> str:
    """Jackson's compact form: raw UTF-8, upper-case hex in \\u00XX escapes."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return _CONTROL_ESCAPE.sub(lambda m: "\\u00" + m.group(1).upper(), text)


def _consumer_bytes(b64: str | None, message):
    if b64 is None:
        return None
    raw = base64.b64decode(b64)
    try:
        return decode_consumer_protocol(raw, message, message.name)
    except DecodeError:
        return b64  # Kafka keeps the original base64 when the bytes do not parse


def key_and_payload(key: bytes | None, value: bytes | None, offset: int) -> tuple[str, str | None]:
    """(key text, payload text or None) of one coordinator record."""
    if key is None:
        raise DecodeError(f"Failed to decode message at offset {offset} (message had a missing key)")
    try:
        record_type = record_type_of(key)
    except DecodeError:
        return f"Error at offset {offset}, skipping. Could not read version from key's buffer.", None
    if record_type not in RECORD_TYPES:
        return f"Unknown record type {record_type} at offset {offset}, skipping.", None
    try:
        ckey = decode_key(key)
    except UnknownRecordTypeError:
        return f"Unknown record type {record_type} at offset {offset}, skipping.", None
    except DecodeError:
        return (
            f"Error at offset {offset}, skipping. Could not read record with version {record_type} "
            f"from key's buffer due to: null."
        ), None
    key_text = to_json({"type": str(record_type), "data": key_data(ckey)})
    if value is None:
        return key_text, "<DELETE>"
    try:
        version = value_version(value)
    except DecodeError:
        return f"Error at offset {offset}, skipping. Could not read version from value's buffer.", None
    message = RECORD_TYPES[record_type][2]
    if not message.valid_in(version):
        return f"Error at offset {offset}, skipping. {UnknownRecordVersionError(record_type, version).kafka_text}", None
    try:
        data = read_message(Reader(value, 2), message, version)
    except DecodeError as e:
        return (
            f"Error at offset {offset}, skipping. Could not read record with version {version} "
            f"from value's buffer due to: {e.message}."
        ), None
    if record_type == RecordType.GROUP_METADATA and data.get("protocolType") == "consumer":
        for m in data.get("members") or []:
            m["subscription"] = _consumer_bytes(m.get("subscription"), CONSUMER_PROTOCOL_SUBSCRIPTION)
            m["assignment"] = _consumer_bytes(m.get("assignment"), CONSUMER_PROTOCOL_ASSIGNMENT)
    return key_text, to_json({"version": str(version), "data": data})


def control_text(key: bytes, value: bytes | None) -> str:
    """` endTxnMarker: COMMIT coordinatorEpoch: N` as printed for a control record."""
    if value is None:
        raise DecodeError("control record without a value")
    _, ctype = struct.unpack_from(">hh", key, 0)
    epoch = struct.unpack_from(">i", value, 2)[0]
    return f"endTxnMarker: {'COMMIT' if ctype == 1 else 'ABORT'} coordinatorEpoch: {epoch}"
