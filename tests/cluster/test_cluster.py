"""`make submit ARGS="--master spark://..."` against a real Spark standalone cluster (a
master and two one-core workers started here from pyspark's distribution) replays the same
tables as a local run. The code reaches the executors as the built zip (--py-files); the
workers' environment has no PYTHONPATH, and each worker has its own directory."""

from __future__ import annotations

import glob
import os
import subprocess

import pytest

from tests.cluster.spark_cluster import SparkCluster, clean_env
from tests.helpers import REPO, STATE_TABLES, rows

pytestmark = [pytest.mark.spark, pytest.mark.cluster]
SAMPLE = os.path.join(REPO, "samples", "logdir")
SAMPLE_NOW = open(os.path.join(REPO, "samples", "NOW")).read().strip()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = SparkCluster(str(tmp_path_factory.mktemp("spark-cluster"))).start()
    yield c
    c.stop()


def submit(args: str, home: str, env: dict | None = None) -> None:
    done = subprocess.run(
        ["make", "-s", "--no-print-directory", "submit", f"ARGS={args}"],
        cwd=REPO,
        env={**clean_env(home), **(env or {})},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-6000:])


def numba_cache_files(cluster) -> dict[str, int]:
    """Every numba cache file in the workers' homes -> its modification time (ns)."""
    found = glob.glob(os.path.join(cluster.root, "worker*", ".cache", "numba", "*", "*"))
    folders = {os.path.basename(os.path.dirname(p)) for p in found}
    assert all(f.startswith("offsets_lake_zip_lib_") for f in folders), folders
    return {p: os.stat(p).st_mtime_ns for p in found}


def content(spark, warehouse: str, table: str, drop: set | frozenset = frozenset()) -> list:
    drop = {"run_id", "finished_at", *drop}  # the run's own
    return sorted(
        tuple(sorted((k, repr(v)) for k, v in r.items() if k not in drop)) for r in rows(spark, warehouse, table)
    )


@pytest.fixture(scope="module")
def local_run(spark, tmp_path_factory) -> str:
    from lib.cli import parse_time_ms  # the same --now the job parses
    from lib.source.logdir import find_partitions
    from lib.spark.pipeline import run_replay

    local = str(tmp_path_factory.mktemp("cluster-local") / "wh")
    run_replay(spark, find_partitions(SAMPLE), local, parse_time_ms(SAMPLE_NOW), full=True)
    return local


def test_a_replay_on_the_cluster_equals_a_local_run(cluster, spark, local_run, tmp_path):
    on_cluster = tmp_path / "on-cluster"
    submit(
        f"--master {cluster.url} --input {SAMPLE} --warehouse {on_cluster} --full --now {SAMPLE_NOW} --quiet",
        str(tmp_path / "driver-home"),
    )
    # executors ran on both workers, each in its own directory, with the code Spark shipped
    shipped = glob.glob(os.path.join(cluster.root, "worker*", "work", "app-*", "*", "offsets_lake.zip"))
    assert sorted(p.split(os.sep)[-5] for p in shipped) == ["worker0", "worker1"]
    for table in (*STATE_TABLES, "replay_checkpoints"):
        assert content(spark, str(on_cluster), table) == content(spark, local_run, table), table


@pytest.mark.s3
def test_a_replay_on_the_cluster_from_a_bucket_into_a_bucket_equals_a_local_run(
    cluster, spark, local_run, s3_server, tmp_path
):
    """The driver is told about the store by the AWS environment only; the executors, which do
    not share it, get the settings inside their tasks."""
    # the executors' numba cache of the application before (the test above, when it ran): keyed
    # by the module's path inside the zip, so this application loads it instead of compiling
    cached_before = numba_cache_files(cluster)
    s3_server.make_bucket("cluster-archive")
    logs = s3_server.upload_dir(SAMPLE, "s3a://cluster-archive/broker-0")
    s3_server.make_bucket("cluster-lake")
    wh = "s3a://cluster-lake/wh"
    submit(
        f"--master {cluster.url} --input {logs} --warehouse {wh} --full --now {SAMPLE_NOW} --quiet",
        str(tmp_path / "driver-home"),
        s3_server.env,
    )
    for table in STATE_TABLES:
        assert content(spark, wh, table) == content(spark, local_run, table), table
    if cached_before:
        # what the first application compiled is loaded, not compiled again: each compiled
        # signature's code file (.nbc) is untouched. A worker may compile a kernel or a helper's
        # signature it did not meet before (which partitions a worker gets differs between runs),
        # and numba then rewrites that function's index (.nbi), so the indexes are not compared
        after = numba_cache_files(cluster)
        code_before = {f: t for f, t in cached_before.items() if f.endswith(".nbc")}
        assert code_before
        assert {f: after.get(f) for f in code_before} == code_before
    # the source signature holds the segment's modification time: the object's, not the file's
    ignore = {"source_signature"}
    assert content(spark, wh, "replay_checkpoints", ignore) == content(spark, local_run, "replay_checkpoints", ignore)
