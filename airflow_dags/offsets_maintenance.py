"""Daily Delta maintenance: OPTIMIZE (compaction) then VACUUM of every table (jobs.maintenance).

VACUUM keeps 168 hours (Delta's default) unless conf/airflow/offsets_lake.yaml or the run's
`vacuum_hours` says otherwise; the job refuses anything shorter unless told explicitly, and
never disables Delta's retention check by itself. Takes the one slot of the
`offsets_lake_warehouse` pool, so it never runs while a replay writes the tables."""

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


@dag(
    dag_id="offsets_maintenance",
    schedule="@daily",
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    max_active_runs=1,
    default_args={"owner": "offsets-lake", "retries": 1, "retry_delay": dt.timedelta(minutes=30)},
    tags=["offsets-lake"],
    doc_md=__doc__,
    params={
        "vacuum_hours": Param(
            None,
            type=["null", "number"],
            minimum=0,
            title="VACUUM retention (hours)",
            description="empty: the configured retention (default 168)",
        ),
        "tables": Param(
            "", type="string", title="Tables", description="comma-separated table names (empty: every table)"
        ),
    },
)
def offsets_maintenance():
    @task.bash(pool=olc.POOL, execution_timeout=dt.timedelta(hours=3))
    def optimize_and_vacuum(params: dict) -> str:
        return olc.maintenance_command(olc.load_config(), vacuum_hours=params["vacuum_hours"], tables=params["tables"])

    optimize_and_vacuum()


offsets_maintenance()
