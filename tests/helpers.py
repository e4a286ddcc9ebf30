"""What several test modules share (one home; test modules never import each other): the
repository root, tables as rows, an independent CRC-32C, the growing log of the
incremental and crash-recovery tests, and the canned SQL audits run over a warehouse."""

from __future__ import annotations

import os
import subprocess
import sys

from lib.testdata.logbuilder import PartitionLogBuilder, consumer_member
from schemas.tables import QUARANTINED_RECORDS, REPLAY_CHECKPOINTS, REPLAY_TABLES

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def replay_job(
    log_dir,
    warehouse,
    env: dict | None = None,
    conf: tuple[str, ...] = (),
    now: int | None = None,
    args: tuple[str, ...] = (),
    **popen,
) -> subprocess.Popen:
    """jobs.replay_offsets in its own process as of `now` (default NOW; --quiet, local[2], `conf`
    as --conf key=value, then `args`), with `env` added to this environment; stdout and stderr
    piped as text."""
    run_env = dict(
        os.environ, PYTHONPATH=REPO, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable, **(env or {})
    )
    cmd = [sys.executable, "-m", "jobs.replay_offsets", "--input", str(log_dir), "--warehouse", str(warehouse)]
    cmd += ["--now", str(NOW if now is None else now), "--quiet", "--conf", "spark.master=local[2]"]
    for setting in conf:
        cmd += ["--conf", setting]
    cmd += args
    return subprocess.Popen(
        cmd, cwd=REPO, env=run_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen
    )


def rows(spark, warehouse: str, table: str, order_by: tuple = ()) -> list[dict]:
    """A small Delta table as a list of dicts (tests only: fixtures are tiny)."""
    from lib.lake.delta import table_path

    df = spark.read.format("delta").load(table_path(warehouse, table))
    if order_by:
        df = df.orderBy(*order_by)
    return [r.asDict(recursive=True) for r in df.collect()]


# --- CRC-32C (Castagnoli), independent table implementation ---------------------------------

_CRC32C_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _CRC32C_TABLE.append(_c)


