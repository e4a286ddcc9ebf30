"""Shared by the offsets-lake DAGs: configuration and the command lines of the jobs.

Nothing here runs when a DAG file is parsed except constant definitions: the configuration
(conf/airflow/offsets_lake.yaml, the Airflow Variable `offsets_lake`, OFFSETS_LAKE_* env vars)
is read when a task runs, and the command it returns is then run by bash. No pyspark here:
the jobs run in the project's own virtualenv, or under spark-submit."""

from __future__ import annotations

import copy
import datetime as dt
import glob
import json
import os
import shlex

# One slot: a replay, its quality check and the maintenance never touch the warehouse at the
# same time (a concurrent OPTIMIZE and replay MERGE would conflict; VACUUM must not run under
# a replay that reads an older version). Create it with `airflow pools import conf/airflow/pools.json`.
POOL = "offsets_lake_warehouse"

DAGS_DIR = os.path.dirname(os.path.abspath(__file__))
DEFAULT_REPO = os.path.dirname(DAGS_DIR)
DEFAULT_CONF = os.path.join("conf", "airflow", "offsets_lake.yaml")

DEFAULTS: dict = {
    "mode": "local",
    "repo": ".",
    "python": ".venv/bin/python",
    "warehouse": "warehouse",
    "source": {"input": None, "bootstrap_servers": None},
    "partitions": None,
    "retention_minutes": 10080,  # lib.replay.expiry.DEFAULT_RETENTION_MINUTES (tests/test_architecture.py)
    "spark_submit": {
        "binary": "spark-submit",
        "spark_home": None,
        "master": "local[2]",
        "deploy_mode": "client",
        "jars_dir": ".jars/spark",
        "py_files": None,
        "conf": {},
        # hadoop-aws and the AWS SDK, put on the driver's and executors' class path when the
        # input or the warehouse is an s3a:// URI (null: the cluster has them already)
        "s3_jars_dir": ".jars/s3",
    },
    # An S3-compatible store's endpoint for s3a:// paths (spark.hadoop.fs.s3a.* and the Python
    # workers); null keys leave the store's defaults. Credentials never go here: the workers'
    # AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or an instance profile) provide them.
    "s3": {"endpoint": None, "region": None, "path_style": None},
    "maintenance": {"vacuum_hours": 168, "tables": None},
}

ENV = {  # env var -> path in the configuration
    "OFFSETS_LAKE_MODE": ("mode",),
    "OFFSETS_LAKE_REPO": ("repo",),
    "OFFSETS_LAKE_PYTHON": ("python",),
    "OFFSETS_LAKE_WAREHOUSE": ("warehouse",),
    "OFFSETS_LAKE_INPUT": ("source", "input"),
    "OFFSETS_LAKE_BOOTSTRAP_SERVERS": ("source", "bootstrap_servers"),
    "OFFSETS_LAKE_PARTITIONS": ("partitions",),
    "OFFSETS_LAKE_SPARK_MASTER": ("spark_submit", "master"),
    "OFFSETS_LAKE_SPARK_SUBMIT": ("spark_submit", "binary"),
    "OFFSETS_LAKE_SPARK_HOME": ("spark_submit", "spark_home"),
    "OFFSETS_LAKE_JARS": ("spark_submit", "jars_dir"),
    "OFFSETS_LAKE_SPARK_DEPLOY_MODE": ("spark_submit", "deploy_mode"),
    "OFFSETS_LAKE_PY_FILES": ("spark_submit", "py_files"),
    "OFFSETS_LAKE_S3_ENDPOINT": ("s3", "endpoint"),
}
MODES = ("local", "spark-submit")


class ConfigError(ValueError):
    pass


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in (over or {}).items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def _airflow_variable() -> dict:
    """The Airflow Variable `offsets_lake` (JSON), if set; only callable inside a running task."""
    try:
        from airflow.sdk import Variable

        value = Variable.get("offsets_lake", default=None)
    except Exception:
        return {}
    if not value:
        return {}
    return value if isinstance(value, dict) else json.loads(value)


