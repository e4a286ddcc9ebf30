"""The Delta tables as Spark DataFrames (the audits and the report). Everything else about the
tables (reads of the log, commits, rollback) is JVM-free, in lib.lake.delta."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from lib.lake.delta import table_path
from schemas.tables import Table


def read_table(spark: SparkSession, warehouse: str, table: Table | str) -> DataFrame:
    return spark.read.format("delta").load(table_path(warehouse, table))