def crc32c(data: bytes) -> int:
    c = 0xFFFFFFFF
    for x in data:
        c = _CRC32C_TABLE[(c ^ x) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


# --- a log that grows in phases (tests/test_incremental.py, tests/test_crash_recovery.py) ---

DAY = 86_400_000
NOW = 1_700_000_000_000 + 30 * DAY
T = NOW - 2 * DAY
# every table a run writes but its commit point and the quarantine, in commit order
STATE_TABLES = tuple(t.name for t in REPLAY_TABLES if t not in (QUARANTINED_RECORDS, REPLAY_CHECKPOINTS))
KEYS = {
    "offsets_log": ("offsets_partition", "log_offset"),
    "group_offsets": ("group_id", "topic", "partition"),
    "expired_offsets": ("group_id", "topic", "partition"),
    "pending_transactional_offsets": ("producer_id", "group_id", "topic", "partition"),
    "consumer_groups": ("group_id",),
    "expired_groups": ("group_id",),
    "group_fold_state": ("group_id",),
    "assignment_audit": ("offsets_partition", "log_offset", "group_id"),
}


def phases():
    b0, b1 = PartitionLogBuilder(0), PartitionLogBuilder(1)

    def phase1():
        b0.group("g", T, generation=1, members=[consumer_member("m1", ["t"], {"t": [0, 1]})])
        b0.commit("g", "t", 0, 10, T).commit("g", "t", 1, 11, T)
        b0.commit("g", "t", 0, 50, T, producer_id=7)  # marker comes in phase 2
        b0.commit("g", "t", 2, 55, T, producer_id=7)  # ... and is all that sets t-2
        b0.commit("g", "t", 1, 60, T, producer_id=8)  # aborted in phase 3
        b1.commit("s", "x", 0, 1, T).commit("s", "x", 1, 2, T)
        b1.record(3, {"group_id": "k"}, {"epoch": 2}, T)
        b1.record(
            5,
            {"group_id": "k", "member_id": "a"},
            {"clientId": "c", "clientHost": "/h", "subscribedTopicNames": ["x"], "classicMemberMetadata": None},
            T,
        )
        b1.record(6, {"group_id": "k"}, {"assignmentEpoch": 2}, T)
        b1.record(
            8,
            {"group_id": "k", "member_id": "a"},
            {
                "memberEpoch": 2,
                "previousMemberEpoch": 1,
                "state": 0,
                "assignedPartitions": [],
                "partitionsPendingRevocation": [],
            },
            T,
        )

    def phase2():
        b0.marker(7, True, T + 1)
        b0.commit("g", "t", 0, 20, T + 2)  # newer than the txn record: wins
        b1.offset_tombstone("s", "x", 0, T + 3)
        b1.roll()
        b1.commit("old", "y", 0, 3, NOW - 9 * DAY)  # expires
        b0.group(
            "g",
            T + 4,
            generation=2,
            members=[consumer_member("m1", ["t"], {"t": [0]}), consumer_member("m2", ["t"], {"t": [1]})],
        )

    def phase3():
        b0.marker(8, False, T + 5)
        b0.commit("g", "t", 1, 70, T + 6, producer_id=9)  # still open at the end
        b1.offset_tombstone("s", "x", 1, T + 7)  # s loses its last offset
        b1.record(8, {"group_id": "k", "member_id": "a"}, None, T + 8)  # k is deleted, Kafka's order
        b1.record(5, {"group_id": "k", "member_id": "a"}, None, T + 8)
        b1.record(6, {"group_id": "k"}, None, T + 8)
        b1.record(3, {"group_id": "k"}, None, T + 8)
        b0.group("g", T + 9, generation=3, state_ts=T + 9, members=[])  # g becomes Empty

    return (b0, b1), (phase1, phase2, phase3)


def snapshot(spark, warehouse) -> dict:
    return {
        t: sorted(rows(spark, str(warehouse), t), key=lambda r: tuple(str(r[k]) for k in KEYS[t])) for t in STATE_TABLES
    }


def audits_of(spark, wh):
    """A function running a canned SQL audit over warehouse `wh` (registered as the catalog's
    current database: set it back to default after)."""
    from lib.reporting.audit_queries import bind, collect, load_queries, open_catalog, run_query

    open_catalog(spark, wh)
    queries = load_queries()

    def run(name: str, **params) -> list[dict]:
        q = queries[name]
        return collect(run_query(spark, q, bind(q, {k: str(v) for k, v in params.items()})))[1]

    return run


def lag_answers(spark, wh, groups: list[str], instants: list[int]) -> dict:
    """Every answer to "what was G's lag on T/P at instant X" over warehouse `wh`, for the
    groups at the instants (evenly spaced): {(group, X ms, topic, partition): (committed, end
    offset, lag records, lag ms)} from lag_at, after checking that lag_history (one bucket per
    instant), groups_falling_behind (the lags above 0 at each instant) and the report's form
    (lib.spark.lag_rules.lag_at_instants) give the same."""
    import datetime as dt

    from lib.spark.delta import read_table
    from lib.spark.lag_rules import lag_at_instants, lag_timeline

    def iso(ms: int) -> str:
        return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat()

    def ms(ts) -> int:
        return round(ts.timestamp() * 1000)

    def answer(r) -> tuple:
        return (r["committed_offset"], r["end_offset"], r["lag_records"], r["lag_ms"])

    step = instants[1] - instants[0]
    assert all(b - a == step for a, b in zip(instants, instants[1:]))
    run = audits_of(spark, wh)
    try:
        at = {
            (g, x, r["topic"], r["partition"]): answer(r)
            for g in groups
            for x in instants
            for r in run("lag_at", group=g, at=iso(x))
        }
        history = {
            (g, ms(r["at"]), r["topic"], r["partition"]): answer(r)
            for g in groups
            for r in run("lag_history", group=g, since=iso(instants[0]), until=iso(instants[-1]), bucket=f"{step}ms")
        }
        assert history == at
        for x in instants:
            behind = run("groups_falling_behind", now=iso(x), min_records=1, for_at_least="0s")
            got = {
                (r["group_id"], r["topic"], r["partition"]): (r["lag_records"], r["lag_ms"])
                for r in behind
                if r["group_id"] in groups
            }
            want = {(g, t, p): v[2:] for (g, y, t, p), v in at.items() if y == x and v[2] is not None and v[2] > 0}
            assert got == want, iso(x)
    finally:
        spark.catalog.setCurrentDatabase("default")
    probes = spark.createDataFrame(
        [(g, dt.datetime.fromtimestamp(x / 1000, dt.UTC)) for g in groups for x in instants],
        "group_id string, at timestamp",
    )
    timeline = lag_timeline(read_table(spark, wh, "group_lag"), read_table(spark, wh, "partition_end_offsets"))
    report = {
        (r["group_id"], ms(r["at"]), r["topic"], r["partition"]): answer(r)
        for r in lag_at_instants(timeline, probes).collect()
    }
    assert report == at
    return at
