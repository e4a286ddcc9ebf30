"""Kafka's lag rules over whole tables, in Spark: the lag of a group on a topic partition as of
any instant, from group_lag's commit rows (the commits that took effect, as the replay's
engine found them) and partition_end_offsets. The SQL audits (`lag_at`, `lag_history`,
`groups_falling_behind`, through the view `lag_timeline` that lib.spark.audit_views registers)
and the report (`lag_at_instants`) answer from `lag_timeline`; lib.lake.lag_rows is the
record-by-record twin that writes group_lag (tests/test_lag_rows.py, tests/test_lag.py).

Between two changes of either side (a commit of the group, an end-offset row of the partition)
the committed offset and the end offset stay put, so the lag in records does too, and the lag
in time grows with the clock from the first unconsumed record's time: a timeline of such
stretches answers every instant exactly.

Rules, as lag_rows applies them:
- the committed offset as of an instant is the group's last effective commit at or before it
  (commits first, then end-offset rows, at equal times);
- the end offset is the partition's last end-offset row at or before the instant, never below
  the committed offset unless the log ends before it (`truncated`: the topic was truncated or
  recreated; the lag is then unknown); before the partition's first row it is unknown (NULL,
  lag_ms_method 'end_offset_unknown'), except for a commit of the partition's first known
  offset: the log cannot have ended past it then (lag 0);
- the lag in time counts from the first unconsumed record's timestamp: as a group_lag row knows
  it, else from its batch header when the record opens its batch, else interpolated between
  the end-offset rows around it (as kafka-lag-exporter does)."""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

# The lag in time at `at`, from a timeline row: one text for the SQL function `lag_ms_at` the
# audits call and for the report's DataFrames.
LAG_MS_AT = (
    "CASE WHEN truncated OR lag_records IS NULL THEN NULL WHEN lag_records <= 0 THEN 0 "
    "WHEN first_unconsumed_at IS NOT NULL THEN "
    "greatest(0, unix_millis(at) - unix_millis(first_unconsumed_at)) END"
)
LAG_MS_AT_FUNCTION = (
    "CREATE OR REPLACE TEMPORARY FUNCTION lag_ms_at(lag_records BIGINT, truncated BOOLEAN, "
    f"first_unconsumed_at TIMESTAMP, at TIMESTAMP) RETURNS BIGINT RETURN {LAG_MS_AT}"
)
TIMELINE_KEY = ["group_id", "topic", "partition"]


def _ms(col):
    """TIMESTAMP -> epoch ms (BIGINT)."""
    return F.unix_micros(col) / 1000


# --- lag at points in time --------------------------------------------------------------------


