"""Benchmark of the SQL endpoint: one canned audit (lag_at) through jobs.serve against the same
audit from a cold `jobs.audit` (its own process and Spark session), on the same warehouse.

Side by side in one run, each client its own process:
- cold: `python -m jobs.audit --warehouse WH lag_at ...`, wall time (median of --cold);
- the endpoint's start: `python -m jobs.serve` until it answers;
- Spark Connect, a connected session: the audit's latency (median and p90 of --repeat), after
  one warm-up; and attaching a new session (jobs.audit --remote's set-up);
- JDBC (beeline, one connection): the audit's table function, beeline's own timing per query;
- `python -m jobs.audit --remote`, wall time of the whole command (median of --cold);
- peak RSS of the endpoint's processes (its driver's Python and JVM).

Prints `name value unit` per figure (targets: the endpoint under 1 s median, and 10x faster than
a cold run) and writes them as JSON beside the warehouse.

    python -m jobs.bench_endpoint [--warehouse WH] [--group G] [--repeat 20] [--cold 3]

Without --warehouse, the ten-day sample is replayed into bench-data/endpoint-warehouse once."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

from jobs.bench import descendants, is_java, proc_table
from lib.reporting.endpoint_process import beeline, job_env, launch, stop

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(REPO, "samples", "days")
QUERY = "lag_at"
TARGET_MEDIAN_S = 1.0
TARGET_SPEEDUP = 10.0


def sample_warehouse(data: str) -> tuple[str, int]:
    """The ten-day sample replayed once (cached), and its --now."""
    with open(os.path.join(SAMPLE, "NOW")) as f:
        now = int(f.read().strip())
    wh = os.path.join(data, "endpoint-warehouse")
    if not os.path.isdir(os.path.join(wh, "group_lag")):
        cmd = [sys.executable, "-m", "jobs.replay_offsets", "--input", os.path.join(SAMPLE, "logdir")]
        cmd += ["--warehouse", wh, "--full", "--now", str(now), "--quiet"]
        subprocess.run(cmd, cwd=REPO, env=job_env(), check=True)
    return wh, now


def busiest_group(warehouse: str) -> tuple[str, int]:
    """The group with the most lag rows at the latest --now, and that --now (ms)."""
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    lag = DeltaTable(os.path.join(warehouse, "group_lag")).to_pyarrow_table(columns=["group_id", "kind", "at"])
    lag = lag.filter(pc.equal(lag.column("kind"), "now"))
    now = pc.max(lag.column("at")).as_py()
    counts = lag.filter(pc.equal(lag.column("at"), now)).column("group_id").value_counts().to_pylist()
    best = max(counts, key=lambda c: (c["counts"], c["values"]))
    return best["values"], int(now.timestamp() * 1000)


def rule_views(warehouse: str) -> int:
    """How many rule views the endpoint keeps for this warehouse (those whose tables it has)."""
    from lib.spark.audit_views import VIEW_TABLES

    present = set(os.listdir(warehouse))
    return sum(1 for needs in VIEW_TABLES.values() if set(needs) <= present)


def timed(cmd: list[str]) -> float:
    t0 = time.monotonic()
    out = subprocess.run(cmd, cwd=REPO, env=job_env(), capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stderr[-3000:]}")
    return time.monotonic() - t0


CONNECT_CLIENT = """
import json, statistics, sys, time
from pyspark.sql import SparkSession
from lib.reporting.audit_queries import bind, get_query, inline_query
from lib.reporting.endpoint import attach
url, group, at, repeat, views = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
t0 = time.monotonic()
spark = SparkSession.builder.remote(url).getOrCreate()
while True:  # until the server has computed every rule view it keeps
    try:
        if spark.sql("SELECT count(*) FROM global_temp.endpoint_views").first()[0] >= views:
            break
    except Exception:
        pass  # not published before the first view is computed
    time.sleep(1)
kept_s = time.monotonic() - t0
t0 = time.monotonic()
attach(spark)
attach_s = time.monotonic() - t0
q = get_query("lag_at")
text = inline_query(q, bind(q, {"group": group, "at": at}))
rows = len(spark.sql(text).collect())  # warm-up
times = []
for _ in range(repeat):
    t = time.monotonic()
    spark.sql(text).collect()
    times.append(time.monotonic() - t)
