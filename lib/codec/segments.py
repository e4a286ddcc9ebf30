"""Log segment files -> batches -> records (spec 1.2-1.8).

The reader follows Kafka's FileLogInputStream: entries are [offset int64][size int32][...],
dispatched on the magic byte at position 16. A partial entry at the end of a file is a write
that never finished: it ends the segment and is reported as trailing bytes, not an error.
Every other inconsistency raises CorruptBatchError naming the file, partition and offset.
"""

from __future__ import annotations

import mmap
import struct
import zlib
from dataclasses import dataclass, field

import crc32c as _crc32c

from lib.codec.compression import decompress
from lib.codec.errors import CorruptBatchError, DecodeError
from lib.codec.primitives import Reader, read_uvarint, zigzag

LOG_OVERHEAD = 12
HEADER_SIZE_UP_TO_MAGIC = 17
RECORD_BATCH_OVERHEAD = 61
RECORD_OVERHEAD_V0 = 14
RECORD_OVERHEAD_V1 = 22
NO_TIMESTAMP = -1
# Offsets are int64 and a log's next offset must be one too: records sit at 0 .. 2^63-2.
MAX_RECORD_OFFSET = 2**63 - 2

_ENTRY_HEAD = struct.Struct(">qi")
_ZEROS = bytes(1 << 20)


def is_zero_padding(buf, start: int, end: int) -> bool:
    """Whether buf[start:end] is all zero bytes: the unused end of a segment file a broker
    preallocated (log.preallocate=true, or the topic's preallocate) and did not trim, as after a crash."""
    view = memoryview(buf)
    for at in range(start, end, len(_ZEROS)):
        stop = min(end, at + len(_ZEROS))
        if view[at:stop] != _ZEROS[: stop - at]:
            return False
    return True


# attributes, lastOffsetDelta, baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, count
_BATCH_BODY = struct.Struct(">hiqqqhii")
_BATCH_PREFIX = struct.Struct(">qiibI")  # baseOffset, length, leaderEpoch, magic, crc
_LEGACY_HEAD = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")


@dataclass(slots=True)
class Batch:
    """One magic-2 record batch, or one legacy (magic 0/1) entry with its inner messages."""

    position: int
    size: int
    magic: int
    base_offset: int
    last_offset: int
    partition_leader_epoch: int
    crc: int
    attributes: int
    compression: int
    timestamp_type: int  # 0 CreateTime, 1 LogAppendTime, -1 none (magic 0)
    is_transactional: bool
    is_control: bool
    has_delete_horizon: bool
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    # (absolute offset, timestamp, key bytes or None, value bytes or None)
    records: list = field(default_factory=list)

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1


