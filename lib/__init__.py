"""offsets-lake library: pure, importable without side effects.

lib.codec      bytes -> records (never imports pyspark)
lib.logdir     finding __consumer_offsets partitions and segments in a broker log dir
lib.replay     the group coordinator's replay rules: one partition in log order (replay.partition,
               compiled; used by the Spark tasks and the coordinator) and the record-by-record
               reference (replay.offsets, replay.groups)
lib.partition_task  one Spark task's work: one offsets partition read, replayed and written once
lib.pipeline   the run: plans the tasks, commits their files (imports pyspark)
lib.transform  DataFrame -> DataFrame functions for the report (imports pyspark)
"""
