"""Great Expectations suites (schemas/quality_checks.py, lib/reporting/quality_suites.py, jobs/quality.py).

A small hand-built log (4 offsets partitions) is replayed once; every suite must pass on it.
Then each important rule gets a deliberately broken copy of one table, and exactly the
expected expectations must fail, with hand-counted unexpected rows."""

from __future__ import annotations

import json
import os
import shutil
import struct

import pytest

from lib.replay.partitioning import partition_for
from lib.testdata.logbuilder import PartitionLogBuilder, consumer_member

pytestmark = pytest.mark.spark

N = 4
DAY = 86_400_000
NOW = 1_700_000_000_000 + 30 * DAY
RECENT = NOW - DAY
OLD = NOW - 8 * DAY

NOT_NULL_OFFSETS = [
    "group_id_not_null",
    "topic_not_null",
    "partition_not_null",
    "committed_offset_not_null",
    "offsets_partition_not_null",
    "log_offset_not_null",
]
NOT_NULL_GROUPS = [
    "group_id_not_null",
    "group_type_not_null",
    "state_not_null",
    "offsets_partition_not_null",
    "log_offset_not_null",
]
OFFSET_RULES = [
    "partition_non_negative",
    "committed_offset_non_negative",
    "log_offset_non_negative",
    "offsets_partition_matches_group",
]
GROUP_RULES = ["group_type_known", "state_known", "offsets_partition_matches_group"]
EXPECTED_NAMES = {
    "offsets_log": [
        "offsets_partition_not_null",
        "log_offset_not_null",
        "batch_base_offset_not_null",
        "magic_not_null",
        "compression_not_null",
        "producer_id_not_null",
        "producer_epoch_not_null",
        "is_transactional_not_null",
        "is_control_not_null",
        "is_tombstone_not_null",
        "decode_status_not_null",
        "segment_file_not_null",
        "key_unique",
        "log_offset_non_negative",
        "log_offset_in_batch",
        "decode_status_known",
        "undecoded_rows_explained",
        "offsets_partition_matches_group",
    ],
    "group_offsets": NOT_NULL_OFFSETS + ["key_unique"] + OFFSET_RULES,
    "expired_offsets": NOT_NULL_OFFSETS + ["key_unique"] + OFFSET_RULES,
    "pending_transactional_offsets": ["producer_id_not_null"] + NOT_NULL_OFFSETS + ["key_unique"] + OFFSET_RULES,
    "consumer_groups": NOT_NULL_GROUPS + ["key_unique"] + GROUP_RULES,
    "expired_groups": NOT_NULL_GROUPS + ["key_unique"] + GROUP_RULES,
    "group_fold_state": [
        "offsets_partition_not_null",
        "group_id_not_null",
        "log_offset_not_null",
        "fold_state_not_null",
        "key_unique",
        "offsets_partition_matches_group",
    ],
    "quarantined_records": [
        "offsets_partition_not_null",
        "segment_file_not_null",
        "byte_position_not_null",
        "log_offset_not_null",
        "level_not_null",
        "error_kind_not_null",
        "error_not_null",
        "file_path_not_null",
        "run_id_not_null",
        "key_unique",
        "level_known",
        "byte_position_non_negative",
        "nothing_quarantined",
    ],
    "assignment_audit": [
        "group_id_not_null",
        "group_type_not_null",
        "generation_not_null",
        "member_count_not_null",
        "members_not_null",
        "topics_not_null",
        "partitions_not_null",
        "assigned_not_null",
        "min_per_member_not_null",
        "max_per_member_not_null",
        "imbalance_not_null",
        "unassigned_not_null",
        "assigned_twice_not_null",
        "verdict_not_null",
        "racks_recorded_not_null",
        "offsets_partition_not_null",
        "log_offset_not_null",
        "key_unique",
        "verdict_known",
        "group_type_known",
        "imbalance_consistent",
        "moved_non_negative",
        "min_moves_non_negative",
        "assignment_as_its_assignor_computes",
        "no_partition_assigned_twice",
    ],
    "replay_checkpoints": [
        "offsets_partition_not_null",
        "next_log_offset_not_null",
        "records_read_not_null",
        "trailing_bytes_not_null",
        "run_id_not_null",
        "finished_at_not_null",
        "key_unique",
        "next_log_offset_non_negative",
        "records_read_non_negative",
        "trailing_bytes_non_negative",
        "checkpoint_not_behind_previous_version",
        "checkpoint_after_last_record",
    ],
}
# rows per table, counted from the log below
EXPECTED_ROWS = {
    "offsets_log": 7,
    "group_offsets": 3,
    "expired_offsets": 1,
    "pending_transactional_offsets": 1,
    "consumer_groups": 3,
    "expired_groups": 1,
    "quarantined_records": 0,
    "replay_checkpoints": 4,
    "assignment_audit": 1,  # alpha's one generation
}


