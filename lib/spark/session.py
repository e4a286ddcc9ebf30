"""Builds the SparkSession the jobs and tests share, and the replay's SparkContext (SparkJobs):
Delta enabled, jars from the local .jars/spark folder fetched by `make setup` (no download at
run time), UTC everywhere."""

from __future__ import annotations

import glob
import os
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from lib.allocator import POOL_VARIABLE

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_CONF = os.path.join(REPO_ROOT, "conf", "spark.conf")
DEFAULT_JARS = os.path.join(REPO_ROOT, ".jars", "spark")
# hadoop-aws and the AWS SDK (conf/maven profile s3), for s3a:// paths. Put on the class path
# only when a job touches an object store: the SDK's bundle is a 690 MB jar.
DEFAULT_S3_JARS = os.path.join(REPO_ROOT, ".jars", "s3")
LOCAL_MASTER = "local[*]"  # without spark.master anywhere
LOCAL_DAEMON_MODULE = "lib.spark.daemon"  # Spark's Python daemon in local mode


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


def s3_jars(jar_dir: str | None = None) -> list[str]:
    jar_dir = jar_dir or os.environ.get("OFFSETS_LAKE_S3_JARS", DEFAULT_S3_JARS)
    return sorted(glob.glob(os.path.join(jar_dir, "*.jar")))


def s3a_settings_from_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """Hadoop's fs.s3a.* for a store given the AWS way (AWS_ENDPOINT_URL, AWS_REGION,
    AWS_ACCESS_KEY_ID, ...), so Spark (on every executor) and the Python workers (lib.storage)
    reach the same store. Without AWS_* credentials S3A's own chain applies (instance
    profile, web identity)."""
    from lib.storage import ObjectStoreSettings

    s = ObjectStoreSettings.from_env(env)
    conf: dict[str, str] = {}
    if s.endpoint_url:
        conf["spark.hadoop.fs.s3a.endpoint"] = s.endpoint_url
        conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(s.scheme == "https").lower()
        conf["spark.hadoop.fs.s3a.path.style.access"] = str(s.path_style).lower()
    if s.region:
        conf["spark.hadoop.fs.s3a.endpoint.region"] = s.region
    # executors elsewhere do not share this environment; Spark redacts these keys wherever it
    # shows its settings (spark.redaction.regex)
    for key, value in (
        ("access.key", s.access_key),
        ("secret.key", s.secret_key),
        ("session.token", s.session_token),
    ):
        if value:
            conf[f"spark.hadoop.fs.s3a.{key}"] = value
    return conf


def configure_object_store(spark) -> None:
    """lib.storage's settings for this process from the session's Hadoop configuration
    (fs.s3a.*, whether from --conf spark.hadoop.*, core-site.xml or s3a_settings_from_env),
    the environment for what it lacks."""
    _configure_object_store(spark.sparkContext)


def _configure_object_store(context: SparkContext) -> None:
    from lib import storage

    hadoop = context._jsc.hadoopConfiguration()
    storage.configure(storage.ObjectStoreSettings.from_hadoop(hadoop.get))


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
    app_name: str = "offsets-lake",
    overrides: dict[str, str] | None = None,
    defaults: dict[str, str] | None = None,
    object_store: bool = False,
):
    """A SparkSession with Delta. Settings precedence: `overrides` (the job's --conf), then
    what spark-submit already set (--master, --conf ...), then conf/spark.conf, then the
    job's `defaults`, then JOB_DEFAULTS. `object_store`: the job reads or writes s3a:// paths
    (hadoop-aws on the class path, fs.s3a.* from the AWS environment where not given)."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    for key, value in _settings(app_name, overrides, defaults, object_store).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    configure_object_store(spark)
    return spark


class SparkJobs:
    """The replay's Spark: a SparkContext, with the same settings as build_session's, and no
    SparkSession. The replay runs RDD jobs of Python tasks and commits with delta-rs; building
    a session's SQL state (the Delta extension, the catalog, the SQL conf) cost every run about
    4 s before its first task, for nothing it used. `session()` makes one when asked (--check).
    The context starts when first asked for (`sparkContext`), at once unless build_context was
    told `lazy`: a run that finds nothing to do then starts no JVM."""

    def __init__(self, starter: Callable[[], SparkContext]):
        self._starter = starter
        self._context: SparkContext | None = None
        self._lock = threading.Lock()  # (the replay asks from a thread too: start_workers)

    @property
    def sparkContext(self) -> SparkContext:
        return self.start()

    def start(self) -> SparkContext:
        """The context, started now if it was not."""
        with self._lock:
            if self._context is None:
                self._context = self._starter()
            return self._context

    @property
    def started(self) -> bool:
        return self._context is not None

    def session(self) -> SparkSession:
        from pyspark.sql import SparkSession

        # on the running context: its conf holds the Delta extension and catalog settings
        self.start()
        return SparkSession.builder.getOrCreate()

    def stop(self, wait_for_jvm_s: float | None = None) -> None:
        """Stop the context (if it started); with `wait_for_jvm_s`, also end the JVM and wait
        for it (it ends once its stdin closes, and writes a class archive asked for then:
        lib.spark.jvm_archive)."""
        from pyspark import SparkContext

        if self._context is None:
            return
        jvm = SparkContext._gateway.proc if SparkContext._gateway is not None else None
        self._context.stop()
        if wait_for_jvm_s is not None and jvm is not None:  # (the JVM itself: spark-submit execs it)
            jvm.stdin.close()
            jvm.wait(timeout=wait_for_jvm_s)


def build_context(
    app_name: str = "offsets-lake",
    overrides: dict[str, str] | None = None,
    defaults: dict[str, str] | None = None,
    object_store: bool = False,
    lazy: bool = False,
) -> SparkJobs:
    """build_session's settings, for a SparkContext alone (SparkJobs). `lazy`: the context (and
    its JVM) starts when something first asks for it, not now; not with an object store, whose
    settings this process takes from the context's Hadoop configuration."""
    from pyspark import SparkConf, SparkContext

    settings = _settings(app_name, overrides, defaults, object_store)

    def start() -> SparkContext:
        context = SparkContext.getOrCreate(SparkConf().setAll(list(settings.items())))
        context.setLogLevel("WARN")
        _configure_object_store(context)
        return context

    jobs = SparkJobs(start)
    if not lazy or object_store:
        jobs.start()
    return jobs


