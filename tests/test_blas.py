"""lib.blas: one BLAS thread in a run's processes, unless the operator chose a number."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from lib.blas import THREADS_VARIABLE, use_one_blas_thread

# the threads of a fresh interpreter once numpy is in (Linux: one entry a thread)
COUNT = "import os, numpy; print(len(os.listdir('/proc/self/task')))"


def _threads_after_numpy(env: dict) -> int:
    out = subprocess.run([sys.executable, "-c", COUNT], capture_output=True, text=True, check=True, env=env)
    return int(out.stdout)


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")
def test_numpy_starts_no_blas_thread_in_the_processes_started_after(monkeypatch):
    monkeypatch.delenv(THREADS_VARIABLE, raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    if (os.cpu_count() or 1) > 1:  # (the check can fail: without the setting numpy starts a helper)
        assert _threads_after_numpy(dict(os.environ)) > 1
    use_one_blas_thread()
    assert os.environ[THREADS_VARIABLE] == "1"
    assert _threads_after_numpy(dict(os.environ)) == 1


def test_the_operators_choice_stays(monkeypatch):
    monkeypatch.setenv(THREADS_VARIABLE, "4")
    use_one_blas_thread()
    assert os.environ[THREADS_VARIABLE] == "4"