def build_log(log_dir) -> None:
    b = {p: PartitionLogBuilder(p) for p in range(N)}

    def on(group):
        return b[partition_for(group, N)]

    on("alpha").group("alpha", RECENT, members=[consumer_member("m1", ["t"], {"t": [0, 1]})])
    on("alpha").commit("alpha", "t", 0, 10, RECENT).commit("alpha", "t", 1, 20, RECENT)
    on("beta").commit("beta", "t", 0, 5, RECENT)  # simple group
    on("old-simple").commit("old-simple", "t", 0, 1, OLD)  # expires, group deleted
    on("txn-open").commit("txn-open", "t", 0, 7, RECENT, producer_id=1001)  # no marker: pending
    g = "share-preview"  # type 9 (retired in 4.1): kept undecoded, explained
    key = struct.pack(">h", 9) + struct.pack(">h", len(g)) + g.encode()
    on(g).batch([(key, b"\x00\x00\x00\x00\x00\x00", RECENT)])
    for builder in b.values():
        builder.write(str(log_dir))


@pytest.fixture(scope="module")
def clean(spark, replay_logdir, tmp_path_factory):
    """A replayed warehouse and the result of running every suite on it."""
    from lib.reporting.quality_suites import run_suites

    root = tmp_path_factory.mktemp("quality")
    build_log(root / "log")
    wh = str(root / "wh")
    replay_logdir(root / "log", wh, NOW)
    return wh, run_suites(spark, wh, partition_count=N)


def broken_copy(clean, tmp_path) -> str:
    wh = str(tmp_path / "wh")
    shutil.copytree(clean[0], wh, ignore=shutil.ignore_patterns("_quality"))
    return wh


def overwrite(spark, wh: str, table: str, df) -> None:
    """A new Delta version of `table` holding `df` (the broken content)."""
    df.write.format("delta").mode("overwrite").save(os.path.join(wh, table))


def failures(result, table: str) -> dict:
    return {e.name: (e.severity, e.unexpected_count) for e in result.table(table).expectations if not e.success}


def test_all_suites_pass_on_a_replayed_log(clean):
    result = clean[1]
    assert result.success
    assert [t.table for t in result.tables] == list(EXPECTED_NAMES)
    for t in result.tables:
        assert [e.name for e in t.expectations] == EXPECTED_NAMES[t.table], t.table
        assert all(
            e.success and e.unexpected_count in ((None, 0) if e.name == "nothing_quarantined" else (0,))
            for e in t.expectations
        ), t.table
        if t.table in EXPECTED_ROWS:
            assert t.rows == EXPECTED_ROWS[t.table], t.table


