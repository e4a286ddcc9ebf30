"""The lag stage's Spark tasks, JVM-free: scan consumed topic partitions' batch headers into
partition_end_offsets files, and look up the timestamps of the first unconsumed records.

Like the replay's tasks, a scan task writes its rows as Parquet files into the table's folder,
invisible until the driver commits them (lib.spark.lag), and returns the files and where each
partition's scan stopped (its next checkpoint)."""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa

from lib import storage
from lib.codec.errors import DecodeError
from lib.lake.partition_task import _FileWriter
from lib.lake.worker_errors import worker_error
from lib.source.logdir import Segment
from lib.source.topic_log import TopicPartitionLog
from lib.source.topic_scan import TIMESTAMP_TYPES, ScanStart, record_timestamps, scan_partition
from schemas import tables as T

_TS_TYPES = np.array(TIMESTAMP_TYPES, dtype=object)


def _timestamps(ms: np.ndarray) -> pa.Array:
    """Epoch ms -> TIMESTAMP (us, UTC); negative (none or unknown) -> null."""
    return pa.array(ms * 1000, type=pa.timestamp("us", tz="UTC"), mask=ms < 0)


def scan_task(task: dict) -> dict:
    """task keys: warehouse, run_id, object_store, partitions [{topic, partition, path, topic_id,
    segments [(path, base_offset, size)], start {next_offset, segment_base_offset,
    next_byte_position} or None, at_ms}]. Returns {"files": [...], "checkpoints": [...],
    "batches": n, "seconds": s}."""
    storage.configure(task.get("object_store"))
    started = time.thread_time()
    writer = _FileWriter(task["warehouse"], T.PARTITION_END_OFFSETS, None, task["run_id"])
    checkpoints = []
    batches = 0
    for tp in task["partitions"]:
        log = TopicPartitionLog(
            tp["topic"],
            tp["partition"],
            tp["path"],
            [Segment(tp["partition"], base, path, size) for path, base, size in tp["segments"]],
            tp.get("topic_id"),
        )
        start = ScanStart(**tp["start"]) if tp.get("start") else None
        try:
            scans = scan_partition(log, start)
        except DecodeError as e:
            raise worker_error(
                type(e).__name__,
                e.message,
                file=e.file,
                partition=e.partition,
                offset=e.offset,
                position=e.position,
                topic=tp["topic"],
            ) from None
        at_ms = tp.get("at_ms")
        running = -1 if at_ms is None else int(at_ms)
        checkpoint = {
            "topic": tp["topic"],
            "partition": tp["partition"],
            "next_offset": start.next_offset if start else 0,
            "topic_id": tp.get("topic_id"),
            "segment_base_offset": start.segment_base_offset if start else None,
            "next_byte_position": start.next_byte_position if start else None,
            "trailing_bytes": 0,
            "at_ms": at_ms,
            "source_signature": tp.get("source_signature"),
        }
        for scan in scans:
            n = len(scan)
            checkpoint["segment_base_offset"] = scan.segment.base_offset
            checkpoint["next_byte_position"] = scan.next_position
            checkpoint["trailing_bytes"] = scan.trailing_bytes
            if n == 0:
                continue
            batches += n
            # end offsets never go back in time: `at` is the largest max timestamp so far
            at = np.maximum.accumulate(np.maximum(scan.max_timestamp, running))
            running = int(at[-1])
            checkpoint["next_offset"] = int(scan.end_offset[-1])
            checkpoint["at_ms"] = running if running >= 0 else None
            writer.write(
                pa.table(
                    {
                        "topic": pa.array([tp["topic"]] * n, pa.string()),
                        "partition": pa.array(np.full(n, tp["partition"], dtype=np.int32)),
                        "end_offset": pa.array(scan.end_offset),
                        "at": _timestamps(at),
                        "source": pa.array(["segment"] * n, pa.string()),
                        "topic_id": pa.array([tp.get("topic_id")] * n, pa.string()),
                        "first_offset": pa.array(scan.first_offset, mask=scan.first_offset < 0),
                        "first_timestamp": _timestamps(scan.first_timestamp),
                        "max_timestamp": _timestamps(scan.max_timestamp),
                        "timestamp_type": pa.array(_TS_TYPES[scan.timestamp_type], pa.string()),
                        "is_control": pa.array(scan.is_control),
                        "segment_file": pa.array([storage.basename(scan.segment.path)] * n, pa.string()),
                        "byte_position": pa.array(scan.position),
                        "run_id": pa.array([task["run_id"]] * n, pa.string()),
                    },
                    schema=T.PARTITION_END_OFFSETS.arrow_schema,
                )
            )
        checkpoints.append(checkpoint)
    writer.close()
    return {
        "files": writer.files,
        "checkpoints": checkpoints,
        "batches": batches,
        "seconds": time.thread_time() - started,
    }


def lookup_task(task: dict) -> list[tuple]:
    """task keys: object_store, lookups [(topic, partition, segment path, byte position,
    offset)], sorted by file. Returns [(topic, partition, offset, timestamp ms or None)]: the
    timestamp of the first record at or after each offset in that batch."""
    storage.configure(task.get("object_store"))
    out: list[tuple] = []
    by_file: dict[str, list[tuple]] = {}
    for lookup in task["lookups"]:
        by_file.setdefault(lookup[2], []).append(lookup)
    for path, lookups in by_file.items():
        try:
            found = record_timestamps(path, [(int(lk[3]), int(lk[4])) for lk in lookups], lookups[0][1])
        except DecodeError as e:
            raise worker_error(
                type(e).__name__, e.message, file=path, partition=lookups[0][1], offset=e.offset, position=e.position
            ) from None
        out.extend((lk[0], lk[1], lk[4], ts) for lk, ts in zip(lookups, found))
    return out
