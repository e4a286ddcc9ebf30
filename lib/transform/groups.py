"""Group state from the offsets_log: a per-group fold (lib.replay.groups) run in Python
workers over the group records only, sorted by group and log offset. An incremental run
starts each group from the fold state the previous run left (group_fold_state)."""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from schemas.tables import CONSUMER_GROUPS

FOLD_INPUT = ["offsets_partition", "group_id", "log_offset", "record_type", "is_tombstone", "member_id",
              "group_metadata", "value_json", "raw_key"]
FOLD_OUTPUT = CONSUMER_GROUPS.ddl + ", fold_state STRING"


def _fold_groups(batches, topic_names: dict | None = None):
    import pyarrow as pa

    from lib.replay.groups import GroupFold, GroupReplayError
    from lib.transform.decode import worker_error
    from schemas.types import arrow_type

    schema = pa.schema(list(CONSUMER_GROUPS.arrow_schema) + [pa.field("fold_state", arrow_type("STRING"))])
    out: list[dict] = []
    current: GroupFold | None = None
    current_key = None

    def flush():
        if current is not None:
            row = current.result(topic_names)
            if row is not None:
                row["fold_state"] = current.to_state()
                out.append(row)

    for batch in batches:
        for row in batch.to_pylist():
            key = (row["offsets_partition"], row["group_id"])
            if key != current_key:
                flush()
                current_key = key
                if row.get("fold_state") is not None:   # the state a previous run left
                    current = GroupFold.from_state(row["group_id"], row["fold_state"], row["offsets_partition"],
                                                   row["log_offset"])
                    continue
                current = GroupFold(row["group_id"])
            try:
                current.apply(row)
            except GroupReplayError as e:
                raise worker_error("GroupReplayError", str(e), partition=row["offsets_partition"],
                                   offset=row["log_offset"]) from None
        if len(out) >= 4096:
            yield pa.RecordBatch.from_pylist(out, schema=schema)
            out = []
    flush()
    if out:
        yield pa.RecordBatch.from_pylist(out, schema=schema)


def topic_names_by_id(log: DataFrame) -> dict[str, str]:
    """Topic ids -> names as seen in offset commits (v4 values carry the topic id since 4.1).
    KIP-848 assignments name topics by id only. One row per topic: small enough to collect."""
    pairs = (log.filter(F.col("topic_id").isNotNull()).select("topic_id", "topic").distinct().collect())
    return {r["topic_id"]: r["topic"] for r in pairs}


def replay_groups(log: DataFrame, topic_names: dict[str, str] | None = None,
                  previous_state: DataFrame | None = None) -> DataFrame:
    """consumer_groups rows (before expiry) plus a `fold_state` column, for every group that
    exists after replaying `log` on top of `previous_state` (offsets_partition, group_id,
    log_offset, fold_state). `topic_names` (topic id -> name) resolves KIP-848 assignments."""
    names = dict(topic_names or {})
    group_records = (log.filter(~F.col("is_control") & (F.col("decode_status") == "ok")
                                & ~F.col("record_type").isin(0, 1))
                     .select(*FOLD_INPUT))
    # An offset commit creates a simple classic group when none exists; the last one per group
    # is enough to reproduce that (see lib.replay.groups).
    last_commit = (log.filter(F.col("record_type").isin(0, 1) & ~F.col("is_tombstone") & ~F.col("is_control")
                              & (F.col("decode_status") == "ok"))
                   .groupBy("offsets_partition", "group_id")
                   .agg(F.max("log_offset").alias("log_offset"))
                   .select("offsets_partition", "group_id", "log_offset",
                           F.lit(1).cast("smallint").alias("record_type"), F.lit(False).alias("is_tombstone")))
    events = group_records.unionByName(last_commit, allowMissingColumns=True) \
        .withColumn("fold_state", F.lit(None).cast("string")).withColumn("_order", F.lit(1))
    if previous_state is not None:
        events = events.unionByName(previous_state.select("offsets_partition", "group_id", "log_offset",
                                                          "fold_state", F.lit(0).alias("_order")),
                                    allowMissingColumns=True)
    return (events.repartition("offsets_partition", "group_id")
            .sortWithinPartitions("offsets_partition", "group_id", "_order", "log_offset")
            .drop("_order")
            .mapInArrow(lambda batches: _fold_groups(batches, names), FOLD_OUTPUT))
