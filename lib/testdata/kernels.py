"""Tooling around the numba kernels (make setup, make bench, tests): compile them into numba's
on-disk cache once, and measure the decode paths and the assignors side by side, Python against
numba. Not imported by the pipeline.

    python -m lib.testdata.kernels --warm                 compile every kernel into the cache
    python -m lib.testdata.kernels SEGMENT...             records/s of both decode paths
    python -m lib.testdata.kernels --assignors [COUNT]    µs per assignment problem, both paths
    python -m lib.testdata.kernels --audit [RECORDS]      µs per classic generation audited, both paths
"""

from __future__ import annotations

import os
import tempfile
import time
import warnings
from collections.abc import Mapping

import numba
import numpy as np

from lib.assignors import AssignorError, assign
from lib.assignors.fast import ASSIGNOR_CODES, FALLBACK, assign_arrays, assign_batch, build_batch, same_result
from lib.decode import SegmentDecoder
from lib.replay.engine import PartitionReplay
from lib.testdata.assignments import busy_problems


def measure_decode(paths, *, partition: int = 0, repeat: int = 3, compare: bool = True) -> dict:
    """Records/s of the pure-Python and the fast decoder over the same segment files, timed
    alternately in this process: CPU time of this thread (less sensitive to other load than
    wall time), best of `repeat`; batches are counted and dropped. With `compare`, a separate
    pass checks, file by file, that both paths yield equal batches."""

    def run(fast):
        n = 0
        t0 = time.thread_time()
        for p in paths:
            for b in SegmentDecoder(p, partition, fast=fast):
                n += b.num_rows
        return n, time.thread_time() - t0

    for p in paths[:1]:
        list(SegmentDecoder(p, partition, fast=True))  # load (or compile) the kernels untimed
    t_py = t_fast = float("inf")
    n_py = n_fast = 0
    for _ in range(repeat):
        n_py, t = run(False)
        t_py = min(t_py, t)
        n_fast, t = run(True)
        t_fast = min(t_fast, t)
    equal = None
    if compare:
        equal = n_py == n_fast
        for p in paths:
            a, b = list(SegmentDecoder(p, partition, fast=False)), list(SegmentDecoder(p, partition, fast=True))
            equal = equal and len(a) == len(b) and all(x.equals(y) for x, y in zip(a, b))
    return {
        "records": n_py,
        "python_s": t_py,
        "fast_s": t_fast,
        "python_rps": n_py / t_py if t_py else float("inf"),
        "fast_rps": n_fast / t_fast if t_fast else float("inf"),
        "ratio": t_py / t_fast if t_fast else float("inf"),
        "equal": equal,
        "numba": numba.__version__,
    }


def warm_decoder() -> None:
    """Compile the kernels into numba's on-disk cache (lib/__pycache__) once, e.g. at setup:
    a cold compile takes ~10 s of CPU, loading the cache well under a second per process."""
    from lib.codec.serde import CoordinatorKey, encode_key, encode_value
    from lib.codec.writer import encode_batch, encode_control_batch
    from lib.testdata.logbuilder import (
        consumer_member,
        group_key,
        group_metadata_value,
        offset_commit_key,
        offset_commit_value,
    )
    from schemas.records import RecordType

    value = offset_commit_value(5, 1, version=4, topic_id="ASNFZ4mrze8BI0VniavN7w")
    recs = [(i, 1, offset_commit_key("g", "t", i), value) for i in range(2)]
    member = consumer_member("m", ["t"], {"t": [0]}, owned_partitions={"t": [0]})
    group = group_metadata_value(members=[member], state_ts=1)
    # a KIP-848 member (lib.decode.json_kernel): nested and tagged structs, arrays, bytes
    modern_key = encode_key(CoordinatorKey(RecordType.CONSUMER_GROUP_MEMBER_METADATA, "g", member_id="m"))
    modern_value = encode_value(
        RecordType.CONSUMER_GROUP_MEMBER_METADATA,
        0,
        {
            "clientId": "c",
            "clientHost": "h",
            "subscribedTopicNames": ["t"],
            "classicMemberMetadata": {"sessionTimeoutMs": 1, "supportedProtocols": [{"name": "r", "metadata": b"1"}]},
        },
    )
    data = (
        encode_batch(0, recs)
        + encode_batch(2, [(2, 1, recs[0][2], None)], compression=4)
        + encode_control_batch(3, 1, 0, True, 1)
        + encode_batch(4, [(4, 1, group_key("g"), group)])
        + encode_batch(5, [(5, 1, modern_key, modern_value)])
    )
    for buf in (data, bytearray(data)):
        list(SegmentDecoder("warm", 0, data=buf, fast=True))


