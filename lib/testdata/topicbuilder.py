"""Builds the consumed topics' own partitions of a broker log dir, beside the
__consumer_offsets ones of `logbuilder`: folders `<topic>-<partition>/` with segment files
named by their base offset (rolled at a size or an age, as segment.bytes / segment.ms do),
`partition.metadata` and `leader-epoch-checkpoint` as the broker writes them, magic-2 batches
from idempotent, plain or transactional producers (COMMIT/ABORT markers), and a head deleted
by retention or DeleteRecords; `write_checkpoints` then writes the log dir's
replication-offset-checkpoint and log-start-offset-checkpoint.

`generate_topics` is the benchmark's bulk writer: millions of records in many partitions,
each batch framed from a payload compressed once per (codec, record count).

    log = TopicPartitionBuilder("orders", 0, topic_id=topic_id_for("orders"))
    log.append([(ts, key, value), ...], compression=CODEC_IDS["zstd"], producer=producer)
    log.end_txn(producer, True, ts)
    log.write(log_dir)
    write_checkpoints(log_dir)
"""

from __future__ import annotations

import base64
import hashlib
import os
import random
import re
import struct
import uuid
import zlib
from dataclasses import dataclass, field

import crc32c as _crc32c

from lib.codec.compression import CODEC_NAMES, compress
from lib.codec.segments import scan_segment_end
from lib.codec.writer import RECORD_BODY, encode_control_batch, encode_record
from lib.testdata.logbuilder import PartitionLogBuilder

CODEC_IDS = {name: codec for codec, name in CODEC_NAMES.items()}  # none 0, gzip 1, snappy 2, lz4 3, zstd 4
DEFAULT_SEGMENT_BYTES = 1 << 30  # log.segment.bytes
DEFAULT_SEGMENT_MS = 7 * 24 * 3600 * 1000  # log.roll.hours = 168
REPLICATION_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")
_SEGMENT_FILE = re.compile(r"^(\d{20})\.log$")


# --- names and small files ----------------------------------------------------------------------


def topic_id_for(name: str, seed: int = 0) -> str:
    """A topic id as Kafka's Uuid.randomUuid() makes one (a version-4 UUID, URL-safe base64
    without padding, never starting with '-'), drawn deterministically from the name."""
    n = 0
    while True:
        raw = hashlib.sha256(f"{seed}:{name}:{n}".encode()).digest()[:16]
        text = base64.urlsafe_b64encode(uuid.UUID(bytes=raw, version=4).bytes).decode("ascii").rstrip("=")
        if not text.startswith("-"):
            return text
        n += 1


def partition_metadata(topic_id: str) -> str:
    """partition.metadata as the broker writes it (PartitionMetadataFileFormatter): two
    lines, the second without a line end."""
    return f"version: 0\ntopic_id: {topic_id}"


def format_checkpoint(lines: list[str]) -> str:
    """The checkpoint file layout (CheckpointFile): version 0, the entry count, the entries."""
    return "".join(f"{line}\n" for line in ["0", str(len(lines)), *lines])


def write_offset_checkpoint(path: str, offsets: dict[tuple[str, int], int]) -> None:
    """replication-offset-checkpoint / log-start-offset-checkpoint: 'topic partition offset'
    lines (sorted here; a broker writes them in its map's order)."""
    entries = [f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())]
    with open(path, "w") as f:
        f.write(format_checkpoint(entries))


