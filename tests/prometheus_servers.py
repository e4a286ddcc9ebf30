"""A real Prometheus Pushgateway and a real Prometheus server on loopback, for session fixtures:
Debian's `prometheus-pushgateway` and `prometheus` binaries (`bash conf/prometheus/install.sh`
installs them and prints their folder), each on a free port of 127.0.0.1 in its own temporary
folder with its own log, Prometheus scraping the Pushgateway every second with honor_labels.

    pushgateway = start_pushgateway(tmp)
    prometheus = start_prometheus(tmp, pushgateway)
    ...  # prometheus_client.push_to_gateway(pushgateway.address, job=..., registry=...)
    wait_for_series(prometheus, 'offsets_lake_group_lag_records{group="g1"}', timeout_s=15)
    stop(prometheus), stop(pushgateway)

Only the standard library and `requests`."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import requests

from lib.ports import free_port

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INSTALL_HINT = "bash conf/prometheus/install.sh"
# Where install.sh unpacks the packages when it cannot install them (not root).
LOCAL_BIN = os.path.join(REPO, ".tools", "prometheus", "usr", "bin")
SCRAPE_INTERVAL = "1s"
RETENTION = "2h"  # the TSDB's smallest block range: a test's data never outlives it
START_TIMEOUT_S = 30.0
LOG_TAIL_LINES = 40


class ServerError(RuntimeError):
    """A server did not start, died, or did not answer as expected; the message names the binary
    and ends with the tail of its log."""


@dataclass(frozen=True)
class _Running:
    """What both servers have: where they answer, log and keep files, and their process."""

    url: str  # http://127.0.0.1:PORT
    port: int
    log_path: str
    workdir: str
    binary: str


@dataclass(frozen=True)
class PushgatewayServer(_Running):
    proc: subprocess.Popen[bytes] = field(repr=False, compare=False)

    @property
    def address(self) -> str:
        """host:port, as prometheus_client.push_to_gateway and a scrape target take it."""
        return f"127.0.0.1:{self.port}"


@dataclass(frozen=True)
class PrometheusServer(_Running):
    config_path: str
    tsdb_path: str
    scrape_target: str  # host:port of the Pushgateway it scrapes
    proc: subprocess.Popen[bytes] = field(repr=False, compare=False)


Server = PushgatewayServer | PrometheusServer

_running: list[Server] = []


def find_binary(name: str) -> str:
    """`name` from $PROMETHEUS_BIN_DIR, else PATH, else /usr/bin, else install.sh's local folder."""
    folder = os.environ.get("PROMETHEUS_BIN_DIR")
    candidates = [os.path.join(folder, name)] if folder else []
    on_path = shutil.which(name)
    if on_path:
        candidates.append(on_path)
    candidates += [os.path.join("/usr/bin", name), os.path.join(LOCAL_BIN, name)]
    for path in candidates:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise ServerError(f"{name} not found (looked in {', '.join(dict.fromkeys(candidates))}): run `{INSTALL_HINT}`")


def binaries_available() -> bool:
    """Both binaries can be found (for a skip marker)."""
    try:
        find_binary("prometheus")
        find_binary("prometheus-pushgateway")
    except ServerError:
        return False
    return True


def log_tail(path: str, lines: int = LOG_TAIL_LINES) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(deque(f, maxlen=lines)).rstrip("\n")
    except OSError as e:
        return f"(no log: {e})"


def _fail(binary: str, log_path: str, what: str) -> ServerError:
    return ServerError(f"{binary}: {what}\n--- last lines of {log_path} ---\n{log_tail(log_path)}")


def _assets(binary: str, *rel: str) -> list[str]:
    """--web.local-assets beside an unpacked binary (its UI only; the API needs no assets)."""
    folder = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(binary))), "share", "prometheus", *rel)
    return [f"--web.local-assets={folder}"] if os.path.isdir(folder) else []


def _launch(binary: str, args: list[str], workdir: str, log_path: str) -> subprocess.Popen[bytes]:
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            [binary, *args],
            cwd=workdir,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a ^C in the terminal reaches pytest only; stop() ends it
        )


