"""The replay run: decode -> stage -> replay -> expire -> stage -> commit.

Everything that can fail on bad input (decoding, the group replay) runs while writing the
staging copies under WAREHOUSE/_staging/<run id>; only when all of them exist are the Delta
tables committed, one replaceWhere transaction per table, the checkpoints last. A bad input
therefore leaves every table as it was."""
from __future__ import annotations

import datetime as dt
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lib.delta_io import replace_partitions, table_path
from lib.logdir import PartitionLog
from lib.transform.decode import decode_segments, worker_error_from
from lib.transform.expiry import judge_groups, judge_offsets
from lib.transform.groups import replay_groups, topic_names_by_id
from lib.transform.offsets import replay_offsets
from schemas import tables as T


class ReplayError(Exception):
    """A run that stopped on bad input; the message names file, partition and offset."""


@dataclass
class RunResult:
    run_id: str
    partitions: list[int]
    now_ms: int
    retention_minutes: int
    stage_seconds: dict = field(default_factory=dict)
    records: int = 0


def _stage(df: DataFrame, path: str) -> None:
    df.write.mode("overwrite").parquet(path)


def _checkpoints(spark: SparkSession, logs: list[PartitionLog], summaries: list[dict], run_id: str):
    """One row per partition from the per-segment summaries: the log end is the next offset
    after the last batch of the last segment (or that segment's base offset if it is empty)."""
    rows = []
    finished = dt.datetime.now(dt.timezone.utc)
    by_partition: dict[int, list[dict]] = {}
    for s in summaries:
        by_partition.setdefault(s["offsets_partition"], []).append(s)
    for pl in logs:
        segs = sorted(by_partition.get(pl.partition, []), key=lambda s: s["base_offset"])
        next_offset = 0
        for s in segs:
            next_offset = max(next_offset, s["base_offset"], s["next_offset"] or 0)
        trailing = sum(s["trailing_bytes"] for s in segs)
        records = sum(s["records"] for s in segs)
        rows.append((pl.partition, int(next_offset), int(records), pl.high_watermark, int(trailing), run_id,
                     finished))
    return spark.createDataFrame(rows, T.REPLAY_CHECKPOINTS.ddl)


