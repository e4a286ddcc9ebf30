"""Offset commits and transaction markers of the offsets_log as Spark columns, for queries
across partitions (the report, the audits): which rows are offset commits, and what became
of each transactional commit (committed / aborted / pending / cleared / superseded /
outdated). The rules are those of lib.replay.offsets (spec 4.3-4.4), which the replay engine
applies record by record; tests/test_effective_commits.py holds the two to the same answer."""

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
    """Transactional offset commits with txn_status committed / aborted / pending / cleared /
    superseded / outdated, marker_offset and marker_timestamp (the producer's next COMMIT or
    ABORT marker). As the loader decides (lib.replay.offsets): a commit waits for its
    producer's next marker; a tombstone of its key before the marker clears it; a later
    commit of the same producer for the key before the marker supersedes it (the pending
    entry is replaced); at a COMMIT it takes effect only if its record is newer than the
    offset in effect for the key (outdated otherwise: a plain commit, or another producer's
    transaction committed first, wrote a newer record)."""
    commits = offset_commit_records(log)
    txn_values = commits.filter((F.col("producer_id") != NO_PRODUCER) & ~F.col("is_tombstone"))
    markers = log.filter(F.col("is_control") & F.col("control_type").isin("COMMIT", "ABORT")).select(
        "offsets_partition",
        "producer_id",
        "log_offset",
        F.struct(
            F.col("log_offset").alias("offset"),
            F.col("control_type").alias("type"),
            F.col("log_timestamp").alias("timestamp"),
        ).alias("_marker"),
    )
    by_producer = (
        Window.partitionBy("offsets_partition", "producer_id")
        .orderBy("log_offset")
        .rowsBetween(1, Window.unboundedFollowing)
    )
    with_marker = (
        txn_values.withColumn("_marker", F.lit(None).cast(markers.schema["_marker"].dataType))
        .withColumn("_is_marker", F.lit(False))
        .unionByName(markers.withColumn("_is_marker", F.lit(True)), allowMissingColumns=True)
        .withColumn("_next", F.first("_marker", ignorenulls=True).over(by_producer))
        .filter(~F.col("_is_marker"))
        .select(
            *txn_values.columns,
            F.col("_next.offset").alias("marker_offset"),
            F.col("_next.type").alias("marker_type"),
            F.col("_next.timestamp").alias("marker_timestamp"),
        )
    )
    # per key, in log order: the first tombstone after each record, the next record of the
    # same producer, and the earliest moment a newer record of the key takes effect (a plain
    # commit at its record, a transactional one at its COMMIT marker)
    plain = commits.filter((F.col("producer_id") == NO_PRODUCER) & ~F.col("is_tombstone")).select(
        *KEY, "log_offset", F.col("log_offset").alias("_effect"), F.lit("plain").alias("_kind")
    )
    tombstones = commits.filter(F.col("is_tombstone")).select(*KEY, "log_offset", F.lit("tombstone").alias("_kind"))
    rows = with_marker.withColumn("_kind", F.lit("txn")).withColumn(
        "_effect", F.when(F.col("marker_type") == "COMMIT", F.col("marker_offset"))
    )
    after = Window.partitionBy(*KEY).orderBy("log_offset").rowsBetween(1, Window.unboundedFollowing)
    same_producer = Window.partitionBy(*KEY, "producer_id").orderBy("log_offset")
    classified = (
        rows.unionByName(plain, allowMissingColumns=True)
        .unionByName(tombstones, allowMissingColumns=True)
        .withColumn("next_tombstone", F.min(F.when(F.col("_kind") == "tombstone", F.col("log_offset"))).over(after))
        .withColumn("_newer_effect", F.min("_effect").over(after))
        .filter(F.col("_kind") == "txn")
        .withColumn("_next_same_producer", F.lead("log_offset").over(same_producer))
    )
    marker = F.col("marker_offset")
    cleared = F.col("next_tombstone").isNotNull() & (marker.isNull() | (F.col("next_tombstone") < marker))
    superseded = F.col("_next_same_producer").isNotNull() & (marker.isNull() | (F.col("_next_same_producer") < marker))
    outdated = F.col("_newer_effect").isNotNull() & (F.col("_newer_effect") < marker)
    return classified.select(
        *with_marker.columns,
        "next_tombstone",
        F.when(cleared, "cleared")
        .when(superseded, "superseded")
        .when(F.col("marker_type") == "ABORT", "aborted")
        .when(marker.isNull(), "pending")
        .when(outdated, "outdated")
        .otherwise("committed")
        .alias("txn_status"),
    )


def offset_effects(log: DataFrame) -> DataFrame:
    """Every change to a key's committed offset, in the order the loader makes them: the offset
    commits that took effect (kind 'commit': a plain one at its record, a transactional one at
    its COMMIT marker when classify_transactional says committed) and the offset tombstones
    (kind 'tombstone', at their record). The committed offset of a key as of an instant is its
    last effect (highest applied_offset) applied at or before it: a commit, or nothing after a
    tombstone. Columns: offsets_partition, group_id, topic, partition, kind, committed_offset,
    leader_epoch, metadata, commit_timestamp, expire_timestamp, producer_id, transactional,
    record_log_offset, record_time, applied_offset, applied_at. The view `offset_effects` of
    the SQL audits, the report's commits and group_lag's commit rows (the engine) agree on it
    (tests/test_effective_commits.py)."""
    commits = offset_commit_records(log).filter(F.col("group_id").isNotNull())
    value = [
        "committed_offset",
        "leader_epoch",
        "metadata",
        "commit_timestamp",
        "expire_timestamp",
        "producer_id",
    ]
    # a record written without a timestamp (message format v0) is dated by its commit
    record_time = F.coalesce("log_timestamp", "commit_timestamp")
    at_record = commits.filter((F.col("producer_id") == NO_PRODUCER) | F.col("is_tombstone")).select(
        *KEY,
        F.when(F.col("is_tombstone"), "tombstone").otherwise("commit").alias("kind"),
        *value,
        F.lit(False).alias("transactional"),
        F.col("log_offset").alias("record_log_offset"),
        record_time.alias("record_time"),
        F.col("log_offset").alias("applied_offset"),
        record_time.alias("applied_at"),
    )
    at_marker = (
        classify_transactional(log)
        .filter((F.col("txn_status") == "committed") & F.col("group_id").isNotNull())
        .select(
            *KEY,
            F.lit("commit").alias("kind"),
            *value,
            F.lit(True).alias("transactional"),
            F.col("log_offset").alias("record_log_offset"),
            record_time.alias("record_time"),
            F.col("marker_offset").alias("applied_offset"),
            F.col("marker_timestamp").alias("applied_at"),
        )
    )
    return at_record.unionByName(at_marker)
