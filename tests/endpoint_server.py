"""jobs.serve in its own process for the endpoint tests (lib.reporting.endpoint_process), and the
two real clients they query it with: Spark Connect (jobs.audit --remote, or a script, each in its
own process: a Connect session switches pyspark into remote mode for the whole process, which the
shared local session cannot share) and beeline, the HiveServer2 JDBC client pyspark ships."""

from __future__ import annotations

import subprocess
import sys

from lib.reporting.endpoint_process import ServerProcess, beeline, job_env, launch, stop
from tests.helpers import REPO

__all__ = ["BEELINE_ROW", "ServerProcess", "beeline", "beeline_answers", "connect_script", "launch", "remote_audit"]
__all__ += ["stop"]

BEELINE_ROW = "@@"  # the marker line a beeline script prints before each answer


def remote_audit(url: str, *args: str, stdin: str = "", timeout_s: float = 300) -> subprocess.CompletedProcess:
    """`python -m jobs.audit --remote URL ARGS...` as a user runs it (`stdin`: its prompt's input)."""
    cmd = [sys.executable, "-m", "jobs.audit", "--remote", url, *args]
    return subprocess.run(cmd, cwd=REPO, env=job_env(), input=stdin, capture_output=True, text=True, timeout=timeout_s)


def connect_script(url: str, code: str, timeout_s: float = 300) -> subprocess.CompletedProcess:
    """Python `code` run in its own process with `spark`, a Spark Connect session of `url`."""
    prelude = f"from pyspark.sql import SparkSession\nspark = SparkSession.builder.remote({url!r}).getOrCreate()\n"
    return subprocess.run(
        [sys.executable, "-c", prelude + code],
        cwd=REPO,
        env=job_env(),
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def beeline_answers(stdout: str) -> dict[str, list[str]]:
    """beeline's output of statements `SELECT '@@name'` each followed by a one-column query:
    {name: its rows}."""
    answers: dict[str, list[str]] = {}
    current = None
    for line in stdout.splitlines():
        if line.startswith(BEELINE_ROW):
            current = line[len(BEELINE_ROW) :].strip()
            answers[current] = []
        elif current is not None and line.strip():
            answers[current].append(line)
    return answers
