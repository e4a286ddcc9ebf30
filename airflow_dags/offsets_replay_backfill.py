"""Manual replay with parameters, then the quality checks on the partitions it wrote.

Trigger with a configuration (all optional; empty values fall back to
conf/airflow/offsets_lake.yaml): `log_dir` or `bootstrap_servers` (the source), `partitions`
("0,7,12" or "0-9"), `now` (epoch ms or ISO-8601; empty: the current time), `full` (rebuild the
partitions from their first segment instead of continuing from the checkpoints) and
`retention_minutes`. Shares the `offsets_lake_warehouse` pool with the hourly replay and the
maintenance, so it never runs beside them."""

from __future__ import annotations

import datetime as dt
import os
import sys

from airflow.sdk import Param, dag, task

# The helper module beside this file (Airflow puts the DAGs folder on sys.path, but a bare
# DagBag or another bundle layout may not).
if os.path.dirname(os.path.abspath(__file__)) not in sys.path:
    sys.path.append(os.path.dirname(os.path.abspath(__file__)))
import offsets_lake_common as olc

PARTITIONS_PATTERN = r"^(\s*\d+(-\d+)?\s*)(,\s*\d+(-\d+)?\s*)*$|^$"


@dag(
    dag_id="offsets_replay_backfill",
    schedule=None,
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    max_active_runs=1,
    default_args={"owner": "offsets-lake", "retries": 0},
    tags=["offsets-lake"],
    doc_md=__doc__,
    params={
        "log_dir": Param(
            "",
            type="string",
            title="Log dir",
            description="broker log dir with __consumer_offsets-<P> folders (empty: configured source)",
        ),
        "bootstrap_servers": Param(
            "",
            type="string",
            title="Bootstrap servers",
            description="HOST:PORT[,HOST:PORT] of a running cluster, instead of a log dir",
        ),
        "partitions": Param(
            "",
            type="string",
            pattern=PARTITIONS_PATTERN,
            title="Partitions",
            description="offsets partitions, e.g. 0,7,12 or 0-9 (empty: all)",
        ),
        "now": Param(
            "",
            type="string",
            title="Now",
            description="judge expiry as of this time: epoch ms or ISO-8601 (empty: the current time)",
        ),
        "full": Param(
            False, type="boolean", title="Full", description="rebuild the partitions from their first segment"
        ),
        "retention_minutes": Param(
            olc.DEFAULTS["retention_minutes"],
            type="integer",
            minimum=1,
            title="Retention minutes",
            description="offsets.retention.minutes",
        ),
    },
)
def offsets_replay_backfill():
    @task.bash(pool=olc.POOL, execution_timeout=dt.timedelta(hours=12))
    def replay(params: dict) -> str:
        return olc.replay_command(
            olc.load_config(),
            now=params["now"],
            partitions=params["partitions"],
            full=bool(params["full"]),
            retention_minutes=int(params["retention_minutes"]),
            log_dir=params["log_dir"],
            bootstrap_servers=params["bootstrap_servers"],
        )

    @task.bash(pool=olc.POOL, execution_timeout=dt.timedelta(hours=1))
    def quality(params: dict) -> str:
        return olc.quality_command(olc.load_config(), partitions=params["partitions"])

    replay() >> quality()


offsets_replay_backfill()
