"""The lag stage on a hand-built log dir: consumed topic segments beside __consumer_offsets.
Every expected value below is worked out by hand from the records written (times in seconds
after T), not read back from the code."""

from __future__ import annotations

import os
import shutil

import pytest

from lib.codec.writer import encode_batch, encode_control_batch
from lib.replay.partitioning import partition_for
from lib.source.logdir import find_partitions
from lib.testdata.logbuilder import PartitionLogBuilder
from tests.helpers import audits_of

T = 1_763_000_000_000
S = 1000
OFFSETS_PARTITIONS = 4
TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAQ"


def _records(first, n, ts0):
    return [(first + i, ts0 + i * S, None, b"r%d" % (first + i)) for i in range(n)]


def _topic(log_dir, name, segments):
    folder = os.path.join(log_dir, name)
    os.makedirs(folder, exist_ok=True)
    for base, data in segments.items():
        with open(os.path.join(folder, f"{base:020d}.log"), "wb") as f:
            f.write(data)
    with open(os.path.join(folder, "partition.metadata"), "w") as f:
        f.write(f"version: 0\ntopic_id: {TOPIC_ID}\n")


def _orders(log_dir, with_first_segment=True):
    """orders-0: B1 0..9 at 0..9 s; B2 10..19 zstd at 20..29 s; (segment 20) B3 20..24
    LogAppendTime 65 s; B4 25..26 transactional at 70, 71 s; its COMMIT marker 27 at 72 s."""
    seg0 = encode_batch(0, _records(0, 10, T)) + encode_batch(10, _records(10, 10, T + 20 * S), compression=4)
    seg20 = (
        encode_batch(20, _records(20, 5, T + 60 * S), log_append_time=True, max_timestamp=T + 65 * S)
        + encode_batch(25, _records(25, 2, T + 70 * S), producer_id=9, producer_epoch=0, transactional=True)
        + encode_control_batch(27, 9, 0, True, T + 72 * S)
    )
    _topic(log_dir, "orders-0", {0: seg0, 20: seg20} if with_first_segment else {20: seg20})


def _offsets(log_dir, extra=()):
    builders = {p: PartitionLogBuilder(p) for p in range(OFFSETS_PARTITIONS)}

    def b(group):
        return builders[partition_for(group, OFFSETS_PARTITIONS)]

    b("g1").commit("g1", "orders", 0, 5, T + 15 * S)
    b("g1").commit("g1", "orders", 0, 10, T + 30 * S)
    b("g1").commit("g1", "audit", 1, 9, T + 10 * S)  # the audit topic holds 0..4 only
    b("g2").commit("g2", "orders", 0, 12, T + 35 * S, producer_id=5000)
    b("g2").marker(5000, True, T + 40 * S)
    b("g2").commit("g2", "orders", 0, 19, T + 45 * S, producer_id=5000)
    b("g2").marker(5000, False, T + 46 * S)
    b("g1").commit("g1", "orders", 0, 22, T + 66 * S)
    b("g1").commit("g1", "orders", 0, 25, T + 80 * S)
    # before audit-1's first batch (1..5 s, offsets 0..4) was written: its end offset was 0
    b("g4").commit("g4", "audit", 1, 0, T)
    for group, topic, partition, offset, ts in extra:
        b(group).commit(group, topic, partition, offset, ts)
    for builder in builders.values():
        builder.write(log_dir)


def _log_dir(path, with_first_segment=True, extra=()):
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    _offsets(path, extra)
    _orders(path, with_first_segment)
    _topic(path, "audit-1", {0: encode_batch(0, _records(0, 5, T + S))})
    _topic(path, "unconsumed-0", {0: encode_batch(0, _records(0, 3, T))})
    return path


def _rows(spark, warehouse, table="group_lag"):
    from lib.lake.delta import table_path

    rows = spark.read.format("delta").load(table_path(warehouse, table)).collect()
    return [r.asDict() for r in rows]


def _ms(ts):
    return None if ts is None else int(ts.timestamp() * 1000)


