"""The Airflow DAGs under real Airflow 3, run in its own virtualenv (.venv-airflow, `make
airflow-venv`) through subprocesses: the DAG files parse without errors into exactly the
expected DAGs; the hourly DAG replays the bundled sample end to end with `dag.test()` (local
mode) into a temporary warehouse whose tables are then checked with delta-rs; the maintenance
DAG (spark-submit mode) compacts and vacuums without changing a row or breaking time travel.

Expected numbers come from samples/README.md (nine scenarios, one group deleted with
DeleteGroups, 7 of 50 partitions with records) and the sample's known replay as of
samples/NOW: 8 groups, 24 live offsets, 1 open transactional offset, 90 records."""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.helpers import STATE_TABLES

pytestmark = pytest.mark.airflow

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
AIRFLOW_PY = os.path.join(REPO, ".venv-airflow", "bin", "python")
PROBE = os.path.join(REPO, "tests", "airflow", "airflow_probe.py")
SAMPLE = os.path.join(REPO, "samples", "logdir")
with open(os.path.join(REPO, "samples", "NOW"), encoding="utf-8") as _f:
    SAMPLE_NOW = int(_f.read().strip())
POOL = "offsets_lake_warehouse"
SAMPLE_GROUPS = {
    "sample-classic",
    "sample-static",
    "sample-standalone",
    "sample-emptied",
    "sample-offset-delete",
    "sample-txn",
    "sample-grüße-😀",
    "sample-kip848",
}  # README's nine, minus sample-deleted
TABLES = (*STATE_TABLES, "replay_checkpoints")

if not os.path.exists(AIRFLOW_PY):
    pytest.skip("Airflow's virtualenv is missing: run `make airflow-venv`", allow_module_level=True)


def write_conf(path, **over) -> str:
    """A conf/airflow/offsets_lake.yaml for the test (JSON is YAML)."""
    conf = {
        "mode": "local",
        "repo": REPO,
        "python": ".venv/bin/python",
        "spark_submit": {
            "binary": ".venv/lib/python3.11/site-packages/pyspark/bin/spark-submit",
            "spark_home": ".venv/lib/python3.11/site-packages/pyspark",
            "master": "local[2]",
            "jars_dir": ".jars/spark",
            "conf": {"spark.sql.shuffle.partitions": "2"},
        },
    }
    conf.update(over)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(conf, f)
    return str(path)


@pytest.fixture(scope="module")
def airflow_env(tmp_path_factory):
    """An AIRFLOW_HOME with a migrated sqlite metadata DB and the pool; env for the subprocesses."""
    home = tmp_path_factory.mktemp("airflow_home")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AIRFLOW", "OFFSETS_LAKE_", "PYSPARK_", "SPARK_")) and k != "PYTHONPATH"
    }
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": os.path.join(REPO, "airflow_dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        }
    )
    airflow = os.path.join(REPO, ".venv-airflow", "bin", "airflow")
    for cmd in (
        [airflow, "db", "migrate"],
        [airflow, "pools", "import", os.path.join(REPO, "conf/airflow/pools.json")],
    ):
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    pools = subprocess.run(
        [airflow, "pools", "get", POOL, "-o", "json"], env=env, capture_output=True, text=True, timeout=120
    )
    assert pools.returncode == 0 and json.loads(pools.stdout)[0]["slots"] in (1, "1"), pools.stdout + pools.stderr
    return env


def probe(env: dict, *args: str, timeout: int = 1200) -> dict:
    done = subprocess.run([AIRFLOW_PY, PROBE, *args], env=env, capture_output=True, text=True, timeout=timeout)
    results = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and results, f"rc={done.returncode}\n{done.stdout[-6000:]}\n{done.stderr[-4000:]}"
    out = json.loads(results[-1][len("RESULT ") :])
    out["log"] = done.stdout + done.stderr
    return out


def failed_tries(log: str, before: int = 6000, after: int = 3000) -> str:
    """The log around each try that failed (Airflow's "Task failed" line, with the command's
    output before it), for an assertion's message: a retried task's first failure is far from
    the end of the log, which shows only the try that succeeded."""
    marks = [m.start() for m in re.finditer(r"Task failed with exception|Bash command failed", log)]
    if not marks:
        return log[-before:]
    return "\n[...]\n".join(log[max(0, i - before) : i + after] for i in marks[:2])