class SegmentReader:
    """Iterates the batches of one segment's bytes. After iteration, `trailing_bytes` holds
    the size of a partial entry at the end (0 if the file ended cleanly)."""

    def __init__(
        self,
        buf,
        *,
        file: str | None = None,
        partition: int | None = None,
        verify_crc: bool = True,
        skip_below: int = 0,
        on_corrupt=None,
    ):
        """`skip_below`: magic-2 batches that end below this offset are stepped over on their
        header alone (no CRC check, no decompression, no records): an incremental read.
        `on_corrupt(error, raw_entry_bytes)`: instead of raising on a corrupt batch, hand it
        over and go on with the next entry, whose position the entry's length gives; if that
        length itself is impossible nothing after it can be framed: the rest is handed over
        and the read stops (`unreadable_bytes`)."""
        self.buf = buf
        self.file = file
        self.partition = partition
        self.verify_crc = verify_crc
        self.skip_below = skip_below
        self.last_skipped_offset: int | None = None
        self.trailing_bytes = 0
        self.on_corrupt = on_corrupt
        self.unreadable_bytes = 0

    def _corrupt(self, message: str, offset: int | None, position: int) -> CorruptBatchError:
        return CorruptBatchError(message, file=self.file, partition=self.partition, offset=offset, position=position)

    def __iter__(self):
        buf = self.buf
        end = len(buf)
        pos = 0
        while end - pos >= HEADER_SIZE_UP_TO_MAGIC:
            offset, size = _ENTRY_HEAD.unpack_from(buf, pos)
            if size < RECORD_OVERHEAD_V0:
                # Kafka's log recovery truncates a segment at its first invalid entry: the zeros
                # of a preallocated file's unwritten end are a tail, like a partial batch. Zeros
                # followed by data are not: the run stops there, naming the position.
                if is_zero_padding(buf, pos, end):
                    break
                message = f"entry size {size} is smaller than the minimum {RECORD_OVERHEAD_V0}"
                if offset == 0 and size == 0:
                    rest = bytes(buf[pos:end])
                    zeros = len(rest) - len(rest.lstrip(b"\0"))
                    message += f" ({zeros} zero bytes, then data: not a preallocated file's unused end)"
                err = self._corrupt(message, offset, pos)
                if self.on_corrupt is None:
                    raise err
                self.on_corrupt(err, bytes(buf[pos:end]))
                self.unreadable_bytes = self.trailing_bytes = end - pos
                return
            if pos + LOG_OVERHEAD + size > end:
                break
            magic = buf[pos + 16]
            if magic == 2 and self.skip_below and size >= RECORD_BATCH_OVERHEAD - LOG_OVERHEAD:
                last = offset + _I32.unpack_from(buf, pos + 23)[0]
                if last < self.skip_below:
                    self.last_skipped_offset = last
                    pos += LOG_OVERHEAD + size
                    continue
            try:
                if magic == 2:
                    batch = self._read_v2(pos, size)
                elif magic in (0, 1):
                    batch = self._read_legacy(pos, size, offset)
                else:
                    raise self._corrupt(f"unknown magic byte {magic}", offset, pos)
            except DecodeError as e:
                if not isinstance(e, CorruptBatchError):
                    e = CorruptBatchError(
                        e.message,
                        file=self.file,
                        partition=self.partition,
                        offset=e.offset if e.offset is not None else offset,
                        position=pos,
                    )
                if self.on_corrupt is None:
                    raise e from None
                self.on_corrupt(e, bytes(buf[pos : pos + LOG_OVERHEAD + size]))
                pos += LOG_OVERHEAD + size
                continue
            yield batch
            pos += LOG_OVERHEAD + size
        self.trailing_bytes = end - pos

    # --- magic 2 --------------------------------------------------------------------------
    def _read_v2(self, pos: int, size: int) -> Batch:
        buf = self.buf
        total = LOG_OVERHEAD + size
        base_offset, _, leader_epoch, magic, crc = _BATCH_PREFIX.unpack_from(buf, pos)
        if total < RECORD_BATCH_OVERHEAD:
            raise self._corrupt(
                f"record batch size {total} is smaller than the minimum {RECORD_BATCH_OVERHEAD}", base_offset, pos
            )
        if self.verify_crc:
            actual = _crc32c.crc32c(buf[pos + 21 : pos + total])
            if actual != crc:
                raise self._corrupt(f"CRC-32C mismatch: stored {crc}, computed {actual}", base_offset, pos)
        (attributes, last_delta, base_ts, max_ts, producer_id, producer_epoch, base_sequence, count) = (
            _BATCH_BODY.unpack_from(buf, pos + 21)
        )
        if count < 0:
            raise self._corrupt(f"negative record count {count}", base_offset, pos)
        if last_delta < 0:
            raise self._corrupt(f"negative lastOffsetDelta {last_delta}", base_offset, pos)
        if base_offset < 0 or base_offset + last_delta > MAX_RECORD_OFFSET:
            raise self._corrupt(
                f"batch offsets {base_offset}..{base_offset + last_delta} are outside 0..{MAX_RECORD_OFFSET}",
                base_offset,
                pos,
            )
        codec = attributes & 0x07
        ts_type = (attributes >> 3) & 1
        batch = Batch(
            pos,
            total,
            2,
            base_offset,
            base_offset + last_delta,
            leader_epoch,
            crc,
            attributes,
            codec,
            ts_type,
            bool(attributes & 0x10),
            bool(attributes & 0x20),
            bool(attributes & 0x40),
            base_ts,
            max_ts,
            producer_id,
            producer_epoch,
            base_sequence,
        )
        if count == 0:
            return batch
        if codec == 0:
            data, start, stop = buf, pos + RECORD_BATCH_OVERHEAD, pos + total
        else:
            data = decompress(codec, buf[pos + RECORD_BATCH_OVERHEAD : pos + total], 2)
            start, stop = 0, len(data)
        log_append = ts_type == 1
        batch.records = _parse_v2_records(
            data, start, stop, count, base_offset, last_delta, base_ts, max_ts if log_append else None
        )
        return batch

    # --- magic 0/1 ---------------------------------------------------------------------------
    def _read_legacy(self, pos: int, size: int, entry_offset: int) -> Batch:
        buf = self.buf
        total = LOG_OVERHEAD + size
        offset, _, crc, magic, attributes = _LEGACY_HEAD.unpack_from(buf, pos)
        min_size = RECORD_OVERHEAD_V0 if magic == 0 else RECORD_OVERHEAD_V1
        if size < min_size:
            raise self._corrupt(
                f"magic {magic} message size {size} is smaller than the minimum {min_size}", offset, pos
            )
        if self.verify_crc:
            actual = zlib.crc32(buf[pos + 16 : pos + total])
            if actual != crc:
                raise self._corrupt(f"CRC-32 mismatch: stored {crc}, computed {actual}", offset, pos)
        codec = attributes & 0x07
        ts_type = ((attributes >> 3) & 1) if magic == 1 else -1
        timestamp, key, value = _legacy_body(buf, pos + 18, pos + total, magic)
        batch = Batch(
            pos,
            total,
            magic,
            offset,
            offset,
            -1,
            crc,
            attributes,
            codec,
            ts_type,
            False,
            False,
            False,
            timestamp,
            timestamp,
            -1,
            -1,
            -1,
        )
        if codec == 0:
            if not 0 <= offset <= MAX_RECORD_OFFSET:
                raise self._corrupt(f"message offset {offset} is outside 0..{MAX_RECORD_OFFSET}", offset, pos)
            batch.records = [(offset, timestamp, key, value)]
            return batch
        if value is None:
            raise self._corrupt("compressed wrapper message has a null value", offset, pos)
        inner = decompress(codec, value, magic)
        records = []
        ipos, iend = 0, len(inner)
        while iend - ipos >= LOG_OVERHEAD:
            inner_offset, inner_size = _ENTRY_HEAD.unpack_from(inner, ipos)
            if inner_size < RECORD_OVERHEAD_V0 or ipos + LOG_OVERHEAD + inner_size > iend:
                raise self._corrupt(f"inner message of size {inner_size} does not fit its wrapper", offset, pos)
            _, _, inner_crc, inner_magic, inner_attr = _LEGACY_HEAD.unpack_from(inner, ipos)
            if self.verify_crc:
                actual = zlib.crc32(inner[ipos + 16 : ipos + LOG_OVERHEAD + inner_size])
                if actual != inner_crc:
                    raise self._corrupt(
                        f"CRC-32 mismatch in inner message: stored {inner_crc}, computed {actual}", offset, pos
                    )
            if inner_attr & 0x07:
                raise self._corrupt("compressed message nested inside a compressed wrapper", offset, pos)
            its, ikey, ivalue = _legacy_body(inner, ipos + 18, ipos + LOG_OVERHEAD + inner_size, inner_magic)
            if magic == 1 and ts_type == 1:
                its = timestamp
            records.append([inner_offset, its, ikey, ivalue])
            ipos += LOG_OVERHEAD + inner_size
        if ipos != iend:
            raise self._corrupt(f"{iend - ipos} stray bytes after the inner messages", offset, pos)
        if not records:
            raise self._corrupt("compressed wrapper holds no messages", offset, pos)
        if magic == 1 and offset != 0:
            # inner offsets are relative; the wrapper carries the absolute offset of the last one
            base = offset - records[-1][0]
            for rec in records:
                rec[0] += base
        if not all(0 <= rec[0] <= MAX_RECORD_OFFSET for rec in records):
            raise self._corrupt(
                f"inner message offsets {records[0][0]}..{records[-1][0]} are outside 0..{MAX_RECORD_OFFSET}",
                offset,
                pos,
            )
        batch.records = [tuple(rec) for rec in records]
        batch.base_offset = batch.records[0][0]
        batch.last_offset = batch.records[-1][0]
        return batch