def run_replay(spark: SparkSession, logs: list[PartitionLog], warehouse: str, now_ms: int,
               retention_minutes: int = 10080) -> RunResult:
    run_id = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:8]
    partitions = [pl.partition for pl in logs]
    result = RunResult(run_id, partitions, now_ms, retention_minutes)
    staging = os.path.join(warehouse, "_staging", run_id)
    os.makedirs(warehouse, exist_ok=True)
    segments = [s for pl in logs for s in pl.segments]
    try:
        t0 = time.monotonic()
        log_path = os.path.join(staging, "offsets_log")
        try:
            summaries = decode_segments(spark, segments, log_path)
        except Exception as e:  # noqa: BLE001 - a Spark job failure carries the worker's error as text
            info = worker_error_from(e)
            if info is None:
                raise
            raise ReplayError(_describe_worker_error(info)) from None
        result.stage_seconds["decode"] = time.monotonic() - t0

        t0 = time.monotonic()
        log = spark.read.schema(T.OFFSETS_LOG.ddl).parquet(log_path)
        committed, pending = replay_offsets(log)

        def staged(df: DataFrame, name: str) -> DataFrame:
            """Write once, read back: later steps reuse the result instead of recomputing it."""
            path = os.path.join(staging, name)
            _stage(df, path)
            return spark.read.parquet(path)

        committed = staged(committed, "offsets_before_expiry")
        pending = staged(pending, T.PENDING_TRANSACTIONAL_OFFSETS.name)
        try:
            groups = staged(replay_groups(log, topic_names_by_id(log)), "groups_before_expiry")
        except Exception as e:  # noqa: BLE001
            info = worker_error_from(e)
            if info is None:
                raise
            raise ReplayError("group replay failed as Kafka's loader would: " + _describe_worker_error(info)) from None
        offsets = staged(judge_offsets(committed, groups, pending, now_ms, retention_minutes * 60_000),
                         "offsets_judged")
        judged_groups = staged(judge_groups(groups, offsets, pending), "groups_judged")
        for name, df in ((T.GROUP_OFFSETS.name, offsets.filter(~F.col("expired"))),
                         (T.EXPIRED_OFFSETS.name, offsets.filter(F.col("expired"))),
                         (T.CONSUMER_GROUPS.name, judged_groups.filter(~F.col("deleted"))),
                         (T.EXPIRED_GROUPS.name, judged_groups.filter(F.col("deleted")))):
            _stage(df.drop("expired", "deleted"), os.path.join(staging, name))
        result.records = sum(s["records"] for s in summaries)
        _stage(_checkpoints(spark, logs, summaries, run_id), os.path.join(staging, T.REPLAY_CHECKPOINTS.name))
        result.stage_seconds["replay"] = time.monotonic() - t0

        t0 = time.monotonic()
        for table in (T.OFFSETS_LOG, T.GROUP_OFFSETS, T.EXPIRED_OFFSETS, T.PENDING_TRANSACTIONAL_OFFSETS,
                      T.CONSUMER_GROUPS, T.EXPIRED_GROUPS, T.REPLAY_CHECKPOINTS):
            df = spark.read.schema(table.ddl).parquet(os.path.join(staging, table.name))
            replace_partitions(df, table_path(warehouse, table), table, partitions, run_id)
        result.stage_seconds["commit"] = time.monotonic() - t0
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        try:
            os.rmdir(os.path.join(warehouse, "_staging"))
        except OSError:
            pass
    return result


def _describe_worker_error(info: dict) -> str:
    where = []
    if info.get("file") is not None:
        where.append(f"file {info['file']}")
    if info.get("partition") is not None:
        where.append(f"partition {info['partition']}")
    if info.get("offset") is not None:
        where.append(f"log offset {info['offset']}")
    if info.get("position") is not None:
        where.append(f"byte position {info['position']}")
    return f"{info.get('kind', 'DecodeError')}: {info['message']} ({', '.join(where)})"


def summarize(spark: SparkSession, warehouse: str, partitions: list[int]) -> dict:
    """Small aggregates of the committed tables for the run's partitions (safe to collect)."""
    def t(name):
        return (spark.read.format("delta").load(table_path(warehouse, name))
                .filter(F.col("offsets_partition").isin(partitions)))
    return {
        "partitions": [r.asDict() for r in t("replay_checkpoints").orderBy("offsets_partition").collect()],
        "record_types": [r.asDict() for r in t("offsets_log").groupBy("record_type_name", "is_control")
                         .count().orderBy(F.desc("count")).collect()],
        "groups": [r.asDict() for r in t("consumer_groups")
                   .join(t("group_offsets").groupBy("group_id").agg(F.count("*").alias("offsets"),
                                                                    F.max("commit_timestamp").alias("last_commit")),
                         "group_id", "left")
                   .select("group_id", "group_type", "protocol_type", "state", "generation",
                           F.size("members").alias("members"), "offsets", "last_commit", "offsets_partition")
                   .orderBy("group_id").limit(50).collect()],
        "group_count": t("consumer_groups").count(),
        "offset_count": t("group_offsets").count(),
        "expired_offsets": [r.asDict() for r in t("expired_offsets").groupBy("group_id")
                            .agg(F.count("*").alias("offsets")).orderBy("group_id").limit(50).collect()],
        "expired_offset_count": t("expired_offsets").count(),
        "expired_groups": [r["group_id"] for r in t("expired_groups").orderBy("group_id").limit(50).collect()],
        "pending_count": t("pending_transactional_offsets").count(),
        "unknown_records": t("offsets_log").filter(F.col("decode_status") != "ok").count(),
    }
