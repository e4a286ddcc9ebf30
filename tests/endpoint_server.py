"""jobs.serve in its own process for the endpoint tests, and the two real clients they query it
with: Spark Connect (jobs.audit --remote, in its own process: a Connect session switches pyspark
into remote mode for the whole process, which the shared local session cannot share) and beeline,
the HiveServer2 JDBC client pyspark ships."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass

from tests.helpers import REPO

BEELINE_ROW = "@@"  # the marker line a beeline script prints before each answer


@dataclass
class Endpoint:
    proc: subprocess.Popen
    log_path: str
    connect_url: str  # with its token
    jdbc_url: str
    token: str
    connect_port: int

    def log_tail(self, lines: int = 40) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-lines:])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env() -> dict:
    return dict(os.environ, PYTHONPATH=REPO, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)


def start(warehouse: str, workdir: str, token: str, timeout_s: float = 300) -> Endpoint:
    token_file = os.path.join(workdir, "token")
    with open(token_file, "w") as f:
        f.write(token + "\n")
    ready = os.path.join(workdir, "ready.json")
    log_path = os.path.join(workdir, "serve.log")
    connect_port, jdbc_port = free_port(), free_port()
    cmd = [sys.executable, "-m", "jobs.serve", "--warehouse", warehouse, "--token-file", token_file]
    cmd += ["--connect-port", str(connect_port), "--jdbc-port", str(jdbc_port), "--ready-file", ready]
    cmd += ["--conf", "spark.master=local[2]", "--conf", "spark.sql.shuffle.partitions=2"]
    log = open(log_path, "w")  # open for the server's lifetime
    proc = subprocess.Popen(cmd, cwd=REPO, env=env(), stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(ready):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            with open(log_path, encoding="utf-8", errors="replace") as f:
                raise RuntimeError(f"jobs.serve did not come up (exit {proc.poll()}):\n{f.read()[-4000:]}")
        time.sleep(0.5)
    with open(ready) as f:
        urls = json.load(f)
    return Endpoint(proc, log_path, urls["connect_url"], urls["jdbc_url"], token, connect_port)


def stop(endpoint: Endpoint) -> int:
    endpoint.proc.send_signal(signal.SIGTERM)
    try:
        return endpoint.proc.wait(120)
    except subprocess.TimeoutExpired:
        endpoint.proc.kill()
        return endpoint.proc.wait()


def remote_audit(url: str, *args: str, stdin: str = "", timeout_s: float = 300) -> subprocess.CompletedProcess:
    """`python -m jobs.audit --remote URL ARGS...` as a user runs it (`stdin`: its prompt's input)."""
    cmd = [sys.executable, "-m", "jobs.audit", "--remote", url, *args]
    return subprocess.run(cmd, cwd=REPO, env=env(), input=stdin, capture_output=True, text=True, timeout=timeout_s)


def connect_script(url: str, code: str, timeout_s: float = 300) -> subprocess.CompletedProcess:
    """Python `code` run in its own process with `spark`, a Spark Connect session of `url`."""
    prelude = f"from pyspark.sql import SparkSession\nspark = SparkSession.builder.remote({url!r}).getOrCreate()\n"
    return subprocess.run(
        [sys.executable, "-c", prelude + code], cwd=REPO, env=env(), capture_output=True, text=True, timeout=timeout_s
    )


def beeline_path() -> str:
    import pyspark

    return os.path.join(os.path.dirname(pyspark.__file__), "bin", "beeline")


def beeline(jdbc_url: str, statements: list[str], password: str, timeout_s: float = 300) -> subprocess.CompletedProcess:
    """The statements run by beeline in one connection (one JVM), TSV without headers; a
    failing statement stops the script (its error on stderr)."""
    import pyspark

    run_env = dict(env(), SPARK_HOME=os.path.dirname(pyspark.__file__))
    script = "".join(s.rstrip().rstrip(";") + ";\n" for s in statements)
    cmd = [beeline_path(), "-u", jdbc_url, "-n", "tester", "-p", password, "--silent=true"]
    cmd += ["--outputformat=tsv2", "--showHeader=false", "-e", script]
    return subprocess.run(cmd, env=run_env, capture_output=True, text=True, timeout=timeout_s)


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
