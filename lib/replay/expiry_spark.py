"""Offset expiry and group deletion as of a chosen time (spec 4.7), the way the coordinator's
periodic cleanup (GroupCoordinatorShard.cleanupGroupMetadata) would decide at `now_ms`."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from schemas.tables import GROUP_OFFSETS


def _ms(col):
    return F.unix_millis(col)


def group_columns(groups: DataFrame) -> DataFrame:
    """consumer_groups rows as the columns the expiry rules read once joined to offsets on
    (offsets_partition, group_id): _type, _protocol_type, _state, _state_ts, _subscribed."""
    return groups.select(
        "offsets_partition",
        "group_id",
        F.col("group_type").alias("_type"),
        F.col("protocol_type").alias("_protocol_type"),
        F.col("state").alias("_state"),
        F.col("current_state_timestamp").alias("_state_ts"),
        F.col("subscribed_topics").alias("_subscribed"),
    )


# Columns of an offset joined with group_columns.
def _based_on_state_timestamp():
    """A classic group with a protocol that is Empty: its offsets expire from the time it
    became empty (ClassicGroup's currentStateTimestamp), else from their commit."""
    return (F.col("_type") == "classic") & F.col("_protocol_type").isNotNull() & (F.col("_state") == "Empty")


def base_ms_column():
    """The instant retention counts from, in epoch ms."""
    commit_ms = _ms(F.col("commit_timestamp"))
    return F.when(_based_on_state_timestamp(), F.coalesce(_ms(F.col("_state_ts")), commit_ms)).otherwise(commit_ms)


def due_ms_column(retention_ms: int):
    """When an eligible offset expires, in epoch ms: its explicit expiry, else base + retention."""
    return F.coalesce(_ms(F.col("expire_timestamp")), base_ms_column() + F.lit(retention_ms))


def due_reason_column():
    """Which rule gives due_ms_column, in words."""
    return (
        F.when(F.col("expire_timestamp").isNotNull(), "expire_timestamp")
        .when(_based_on_state_timestamp(), "empty since + retention")
        .otherwise("commit + retention")
    )


def judge_offsets(
    offsets: DataFrame, groups: DataFrame, pending: DataFrame, now_ms: int, retention_ms: int
) -> DataFrame:
    """The offsets with a boolean `expired` column: would the cleanup tombstone them at now_ms?"""
    g = group_columns(groups)
    pending_keys = (
        pending.select("offsets_partition", "group_id", "topic", "partition")
        .distinct()
        .withColumn("_pending", F.lit(True))
    )
    # Offsets whose group is gone (a group tombstone came after them, and no commit since) are
    # kept by Kafka 4.x but belong to no group: never visited by the cleanup, never expired.
    o = offsets.join(g, ["offsets_partition", "group_id"], "left").join(
        pending_keys, ["offsets_partition", "group_id", "topic", "partition"], "left"
    )
    is_simple = (F.col("_type") == "classic") & F.col("_protocol_type").isNull()
    subscribed = F.coalesce(F.array_contains(F.col("_subscribed"), F.col("topic")), F.lit(False))
    # (eligible, base timestamp) per group kind, as in each group's offsetExpirationCondition
    eligible = (
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
    base_ms = base_ms_column()
    is_expired = (
        eligible
        & F.col("_pending").isNull()
        & F.when(F.col("expire_timestamp").isNotNull(), F.lit(now_ms) >= _ms(F.col("expire_timestamp"))).otherwise(
            F.lit(now_ms) - base_ms >= F.lit(retention_ms)
        )
    )
    return o.select(*GROUP_OFFSETS.column_names, F.coalesce(is_expired, F.lit(False)).alias("expired"))


def judge_groups(groups: DataFrame, judged_offsets: DataFrame, pending: DataFrame) -> DataFrame:
    """The groups with a boolean `deleted` column.

    A group is deleted when all its offsets expired (or it has none), it has no open
    transaction, and it is empty (share groups are never deleted by the cleanup since 4.1)."""
    survivors = (
        judged_offsets.filter(~F.col("expired"))
        .select("offsets_partition", "group_id")
        .distinct()
        .withColumn("_has_live", F.lit(True))
    )
    open_txn = pending.select("offsets_partition", "group_id").distinct().withColumn("_open_txn", F.lit(True))
    judged = (
        groups.join(survivors, ["offsets_partition", "group_id"], "left")
        .join(open_txn, ["offsets_partition", "group_id"], "left")
        .withColumn(
            "_deleted",
            F.col("_has_live").isNull()
            & F.col("_open_txn").isNull()
            & (F.col("state") == "Empty")
            & (F.col("group_type") != "share"),
        )
    )
    return judged.select(*groups.columns, F.col("_deleted").alias("deleted"))
