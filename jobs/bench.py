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
    p.add_argument("--coordinator-records", type=int, default=10_000_000,
                   help="size of the one-partition log for the coordinator warm-start figure (0: skip)")
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
    if args.coordinator_records:
        figures.update(bench_coordinator(spark, args.coordinator_records, args.seed, args.data))
    for name, (value, unit) in figures.items():
        print(f"{name} {value} {unit}")
    os.makedirs(warehouse, exist_ok=True)
    with open(os.path.join(warehouse, "bench.json"), "w") as f:
        json.dump({k: {"value": v, "unit": u} for k, (v, u) in figures.items()}, f, indent=1)
    return 0


def _cut_log(src: str, dest: str, fraction: float) -> int:
    """Copy a one-partition log dir, cut at the first batch boundary past `fraction` of its
    offsets (the state an earlier replay saw). Returns the cut offset."""
    from lib.codec.segments import scan_segment_end
    from lib.logdir import find_partitions

    (log,) = find_partitions(src)
    end, _ = scan_segment_end(log.segments[-1].path)
    target = int(end * fraction)
    shutil.rmtree(dest, ignore_errors=True)
    folder = os.path.join(dest, os.path.basename(log.path))
    os.makedirs(folder)
    import struct
    for seg in log.segments:
        with open(seg.path, "rb") as f:
            data = f.read()
        pos = 0
        while pos + 12 <= len(data):
            base, size = struct.unpack_from(">qi", data, pos)
            if base >= target:
                break
            pos += 12 + size
        with open(os.path.join(folder, os.path.basename(seg.path)), "wb") as f:
            f.write(data[:pos])
        if pos < len(data):
            return base
    return end


def bench_coordinator(spark, records: int, seed: int, data: str) -> dict:
    """Immigration of one offsets partition: warm start (tables of a replay that saw 99% of
    the log, plus the 1% tail) against a full load of the same log, same code path."""
    from lib.coordinator import GroupCoordinator
    from lib.logdir import find_partitions
    from lib.pipeline import run_replay

    log_dir = os.path.join(data, f"coord-log-{records}-{seed}")
    if not os.path.exists(os.path.join(log_dir, ".complete")):
        shutil.rmtree(log_dir, ignore_errors=True)
        stats = generate_log(log_dir, records, partitions=1, groups=2000, seed=seed)
        with open(os.path.join(log_dir, ".complete"), "w") as f:
            json.dump(stats, f)
    partial = os.path.join(data, "coord-log-99pct")
    cut = _cut_log(log_dir, partial, 0.99)
    warehouse = os.path.join(data, "coord-warehouse")
    shutil.rmtree(warehouse, ignore_errors=True)
    run_replay(spark, find_partitions(partial), warehouse, now_ms=1_760_000_000_000 + 86_400_000, full=True)
    t0 = time.monotonic()
    warm = GroupCoordinator(warehouse, log_dir=log_dir, partition_count=1).immigrate(0)
    warm_s = time.monotonic() - t0
    t0 = time.monotonic()
    cold = GroupCoordinator(None, log_dir=log_dir, partition_count=1).immigrate(0)
    cold_s = time.monotonic() - t0
    # the two loads must agree, or the speed-up means nothing
    assert {k: v["committed_offset"] for k, v in warm.offsets.offsets.items()} == \
        {k: v["committed_offset"] for k, v in cold.offsets.offsets.items()}, "warm start differs from a full load"
    assert sorted(warm.groups) == sorted(cold.groups)
    return {"coordinator_log_records": (records, "records"),
            "coordinator_cut_offset": (cut, "offset"),
            "coordinator_live_offsets": (len(cold.offsets.offsets), "offsets"),
            "warm_start_s": (round(warm_s, 2), "s"),
            "full_load_s": (round(cold_s, 2), "s"),
            "warm_start_speedup": (round(cold_s / warm_s, 1), "x")}


if __name__ == "__main__":
    raise SystemExit(main())
