"""Shared fixtures: one local SparkSession for the whole test session, and a helper that
replays hand-built logs into a temporary warehouse and returns the tables as plain rows."""

from __future__ import annotations

import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from lib.replay.expiry import DEFAULT_RETENTION_MINUTES  # noqa: E402 - after the path


@pytest.fixture(scope="session")
def spark():
    from lib.spark.session import build_session

    session = build_session(
        "offsets-lake-tests",
        {
            "spark.master": "local[2]",
            # one session for every test: Spark's and Delta's caches grow with the tables touched
            "spark.driver.memory": "2g",
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.sql.adaptive.enabled": "false",
            "spark.databricks.delta.snapshotPartitions": "1",
        },
        # hadoop-aws on the class path: tests/s3 reads s3a:// tables with this session
        object_store=True,
    )
    yield session
    session.stop()


@pytest.fixture(scope="module", autouse=True)
def _forget_delta_snapshots():
    """After each module, drop Delta's cache of table snapshots in the shared session: every
    table a test touched stays cached otherwise, and 400 tests' worth outgrew the driver's heap
    (a broadcast in tests/test_quality.py then failed for lack of memory)."""
    yield
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context
    if sc is not None:
        sc._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()


@pytest.fixture(scope="session")
def replay_logdir(spark):
    """replay_logdir(log_dir, warehouse, now_ms, retention_minutes=DEFAULT_RETENTION_MINUTES, partitions=None) -> RunResult"""
    from lib.source.logdir import find_partitions
    from lib.spark.pipeline import run_replay

    def run(log_dir, warehouse, now_ms, retention_minutes=DEFAULT_RETENTION_MINUTES, partitions=None):
        return run_replay(spark, find_partitions(str(log_dir), partitions), str(warehouse), now_ms, retention_minutes)

    return run


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory, spark):
    """One S3Proxy for the test session; the shared Spark session and this process's
    lib.storage point at it (as a job's --conf spark.hadoop.fs.s3a.* would)."""
    from lib import storage
    from lib.spark.session import configure_object_store
    from tests.s3.s3_server import S3Server

    server = S3Server(str(tmp_path_factory.mktemp("s3proxy"))).start()
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in server.hadoop_conf().items():
        hadoop.set(key, value)
    configure_object_store(spark)
    yield server
    storage.configure(None)
    server.stop()
