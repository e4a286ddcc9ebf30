"""The replay run: decode -> stage -> replay -> expire -> stage -> commit.

Everything that can fail on bad input (decoding, the group replay) runs while writing the
staging copies under WAREHOUSE/_staging/<run id>; only when all of them exist are the Delta
tables committed, one transaction per table, each naming the run and its checkpoint, and the
replay_checkpoints commit last: that commit is the run's commit point. A bad input therefore
leaves every table as it was; a run that dies between table commits is rolled back by the
next run (lib.delta_io.roll_back_incomplete_runs), which then redoes the work. One run at a
time writes a warehouse (lib.warehouse_lock)."""
from __future__ import annotations

import datetime as dt
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lib.delta_io import (append_new_records, insert_new_rows, merge_partitions, read_partitions, replace_partitions,
                          roll_back_incomplete_runs, run_tag, table_exists, table_path)
from lib.logdir import PartitionLog
from lib.warehouse_lock import WarehouseBusyError, WarehouseLock  # noqa: F401 - re-exported for jobs
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
    incremental: bool = False
    rolled_back: list = field(default_factory=list)
    on_corrupt: str = "fail"
    quarantined: int = 0
    took_over_lock: dict | None = None


def _stage(df: DataFrame, path: str) -> None:
    df.write.mode("overwrite").parquet(path)


def _checkpoints(logs: list[PartitionLog], summaries: list[dict], run_id: str,
                 start_offsets: dict[int, int]) -> list[tuple]:
    """One row per partition from the per-segment summaries: the log end is the next offset
    after the last batch of the last segment (or that segment's base offset if it is empty)."""
    rows = []
    finished = dt.datetime.now(dt.timezone.utc)
    by_partition: dict[int, list[dict]] = {}
    for s in summaries:
        by_partition.setdefault(s["offsets_partition"], []).append(s)
    for pl in logs:
        segs = sorted(by_partition.get(pl.partition, []), key=lambda s: s["base_offset"])
        next_offset = start_offsets.get(pl.partition, 0)
        for s in segs:
            next_offset = max(next_offset, s["base_offset"], s["next_offset"] or 0)
        trailing = sum(s["trailing_bytes"] for s in segs)
        records = sum(s["records"] for s in segs)
        rows.append((pl.partition, int(next_offset), int(records), pl.high_watermark, int(trailing), run_id,
                     finished))
    return rows


@dataclass
class PreviousRun:
    """Where the last completed runs left each partition (from replay_checkpoints)."""
    next_offsets: dict[int, int]
    runs: dict[str, list[int]]           # run id -> partitions whose checkpoint it wrote


def previous_run(spark: SparkSession, warehouse: str, partitions: list[int]) -> PreviousRun | None:
    path = table_path(warehouse, T.REPLAY_CHECKPOINTS)
    if not table_exists(spark, path):
        return None
    rows = (spark.read.format("delta").load(path).filter(F.col("offsets_partition").isin(partitions))
            .select("offsets_partition", "next_log_offset", "run_id").collect())
    if not rows:
        return None
    runs: dict[str, list[int]] = {}
    for r in rows:
        runs.setdefault(r["run_id"], []).append(r["offsets_partition"])
    return PreviousRun({r["offsets_partition"]: r["next_log_offset"] for r in rows}, runs)


def segments_from(log: PartitionLog, start: int) -> list:
    """The segments holding offsets >= start: all but those that end before it."""
    segs = log.segments
    if log.path.startswith("kafka://"):
        return segs
    keep = []
    for i, seg in enumerate(segs):
        nxt = segs[i + 1].base_offset if i + 1 < len(segs) else None
        if nxt is not None and nxt <= start:
            continue
        keep.append(seg)
    return keep


def _offset_events(committed: DataFrame | None, pending: DataFrame | None) -> DataFrame | None:
    """The previous run's state as offsets_log-shaped events: committed offsets (before expiry)
    as non-transactional commits and pending ones as transactional commits, each at the log
    offset of the record that set it, so the replay's maximum rule applies unchanged."""
    parts = []
    base = {"is_control": F.lit(False), "control_type": F.lit(None).cast("string"),
            "record_type": F.lit(1).cast("smallint"), "decode_status": F.lit("ok"),
            "is_tombstone": F.lit(False)}
    if committed is not None:
        parts.append(committed.select("offsets_partition", "log_offset", F.lit(-1).cast("bigint").alias("producer_id"),
                                      "group_id", "topic", "partition", "committed_offset", "leader_epoch", "metadata",
                                      "commit_timestamp", "expire_timestamp", "topic_id",
                                      *[v.alias(k) for k, v in base.items()]))
    if pending is not None:
        parts.append(pending.select("offsets_partition", "log_offset", "producer_id", "group_id", "topic",
                                    "partition", "committed_offset", "leader_epoch", "metadata", "commit_timestamp",
                                    F.lit(None).cast("timestamp").alias("expire_timestamp"),
                                    F.lit(None).cast("string").alias("topic_id"),
                                    *[v.alias(k) for k, v in base.items()]))
    if not parts:
        return None
    out = parts[0]
    for p in parts[1:]:
        out = out.unionByName(p)
    return out