def write_partition_files(folder: str, topic_id: str, epochs: list[tuple[int, int]]) -> None:
    """partition.metadata and leader-epoch-checkpoint ('epoch startOffset' lines) of a
    partition folder."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "partition.metadata"), "w") as f:
        f.write(partition_metadata(topic_id))
    with open(os.path.join(folder, "leader-epoch-checkpoint"), "w") as f:
        f.write(format_checkpoint([f"{e} {o}" for e, o in epochs]))


def assign_epoch(epochs: list[tuple[int, int]], epoch: int, start_offset: int) -> None:
    """LeaderEpochFileCache.assign: a new leader epoch starting at the log end offset drops the
    entries it supersedes (same or later epoch, same or later start offset)."""
    epochs[:] = [(e, o) for e, o in epochs if e < epoch and o < start_offset]
    epochs.append((epoch, start_offset))


# --- batches ----------------------------------------------------------------------------------

_BATCH_HEAD = struct.Struct(">qiibI")  # baseOffset, batchLength, partitionLeaderEpoch, magic, crc


def compress_payload(codec: int, raw: bytes) -> bytes:
    """`lib.codec.compression.compress`, but gzip with modification time 0, as Java's
    GZIPOutputStream writes it (Python's gzip stamps the current time: the bytes would change
    from run to run)."""
    return zlib.compress(raw, level=9, wbits=31) if codec == 1 else compress(codec, raw)


def frame_batch(
    base_offset: int,
    payload: bytes,
    *,
    count: int,
    last_offset_delta: int,
    base_ts: int,
    max_ts: int,
    compression: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    leader_epoch: int = 0,
) -> bytes:
    """A magic-2 batch around records already encoded (and compressed): the header and its
    CRC-32C, as `lib.codec.writer.encode_batch` lays them out, without encoding the records."""
    attributes = (compression & 0x07) | (0x10 if transactional else 0)
    body = (
        RECORD_BODY.pack(
            attributes, last_offset_delta, base_ts, max_ts, producer_id, producer_epoch, base_sequence, count
        )
        + payload
    )
    return _BATCH_HEAD.pack(base_offset, 4 + 1 + 4 + len(body), leader_epoch, 2, _crc32c.crc32c(body)) + body


# --- producers ----------------------------------------------------------------------------------


@dataclass
class Producer:
    """A producer's identity in the batches it writes: producer id -1 for a plain one (no
    sequence numbers), otherwise an idempotent or transactional one whose base sequence counts
    its records per partition."""

    producer_id: int = -1
    epoch: int = -1
    transactional: bool = False
    sequences: dict = field(default_factory=dict)

    def next_sequence(self, tp, records: int) -> int:
        if self.producer_id < 0:
            return -1
        seq = self.sequences.get(tp, 0)
        self.sequences[tp] = (seq + records) % (1 << 31)
        return seq

    def bump_epoch(self) -> None:
        """A transactional producer's re-initialisation (InitProducerId): sequences start over."""
        self.epoch += 1
        self.sequences.clear()


PLAIN = Producer()


@dataclass(slots=True)
class BatchInfo:
    base_offset: int
    last_offset: int
    records: int
    first_ts: int
    max_ts: int
    control: bool = False
    transactional: bool = False
    producer_id: int = -1
    commit: bool | None = None  # the marker's outcome, for a control batch
    compression: int = 0

    @property
    def end_offset(self) -> int:
        return self.last_offset + 1


# --- one partition ----------------------------------------------------------------------------


