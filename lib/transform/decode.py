"""Segments -> staged offsets_log Parquet files.

Python workers read the segment files themselves, decode them and write the rows straight to
Parquet under the run's staging folder; Spark gets back one small summary row per segment
(records, next offset, trailing bytes). No decoded row crosses the JVM/Python boundary: the
round trip costs more than the decoding, and Spark's Parquet reader is faster than both."""
from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql import types as T

from lib.logdir import Segment
from lib.worker_errors import ERROR_MARKER, worker_error, worker_error_from  # noqa: F401 - re-exported

SEGMENT_TASKS = T.StructType([
    T.StructField("offsets_partition", T.IntegerType(), False),
    T.StructField("base_offset", T.LongType(), False),
    T.StructField("path", T.StringType(), False),
    T.StructField("start_offset", T.LongType(), False),
    T.StructField("output", T.StringType(), False),
    T.StructField("quarantine_output", T.StringType(), True),
])
SEGMENT_SUMMARY = ("offsets_partition INT, base_offset BIGINT, records BIGINT, next_offset BIGINT, "
                   "trailing_bytes BIGINT, files INT, quarantined INT")


def _write_quarantine(rows: list | None, output: str | None) -> int:
    """Undecodable batches and records of one task -> one Parquet file (run_id filled later)."""
    if not rows:
        return 0
    import pyarrow as pa
    import pyarrow.parquet as pq

    from schemas.tables import QUARANTINED_RECORDS
    schema = QUARANTINED_RECORDS.arrow_schema
    full = [{**r, "run_id": ""} for r in rows]
    pq.write_table(pa.Table.from_pylist(full, schema=schema), output)
    return len(rows)


def decode_segment_to_parquet(path: str, partition: int, start_offset: int, output: str,
                              quarantine_output: str | None = None) -> dict:
    """Decode one segment into Parquet file(s) named after `output`; return its summary. With a
    `quarantine_output`, undecodable batches and records go there instead of failing the task."""
    import pyarrow.parquet as pq

    from lib.decode import SCHEMA, SegmentDecoder

    quarantine = [] if quarantine_output else None
    decoder = SegmentDecoder(path, partition, start_offset=start_offset, quarantine=quarantine)
    writer = None
    try:
        for batch in decoder:
            if writer is None:
                writer = pq.ParquetWriter(output, SCHEMA, compression="snappy")
            writer.write_batch(batch)
    finally:
        if writer is not None:
            writer.close()
    return {"records": decoder.records, "next_offset": decoder.next_offset, "trailing_bytes": decoder.trailing_bytes,
            "files": 0 if writer is None else 1, "quarantined": _write_quarantine(quarantine, quarantine_output)}


def fetch_partition_to_parquet(bootstrap: str, partition: int, start_offset: int, output: str,
                               end_offset: int | None = None, quarantine_output: str | None = None) -> dict:
    """Fetch one __consumer_offsets partition from `start_offset` to its high watermark (as it
    was when the task started, or `end_offset` if lower) and decode it into one Parquet file."""
    import pyarrow.parquet as pq

    from lib.decode import SCHEMA, SegmentDecoder
    from lib.live import OffsetsTopicReader

    reader = OffsetsTopicReader(bootstrap)
    quarantine = [] if quarantine_output else None
    writer = None
    records = 0
    offset = start_offset
    try:
        end = reader.end_offset(partition)
        if end_offset is not None and end_offset >= 0:
            end = min(end, end_offset)
        while offset < end:
            chunk = reader.fetch(partition, offset)
            where = f"{bootstrap} __consumer_offsets-{partition} fetched at offset {offset}"
            decoder = SegmentDecoder(where, partition, start_offset=offset, data=chunk.data,
                                     source_name=f"fetch:{offset}", quarantine=quarantine)
            for batch in decoder:
                batch = _below(batch, end)
                if batch.num_rows == 0:
                    continue
                if writer is None:
                    writer = pq.ParquetWriter(output, SCHEMA, compression="snappy")
                writer.write_batch(batch)
                records += batch.num_rows
            if decoder.next_offset is None or decoder.next_offset <= offset:
                break   # nothing more below the high watermark
            offset = min(decoder.next_offset, end)
    finally:
        if writer is not None:
            writer.close()
        reader.close()
    return {"records": records, "next_offset": offset, "trailing_bytes": 0, "files": 0 if writer is None else 1,
            "quarantined": _write_quarantine(quarantine, quarantine_output)}


def _below(batch, end: int):
    """The rows of an Arrow batch with log_offset < end."""
    import pyarrow.compute as pc
    return batch.filter(pc.less(batch.column("log_offset"), end))


def _decode_tasks(batches, end_offsets: dict | None = None):
    """mapInArrow body: each input row names one segment file to decode."""
    import pyarrow as pa

    from lib.codec.errors import DecodeError

    for tasks in batches:
        out = []
        for task in tasks.to_pylist():
            try:
                if task["path"].startswith("kafka://"):
                    summary = fetch_partition_to_parquet(task["path"][len("kafka://"):], task["offsets_partition"],
                                                         task["start_offset"], task["output"],
                                                         (end_offsets or {}).get(task["offsets_partition"]),
                                                         task["quarantine_output"])
                else:
                    summary = decode_segment_to_parquet(task["path"], task["offsets_partition"],
                                                        task["start_offset"], task["output"],
                                                        task["quarantine_output"])
            except DecodeError as e:
                raise worker_error(type(e).__name__, e.message, file=e.file, partition=e.partition,
                                   offset=e.offset, position=e.position) from None
            out.append({"offsets_partition": task["offsets_partition"], "base_offset": task["base_offset"],
                        **summary})
        yield pa.RecordBatch.from_pylist(out, schema=pa.schema([
            ("offsets_partition", pa.int32()), ("base_offset", pa.int64()), ("records", pa.int64()),
            ("next_offset", pa.int64()), ("trailing_bytes", pa.int64()), ("files", pa.int32()),
            ("quarantined", pa.int32())]))


def decode_segments(spark: SparkSession, segments: list[Segment], output_dir: str,
                    start_offsets: dict[int, int] | None = None, end_offsets: dict[int, int] | None = None,
                    quarantine_dir: str | None = None) -> list[dict]:
    """Decode `segments` (one Spark task each) into Parquet files under `output_dir`; returns
    one summary per segment: records, next_offset (None if the segment holds no batch),
    trailing_bytes, quarantined. Skips records below a partition's `start_offsets` entry.
    With a `quarantine_dir`, undecodable batches and records are written there instead of
    failing the run."""
    import os

    os.makedirs(output_dir, exist_ok=True)
    if quarantine_dir:
        os.makedirs(quarantine_dir, exist_ok=True)
    start_offsets = start_offsets or {}
    rows = [(s.partition, s.base_offset, s.path, int(start_offsets.get(s.partition, 0)),
             os.path.join(output_dir, f"p{s.partition:05d}-{s.base_offset:020d}.parquet"),
             os.path.join(quarantine_dir, f"p{s.partition:05d}-{s.base_offset:020d}.parquet")
             if quarantine_dir else None) for s in segments]
    # largest segments first, so the last task to finish is a small one
    rows.sort(key=lambda r: -(os.path.getsize(r[2]) if os.path.exists(r[2]) else 0))
    rdd = spark.sparkContext.parallelize(rows, max(1, len(rows)))
    tasks = spark.createDataFrame(rdd, SEGMENT_TASKS)
    ends = dict(end_offsets or {})
    return [r.asDict() for r in tasks.mapInArrow(lambda b: _decode_tasks(b, ends), SEGMENT_SUMMARY).collect()]