print(json.dumps({"attach_s": attach_s, "kept_s": kept_s, "rows": rows, "times": times}))
"""


def server_peak_mb(pid: int) -> tuple[float, float]:
    """VmHWM of the endpoint's Python driver and of its JVM, MB."""

    def hwm(p: int) -> float:
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) / 1024
        except OSError:
            pass
        return 0.0

    procs = proc_table()
    jvm = max((hwm(p) for p in descendants(procs, pid) if is_java(procs[p][2])), default=0.0)
    return hwm(pid), jvm


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="bench_endpoint")
    p.add_argument("--warehouse", help="a warehouse with group_lag (default: the ten-day sample, replayed once)")
    p.add_argument("--group", help="the group lag_at asks about (default: the one with the most partitions)")
    p.add_argument("--data", default=os.path.join(REPO, "bench-data"))
    p.add_argument("--repeat", type=int, default=20, help="queries through the endpoint (median, p90)")
    p.add_argument("--start-timeout", type=float, default=600, help="seconds jobs.serve may take to answer")
    p.add_argument("--cold", type=int, default=3, help="cold jobs.audit runs, and jobs.audit --remote runs")
    args = p.parse_args(argv)
    os.makedirs(args.data, exist_ok=True)
    if args.warehouse:
        warehouse = args.warehouse
    else:
        warehouse, _ = sample_warehouse(args.data)
    group, now_ms = busiest_group(warehouse)
    group = args.group or group
    at = dt.datetime.fromtimestamp(now_ms / 1000, dt.UTC).isoformat()
    params = ["--param", f"group={group}", "--param", f"at={at}"]
    figures: dict[str, float] = {}

    cold = [
        timed([sys.executable, "-m", "jobs.audit", "--warehouse", warehouse, QUERY, *params]) for _ in range(args.cold)
    ]
    figures["cold_audit_s"] = statistics.median(cold)

    with tempfile.TemporaryDirectory(prefix="bench-endpoint-") as work:
        server = launch(warehouse, work, conf=("spark.sql.shuffle.partitions=2",), timeout_s=args.start_timeout)
        views = rule_views(warehouse)
        try:
            figures["endpoint_start_s"] = server.seconds_to_ready
            client = subprocess.run(
                [sys.executable, "-c", CONNECT_CLIENT, server.connect_url, group, at, str(args.repeat), str(views)],
                cwd=REPO,
                env=job_env(),
                capture_output=True,
                text=True,
                check=True,
            )
            connect = json.loads(client.stdout.strip().splitlines()[-1])
            times = sorted(connect["times"])
            figures["connect_median_s"] = statistics.median(times)
            figures["connect_p90_s"] = times[int(0.9 * (len(times) - 1))]
            figures["views_kept_after_start_s"] = connect["kept_s"]
            figures["connect_attach_with_functions_s"] = connect["attach_s"]
            figures["rows"] = connect["rows"]

            call = f"SELECT * FROM {QUERY}(`group` => '{group}', `at` => TIMESTAMP '{at}')"
            jdbc = beeline(server.jdbc_url, [call] * (args.repeat + 1), None, silent=False)
            if jdbc.returncode != 0:
                raise RuntimeError(f"beeline failed:\n{jdbc.stderr[-3000:]}")
            seconds = [float(s) for s in re.findall(r"rows? selected \(([\d.]+) seconds\)", jdbc.stderr + jdbc.stdout)]
            jdbc_times = sorted(seconds[1:])  # the first is the warm-up
            figures["jdbc_median_s"] = statistics.median(jdbc_times)
            figures["jdbc_p90_s"] = jdbc_times[int(0.9 * (len(jdbc_times) - 1))]

            remote = [
                timed([sys.executable, "-m", "jobs.audit", "--remote", server.connect_url, QUERY, *params])
                for _ in range(args.cold)
            ]
            figures["remote_audit_command_s"] = statistics.median(remote)
            figures["endpoint_python_peak_mb"], figures["endpoint_jvm_peak_mb"] = server_peak_mb(server.proc.pid)
        finally:
            stop(server)
    figures["speedup_connect_over_cold"] = figures["cold_audit_s"] / figures["connect_median_s"]
    figures["speedup_jdbc_over_cold"] = figures["cold_audit_s"] / figures["jdbc_median_s"]
    figures["speedup_remote_command_over_cold"] = figures["cold_audit_s"] / figures["remote_audit_command_s"]

    print(f"# {QUERY} for group {group} at {at} ({figures['rows']:.0f} rows) over {warehouse}")
    units = {"_s": "s", "_mb": "MB", "speedup": "x", "rows": "rows"}
    for name, value in figures.items():
        unit = next((u for k, u in units.items() if k in name), "")
        target = ""
        if name in ("connect_median_s", "jdbc_median_s"):
            target = f"  (target < {TARGET_MEDIAN_S:g} s: {'met' if value < TARGET_MEDIAN_S else 'NOT met'})"
        elif name in ("speedup_connect_over_cold", "speedup_jdbc_over_cold"):
            target = f"  (target >= {TARGET_SPEEDUP:g}x: {'met' if value >= TARGET_SPEEDUP else 'NOT met'})"
        print(f"{name} {value:.3f} {unit}{target}")
    with open(os.path.join(args.data, "bench-endpoint.json"), "w") as f:
        json.dump({"warehouse": warehouse, "group": group, "at": at, **figures}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
