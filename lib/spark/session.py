"""Builds the SparkSession the jobs and tests share: Delta enabled, jars from the local
.jars/spark folder fetched by `make setup` (no download at run time), UTC everywhere."""

from __future__ import annotations

import glob
import os
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_CONF = os.path.join(REPO_ROOT, "conf", "spark.conf")
DEFAULT_JARS = os.path.join(REPO_ROOT, ".jars", "spark")


def _read_text(path: str) -> str:
    """A file's text, also from inside the zip the code was shipped in (--py-files), where the
    repository's conf/ travels with lib/."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (NotADirectoryError, FileNotFoundError):
        archive, sep, member = path.partition(".zip" + os.sep)
        if not sep or not os.path.isfile(archive + ".zip"):
            raise
        import zipfile

        with zipfile.ZipFile(archive + ".zip") as z:
            return z.read(member.replace(os.sep, "/")).decode("utf-8")


def read_conf(path: str) -> dict[str, str]:
    conf: dict[str, str] = {}
    for line in _read_text(path).splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition(" ")
        conf[key.strip()] = value.strip()
    return conf


def spark_jars(jar_dir: str | None = None) -> list[str]:
    jar_dir = jar_dir or os.environ.get("OFFSETS_LAKE_JARS", DEFAULT_JARS)
    jars = sorted(glob.glob(os.path.join(jar_dir, "*.jar")))
    if not any(os.path.basename(j).startswith("delta-spark") for j in jars):
        raise RuntimeError(f"Delta jars not found in {jar_dir}: run `make setup` first")
    return jars


# The driver JVM's heap unless conf/spark.conf, spark-submit or --conf says otherwise: the SQL
# jobs (audits, report, quality, maintenance) aggregate in the JVM; the replay passes its own
# (REPLAY_DEFAULTS), as its JVM holds no records.
JOB_DEFAULTS = {"spark.driver.memory": "1g"}
# The replay's JVM only schedules tasks (the records stay in the Python workers, commits go
# through delta-rs): Spark's floor of 450 MiB is enough (a full replay of 10M records peaks at
# ~240 MB used, 134 MB live), and C2's compiles never pay back there. Measured: with C2 and G1
# the JVM burnt 0.65-0.87 s of CPU during a 1 s incremental run, taken from the two workers;
# with C1 only and the serial collector 0.07-0.10 s.
REPLAY_JVM_FLAGS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
REPLAY_DEFAULTS = {"spark.driver.memory": "512m", "spark.driver.extraJavaOptions": REPLAY_JVM_FLAGS}


def build_session(
    app_name: str = "offsets-lake", overrides: dict[str, str] | None = None, defaults: dict[str, str] | None = None
):
    """Settings precedence: `overrides` (the job's --conf), then what spark-submit already
    set (--master, --conf ...), then conf/spark.conf, then the job's `defaults`, then
    JOB_DEFAULTS."""
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    # Python workers must use this interpreter, or they cannot import pyarrow and lib.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Local mode talks to itself over loopback only.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    pythonpath = os.environ.get("PYTHONPATH", "")
    if os.path.isdir(REPO_ROOT) and REPO_ROOT not in pythonpath.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (REPO_ROOT, pythonpath) if p)
    conf = {**JOB_DEFAULTS, **(defaults or {}), **read_conf(os.environ.get("OFFSETS_LAKE_SPARK_CONF", DEFAULT_CONF))}
    # Under spark-submit the launcher's settings are already in the JVM's system properties.
    # spark-submit starts the JVM first and hands Python its gateway port.
    # (SparkConf reads them only once the gateway is up: before, it returned nothing, and
    # conf/spark.conf's local master overrode spark-submit's --master)
    submitted = {}
    if "PYSPARK_GATEWAY_PORT" in os.environ:
        from pyspark import SparkContext

        SparkContext._ensure_initialized()
        submitted = dict(SparkConf().getAll())
    for key in submitted:
        conf.pop(key, None)
    conf.update(overrides or {})
    log4j = os.path.join(REPO_ROOT, "conf", "log4j2.properties")
    java_opts = f"-Dlog4j2.configurationFile=file:{log4j}" if os.path.isfile(log4j) else ""
    driver_opts = conf.get("spark.driver.extraJavaOptions", "")
    if java_opts and "log4j2.configurationFile" not in driver_opts:
        conf["spark.driver.extraJavaOptions"] = f"{java_opts} {driver_opts}".strip()
    master = conf.get("spark.master") or submitted.get("spark.master") or "local[*]"
    if master.startswith("local"):
        # local mode: the workers run here, the repository is their code
        if java_opts:
            conf.setdefault("spark.executor.extraJavaOptions", java_opts)
        conf.setdefault("spark.executorEnv.PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    # elsewhere the code reaches executors as a built artifact (spark-submit --py-files
    # build/offsets_lake.zip, `make dist`), never through this machine's paths
    given = [j for j in submitted.get("spark.jars", "").split(",") if j]
    # spark-submit --jars with Delta's jars (a cluster's submit): nothing local to add
    local = [] if any("delta-spark" in os.path.basename(j) for j in given) else spark_jars()
    jars = ",".join(local + given)
    builder = SparkSession.builder.appName(app_name).config("spark.jars", jars)
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