def load_config(environ: dict | None = None, use_variable: bool = True) -> dict:
    """The resolved configuration, paths made absolute. Call at task run time only."""
    import yaml

    environ = os.environ if environ is None else environ
    path = environ.get("OFFSETS_LAKE_AIRFLOW_CONF") or os.path.join(DEFAULT_REPO, DEFAULT_CONF)
    cfg = copy.deepcopy(DEFAULTS)
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            cfg = _merge(cfg, yaml.safe_load(f) or {})
    elif environ.get("OFFSETS_LAKE_AIRFLOW_CONF"):
        raise ConfigError(f"OFFSETS_LAKE_AIRFLOW_CONF names a missing file: {path}")
    if use_variable:
        cfg = _merge(cfg, _airflow_variable())
    for var, keys in ENV.items():
        if environ.get(var) is not None:
            node = cfg
            for k in keys[:-1]:
                node = node.setdefault(k, {})
            node[keys[-1]] = environ[var] or None
    if cfg["mode"] not in MODES:
        raise ConfigError(f"mode must be one of {MODES}, not {cfg['mode']!r}")
    repo = cfg["repo"] or "."
    cfg["repo"] = repo = os.path.normpath(os.path.join(DEFAULT_REPO, repo))

    def absolute(p):
        if p in (None, ""):
            return None
        if "://" in str(p):  # s3a://bucket/prefix and other URIs stay as given
            return str(p)
        return os.path.normpath(os.path.join(repo, os.path.expanduser(str(p))))

    cfg["python"] = absolute(cfg["python"])
    cfg["warehouse"] = absolute(cfg["warehouse"])
    if cfg["source"].get("input"):
        cfg["source"]["input"] = absolute(cfg["source"]["input"])
    ss = cfg["spark_submit"]
    if ss.get("binary") and os.sep in str(ss["binary"]):
        ss["binary"] = absolute(ss["binary"])
    for key in ("spark_home", "jars_dir", "py_files", "s3_jars_dir"):
        ss[key] = absolute(ss.get(key))
    return cfg


def uses_object_store(cfg: dict, args: list[str]) -> bool:
    return any(str(a).startswith(("s3a://", "s3://")) for a in args) or str(cfg.get("warehouse") or "").startswith(
        ("s3a://", "s3://")
    )


def s3_conf(cfg: dict) -> dict[str, str]:
    """spark.hadoop.fs.s3a.* from the `s3` section (the jobs hand them to their Python workers)."""
    s3 = cfg.get("s3") or {}
    conf: dict[str, str] = {}
    endpoint = s3.get("endpoint")
    if endpoint:
        conf["spark.hadoop.fs.s3a.endpoint"] = str(endpoint)
        conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(not str(endpoint).startswith("http://")).lower()
    if s3.get("region"):
        conf["spark.hadoop.fs.s3a.endpoint.region"] = str(s3["region"])
    path_style = s3.get("path_style")
    if path_style is None and endpoint:
        path_style = True  # what S3-compatible stores need
    if path_style is not None:
        conf["spark.hadoop.fs.s3a.path.style.access"] = str(bool(path_style)).lower()
    return conf