def test_results_json_shape_and_data_docs(clean):
    wh, result = clean
    with open(os.path.join(wh, "_quality", "results.json"), encoding="utf-8") as f:
        doc = json.load(f)
    assert set(doc) == {"checked_at", "success", "tables"}
    assert doc["checked_at"].endswith("Z") and doc["success"] is True
    assert [t["table"] for t in doc["tables"]] == list(EXPECTED_NAMES)
    for t in doc["tables"]:
        assert set(t) == {"table", "success", "rows", "expectations"}
        assert isinstance(t["rows"], int) and t["success"] is True
        for e in t["expectations"]:
            assert set(e) == {
                "name",
                "expectation_type",
                "column",
                "severity",
                "success",
                "unexpected_count",
                "details",
            }
            assert e["severity"] in ("error", "warning") and e["expectation_type"].startswith("expect_")
    key = next(e for e in doc["tables"][1]["expectations"] if e["name"] == "key_unique")
    assert key == {
        "name": "key_unique",
        "expectation_type": "expect_compound_columns_to_be_unique",
        "column": None,
        "severity": "error",
        "success": True,
        "unexpected_count": 0,
        "details": "3 rows checked",
    }
    warn = next(e for e in doc["tables"][1]["expectations"] if e["name"] == "committed_offset_non_negative")
    assert (warn["severity"], warn["column"]) == ("warning", "committed_offset")
    index = os.path.join(wh, "_quality", "data_docs", "index.html")
    assert os.path.isfile(index) and result.docs_path == index
    with open(index, encoding="utf-8") as f:
        assert "group_offsets" in f.read()


def test_broken_group_offsets_fail_exactly_their_rules_and_the_cli_exits_1(spark, clean, tmp_path, capsys):
    from pyspark.sql import functions as F

    from jobs.quality import main

    wh = broken_copy(clean, tmp_path)
    df = spark.read.format("delta").load(os.path.join(wh, "group_offsets"))
    rows = {(r["group_id"], r["partition"]): r.asDict() for r in df.collect()}
    assert set(rows) == {("alpha", 0), ("alpha", 1), ("beta", 0)}
    dup = spark.createDataFrame([rows[("beta", 0)]], df.schema)  # key_unique: 2 rows
    wrong = F.col("group_id") == "alpha"
    broken = (
        df.unionByName(dup)
        .withColumn(
            "offsets_partition",  # alpha t-1: wrong partition
            F.when(wrong & (F.col("partition") == 1), (partition_for("alpha", N) + 1) % N).otherwise(
                F.col("offsets_partition")
            ),
        )
        .withColumn(
            "committed_offset",  # alpha t-0: negative offset
            F.when(wrong & (F.col("partition") == 0), F.lit(-1).cast("bigint")).otherwise(F.col("committed_offset")),
        )
        .withColumn(
            "partition",
            F.when(wrong & (F.col("partition") == 0), -3).otherwise(F.col("partition")),  # and a negative partition
        )
    )
    overwrite(spark, wh, "group_offsets", broken)

    code = main(["--warehouse", wh, "--partition-count", str(N), "--tables", "group_offsets"])
    out, err = capsys.readouterr()
    assert code == 1
    assert "group_offsets.key_unique" in err and "group_offsets.partition_non_negative" in err
    assert "group_offsets                  FAILED" in out
    with open(os.path.join(wh, "_quality", "results.json"), encoding="utf-8") as f:
        doc = json.load(f)
    assert doc["success"] is False and [t["table"] for t in doc["tables"]] == ["group_offsets"]
    failed = {
        e["name"]: (e["severity"], e["unexpected_count"], e["column"])
        for e in doc["tables"][0]["expectations"]
        if not e["success"]
    }
    assert failed == {
        "key_unique": ("error", 2, None),
        "offsets_partition_matches_group": ("error", 1, "offsets_partition"),
        "partition_non_negative": ("error", 1, "partition"),
        "committed_offset_non_negative": ("warning", 1, "committed_offset"),
    }
    assert doc["tables"][0]["rows"] == 4


def test_warnings_alone_do_not_fail(spark, clean, tmp_path):
    from pyspark.sql import functions as F

    from lib.reporting.quality_suites import run_suites

    wh = broken_copy(clean, tmp_path)
    df = spark.read.format("delta").load(os.path.join(wh, "expired_offsets"))
    overwrite(spark, wh, "expired_offsets", df.withColumn("committed_offset", F.lit(-1).cast("bigint")))
    result = run_suites(spark, wh, partition_count=N, tables=["expired_offsets"])
    assert failures(result, "expired_offsets") == {"committed_offset_non_negative": ("warning", 1)}
    assert result.success and result.table("expired_offsets").success


