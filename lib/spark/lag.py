"""The lag stage of a run: end offsets of the consumed partitions, and every group's lag.

After the replay's commit point, under the same warehouse lock:
1. The consumed topic partitions the groups commit on are found in the log dir (their
   <topic>-<partition> folders); each is scanned from its checkpoint on, batch headers only,
   by Spark tasks (lib.lake.topic_task) that write partition_end_offsets files.
2. group_lag rows are computed with Spark's built-in functions (windows, no UDF) for every
   effective commit since the last lag stage (`effective_commits`) and, at the run's --now, for
   every live offset: the end offset as of that time (the last end-offset row at or before
   it), and the age of the first unconsumed record (its timestamp from the batch header, or
   from its batch, decoded by a lookup task; else interpolated between end-offset rows).
3. Commits: partition_end_offsets, group_lag, then lag_checkpoints (the stage's commit point;
   a stage that died is rolled back by the next run like the replay's tables).

From a live cluster (`run_live_lag_stage`) step 1 samples instead: ListOffsets of the same
partitions (lib.source.live), one partition_end_offsets row each (source list_offsets, `at` the
sampling time on this machine's clock); there are no batches to decode, so a lag in time is
interpolated between the samples of successive runs, as kafka-lag-exporter does. Steps 2 and 3
are the same.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from lib import storage
from lib.lake.crash_points import crash_point
from lib.lake.partition_task import _FileWriter
from lib.lake.run_tags import run_tag
from lib.lake.worker_errors import worker_error_from
from lib.source.logdir import PartitionLog
from lib.source.topic_log import TopicPartitionLog, find_topic_partitions
from lib.spark.delta import (
    commit_files,
    open_delta,
    overwrite_small_table,
    read_small_table,
    table_exists,
    table_files,
    table_path,
    tagged_spark_commits,
)
from schemas import tables as T
from schemas.records import OFFSET_COMMIT_TYPES

OFFSETS_TOPIC = "__consumer_offsets"


class LagError(Exception):
    """The consumed topics' segments could not be read; the message names file and position."""


@dataclass
class LagResult:
    partitions_scanned: int = 0
    batches: int = 0
    lag_rows: int = 0
    skipped: str | None = None  # why the stage did nothing
    stage_seconds: dict = field(default_factory=dict)


def _ms(col):
    """TIMESTAMP -> epoch ms (BIGINT)."""
    return F.unix_micros(col) / 1000


# --- effective commits ------------------------------------------------------------------------


def effective_commits(offsets_log: DataFrame) -> DataFrame:
    """The commits that took effect, each at the record that made it effective (Kafka 4.x, as
    sql/audits/committed_offset_as_of.sql): a non-transactional OffsetCommit at its own record;
    a transactional one at its producer's next COMMIT marker in the same offsets partition, if
    no tombstone of the key and no newer record of the same producer for it came in between
    (an ABORT, or no marker yet: never). A commit whose record is older than one already in
    effect for the key changes nothing and is left out. Columns: offsets_partition, group_id,
    topic, partition, committed_offset, log_offset (the commit record), applied_offset,
    applied_at."""
    key = ["offsets_partition", "group_id", "topic", "partition"]
    ok = offsets_log.where(F.col("decode_status") == "ok")
    commits = ok.where(~F.col("is_control") & F.col("record_type").isin([int(t) for t in OFFSET_COMMIT_TYPES])).select(
        *key, "log_offset", "log_timestamp", "producer_id", "is_tombstone", "committed_offset"
    )
    by_key = Window.partitionBy(*key).orderBy("log_offset")
    commits = commits.withColumn(
        "next_tombstone",
        F.min(F.when(F.col("is_tombstone"), F.col("log_offset"))).over(
            by_key.rowsBetween(1, Window.unboundedFollowing)
        ),
    ).withColumn(
        "next_same_producer",
        F.lead("log_offset").over(Window.partitionBy(*key, "producer_id").orderBy("log_offset")),
    )
    # each transactional record's first marker of its producer after it: markers and records in
    # one ordering per (offsets partition, producer), the next marker by a forward window
    markers = ok.where(F.col("is_control") & F.col("control_type").isin("COMMIT", "ABORT")).select(
        "offsets_partition",
        "producer_id",
        F.col("log_offset"),
        F.col("log_offset").alias("marker_offset"),
        F.col("log_timestamp").alias("marker_time"),
        F.col("control_type").alias("marker_type"),
    )
    txn = commits.where((F.col("producer_id") != -1) & ~F.col("is_tombstone"))
    both = txn.unionByName(markers, allowMissingColumns=True)
    ahead = (
        Window.partitionBy("offsets_partition", "producer_id")
        .orderBy("log_offset")
        .rowsBetween(1, Window.unboundedFollowing)
    )
    nxt = F.struct("marker_offset", "marker_time", "marker_type")
    resolved = (
        both.withColumn(
            "marker", F.first(F.when(F.col("marker_offset").isNotNull(), nxt), ignorenulls=True).over(ahead)
        )
        .where(F.col("group_id").isNotNull())
        .where(F.col("marker.marker_type") == "COMMIT")
        .where(F.col("next_tombstone").isNull() | (F.col("next_tombstone") > F.col("marker.marker_offset")))
        .where(F.col("next_same_producer").isNull() | (F.col("next_same_producer") > F.col("marker.marker_offset")))
        .select(
            *key,
            "committed_offset",
            "log_offset",
            F.col("marker.marker_offset").alias("applied_offset"),
            F.col("marker.marker_time").alias("applied_at"),
            F.lit(False).alias("is_tombstone"),
        )
    )
    plain = commits.where(F.col("producer_id") == -1).select(
        *key,
        "committed_offset",
        "log_offset",
        F.col("log_offset").alias("applied_offset"),
        F.col("log_timestamp").alias("applied_at"),
        "is_tombstone",
    )
    # tombstones take part in the ordering only: after one, any later commit is news
    events = plain.unionByName(resolved)
    before = Window.partitionBy(*key).orderBy("applied_offset", "log_offset").rowsBetween(Window.unboundedPreceding, -1)
    return (
        events.withColumn("newest_before", F.max("log_offset").over(before))
        .where(~F.col("is_tombstone"))
        .where(F.col("newest_before").isNull() | (F.col("log_offset") > F.col("newest_before")))
        .drop("newest_before", "is_tombstone")
    )