class TopicPartitionBuilder(PartitionLogBuilder):
    """One partition of a consumed topic: appends batches in time order, rolls segments as the
    broker does (before an append that would pass segment.bytes, or whose max timestamp is
    segment.ms past the segment's first batch's), and writes the folder. `batches` keeps every
    batch appended, also those of segments later deleted. Append with `append` and `end_txn`:
    the coordinator-record helpers inherited from PartitionLogBuilder skip that bookkeeping."""

    def __init__(
        self,
        topic: str,
        partition: int,
        *,
        topic_id: str,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        segment_ms: int = DEFAULT_SEGMENT_MS,
        start_offset: int = 0,
        leader_epoch: int = 0,
    ):
        super().__init__(partition, start_offset=start_offset, leader_epoch=leader_epoch)
        self.topic = topic
        self.topic_id = topic_id
        self.segment_bytes = segment_bytes
        self.segment_ms = segment_ms
        self.epochs: list[tuple[int, int]] = [(leader_epoch, start_offset)]
        self.log_start_offset = start_offset
        self.batches: list[BatchInfo] = []
        # per segment: [first batch's max timestamp or None, largest timestamp]
        self._segment_times: list[list] = [[None, -1]]

    @property
    def folder_name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def end_offset(self) -> int:
        return self.next_offset

    def roll(self) -> TopicPartitionBuilder:
        super().roll()
        self._segment_times.append([None, -1])
        return self

    def set_leader_epoch(self, epoch: int) -> None:
        """A new leader epoch (leadership moved, e.g. across a broker restart)."""
        self.leader_epoch = epoch
        assign_epoch(self.epochs, epoch, self.next_offset)

    def _append(self, data: bytes, info: BatchInfo) -> BatchInfo:
        times = self._segment_times[-1]
        if self._current and (
            len(self._current) + len(data) > self.segment_bytes
            or (times[0] is not None and info.max_ts - times[0] > self.segment_ms)
        ):
            self.roll()
            times = self._segment_times[-1]
        if times[0] is None:
            times[0] = info.max_ts
        times[1] = max(times[1], info.max_ts)
        self.raw(data, info.last_offset - info.base_offset + 1)
        self.batches.append(info)
        return info

    def append(
        self, records: list[tuple[int, bytes | None, bytes | None]], *, compression: int = 0, producer: Producer = PLAIN
    ) -> BatchInfo:
        """One batch of records (timestamp, key, value), CreateTime, offsets from the log end."""
        base = self.next_offset
        base_ts = records[0][0]
        max_ts = max(r[0] for r in records)
        raw = b"".join(encode_record(i, ts - base_ts, k, v) for i, (ts, k, v) in enumerate(records))
        data = frame_batch(
            base,
            compress_payload(compression, raw),
            count=len(records),
            last_offset_delta=len(records) - 1,
            base_ts=base_ts,
            max_ts=max_ts,
            compression=compression,
            producer_id=producer.producer_id,
            producer_epoch=producer.epoch,
            base_sequence=producer.next_sequence((self.topic, self.partition), len(records)),
            transactional=producer.transactional,
            leader_epoch=self.leader_epoch,
        )
        info = BatchInfo(
            base,
            base + len(records) - 1,
            len(records),
            base_ts,
            max_ts,
            transactional=producer.transactional,
            producer_id=producer.producer_id,
            compression=compression,
        )
        return self._append(data, info)

    def end_txn(self, producer: Producer, commit: bool, ts: int, coordinator_epoch: int = 0) -> BatchInfo:
        """The COMMIT or ABORT marker the transaction coordinator writes (WriteTxnMarkers)."""
        offset = self.next_offset
        data = encode_control_batch(
            offset, producer.producer_id, producer.epoch, commit, ts, coordinator_epoch, self.leader_epoch
        )
        info = BatchInfo(offset, offset, 1, ts, ts, True, True, producer.producer_id, commit)
        return self._append(data, info)

    # -- deletion --------------------------------------------------------------------------------

    def delete_by_retention(self, now_ms: int, retention_ms: int) -> int:
        """Deletes the oldest segments whose largest timestamp is more than retention.ms before
        now (UnifiedLog.deleteRetentionMsBreachedSegments), never the active one; the log start
        offset becomes the first remaining segment's base offset. Returns the segments deleted."""
        deleted = 0
        while len(self.segments) > 1 and now_ms - self._segment_times[0][1] > retention_ms:
            self._drop_first_segment()
            deleted += 1
        self.log_start_offset = max(self.log_start_offset, self.segments[0][0])
        self._truncate_epochs()
        return deleted

    def delete_records(self, offset: int) -> None:
        """DeleteRecords (KIP-107): the log start offset moves to `offset`, inside a segment;
        segments wholly below it are deleted."""
        if not self.log_start_offset <= offset <= self.next_offset:
            raise ValueError(f"offset {offset} is outside {self.log_start_offset}..{self.next_offset}")
        self.log_start_offset = offset
        while len(self.segments) > 1 and self.segments[1][0] <= offset:
            self._drop_first_segment()
        self._truncate_epochs()

    def _drop_first_segment(self) -> None:
        del self.segments[0]
        del self._segment_times[0]

    def _truncate_epochs(self) -> None:
        """LeaderEpochFileCache.truncateFromStart: the entry in force at the log start begins there."""
        start = self.log_start_offset
        kept = [(e, o) for e, o in self.epochs if o > start]
        before = [(e, o) for e, o in self.epochs if o <= start]
        if before:
            kept.insert(0, (before[-1][0], start))
        self.epochs = kept

    # -- output ----------------------------------------------------------------------------------

    def write(self, log_dir: str) -> str:
        folder = os.path.join(log_dir, self.folder_name)
        os.makedirs(folder, exist_ok=True)
        for base, data in self.segments:
            with open(os.path.join(folder, f"{base:020d}.log"), "wb") as f:
                f.write(data)
        write_partition_files(folder, self.topic_id, self.epochs)
        return folder

    @property
    def size_bytes(self) -> int:
        return sum(len(data) for _, data in self.segments)