def _wait_ready(binary: str, proc: subprocess.Popen[bytes], url: str, log_path: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while True:
        code = proc.poll()
        if code is not None:
            raise _fail(binary, log_path, f"exited with code {code} before it was ready ({url}/-/ready)")
        try:
            r = requests.get(f"{url}/-/ready", timeout=2)
            if r.status_code == 200:
                return
            last = f"HTTP {r.status_code}: {r.text.strip()[:200]}"
        except requests.RequestException as e:
            last = type(e).__name__
        if time.monotonic() > deadline:
            _terminate(proc)
            raise _fail(binary, log_path, f"not ready at {url}/-/ready after {timeout_s:.0f}s (last: {last})")
        time.sleep(0.1)


def _start(
    name: str, tmpdir: str | os.PathLike[str], build_args: Callable[[str, str, int], list[str]], timeout_s: float
) -> tuple[str, int, str, str, subprocess.Popen[bytes]]:
    """Start `name` with build_args(binary, workdir, port) -> args, in a fresh folder under tmpdir; a port
    taken between free_port() and the bind is retried on another."""
    binary = find_binary(name)
    workdir = tempfile.mkdtemp(prefix=f"{name}-", dir=os.fspath(tmpdir))
    log_path = os.path.join(workdir, f"{name}.log")
    for attempt in range(3):
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        proc = _launch(binary, build_args(binary, workdir, port), workdir, log_path)
        try:
            _wait_ready(binary, proc, url, log_path, timeout_s)
            return binary, port, url, log_path, proc
        except ServerError:
            if attempt < 2 and "address already in use" in log_tail(log_path):
                continue
            raise
    raise AssertionError("unreachable")


def start_pushgateway(tmpdir: str | os.PathLike[str], timeout_s: float = START_TIMEOUT_S) -> PushgatewayServer:
    """A Pushgateway on 127.0.0.1, in memory only (no persistence file), admin API on (wipe())."""

    def args(binary: str, workdir: str, port: int) -> list[str]:
        return [
            f"--web.listen-address=127.0.0.1:{port}",
            "--persistence.file=",
            "--web.enable-admin-api",
            "--log.level=info",
            *_assets(binary, "pushgateway"),
        ]

    binary, port, url, log_path, proc = _start("prometheus-pushgateway", tmpdir, args, timeout_s)
    server = PushgatewayServer(url, port, log_path, os.path.dirname(log_path), binary, proc)
    _running.append(server)
    return server


def prometheus_config(scrape_target: str, interval: str = SCRAPE_INTERVAL, honor_labels: bool = True) -> dict[str, Any]:
    """prometheus.yml: one job scraping the Pushgateway. honor_labels keeps the pushed `job` and
    `instance` labels (without it they become exported_job/exported_instance, job="pushgateway")."""
    return {
        "global": {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": interval},
        "scrape_configs": [
            {"job_name": "pushgateway", "honor_labels": honor_labels, "static_configs": [{"targets": [scrape_target]}]}
        ],
    }


def start_prometheus(
    tmpdir: str | os.PathLike[str],
    scrape_target: str | PushgatewayServer,
    timeout_s: float = START_TIMEOUT_S,
    wait_for_scrape: bool = True,
    honor_labels: bool = True,
) -> PrometheusServer:
    """A Prometheus on 127.0.0.1 scraping `scrape_target` (a PushgatewayServer or host:port) every
    second, TSDB in its own folder. With wait_for_scrape, returns once a scrape of the target has
    succeeded (up == 1), so a push after this is visible within about a second."""
    target = scrape_target.address if isinstance(scrape_target, PushgatewayServer) else scrape_target
    target = target.split("://", 1)[-1].rstrip("/")

    def args(binary: str, workdir: str, port: int) -> list[str]:
        config = os.path.join(workdir, "prometheus.yml")
        with open(config, "w") as f:
            json.dump(prometheus_config(target, honor_labels=honor_labels), f, indent=2)  # JSON is YAML
        return [
            f"--config.file={config}",
            f"--web.listen-address=127.0.0.1:{port}",
            f"--storage.tsdb.path={os.path.join(workdir, 'tsdb')}",
            f"--storage.tsdb.retention.time={RETENTION}",
            f"--web.console.templates={os.path.join(workdir, 'consoles')}",
            f"--web.console.libraries={os.path.join(workdir, 'console_libraries')}",
            "--log.level=info",
            *_assets(binary, "web"),
        ]

    binary, port, url, log_path, proc = _start("prometheus", tmpdir, args, timeout_s)
    workdir = os.path.dirname(log_path)
    server = PrometheusServer(
        url,
        port,
        log_path,
        workdir,
        binary,
        os.path.join(workdir, "prometheus.yml"),
        os.path.join(workdir, "tsdb"),
        target,
        proc,
    )
    _running.append(server)
    if wait_for_scrape:
        try:
            wait_for_series(server, f'up{{instance="{target}"}} == 1', timeout_s)
        except ServerError:
            stop(server)
            raise
    return server


def _terminate(proc: subprocess.Popen[bytes], timeout_s: float = 15.0) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def stop(server: Server, timeout_s: float = 15.0) -> None:
    """SIGTERM, wait up to timeout_s, then SIGKILL. Idempotent."""
    _terminate(server.proc, timeout_s)
    if server in _running:
        _running.remove(server)


@atexit.register
def _stop_all() -> None:
    for server in list(_running):
        stop(server)


def _check_alive(server: Server) -> None:
    code = server.proc.poll()
    if code is not None:
        raise _fail(server.binary, server.log_path, f"exited with code {code}")


def query(prometheus: PrometheusServer, promql: str, timeout_s: float = 10.0) -> list[dict[str, Any]]:
    """An instant query through /api/v1/query: the result's series as
    [{"metric": {label: value}, "value": [unix_time, "value as text"]}]. A scalar or string result
    comes as one such entry with no labels."""
    try:
        r = requests.get(f"{prometheus.url}/api/v1/query", params={"query": promql}, timeout=timeout_s)
    except requests.RequestException as e:
        _check_alive(prometheus)
        raise ServerError(f"{prometheus.binary}: query {promql!r} failed: {e}") from e
    try:
        body = r.json()
    except ValueError:
        body = None
    if r.status_code != 200 or not isinstance(body, dict) or body.get("status") != "success":
        raise ServerError(f"{prometheus.binary}: query {promql!r} -> HTTP {r.status_code}: {r.text.strip()}")
    data = body["data"]
    if data["resultType"] in ("scalar", "string"):
        return [{"metric": {}, "value": data["result"]}]
    return list(data["result"])


def targets(prometheus: PrometheusServer) -> list[dict[str, Any]]:
    """The active scrape targets (/api/v1/targets): health, lastError, lastScrape, labels."""
    r = requests.get(f"{prometheus.url}/api/v1/targets", params={"state": "active"}, timeout=10)
    r.raise_for_status()
    return list(r.json()["data"]["activeTargets"])


def wait_for_series(
    prometheus: PrometheusServer, promql: str, timeout_s: float = 30.0, poll_s: float = 0.2
) -> list[dict[str, Any]]:
    """Poll `promql` until it returns at least one series; returns them."""
    deadline = time.monotonic() + timeout_s
    while True:
        _check_alive(prometheus)
        result = query(prometheus, promql)
        if result:
            return result
        if time.monotonic() > deadline:
            try:
                scrape = "; ".join(
                    f"{t['scrapeUrl']} health={t['health']} lastError={t['lastError']!r}" for t in targets(prometheus)
                )
            except (requests.RequestException, KeyError, ValueError) as e:
                scrape = f"(targets unavailable: {e})"
            raise _fail(
                prometheus.binary,
                prometheus.log_path,
                f"no series for {promql!r} after {timeout_s:.0f}s; targets: {scrape}",
            )
        time.sleep(poll_s)


def wipe(pushgateway: PushgatewayServer) -> None:
    """Delete every group pushed so far (admin API), e.g. between tests sharing one Pushgateway."""
    r = requests.put(f"{pushgateway.url}/api/v1/admin/wipe", timeout=10)
    if r.status_code not in (200, 202):
        raise ServerError(f"{pushgateway.binary}: wipe -> HTTP {r.status_code}: {r.text.strip()}")