# --- lag at points in time --------------------------------------------------------------------


def lag_at_points(points: DataFrame, end_offsets: DataFrame) -> DataFrame:
    """points: group_id, topic, partition, at, kind, committed_offset, offsets_partition,
    log_offset, and optionally _asof (the instant whose end offset to take, when not `at`).
    end_offsets: partition_end_offsets rows. Adds end_offset, end_offset_at, topic_id,
    lag_records, truncated and, for the time lag, the batch that holds the first unconsumed
    record (batch_* columns) and the interpolated time of that record (interpolated_ms);
    `with_time_lag` turns them into lag_ms."""
    tp = ["topic", "partition"]
    ends = end_offsets.where(F.col("at").isNotNull()).select(
        *tp,
        F.col("at").alias("_asof"),
        "end_offset",
        "topic_id",
        F.lit(0).alias("_kind"),
    )
    if "_asof" in points.columns:
        points = points.withColumn("_asof", F.coalesce("_asof", "at"))
    else:
        points = points.withColumn("_asof", F.col("at"))
    # the partition's first known batch: before it was written the end offset was at most its
    # first offset, so a group that had committed exactly that offset had nothing to read
    log_end = end_offsets.groupBy(*tp).agg(
        F.max("end_offset").alias("log_end"),
        F.min_by(F.struct("at", "first_offset"), F.struct("at", "end_offset")).alias("_first"),
    )
    # as of `_asof`: the last end-offset row at or before it (rows first at equal times)
    timeline = ends.withColumn("_end_at", F.col("_asof")).unionByName(
        points.withColumn("_kind", F.lit(1)), allowMissingColumns=True
    )
    so_far = Window.partitionBy(*tp).orderBy("_asof", "_kind", "end_offset").rowsBetween(Window.unboundedPreceding, 0)
    asof = (
        timeline.withColumn(
            "_last",
            F.last(F.when(F.col("_kind") == 0, F.struct("end_offset", "_end_at", "topic_id")), True).over(so_far),
        )
        .where(F.col("_kind") == 1)
        .select(
            *list(points.columns),
            F.col("_last.end_offset").alias("_end_asof"),
            F.col("_last._end_at").alias("end_offset_at"),
            F.col("_last.topic_id").alias("topic_id"),
        )
        .join(log_end, tp, "left")
    )
    truncated = F.col("log_end").isNotNull() & (F.col("committed_offset") > F.col("log_end"))
    # a group that committed O had read the records below O: the log held them by then
    before_first = (
        F.col("_end_asof").isNull()
        & (F.col("at") < F.col("_first.at"))
        & (F.col("committed_offset") == F.col("_first.first_offset"))
    )
    end = (
        F.when(before_first, F.col("committed_offset"))
        .when(F.col("_end_asof").isNull(), F.lit(None))
        .when(truncated, F.col("_end_asof"))
        .otherwise(F.greatest("_end_asof", "committed_offset"))
    )
    return (
        asof.withColumn("truncated", F.coalesce(truncated, F.lit(False)))
        .withColumn("end_offset", end)
        .withColumn("lag_records", F.col("end_offset") - F.col("committed_offset"))
        .drop("_end_asof", "log_end", "_first", "_asof")
    )


