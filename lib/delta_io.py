"""Writing and reading the Delta tables. Each table commit names its run in the commit's
userMetadata, so a later run can read every table as of the last run that completed."""
from __future__ import annotations

import os

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from schemas.tables import Table

RUN_TAG = "offsets-lake run "


def table_path(warehouse: str, table: Table | str) -> str:
    return os.path.join(warehouse, table if isinstance(table, str) else table.name)


def table_exists(spark: SparkSession, path: str) -> bool:
    from delta.tables import DeltaTable
    return DeltaTable.isDeltaTable(spark, path)


def partitions_predicate(partitions: list[int], alias: str = "") -> str:
    col = f"{alias}.offsets_partition" if alias else "offsets_partition"
    return f"{col} IN ({', '.join(str(int(p)) for p in sorted(partitions))})"


def replace_partitions(df: DataFrame, path: str, table: Table, partitions: list[int], run_id: str) -> None:
    """Overwrite the rows of `partitions` with `df` (whose rows all belong to them): one commit."""
    writer = (df.select(*table.column_names).write.format("delta").mode("overwrite")
              .option("replaceWhere", partitions_predicate(partitions))
              .option("userMetadata", RUN_TAG + run_id))
    if table.partition_by:
        writer = writer.partitionBy(*table.partition_by)
    writer.save(path)


def append_new_records(spark: SparkSession, df: DataFrame, path: str, table: Table, start_offsets: dict[int, int],
                       run_id: str) -> None:
    """Insert the rows of `df` not yet in the table, keyed by (offsets_partition, log_offset):
    one MERGE commit, idempotent, so a run redone after a crash never duplicates records. The
    start offsets bound the scan to the files that can hold them."""
    from delta.tables import DeltaTable

    if not table_exists(spark, path):
        replace_partitions(df, path, table, sorted(start_offsets), run_id)
        return
    bound = " OR ".join(f"(t.offsets_partition = {int(p)} AND t.log_offset >= {int(o)})"
                        for p, o in sorted(start_offsets.items()))
    spark.conf.set("spark.databricks.delta.commitInfo.userMetadata", RUN_TAG + run_id)
    try:
        (DeltaTable.forPath(spark, path).alias("t")
         .merge(df.select(*table.column_names).alias("s"),
                f"({bound}) AND t.offsets_partition = s.offsets_partition AND t.log_offset = s.log_offset")
         .whenNotMatchedInsertAll()
         .execute())
    finally:
        spark.conf.unset("spark.databricks.delta.commitInfo.userMetadata")


def read_table(spark: SparkSession, warehouse: str, table: Table | str) -> DataFrame:
    return spark.read.format("delta").load(table_path(warehouse, table))


def read_as_of_runs(spark: SparkSession, warehouse: str, table: Table, runs: dict[str, list[int]]) -> DataFrame | None:
    """The rows of `table` for each run's partitions, as that run committed them: a run that
    died later may have moved some tables but not the checkpoints. None if the table is absent."""
    from delta.tables import DeltaTable

    path = table_path(warehouse, table)
    if not table_exists(spark, path):
        return None
    history = {r["userMetadata"]: r["version"] for r in
               DeltaTable.forPath(spark, path).history().select("version", "userMetadata").collect()
               if r["userMetadata"]}
    parts = []
    for run_id, partitions in runs.items():
        version = history.get(RUN_TAG + run_id)
        reader = spark.read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", version)
        parts.append(reader.load(path).filter(F.col("offsets_partition").isin(partitions)))
    out = parts[0]
    for p in parts[1:]:
        out = out.unionByName(p)
    return out


def merge_partitions(spark: SparkSession, df: DataFrame, path: str, table: Table, partitions: list[int],
                     run_id: str) -> None:
    """Make the rows of `partitions` equal `df` with one MERGE that touches only what changed:
    changed rows are updated, new ones inserted, vanished ones deleted (keyed by the table's
    key plus offsets_partition). Falls back to a plain write when the table does not exist."""
    from delta.tables import DeltaTable

    if not table_exists(spark, path):
        replace_partitions(df, path, table, partitions, run_id)
        return
    keys = list(dict.fromkeys(("offsets_partition",) + table.key))
    on = " AND ".join(f"t.{k} = s.{k}" for k in keys)
    in_scope = partitions_predicate(partitions, "t")
    changed = " OR ".join(f"NOT (t.{c} <=> s.{c})" for c in table.column_names if c not in keys)
    spark.conf.set("spark.databricks.delta.commitInfo.userMetadata", RUN_TAG + run_id)
    try:
        (DeltaTable.forPath(spark, path).alias("t")
         .merge(df.select(*table.column_names).alias("s"), f"{in_scope} AND {on}")
         .whenMatchedUpdateAll(condition=changed or None)
         .whenNotMatchedInsertAll()
         .whenNotMatchedBySourceDelete(condition=in_scope)
         .execute())
    finally:
        spark.conf.unset("spark.databricks.delta.commitInfo.userMetadata")
