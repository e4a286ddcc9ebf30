"""Committed and pending offsets from the offsets_log, with Kafka 4.x's rules (spec 4.3-4.4),
in Spark's built-in functions.

The sequential rules reduce to a per-key maximum. Replayed in log order, the committed value
of a key is always the *effective* event with the greatest record offset, where effective
events are: non-transactional commits, tombstones (any producer), and transactional commits
whose producer's next marker is a COMMIT with no tombstone of that key in between (a tombstone
clears pending entries; the COMMIT keeps a pending entry only if its record offset is greater
than the committed one's, which is the same maximum). A transactional commit with neither a
later marker nor a later tombstone is still pending.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from schemas.records import OFFSET_COMMIT_TYPES

KEY = ["offsets_partition", "group_id", "topic", "partition"]
VALUE_COLUMNS = [
    "committed_offset",
    "leader_epoch",
    "metadata",
    "commit_timestamp",
    "expire_timestamp",
    "topic_id",
    "log_offset",
]
NO_PRODUCER = -1


def offset_commit_records(log: DataFrame) -> DataFrame:
    return log.filter(
        F.col("record_type").isin(*map(int, OFFSET_COMMIT_TYPES))
        & (F.col("decode_status") == "ok")
        & ~F.col("is_control")
    ).select(
        "offsets_partition",
        "log_offset",
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


def replay_offsets(log: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(committed offsets, pending transactional offsets) after replaying `log`."""
    commits = offset_commit_records(log)
    txn = classify_transactional(log)
    effective = commits.filter((F.col("producer_id") == NO_PRODUCER) | F.col("is_tombstone")).unionByName(
        txn.filter(F.col("txn_status") == "committed").select(*commits.columns)
    )
    latest = (
        effective.groupBy(*KEY)
        .agg(F.max_by(F.struct("is_tombstone", *VALUE_COLUMNS), F.col("log_offset")).alias("v"))
        .filter(~F.col("v.is_tombstone"))
        .select(
            "group_id",
            "topic",
            "partition",
            *[F.col(f"v.{c}").alias(c) for c in VALUE_COLUMNS[:-1]],
            "offsets_partition",
            F.col("v.log_offset").alias("log_offset"),
        )
    )
    pending = (
        txn.filter(F.col("txn_status") == "pending")
        .groupBy("offsets_partition", "producer_id", "group_id", "topic", "partition")
        .agg(
            F.max_by(
                F.struct("committed_offset", "leader_epoch", "metadata", "commit_timestamp", "log_offset"),
                F.col("log_offset"),
            ).alias("v")
        )
        .select(
            "producer_id",
            "group_id",
            "topic",
            "partition",
            "v.committed_offset",
            "v.leader_epoch",
            "v.metadata",
            "v.commit_timestamp",
            "offsets_partition",
            "v.log_offset",
        )
    )
    return latest, pending