def test_unexplained_undecoded_rows_fail(spark, clean, tmp_path):
    from pyspark.sql import functions as F

    from lib.reporting.quality_suites import run_suites

    wh = broken_copy(clean, tmp_path)
    df = spark.read.format("delta").load(os.path.join(wh, "offsets_log"))
    assert sorted((r["record_type"], r["decode_status"]) for r in df.collect()) == [(1, "ok")] * 5 + [
        (2, "ok"),
        (9, "unknown_type"),
    ]
    broken = df.withColumn(
        "raw_key", F.when(F.col("record_type") == 9, F.lit(None)).otherwise(F.col("raw_key"))
    ).withColumn(
        "decode_status",  # a known type marked undecoded: unexplained
        F.when(F.col("group_id") == "beta", "unknown_type").otherwise(F.col("decode_status")),
    )
    overwrite(spark, wh, "offsets_log", broken)
    result = run_suites(spark, wh, partition_count=N, tables=["offsets_log"])
    assert failures(result, "offsets_log") == {"undecoded_rows_explained": ("error", 2)}
    assert not result.success


def test_unknown_group_state_fails(spark, clean, tmp_path):
    from pyspark.sql import functions as F

    from lib.reporting.quality_suites import run_suites

    wh = broken_copy(clean, tmp_path)
    df = spark.read.format("delta").load(os.path.join(wh, "consumer_groups"))
    assert sorted((r["group_id"], r["group_type"], r["state"]) for r in df.collect()) == [
        ("alpha", "classic", "Stable"),
        ("beta", "classic", "Empty"),
        ("txn-open", "classic", "Empty"),
    ]
    # "Assigning" exists, but not for classic groups
    overwrite(
        spark,
        wh,
        "consumer_groups",
        df.withColumn("state", F.when(F.col("group_id") == "beta", "Assigning").otherwise(F.col("state"))),
    )
    result = run_suites(spark, wh, partition_count=N, tables=["consumer_groups"])
    assert failures(result, "consumer_groups") == {"state_known": ("error", 1)}


def test_assignment_audit_rules(spark, clean, tmp_path):
    from pyspark.sql import functions as F

    from lib.reporting.quality_suites import run_suites

    wh = broken_copy(clean, tmp_path)
    df = spark.read.format("delta").load(os.path.join(wh, "assignment_audit"))
    assert [(r["group_id"], r["verdict"], r["imbalance"]) for r in df.collect()] == [("alpha", "matches", 0)]
    # a leader's assignment that differs is a warning; an imbalance that is not max - min an error
    overwrite(
        spark, wh, "assignment_audit", df.withColumn("verdict", F.lit("differs")).withColumn("imbalance", F.lit(3))
    )
    result = run_suites(spark, wh, partition_count=N, tables=["assignment_audit"])
    assert failures(result, "assignment_audit") == {
        "imbalance_consistent": ("error", 1),
        "assignment_as_its_assignor_computes": ("warning", 1),
    }
    assert not result.success


def test_a_checkpoint_moving_backwards_fails(spark, clean, tmp_path):
    from pyspark.sql import functions as F

    from lib.reporting.quality_suites import run_suites

    wh = broken_copy(clean, tmp_path)
    path = os.path.join(wh, "replay_checkpoints")
    df = spark.read.format("delta").load(path).localCheckpoint()
    # partition 0: beta, old-simple; 2: alpha (3 records), share-preview; 3: txn-open; 1: empty
    assert {r["offsets_partition"]: r["next_log_offset"] for r in df.collect()} == {0: 2, 1: 0, 2: 4, 3: 1}
    ahead = df.withColumn(
        "next_log_offset",
        F.when(F.col("offsets_partition") == 2, F.col("next_log_offset") + 5).otherwise(F.col("next_log_offset")),
    )
    overwrite(spark, wh, "replay_checkpoints", ahead)  # version 1: forward, fine
    overwrite(spark, wh, "replay_checkpoints", df)  # version 2: 9 -> 4 with the same run id
    result = run_suites(spark, wh, partition_count=N, tables=["replay_checkpoints"])
    assert failures(result, "replay_checkpoints") == {"checkpoint_not_behind_previous_version": ("error", 1)}


