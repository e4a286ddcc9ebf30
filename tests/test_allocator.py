"""lib.allocator: the memory pool a run's processes allocate from, unless the operator chose one."""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow as pa

from lib.allocator import POOL_VARIABLE, built_with_jemalloc, use_run_allocator
from tests.helpers import REPO


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


def test_the_pool_is_chosen_without_importing_pyarrow():
    """The build configuration pyarrow installs says what pyarrow itself says, and reading it
    imports no pyarrow (the fork server starts next)."""
    assert built_with_jemalloc() == ("jemalloc" in pa.supported_memory_backends())
    code = (
        "import os, sys; os.environ.pop('ARROW_DEFAULT_MEMORY_POOL', None); "
        "from lib.allocator import use_run_allocator; use_run_allocator(); "
        "print('pyarrow' in sys.modules, os.environ.get('ARROW_DEFAULT_MEMORY_POOL'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.split() == ["False", "jemalloc"]


def test_without_the_build_configuration_pyarrow_is_asked(monkeypatch, tmp_path):
    """A pyarrow installed without its headers: its own list of backends decides."""
    import importlib.util

    class Spec:
        submodule_search_locations = [str(tmp_path)]  # (no include/ there)

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: Spec())
    assert built_with_jemalloc() == ("jemalloc" in pa.supported_memory_backends())
    (tmp_path / "include" / "arrow" / "util").mkdir(parents=True)
    (tmp_path / "include" / "arrow" / "util" / "config.h").write_text("#define ARROW_MIMALLOC\n")
    assert built_with_jemalloc() is False  # the file, when there, decides