def _legacy_body(buf, pos: int, end: int, magic: int):
    timestamp = NO_TIMESTAMP
    if magic == 1:
        timestamp = _I64.unpack_from(buf, pos)[0]
        pos += 8
    key, pos = _legacy_bytes(buf, pos, end, "key")
    value, pos = _legacy_bytes(buf, pos, end, "value")
    if pos != end:
        raise DecodeError(f"{end - pos} stray bytes after a magic {magic} message")
    return timestamp, key, value


def _legacy_bytes(buf, pos: int, end: int, what: str):
    if pos + 4 > end:
        raise DecodeError(f"truncated {what} length")
    (n,) = _I32.unpack_from(buf, pos)
    pos += 4
    if n < 0:
        return None, pos
    if pos + n > end:
        raise DecodeError(f"{what} of {n} bytes runs past the end of its message")
    return bytes(buf[pos : pos + n]), pos + n


_KEY_LENGTH, _VALUE_LENGTH = "record key length", "record value length"
_RECORD_FIELDS = ("record offset delta", _KEY_LENGTH, _VALUE_LENGTH, "record header count")


def _parse_v2_records(
    buf, pos: int, end: int, count: int, base_offset: int, last_delta: int, base_ts: int, log_append_ts: int | None
) -> list:
    """DefaultRecord layout (spec 1.6)."""
    records: list = []
    append = records.append
    for _ in range(count):
        v, pos = read_uvarint(buf, pos, end, 5, "record length")
        length = zigzag(v)
        body_start = pos
        body_end = pos + length
        if length < 0 or body_end > end:
            raise DecodeError(f"record length {length} runs past the end of the batch")
        pos += 1  # attributes
        v, pos = read_uvarint(buf, pos, body_end, 10, "record timestamp delta")
        ts_delta = zigzag(v)
        # offsetDelta, keyLength, [key], valueLength, [value], headerCount
        vals: list = []
        for what in _RECORD_FIELDS:
            v, pos = read_uvarint(buf, pos, body_end, 5, what)
            n = zigzag(v)
            if what is _KEY_LENGTH or what is _VALUE_LENGTH:
                if n < 0:
                    vals.append(None)
                else:
                    if pos + n > body_end:
                        raise DecodeError(f"{what} {n} runs past the end of the record")
                    vals.append(bytes(buf[pos : pos + n]))
                    pos += n
            else:
                vals.append(n)
        offset_delta, key, value, header_count = vals
        if not 0 <= offset_delta <= last_delta:
            raise DecodeError(f"record offset delta {offset_delta} is outside the batch's 0..{last_delta}")
        if header_count < 0:
            raise DecodeError(f"negative header count {header_count}")
        if header_count:
            r = _skip_headers(buf, pos, body_end, header_count)
            pos = r
        if pos != body_end:
            raise DecodeError(f"record declared {length} bytes but used {pos - body_start}")
        append(
            (base_offset + offset_delta, log_append_ts if log_append_ts is not None else base_ts + ts_delta, key, value)
        )
    if pos != end:
        raise DecodeError(f"{end - pos} bytes left in the batch after its {count} records")
    return records