def test_a_full_rebuild_may_move_checkpoints_back(spark, tmp_path):
    from lib.reporting.quality_suites import run_suites
    from lib.source.logdir import find_partitions
    from lib.spark.pipeline import run_replay
    from tests.helpers import rows

    g = "reset-me"
    p = partition_for(g, N)
    long_log, short_log, wh = tmp_path / "long", tmp_path / "short", str(tmp_path / "wh")
    PartitionLogBuilder(p).commit(g, "t", 0, 1, RECENT).commit(g, "t", 0, 2, RECENT).commit(g, "t", 0, 3, RECENT).write(
        str(long_log)
    )
    PartitionLogBuilder(p).commit(g, "t", 0, 9, RECENT).write(str(short_log))
    run_replay(spark, find_partitions(str(long_log)), wh, NOW)
    run_replay(spark, find_partitions(str(short_log)), wh, NOW, full=True)
    assert [r["next_log_offset"] for r in rows(spark, wh, "replay_checkpoints")] == [1]  # was 3
    result = run_suites(spark, wh, partition_count=N, tables=["replay_checkpoints"])
    assert result.success and failures(result, "replay_checkpoints") == {}


def test_bad_input_exits_2(spark, clean, tmp_path, capsys):
    from jobs.quality import main

    assert main(["--warehouse", str(tmp_path / "nowhere")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["--warehouse", clean[0], "--tables", "no_such_table"]) == 2
    assert "no such table: no_such_table" in capsys.readouterr().err
    wh = broken_copy(clean, tmp_path)
    shutil.rmtree(os.path.join(wh, "group_fold_state"))
    assert main(["--warehouse", wh, "--partition-count", str(N), "--tables", "group_fold_state"]) == 2
    assert "has no Delta table group_fold_state" in capsys.readouterr().err


def test_replay_with_check_runs_every_suite_and_exits_1_on_an_error(spark, tmp_path, capsys):
    """jobs.replay_offsets --check: the suites of every table after the replay, exit 0 when they
    pass; with a wrong --partition-count (5 for this 4-partition log) the groups are in the
    wrong offsets partitions for it: offsets_partition_matches_group fails on exactly the rows of
    groups whose partition differs, and the run exits 1 with its tables written."""
    from jobs import replay_offsets

    build_log(tmp_path / "log")
    args = ["--input", str(tmp_path / "log"), "--now", str(NOW), "--quiet", "--check"]
    assert replay_offsets.main([*args, "--warehouse", str(tmp_path / "ok"), "--partition-count", str(N)]) == 0
    out, err = capsys.readouterr()
    assert "quality checks:" in out and "FAILED" not in out and err == ""
    for table, rows in EXPECTED_ROWS.items():
        assert any(line.split()[:2] == [table, "ok"] and line.endswith(f"({rows} rows)") for line in out.splitlines())

    wh = tmp_path / "wrong"
    assert replay_offsets.main([*args, "--warehouse", str(wh), "--partition-count", "5"]) == 1
    out, err = capsys.readouterr()
    assert "replay_offsets: the tables were written but failed error-level quality checks" in err
    # every group of this log hashes to another of 5 partitions than of 4
    assert all(partition_for(g, 5) != partition_for(g, N) for g in ("alpha", "beta", "old-simple", "txn-open"))
    with open(wh / "_quality" / "results.json", encoding="utf-8") as f:
        doc = json.load(f)
    failed = {
        (t["table"], e["name"]): e["unexpected_count"]
        for t in doc["tables"]
        for e in t["expectations"]
        if not e["success"]
    }
    rule = "offsets_partition_matches_group"
    assert doc["success"] is False
    # every row naming one of the four groups: offsets_log's 7 less the undecoded type 9 record
    # (no group id), and group_fold_state's row per group
    expected = {t: n for t, n in EXPECTED_ROWS.items() if rule in EXPECTED_NAMES[t]} | {
        "offsets_log": 6,
        "group_fold_state": 4,
    }
    assert failed == {(t, rule): n for t, n in expected.items()}
