"""The replay's Spark context (lib.spark.session.build_context with REPLAY_DEFAULTS): what its
Python workers run with. In its own process: a test session has one SparkContext, built with
the tests' settings."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parent.parent

CODE = """
import json
from lib.spark.session import REPLAY_DEFAULTS, build_context

jobs = build_context("replay-workers-test", {"spark.executorEnv.MALLOC_TRIM_THRESHOLD_": "1"}, REPLAY_DEFAULTS)

def seen(_):
    import os
    import numpy._core.multiarray as multiarray
    names = ("NUMPY_MADVISE_HUGEPAGE", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")
    return {**{n: os.environ.get(n) for n in names}, "huge_pages": multiarray._get_madvise_hugepage()}

print(json.dumps(jobs.sparkContext.parallelize([0], 1).map(seen).collect()))
jobs.stop()
"""


def test_the_replay_workers_keep_small_pages_and_their_freed_memory():
    """numpy without huge pages, glibc keeping up to 256 MB freed and arrays under 64 MB in its
    heap (REPLAY_WORKER_ENV); a --conf spark.executorEnv.* of the user's wins."""
    out = subprocess.run([sys.executable, "-c", CODE], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [
        {
            "NUMPY_MADVISE_HUGEPAGE": "0",
            "MALLOC_MMAP_THRESHOLD_": str(64 * 1024 * 1024),
            "MALLOC_TRIM_THRESHOLD_": "1",
            "huge_pages": False,
        }
    ]