def delta_rows(warehouse, table: str, version: int | None = None) -> list:
    from deltalake import DeltaTable

    dt = DeltaTable(os.path.join(str(warehouse), table))
    if version is not None:
        dt.load_as_version(version)
    return sorted((tuple(sorted(r.items())) for r in dt.to_pyarrow_table().to_pylist()), key=repr)


def delta_files(warehouse, table: str) -> int:
    from deltalake import DeltaTable

    return len(DeltaTable(os.path.join(str(warehouse), table)).file_uris())


def test_dag_files_parse_into_exactly_the_expected_dags(airflow_env, tmp_path):
    env = dict(airflow_env, OFFSETS_LAKE_AIRFLOW_CONF=str(tmp_path / "absent.yaml"))  # parse must not read it
    out = probe(env, "dagbag", timeout=300)
    assert out["import_errors"] == {}
    assert out["pyspark_imported"] is False
    op = "_BashDecoratedOperator"
    assert out["dags"] == {
        "offsets_replay_incremental": {
            "schedule": "@hourly",
            "timetable": "CronTriggerTimetable",
            "max_active_runs": 1,
            "catchup": False,
            "params": {},
            "tasks": {
                "replay": {"pool": POOL, "retries": 2, "upstream": [], "operator": op},
                "quality": {"pool": POOL, "retries": 0, "upstream": ["replay"], "operator": op},
            },
        },
        "offsets_replay_backfill": {
            "schedule": None,
            "timetable": "NullTimetable",
            "max_active_runs": 1,
            "catchup": False,
            "params": {
                "log_dir": "",
                "bootstrap_servers": "",
                "partitions": "",
                "now": "",
                "full": False,
                "retention_minutes": 10080,
            },
            "tasks": {
                "replay": {"pool": POOL, "retries": 0, "upstream": [], "operator": op},
                "quality": {"pool": POOL, "retries": 0, "upstream": ["replay"], "operator": op},
            },
        },
        "offsets_maintenance": {
            "schedule": "@daily",
            "timetable": "CronTriggerTimetable",
            "max_active_runs": 1,
            "catchup": False,
            "params": {"vacuum_hours": None, "tables": ""},
            "tasks": {"optimize_and_vacuum": {"pool": POOL, "retries": 1, "upstream": [], "operator": op}},
        },
    }


def test_commands_follow_the_configuration(airflow_env, tmp_path):
    env = dict(
        airflow_env,
        OFFSETS_LAKE_AIRFLOW_CONF=write_conf(tmp_path / "c.yaml", warehouse="/wh", source={"input": "/logs"}),
        OFFSETS_LAKE_PARTITIONS="1,2",
    )  # env beats the file
    out = probe(env, "commands", timeout=300)
    py = f"{REPO}/.venv/bin/python"
    local = f"cd {REPO} && exec env PYTHONPATH={REPO} PYSPARK_PYTHON={py} PYSPARK_DRIVER_PYTHON={py} {py} -m "
    assert out["replay"] == local + (
        "jobs.replay_offsets --input /logs --warehouse /wh --now 1795323099431 "
        "--partitions 1,2 --retention-minutes 10080"
    )
    assert out["backfill"] == local + (
        "jobs.replay_offsets --bootstrap-servers b1:9092,b2:9092 --warehouse /wh "
        "--now 2026-11-22T04:51:39Z --partitions 0-9 --retention-minutes 60 --full"
    )
    assert out["quality"] == local + "jobs.quality --warehouse /wh --partitions 3,4"
    assert out["maintenance"] == local + "jobs.maintenance --warehouse /wh --vacuum-hours 168"
    assert out["both_sources_error"] == "give a log dir or bootstrap servers, not both"

    env["OFFSETS_LAKE_MODE"] = "spark-submit"
    out = probe(env, "commands", timeout=300)
    pyspark = f"{REPO}/.venv/lib/python3.11/site-packages/pyspark"
    jars = ",".join(sorted(glob.glob(f"{REPO}/.jars/spark/*.jar")))
    assert any("/delta-spark_" in j for j in jars.split(","))
    assert out["maintenance"] == (
        f"cd {REPO} && exec env PYTHONPATH={REPO} PYSPARK_PYTHON={py} PYSPARK_DRIVER_PYTHON={py} "
        f"OFFSETS_LAKE_JARS={REPO}/.jars/spark SPARK_HOME={pyspark} {pyspark}/bin/spark-submit --master 'local[2]' "
        f"--deploy-mode client --name offsets-lake-maintenance --jars {jars} "
        f"--driver-java-options -Dlog4j2.configurationFile=file:{REPO}/conf/log4j2.properties "
        f"--conf spark.sql.shuffle.partitions=2 {REPO}/jobs/maintenance.py --warehouse /wh --vacuum-hours 168"
    )


