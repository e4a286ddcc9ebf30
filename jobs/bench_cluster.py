"""Benchmark: the full replay of the bench log (jobs.bench's, cached under bench-data/) in four
places, side by side in one run, each in its own processes: local Spark on local disk; a Spark
standalone cluster (a master and two one-core workers on this machine, from pyspark's own
distribution) through `make submit`; and both again with the log archive and the warehouse in
an S3-compatible server (S3Proxy on loopback). Prints `name value unit` lines: wall time of each
run, its ratio to the local run, and peak RSS per kind of process.

    python -m jobs.bench_cluster [--records N] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOW_MS = 1_760_000_000_000 + 86_400_000  # jobs.bench's


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="bench_cluster")
    p.add_argument("--records", type=int, default=10_000_000)
    p.add_argument("--partitions", type=int, default=50)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--data", default=os.path.join(REPO, "bench-data"))
    p.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="runs of each place (median; the first cluster run compiles the numba kernels on the executors)",
    )
    p.add_argument("--work", default=None, help="scratch folder (default: a temporary one)")
    args = p.parse_args(argv)

    from jobs.bench import count_records, ensure_log, settle_disk
    from tests.cluster.spark_cluster import SparkCluster, clean_env
    from tests.s3.s3_server import S3Server

    log_dir = ensure_log(args.data, args.records + args.records // 100, args.partitions, args.seed)
    records = count_records(log_dir)
    work = args.work or tempfile.mkdtemp(prefix="offsets-lake-bench-cluster-")
    os.makedirs(work, exist_ok=True)
    cluster = SparkCluster(os.path.join(work, "cluster")).start()
    server = S3Server(os.path.join(work, "s3")).start()
    try:
        server.make_bucket("bench-archive")
        server.make_bucket("bench-lake")
        t0 = time.monotonic()
        server.upload_dir(log_dir, "s3a://bench-archive/log")
        print(f"uploaded the log to the S3 server in {time.monotonic() - t0:.1f}s", flush=True)
        subprocess.run(["make", "-s", "--no-print-directory", "dist"], cwd=REPO, check=True)
        places = {
            "local": (None, log_dir, os.path.join(work, "wh-local")),
            "cluster": (cluster.url, log_dir, os.path.join(work, "wh-cluster")),
            "local_s3": (None, "s3a://bench-archive/log", "s3a://bench-lake/wh-local"),
            "cluster_s3": (cluster.url, "s3a://bench-archive/log", "s3a://bench-lake/wh-cluster"),
        }
        walls: dict[str, list[float]] = {name: [] for name in places}
        peaks: dict[str, dict[str, float]] = {name: {} for name in places}
        job_seconds: dict[str, list[float]] = {name: [] for name in places}
        for _ in range(args.repeat):
            for name, (master, source, warehouse) in places.items():
                settle_disk()
                env = {**clean_env(os.path.join(work, "home")), **server.env}
                wall, job_s, peak = run(master, source, warehouse, env, cluster)
                walls[name].append(wall)
                if job_s is not None:
                    job_seconds[name].append(job_s)
                for k, v in peak.items():
                    peaks[name][k] = max(peaks[name].get(k, 0.0), v)
                print(f"  {name}: {wall:.2f}s (job {job_s}s)", flush=True)
        print(f"records {records} records")
        base = statistics.median(walls["local"])
        for name in places:
            median = statistics.median(walls[name])
            print(f"replay_wall_s_{name} {median:.2f} s (median of {len(walls[name])})")
            print(f"replay_wall_s_{name}_each " + " ".join(f"{w:.2f}" for w in walls[name]) + " s")
            print(f"replay_records_per_s_{name} {records / median:.0f} records/s")
            if name != "local":
                print(f"replay_wall_{name}_over_local {median / base:.2f}")
            if job_seconds[name]:
                print(
                    f"replay_job_s_{name} {statistics.median(job_seconds[name]):.2f} s (the job's own figure: "
                    "from its start to its last commit)"
                )
            for kind, mb in sorted(peaks[name].items()):
                print(f"peak_rss_mb_{name}_{kind} {mb:.1f} MB")
    finally:
        server.stop()
        cluster.stop()
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


def run(
    master: str | None, source: str, warehouse: str, env: dict, cluster
) -> tuple[float, float | None, dict[str, float]]:
    """One full replay in its own processes: `python -m jobs.replay_offsets` in local mode, or
    `make submit` to the cluster. Returns (wall seconds, the job's own seconds, peak RSS MB by
    kind of process)."""
    from jobs.bench import descendants, is_java, is_python_worker, proc_table

    if not warehouse.startswith("s3a://"):
        shutil.rmtree(warehouse, ignore_errors=True)
    job_args = ["--input", source, "--warehouse", warehouse, "--full", "--now", str(NOW_MS), "--quiet"]
    if master is None:
        cmd = [sys.executable, "-m", "jobs.replay_offsets", *job_args]
        env = {**env, "PYTHONPATH": REPO, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    else:
        cmd = ["make", "-s", "--no-print-directory", "submit", "ARGS=" + " ".join(["--master", master, *job_args])]
    peaks = {"driver_jvm": 0.0, "driver_python": 0.0, "executor_jvm": 0.0, "python_worker": 0.0}
    roots = [p.pid for p in cluster.procs]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while proc.poll() is None:
        procs = proc_table()
        mine = descendants(procs, proc.pid) | {proc.pid}
        theirs = set().union(*(descendants(procs, r) for r in roots))
        for pid in mine | theirs:
            _, rss, cmdline = procs.get(pid, (0, 0, ""))
            mb = rss / 1024
            if is_java(cmdline):
                kind = "executor_jvm" if "CoarseGrainedExecutorBackend" in cmdline else "driver_jvm"
            elif is_python_worker(cmdline):
                kind = "python_worker"
            elif "replay_offsets" in cmdline and pid in mine:
                kind = "driver_python"
            else:
                continue
            peaks[kind] = max(peaks[kind], round(mb, 1))
        time.sleep(0.1)
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out[-2000:]}\n{err[-4000:]}")
    wall = time.monotonic() - t0
    # the job's own figure: from its start to its last commit (the JVM's and executors' start-up
    # included, Python's interpreter start and Spark's shutdown not)
    found = re.search(r" in ([0-9.]+)s \(run ", out)
    return wall, float(found.group(1)) if found else None, {k: v for k, v in peaks.items() if v}


if __name__ == "__main__":
    sys.exit(main())
