"""Segments -> offsets_log DataFrame. Python workers read the segment files themselves and
hand Spark whole Arrow batches: the only JVM/Python crossing is one per decoded batch."""
from __future__ import annotations

import json

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from lib.logdir import Segment
from schemas.tables import OFFSETS_LOG

# Marks a decode error inside a Python worker so the driver can show it without a traceback.
ERROR_MARKER = "OFFSETS_LAKE_DECODE_ERROR:"

SEGMENT_TASKS = T.StructType([
    T.StructField("offsets_partition", T.IntegerType(), False),
    T.StructField("path", T.StringType(), False),
    T.StructField("start_offset", T.LongType(), False),
])


def _decode_tasks(batches):
    """mapInArrow body: each input row names one segment file to decode."""
    from lib.codec.errors import DecodeError
    from lib.decode import SegmentDecoder

    for tasks in batches:
        for task in tasks.to_pylist():
            decoder = SegmentDecoder(task["path"], task["offsets_partition"], start_offset=task["start_offset"])
            try:
                yield from decoder
            except DecodeError as e:
                raise worker_error(type(e).__name__, e.message, file=e.file, partition=e.partition,
                                   offset=e.offset, position=e.position) from None


def worker_error(kind: str, message: str, **where) -> RuntimeError:
    """An exception whose text carries a machine-readable description through Spark."""
    payload = {"kind": kind, "message": message, **where}
    return RuntimeError(ERROR_MARKER + json.dumps(payload) + ERROR_MARKER)


def decode_segments(spark: SparkSession, segments: list[Segment], start_offsets: dict[int, int] | None = None
                    ) -> DataFrame:
    """One Spark task per segment. `start_offsets` skips records below a partition's offset."""
    start_offsets = start_offsets or {}
    rows = [(s.partition, s.path, int(start_offsets.get(s.partition, 0))) for s in segments]
    rdd = spark.sparkContext.parallelize(rows, max(1, len(rows)))
    tasks = spark.createDataFrame(rdd, SEGMENT_TASKS)
    return tasks.mapInArrow(_decode_tasks, OFFSETS_LOG.ddl)


def worker_error_from(exc: BaseException) -> dict | None:
    """The error a Python worker reported (see worker_error), found in a Spark exception's text."""
    text = str(exc)
    start = text.find(ERROR_MARKER)
    if start < 0:
        return None
    start += len(ERROR_MARKER)
    end = text.find(ERROR_MARKER, start)
    try:
        return json.loads(text[start:end])
    except ValueError:
        return None
