"""Test hooks at the named points of a run (tests/test_crash_recovery.py,
tests/test_stage_crash_recovery.py): no effect unless their environment variables are set.

OFFSETS_LAKE_KILL_AT=<name> makes the process SIGKILL itself at that point, as a lost executor
host or an OOM killer would, saying so on stderr first (so the test knows where it died).
OFFSETS_LAKE_PAUSE_AT=<name> with OFFSETS_LAKE_PAUSE_FILE=<path> holds the run there (with the
warehouse lock) after creating <path>.paused, until <path>.go exists."""

from __future__ import annotations

import os
import time


def crash_point(name: str) -> None:
    if os.environ.get("OFFSETS_LAKE_KILL_AT") == name:
        import signal
        import sys

        sys.stderr.write(f"offsets-lake: SIGKILL at crash point {name}\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    if os.environ.get("OFFSETS_LAKE_PAUSE_AT") == name:
        path = os.environ["OFFSETS_LAKE_PAUSE_FILE"]
        open(path + ".paused", "w").close()
        deadline = time.monotonic() + 600
        while not os.path.exists(path + ".go") and time.monotonic() < deadline:
            time.sleep(0.05)
