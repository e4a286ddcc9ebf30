"""Runs inside .venv-airflow (never imported by pytest): `dagbag` describes the DAGs as
Airflow parses them; `test DAG_ID [LOGICAL_DATE_MS] [CONF_JSON]` runs one DAG run with
dag.test() and reports the task states. The last line of stdout is `RESULT <json>`."""

from __future__ import annotations

import datetime as dt
import json
import os
import sys


def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    dags = {}
    for dag_id, d in bag.dags.items():
        dags[dag_id] = {
            "schedule": d.schedule if d.schedule is None or isinstance(d.schedule, str) else repr(d.schedule),
            "timetable": type(d.timetable).__name__,
            "max_active_runs": d.max_active_runs,
            "catchup": d.catchup,
            "params": d.params.dump(),
            "tasks": {
                t.task_id: {
                    "pool": t.pool,
                    "retries": t.retries,
                    "upstream": sorted(t.upstream_task_ids),
                    "operator": type(t).__name__,
                }
                for t in d.tasks
            },
        }
    return {"import_errors": {os.path.basename(k): v for k, v in bag.import_errors.items()}, "dags": dags}


def run_test(dag_id: str, logical_ms: str | None = None, conf: str | None = None):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    dag = bag.get_dag(dag_id)
    kwargs = {}
    if logical_ms:
        kwargs["logical_date"] = dt.datetime.fromtimestamp(int(logical_ms) / 1000, dt.UTC)
    if conf:
        kwargs["run_conf"] = json.loads(conf)
    dr = dag.test(**kwargs)
    tis = dr.get_task_instances()
    return {
        "state": str(dr.state),
        "logical_date": dr.logical_date.isoformat() if dr.logical_date else None,
        "tasks": {ti.task_id: {"state": str(ti.state), "try_number": ti.try_number} for ti in tis},
    }


def commands():
    """The command lines the tasks would run under the current configuration (env)."""
    import offsets_lake_common as olc
    import pendulum

    cfg = olc.load_config(use_variable=False)
    out = {
        "config": cfg,
        "replay": olc.replay_command(cfg, now=olc.epoch_ms(pendulum.datetime(2026, 11, 22, 4, 51, 39, 431000))),
        "backfill": olc.replay_command(
            cfg,
            now="2026-11-22T04:51:39Z",
            partitions="0-9",
            full=True,
            retention_minutes=60,
            bootstrap_servers="b1:9092,b2:9092",
        ),
        "quality": olc.quality_command(cfg, partitions="3,4"),
        "maintenance": olc.maintenance_command(cfg),
    }
    try:
        olc.replay_command(cfg, now=None, log_dir="x", bootstrap_servers="y:1")
    except olc.ConfigError as e:
        out["both_sources_error"] = str(e)
    return out


if __name__ == "__main__":
    cmd, *rest = sys.argv[1:]
    if cmd == "commands":
        sys.path.append(os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    out = {"dagbag": dagbag, "commands": commands}[cmd]() if cmd != "test" else run_test(*rest)
    out["pyspark_imported"] = "pyspark" in sys.modules
    sys.stdout.flush()
    print("RESULT " + json.dumps(out, default=str))