def first_unconsumed_batches(lagging: DataFrame, end_offsets: DataFrame) -> DataFrame:
    """For each distinct (topic, partition, committed_offset) of `lagging`: the segment batch
    that holds the offset (the first with end_offset above it), and the interpolated time at
    which the partition's end offset passed it (between the end-offset rows around
    committed_offset + 1). Columns: topic, partition, committed_offset, batch_first_offset,
    batch_first_timestamp, batch_timestamp_type, batch_segment_file, batch_byte_position,
    interpolated_ms."""
    tp = ["topic", "partition"]
    wanted = lagging.select(*tp, "committed_offset").distinct()
    rows = end_offsets.select(
        *tp,
        F.col("end_offset").alias("_offset"),
        F.lit(1).alias("_kind"),
        F.struct(
            F.col("first_offset").alias("first_offset"),
            F.col("first_timestamp").alias("first_timestamp"),
            F.col("timestamp_type").alias("timestamp_type"),
            F.col("segment_file").alias("segment_file"),
            F.col("byte_position").alias("byte_position"),
            F.col("source").alias("source"),
        ).alias("_batch"),
        F.struct(F.col("end_offset").alias("e"), _ms(F.col("at")).alias("t")).alias("_point"),
    ).where(F.col("_point.t").isNotNull())
    # a wanted offset O sorts at O + 1, before the end-offset rows there: the rows before it
    # end at or below O, the first row after it ends above O (it holds O)
    probes = wanted.select(
        *tp, "committed_offset", (F.col("committed_offset") + 1).alias("_offset"), F.lit(0).alias("_kind")
    )
    order = Window.partitionBy(*tp).orderBy("_offset", "_kind")
    before = order.rowsBetween(Window.unboundedPreceding, -1)
    after = order.rowsBetween(1, Window.unboundedFollowing)
    seg = F.col("_batch.source") == "segment"
    merged = (
        rows.unionByName(probes, allowMissingColumns=True)
        .withColumn("_prev", F.last("_point", True).over(before))
        .withColumn("_next", F.first("_point", True).over(after))
        .withColumn("_holder", F.first(F.when(seg, F.col("_batch")), True).over(after))
        .where(F.col("_kind") == 0)
    )
    e1, t1, e2, t2 = (F.col("_prev.e"), F.col("_prev.t"), F.col("_next.e"), F.col("_next.t"))
    target = F.col("committed_offset") + 1
    interpolated = F.when(
        F.col("_prev").isNotNull() & F.col("_next").isNotNull() & (e2 > e1),
        t1 + (target - e1) * (t2 - t1) / (e2 - e1),
    )
    return merged.select(
        *tp,
        "committed_offset",
        F.col("_holder.first_offset").alias("batch_first_offset"),
        F.col("_holder.first_timestamp").alias("batch_first_timestamp"),
        F.col("_holder.timestamp_type").alias("batch_timestamp_type"),
        F.col("_holder.segment_file").alias("batch_segment_file"),
        F.col("_holder.byte_position").alias("batch_byte_position"),
        F.floor(interpolated).cast("bigint").alias("interpolated_ms"),
    )


def with_time_lag(lagged: DataFrame, batches: DataFrame, looked_up: DataFrame | None) -> DataFrame:
    """lag_ms, lag_ms_method and first_unconsumed_timestamp from the holder batches (header
    timestamps), the lookups' decoded timestamps (topic, partition, committed_offset,
    record_ms) and the interpolation."""
    tp_o = ["topic", "partition", "committed_offset"]
    joined = lagged.join(batches, tp_o, "left")
    if looked_up is not None:
        joined = joined.join(looked_up, tp_o, "left")
    else:
        joined = joined.withColumn("record_ms", F.lit(None).cast("bigint"))
    header_ms = F.when(
        (F.col("batch_first_offset") == F.col("committed_offset")) & F.col("batch_first_timestamp").isNotNull(),
        _ms(F.col("batch_first_timestamp")).cast("bigint"),
    )
    record_ms = F.coalesce(header_ms, F.col("record_ms"))
    at_ms = _ms(F.col("at")).cast("bigint")
    behind = F.col("lag_records") > 0
    unknown = F.col("lag_records").isNull() | F.col("truncated")
    method = (
        F.when(unknown, F.lit(None))
        .when(~behind, F.lit("caught_up"))
        .when(record_ms.isNotNull(), F.lit("record"))
        .when(F.col("interpolated_ms").isNotNull(), F.lit("interpolated"))
    )
    lag_ms = (
        F.when(unknown, F.lit(None))
        .when(~behind, F.lit(0))
        .when(record_ms.isNotNull(), F.greatest(F.lit(0), at_ms - record_ms))
        .when(F.col("interpolated_ms").isNotNull(), F.greatest(F.lit(0), at_ms - F.col("interpolated_ms")))
    )
    return joined.select(
        *list(lagged.columns),
        lag_ms.cast("bigint").alias("lag_ms"),
        method.alias("lag_ms_method"),
        F.when(behind & ~unknown, F.timestamp_millis(F.coalesce(record_ms, F.col("interpolated_ms")))).alias(
            "first_unconsumed_timestamp"
        ),
    )