# --- the log dir's checkpoints --------------------------------------------------------------


def partition_folders(log_dir: str) -> dict[tuple[str, int], str]:
    """(topic, partition) -> folder, for every partition folder of a log dir the checkpoints
    cover: not those being deleted or moved ('-delete', '-future', '-stray' end their names),
    nor the KRaft metadata log (__cluster_metadata-0, not kept by the log manager)."""
    out = {}
    for name in sorted(os.listdir(log_dir)):
        m = _PARTITION_DIR.match(name)
        path = os.path.join(log_dir, name)
        if m and os.path.isdir(path) and m.group(1) != "__cluster_metadata":
            out[(m.group(1), int(m.group(2)))] = path
    return out


def segment_bases(folder: str) -> list[int]:
    return sorted(int(m.group(1)) for m in map(_SEGMENT_FILE.match, os.listdir(folder)) if m)


def log_end_offset(folder: str) -> int:
    """The next offset after the last complete entry of the newest segment (its base offset when
    it holds none), from entry headers only."""
    bases = segment_bases(folder)
    if not bases:
        return 0
    end, _ = scan_segment_end(os.path.join(folder, f"{bases[-1]:020d}.log"))
    return bases[-1] if end is None else end


def write_checkpoints(
    log_dir: str, log_start_offsets: dict[tuple[str, int], int] | None = None, *, all_log_starts: bool = False
) -> dict[tuple[str, int], tuple[int, int]]:
    """Writes replication-offset-checkpoint (every partition's high watermark: its log end
    offset, as on a single replica) and log-start-offset-checkpoint for every partition folder
    of the log dir. The log start offset is the first segment's base offset, or the one given
    (DeleteRecords). Like LogManager.checkpointLogStartOffsetsInDir, the second file lists only
    partitions whose log start offset is past their first segment's base offset (a head deleted
    by retention leaves none: its log start offset is the next segment's base offset), unless
    `all_log_starts`. Returns (topic, partition) -> (log start offset, high watermark)."""
    log_start_offsets = log_start_offsets or {}
    out = {}
    listed = {}
    for tp, folder in partition_folders(log_dir).items():
        bases = segment_bases(folder)
        first = bases[0] if bases else 0
        start = max(first, log_start_offsets.get(tp, first))
        out[tp] = (start, log_end_offset(folder))
        if all_log_starts or start > first:
            listed[tp] = start
    write_offset_checkpoint(os.path.join(log_dir, REPLICATION_CHECKPOINT), {tp: hw for tp, (_, hw) in out.items()})
    write_offset_checkpoint(os.path.join(log_dir, LOG_START_CHECKPOINT), listed)
    return out


# --- the bulk generator (benchmarks) ----------------------------------------------------------

BULK_SIZES = (1, 5, 40, 200, 500)  # records per batch: a quiet moment .. a full batch.size
BULK_WEIGHTS = (0.12, 0.18, 0.3, 0.3, 0.1)
BULK_CODECS = (0, 1, 2, 3, 4)
BULK_SPREAD_MS = 2  # record timestamp step inside a template batch


def _bulk_payload(codec: int, size: int, variant: int) -> bytes:
    """A batch's records (offset deltas 0..size-1, timestamp deltas 0, 2, 4 ms ..., no key, a
    value of a few bytes), compressed with `codec`: one per (codec, size, variant)."""
    rng = random.Random(f"{codec}:{size}:{variant}")
    raw = b"".join(encode_record(i, i * BULK_SPREAD_MS, None, b"%x" % rng.randrange(1 << 20)) for i in range(size))
    return compress_payload(codec, raw)


