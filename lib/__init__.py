"""offsets-lake library: pure, importable without side effects. One subpackage per layer; a
layer imports only the layers above it in this list (tests/test_architecture.py checks the
pyspark-free ones):

lib.storage      where files live: local paths and s3a:// URIs (pyarrow, delta-rs options), the
                 shared bottom of every layer (with lib.numba_cache: the kernels' cache in a zip;
                 lib.allocator: Arrow's memory pool; lib.kept_out: packages a process keeps out)
lib.codec        bytes <-> records: segments, batches, compression, Kafka's record serde (stdlib only)
lib.assignors    Kafka's Java client assignors (range, roundrobin, sticky, cooperative-sticky) in
                 Python, and the assignment audit of group histories (stdlib only); fast.py: the
                 same assignors as batched numba kernels (numpy, numba)
lib.decode       records -> Arrow rows in the offsets_log schema (pyarrow, numba)
lib.replay       Kafka's rules: offsets, transactions, tombstones, groups, expiry, partitioning;
                 the compiled one-partition engine; the Spark-expression twins (*_spark.py)
lib.source       where logs come from: a broker's log dir, an archive, the live topic
lib.lake         the Delta tables without Spark: one partition's task (read, replay, write its
                 files), the Delta reads and commits, the typed seams, the writer lock, worker errors
lib.coordinator  the JVM-free group coordinator: warm start from the tables, then the tail
lib.restore      a group's offsets put back as of an instant: the plan, the cluster's side
lib.spark        SparkSession, the run (plan, tasks, commits), the audits' views
lib.reporting    audits, quality suites, the HTML report (Spark SQL)
lib.testdata     log builders and generators for tests, the bench and the sample; kernel
                 warm-up; never imported by the layers above
lib.cli          argument helpers the jobs share
"""