def lookups_needed(lagged: DataFrame, batches: DataFrame) -> DataFrame:
    """The (topic, partition, committed_offset) whose first unconsumed record's time needs its
    batch decoded: behind, held by a segment batch whose header does not tell it."""
    return (
        lagged.where(F.col("lag_records") > 0)
        .select("topic", "partition", "committed_offset")
        .distinct()
        .join(batches, ["topic", "partition", "committed_offset"])
        .where(F.col("batch_segment_file").isNotNull())
        .where(
            ~((F.col("batch_first_offset") == F.col("committed_offset")) & F.col("batch_first_timestamp").isNotNull())
        )
        # a batch that starts above the offset: the record is no longer in the log (retention)
        .where(F.col("batch_first_offset").isNull() | (F.col("batch_first_offset") <= F.col("committed_offset")))
        .select("topic", "partition", "committed_offset", "batch_segment_file", "batch_byte_position")
    )


# --- the stage ------------------------------------------------------------------------------


def consumed_partitions(spark: SparkSession, warehouse: str) -> set[tuple[str, int]]:
    """The topic partitions any group has committed on (a small set, safe to collect)."""
    log = spark.read.format("delta").load(table_path(warehouse, T.OFFSETS_LOG))
    rows = (
        log.where(F.col("record_type").isin([int(t) for t in OFFSET_COMMIT_TYPES]) & F.col("topic").isNotNull())
        .select("topic", "partition")
        .distinct()
        .collect()
    )
    return {(r["topic"], r["partition"]) for r in rows}


def live_partitions(warehouse: str) -> set[tuple[str, int]]:
    """The topic partitions with a live committed offset (group_offsets, a small table read
    with delta-rs)."""
    path = table_path(warehouse, T.GROUP_OFFSETS)
    if not table_exists(None, path):
        return set()
    data = open_delta(path).to_pyarrow_table(columns=["topic", "partition"])
    return set(zip(data["topic"].to_pylist(), data["partition"].to_pylist()))


def _replayed_to(warehouse: str) -> dict[int, int]:
    """offsets partition -> the replay's checkpoint (next log offset)."""
    replay = read_small_table(table_path(warehouse, T.REPLAY_CHECKPOINTS))
    return {r["offsets_partition"]: r["next_log_offset"] for r in (replay.to_pylist() if replay is not None else [])}


def _previous_checkpoints(warehouse: str, full: bool) -> dict[tuple[str, int], dict]:
    """The last lag stage's lag_checkpoints rows by (topic, partition); none for a full run."""
    previous = None if full else read_small_table(table_path(warehouse, T.LAG_CHECKPOINTS))
    return {(r["topic"], r["partition"]): r for r in (previous.to_pylist() if previous is not None else [])}


