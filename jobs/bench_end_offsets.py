"""One side of jobs.bench's end-offsets figure, run by it as its own process (so each side's
peak memory is its own): the consumed partitions' end offsets of a log dir, either from batch
headers only (`scan`: lib.source.topic_log, a numba hop, no CRC check, no decompression) or by
decoding every record (`decode`: lib.codec.segments.SegmentReader, CRC-32C checked, batches
decompressed, records parsed). Both list the partitions with find_topic_partitions.

    python -m jobs.bench_end_offsets {scan,decode} LOG_DIR [--repeat 3]

One partition is read first, untimed in the figure, and timed apart: for `scan` that first
call loads the numba kernel from its on-disk cache (or compiles it when the cache is absent),
and the same partition read again gives the warm cost for comparison. Then the whole log dir
is read `--repeat` times. Prints one JSON object: the wall and CPU seconds of every run, the
partitions, batches and records read, each partition's end offset, and the process's peak
RSS: VmHWM of /proc/self/status, its own address space's high-water mark (the mapped segment
pages it touched count). Not ru_maxrss: across the exec that starts this process Linux keeps
the larger of it and the parent's, whose memory a vfork child shares until then."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="bench_end_offsets")
    p.add_argument("mode", choices=("scan", "decode"))
    p.add_argument("log_dir")
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)

    t0 = time.monotonic()
    from lib.source.topic_log import TopicPartitionLog, find_topic_partitions

    read_one: Callable[[TopicPartitionLog], tuple[int, int, int]]
    if args.mode == "scan":
        from lib.source.topic_scan import kernel_compiled

        read_one = _scan_one
    else:
        read_one = _decode_one
    import_s = time.monotonic() - t0

    logs = find_topic_partitions(args.log_dir)
    if not logs:
        raise SystemExit(f"no consumed topic's partition in {args.log_dir}")
    t0 = time.monotonic()
    read_one(logs[0])
    first_call_s = time.monotonic() - t0
    t0 = time.monotonic()
    read_one(logs[0])
    warm_call_s = time.monotonic() - t0

    runs = []
    totals: dict = {}
    for _ in range(args.repeat):
        w0, c0 = time.monotonic(), time.process_time()
        totals = _read_all(args.log_dir, read_one)
        runs.append({"wall_s": time.monotonic() - w0, "cpu_s": time.process_time() - c0})
    out = {
        "mode": args.mode,
        "runs": runs,
        **totals,
        "import_s": import_s,
        "first_call_s": first_call_s,
        "warm_call_s": warm_call_s,
        "peak_rss_mb": _peak_rss_kib() / 1024,
    }
    if args.mode == "scan":
        out["kernel_compiled"] = kernel_compiled()
    print(json.dumps(out))
    return 0


def _peak_rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def _read_all(log_dir: str, read_one) -> dict:
    """Every consumed partition of the log dir, listed then read: its batches, records and end
    offset."""
    from lib.source.topic_log import find_topic_partitions

    partitions = batches = records = 0
    ends = {}
    for log in find_topic_partitions(log_dir):
        b, r, end = read_one(log)
        partitions += 1
        batches += b
        records += r
        ends[f"{log.topic}-{log.partition}"] = end
    return {"partitions": partitions, "batches": batches, "records": records, "end_offsets": ends}


def _scan_one(log) -> tuple[int, int, int]:
    """From headers: (batches, records the offsets span, end offset). The span counts the
    records of a log with no gaps (no compaction, no control batches), as generated."""
    from lib.source.topic_scan import scan_partition

    scans = [s for s in scan_partition(log) if len(s)]
    if not scans:
        return 0, 0, -1
    end = int(scans[-1].end_offset[-1])
    return sum(len(s) for s in scans), end - int(scans[0].first_offset[0]), end


def _decode_one(log) -> tuple[int, int, int]:
    """Every record decoded: (batches, records counted, the last record's offset + 1)."""
    from lib.codec.segments import SegmentReader, read_segment_bytes

    batches = records = 0
    end = -1
    for seg in log.segments:
        buf = read_segment_bytes(seg.path)
        for batch in SegmentReader(buf, file=seg.path, partition=log.partition):
            batches += 1
            if batch.records:
                records += len(batch.records)
                end = batch.records[-1][0] + 1
        close = getattr(buf, "close", None)
        if close is not None:
            close()
    return batches, records, end


if __name__ == "__main__":
    raise SystemExit(main())
