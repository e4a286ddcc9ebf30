"""offsets-lake library: pure, importable without side effects.

lib.codec      bytes -> records (never imports pyspark)
lib.logdir     finding __consumer_offsets partitions and segments in a broker log dir
lib.replay     the group coordinator's replay rules, as plain Python state (coordinator, tests)
lib.transform  DataFrame -> DataFrame functions (imports pyspark)
"""