def run_lag_stage(
    spark: SparkSession,
    log_dir: str | None,
    logs: list[PartitionLog],
    warehouse: str,
    run_id: str,
    now_ms: int,
    full: bool,
) -> LagResult:
    """The lag stage after a replay run's commit point (see the module's doc). When the replay
    is where the last completed stage left it (no new record in __consumer_offsets, so no
    topic partition newly committed on), the partitions to read are those that stage read and
    those with live offsets, and a stage with nothing new to read at the same --now is skipped
    (no Spark job, no commit). That is judged from the stage's own commit point, never from
    what this run's replay did: a stage that died after its replay committed is redone whole."""
    from lib.spark.pipeline import source_signature

    result = LagResult()
    t0 = time.monotonic()
    topic_logs = find_topic_partitions(log_dir) if log_dir else []
    if not topic_logs:
        result.skipped = "the input holds no consumed topic partitions"
        return result
    prev_rows = _previous_checkpoints(warehouse, full)
    offsets_rows = [r for (topic, _), r in prev_rows.items() if topic == OFFSETS_TOPIC]
    watermarks = {r["partition"]: r["next_offset"] for r in offsets_rows}
    caught_up = bool(watermarks) and watermarks == _replayed_to(warehouse)
    if caught_up:
        wanted = {tp for tp in prev_rows if tp[0] != OFFSETS_TOPIC} | live_partitions(warehouse)
    else:
        wanted = consumed_partitions(spark, warehouse)
    topic_logs = [t for t in topic_logs if (t.topic, t.partition) in wanted]
    if not topic_logs:
        result.skipped = "no group commits on a topic partition of the input"
        return result
    tasks = []
    for log in topic_logs:
        prev = prev_rows.get((log.topic, log.partition))
        if prev is not None and prev["topic_id"] != log.topic_id:
            prev = None  # the topic was recreated: its new log from the start
        signature = source_signature(log)  # as the replay's checkpoints hold it
        if prev is not None and prev["source_signature"] == signature:
            continue
        tasks.append(
            {
                "topic": log.topic,
                "partition": log.partition,
                "path": log.path,
                "topic_id": log.topic_id,
                "segments": [(s.path, s.base_offset, s.size) for s in log.segments],
                "start": None
                if prev is None
                else {
                    "next_offset": prev["next_offset"],
                    "segment_base_offset": prev["segment_base_offset"],
                    "next_byte_position": prev["next_byte_position"],
                },
                "at_ms": None if prev is None else prev["at_ms"],
                "source_signature": signature,
                "size": sum(s.size for s in log.segments),
            }
        )
    result.stage_seconds["lag_plan"] = time.monotonic() - t0
    if caught_up and not tasks and all(r.get("at_ms") == now_ms for r in offsets_rows):
        result.skipped = "nothing new since the last run at the same --now"
        return result

    # 1. scan
    t0 = time.monotonic()
    scanned = _scan(spark, tasks, warehouse, run_id)
    result.partitions_scanned = len(tasks)
    result.batches = sum(r["batches"] for r in scanned)
    end_path = table_path(warehouse, T.PARTITION_END_OFFSETS)
    removed = []
    if full:
        listing = table_files(end_path)
        removed = listing[1] if listing else []
    files = [f for r in scanned for f in r["files"]]
    commit_files(end_path, T.PARTITION_END_OFFSETS, files, run_tag(run_id), remove=removed)
    crash_point("after_commit:partition_end_offsets")
    result.stage_seconds["lag_scan"] = time.monotonic() - t0

    checkpoints = [c for r in scanned for c in r["checkpoints"]]
    _lag_rows_and_commit_point(spark, warehouse, run_id, now_ms, full, prev_rows, checkpoints, topic_logs, result)
    return result


def run_live_lag_stage(
    spark: SparkSession, bootstrap_servers: str, warehouse: str, run_id: str, now_ms: int, full: bool
) -> LagResult:
    """The lag stage after a replay run from a live cluster (see the module's doc): the
    partitions groups commit on are sampled with ListOffsets (LATEST; the newest record's
    timestamp, KIP-734, where the leader has it), one partition_end_offsets row each, appended
    (also by a full run: past samples cannot be taken again). Partitions of deleted topics get
    no row. The live offsets were fetched after --now and before the sample, so their `now`
    rows take the end offset as of the sample when --now is earlier: that of the same moment
    as kafka-consumer-groups --describe would show it."""
    from lib.source.live import sample_end_offsets

    result = LagResult()
    t0 = time.monotonic()
    wanted = consumed_partitions(spark, warehouse)
    if not wanted:
        result.skipped = "no group commits on a topic partition"
        return result
    prev_rows = _previous_checkpoints(warehouse, full)
    result.stage_seconds["lag_plan"] = time.monotonic() - t0

    # 1. sample
    t0 = time.monotonic()
    samples = sample_end_offsets(bootstrap_servers, wanted)
    result.partitions_scanned = len(samples)
    writer = _FileWriter(storage.absolute(warehouse), T.PARTITION_END_OFFSETS, None, run_id)
    writer.write(_sample_rows(samples, run_id))
    writer.close()
    commit_files(table_path(warehouse, T.PARTITION_END_OFFSETS), T.PARTITION_END_OFFSETS, writer.files, run_tag(run_id))
    crash_point("after_commit:partition_end_offsets")
    result.stage_seconds["lag_sample"] = time.monotonic() - t0

    sampled_at = max((s.at_ms for s in samples), default=None)
    _lag_rows_and_commit_point(spark, warehouse, run_id, now_ms, full, prev_rows, [], [], result, sampled_at)
    return result


