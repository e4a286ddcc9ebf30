"""Group state from the offsets_log: a per-group fold (lib.replay.groups) run in Python
workers over the group records only, sorted by group and log offset."""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from schemas.tables import CONSUMER_GROUPS

FOLD_INPUT = ["offsets_partition", "group_id", "log_offset", "record_type", "is_tombstone", "member_id",
              "group_metadata", "value_json", "raw_key"]


def _fold_groups(batches):
    import pyarrow as pa

    from lib.replay.groups import GroupFold, GroupReplayError
    from lib.transform.decode import worker_error

    schema = CONSUMER_GROUPS.arrow_schema
    out: list[dict] = []
    current: GroupFold | None = None
    current_key = None

    def flush():
        if current is not None:
            row = current.result()
            if row is not None:
                out.append(row)

    for batch in batches:
        for row in batch.to_pylist():
            key = (row["offsets_partition"], row["group_id"])
            if key != current_key:
                flush()
                current = GroupFold(row["group_id"])
                current_key = key
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


def replay_groups(log: DataFrame) -> DataFrame:
    """consumer_groups rows for every group that exists after replay (before expiry)."""
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
    events = group_records.unionByName(last_commit, allowMissingColumns=True)
    return (events.repartition("offsets_partition", "group_id")
            .sortWithinPartitions("offsets_partition", "group_id", "log_offset")
            .mapInArrow(_fold_groups, CONSUMER_GROUPS.ddl))
