"""Offset commits and transaction markers of the offsets_log as Spark columns, for queries
across partitions (the report, the audits): which rows are offset commits, and what became
of each transactional commit (committed / aborted / pending / cleared). The rules are those
of lib.replay.offsets (spec 4.3-4.4): a transactional commit takes effect at its producer's
next COMMIT marker, unless a tombstone of its key comes first."""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from schemas.records import OFFSET_COMMIT_TYPES

KEY = ["offsets_partition", "group_id", "topic", "partition"]
NO_PRODUCER = -1


def offset_commit_records(log: DataFrame) -> DataFrame:
    """The decoded offset commit records (values and tombstones) of the log: the one filter
    for every Spark rule on offsets (lib.replay.offsets is its record-by-record twin)."""
    return log.filter(
        F.col("record_type").isin(*map(int, OFFSET_COMMIT_TYPES))
        & (F.col("decode_status") == "ok")
        & ~F.col("is_control")
    ).select(
        "offsets_partition",
        "log_offset",
        "log_timestamp",
        "producer_id",
        "is_tombstone",
        "group_id",
        "topic",
        "partition",
        "committed_offset",
        "leader_epoch",
        "metadata",
        "commit_timestamp",
        "expire_timestamp",
        "topic_id",
    )


def classify_transactional(log: DataFrame) -> DataFrame:
    """Transactional offset commits with txn_status committed / aborted / pending / cleared."""
    commits = offset_commit_records(log)
    txn_values = commits.filter((F.col("producer_id") != NO_PRODUCER) & ~F.col("is_tombstone"))
    markers = log.filter(F.col("is_control") & F.col("control_type").isin("COMMIT", "ABORT")).select(
        "offsets_partition", "producer_id", "log_offset", "control_type"
    )
    by_producer = (
        Window.partitionBy("offsets_partition", "producer_id")
        .orderBy("log_offset")
        .rowsBetween(1, Window.unboundedFollowing)
    )
    with_marker = (
        txn_values.withColumn("control_type", F.lit(None).cast("string"))
        .unionByName(markers, allowMissingColumns=True)
        .withColumn(
            "marker_offset",
            F.first(F.when(F.col("control_type").isNotNull(), F.col("log_offset")), ignorenulls=True).over(by_producer),
        )
        .withColumn("marker_type", F.first("control_type", ignorenulls=True).over(by_producer))
        .filter(F.col("control_type").isNull())
        .drop("control_type")
    )
    # The first tombstone of the same key after each transactional value clears it if it
    # comes before the marker.
    tombstones = commits.filter(F.col("is_tombstone")).select(*KEY, "log_offset", "is_tombstone")
    by_key = Window.partitionBy(*KEY).orderBy("log_offset").rowsBetween(1, Window.unboundedFollowing)
    classified = (
        with_marker.unionByName(tombstones, allowMissingColumns=True)
        .withColumn(
            "next_tombstone", F.first(F.when(F.col("is_tombstone"), F.col("log_offset")), ignorenulls=True).over(by_key)
        )
        .filter(~F.col("is_tombstone"))
    )
    cleared = F.col("next_tombstone").isNotNull() & (
        F.col("marker_offset").isNull() | (F.col("next_tombstone") < F.col("marker_offset"))
    )
    return classified.withColumn(
        "txn_status",
        F.when(cleared, "cleared")
        .when(F.col("marker_type") == "COMMIT", "committed")
        .when(F.col("marker_type") == "ABORT", "aborted")
        .otherwise("pending"),
    )