def _sample_rows(samples: list, run_id: str):
    """partition_end_offsets rows of ListOffsets samples (lib.source.live.EndOffsetSample):
    end_offset, at, max_timestamp and topic_id; the batch columns are null."""
    import pyarrow as pa

    def ts(ms: int | None):
        return None if ms is None else dt.datetime.fromtimestamp(ms / 1000, dt.UTC)

    rows = [
        {
            "topic": s.topic,
            "partition": s.partition,
            "end_offset": s.end_offset,
            "at": ts(s.at_ms),
            "source": "list_offsets",
            "topic_id": s.topic_id,
            "max_timestamp": ts(s.max_timestamp_ms),
            "run_id": run_id,
        }
        for s in samples
    ]
    schema = T.PARTITION_END_OFFSETS.arrow_schema
    return pa.Table.from_pylist([{c: r.get(c) for c in schema.names} for r in rows], schema=schema)


def _lag_rows_and_commit_point(
    spark: SparkSession,
    warehouse: str,
    run_id: str,
    now_ms: int,
    full: bool,
    prev_rows: dict[tuple[str, int], dict],
    checkpoints: list[dict],
    topic_logs: list[TopicPartitionLog],
    result: LagResult,
    now_asof_ms: int | None = None,
) -> None:
    """Steps 2 and 3 of the stage, once partition_end_offsets is committed: group_lag rows,
    then lag_checkpoints (the topic partitions' `checkpoints` over the previous rows, and every
    offsets partition's watermark from replay_checkpoints)."""
    import pyarrow as pa

    # 2. lag rows
    t0 = time.monotonic()
    watermarks = {r["partition"]: r["next_offset"] for (topic, _), r in prev_rows.items() if topic == OFFSETS_TOPIC}
    result.lag_rows = _group_lag(spark, warehouse, run_id, now_ms, watermarks, full, topic_logs, now_asof_ms)
    crash_point("after_commit:group_lag")
    result.stage_seconds["lag_rows"] = time.monotonic() - t0

    # 3. the commit point
    finished = dt.datetime.now(dt.UTC)
    new_rows: dict[tuple[str, int], dict] = dict(prev_rows)
    for c in checkpoints:
        new_rows[(c["topic"], c["partition"])] = {**c, "run_id": run_id, "finished_at": finished}
    replay = read_small_table(table_path(warehouse, T.REPLAY_CHECKPOINTS))
    for r in replay.to_pylist() if replay is not None else []:
        new_rows[(OFFSETS_TOPIC, r["offsets_partition"])] = {
            "topic": OFFSETS_TOPIC,
            "partition": r["offsets_partition"],
            "next_offset": r["next_log_offset"],
            "at_ms": now_ms,  # the --now its `now` rows were computed at
            "run_id": run_id,
            "finished_at": finished,
        }
    names = T.LAG_CHECKPOINTS.column_names
    rows = [{c: row.get(c) for c in names} for _, row in sorted(new_rows.items())]
    overwrite_small_table(
        table_path(warehouse, T.LAG_CHECKPOINTS),
        T.LAG_CHECKPOINTS,
        pa.Table.from_pylist(rows, schema=T.LAG_CHECKPOINTS.arrow_schema),
        run_tag(run_id),
    )
    crash_point("after_commit:lag_checkpoints")


def _scan(spark: SparkSession, tasks: list[dict], warehouse: str, run_id: str) -> list[dict]:
    if not tasks:
        return []
    from lib.spark.pipeline import ReplayError, _describe_worker_error, _pack

    # the replay's packing: partitions by size into Spark tasks that end together
    packed = _pack([(t["size"], t) for t in tasks], spark.sparkContext.defaultParallelism)
    groups = [
        {
            "warehouse": storage.absolute(warehouse),
            "run_id": run_id,
            "object_store": storage.settings(),
            "partitions": p,
        }
        for p in packed
        if p
    ]
    try:
        return spark.sparkContext.parallelize(groups, len(groups)).map(_scan_task).collect()
    except Exception as e:
        info = worker_error_from(e)
        if info is None:
            raise
        raise ReplayError(_describe_worker_error(info)) from None


def _scan_task(group: dict) -> dict:
    from lib.lake.topic_task import scan_task

    return scan_task(group)


