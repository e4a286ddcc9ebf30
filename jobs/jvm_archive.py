"""Write the driver JVM's class archive (lib/spark/jvm_archive.py) for this machine's JDK and
jars, unless it is there; `make setup` runs it.

    python -m jobs.jvm_archive

The archive holds what a replay of the bundled ten-day sample (its SparkContext, Python workers
and lag stage) and a SparkSession's Delta read load. A failure is a warning: the jobs start
without the archive, as before."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from lib.spark.jvm_archive import REPO_ROOT, write_archive
from lib.spark.session import spark_jars

SAMPLE = os.path.join(REPO_ROOT, "samples", "days")


def workload(folder: str) -> None:
    """Run in the child whose driver JVM writes the archive at its exit."""
    from lib.source.logdir import find_partitions
    from lib.spark.pipeline import run_replay
    from lib.spark.session import REPLAY_DEFAULTS, build_context

    with open(os.path.join(SAMPLE, "NOW"), encoding="utf-8") as f:
        now_ms = int(f.read().strip())
    warehouse = os.path.join(folder, "warehouse")
    jobs = build_context("jvm-archive", None, REPLAY_DEFAULTS)
    run_replay(jobs, find_partitions(os.path.join(SAMPLE, "logdir")), warehouse, now_ms)
    session = jobs.session()
    session.read.format("delta").load(os.path.join(warehouse, "group_offsets")).count()
    jobs.stop(wait_for_jvm_s=300)  # the JVM writes the archive as it exits


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--workload"]:
        workload(argv[1])
        return 0
    t0 = time.monotonic()
    try:
        path, made = write_archive(spark_jars(), [sys.executable, "-m", "jobs.jvm_archive", "--workload", "{folder}"])
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        # a cache: the jobs start without it, as before (tests/test_jvm_archive.py says so)
        print(f"warning: the JVM's class archive was not written, jobs start without it: {e}", file=sys.stderr)
        return 0
    if made:
        size = os.path.getsize(path) / 2**20
        print(f"JVM class archive: {path} ({size:.0f} MB, written in {time.monotonic() - t0:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