def test_commands_for_a_cluster_and_s3(airflow_env, tmp_path):
    """spark-submit to a cluster (YARN, cluster deploy mode, the code as the built zip) with the
    log archive and the warehouse in an S3-compatible store: hadoop-aws on the class paths and
    the endpoint as fs.s3a.* settings, never a credential on the command line."""
    conf = write_conf(
        tmp_path / "c.yaml",
        mode="spark-submit",
        warehouse="s3a://lake/offsets",
        source={"input": "s3a://archive/broker-1"},
        s3={"endpoint": "http://minio.internal:9000", "region": "eu-west-1"},
        spark_submit={
            "binary": "/opt/spark/bin/spark-submit",
            "spark_home": "/opt/spark",
            "master": "yarn",
            "deploy_mode": "cluster",
            "jars_dir": ".jars/spark",
            "py_files": "build/offsets_lake.zip",
            "conf": {"spark.executor.instances": "4"},
        },
    )
    env = dict(airflow_env, OFFSETS_LAKE_AIRFLOW_CONF=conf, AWS_SECRET_ACCESS_KEY="not-in-a-command")
    out = probe(env, "commands", timeout=300)
    py = f"{REPO}/.venv/bin/python"
    jars = ",".join(sorted(glob.glob(f"{REPO}/.jars/spark/*.jar")))
    s3_jars = ":".join(sorted(glob.glob(f"{REPO}/.jars/s3/*.jar")))
    assert any("/hadoop-aws-3.5.0.jar" in j for j in s3_jars.split(":"))
    assert out["replay"] == (
        f"cd {REPO} && exec env PYTHONPATH={REPO} PYSPARK_PYTHON={py} PYSPARK_DRIVER_PYTHON={py} "
        f"OFFSETS_LAKE_JARS={REPO}/.jars/spark SPARK_HOME=/opt/spark /opt/spark/bin/spark-submit --master yarn "
        f"--deploy-mode cluster --name offsets-lake-replay_offsets --jars {jars} "
        f"--driver-java-options -Dlog4j2.configurationFile=file:{REPO}/conf/log4j2.properties "
        f"--driver-class-path {s3_jars} "
        "--conf spark.hadoop.fs.s3a.endpoint=http://minio.internal:9000 "
        "--conf spark.hadoop.fs.s3a.connection.ssl.enabled=false "
        "--conf spark.hadoop.fs.s3a.endpoint.region=eu-west-1 "
        "--conf spark.hadoop.fs.s3a.path.style.access=true "
        "--conf spark.executor.instances=4 "
        f"--conf spark.executor.extraClassPath={s3_jars} "
        f"--py-files {REPO}/build/offsets_lake.zip "
        f"{REPO}/jobs/replay_offsets.py --input s3a://archive/broker-1 --warehouse s3a://lake/offsets "
        "--now 1795323099431 --retention-minutes 10080"
    )
    assert "not-in-a-command" not in json.dumps(out["config"]) + out["replay"] + out["maintenance"]
    assert out["maintenance"].endswith(f"{REPO}/jobs/maintenance.py --warehouse s3a://lake/offsets --vacuum-hours 168")


