"""Benchmark: generate a log (cached under bench-data/), then measure on the same files, side
by side in one run: decode only (ours and Kafka's DumpLogSegments), the full replay into Delta,
an incremental run after 1% more records, peak memory at 1x and 2x the log, a coordinator
warm start against a full load, and the consumed topics' end offsets from batch headers
against decoding their records (a log dir of consumed topics, also cached). Prints one line
per figure as `name value unit` and writes the same as JSON under the warehouse.

    python -m jobs.bench [--records N] [--partitions 50] [--seed 7] [--skip-2x] [--end-offsets-only]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import time

from lib.testdata.generate import GENERATOR_VERSION, generate_log

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the consumed topics of the end-offsets figure: 10 topics of 12 partitions (generate_topics)
END_OFFSETS_TOPICS, END_OFFSETS_PARTITIONS_PER_TOPIC = 10, 12
END_OFFSETS_TARGET = 20  # decode / header scan, at least


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="bench")
    p.add_argument("--records", type=int, default=10_000_000)
    p.add_argument("--partitions", type=int, default=50)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--data", default=os.path.join(REPO, "bench-data"))
    p.add_argument(
        "--decode-sample",
        type=int,
        default=2_000_000,
        help="records of the log that the decode-only figures (ours and Kafka's) read",
    )
    p.add_argument(
        "--coordinator-records",
        type=int,
        default=10_000_000,
        help="size of the one-partition log for the coordinator warm-start figure (0: skip)",
    )
    p.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="repetitions of the incremental and no-op runs, and of the end-offsets header scan and decode (median)",
    )
    p.add_argument("--skip-2x", action="store_true", help="skip the replay of a log twice the size (memory figure)")
    p.add_argument(
        "--scale-only",
        action="store_true",
        help="only the full replay's rate, named replay_records_per_s_per_core_<N>m (make bench-scale)",
    )
    p.add_argument(
        "--end-offsets-only",
        action="store_true",
        help="only the consumed topics' end offsets: header scan against full decode of --records records",
    )
    args = p.parse_args(argv)
    warehouse = os.path.join(args.data, "warehouse")
    figures: dict[str, tuple[float | str, str]] = {}
    cores = os.cpu_count() or 1

    if args.end_offsets_only:
        figures.update(bench_end_offsets(args.data, args.records, args.seed, args.repeat))
        for name, (value, unit) in figures.items():
            print(f"{name} {value} {unit}")
        os.makedirs(warehouse, exist_ok=True)
        out = os.path.join(warehouse, "bench-end-offsets.json")
        with open(out, "w") as f:
            json.dump({k: {"value": v, "unit": u} for k, (v, u) in figures.items()}, f, indent=1)
        print(f"written: {out}")
        return 0

    # The log is generated 1% larger than asked; the full replay reads it cut at 99%, the
    # incremental run then reads the 1% appended since, as in an hourly schedule.
    log_dir = ensure_log(args.data, int(args.records * 1.01), args.partitions, args.seed)
    cut_dir = os.path.join(args.data, "log-cut")
    cut_log_dir(log_dir, cut_dir, 1 / 1.01)
    records = count_records(cut_dir)
    figures["records"] = (records, "records")

    if not args.scale_only:
        figures.update(bench_decode(cut_dir, args.decode_sample))
        # before the Spark session: nothing else runs beside the two processes
        figures.update(bench_end_offsets(args.data, args.records, args.seed, args.repeat))

    from lib.source.logdir import find_partitions
    from lib.spark.pipeline import run_replay
    from lib.spark.session import REPLAY_DEFAULTS, build_session

    spark = build_session("bench", defaults=REPLAY_DEFAULTS)
    now_ms = 1_760_000_000_000 + 86_400_000
    shutil.rmtree(warehouse, ignore_errors=True)
    settle_disk()
    t0 = time.monotonic()
    # the replay alone, as before the assignment audit; the audit is measured on its own below
    result = run_replay(spark, find_partitions(cut_dir), warehouse, now_ms=now_ms, full=True, assignments=False)
    wall = time.monotonic() - t0
    figures["replay_wall_s"] = (round(wall, 2), "s")
    for stage, seconds in result.stage_seconds.items():
        figures[f"replay_stage_{stage}_s"] = (round(seconds, 2), "s")
    figures["replay_records_per_s"] = (round(records / wall), "records/s")
    figures["replay_records_per_s_per_core"] = (round(records / wall / cores), "records/s/core")
    if args.scale_only:
        size = f"{round(args.records / 1e6)}m"
        figures[f"replay_records_per_s_per_core_{size}"] = figures["replay_records_per_s_per_core"]
        spark.stop()
        # the same replay as its own process: peak memory per process at this size
        m = replay_process(cut_dir, os.path.join(args.data, "warehouse-rss"), now_ms)
        figures[f"peak_rss_mb_worker_{size}"] = (m["worker_mb"], "MB (largest Python worker, own process)")
        figures[f"peak_rss_mb_driver_jvm_{size}"] = (m["jvm_mb"], "MB (driver JVM, own process)")
        figures[f"peak_rss_mb_driver_python_{size}"] = (m["python_mb"], "MB (driver Python, own process)")
        for name, (value, unit) in figures.items():
            print(f"{name} {value} {unit}")
        return 0

    # The incremental and no-op runs last under a second, where this kind of machine varies by
    # +-25% from run to run: each is repeated from the same warehouse (a copy of what the full
    # replay left) and the median counts; every repetition is printed.
    after_full = warehouse + "-after-full"
    shutil.rmtree(after_full, ignore_errors=True)
    shutil.copytree(warehouse, after_full)
    repeats = []
    for i in range(args.repeat):
        if i:
            shutil.rmtree(warehouse)
            shutil.copytree(after_full, warehouse)
        settle_disk()
        t0 = time.monotonic()
        inc = run_replay(spark, find_partitions(log_dir), warehouse, now_ms=now_ms, assignments=False)
        inc_wall = time.monotonic() - t0
        assert inc.incremental
        settle_disk()
        t0 = time.monotonic()
        noop = run_replay(spark, find_partitions(log_dir), warehouse, now_ms=now_ms, assignments=False)
        noop_wall = time.monotonic() - t0
        assert noop.records == 0, noop.records
        repeats.append((inc_wall, noop_wall, inc))
    figures.update(bench_assignment_audit(spark, after_full, warehouse, log_dir, now_ms))
    shutil.rmtree(after_full)
    inc_wall, _, inc = sorted(repeats, key=lambda r: r[0])[len(repeats) // 2]
    noop_wall = sorted(r[1] for r in repeats)[len(repeats) // 2]
    figures["incremental_records"] = (inc.records, "records")
    figures["incremental_wall_s"] = (round(inc_wall, 3), f"s (median of {len(repeats)})")
    figures["incremental_wall_s_each"] = (" ".join(f"{r[0]:.3f}" for r in repeats), "s")
    figures["incremental_fraction"] = (round(inc_wall / wall, 4), "of the full run")
    for stage, seconds in inc.stage_seconds.items():
        figures[f"incremental_stage_{stage}_s"] = (round(seconds, 3), "s")
    figures["noop_wall_s"] = (round(noop_wall, 3), f"s (incremental run with nothing new, median of {len(repeats)})")
    figures["noop_wall_s_each"] = (" ".join(f"{r[1]:.3f}" for r in repeats), "s")
    figures["incremental_marginal_fraction"] = (
        round((inc_wall - noop_wall) / wall, 4),
        "(incremental - noop) / full replay",
    )

    if not args.skip_2x:
        # peak memory of replays run as separate processes (nothing this process holds counts)
        log2 = ensure_log(args.data, records * 2, args.partitions, args.seed + 1)
        one = replay_process(cut_dir, os.path.join(args.data, "warehouse-rss-1x"), now_ms)
        two = replay_process(log2, os.path.join(args.data, "warehouse-rss-2x"), now_ms)
        figures["replay_wall_s_1x_process"] = (one["wall_s"], "s (own process, session start included)")
        figures["replay_wall_s_2x_process"] = (two["wall_s"], "s (own process, session start included)")
        for name, m in (("1x", one), ("2x", two)):
            figures[f"peak_rss_mb_worker_{name}"] = (m["worker_mb"], "MB (largest Python worker)")
            figures[f"peak_rss_mb_driver_jvm_{name}"] = (m["jvm_mb"], "MB (driver JVM)")
            figures[f"peak_rss_mb_driver_python_{name}"] = (m["python_mb"], "MB (driver Python)")
        figures["peak_rss_worker_2x_over_1x"] = (round(two["worker_mb"] / max(one["worker_mb"], 1), 2), "ratio")
        figures["peak_rss_driver_jvm_2x_over_1x"] = (round(two["jvm_mb"] / max(one["jvm_mb"], 1), 2), "ratio")
    if args.coordinator_records:
        figures.update(bench_coordinator(spark, args.coordinator_records, args.seed, args.data))
    spark.stop()
    for name, (value, unit) in figures.items():
        print(f"{name} {value} {unit}")
    os.makedirs(warehouse, exist_ok=True)
    with open(os.path.join(warehouse, "bench.json"), "w") as f:
        json.dump({k: {"value": v, "unit": u} for k, (v, u) in figures.items()}, f, indent=1)
    print(f"written: {os.path.join(warehouse, 'bench.json')}")
    return 0


def settle_disk() -> None:
    """Write back what earlier steps left dirty in the page cache (a generated log, the full
    replay's ~600 MB), untimed, so a timed run does not pay for the one before it: on this
    kind of machine a file creation took 0.7 ms instead of 0.13 while that writeback ran."""
    os.sync()


def ensure_log(data: str, records: int, partitions: int, seed: int) -> str:
    """A generated log, cached under `data` by its parameters."""
    log_dir = os.path.join(data, f"log-{records}-{partitions}-{seed}-g{GENERATOR_VERSION}")
    if not os.path.exists(os.path.join(log_dir, ".complete")):
        shutil.rmtree(log_dir, ignore_errors=True)
        t0 = time.monotonic()
        stats = generate_log(log_dir, records, partitions=partitions, seed=seed)
        with open(os.path.join(log_dir, ".complete"), "w") as f:
            json.dump(stats, f)
        print(
            f"generated {stats['records']} records, {stats['segments']} segments in {time.monotonic() - t0:.0f}s",
            flush=True,
        )
    return log_dir


def count_records(log_dir: str) -> int:
    from lib.codec.segments import SegmentReader, read_segment_bytes
    from lib.source.logdir import find_partitions

    n = 0
    for log in find_partitions(log_dir):
        for seg in log.segments:
            for batch in SegmentReader(read_segment_bytes(seg.path), verify_crc=False):
                n += len(batch.records)
    return n


def segment_files(log_dir: str) -> list[str]:
    from lib.source.logdir import find_partitions

    return [seg.path for log in find_partitions(log_dir) for seg in log.segments]


def bench_assignment_audit(spark, after_full: str, warehouse: str, log_dir: str, now_ms: int) -> dict:
    """The assignment audit on its own: over the whole log after the full replay, then after the
    incremental replay (it re-audits every offsets partition that has moved, whole)."""
    from lib.source.logdir import find_partitions
    from lib.spark.assignment import run_assignment_stage
    from lib.spark.pipeline import new_run_id, run_replay

    shutil.rmtree(warehouse)
    shutil.copytree(after_full, warehouse)
    settle_disk()
    t0 = time.monotonic()
    full = run_assignment_stage(spark, warehouse, None, new_run_id(), full=True)
    full_wall = time.monotonic() - t0
    run_replay(spark, find_partitions(log_dir), warehouse, now_ms=now_ms, assignments=False)
    settle_disk()
    t0 = time.monotonic()
    inc = run_assignment_stage(spark, warehouse, None, new_run_id())
    inc_wall = time.monotonic() - t0
    return {
        "assignment_audit_generations": (full.rows, "rows (generations) of the full log"),
        "assignment_audit_full_s": (round(full_wall, 2), "s (whole log, after the full replay)"),
        "assignment_audit_us_per_generation": (round(full_wall / max(full.rows, 1) * 1e6), "us wall"),
        "assignment_audit_incremental_s": (
            round(inc_wall, 2),
            f"s (after the incremental replay: {len(inc.audited_partitions)} partitions re-audited whole)",
        ),
    }


def bench_decode(log_dir: str, sample_records: int) -> dict:
    """Decode only, on the same segment files: our reader and codec in this process (one
    core), and Kafka's own DumpLogSegments with its offsets decoder (one JVM, output
    discarded). Segments are taken in order until `sample_records` records."""
    from lib.decode import SegmentDecoder

    files, total = [], 0
    for path in segment_files(log_dir):
        if total >= sample_records:
            break
        n = sum(len(b.records) for b in _batches(path))
        files.append(path)
        total += n
    list(SegmentDecoder(files[0], 0))  # load the compiled kernels untimed (once per process)
    t0 = time.process_time()
    w0 = time.monotonic()
    decoded = 0
    for path in files:
        for batch in SegmentDecoder(path, 0):
            decoded += batch.num_rows
    cpu = time.process_time() - t0
    wall = time.monotonic() - w0
    assert decoded == total, (decoded, total)
    out: dict[str, tuple[float, str]] = {
        "decode_sample_records": (total, "records"),
        "decode_records_per_s_per_core": (round(total / cpu), "records/s/core (CPU time, one process)"),
        "decode_records_per_s_wall": (round(total / wall), "records/s (one process)"),
    }
    dump = dump_log_rate(files, total)
    if dump is not None:
        out["dump_log_records_per_s"] = (round(dump), "records/s (one JVM, wall)")
        out["decode_vs_dump_log_ratio"] = (round(total / wall / dump, 2), "ours (wall) / Kafka's")
    return out


def _batches(path: str):
    from lib.codec.segments import SegmentReader, read_segment_bytes

    return SegmentReader(read_segment_bytes(path), verify_crc=False)


def dump_log_rate(files: list[str], records: int) -> float | None:
    """Records per second of Kafka's DumpLogSegments --offsets-decoder over `files` (the JVM
    start-up included, as an operator runs it), or None if the Kafka jars are absent."""
    import subprocess
    import tempfile

    jar_dir = os.path.join(REPO, ".jars", "kafka4")
    if not os.path.isdir(jar_dir):
        print("no Kafka jars in .jars/kafka4: skipping DumpLogSegments (run make setup)")
        return None
    from tests.broker.kafka_broker import JAVA, _write_log_config, dump_log_segments_class

    with tempfile.TemporaryDirectory(prefix="bench-dump-") as tmp:
        log_opts = _write_log_config(jar_dir, tmp, None)
        cmd = [
            JAVA,
            "-Xmx1g",
            *log_opts,
            "-cp",
            os.path.join(jar_dir, "*"),
            dump_log_segments_class(jar_dir),
            "--offsets-decoder",
            "--files",
            ",".join(files),
        ]
        t0 = time.monotonic()
        with open(os.devnull, "w") as sink:
            subprocess.run(cmd, stdout=sink, stderr=subprocess.PIPE, check=True, stdin=subprocess.DEVNULL)
        return records / (time.monotonic() - t0)


def replay_process(log_dir: str, warehouse: str, now_ms: int) -> dict:
    """A full replay as its own process (jobs.replay_offsets), sampled every 0.1 s from /proc.
    Processes are counted by what they run, not by their place in the tree: the driver JVM is
    the java process whose parent is not java (the JVM forks before it execs a Python worker,
    and for a moment that child carries the JVM's command line and RSS); workers are the
    pyspark daemon and worker processes."""
    import subprocess
    import sys

    shutil.rmtree(warehouse, ignore_errors=True)
    cmd = [
        sys.executable,
        "-m",
        "jobs.replay_offsets",
        "--input",
        log_dir,
        "--warehouse",
        warehouse,
        "--full",
        "--now",
        str(now_ms),
        "--quiet",
        "--skip-assignment-audit",  # the replay's own peaks (the audit is measured apart)
    ]
    peaks = {"jvm_mb": 0.0, "python_mb": 0.0, "worker_mb": 0.0}
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    while proc.poll() is None:
        procs = _proc_table()
        tree = _descendants(procs, proc.pid)
        java = {p for p in tree if _is_java(procs[p][2])}
        jvm = [procs[p][1] for p in java if procs[p][0] not in java]
        workers = [procs[p][1] for p in tree if "pyspark" in procs[p][2] and p not in java]
        peaks["jvm_mb"] = max(peaks["jvm_mb"], round(max(jvm, default=0) / 1024, 1))
        peaks["python_mb"] = max(peaks["python_mb"], round(procs.get(proc.pid, (0, 0, ""))[1] / 1024, 1))
        peaks["worker_mb"] = max(peaks["worker_mb"], round(max(workers, default=0) / 1024, 1))
        time.sleep(0.1)
    out = proc.stdout.read() if proc.stdout is not None else ""
    assert proc.returncode == 0, out
    shutil.rmtree(warehouse, ignore_errors=True)
    return {**peaks, "wall_s": round(time.monotonic() - t0, 2)}


def _is_java(cmdline: str) -> bool:
    exe = cmdline.split(" ", 1)[0]
    return os.path.basename(exe) == "java"


def _proc_table() -> dict[int, tuple[int, int, str]]:
    """pid -> (parent pid, RSS in KiB, command line)."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as f:
                status = f.read()
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        ppid = rss = 0
        for line in status.splitlines():
            if line.startswith("PPid:"):
                ppid = int(line.split()[1])
            elif line.startswith("VmRSS:"):
                rss = int(line.split()[1])
        out[int(name)] = (ppid, rss, cmd)
    return out


def _descendants(procs: dict, root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = set(), [root]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


def cut_log_dir(src: str, dest: str, fraction: float) -> None:
    """Every partition of a log dir cut at `fraction` of its offsets (see _cut_log)."""
    from lib.source.logdir import find_partitions

    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(dest)
    for log in find_partitions(src):
        one = os.path.join(dest, "_one")
        os.makedirs(one)
        os.symlink(log.path, os.path.join(one, os.path.basename(log.path)))
        _cut_log(one, os.path.join(dest, "_cut"), fraction)
        shutil.move(os.path.join(dest, "_cut", os.path.basename(log.path)), dest)
        shutil.rmtree(one)
        shutil.rmtree(os.path.join(dest, "_cut"))


def _cut_log(src: str, dest: str, fraction: float) -> int:
    """Copy a one-partition log dir, cut at the first batch boundary past `fraction` of its
    offsets (the state an earlier replay saw). Returns the cut offset."""
    from lib.codec.segments import scan_segment_end
    from lib.source.logdir import find_partitions

    (log,) = find_partitions(src)
    end, _ = scan_segment_end(log.segments[-1].path)
    if end is None:
        raise ValueError(f"{log.path} holds no records")
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


def topics_generator_key() -> str:
    """A digest of what generate_topics' output depends on: its module's source and the
    writer's and codecs' (a changed line anywhere in them regenerates, about a second), and
    the versions of the compression libraries that make the payloads' bytes."""
    from importlib import metadata
    from zlib import ZLIB_RUNTIME_VERSION

    h = hashlib.sha256()
    for name in ("testdata/topicbuilder.py", "codec/writer.py", "codec/compression.py", "codec/primitives.py"):
        with open(os.path.join(REPO, "lib", name), "rb") as f:
            h.update(f.read())
    for dist in ("cramjam", "xxhash", "crc32c"):
        try:
            h.update(f"{dist}={metadata.version(dist)};".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{dist}=?;".encode())
    h.update(f"zlib={ZLIB_RUNTIME_VERSION}".encode())
    return h.hexdigest()[:12]


def ensure_topics(data: str, records: int, seed: int) -> tuple[str, dict]:
    """A log dir of consumed topics (generate_topics), cached under `data` by its parameters and
    the generator's key; a folder of the same parameters from an older generator is removed."""
    prefix = f"topics-{records}-{END_OFFSETS_TOPICS}x{END_OFFSETS_PARTITIONS_PER_TOPIC}-{seed}-"
    log_dir = os.path.join(data, prefix + topics_generator_key())
    if not os.path.exists(os.path.join(log_dir, ".complete")):
        from lib.testdata.topicbuilder import generate_topics

        if os.path.isdir(data):
            for name in os.listdir(data):
                if name.startswith(prefix):
                    shutil.rmtree(os.path.join(data, name), ignore_errors=True)
        t0 = time.monotonic()
        stats = generate_topics(
            log_dir,
            records,
            topics=END_OFFSETS_TOPICS,
            partitions_per_topic=END_OFFSETS_PARTITIONS_PER_TOPIC,
            seed=seed,
        )
        with open(os.path.join(log_dir, ".complete"), "w") as f:
            json.dump(stats, f)
        print(
            f"generated {stats['records']} records, {stats['batches']} batches in {stats['partition_count']} "
            f"partitions of consumed topics in {time.monotonic() - t0:.1f}s",
            flush=True,
        )
    with open(os.path.join(log_dir, ".complete")) as f:
        return log_dir, json.load(f)


def end_offsets_process(mode: str, log_dir: str, repeat: int) -> dict:
    """jobs.bench_end_offsets in its own process: `scan` (batch headers) or `decode` (every
    record); what it printed."""
    import subprocess
    import sys

    settle_disk()
    cmd = [sys.executable, "-m", "jobs.bench_end_offsets", mode, log_dir, "--repeat", str(repeat)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def bench_end_offsets(data: str, records: int, seed: int, repeat: int) -> dict:
    """The consumed partitions' end offsets of a generated log dir (at least 100 partitions),
    side by side, each side its own process and the median of `repeat` runs: from batch headers
    (find_topic_partitions + scan_partition, the numba kernel loaded by an untimed first call)
    against decoding every record of the same segments (SegmentReader: CRC-32C, decompression,
    records parsed). Both sides must find the generator's end offsets and record count."""
    log_dir, stats = ensure_topics(data, records, seed)
    assert stats["partition_count"] >= 100, stats["partition_count"]
    want = {f"{p['topic']}-{p['partition']}": p["end_offset"] for p in stats["partitions"]}
    # both sides read from the page cache: the files read through once, untimed
    for name in sorted(want):
        folder = os.path.join(log_dir, name)
        for seg in sorted(os.listdir(folder)):
            if seg.endswith(".log"):
                with open(os.path.join(folder, seg), "rb") as f:
                    while f.read(1 << 20):
                        pass
    scan = end_offsets_process("scan", log_dir, repeat)
    decode = end_offsets_process("decode", log_dir, repeat)
    for side in (scan, decode):
        assert side["end_offsets"] == want, f"{side['mode']}: end offsets differ from the generator's"
        assert (side["partitions"], side["batches"], side["records"]) == (
            stats["partition_count"],
            stats["batches"],
            stats["records"],
        ), (side["mode"], side["partitions"], side["batches"], side["records"])
    scan_s = statistics.median(r["wall_s"] for r in scan["runs"])
    decode_s = statistics.median(r["wall_s"] for r in decode["runs"])
    speedup = decode_s / scan_s
    n = stats["records"]
    med = f"median of {len(scan['runs'])}"
    return {
        "end_offsets_partitions": (stats["partition_count"], "partitions (consumed topics)"),
        "end_offsets_batches": (stats["batches"], "batches"),
        "end_offsets_records": (n, "records"),
        "end_offsets_log_mb": (round(stats["bytes"] / 1e6, 1), "MB"),
        "end_offsets_header_scan_s": (round(scan_s, 4), f"s (headers only, own process, {med})"),
        "end_offsets_header_scan_s_each": (" ".join(f"{r['wall_s']:.4f}" for r in scan["runs"]), "s"),
        "end_offsets_header_scan_records_per_s": (round(n / scan_s), "records/s"),
        "end_offsets_header_scan_cpu_s": (
            round(statistics.median(r["cpu_s"] for r in scan["runs"]), 4),
            f"s CPU ({med})",
        ),
        "end_offsets_header_scan_import_s": (round(scan["import_s"], 3), "s (import of lib.source.topic_log, numba)"),
        "end_offsets_header_scan_first_call_s": (
            round(scan["first_call_s"], 4),
            "s (first partition's scan, untimed above: "
            + ("kernel compiled" if scan["kernel_compiled"] else "kernel loaded from numba's disk cache")
            + f"; the same again: {scan['warm_call_s']:.4f} s)",
        ),
        "end_offsets_decode_s": (round(decode_s, 2), f"s (every record, CRC-32C checked, own process, {med})"),
        "end_offsets_decode_s_each": (" ".join(f"{r['wall_s']:.2f}" for r in decode["runs"]), "s"),
        "end_offsets_decode_records_per_s": (round(n / decode_s), "records/s"),
        "end_offsets_speedup": (
            round(speedup, 1),
            f"x (decode / header scan; target >= {END_OFFSETS_TARGET}x: "
            + ("met" if speedup >= END_OFFSETS_TARGET else "NOT MET")
            + ")",
        ),
        "peak_rss_mb_end_offsets_header_scan": (
            round(scan["peak_rss_mb"], 1),
            "MB (own process, VmHWM; mapped segment pages it touched included)",
        ),
        "peak_rss_mb_end_offsets_decode": (
            round(decode["peak_rss_mb"], 1),
            "MB (own process, VmHWM; mapped segment pages it touched included)",
        ),
    }


def bench_coordinator(spark, records: int, seed: int, data: str) -> dict:
    """Immigration of one offsets partition: warm start (tables of a replay that saw 99% of
    the log, plus the 1% tail) against a full load of the same log, same code path."""
    from lib.coordinator.group_coordinator import GroupCoordinator
    from lib.source.logdir import find_partitions
    from lib.spark.pipeline import run_replay

    log_dir = os.path.join(data, f"coord-log-{records}-{seed}-g{GENERATOR_VERSION}")
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
    settle_disk()
    t0 = time.monotonic()
    warm = GroupCoordinator(warehouse, log_dir=log_dir, partition_count=1).immigrate(0)
    warm_s = time.monotonic() - t0
    t0 = time.monotonic()
    cold = GroupCoordinator(None, log_dir=log_dir, partition_count=1).immigrate(0)
    cold_s = time.monotonic() - t0
    # the two loads must agree, or the speed-up means nothing
    assert {k: v["committed_offset"] for k, v in warm.offsets.offsets.items()} == {
        k: v["committed_offset"] for k, v in cold.offsets.offsets.items()
    }, "warm start differs from a full load"
    assert sorted(warm.groups) == sorted(cold.groups)
    return {
        "coordinator_log_records": (records, "records"),
        "coordinator_cut_offset": (cut, "offset"),
        "coordinator_live_offsets": (len(cold.offsets.offsets), "offsets"),
        "warm_start_s": (round(warm_s, 2), "s"),
        "full_load_s": (round(cold_s, 2), "s"),
        "warm_start_speedup": (round(cold_s / warm_s, 1), "x"),
    }


if __name__ == "__main__":
    raise SystemExit(main())
