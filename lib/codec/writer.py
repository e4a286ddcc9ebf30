"""Writes the on-disk formats: magic-2 batches and legacy messages. Used to build fixtures,
the bundled sample and benchmark logs; the layouts are those the reader checks."""

from __future__ import annotations

import struct
import zlib

import crc32c as _crc32c

from lib.codec.compression import compress
from lib.codec.primitives import encode_varint, encode_varlong

RECORD_BODY = struct.Struct(">hiqqqhii")


def encode_record(
    offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None, headers: tuple = ()
) -> bytes:
    body = bytearray(b"\x00")
    body += encode_varlong(timestamp_delta)
    body += encode_varint(offset_delta)
    for part in (key, value):
        if part is None:
            body += encode_varint(-1)
        else:
            body += encode_varint(len(part)) + part
    body += encode_varint(len(headers))
    for hkey, hvalue in headers:
        hk = hkey.encode("utf-8")
        body += encode_varint(len(hk)) + hk
        body += encode_varint(-1) if hvalue is None else encode_varint(len(hvalue)) + hvalue
    return encode_varint(len(body)) + bytes(body)


def encode_batch(
    base_offset: int,
    records,
    *,
    partition_leader_epoch: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    control: bool = False,
    compression: int = 0,
    log_append_time: bool = False,
    last_offset_delta: int | None = None,
    base_timestamp: int | None = None,
    max_timestamp: int | None = None,
    delete_horizon: int | None = None,
) -> bytes:
    """records: iterable of (absolute offset, timestamp, key, value). Offsets may have gaps,
    as in a compacted batch; an empty list gives an empty batch (pass last_offset_delta)."""
    records = list(records)
    if base_timestamp is None:
        base_timestamp = records[0][1] if records else -1
    if delete_horizon is not None:
        base_timestamp = delete_horizon
    if max_timestamp is None:
        max_timestamp = max((r[1] for r in records), default=-1)
    if last_offset_delta is None:
        last_offset_delta = (records[-1][0] - base_offset) if records else 0
    payload = b"".join(encode_record(o - base_offset, ts - base_timestamp, k, v) for o, ts, k, v in records)
    payload = compress(compression, payload) if records else payload
    attributes = (
        (compression & 0x07)
        | (0x08 if log_append_time else 0)
        | (0x10 if transactional else 0)
        | (0x20 if control else 0)
        | (0x40 if delete_horizon is not None else 0)
    )
    body = (
        RECORD_BODY.pack(
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            len(records),
        )
        + payload
    )
    crc = _crc32c.crc32c(body)
    batch_length = 4 + 1 + 4 + len(body)  # leaderEpoch + magic + crc + body
    return struct.pack(">qiibI", base_offset, batch_length, partition_leader_epoch, 2, crc) + body


def encode_control_batch(
    offset: int,
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    timestamp: int,
    coordinator_epoch: int = 0,
    partition_leader_epoch: int = 0,
) -> bytes:
    key = struct.pack(">hh", 0, 1 if commit else 0)
    value = struct.pack(">hi", 0, coordinator_epoch)
    return encode_batch(
        offset,
        [(offset, timestamp, key, value)],
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=-1,
        transactional=True,
        control=True,
    )


def encode_legacy_message(
    offset: int, magic: int, key: bytes | None, value: bytes | None, timestamp: int = -1, attributes: int = 0
) -> bytes:
    body = bytearray(struct.pack(">bb", magic, attributes))
    if magic == 1:
        body += struct.pack(">q", timestamp)
    for part in (key, value):
        body += struct.pack(">i", -1) if part is None else struct.pack(">i", len(part)) + part
    crc = zlib.crc32(bytes(body))
    return struct.pack(">qiI", offset, 4 + len(body), crc) + bytes(body)


def encode_legacy_wrapper(
    messages, magic: int, codec: int, timestamp: int = -1, log_append_time: bool = False
) -> bytes:
    """messages: list of (absolute offset, timestamp, key, value). Magic 1 stores relative inner
    offsets and the wrapper carries the last absolute offset; magic 0 stores absolute offsets."""
    inner = bytearray()
    first = messages[0][0]
    for o, ts, k, v in messages:
        inner += encode_legacy_message(o - first if magic == 1 else o, magic, k, v, ts)
    attributes = codec | (0x08 if (log_append_time and magic == 1) else 0)
    return encode_legacy_message(messages[-1][0], magic, None, compress(codec, bytes(inner)), timestamp, attributes)
