"""Spark's Python daemon in local mode (spark.python.daemon.module, lib.spark.session), with
pyspark imported from the installed package instead of Spark's pyspark.zip.

Spark puts $SPARK_HOME/python/lib/pyspark.zip and py4j's zip first on its Python workers' path.
A zip holds sources only, so every run's daemon compiled pyspark's modules again before its
first task could start (1.2 s on this kind of machine, against 0.3 s from compiled modules).
With pip's pyspark, SPARK_HOME is the installed package and the zips are its own copy of the same
sources: they go to the end of the path, and pyspark and py4j come from the package, compiled
when it was installed. Any other layout (a Spark distribution) is left as Spark made it.

The daemon also imports the tasks' modules (PRELOAD) before it forks its first worker: each
worker then starts with them instead of importing them on its first task (half a second each,
the most of a small incremental run's replay task), and a run imports them once, not once per
worker."""

from __future__ import annotations

import gc
import os
import sys


def prefer_installed_pyspark(path: list[str]) -> list[str]:
    """`path` with Spark's own zips last, when they sit inside an installed pyspark package
    (<site-packages>/pyspark/python/lib/*.zip) that is importable from a later entry."""
    real = {os.path.realpath(p) for p in path if p}
    zips = []
    for entry in path:
        folder = os.path.dirname(os.path.realpath(entry))
        package = os.path.dirname(os.path.dirname(folder))
        if (
            entry.endswith(".zip")
            and os.path.basename(package) == "pyspark"
            and folder == os.path.join(package, "python", "lib")
            and os.path.isfile(os.path.join(package, "__init__.py"))
            and os.path.dirname(package) in real
        ):
            zips.append(entry)
    return [p for p in path if p not in zips] + zips


# what the replay's and the lag stage's tasks import (lib.lake.tasks); pandas because pyarrow
# imports it on its first array when it is installed, pyarrow.dataset for Parquet reads
PRELOAD = (
    "pandas",
    "pyarrow.pandas_compat",
    "pyarrow.dataset",
    "lib.lake.partition_task",
    "lib.replay.engine",
    "lib.replay.assignment",
    "lib.decode",
    "lib.decode.fast",
    "lib.assignors.fast_audit",
    "lib.lake.lag_input",
    "lib.lake.lag_task",
)


def preload(modules: tuple[str, ...] = PRELOAD) -> list[str]:
    """Import `modules` and set up numba's CPU target (its extensions and registries, which
    every process loads before its first kernel: 0.2 s of each replay task's first use): the
    names of what failed. What fails here fails again in the task that needs it, which says
    why; the daemon serves on. The kernels themselves load in the workers, those each uses
    (all of them here took longer than the two workers loading theirs side by side)."""
    import importlib

    failed = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:
            failed.append(name)
    try:
        from numba.core import entrypoints
        from numba.core.registry import cpu_target

        entrypoints.init_all()
        cpu_target.target_context.refresh()
    except Exception:
        failed.append("numba")
    return failed


def prepare() -> list[str]:
    """What the daemon does before it serves: `preload`, then freeze what is loaded out of the
    garbage collector. pyspark's daemon runs a full gc.collect() in a reused worker after every
    task: over the preloaded modules' objects that took 60-100 ms of CPU a task (200 empty
    tasks: 16.9 s of CPU, 4.6 s frozen). Frozen before the first fork, they are left out of
    every collection in the workers, and the collector writes none of their pages: they stay
    shared between the workers."""
    failed = preload()
    gc.freeze()
    return failed


def quiet_when_the_jvm_is_gone(worker):
    """pyspark's daemon `worker` (one connection's tasks), exiting without a traceback when the
    JVM has closed the worker's socket: over Unix domain sockets (conf/spark.conf) a write to a
    closed peer fails at once, where TCP took it, so a run killed on purpose (a crash point) or
    a JVM stopping ended with a BrokenPipeError per idle worker on stderr, after the run's own
    last words. Nobody is left to read the output; the exit code is the one the traceback's
    path gives."""

    def run(sock, authenticated):
        try:
            return worker(sock, authenticated)
        except (BrokenPipeError, ConnectionResetError):
            os._exit(1)

    return run


if __name__ == "__main__":
    sys.path[:] = prefer_installed_pyspark(sys.path)
    import pyspark.daemon

    prepare()
    pyspark.daemon.worker = quiet_when_the_jvm_is_gone(pyspark.daemon.worker)
    pyspark.daemon.manager()