def _lag_view(rows):
    """(group, topic, partition, kind, at s, committed, end, lag records, lag ms, method)."""
    return sorted(
        (
            r["group_id"],
            r["topic"],
            r["partition"],
            r["kind"],
            (_ms(r["at"]) - T) // S,
            r["committed_offset"],
            r["end_offset"],
            r["lag_records"],
            r["lag_ms"],
            r["lag_ms_method"],
        )
        for r in rows
    )


NOW1 = T + 100 * S
EXPECTED_FULL = sorted(
    [
        # g1 at 15 s: end 10 (B1, 9 s); record 5 at 5 s, inside B1 (decoded)
        ("g1", "orders", 0, "commit", 15, 5, 10, 5, 10_000, "record"),
        # at 30 s: end 20 (B2, 29 s); record 10 opens B2: its header's base timestamp, 20 s
        ("g1", "orders", 0, "commit", 30, 10, 20, 10, 10_000, "record"),
        # committed 9 on a partition that ends at 5: truncated, no time lag
        ("g1", "audit", 1, "commit", 10, 9, 5, -4, None, None),
        ("g4", "audit", 1, "commit", 0, 0, 0, 0, 0, "caught_up"),
        # g2's transaction takes effect at its COMMIT marker (40 s); record 12 (zstd B2) at 22 s
        ("g2", "orders", 0, "commit", 40, 12, 20, 8, 18_000, "record"),
        # (its aborted commit of 19 never took effect)
        # at 66 s: end 25 (B3, LogAppendTime 65 s); record 22 has the append time, 65 s
        ("g1", "orders", 0, "commit", 66, 22, 25, 3, 1_000, "record"),
        # at 80 s: end 28 (the marker at 72 s); record 25 opens B4 at 70 s
        ("g1", "orders", 0, "commit", 80, 25, 28, 3, 10_000, "record"),
        # now (100 s): the live offsets
        ("g1", "orders", 0, "now", 100, 25, 28, 3, 30_000, "record"),
        ("g1", "audit", 1, "now", 100, 9, 5, -4, None, None),
        ("g2", "orders", 0, "now", 100, 12, 28, 16, 78_000, "record"),
        # g4 never read: all 5 records, the first written at 1 s
        ("g4", "audit", 1, "now", 100, 0, 5, 5, 99_000, "record"),
    ]
)


@pytest.fixture(scope="module")
def full_run(spark, tmp_path_factory):
    from lib.spark.pipeline import run_replay

    base = tmp_path_factory.mktemp("lag")
    log_dir = _log_dir(str(base / "logdir"))
    wh = str(base / "wh")
    result = run_replay(spark, find_partitions(log_dir), wh, NOW1, full=True)
    return base, log_dir, wh, result


def test_lag_at_every_commit_and_now_equals_the_hand_values(spark, full_run):
    _, _, wh, result = full_run
    assert result.lag is not None and result.lag.partitions_scanned == 2  # not unconsumed-0
    assert _lag_view(_rows(spark, wh)) == EXPECTED_FULL


def _behind(rows: list[dict]) -> list[tuple]:
    return [(r["group_id"], r["topic"], r["partition"], r["lag_records"], r["lag_ms"]) for r in rows]


def test_the_summary_s_furthest_behind_come_from_the_lag_tasks_as_the_table_holds_them(full_run):
    """The summary's lag part: the now rows with records to read (not g1's truncated -4), most
    behind in time first; the tasks' pick equals the table's."""
    from lib.reporting.run_summary import lag_summary

    _, _, wh, result = full_run
    expected = [("g4", "audit", 1, 5, 99_000), ("g2", "orders", 0, 16, 78_000), ("g1", "orders", 0, 3, 30_000)]
    assert _behind(result.lag.furthest_behind.to_pylist()) == expected
    assert _behind(lag_summary(wh, NOW1)) == expected
    assert result.lag.furthest_behind.to_pylist() == lag_summary(wh, NOW1)


