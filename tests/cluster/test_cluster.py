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


def test_a_replay_on_the_cluster_equals_a_local_run(cluster, spark, tmp_path):
    from lib.source.logdir import find_partitions
    from lib.spark.pipeline import run_replay

    on_cluster = tmp_path / "on-cluster"
    args = f"--master {cluster.url} --input {SAMPLE} --warehouse {on_cluster} --full --now {SAMPLE_NOW} --quiet"
    done = subprocess.run(
        ["make", "-s", "--no-print-directory", "submit", f"ARGS={args}"],
        cwd=REPO,
        env=clean_env(str(tmp_path / "driver-home")),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-6000:])
    # executors ran on both workers, each in its own directory, with the code Spark shipped
    shipped = glob.glob(os.path.join(cluster.root, "worker*", "work", "app-*", "*", "offsets_lake.zip"))
    assert sorted(p.split(os.sep)[-5] for p in shipped) == ["worker0", "worker1"]

    local = tmp_path / "local"
    from lib.cli import parse_time_ms  # the same --now the job parsed

    run_replay(spark, find_partitions(SAMPLE), str(local), parse_time_ms(SAMPLE_NOW), full=True)

    def content(warehouse, table) -> list:
        drop = {"run_id", "finished_at"}  # the run's own
        return sorted(
            tuple(sorted((k, repr(v)) for k, v in r.items() if k not in drop)) for r in rows(spark, warehouse, table)
        )

    for table in (*STATE_TABLES, "replay_checkpoints"):
        assert content(str(on_cluster), table) == content(str(local), table), table
