"""Benchmark: generate a log (cached under bench-data/), replay it, print one line per figure
as `name value unit`, and write the same as JSON under the warehouse.

    python -m jobs.bench [--records N] [--partitions 50] [--seed 7]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import time

from lib.generate import generate_log

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="bench")
    p.add_argument("--records", type=int, default=5_000_000)
    p.add_argument("--partitions", type=int, default=50)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--data", default=os.path.join(REPO, "bench-data"))
    args = p.parse_args(argv)
    log_dir = os.path.join(args.data, f"log-{args.records}-{args.partitions}-{args.seed}")
    warehouse = os.path.join(args.data, "warehouse")
    figures: dict[str, tuple[float, str]] = {}
    if not os.path.exists(os.path.join(log_dir, ".complete")):
        shutil.rmtree(log_dir, ignore_errors=True)
        t0 = time.monotonic()
        stats = generate_log(log_dir, args.records, partitions=args.partitions, seed=args.seed)
        with open(os.path.join(log_dir, ".complete"), "w") as f:
            json.dump(stats, f)
        print(f"generated {stats['records']} records, {stats['segments']} segments in {time.monotonic() - t0:.0f}s")
    with open(os.path.join(log_dir, ".complete")) as f:
        stats = json.load(f)
    records = stats["records"]
    cores = os.cpu_count() or 1

    from lib.logdir import find_partitions
    from lib.pipeline import run_replay
    from lib.spark_session import build_session

    spark = build_session("bench")
    shutil.rmtree(warehouse, ignore_errors=True)
    t0 = time.monotonic()
    result = run_replay(spark, find_partitions(log_dir), warehouse, now_ms=stats.get("now", 1_760_000_000_000 + 86_400_000))
    wall = time.monotonic() - t0
    figures["records"] = (records, "records")
    figures["replay_wall_s"] = (round(wall, 2), "s")
    for stage, seconds in result.stage_seconds.items():
        figures[f"replay_stage_{stage}_s"] = (round(seconds, 2), "s")
    figures["replay_records_per_s"] = (round(records / wall), "records/s")
    figures["replay_records_per_s_per_core"] = (round(records / wall / cores), "records/s/core")
    for name, (value, unit) in figures.items():
        print(f"{name} {value} {unit}")
    os.makedirs(warehouse, exist_ok=True)
    with open(os.path.join(warehouse, "bench.json"), "w") as f:
        json.dump({k: {"value": v, "unit": u} for k, (v, u) in figures.items()}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