def test_end_offsets_are_one_row_per_batch_of_the_consumed_partitions(spark, full_run):
    _, _, wh, _ = full_run
    rows = _rows(spark, wh, "partition_end_offsets")
    view = sorted(
        (r["topic"], r["partition"], r["end_offset"], (_ms(r["at"]) - T) // S, r["first_offset"], r["topic_id"])
        for r in rows
    )
    assert view == [
        ("audit", 1, 5, 5, 0, TOPIC_ID),
        ("orders", 0, 10, 9, 0, TOPIC_ID),
        ("orders", 0, 20, 29, 10, TOPIC_ID),
        ("orders", 0, 25, 65, 20, TOPIC_ID),
        ("orders", 0, 27, 71, 25, TOPIC_ID),
        ("orders", 0, 28, 72, 27, TOPIC_ID),
    ]
    first = {(r["topic"], r["end_offset"]): r for r in rows}
    assert _ms(first[("orders", 20)]["first_timestamp"]) == T + 20 * S
    assert first[("orders", 25)]["timestamp_type"] == "LogAppendTime"
    assert first[("orders", 28)]["is_control"] is True
    checkpoints = {(r["topic"], r["partition"]): r for r in _rows(spark, wh, "lag_checkpoints")}
    assert checkpoints[("orders", 0)]["next_offset"] == 28
    assert checkpoints[("orders", 0)]["segment_base_offset"] == 20
    assert checkpoints[("orders", 0)]["at_ms"] == T + 72 * S
    assert checkpoints[("audit", 1)]["next_offset"] == 5


def test_an_incremental_run_adds_the_new_commits_and_interpolates_where_the_record_is_gone(spark, full_run):
    """Segment 0 of orders-0 is deleted by retention; g3 commits 15 (a record of that segment)
    at 90 s. Its time: between the end-offset rows (10, 9 s) and (20, 29 s), the end offset
    passed 15 (reached 16) at 9 + (16 - 10) * 20 / 10 = 21 s: 69 s behind at 90 s."""
    from lib.spark.pipeline import run_replay

    base, _, wh, _ = full_run
    inc = str(base / "wh-inc")
    shutil.copytree(wh, inc)
    log_dir = _log_dir(str(base / "logdir2"), with_first_segment=False, extra=[("g3", "orders", 0, 15, T + 90 * S)])
    now2 = T + 120 * S
    result = run_replay(spark, find_partitions(log_dir), inc, now2)
    assert result.incremental and result.lag.partitions_scanned == 2
    rows = _lag_view(_rows(spark, inc))
    new = [r for r in rows if r not in EXPECTED_FULL]
    assert new == sorted(
        [
            ("g3", "orders", 0, "commit", 90, 15, 28, 13, 69_000, "interpolated"),
            ("g1", "orders", 0, "now", 120, 25, 28, 3, 50_000, "record"),
            ("g1", "audit", 1, "now", 120, 9, 5, -4, None, None),
            # record 12 is gone too: end offset 13 reached at 9 + (13 - 10) * 20 / 10 = 15 s
            ("g2", "orders", 0, "now", 120, 12, 28, 16, 105_000, "interpolated"),
            ("g3", "orders", 0, "now", 120, 15, 28, 13, 99_000, "interpolated"),
            ("g4", "audit", 1, "now", 120, 0, 5, 5, 119_000, "record"),
        ]
    )
    # nothing of the first run was lost or rewritten
    assert [r for r in rows if r in EXPECTED_FULL] == EXPECTED_FULL
    # the summary's furthest behind at 120 s, from the stage's tasks
    assert _behind(result.lag.furthest_behind.to_pylist()) == [
        ("g4", "audit", 1, 5, 119_000),
        ("g2", "orders", 0, 16, 105_000),
        ("g3", "orders", 0, 13, 99_000),
        ("g1", "orders", 0, 3, 50_000),
    ]
    # the end offsets were not read twice
    assert len(_rows(spark, inc, "partition_end_offsets")) == 6


def test_a_segment_gone_from_one_partition_is_not_looked_up_in_a_namesake_of_another(spark, tmp_path):
    """orders-1024 shares orders-0's lag bucket ((crc32 + 31 * partition) % 1024), so one task
    reads both, and its segment 0 has the name of orders-0's segment 0, which retention deletes
    before the second run. g2's record 12 sat in that segment: its time is interpolated as in
    the test above (105 s behind at 120 s), not looked up in a file of that name that is not
    its partition's (the run failed there: FileNotFoundError). orders-1024 holds 0..4 at 1..5 s;
    g5 committed 3 at 10 s: record 3 (4 s) still decoded, 116 s behind at 120 s."""
    from lib.lake.lag_input import bucket_of
    from lib.spark.pipeline import run_replay

    assert bucket_of("orders", 0) == bucket_of("orders", 1024)
    wh = str(tmp_path / "wh")
    g5 = ("g5", "orders", 1024, 3, T + 10 * S)
    first = _log_dir(str(tmp_path / "logdir1"), extra=[g5])
    _topic(first, "orders-1024", {0: encode_batch(0, _records(0, 5, T + S))})
    run_replay(spark, find_partitions(first), wh, NOW1, full=True)
    second = _log_dir(str(tmp_path / "logdir2"), with_first_segment=False, extra=[g5])
    _topic(second, "orders-1024", {0: encode_batch(0, _records(0, 5, T + S))})
    result = run_replay(spark, find_partitions(second), wh, T + 120 * S)
    assert result.incremental and result.lag.skipped is None
    now = [r for r in _lag_view(_rows(spark, wh)) if r[3] == "now" and r[4] == 120]
    assert ("g2", "orders", 0, "now", 120, 12, 28, 16, 105_000, "interpolated") in now
    assert ("g5", "orders", 1024, "now", 120, 3, 5, 2, 116_000, "record") in now


@pytest.fixture(scope="module")
def audit(spark, full_run):
    _, _, wh, _ = full_run
    yield audits_of(spark, wh)
    spark.catalog.setCurrentDatabase("default")


def _iso(seconds: int) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp((T + seconds * S) / 1000, dt.UTC).isoformat()


def test_lag_at_answers_from_the_last_commit_and_end_offset_before_the_instant(audit):
    rows = audit("lag_at", group="g1", at=_iso(50))
    assert [
        (r["topic"], r["partition"], r["committed_offset"], r["end_offset"], r["lag_records"], r["lag_ms"])
        for r in rows
    ] == [
        # committed 9 beyond the end (5): truncated, no time lag
        ("audit", 1, 9, 5, -4, None),
        # commit of 10 at 30 s; end 20 since 29 s; record 10 written at 20 s: 30 s behind at 50 s
        ("orders", 0, 10, 20, 10, 30_000),
    ]
    assert [r["truncated"] for r in rows] == [True, False]
    assert rows[1]["lag_ms_method"] == "record"


def test_lag_history_buckets(audit):
    rows = audit("lag_history", group="g1", since=_iso(20), until=_iso(100), bucket="40s")
    view = [(r["topic"], (_ms(r["at"]) - T) // S, r["committed_offset"], r["lag_records"], r["lag_ms"]) for r in rows]
    assert view == [
        ("audit", 20, 9, -4, None),
        ("audit", 60, 9, -4, None),
        ("audit", 100, 9, -4, None),
        # at 20 s: commit 5 (15 s), end 10, record 5 of 5 s
        ("orders", 20, 5, 5, 15_000),
        # at 60 s: commit 10 (30 s), end 20 (the next batch is of 65 s), record 10 of 20 s
        ("orders", 60, 10, 10, 40_000),
        # at 100 s: commit 25 (80 s), end 28, record 25 of 70 s
        ("orders", 100, 25, 3, 30_000),
    ]


def test_groups_falling_behind(audit):
    """g1 dips below 5 records at 66 s and 80 s; g2 has been 8 to 16 behind since its commit
    took effect at 40 s. In time, g2 reaches 70 s behind only after 72 s (50 s) and before
    now (78 s): behind since now."""
    rows = audit("groups_falling_behind", now=_iso(100), min_records=5, for_at_least="10s")
    assert [
        (
            r["group_id"],
            r["topic"],
            r["partition"],
            (_ms(r["behind_since"]) - T) // S,
            r["lag_records"],
            r["lag_ms"],
            r["max_lag_records"],
        )
        for r in rows
    ] == [
        # g4 never read audit-1: 5 behind since its batch was written (5 s)
        ("g4", "audit", 1, 5, 5, 99_000, 5),
        ("g2", "orders", 0, 40, 16, 78_000, 16),
    ]
    assert audit("groups_falling_behind", now=_iso(100), min_lag="70s", for_at_least="10s") == []
    rows = audit("groups_falling_behind", now=_iso(100), min_lag="70s", for_at_least="0s")
    assert [(r["group_id"], (_ms(r["behind_since"]) - T) // S) for r in rows] == [("g2", 100), ("g4", 100)]


def test_quality_suites_of_the_lag_tables(spark, full_run, tmp_path):
    """The hand-built log passes every error-level check; the truncated audit-1 rows (g1's
    commit and its now row) are the one warning. A decreasing end offset is an error."""
    from pyspark.sql import functions as F

    from lib.reporting.quality_suites import run_suites

    _, _, wh, _ = full_run
    tables = ["partition_end_offsets", "group_lag", "lag_checkpoints"]

    def failed(result):
        return {
            (t.table, e.name): (e.severity, e.unexpected_count)
            for t in result.tables
            for e in t.expectations
            if not e.success
        }

    result = run_suites(spark, wh, partition_count=OFFSETS_PARTITIONS, tables=tables)
    assert failed(result) == {("group_lag", "no_truncated_partitions"): ("warning", 2)}
    assert result.success
    broken = str(tmp_path / "wh")
    shutil.copytree(wh, broken, ignore=shutil.ignore_patterns("_quality"))
    path = f"{broken}/partition_end_offsets"
    df = spark.read.format("delta").load(path)
    df.withColumn(
        "end_offset", F.when(F.col("end_offset") == 25, F.lit(19)).otherwise(F.col("end_offset"))
    ).write.format("delta").mode("overwrite").save(path)
    result = run_suites(spark, broken, partition_count=OFFSETS_PARTITIONS, tables=["partition_end_offsets"])
    assert failed(result) == {("partition_end_offsets", "end_offsets_never_decrease_within_a_topic_id"): ("error", 1)}


def test_the_report_plots_the_groups_furthest_behind_first_with_their_lag(spark, full_run):
    """Every commit falls in one hour bucket, whose end is after now: one lag point at now per
    group, the sums of EXPECTED_FULL's now rows (audit-1, truncated, left out)."""
    from lib.reporting.report_builder import collect_report

    _, _, wh, _ = full_run
    data = collect_report(spark, wh, NOW1)
    assert data.behind == ["g4", "g2", "g1"]
    assert {p.group_id: p.lag for p in data.plots} == {
        "g4": [(NOW1, 5, 99_000)],
        "g2": [(NOW1, 16, 78_000)],
        "g1": [(NOW1, 3, 30_000)],
    }


def test_a_run_with_nothing_new_skips_the_stage_and_a_later_now_adds_now_rows(spark, full_run):
    from lib.spark.pipeline import run_replay

    base, log_dir, wh, _ = full_run
    again = str(base / "wh-again")
    shutil.copytree(wh, again)
    before = _lag_view(_rows(spark, again))
    result = run_replay(spark, find_partitions(log_dir), again, NOW1)
    assert result.skipped_partitions == OFFSETS_PARTITIONS
    assert result.lag.skipped == "nothing new since the last run at the same --now"
    assert _lag_view(_rows(spark, again)) == before
    later = run_replay(spark, find_partitions(log_dir), again, NOW1 + 10 * S)
    assert later.lag.skipped is None and later.lag.partitions_scanned == 0
    added = [r for r in _lag_view(_rows(spark, again)) if r not in before]
    # the same live offsets, 10 s later
    assert added == sorted(
        (g, t, p, "now", 110, c, e, lag, None if ms is None else ms + 10_000, m)
        for g, t, p, kind, _, c, e, lag, ms, m in EXPECTED_FULL
        if kind == "now"
    )


# --- one answer for "lag as of an instant" ------------------------------------------------------
# late-0 keeps offsets 5..9 only (written at 20..24 s: one batch, its end-offset row at 24 s).
# g5 and g6 commit on it at 10 s, before any end offset of it is known: g5 commits 5, the
# partition's first offset (the log could not have ended past it: lag 0), g6 commits 7, which
# says nothing of where the log ended at 10 s (unknown, not "caught up").
LATE_NOW = T + 40 * S


@pytest.fixture(scope="module")
def late_run(spark, tmp_path_factory):
    from lib.spark.pipeline import run_replay

    base = tmp_path_factory.mktemp("late")
    log_dir = str(base / "logdir")
    os.makedirs(log_dir)
    builders = {p: PartitionLogBuilder(p) for p in range(OFFSETS_PARTITIONS)}
    for group, offset in (("g5", 5), ("g6", 7)):
        builders[partition_for(group, OFFSETS_PARTITIONS)].commit(group, "late", 0, offset, T + 10 * S)
    for builder in builders.values():
        builder.write(log_dir)
    _topic(log_dir, "late-0", {5: encode_batch(5, _records(5, 5, T + 20 * S))})
    wh = str(base / "wh")
    run_replay(spark, find_partitions(log_dir), wh, LATE_NOW, full=True)
    return wh


def test_lag_where_no_end_offset_is_known_yet_is_null_in_every_answer(spark, late_run):
    """The lag stage, lag_at, lag_history, groups_falling_behind and the report's lag at bucket
    ends (lib.spark.lag_rules.lag_at_instants) on the same instants: unknown is NULL everywhere,
    with lag_ms_method end_offset_unknown (the SQL audits answered greatest(NULL, committed) =
    the committed offset: lag 0, caught_up)."""
    from lib.lake.delta import table_path
    from lib.spark.lag_rules import lag_at_instants, lag_timeline

    wh = late_run
    # the stage: (group, kind, at s, committed, end, lag, lag ms, method)
    assert sorted(v[0:1] + v[3:] for v in _lag_view(_rows(spark, wh))) == [
        ("g5", "commit", 10, 5, 5, 0, 0, "caught_up"),
        ("g5", "now", 40, 5, 10, 5, 20_000, "record"),
        ("g6", "commit", 10, 7, None, None, None, "end_offset_unknown"),
        ("g6", "now", 40, 7, 10, 3, 18_000, "record"),
    ]
    run = audits_of(spark, wh)
    try:
        # (group, at s, committed, end, lag, lag ms)
        want = {
            ("g5", 10): (5, 5, 0, 0),
            ("g5", 20): (5, 5, 0, 0),
            ("g5", 30): (5, 10, 5, 10_000),
            ("g6", 10): (7, None, None, None),
            ("g6", 20): (7, None, None, None),
            ("g6", 30): (7, 10, 3, 8_000),
        }
        lag_at = {
            (g, s): (r["committed_offset"], r["end_offset"], r["lag_records"], r["lag_ms"])
            for g in ("g5", "g6")
            for s in (10, 20, 30)
            for r in run("lag_at", group=g, at=_iso(s))
        }
        assert lag_at == want
        assert [r["lag_ms_method"] for r in run("lag_at", group="g6", at=_iso(20))] == ["end_offset_unknown"]
        history = {
            (g, (_ms(r["at"]) - T) // S): (r["committed_offset"], r["end_offset"], r["lag_records"], r["lag_ms"])
            for g in ("g5", "g6")
            for r in run("lag_history", group=g, since=_iso(10), until=_iso(30), bucket="10s")
        }
        assert history == want
        # behind from the end-offset row at 24 s on; the unknown 10 s of g6 is neither behind nor not
        behind = run("groups_falling_behind", now=_iso(30), min_records=1, for_at_least="0s")
        assert [(r["group_id"], (_ms(r["behind_since"]) - T) // S, r["lag_records"], r["lag_ms"]) for r in behind] == [
            ("g5", 24, 5, 10_000),
            ("g6", 24, 3, 8_000),
        ]
    finally:
        spark.catalog.setCurrentDatabase("default")
    import datetime as dt

    probes = spark.createDataFrame(
        [(g, s, dt.datetime.fromtimestamp((T + s * S) / 1000, dt.UTC)) for g in ("g5", "g6") for s in (10, 20, 30)],
        "group_id string, bucket long, at timestamp",
    )
    group_lag = spark.read.format("delta").load(table_path(wh, "group_lag"))
    ends = spark.read.format("delta").load(table_path(wh, "partition_end_offsets"))
    report = {
        (r["group_id"], r["bucket"]): (r["lag_records"], r["lag_ms"])
        for r in lag_at_instants(lag_timeline(group_lag, ends), probes).collect()
    }
    assert report == {k: v[2:] for k, v in want.items()}


def test_a_lag_task_weighs_the_bytes_left_to_scan():
    """A partition read before weighs the bytes after its checkpoint (the rest of that segment
    and the later ones), not its whole log: an incremental stage is small, and gets a task per
    core."""
    from lib.lake.seams import PartitionInput
    from lib.source.logdir import Segment
    from lib.source.topic_log import ScanStart, TopicPartitionLog
    from lib.spark.lag import _scan_bytes

    segs = [Segment(0, 0, "a", 1000), Segment(0, 50, "b", 700), Segment(0, 90, "c", 300)]
    log = TopicPartitionLog("t", 0, "dir", segs)

    def weighed(start, scan=True):
        return _scan_bytes(PartitionInput("t", 0, log, start, scan, None, True, None))

    assert weighed(None) == 2000
    assert weighed(ScanStart(60, 50, 200)) == 700 - 200 + 300
    assert weighed(ScanStart(95, 90, 300)) == 0
    # a checkpoint of an earlier version (no position): from the segment holding offset 60
    assert weighed(ScanStart(60, None, None)) == 700 + 300
    assert weighed(ScanStart(60, 50, 200), scan=False) == 0


def test_the_peek_at_whether_the_lag_stage_waits(tmp_path):
    """lib.spark.lag.waits, read before a run's JVM would start: no checkpoint yet (a log dir
    without consumed partitions) waits, and so do checkpoints of the offsets partitions all at
    this --now; one of them at another --now does not (the stage will write now rows)."""
    import datetime as dt

    import pyarrow as pa

    from lib.lake.delta import overwrite_small_table, table_path
    from lib.spark.lag import OFFSETS_TOPIC, waits
    from schemas.tables import LAG_CHECKPOINTS

    wh = str(tmp_path / "wh")
    assert waits(wh, NOW1)

    def checkpoints(*rows):
        table = pa.Table.from_pylist(
            [
                {
                    "topic": t,
                    "partition": p,
                    "next_offset": 0,
                    "at_ms": at,
                    "run_id": "r",
                    "finished_at": dt.datetime.now(dt.UTC),
                }
                for t, p, at in rows
            ],
            schema=LAG_CHECKPOINTS.arrow_schema,
        )
        overwrite_small_table(table_path(wh, LAG_CHECKPOINTS), LAG_CHECKPOINTS, table, "test")

    checkpoints((OFFSETS_TOPIC, 0, NOW1), (OFFSETS_TOPIC, 1, NOW1), ("orders", 0, NOW1 - S))
    assert waits(wh, NOW1)
    assert not waits(wh, NOW1 + S)
    checkpoints((OFFSETS_TOPIC, 0, NOW1), (OFFSETS_TOPIC, 1, NOW1 - S))
    assert not waits(wh, NOW1)