def warm_engine() -> None:
    """Compile the engine's kernels into numba's on-disk cache (make setup), so Spark workers
    load them instead of compiling (seconds of CPU per worker process)."""
    from lib.codec.writer import encode_batch, encode_control_batch
    from lib.testdata.logbuilder import offset_commit_key, offset_commit_value

    value = offset_commit_value(5, 1)
    recs = [(i, 1, offset_commit_key("g", "t", i), value) for i in range(2)]
    data = (
        encode_batch(0, recs)
        + encode_batch(2, [(2, 1, recs[0][2], None)])
        + encode_batch(3, [(3, 1, recs[1][2], value)], producer_id=7, producer_epoch=0, transactional=True)
        + encode_control_batch(4, 7, 0, True, 1)
        # more keys and groups than the engine's tables hold at first: they grow (the rehash kernel)
        + encode_batch(5, [(5 + i, 1, offset_commit_key(f"g{i % 1_100}", "t", i), value) for i in range(4_200)])
    )
    engine = PartitionReplay(0)
    for batch in SegmentDecoder("warm", 0, data=data):
        engine.feed(batch)
    out = engine.finish(0, 1)
    again = PartitionReplay(0)  # an incremental run's start: the state loaded back
    again.load(out["group_offsets"], out["pending_transactional_offsets"], out["group_fold_state"])


def warm_assignors() -> None:
    """Compile lib.assignors.fast's kernels into numba's on-disk cache (one call compiles all)."""
    assign_batch(busy_problems(4))


def warm_lag() -> None:
    """Compile lib.lake.lag_rows' kernels into numba's on-disk cache: two end-offset rows of a
    partition, one commit point, each function once (the lag stage's task calls them so, its
    committed offsets read-only or not); and the header scan of a consumed topic's segment
    (lib.source.topic_scan)."""
    import pyarrow as pa

    from lib.lake.lag_rows import Earlier, Names, lag_at, rows_of, summarise, time_lag
    from schemas import tables as T

    ms = pa.array([1_000, 2_000], pa.int64()).cast(pa.timestamp("ms", tz="UTC"))
    table = pa.Table.from_pydict(
        {
            "topic": ["t", "t"],
            "partition": [0, 0],
            "end_offset": [5, 9],
            "at": ms,
            "source": ["segment", "segment"],
            "topic_id": ["id", "id"],
            "first_offset": [0, 5],
            "first_timestamp": ms,
            "max_timestamp": ms,
            "timestamp_type": ["CreateTime", "CreateTime"],
            "is_control": [False, False],
            "segment_file": ["0.log", "0.log"],
            "byte_position": [0, 100],
            "run_id": ["r", "r"],
        }
    )
    table = table.cast(T.PARTITION_END_OFFSETS.arrow_schema)
    names = Names()
    part = np.zeros(2, np.int64)
    rows = rows_of(table, part, names)
    earlier = summarise(rows, Earlier.none(1))
    at = np.array([1_500], np.int64)
    lag = lag_at(rows, earlier, np.zeros(1, np.int64), at, at, np.array([3], np.int64))
    time_lag(lag, at, np.array([3], np.int64), at)
    committed = np.array([3], np.int64)
    committed.flags.writeable = False  # (as a column of Arrow gives it)
    lag_at(rows, earlier, np.zeros(1, np.int64), at, at, committed)

    from lib.codec.writer import encode_batch
    from lib.source.logdir import Segment
    from lib.source.topic_scan import scan_segment

    # a segment's bytes, read-only as a mapped file gives them, and an empty segment's (writable)
    with tempfile.TemporaryDirectory() as tmp:
        for base, data in ((0, encode_batch(0, [(0, 1, b"k", b"v")])), (1, b"")):
            path = os.path.join(tmp, f"{base:020d}.log")
            with open(path, "wb") as f:
                f.write(data)
            scan_segment(Segment(0, base, path, len(data)))