def _group_lag(
    spark: SparkSession,
    warehouse: str,
    run_id: str,
    now_ms: int,
    watermarks: dict[int, int],
    full: bool,
    topic_logs: list[TopicPartitionLog],
    now_asof_ms: int | None = None,
) -> int:
    """group_lag rows of the commits new since the last lag stage and of the live offsets at
    now; written to the table (a full run rewrites it). The now rows take the end offset as of
    now, or as of `now_asof_ms` when that is later (a live source's sample). First unconsumed
    records are looked up in the segments of `topic_logs` (none: interpolation only). Returns
    the rows written."""
    log = spark.read.format("delta").load(table_path(warehouse, T.OFFSETS_LOG))
    ends = spark.read.format("delta").load(table_path(warehouse, T.PARTITION_END_OFFSETS))
    if watermarks and not full:
        # only offsets partitions with records past their watermark can hold new commits: the
        # others' history is not read again (offsets_log's files are skipped by their
        # offsets_partition statistics)
        replay = read_small_table(table_path(warehouse, T.REPLAY_CHECKPOINTS))
        changed = [
            r["offsets_partition"]
            for r in (replay.to_pylist() if replay is not None else [])
            if r["next_log_offset"] > watermarks.get(r["offsets_partition"], -1)
        ]
        log = log.where(F.col("offsets_partition").isin(changed))
    commits = effective_commits(log)
    if watermarks and not full:
        # per offsets partition, the commits made effective at or after its watermark
        marks = spark.createDataFrame(list(watermarks.items()), "offsets_partition INT, watermark BIGINT")
        commits = (
            commits.join(F.broadcast(marks), "offsets_partition", "left")
            .where(F.col("watermark").isNull() | (F.col("applied_offset") >= F.col("watermark")))
            .drop("watermark")
        )
    now_ts = F.timestamp_millis(F.lit(now_ms))
    commit_points = commits.select(
        "group_id",
        "topic",
        "partition",
        F.col("applied_at").alias("at"),
        F.lit("commit").alias("kind"),
        "committed_offset",
        "offsets_partition",
        F.col("applied_offset").alias("log_offset"),
    )
    live = spark.read.format("delta").load(table_path(warehouse, T.GROUP_OFFSETS))
    now_points = live.select(
        "group_id",
        "topic",
        "partition",
        now_ts.alias("at"),
        F.lit("now").alias("kind"),
        "committed_offset",
        "offsets_partition",
        F.lit(None).cast("bigint").alias("log_offset"),
        F.timestamp_millis(F.lit(max(now_ms, now_asof_ms or now_ms))).alias("_asof"),
    )
    points = commit_points.unionByName(now_points, allowMissingColumns=True).where(F.col("at").isNotNull())
    lagged = lag_at_points(points, ends).localCheckpoint()
    batches = first_unconsumed_batches(lagged.where(F.col("lag_records") > 0), ends).localCheckpoint()
    looked_up = None
    if topic_logs:
        looked_up = _look_up(spark, lookups_needed(lagged, batches), topic_logs).localCheckpoint()
    rows = with_time_lag(lagged, batches, looked_up).withColumn("run_id", F.lit(run_id))
    rows = rows.select(*T.GROUP_LAG.column_names)
    path = table_path(warehouse, T.GROUP_LAG)
    writer = rows.write.format("delta").option("userMetadata", run_tag(run_id))
    if full or not table_exists(spark, path):
        writer.mode("overwrite").option("overwriteSchema", "true").save(path)
    else:
        # this --now's rows replace those of an earlier run at the same instant
        from delta.tables import DeltaTable

        rows = rows.localCheckpoint()
        with tagged_spark_commits(spark, run_tag(run_id)):
            DeltaTable.forPath(spark, path).alias("t").merge(
                rows.alias("s"),
                "t.kind = 'now' AND s.kind = 'now' AND t.at = s.at AND t.group_id = s.group_id "
                "AND t.topic = s.topic AND t.partition = s.partition",
            ).whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()
    return spark.read.format("delta").load(path).where(F.col("run_id") == run_id).count()


def _look_up(spark: SparkSession, needed: DataFrame, topic_logs: list[TopicPartitionLog]) -> DataFrame:
    """Decode the batches of `needed` for their first unconsumed records' timestamps (tasks by
    segment file, each batch once): topic, partition, committed_offset, record_ms. Batches of
    segments no longer in the log dir (deleted by retention) are left to interpolation."""
    present = spark.createDataFrame(
        [(t.topic, t.partition, t.path, [storage.basename(s.path) for s in t.segments]) for t in topic_logs],
        "topic STRING, partition INT, folder STRING, files ARRAY<STRING>",
    )
    jobs = (
        needed.join(F.broadcast(present), ["topic", "partition"])
        .where(F.array_contains("files", F.col("batch_segment_file")))
        .select(
            "topic",
            "partition",
            F.concat_ws("/", "folder", "batch_segment_file").alias("path"),
            "batch_byte_position",
            "committed_offset",
        )
    )
    settings = storage.settings()

    def decode(batches):
        import pyarrow as pa

        from lib.lake.topic_task import lookup_task

        for batch in batches:
            rows = batch.to_pylist()
            found = lookup_task(
                {
                    "object_store": settings,
                    "lookups": [
                        (r["topic"], r["partition"], r["path"], r["batch_byte_position"], r["committed_offset"])
                        for r in sorted(rows, key=lambda r: (r["path"], r["batch_byte_position"]))
                    ],
                }
            )
            yield pa.RecordBatch.from_pylist(
                [{"topic": t, "partition": p, "committed_offset": o, "record_ms": ts} for t, p, o, ts in found],
                schema=pa.schema(
                    [
                        ("topic", pa.string()),
                        ("partition", pa.int32()),
                        ("committed_offset", pa.int64()),
                        ("record_ms", pa.int64()),
                    ]
                ),
            )

    n = max(1, spark.sparkContext.defaultParallelism)
    return (
        jobs.repartition(n, "path")
        .sortWithinPartitions("path", "batch_byte_position")
        .mapInArrow(decode, "topic STRING, partition INT, committed_offset BIGINT, record_ms BIGINT")
    )


