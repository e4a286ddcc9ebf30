"""The consumed topics' own partitions in a broker log dir: their end offsets over time, read
from batch headers only.

A broker's log dir holds, beside __consumer_offsets-<P>, a folder <topic>-<partition> per
partition it hosts, with the same segment format. The end offset of a partition after each
batch is the batch's last offset + 1, and the batch header says when: its max timestamp. So a
hop from entry header to entry header (the size field gives the next), with no CRC check and
no decompression, gives the partition's end offset over time at a small fraction of what
decoding its records costs (`make bench`: end_offsets_speedup). Only where the exact time of
one record is needed (the first record a group has not consumed) is its batch decoded
(`record_timestamps`).

What a header tells, per batch (magic 2; legacy entries below):
- end offset: baseOffset + lastOffsetDelta + 1, exact (also for a compacted batch);
- max timestamp: the largest record timestamp (LogAppendTime: the broker's append time);
- the timestamp of the record at baseOffset: baseTimestamp, when the batch was not compacted
  (record count = lastOffsetDelta + 1) and carries no delete horizon (then baseTimestamp is
  the first record's own), or the max timestamp for LogAppendTime (every record has it).
Legacy entries: an uncompressed message is one record (offset and timestamp exact); a
compressed wrapper's offset is its last inner message's and its timestamp (magic 1) the
largest inner one, so its first offset and first timestamp are unknown (-1) without
decompressing; magic 0 has no timestamps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from lib.codec.errors import CorruptBatchError
from lib.codec.segments import SegmentReader, read_segment_bytes
from lib.decode.numba_bytes import i32, i64
from lib.numba_cache import use_stable_zip_cache
from lib.source.logdir import Segment
from lib.source.topic_log import ScanStart, TopicPartitionLog, listed_again, scan_plan

use_stable_zip_cache(__file__)  # before the first @njit(cache=True): see lib.numba_cache

TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime", "NoTimestamp")  # codes 0, 1, 2 of the scan

# --- the header hop ---------------------------------------------------------------------------

OK, TOO_SMALL, BAD_MAGIC, BACKWARDS = 0, 1, 2, 3
_FIELDS = 9  # per entry: position, first offset, end offset, first ts, max ts, ts type, control, size, producer


@njit(cache=True, nogil=True)
def _hop(b, skip_below, out):
    """Entry headers of one segment's bytes -> out[i, :] per entry at or above `skip_below`
    (an entry that ends below it is stepped over). Returns (entries, stop position, status,
    status position): status OK with the stop position at the first partial entry (trailing
    bytes), or an error at the status position."""
    n = len(b)
    pos = 0
    count = 0
    last_end = -1
    while n - pos >= 17:
        base = i64(b, pos)
        size = i32(b, pos + 8)
        if size < 14:
            return count, pos, TOO_SMALL, pos
        if pos + 12 + size > n:
            break
        magic = b[pos + 16]
        first_ts = -1
        max_ts = -1
        ts_type = 2
        control = 0
        producer = -1
        if magic == 2:
            if size < 49:
                return count, pos, TOO_SMALL, pos
            attributes = (b[pos + 21] << 8) | b[pos + 22]
            last_delta = i32(b, pos + 23)
            base_ts = i64(b, pos + 27)
            max_ts = i64(b, pos + 35)
            producer = i64(b, pos + 43)
            records = i32(b, pos + 57)
            first = base
            end = base + last_delta + 1
            ts_type = (attributes >> 3) & 1
            control = (attributes >> 5) & 1
            if ts_type == 1:
                first_ts = max_ts
            elif records == last_delta + 1 and (attributes & 0x40) == 0:
                first_ts = base_ts
        elif magic == 0 or magic == 1:
            attributes = b[pos + 17]
            end = base + 1
            compressed = (attributes & 0x07) != 0
            first = -1 if compressed else base
            if magic == 1:
                max_ts = i64(b, pos + 18)
                ts_type = (attributes >> 3) & 1
                if not compressed or ts_type == 1:
                    first_ts = max_ts
        else:
            return count, pos, BAD_MAGIC, pos
        if end <= last_end:
            return count, pos, BACKWARDS, pos
        last_end = end
        if end > skip_below:
            out[count, 0] = pos
            out[count, 1] = first
            out[count, 2] = end
            out[count, 3] = first_ts
            out[count, 4] = max_ts
            out[count, 5] = ts_type
            out[count, 6] = control
            out[count, 7] = 12 + size
            out[count, 8] = producer
            count += 1
        pos += 12 + size
    return count, pos, OK, pos


def kernel_compiled() -> bool:
    """Whether this process compiled the header kernel (rather than loading numba's cache)."""
    return bool(sum(_hop.stats.cache_misses.values()))


@dataclass
class SegmentScan:
    """The entries of one segment from a byte position on: one row per batch (numpy columns),
    positions absolute in the file."""

    segment: Segment
    position: np.ndarray
    first_offset: np.ndarray  # -1: unknown (a legacy compressed wrapper)
    end_offset: np.ndarray
    first_timestamp: np.ndarray  # -1: unknown from the header
    max_timestamp: np.ndarray  # -1: none (magic 0)
    timestamp_type: np.ndarray  # 0 CreateTime, 1 LogAppendTime, 2 none
    is_control: np.ndarray
    size: np.ndarray
    producer_id: np.ndarray
    next_position: int  # after the last complete entry
    trailing_bytes: int

    def __len__(self) -> int:
        return len(self.end_offset)


def scan_segment(segment: Segment, start_position: int = 0, skip_below: int = 0, topic: str = "") -> SegmentScan:
    """Hop over the entry headers of `segment` from `start_position` (a batch boundary). Raises
    CorruptBatchError naming the file and byte position where framing fails: an entry size
    below the minimum, an unknown magic, or offsets that go backwards."""
    buf = read_segment_bytes(segment.path, start_position)
    data = np.frombuffer(buf, dtype=np.uint8) if len(buf) else np.zeros(0, dtype=np.uint8)
    # an upper bound on the entries: the smallest entry is 26 bytes (magic 0, no key or value)
    out = np.empty((len(data) // 26 + 1, _FIELDS), dtype=np.int64)
    count, stop, status, at = _hop(data, skip_below, out)
    if status != OK:
        what = {
            TOO_SMALL: "entry size below the minimum (not a record batch)",
            BAD_MAGIC: f"unknown magic byte {int(data[at + 16]) if at + 16 < len(data) else '?'}",
            BACKWARDS: "offsets go backwards",
        }[int(status)]
        raise CorruptBatchError(
            f"{what} in {topic}-{segment.partition}",
            file=segment.path,
            partition=segment.partition,
            offset=None,
            position=start_position + int(at),
        )
    rows = out[:count]
    trailing = len(data) - int(stop)
    del data
    if hasattr(buf, "close"):
        buf.close()
    return SegmentScan(
        segment,
        rows[:, 0] + start_position,
        rows[:, 1].copy(),
        rows[:, 2].copy(),
        rows[:, 3].copy(),
        rows[:, 4].copy(),
        rows[:, 5].astype(np.int8),
        rows[:, 6].astype(bool),
        rows[:, 7].copy(),
        rows[:, 8].copy(),
        start_position + int(stop),
        trailing,
    )


RELISTINGS = 3  # fresh listings of a partition whose segments go while it is scanned


def scan_partition(log: TopicPartitionLog, start: ScanStart | None = None) -> list[SegmentScan]:
    """The batches of a consumed partition from its checkpoint on, segment by segment, as
    `scan_plan` lays them out. A broker's live log dir changes under a run: retention renames a
    segment to .deleted, the log cleaner merges segments into the first one and deletes the
    others. A listed segment gone when it is read restarts the scan from the checkpoint on a
    fresh listing of the folder (what a run started then would read; batches read from a file
    before it was replaced are not mixed with its replacement's)."""
    next_offset = 0 if start is None else start.next_offset
    for attempt in range(RELISTINGS + 1):
        try:
            return [scan_segment(seg, position, next_offset, log.topic) for seg, position in scan_plan(log, start)]
        except FileNotFoundError:
            if attempt == RELISTINGS:
                raise
            log = listed_again(log)
    raise AssertionError("unreachable")


# --- exact record timestamps ---------------------------------------------------------------


def record_timestamps(segment_path: str, lookups: list[tuple[int, int]], partition: int | None = None) -> list:
    """For each (byte position of a batch, offset): the timestamp of the first record of that
    batch at or after the offset (the first record a consumer at that offset has not read), or
    None when the batch holds none (magic 0, or every record below it). Decodes only those
    batches (CRC checked, decompressed), each once."""
    if not lookups:
        return []
    buf = read_segment_bytes(segment_path)
    out: list = []
    cache: dict[int, list] = {}
    try:
        for position, offset in lookups:
            records = cache.get(position)
            if records is None:
                size = int.from_bytes(bytes(buf[position + 8 : position + 12]), "big", signed=True) + 12
                (batch,) = list(SegmentReader(buf[position : position + size], file=segment_path, partition=partition))
                records = [(r[0], r[1]) for r in batch.records]
                cache[position] = records
            ts = next((t for o, t in records if o >= offset), None)
            out.append(None if ts is None or ts < 0 else ts)
    finally:
        if hasattr(buf, "close"):
            try:
                buf.close()
            except BufferError:
                pass
    return out
