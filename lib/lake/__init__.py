"""The Delta tables without Spark: one offsets partition's task (read, decode, replay, write
its Parquet files, lib.lake.partition_task), the warehouse's writer lock and the errors a
worker sends back. May import lib.codec, lib.decode, lib.replay, lib.source; never pyspark."""
