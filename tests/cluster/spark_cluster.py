"""A Spark standalone cluster on loopback, from pyspark's own distribution: one master and
workers of one core each, every process with its own working directory and an environment
without this repository on PYTHONPATH (code reaches executors only through --py-files)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request

import pyspark

from lib.ports import free_port

SPARK_HOME = os.path.dirname(pyspark.__file__)


def clean_env(home: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME", "PYSPARK_GATEWAY_PORT")}
    env.update(
        SPARK_HOME=SPARK_HOME,
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        HOME=home,  # numba's cache and anything else per-user land here, not in ours
    )
    return env


class SparkCluster:
    def __init__(self, root: str, workers: int = 2):
        self.root = root
        self.port, self.ui_port = free_port(), free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen] = []
        self.workers = workers

    def _start(self, name: str, args: list[str]) -> None:
        folder = os.path.join(self.root, name)
        os.makedirs(folder, exist_ok=True)
        log = open(os.path.join(folder, "out.log"), "w")
        self.procs.append(
            subprocess.Popen(
                [os.path.join(SPARK_HOME, "bin", "spark-class"), *args],
                cwd=folder,
                env=clean_env(folder),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )

    def start(self) -> SparkCluster:
        self._start(
            "master",
            [
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--webui-port",
                str(self.ui_port),
            ],
        )
        for i in range(self.workers):
            folder = os.path.join(self.root, f"worker{i}")
            self._start(
                f"worker{i}",
                [
                    "org.apache.spark.deploy.worker.Worker",
                    self.url,
                    "--host",
                    "127.0.0.1",
                    "--cores",
                    "1",
                    "--memory",
                    "1g",
                    "--webui-port",
                    str(free_port()),
                    "--work-dir",
                    os.path.join(folder, "work"),
                ],
            )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"a cluster process exited ({p.args!r}): see {self.root}/*/out.log")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=2) as r:
                    state = json.load(r)
                if sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE") == self.workers:
                    return self
            except (OSError, ValueError):
                # ValueError: the master's web server starts before its pages are attached, and
                # in that window its "/" page (HTML) answers for "/json/" too: not ready yet.
                pass
            time.sleep(0.5)
        raise RuntimeError(f"the Spark cluster did not start in 120 s: see {self.root}/*/out.log")

    def stop(self) -> None:
        for p in reversed(self.procs):
            p.terminate()
        for p in self.procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
