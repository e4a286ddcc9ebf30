"""Hourly incremental replay of __consumer_offsets into the Delta tables, then the quality checks.

Each run continues every partition from its checkpoint (jobs.replay_offsets without --full),
judging expiry as of the run's data interval end, and then runs jobs.quality on the result
(exit 1, an error-level check failing, fails the task). How the jobs run (local virtualenv or
spark-submit), the source and the warehouse come from conf/airflow/offsets_lake.yaml, read
when the tasks run. Runs never overlap (max_active_runs=1), and every task that touches the
warehouse takes the one slot of the `offsets_lake_warehouse` pool."""

from __future__ import annotations

import datetime as dt
import os
import sys

from airflow.sdk import dag, task

# The helper module beside this file (Airflow puts the DAGs folder on sys.path, but a bare
# DagBag or another bundle layout may not).
if os.path.dirname(os.path.abspath(__file__)) not in sys.path:
    sys.path.append(os.path.dirname(os.path.abspath(__file__)))
import offsets_lake_common as olc

DEFAULT_ARGS = {
    "owner": "offsets-lake",
    "retries": 2,  # a failed replay changes no table: retrying is safe
    "retry_delay": dt.timedelta(minutes=5),
    "retry_exponential_backoff": True,
    "max_retry_delay": dt.timedelta(minutes=30),
}


@dag(
    dag_id="offsets_replay_incremental",
    schedule="@hourly",
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    tags=["offsets-lake"],
    doc_md=__doc__,
)
def offsets_replay_incremental():
    @task.bash(pool=olc.POOL, execution_timeout=dt.timedelta(hours=6))
    def replay(**context) -> str:
        end = context.get("data_interval_end") or context["dag_run"].run_after
        cfg = olc.load_config()
        return olc.replay_command(cfg, now=olc.epoch_ms(end))

    @task.bash(pool=olc.POOL, retries=0, execution_timeout=dt.timedelta(hours=1))
    def quality() -> str:
        return olc.quality_command(olc.load_config())

    replay() >> quality()


offsets_replay_incremental()
