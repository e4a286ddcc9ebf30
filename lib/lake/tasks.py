"""The functions Spark ships to its Python workers, in a module that imports nothing heavy:
a worker unpickles a task's function by importing its module, and lib.spark's modules would
bring pyspark.sql, pandas and Delta's clients into every worker of every run (a second or more
of each worker's start, the most of a small incremental run's work). The task modules load
where they run."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lib.lake.seams import TaskGroup, TaskResult


def replay_task(group: TaskGroup) -> TaskResult:
    """One Spark task of the replay (lib.lake.partition_task.replay_group)."""
    from lib.lake.partition_task import replay_group

    return replay_group(group)


def lag_task(task):
    """One Spark task of the lag stage (lib.lake.lag_task.run_lag_task)."""
    from lib.lake.lag_task import run_lag_task

    return run_lag_task(task)


def start_task(_: int) -> int:
    """A task with nothing to do but start its worker: the Python process forked, pyspark's
    worker and the replay's modules imported (lib.spark.pipeline.start_workers)."""
    import lib.lake.partition_task  # noqa: F401

    return 0