def lag_at_points(points: DataFrame, end_offsets: DataFrame, per_group: bool = False) -> DataFrame:
    """points: group_id, topic, partition, at, kind, committed_offset, offsets_partition,
    log_offset, and optionally _asof (the instant whose end offset to take, when not `at`).
    end_offsets: partition_end_offsets rows. Adds end_offset, end_offset_at, topic_id,
    lag_records and truncated. per_group: the points' partitions' end-offset rows are matched
    group by group (each group's timeline its own window: a query of one group reads only
    that group's partitions)."""
    tp = ["topic", "partition"]
    by = ["group_id", *tp] if per_group else tp
    ends_of = end_offsets
    if per_group:
        ends_of = end_offsets.join(points.select(*by).distinct(), tp)
    ends = ends_of.where(F.col("at").isNotNull()).select(
        *(["group_id"] if per_group else []),
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
    log_end = (
        end_offsets.join(points.select(*tp).distinct(), tp, "left_semi")
        .groupBy(*tp)
        .agg(
            F.max("end_offset").alias("log_end"),
            F.min_by(F.struct("at", "first_offset"), F.struct("at", "end_offset")).alias("_first"),
        )
    )
    # as of `_asof`: the last end-offset row at or before it (rows first at equal times)
    timeline = ends.withColumn("_end_at", F.col("_asof")).unionByName(
        points.withColumn("_kind", F.lit(1)), allowMissingColumns=True
    )
    so_far = Window.partitionBy(*by).orderBy("_asof", "_kind", "end_offset").rowsBetween(Window.unboundedPreceding, 0)
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
    rows = (
        end_offsets.join(wanted.select(*tp).distinct(), tp, "left_semi")
        .select(
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
        )
        .where(F.col("_point.t").isNotNull())
    )
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


def lag_timeline(group_lag: DataFrame, end_offsets: DataFrame, only_groups: DataFrame | None = None) -> DataFrame:
    """One row per stretch of time over which a group's committed offset and its partition's
    end offset stay put, from the group's first effective commit on the partition: group_id,
    topic, partition, valid_from, valid_until (the next change; NULL: still so),
    committed_offset, committed_at, offsets_partition, commit_log_offset, end_offset,
    end_offset_at, topic_id, lag_records, truncated, first_unconsumed_at (when lag_ms counts
    from; NULL when unknown or nothing is left to consume) and lag_ms_method. The lag in time
    at an instant of the stretch is LAG_MS_AT (the SQL function lag_ms_at). only_groups (a
    group_id column): the timelines of these groups only (every group_lag row still counts for
    the first unconsumed records' times)."""
    commits = group_lag.where(F.col("kind") == "commit").select(
        *TIMELINE_KEY, "at", "committed_offset", "offsets_partition", "log_offset"
    )
    if only_groups is not None:
        commits = commits.join(F.broadcast(only_groups.select("group_id")), "group_id", "left_semi")
    first_commit = commits.groupBy(*TIMELINE_KEY).agg(F.min("at").alias("_first_commit"))
    end_changes = (
        end_offsets.where(F.col("at").isNotNull())
        .select("topic", "partition", "at")
        .distinct()
        .join(first_commit, ["topic", "partition"])
        .where(F.col("at") >= F.col("_first_commit"))
        .select(*TIMELINE_KEY, "at")
    )
    changes = commits.withColumn("_kind", F.lit(0)).unionByName(
        end_changes.withColumn("_kind", F.lit(1)), allowMissingColumns=True
    )
    so_far = (
        Window.partitionBy(*TIMELINE_KEY).orderBy("at", "_kind", "log_offset").rowsBetween(Window.unboundedPreceding, 0)
    )
    commit = F.struct(
        F.col("committed_offset").alias("committed_offset"),
        F.col("at").alias("committed_at"),
        F.col("offsets_partition").alias("offsets_partition"),
        F.col("log_offset").alias("log_offset"),
    )
    last_at_instant = Window.partitionBy(*TIMELINE_KEY, "at").orderBy(F.desc("_kind"), F.desc("log_offset"))
    points = (
        changes.withColumn("_c", F.last(F.when(F.col("_kind") == 0, commit), True).over(so_far))
        .withColumn("_n", F.row_number().over(last_at_instant))
        .where(F.col("_n") == 1)
        .select(
            *TIMELINE_KEY,
            "at",
            F.col("_c.committed_offset").alias("committed_offset"),
            F.col("_c.committed_at").alias("committed_at"),
            F.col("_c.offsets_partition").alias("offsets_partition"),
            F.col("_c.log_offset").alias("log_offset"),
        )
    )
    lagged = lag_at_points(points, end_offsets, per_group=True)
    # the committed offsets whose first unconsumed record's time may be asked: every commit's
    # (from the commits, not from `lagged`: a plan that reads it once plans in a fraction)
    wanted = commits.select("topic", "partition", "committed_offset").distinct()
    known = (
        group_lag.where(F.col("first_unconsumed_timestamp").isNotNull())
        .join(wanted, ["topic", "partition", "committed_offset"], "left_semi")
        .groupBy("topic", "partition", "committed_offset")
        .agg(
            F.max_by(
                F.struct(
                    F.col("first_unconsumed_timestamp").alias("at"),
                    F.col("lag_ms_method").alias("method"),
                ),
                F.col("lag_ms_method") == "record",
            ).alias("_known")
        )
    )
    # where no row knows it: the batch header (the record opens its batch), else interpolated
    batches = first_unconsumed_batches(wanted, end_offsets)
    from_header = F.col("batch_first_offset") == F.col("committed_offset")
    estimated = batches.select(
        "topic",
        "partition",
        "committed_offset",
        F.when(from_header, F.col("batch_first_timestamp"))
        .otherwise(F.timestamp_millis(F.col("interpolated_ms")))
        .alias("_estimate_at"),
        F.when(from_header, F.lit("record"))
        .when(F.col("interpolated_ms").isNotNull(), F.lit("interpolated"))
        .alias("_estimate_method"),
    )
    tp_o = ["topic", "partition", "committed_offset"]
    unknown = F.col("truncated") | F.col("lag_records").isNull()
    behind = ~unknown & (F.col("lag_records") > 0)
    first_at = F.coalesce("_known.at", "_estimate_at")
    next_change = Window.partitionBy(*TIMELINE_KEY).orderBy("at")
    return (
        lagged.join(known, tp_o, "left")
        .join(estimated, tp_o, "left")
        .select(
            *TIMELINE_KEY,
            F.col("at").alias("valid_from"),
            F.lead("at").over(next_change).alias("valid_until"),
            "committed_offset",
            "committed_at",
            "offsets_partition",
            F.col("log_offset").alias("commit_log_offset"),
            "end_offset",
            "end_offset_at",
            "topic_id",
            "lag_records",
            "truncated",
            F.when(behind, first_at).alias("first_unconsumed_at"),
            F.when(F.col("lag_records").isNull() & ~F.col("truncated"), F.lit("end_offset_unknown"))
            .when(F.col("truncated"), F.lit(None))
            .when(~behind, F.lit("caught_up"))
            .when(first_at.isNotNull(), F.coalesce("_known.method", "_estimate_method"))
            .alias("lag_ms_method"),
        )
    )


def lag_at_instants(timeline: DataFrame, probes: DataFrame) -> DataFrame:
    """The lag of groups at given instants, per topic partition they had committed by then:
    probes (group_id, at, any other columns), timeline from `lag_timeline`. Columns: the
    probe's, topic, partition, committed_offset, end_offset, lag_records, lag_ms,
    lag_ms_method, committed_at, end_offset_at, truncated, offsets_partition."""
    keep = [c for c in timeline.columns if c not in ("group_id", "valid_from", "valid_until")]
    t = timeline.alias("t")
    p = probes.alias("p")
    within = (
        (F.col("t.group_id") == F.col("p.group_id"))
        & (F.col("t.valid_from") <= F.col("p.at"))
        & (F.col("t.valid_until").isNull() | (F.col("p.at") < F.col("t.valid_until")))
    )
    columns = [
        "topic",
        "partition",
        "committed_offset",
        "end_offset",
        "lag_records",
        "lag_ms",
        "lag_ms_method",
        "committed_at",
        "end_offset_at",
        "truncated",
        "offsets_partition",
    ]
    return (
        p.join(t, within)
        .select("p.*", *[F.col(f"t.{c}") for c in keep])
        .withColumn("lag_ms", F.expr(LAG_MS_AT))
        .select(*probes.columns, *columns)
    )