def lag_summary(spark: SparkSession, warehouse: str, now_ms: int, limit: int = 12) -> list[dict]:
    """The live offsets furthest behind at now (group_lag kind now), most behind in time first."""
    rows = (
        spark.read.format("delta")
        .load(table_path(warehouse, T.GROUP_LAG))
        .where((F.col("kind") == "now") & (F.col("at") == F.timestamp_millis(F.lit(now_ms))))
        .where(F.col("lag_records") > 0)
        .orderBy(F.col("lag_ms").desc_nulls_last(), F.col("lag_records").desc(), "group_id", "topic", "partition")
        .limit(limit)
        .collect()
    )
    return [r.asDict() for r in rows]


def lag_at_bucket_ends(group_lag: DataFrame, end_offsets: DataFrame, probes: DataFrame) -> DataFrame:
    """The lag of groups at given instants, per topic partition they committed: probes (group_id,
    bucket, at). The committed offset as of each instant is the group's last effective commit
    at or before it (group_lag kind commit), the end offset as of it comes from `lag_at_points`,
    and the time lag from the first unconsumed record's time: as a group_lag row knows it, else
    from its batch header, else interpolated between end-offset rows. Columns: group_id, bucket, at, topic, partition, lag_records,
    lag_ms."""
    commits = group_lag.where(F.col("kind") == "commit").select(
        "group_id", "topic", "partition", "at", "committed_offset", "offsets_partition", "log_offset"
    )
    tps = commits.select("group_id", "topic", "partition").distinct()
    probe_rows = probes.join(tps, "group_id")
    timeline = commits.withColumn("_kind", F.lit(0)).unionByName(
        probe_rows.withColumn("_kind", F.lit(1)), allowMissingColumns=True
    )
    so_far = (
        Window.partitionBy("group_id", "topic", "partition")
        .orderBy("at", "_kind")
        .rowsBetween(Window.unboundedPreceding, 0)
    )
    points = (
        timeline.withColumn("_c", F.last("committed_offset", True).over(so_far))
        .where((F.col("_kind") == 1) & F.col("_c").isNotNull())
        .select(
            "group_id",
            "bucket",
            "topic",
            "partition",
            "at",
            F.lit("probe").alias("kind"),
            F.col("_c").alias("committed_offset"),
            F.lit(0).alias("offsets_partition"),
            F.lit(None).cast("bigint").alias("log_offset"),
        )
    )
    lagged = lag_at_points(points, end_offsets)
    known = (
        group_lag.where(F.col("first_unconsumed_timestamp").isNotNull())
        .groupBy("topic", "partition", "committed_offset")
        .agg(F.max_by("first_unconsumed_timestamp", F.col("lag_ms_method") == "record").alias("_record_time"))
    )
    # where no row knows it: the batch header (the record opens its batch), else interpolated
    batches = first_unconsumed_batches(lagged.where(F.col("lag_records") > 0), end_offsets)
    header = F.when(
        F.col("batch_first_offset") == F.col("committed_offset"), _ms(F.col("batch_first_timestamp")).cast("bigint")
    )
    estimated = batches.select(
        "topic", "partition", "committed_offset", F.coalesce(header, F.col("interpolated_ms")).alias("_estimate_ms")
    )
    at_ms = _ms(F.col("at")).cast("bigint")
    record_ms = F.coalesce(_ms(F.col("_record_time")).cast("bigint"), F.col("_estimate_ms"))
    tp_o = ["topic", "partition", "committed_offset"]
    return (
        lagged.join(known, tp_o, "left")
        .join(estimated, tp_o, "left")
        .select(
            "group_id",
            "bucket",
            "at",
            "topic",
            "partition",
            "lag_records",
            F.when(F.col("truncated") | F.col("lag_records").isNull(), F.lit(None))
            .when(F.col("lag_records") <= 0, F.lit(0))
            .when(record_ms.isNotNull(), F.greatest(F.lit(0), at_ms - record_ms))
            .cast("bigint")
            .alias("lag_ms"),
        )
    )