def _skip_headers(buf, pos: int, end: int, count: int) -> int:
    r = Reader(buf, pos, end)
    for _ in range(count):
        klen = r.varint()
        if klen < 0:
            raise DecodeError("negative header key length")
        r.raw(klen, "header key")
        vlen = r.varint()
        if vlen >= 0:
            r.raw(vlen, "header value")
    return r.pos


def read_segment_bytes(path: str, start: int = 0) -> bytes | memoryview | mmap.mmap:
    """The segment from byte `start` on: memory-mapped on local disk (zero-copy for
    uncompressed batches), one range read from an object store (lib.storage)."""
    from lib.storage import read_bytes

    return read_bytes(path, start)


def scan_segment_end(path: str) -> tuple[int | None, int]:
    """(next offset after the segment's last complete entry, trailing bytes) by hopping over
    entry headers only: no CRC check, no decompression. None when the segment has no entry."""
    buf = read_segment_bytes(path)
    end = len(buf)
    pos = 0
    next_offset = None
    while end - pos >= HEADER_SIZE_UP_TO_MAGIC:
        offset, size = _ENTRY_HEAD.unpack_from(buf, pos)
        if size < RECORD_OVERHEAD_V0 or pos + LOG_OVERHEAD + size > end:
            break
        if buf[pos + 16] == 2 and size >= RECORD_BATCH_OVERHEAD - LOG_OVERHEAD:
            next_offset = offset + _I32.unpack_from(buf, pos + 23)[0] + 1
        else:
            next_offset = offset + 1
        pos += LOG_OVERHEAD + size
    return next_offset, end - pos