def starts_local_daemon(overrides: dict[str, str] | None = None) -> bool:
    """Whether a job started here with these --conf settings starts its JVM here, in local mode,
    with this repository's Python daemon (as _settings sets them): what a daemon zygote needs."""
    if "PYSPARK_GATEWAY_PORT" in os.environ:
        return False
    conf = _job_conf(overrides)
    module = conf.get("spark.python.daemon.module", LOCAL_DAEMON_MODULE)
    return conf.get("spark.master", LOCAL_MASTER).startswith("local") and module == LOCAL_DAEMON_MODULE


def spark_master(overrides: dict[str, str] | None = None) -> str:
    """The master a job started here with these --conf settings runs on."""
    return _job_conf(overrides).get("spark.master", LOCAL_MASTER)


def _job_conf(overrides: dict[str, str] | None) -> dict[str, str]:
    return {**read_conf(os.environ.get("OFFSETS_LAKE_SPARK_CONF", DEFAULT_CONF)), **(overrides or {})}


def _settings(
    app_name: str, overrides: dict[str, str] | None, defaults: dict[str, str] | None, object_store: bool
) -> dict[str, str]:
    """The settings a session or context is built with (build_session's precedence); sets the
    environment the Python workers need."""
    from pyspark import SparkConf

    # Python workers must use this interpreter, or they cannot import pyarrow and lib.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Local mode talks to itself over loopback only.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    pythonpath = os.environ.get("PYTHONPATH", "")
    if os.path.isdir(REPO_ROOT) and REPO_ROOT not in pythonpath.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (REPO_ROOT, pythonpath) if p)
    conf = {
        **JOB_DEFAULTS,
        **(defaults or {}),
        **(s3a_settings_from_env() if object_store else {}),
        **read_conf(os.environ.get("OFFSETS_LAKE_SPARK_CONF", DEFAULT_CONF)),
    }
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
    master = conf.get("spark.master") or submitted.get("spark.master") or LOCAL_MASTER
    if master.startswith("local"):
        # local mode: the workers run here, the repository is their code
        if java_opts:
            conf.setdefault("spark.executor.extraJavaOptions", java_opts)
        conf.setdefault("spark.executorEnv.PYTHONPATH", os.environ.get("PYTHONPATH", ""))
        # pyspark from the installed package, compiled, not Spark's zip of its sources
        conf.setdefault("spark.python.daemon.module", LOCAL_DAEMON_MODULE)
    else:
        # the run's Arrow memory pool (lib.allocator) in the executors' Python workers too: a
        # local master's start from this process's environment, a cluster's from their worker's
        pool = os.environ.get(POOL_VARIABLE)
        if pool:
            conf.setdefault(f"spark.executorEnv.{POOL_VARIABLE}", pool)
    # elsewhere the code reaches executors as a built artifact (spark-submit --py-files
    # build/offsets_lake.zip, `make dist`), never through this machine's paths
    given = [j for j in submitted.get("spark.jars", "").split(",") if j]
    # spark-submit --jars with Delta's jars (a cluster's submit): nothing local to add
    local = [] if any("delta-spark" in os.path.basename(j) for j in given) else spark_jars()
    jars = ",".join(local + given)
    if "PYSPARK_GATEWAY_PORT" not in os.environ and not object_store and not conf.get("spark.driver.extraClassPath"):
        # the driver JVM starts here, on the class path its archive was written for
        from lib.spark.jvm_archive import driver_options

        archive = driver_options(local + given)
        if archive:
            conf["spark.driver.extraJavaOptions"] = f"{conf.get('spark.driver.extraJavaOptions', '')} {archive}".strip()
    if object_store and "PYSPARK_GATEWAY_PORT" not in os.environ:
        # on the class path where the JVMs start, not in spark.jars: Spark would copy the SDK's
        # 690 MB bundle to every executor's work dir (under spark-submit, give them with
        # --driver-class-path and spark.executor.extraClassPath, or --packages)
        found = s3_jars()
        if not any(os.path.basename(j).startswith("hadoop-aws") for j in found):
            raise RuntimeError(f"hadoop-aws jars not found in {DEFAULT_S3_JARS}: run `make setup` first")
        extra = os.pathsep.join(found)
        for key in ("spark.driver.extraClassPath", "spark.executor.extraClassPath"):
            conf[key] = os.pathsep.join(p for p in (conf.get(key, ""), extra) if p)
    return {"spark.app.name": app_name, "spark.jars": jars, **conf}