def epoch_ms(value: dt.datetime) -> int:
    """Exact epoch milliseconds of an aware datetime (no float rounding)."""
    value = dt.datetime.fromisoformat(value.isoformat())
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return (value - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(milliseconds=1)


def job_command(cfg: dict, job: str, args: list[str]) -> str:
    """The bash command that runs `jobs.<job>` with `args`, as the configured mode says."""
    repo, python = cfg["repo"], cfg["python"]
    env = {"PYTHONPATH": repo, "PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python}
    if cfg["mode"] == "local":
        argv = [python, "-m", f"jobs.{job}", *args]
        if uses_object_store(cfg, args):
            for key, value in s3_conf(cfg).items():
                argv += ["--conf", f"{key}={value}"]
    else:
        ss = cfg["spark_submit"]
        jars = sorted(glob.glob(os.path.join(ss["jars_dir"], "*.jar"))) if ss.get("jars_dir") else []
        if not any(os.path.basename(j).startswith("delta-spark") for j in jars):
            raise ConfigError(f"no Delta jars in spark_submit.jars_dir={ss.get('jars_dir')} (run `make setup`)")
        env["OFFSETS_LAKE_JARS"] = ss["jars_dir"]
        if ss.get("spark_home"):
            env["SPARK_HOME"] = ss["spark_home"]
        argv = [
            ss["binary"],
            "--master",
            str(ss["master"]),
            "--deploy-mode",
            str(ss.get("deploy_mode") or "client"),
            "--name",
            f"offsets-lake-{job}",
            "--jars",
            ",".join(jars),
            "--driver-java-options",
            f"-Dlog4j2.configurationFile=file:{os.path.join(repo, 'conf', 'log4j2.properties')}",
        ]
        conf = dict(ss.get("conf") or {})
        if uses_object_store(cfg, args):
            conf = {**s3_conf(cfg), **conf}
            s3_jars = sorted(glob.glob(os.path.join(ss["s3_jars_dir"], "*.jar"))) if ss.get("s3_jars_dir") else []
            if s3_jars:
                # the class path, not --jars: Spark would copy the SDK's 690 MB bundle per executor
                path = ":".join(s3_jars)
                argv += ["--driver-class-path", path]
                conf.setdefault("spark.executor.extraClassPath", path)
        for key, value in conf.items():
            argv += ["--conf", f"{key}={value}"]
        if ss.get("py_files"):
            argv += ["--py-files", ss["py_files"]]
        argv += [os.path.join(repo, "jobs", f"{job}.py"), *args]
    assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    return f"cd {shlex.quote(repo)} && exec env {assignments} {shlex.join(argv)}"


def source_args(cfg: dict, log_dir: str | None = None, bootstrap_servers: str | None = None) -> list[str]:
    """--input or --bootstrap-servers: the arguments if given, else the configured source."""
    if log_dir and bootstrap_servers:
        raise ConfigError("give a log dir or bootstrap servers, not both")
    if log_dir:
        return ["--input", log_dir if "://" in log_dir else os.path.normpath(os.path.join(cfg["repo"], log_dir))]
    if bootstrap_servers:
        return ["--bootstrap-servers", bootstrap_servers]
    src = cfg["source"]
    if bool(src.get("input")) == bool(src.get("bootstrap_servers")):
        raise ConfigError("configure exactly one of source.input and source.bootstrap_servers")
    return ["--input", src["input"]] if src.get("input") else ["--bootstrap-servers", src["bootstrap_servers"]]


def _partitions(value) -> str | None:
    if value in (None, "", []):
        return None
    return ",".join(str(v) for v in value) if isinstance(value, (list, tuple)) else str(value)


def replay_command(
    cfg: dict,
    *,
    now: str | int | None,
    partitions: str | None = None,
    full: bool = False,
    retention_minutes: int | None = None,
    log_dir: str | None = None,
    bootstrap_servers: str | None = None,
) -> str:
    args = [*source_args(cfg, log_dir, bootstrap_servers), "--warehouse", cfg["warehouse"]]
    if now not in (None, ""):
        args += ["--now", str(now)]
    partitions = _partitions(partitions) or _partitions(cfg.get("partitions"))
    if partitions:
        args += ["--partitions", partitions]
    args += ["--retention-minutes", str(int(retention_minutes or cfg["retention_minutes"]))]
    if full:
        args.append("--full")
    return job_command(cfg, "replay_offsets", args)


def quality_command(cfg: dict, partitions: str | None = None) -> str:
    args = ["--warehouse", cfg["warehouse"]]
    partitions = _partitions(partitions) or _partitions(cfg.get("partitions"))
    if partitions:
        args += ["--partitions", partitions]
    return job_command(cfg, "quality", args)


def maintenance_command(cfg: dict, vacuum_hours: float | None = None, tables: str | None = None) -> str:
    m = cfg.get("maintenance") or {}
    hours = vacuum_hours if vacuum_hours is not None else m.get("vacuum_hours", 168)
    args = ["--warehouse", cfg["warehouse"], "--vacuum-hours", f"{float(hours):g}"]
    tables = tables or m.get("tables")
    if tables:
        args += ["--tables", tables if isinstance(tables, str) else ",".join(tables)]
    return job_command(cfg, "maintenance", args)
