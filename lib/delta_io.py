"""Writing the Delta tables: each table commit replaces exactly the offsets partitions a run
read, in one Delta transaction (replaceWhere), so a reader sees the old or the new state."""
from __future__ import annotations

import os

from pyspark.sql import DataFrame, SparkSession

from schemas.tables import Table


def table_path(warehouse: str, table: Table | str) -> str:
    return os.path.join(warehouse, table if isinstance(table, str) else table.name)


def table_exists(spark: SparkSession, path: str) -> bool:
    from delta.tables import DeltaTable
    return DeltaTable.isDeltaTable(spark, path)


def partitions_predicate(partitions: list[int]) -> str:
    return f"offsets_partition IN ({', '.join(str(int(p)) for p in sorted(partitions))})"


def replace_partitions(df: DataFrame, path: str, table: Table, partitions: list[int], run_id: str) -> None:
    """Overwrite the rows of `partitions` with `df` (whose rows all belong to them)."""
    writer = (df.select(*table.column_names).write.format("delta").mode("overwrite")
              .option("replaceWhere", partitions_predicate(partitions))
              .option("userMetadata", f"offsets-lake run {run_id}"))
    if table.partition_by:
        writer = writer.partitionBy(*table.partition_by)
    writer.save(path)


def read_table(spark: SparkSession, warehouse: str, table: Table | str) -> DataFrame:
    return spark.read.format("delta").load(table_path(warehouse, table))
