"""Tooling around the numba kernels (make setup, make bench, tests): compile them into numba's
on-disk cache once, and measure the decode paths and the assignors side by side, Python against
numba. Not imported by the pipeline.

    python -m lib.testdata.kernels --warm                 compile every kernel into the cache
    python -m lib.testdata.kernels SEGMENT...             records/s of both decode paths
    python -m lib.testdata.kernels --assignors [COUNT]    µs per assignment problem, both paths
"""

from __future__ import annotations

import time
import warnings

import numba

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
        print("numba kernels compiled into their cache")
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
