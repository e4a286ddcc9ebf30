"""jobs.serve as a child process, and beeline (the HiveServer2 JDBC client pyspark ships) as a
client of it: what the endpoint's tests and its benchmark (jobs.bench_endpoint) share."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

from lib.ports import free_port

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclass
class ServerProcess:
    proc: subprocess.Popen
    log_path: str
    connect_url: str  # with its token, when it has one
    jdbc_url: str
    token: str | None
    seconds_to_ready: float

    def log_tail(self, lines: int = 40) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-lines:])


def job_env() -> dict:
    """This interpreter and the repository for a job's process and its Spark workers."""
    return dict(os.environ, PYTHONPATH=REPO_ROOT, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)


def launch(
    warehouse: str, workdir: str, token: str | None = None, conf: tuple[str, ...] = (), timeout_s: float = 300
) -> ServerProcess:
    """`python -m jobs.serve` on free loopback ports, returned once it answers (its --ready-file)."""
    ready = os.path.join(workdir, "ready.json")
    log_path = os.path.join(workdir, "serve.log")
    cmd = [sys.executable, "-m", "jobs.serve", "--warehouse", warehouse, "--ready-file", ready]
    cmd += ["--connect-port", str(free_port()), "--jdbc-port", str(free_port())]
    if token:
        token_file = os.path.join(workdir, "token")
        with open(token_file, "w") as f:
            f.write(token + "\n")
        cmd += ["--token-file", token_file]
    for setting in conf:
        cmd += ["--conf", setting]
    started = time.monotonic()
    with open(log_path, "w") as log:  # the child keeps its own handle
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=job_env(), stdout=log, stderr=subprocess.STDOUT)
    while not os.path.exists(ready):
        if proc.poll() is not None or time.monotonic() - started > timeout_s:
            proc.kill()
            with open(log_path, encoding="utf-8", errors="replace") as f:
                raise RuntimeError(f"jobs.serve did not come up (exit {proc.poll()}):\n{f.read()[-4000:]}")
        time.sleep(0.2)
    with open(ready) as f:
        urls = json.load(f)
    return ServerProcess(proc, log_path, urls["connect_url"], urls["jdbc_url"], token, time.monotonic() - started)


def stop(server: ServerProcess, timeout_s: float = 120) -> int:
    """SIGTERM, as an operator stops it; its exit code."""
    server.proc.send_signal(signal.SIGTERM)
    try:
        return server.proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        return server.proc.wait()


def beeline(
    jdbc_url: str, statements: list[str], password: str | None, silent: bool = True, timeout_s: float = 300
) -> subprocess.CompletedProcess:
    """The statements run by beeline in one connection (one JVM), TSV without headers; a
    failing statement stops the script (its error on stderr)."""
    import pyspark

    spark_home = os.path.dirname(pyspark.__file__)
    script = "".join(s.rstrip().rstrip(";") + ";\n" for s in statements)
    cmd = [os.path.join(spark_home, "bin", "beeline"), "-u", jdbc_url, "-n", "offsets-lake"]
    cmd += ["-p", password] if password else []  # an empty -p makes beeline prompt for one
    cmd += [f"--silent={'true' if silent else 'false'}"]
    cmd += ["--outputformat=tsv2", "--showHeader=false", "-e", script]
    env = dict(job_env(), SPARK_HOME=spark_home)
    return subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout_s)
