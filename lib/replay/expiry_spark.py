"""Offset expiry and group deletion as of a chosen time (spec 4.7), the way the coordinator's
periodic cleanup (GroupCoordinatorShard.cleanupGroupMetadata) would decide at `now_ms`.

`offset_expiry` and `group_expiry` hold the rules (which offsets the cleanup may expire, from
when retention counts, which groups it may delete); the SQL audit `groups_expiring_within`
selects from them as views (lib.spark.audit_views), the report judges with them
(`judge_offsets`, `judge_groups`), and the replay engine (PartitionReplay._judge_offsets) is
their record-by-record twin (tests/test_replay_rules.py, the expiry parity test)."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from schemas.tables import GROUP_OFFSETS

# When an offset expires: its explicit expiry, else retention after its base. One text for the
# SQL function `expiry_due` the audits call and for the DataFrames here.
EXPIRY_DUE = "coalesce(expire_timestamp, timestamp_millis(unix_millis(retention_base) + retention_ms))"
EXPIRY_DUE_FUNCTION = (
    "CREATE OR REPLACE TEMPORARY FUNCTION expiry_due(expire_timestamp TIMESTAMP, retention_base TIMESTAMP, "
    f"retention_ms BIGINT) RETURNS TIMESTAMP RETURN {EXPIRY_DUE}"
)
# basis: what the due time counts from
BASIS = ("expire_timestamp", "current_state_timestamp", "commit_timestamp")
KEY = ["offsets_partition", "group_id"]


def _group_columns(groups: DataFrame) -> DataFrame:
    return groups.select(
        *KEY,
        F.col("group_type").alias("_type"),
        F.col("protocol_type").alias("_protocol_type"),
        F.col("state").alias("_state"),
        F.col("current_state_timestamp").alias("_state_ts"),
        F.col("subscribed_topics").alias("_subscribed"),
    )


def offset_expiry(offsets: DataFrame, groups: DataFrame, pending: DataFrame) -> DataFrame:
    """Every current offset (group_offsets columns) with its group's group_type and state, and:
    eligible (may the cleanup expire it at all: by each group kind's
    offsetExpirationCondition, never with a pending transactional commit of its key, never
    when its group is gone), basis (one of BASIS) and retention_base (the instant retention
    counts from: the group's current_state_timestamp for an Empty classic group with a
    protocol, else the commit). Its due time is EXPIRY_DUE."""
    pending_keys = pending.select(*KEY, "topic", "partition").distinct().withColumn("_pending", F.lit(True))
    # Offsets whose group is gone (a group tombstone came after them, and no commit since) are
    # kept by Kafka 4.x but belong to no group: never visited by the cleanup, never expired.
    o = offsets.join(_group_columns(groups), KEY, "left").join(pending_keys, [*KEY, "topic", "partition"], "left")
    is_simple = (F.col("_type") == "classic") & F.col("_protocol_type").isNull()
    subscribed = F.coalesce(F.array_contains(F.col("_subscribed"), F.col("topic")), F.lit(False))
    by_kind = (
        F.when(F.col("_type").isNull(), False)
        .when(is_simple, True)
        .when((F.col("_type") == "classic") & (F.col("_state") == "Empty"), True)
        .when(
            (F.col("_type") == "classic")
            & (F.col("_protocol_type") == "consumer")
            & (F.col("_state") == "Stable")
            & F.col("_subscribed").isNotNull(),
            ~subscribed,
        )
        .when(F.col("_type") == "classic", False)
        .when(F.col("_type") == "consumer", ~subscribed)
        .when(F.col("_type") == "streams", (F.col("_state") == "Empty") | ~subscribed)
        .otherwise(False)
    )
    # a classic group with a protocol that is Empty: its offsets expire from the time it became
    # empty (ClassicGroup's currentStateTimestamp), else from their commit
    from_state = (
        (F.col("_type") == "classic")
        & F.col("_protocol_type").isNotNull()
        & (F.col("_state") == "Empty")
        & F.col("_state_ts").isNotNull()
    )
    return o.select(
        *GROUP_OFFSETS.column_names,
        F.col("_type").alias("group_type"),
        F.col("_state").alias("state"),
        F.coalesce(by_kind & F.col("_pending").isNull(), F.lit(False)).alias("eligible"),
        F.when(F.col("expire_timestamp").isNotNull(), BASIS[0])
        .when(from_state, BASIS[1])
        .otherwise(BASIS[2])
        .alias("basis"),
        F.when(from_state, F.col("_state_ts")).otherwise(F.col("commit_timestamp")).alias("retention_base"),
    )


def due_column(retention_ms: int):
    """EXPIRY_DUE over offset_expiry's columns, as a column."""
    return F.expr(EXPIRY_DUE.replace("retention_ms", f"CAST({int(retention_ms)} AS BIGINT)"))


def group_expiry(groups: DataFrame, pending: DataFrame) -> DataFrame:
    """Every group (consumer_groups columns) with open_transaction and deletable: once all its
    offsets have expired (or it has none) the cleanup deletes it if it is Empty, has no open
    transaction and is not a share group (never deleted by the cleanup since 4.1)."""
    open_txn = pending.select(*KEY).distinct().withColumn("_open_txn", F.lit(True))
    return (
        groups.join(open_txn, KEY, "left")
        .withColumn("open_transaction", F.col("_open_txn").isNotNull())
        .withColumn(
            "deletable",
            ~F.col("open_transaction") & (F.col("state") == "Empty") & (F.col("group_type") != "share"),
        )
        .drop("_open_txn")
    )


def judge_offsets(
    offsets: DataFrame, groups: DataFrame, pending: DataFrame, now_ms: int, retention_ms: int
) -> DataFrame:
    """offset_expiry's rows with due_ms and a boolean `expired`: would the cleanup tombstone
    them at now_ms?"""
    due_ms = F.unix_millis(due_column(retention_ms))
    return (
        offset_expiry(offsets, groups, pending)
        .withColumn("due_ms", due_ms)
        .withColumn("expired", F.col("eligible") & (F.lit(now_ms) >= F.col("due_ms")))
    )


def judge_groups(groups: DataFrame, judged_offsets: DataFrame, pending: DataFrame) -> DataFrame:
    """The groups with a boolean `deleted` column: deletable (group_expiry) and no offset left
    that does not expire."""
    survivors = judged_offsets.filter(~F.col("expired")).select(*KEY).distinct().withColumn("_has_live", F.lit(True))
    judged = group_expiry(groups, pending).join(survivors, KEY, "left")
    return judged.select(*groups.columns, (F.col("deletable") & F.col("_has_live").isNull()).alias("deleted"))