def new_run_id() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:8]


def _crash_point(name: str) -> None:
    """Test hook for the kill test: OFFSETS_LAKE_KILL_AT=<name> makes the process SIGKILL
    itself here, as a lost executor host or an OOM killer would."""
    if os.environ.get("OFFSETS_LAKE_KILL_AT") == name:
        import signal
        os.kill(os.getpid(), signal.SIGKILL)


def run_replay(spark: SparkSession, logs: list[PartitionLog], warehouse: str, now_ms: int,
               retention_minutes: int = 10080, full: bool = False, end_offsets: dict[int, int] | None = None,
               lock_wait_seconds: float = 0.0, on_corrupt: str = "fail") -> RunResult:
    """Replay `logs` into the tables. Incremental unless `full` or a partition has no
    checkpoint yet: only records at or after each partition's checkpoint are read, and their
    effect is applied on top of the state the last completed run left. `end_offsets` bounds
    what is read from a live topic (partition -> first offset not to read). `on_corrupt`:
    "fail" stops at the first undecodable batch or record, changing nothing; "quarantine"
    keeps each in quarantined_records (with its bytes) and goes on. Raises
    WarehouseBusyError if another live run writes the warehouse."""
    if on_corrupt not in ("fail", "quarantine"):
        raise ValueError(f"on_corrupt must be fail or quarantine, not {on_corrupt!r}")
    run_id = new_run_id()
    os.makedirs(warehouse, exist_ok=True)
    with WarehouseLock(warehouse, f"replay run {run_id}", lock_wait_seconds) as lock:
        result = RunResult(run_id, [pl.partition for pl in logs], now_ms, retention_minutes, on_corrupt=on_corrupt)
        result.took_over_lock = lock.took_over
        result.rolled_back = roll_back_incomplete_runs(spark, warehouse, T.ALL_TABLES, T.REPLAY_CHECKPOINTS)
        # staging folders of runs that died (we hold the lock: no live run owns one)
        shutil.rmtree(os.path.join(warehouse, "_staging"), ignore_errors=True)
        _run_locked(spark, logs, warehouse, result, full, end_offsets)
        return result


