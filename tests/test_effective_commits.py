"""One answer for "which offset commits took effect, and when": the replay engine, record by
record (group_lag's commit rows, written from the replay's pass, and group_offsets, its final
state), the Spark form the report counts (lib.reporting.report_builder.applied_commits over
lib.replay.offsets_spark.offset_effects) and the SQL audit committed_offset_as_of (over the
view offset_effects), on the same logs: two hand-built cases where the Spark form used to count
a commit Kafka's loader never applies, and random histories of plain and transactional
commits, markers and tombstones."""

from __future__ import annotations

import os
import random

import pytest

from lib.codec.writer import encode_batch
from lib.replay.partitioning import partition_for
from lib.source.logdir import find_partitions
from lib.testdata.logbuilder import PartitionLogBuilder

N = 2
T = 1_763_000_000_000
S = 1000
NOW = T + 10_000 * S


def _view(rows, at: str) -> list[tuple]:
    """(group, topic, partition, offset, when it took effect (ms), offsets partition, the record
    that made it effective), sorted; `at`: the column of the time."""
    keys = ("group_id", "topic", "partition", "committed_offset", at, "offsets_partition", "log_offset")
    return sorted(tuple(_ms(r[k]) if k == at else r[k] for k in keys) for r in rows)


def _engine(spark, wh):
    from lib.lake.delta import table_path

    rows = spark.read.format("delta").load(table_path(wh, "group_lag")).where("kind = 'commit'").collect()
    return _view(rows, "at")


def _spark_form(spark, wh):
    from lib.lake.delta import table_path
    from lib.reporting.report_builder import applied_commits

    log = spark.read.format("delta").load(table_path(wh, "offsets_log"))
    return _view(applied_commits(log).collect(), "ts")


def _ms(ts):
    return int(ts.timestamp() * 1000)


def _replay(spark, tmp_path, build) -> str:
    from lib.spark.pipeline import run_replay

    log_dir = str(tmp_path / "logdir")
    os.makedirs(log_dir)
    builders = {p: PartitionLogBuilder(p) for p in range(N)}
    build(lambda group: builders[partition_for(group, N)])
    for b in builders.values():
        b.write(log_dir)
    for partition in (0, 1):  # the consumed topic: the lag stage writes group_lag's commit rows
        folder = os.path.join(log_dir, f"t-{partition}")
        os.makedirs(folder)
        with open(os.path.join(folder, f"{0:020d}.log"), "wb") as f:
            f.write(encode_batch(0, [(0, T, None, b"r")]))
        with open(os.path.join(folder, "partition.metadata"), "w") as f:
            f.write("version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ\n")
    wh = str(tmp_path / "wh")
    run_replay(spark, find_partitions(log_dir), wh, NOW, full=True)
    return wh


def test_superseded_and_outdated_transactional_commits_never_took_effect(spark, tmp_path):
    """Offsets (log order) of each group's offsets partition, worked out by hand:
    - sup: producer 7 commits t-0 = 10 (0), then t-0 = 11 (1) in the same transaction, COMMIT (2):
      only 11 takes effect, at the marker (its pending entry replaced the first);
    - old: producer 8 commits t-0 = 20 (0), a plain commit t-0 = 30 follows (1), COMMIT (2):
      the transactional record is older than the offset in effect, so nothing changes at the
      marker; plain 30 took effect at its record."""

    def build(on):
        on("sup").commit("sup", "t", 0, 10, T + 1 * S, producer_id=7).commit(
            "sup", "t", 0, 11, T + 2 * S, producer_id=7
        ).marker(7, True, T + 3 * S)
        on("old").commit("old", "t", 0, 20, T + 1 * S, producer_id=8).commit("old", "t", 0, 30, T + 2 * S).marker(
            8, True, T + 3 * S
        )

    wh = _replay(spark, tmp_path, build)
    ps, po = partition_for("sup", N), partition_for("old", N)
    want = sorted(
        [
            ("sup", "t", 0, 11, T + 3 * S, ps, 2),
            ("old", "t", 0, 30, T + 2 * S, po, 1),
        ]
    )
    assert _engine(spark, wh) == want
    assert _spark_form(spark, wh) == want


@pytest.mark.parametrize("seed", range(4))
def test_random_histories_the_same_in_both_forms(spark, tmp_path, seed):
    rng = random.Random(seed)
    groups = ["ga", "gb", "gc"]
    producers = [100, 101, 102]
    ts = T

    def build(on):
        nonlocal ts
        for _ in range(120):
            ts += rng.randint(0, 3) * S
            group = rng.choice(groups)
            partition = rng.randint(0, 1)
            what = rng.random()
            if what < 0.3:
                on(group).commit(group, "t", partition, rng.randint(0, 500), ts)
            elif what < 0.65:
                on(group).commit(group, "t", partition, rng.randint(0, 500), ts, producer_id=rng.choice(producers))
            elif what < 0.9:
                # a marker in every offsets partition the producer may have written to
                pid = rng.choice(producers)
                for g in groups:
                    if rng.random() < 0.7:
                        on(g).marker(pid, rng.random() < 0.75, ts)
            else:
                on(group).offset_tombstone(group, "t", partition, ts)

    wh = _replay(spark, tmp_path, build)
    engine = _engine(spark, wh)
    assert engine  # (histories with commits that took effect)
    assert _spark_form(spark, wh) == engine
    _committed_as_of_agrees(spark, wh, engine, [T + k * (ts - T) // 4 for k in range(1, 5)] + [NOW])


def _committed_as_of_agrees(spark, wh, engine, instants):
    """committed_offset_as_of at each instant against the engine: a key's last effect at or
    before it, among the engine's commits (group_lag) and the offset tombstones (which delete at
    their record, whatever their producer); at NOW, against group_offsets (the engine's state)."""
    import datetime as dt

    from lib.lake.delta import table_path
    from lib.reporting.audit_queries import bind, collect, load_queries, open_catalog, run_query

    log = spark.read.format("delta").load(table_path(wh, "offsets_log"))
    tombstones = [
        (
            r["group_id"],
            r["topic"],
            r["partition"],
            None,
            _ms(r["log_timestamp"]),
            r["offsets_partition"],
            r["log_offset"],
        )
        for r in log.where("is_tombstone AND record_type IN (0, 1)").collect()
    ]
    effects = sorted(engine + tombstones, key=lambda e: (e[5], e[6]))
    final = {
        (r["group_id"], r["topic"], r["partition"]): r["committed_offset"]
        for r in spark.read.format("delta").load(table_path(wh, "group_offsets")).collect()
    }
    open_catalog(spark, wh)
    query = load_queries()["committed_offset_as_of"]
    try:
        for at in instants:
            want: dict = {}
            for group, topic, partition, offset, when, _, _ in effects:
                if when <= at:
                    want[(group, topic, partition)] = offset
            iso = dt.datetime.fromtimestamp(at / 1000, dt.UTC).isoformat()
            got = {}
            for group in sorted({k[0] for k in want}):
                rows = collect(run_query(spark, query, bind(query, {"group": group, "at": iso})))[1]
                got.update({(group, r["topic"], r["partition"]): r["committed_offset"] for r in rows})
            assert got == want, at
            if at == NOW:
                assert {k: v for k, v in got.items() if v is not None} == final
    finally:
        spark.catalog.setCurrentDatabase("default")