@pytest.fixture(scope="module")
def incremental_run(airflow_env, tmp_path_factory):
    """One run of the hourly DAG as of the sample's capture time, in local mode."""
    tmp = tmp_path_factory.mktemp("incremental")
    logdir, warehouse = tmp / "logdir", tmp / "warehouse"
    shutil.copytree(SAMPLE, logdir)
    env = dict(
        airflow_env,
        OFFSETS_LAKE_AIRFLOW_CONF=write_conf(tmp / "c.yaml", warehouse=str(warehouse), source={"input": str(logdir)}),
    )
    # logical date = data interval end for the cron timetable: the replay runs with --now SAMPLE_NOW
    return probe(env, "test", "offsets_replay_incremental", str(SAMPLE_NOW)), warehouse, env


def test_incremental_dag_replays_the_sample(incremental_run):
    out, warehouse, _ = incremental_run
    assert out["tasks"]["replay"]["state"] == "success", failed_tries(out["log"])
    assert f"--now {SAMPLE_NOW} " in out["log"]
    counts = {t: len(delta_rows(warehouse, t)) for t in TABLES if t != "group_fold_state"}
    partitions = len(glob.glob(os.path.join(SAMPLE, "__consumer_offsets-*")))
    assert partitions == 50
    assert counts == {
        "offsets_log": 90,
        "group_offsets": 24,
        "expired_offsets": 0,
        "pending_transactional_offsets": 1,
        "consumer_groups": 8,
        "expired_groups": 0,
        "replay_checkpoints": partitions,
        # audited in the pass: the sample's six classic generations with an assignment
        # (sample-classic 1 and 2, sample-deleted 1, sample-emptied 1, sample-static 2, sample-txn 1)
        # and sample-kip848's two target assignment epochs (2 and 3)
        "assignment_audit": 8,
    }
    groups = {dict(r)["group_id"] for r in delta_rows(warehouse, "consumer_groups")}
    assert groups == SAMPLE_GROUPS
    assert out["tasks"] == {
        "replay": {"state": "success", "try_number": 1},
        "quality": {"state": "success", "try_number": 1},
    }, failed_tries(out["log"])
    assert out["state"] == "success"


def test_maintenance_dag_keeps_contents_and_time_travel(incremental_run, tmp_path):
    _, warehouse, env = incremental_run
    before = {t: delta_rows(warehouse, t) for t in TABLES}
    versions = {t: __import__("deltalake").DeltaTable(os.path.join(str(warehouse), t)).version() for t in TABLES}
    conf = write_conf(tmp_path / "c.yaml", mode="spark-submit", warehouse=str(warehouse))
    compacted = ["offsets_log", "group_offsets", "replay_checkpoints"]  # a subset keeps the test short
    out = probe(
        dict(env, OFFSETS_LAKE_AIRFLOW_CONF=conf),
        "test",
        "offsets_maintenance",
        "",
        json.dumps({"tables": ",".join(compacted)}),
    )
    assert out["tasks"] == {"optimize_and_vacuum": {"state": "success", "try_number": 1}}, failed_tries(out["log"])
    assert "spark-submit --master 'local[2]'" in out["log"]
    for t in compacted:
        assert f"{t}: optimize " in out["log"]
    assert "maintenance: 3 of 3 tables" in out["log"]
    assert {t: delta_rows(warehouse, t) for t in TABLES} == before
    # tables holding offsets_partition as a column are Z-ordered by it; the sample's are small:
    # one file each
    assert "offsets_log: optimize zorder by offsets_partition" in out["log"]
    assert {t: delta_files(warehouse, t) for t in compacted} == {
        "offsets_log": 1,
        "group_offsets": 1,
        "replay_checkpoints": 1,
    }
    # VACUUM kept 168 hours: the versions before it (which incremental runs read) still load
    for t in compacted:
        assert delta_rows(warehouse, t, versions[t]) == before[t]


def test_maintenance_refuses_short_retention(tmp_path):
    env = dict(os.environ, PYTHONPATH=REPO)
    done = subprocess.run(
        [sys.executable, "-m", "jobs.maintenance", "--warehouse", str(tmp_path), "--vacuum-hours", "24"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "below Delta's default retention of 168 h" in done.stderr
    done = subprocess.run(
        [sys.executable, "-m", "jobs.maintenance", "--warehouse", str(tmp_path), "--tables", "offsets_log,nope"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "unknown table(s) nope" in done.stderr