def _run_locked(spark: SparkSession, logs: list[PartitionLog], warehouse: str, result: RunResult, full: bool,
                end_offsets: dict[int, int] | None) -> None:
    run_id, now_ms, retention_minutes, partitions = (result.run_id, result.now_ms, result.retention_minutes,
                                                     result.partitions)
    prev = None if full else previous_run(spark, warehouse, partitions)
    start_offsets = {p: 0 for p in partitions}
    if prev is not None:
        start_offsets.update(prev.next_offsets)
        result.incremental = True
    staging = os.path.join(warehouse, "_staging", run_id)
    segments = [s for pl in logs for s in segments_from(pl, start_offsets[pl.partition])]
    try:
        t0 = time.monotonic()
        log_path = os.path.join(staging, "offsets_log")
        try:
            quarantine_raw = os.path.join(staging, "quarantine_raw") if result.on_corrupt == "quarantine" else None
            summaries = decode_segments(spark, segments, log_path, start_offsets, end_offsets, quarantine_raw)
        except Exception as e:  # noqa: BLE001 - a Spark job failure carries the worker's error as text
            info = worker_error_from(e)
            if info is None:
                raise
            raise ReplayError(_describe_worker_error(info)) from None
        _check_not_behind(logs, summaries, start_offsets, prev)
        _crash_point("after_decode")
        result.stage_seconds["decode"] = time.monotonic() - t0

        t0 = time.monotonic()
        new_log = spark.read.schema(T.OFFSETS_LOG.ddl).parquet(log_path)

        def staged(df: DataFrame, name: str) -> DataFrame:
            """Write once, read back: later steps reuse the result instead of recomputing it."""
            path = os.path.join(staging, name)
            _stage(df, path)
            return spark.read.parquet(path)

        previous = {}
        if prev is not None:
            for table in (T.GROUP_OFFSETS, T.EXPIRED_OFFSETS, T.PENDING_TRANSACTIONAL_OFFSETS, T.GROUP_FOLD_STATE):
                # latest versions: incomplete runs were rolled back on start, so they hold what
                # the completed runs left (no time travel, so VACUUM cannot break it)
                previous[table.name] = read_partitions(spark, warehouse, table, partitions)
        before_expiry = None
        if previous.get(T.GROUP_OFFSETS.name) is not None:
            before_expiry = previous[T.GROUP_OFFSETS.name]
            if previous.get(T.EXPIRED_OFFSETS.name) is not None:
                before_expiry = before_expiry.unionByName(previous[T.EXPIRED_OFFSETS.name])
        events = _offset_events(before_expiry, previous.get(T.PENDING_TRANSACTIONAL_OFFSETS.name))
        replay_input = new_log if events is None else new_log.unionByName(events, allowMissingColumns=True)
        committed, pending = replay_offsets(replay_input)
        committed = staged(committed, "offsets_before_expiry")
        pending = staged(pending, T.PENDING_TRANSACTIONAL_OFFSETS.name)
        try:
            groups = staged(replay_groups(new_log, topic_names_by_id(new_log), previous.get(T.GROUP_FOLD_STATE.name)),
                            "groups_before_expiry")
        except Exception as e:  # noqa: BLE001
            info = worker_error_from(e)
            if info is None:
                raise
            raise ReplayError("group replay failed as Kafka's loader would: " + _describe_worker_error(info)) from None
        _stage(groups.select(*T.GROUP_FOLD_STATE.column_names), os.path.join(staging, T.GROUP_FOLD_STATE.name))
        groups = groups.drop("fold_state")
        offsets = staged(judge_offsets(committed, groups, pending, now_ms, retention_minutes * 60_000),
                         "offsets_judged")
        judged_groups = staged(judge_groups(groups, offsets, pending), "groups_judged")
        for name, df in ((T.GROUP_OFFSETS.name, offsets.filter(~F.col("expired"))),
                         (T.EXPIRED_OFFSETS.name, offsets.filter(F.col("expired"))),
                         (T.CONSUMER_GROUPS.name, judged_groups.filter(~F.col("deleted"))),
                         (T.EXPIRED_GROUPS.name, judged_groups.filter(F.col("deleted")))):
            _stage(df.drop("expired", "deleted"), os.path.join(staging, name))
        result.records = sum(s["records"] for s in summaries)
        result.quarantined = sum(s["quarantined"] or 0 for s in summaries)
        quarantined = spark.createDataFrame([], T.QUARANTINED_RECORDS.ddl)
        if result.quarantined:
            quarantined = (spark.read.schema(T.QUARANTINED_RECORDS.ddl).parquet(quarantine_raw)
                           .withColumn("run_id", F.lit(run_id)))
        _stage(quarantined.select(*T.QUARANTINED_RECORDS.column_names),
               os.path.join(staging, T.QUARANTINED_RECORDS.name))
        checkpoint_rows = _checkpoints(logs, summaries, run_id, start_offsets)
        _stage(spark.createDataFrame(checkpoint_rows, T.REPLAY_CHECKPOINTS.ddl),
               os.path.join(staging, T.REPLAY_CHECKPOINTS.name))
        result.stage_seconds["replay"] = time.monotonic() - t0
        _crash_point("before_commit")

        t0 = time.monotonic()
        tag = run_tag(run_id, {r[0]: r[1] for r in checkpoint_rows})
        try:
            for table in T.ALL_TABLES:
                df = spark.read.schema(table.ddl).parquet(os.path.join(staging, table.name))
                path = table_path(warehouse, table)
                if table is T.OFFSETS_LOG and prev is not None:
                    append_new_records(spark, df, path, table, start_offsets, tag)
                elif table is T.QUARANTINED_RECORDS and prev is not None:
                    insert_new_rows(spark, df, path, table, partitions, tag)
                elif prev is not None and table is not T.REPLAY_CHECKPOINTS:
                    merge_partitions(spark, df, path, table, partitions, tag)
                else:
                    replace_partitions(df, path, table, partitions, tag)
                _crash_point(f"after_commit:{table.name}")
        except BaseException:
            # A commit failed (a Delta conflict, a lost executor): take back what this run committed.
            roll_back_incomplete_runs(spark, warehouse, T.ALL_TABLES, T.REPLAY_CHECKPOINTS)
            raise
        result.stage_seconds["commit"] = time.monotonic() - t0
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        try:
            os.rmdir(os.path.join(warehouse, "_staging"))
        except OSError:
            pass


def _check_not_behind(logs: list[PartitionLog], summaries: list[dict], start_offsets: dict[int, int],
                      prev: PreviousRun | None) -> None:
    """A log that now ends before its checkpoint was truncated or replaced: refuse to guess."""
    if prev is None:
        return
    ends: dict[int, int] = {}
    for s in summaries:
        ends[s["offsets_partition"]] = max(ends.get(s["offsets_partition"], 0), s["base_offset"], s["next_offset"] or 0)
    for pl in logs:
        checkpoint = prev.next_offsets.get(pl.partition)
        if checkpoint is None:
            continue
        end = ends.get(pl.partition, pl.segments[-1].base_offset if pl.segments else 0)
        if end < checkpoint:
            raise ReplayError(f"partition {pl.partition} of the input ends at offset {end}, before the checkpoint "
                              f"{checkpoint} of the last run: the log was truncated or replaced; run with --full")


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
        "quarantined": [r.asDict() for r in t("quarantined_records").groupBy("offsets_partition", "segment_file", "level")
                        .count().orderBy("offsets_partition", "segment_file", "level").limit(50).collect()],
    }