def warm_audit() -> None:
    """Compile lib.assignors.fast_audit's kernels into numba's on-disk cache: two generations
    of a group, the first against a Previous carried in (one call compiles all)."""
    from lib.assignors.fast_audit import GenerationBatch, Previous, audit_classic_batch

    def value(generation: int, partitions: list[int]) -> dict:
        member = {
            "member_id": "m",
            "subscribed_topics": ["t"],
            "owned_partitions": [{"topic": "t", "partitions": partitions}],
            "generation_id": generation - 1,
            "assignment": [{"topic": "t", "partitions": partitions}],
            "assignment_bytes": b"\x00",
        }
        return {"protocol_type": "consumer", "generation": generation, "protocol": "range", "members": [member]}

    previous = Previous.from_states(
        {"g": {"members": [{"member_id": "m", "instance": None, "assignment": [["t", 0]]}]}}
    )
    batch = GenerationBatch.of([value(2, [0, 1]), value(3, [1, 0])], ["g", "g"], [0, 0], [1, 2], [1, 2])
    audit_classic_batch(batch, previous, {"t": 2})


def measure_audit(records: int = 200_000, seed: int = 7, repeat: int = 3) -> dict:
    """µs per classic generation audited, on a busy log of about `records` offsets records
    (lib.testdata.busy) decoded by lib.decode: lib.assignors.fast_audit end to end (from the
    GroupMetadata column to the assignment_audit table), each offsets partition's generations
    as one batch and the whole log's as one (CPU time of this thread, best of `repeat`); and
    the Python path the tracker takes (the value from Arrow, audit_generation, the row as
    Arrow), once. Generations that took the Python path inside the batch are counted."""
    from lib.assignors import fast_audit
    from lib.assignors.audit import Generation, audit_generation, classic_generation
    from lib.testdata.busy import generate_busy_log
    from lib.testdata.generations import floors_of, group_metadata_records, partition_batch

    with tempfile.TemporaryDirectory() as tmp:
        log_dir = os.path.join(tmp, "logdir")
        generate_busy_log(log_dir, records, seed=seed, topic_records=records // 10, workers=1)
        partitions = group_metadata_records(log_dir)
        floors = floors_of(log_dir)
    batches = [partition_batch(r, v)[1] for r, v in partitions]
    whole = fast_audit.GenerationBatch.concat(batches)

    def audit(parts) -> tuple[int, float]:
        rows, t0 = 0, time.thread_time()
        for batch in parts:
            rows += fast_audit.audit_classic_batch(batch, fast_audit.Previous.empty(), dict(floors))[0].num_rows
        return rows, time.thread_time() - t0

    generations, _ = audit([whole])  # loads (or compiles) the kernels
    python_path = fast_audit.audit_generation
    calls: list[str] = []

    def counted(gen: Generation, previous: Generation | None, known_partitions: Mapping[str, int]) -> dict:
        calls.append(gen.group_id)
        return python_path(gen, previous, known_partitions)

    fast_audit.audit_generation = counted
    try:
        audit([whole])
    finally:
        fast_audit.audit_generation = python_path
    per_partition = min(audit(batches)[1] for _ in range(repeat))
    one_batch = min(audit([whole])[1] for _ in range(repeat))

    t0 = time.thread_time()
    for batch in batches:
        known, rows = dict(floors), []
        previous: dict[str, Generation] = {}
        for r in range(len(batch)):
            group_id = batch.group_id[r].as_py()
            if batch.deleted[r].as_py():
                previous.pop(group_id, None)
                continue
            at = (batch.at_ms[r].as_py(), batch.offsets_partition[r].as_py(), batch.log_offset[r].as_py())
            gen = classic_generation(group_id, batch.group_metadata[r].as_py(), *at)
            if gen is None:
                continue
            for m in gen.members:
                for topic, partition in m.assignment:
                    known[topic] = max(known.get(topic, 0), partition + 1)
            rows.append(audit_generation(gen, previous.get(group_id), known))
            previous[group_id] = gen
        fast_audit.audit_rows_table(rows)
    python_s = time.thread_time() - t0
    return {
        "generations": generations,
        "offsets_partitions": len(batches),
        "per_partition_us": per_partition / generations * 1e6,
        "one_batch_us": one_batch / generations * 1e6,
        "python_us": python_s / generations * 1e6,
        "python_path_generations": len(calls),
    }


def measure_assignors(count: int = 20_000, seed: int = 1, repeat: int = 3) -> dict[str, dict]:
    """Per assignor, over `count` busy-shaped problems (lib.testdata.assignments) in the busy log's
    mix: µs per problem of the kernels (one batch per assignor, the arrays built beforehand, CPU
    time of this thread, best of `repeat`) and of the Python port (each problem once), the
    FALLBACK rate, and whether every result that did not fall back equals the Python port's."""
    problems = busy_problems(count, seed)
    out: dict[str, dict] = {}
    for name in ASSIGNOR_CODES:
        mine = [p for p in problems if p[0] == name]
        batch, _ = build_batch(mine)
        answer = assign_arrays(batch)  # loads (or compiles) the kernels
        fast_s = float("inf")
        for _ in range(repeat):
            t0 = time.thread_time()
            answer = assign_arrays(batch)
            fast_s = min(fast_s, time.thread_time() - t0)
        expected: list[dict | AssignorError] = []
        t0 = time.thread_time()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for assignor, counts, subscriptions in mine:
                try:
                    expected.append(assign(assignor, counts, subscriptions))
                except AssignorError as e:
                    expected.append(e)
        python_s = time.thread_time() - t0
        results = assign_batch(mine)
        equal = all(got is None or same_result(got, want) for got, want in zip(results, expected))
        out[name] = {
            "problems": len(mine),
            "fast_us": fast_s / len(mine) * 1e6,
            "python_us": python_s / len(mine) * 1e6,
            "fallback_rate": float((answer.status == FALLBACK).mean()),
            "equal": equal,
        }
    return out


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["--warm"]:
        warm_decoder()
        warm_engine()
        warm_assignors()
        warm_audit()
        warm_lag()
        print("numba kernels compiled into their cache")
        sys.exit(0)
    if sys.argv[1:2] == ["--audit"]:
        m = measure_audit(*(int(a) for a in sys.argv[2:3]))
        print(
            f"{m['generations']} classic generations ({m['offsets_partitions']} offsets partitions): fast "
            f"{m['per_partition_us']:.1f} µs per generation in a batch per partition, {m['one_batch_us']:.1f} µs "
            f"in one batch; python {m['python_us']:.0f} µs (CPU time of one thread); "
            f"{m['python_path_generations']} generations left to the Python path"
        )
        sys.exit(0)
    if sys.argv[1:2] == ["--assignors"]:
        measured = measure_assignors(*(int(a) for a in sys.argv[2:3]))
        total = sum(m["problems"] for m in measured.values())
        for name, m in measured.items():
            print(
                f"{name:>18}: {m['problems']:6} problems, fast {m['fast_us']:6.2f} µs, python {m['python_us']:7.1f} µs "
                f"per problem; FALLBACK {m['fallback_rate']:.2%}; equal: {m['equal']}"
            )
        mix = {k: sum(m[k] * m["problems"] for m in measured.values()) / total for k in ("fast_us", "python_us")}
        print(f"{'all':>18}: {total:6} problems, fast {mix['fast_us']:6.2f} µs, python {mix['python_us']:7.1f} µs")
        sys.exit(0)
    m = measure_decode(sys.argv[1:])
    print(
        f"{m['records']} records: python {m['python_rps']:,.0f}/s, fast {m['fast_rps']:,.0f}/s "
        f"(CPU time of one thread), ratio {m['ratio']:.1f}x, equal output: {m['equal']}"
    )
