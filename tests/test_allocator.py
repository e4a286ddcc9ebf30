"""lib.allocator: the memory pool a run's processes allocate from, unless the operator chose one."""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow as pa

from lib.allocator import POOL_VARIABLE, use_run_allocator


def test_jemalloc_for_the_processes_started_after(monkeypatch):
    monkeypatch.delenv(POOL_VARIABLE, raising=False)
    use_run_allocator()
    assert "jemalloc" in pa.supported_memory_backends()
    out = subprocess.run(
        [sys.executable, "-c", "import pyarrow as pa; pa.array([1]); print(pa.default_memory_pool().backend_name)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "jemalloc"


def test_the_operators_choice_stays(monkeypatch):
    monkeypatch.setenv(POOL_VARIABLE, "system")
    use_run_allocator()
    assert os.environ[POOL_VARIABLE] == "system"


def test_a_clusters_executors_get_the_runs_pool(monkeypatch):
    """A standalone or YARN cluster's Python workers start from their worker's environment, not
    this process's: the pool goes to them as an executor setting (a local master's inherit it)."""
    from lib.spark.session import _settings

    monkeypatch.setenv(POOL_VARIABLE, "jemalloc")
    key = f"spark.executorEnv.{POOL_VARIABLE}"
    assert _settings("t", {"spark.master": "spark://127.0.0.1:7077"}, None, False)[key] == "jemalloc"
    assert key not in _settings("t", {"spark.master": "local[2]"}, None, False)
    # the operator's own setting stays
    given = {"spark.master": "spark://127.0.0.1:7077", key: "system"}
    assert _settings("t", given, None, False)[key] == "system"
    monkeypatch.delenv(POOL_VARIABLE)
    assert key not in _settings("t", {"spark.master": "spark://127.0.0.1:7077"}, None, False)