def generate_topics(
    log_dir: str,
    records: int,
    *,
    topics: int = 10,
    partitions_per_topic: int = 12,
    seed: int = 7,
    start_ts: int = 1_760_000_000_000,
    segment_bytes: int = 256 * 1024 * 1024,
    variants: int = 4,
) -> dict:
    """Writes about `records` records (whole batches) into topics `bulk-00`.. of
    `partitions_per_topic` partitions each, spread evenly, and the log dir's checkpoints.
    Every batch is a valid magic-2 batch (its own CRC-32C, lastOffsetDelta, record count,
    timestamps): the payloads, compressed once per (codec, size, variant), differ only in the
    headers framing them. Each topic has one codec (none, gzip, snappy, lz4, zstd in turn), and
    an idempotent producer. Deterministic for a seed. Returns the totals and, per partition,
    its records, batches, end offset and bytes."""
    rng = random.Random(seed)
    names = [f"bulk-{t:02d}" for t in range(topics)]
    codecs = [BULK_CODECS[t % len(BULK_CODECS)] for t in range(topics)]
    payloads = bulk_payloads(set(codecs), variants)
    total_partitions = topics * partitions_per_topic
    per_partition = max(1, records // total_partitions)
    parts: list[dict] = []
    for t, name in enumerate(names):
        codec = codecs[t]
        topic_id = topic_id_for(name, seed)
        for p in range(partitions_per_topic):
            ts = start_ts + rng.randrange(60_000)
            batches: list[tuple[int, int, int]] = []
            written = 0
            while written < per_partition:
                size = rng.choices(BULK_SIZES, BULK_WEIGHTS)[0]
                batches.append((size, rng.randrange(variants), ts))
                written += size
                ts += (size - 1) * BULK_SPREAD_MS + rng.randrange(1, 200)
            written_part = write_bulk_partition(
                os.path.join(log_dir, f"{name}-{p}"),
                topic_id,
                batches,
                codec=codec,
                payloads=payloads,
                producer_id=1000 + t * partitions_per_topic + p,
                segment_bytes=segment_bytes,
            )
            parts.append({"topic": name, "partition": p, "codec": CODEC_NAMES[codec], **written_part})
    write_checkpoints(log_dir)
    return {
        "records": sum(x["records"] for x in parts),
        "batches": sum(x["batches"] for x in parts),
        "bytes": sum(x["bytes"] for x in parts),
        "segments": sum(x["segments"] for x in parts),
        "topics": topics,
        "partition_count": total_partitions,
        "partitions": parts,
    }


def bulk_payloads(codecs, variants: int = 4) -> dict[tuple[int, int, int], bytes]:
    """The template payloads of `write_bulk_partition`: one per (codec, size of BULK_SIZES, variant)."""
    return {(c, s, v): _bulk_payload(c, s, v) for c in codecs for s in BULK_SIZES for v in range(variants)}


def write_bulk_partition(
    folder: str,
    topic_id: str,
    batches,
    *,
    codec: int,
    payloads: dict[tuple[int, int, int], bytes],
    producer_id: int,
    segment_bytes: int = 256 * 1024 * 1024,
) -> dict:
    """One partition folder of template batches: `batches` are (records, template variant, base
    timestamp) in offset order from offset 0, each framed around the payload of
    `payloads[(codec, records, variant)]` (records of BULK_SIZES; its timestamps run
    BULK_SPREAD_MS apart from the base one) for an idempotent producer (epoch 0, sequences from 0),
    segments rolled at `segment_bytes`; then partition.metadata and leader-epoch-checkpoint
    (epoch 0 from offset 0). Returns its records, batches, end offset, bytes and segments."""
    os.makedirs(folder, exist_ok=True)
    offset = sequence = 0
    chunks: list[bytes] = []
    seg_base, seg_size, size_total, segments, count = 0, 0, 0, 0, 0
    for size, variant, ts in batches:
        data = frame_batch(
            offset,
            payloads[(codec, size, variant)],
            count=size,
            last_offset_delta=size - 1,
            base_ts=ts,
            max_ts=ts + (size - 1) * BULK_SPREAD_MS,
            compression=codec,
            producer_id=producer_id,
            producer_epoch=0,
            base_sequence=sequence,
        )
        if seg_size and seg_size + len(data) > segment_bytes:
            _write_segment(folder, seg_base, chunks)
            segments += 1
            chunks, seg_base, seg_size = [], offset, 0
        chunks.append(data)
        seg_size += len(data)
        size_total += len(data)
        offset += size
        sequence = (sequence + size) % (1 << 31)
        count += 1
    _write_segment(folder, seg_base, chunks)
    segments += 1
    write_partition_files(folder, topic_id, [(0, 0)])
    return {"records": offset, "batches": count, "end_offset": offset, "bytes": size_total, "segments": segments}


def _write_segment(folder: str, base: int, chunks: list[bytes]) -> None:
    with open(os.path.join(folder, f"{base:020d}.log"), "wb") as f:
        f.write(b"".join(chunks))
