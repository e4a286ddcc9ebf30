"""Incremental runs: N runs over a growing log equal one full run over the final log.

The log grows in phases, each followed by an incremental run: transactions whose COMMIT /
ABORT marker arrives in a later run, tombstones of offsets committed runs ago, groups that
change, empty and get deleted, KIP-848 groups, a new segment. A fresh full replay of the
final log must leave exactly the same tables."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from lib.testdata.logbuilder import PartitionLogBuilder, consumer_member
from tests.helpers import NOW, STATE_TABLES, T, phases, rows, snapshot

pytestmark = pytest.mark.spark


def test_incremental_runs_equal_one_full_run(spark, replay_logdir, tmp_path):
    builders, steps = phases()
    log_dir = tmp_path / "log"
    incremental = tmp_path / "incremental"
    for i, step in enumerate(steps):
        step()
        for b in builders:
            b.write(str(log_dir))
        result = replay_logdir(log_dir, incremental, NOW)
        assert result.incremental == (i > 0)
    full = tmp_path / "full"
    replay_logdir(log_dir, full, NOW)
    got, expected = snapshot(spark, incremental), snapshot(spark, full)
    for table in STATE_TABLES:
        assert got[table] == expected[table], f"table {table} differs"
    # the scenario did what it says (hand-worked values)
    offsets = {(r["group_id"], r["topic"], r["partition"]): r["committed_offset"] for r in got["group_offsets"]}
    assert offsets == {("g", "t", 0): 20, ("g", "t", 1): 11, ("g", "t", 2): 55}
    assert [(r["producer_id"], r["committed_offset"]) for r in got["pending_transactional_offsets"]] == [(9, 70)]
    assert {r["group_id"] for r in got["consumer_groups"]} == {"g"}
    assert {r["group_id"] for r in got["expired_groups"]} == {"old", "s"}
    cps = {r["offsets_partition"]: r["next_log_offset"] for r in rows(spark, str(incremental), "replay_checkpoints")}
    assert cps == {0: builders[0].next_offset, 1: builders[1].next_offset}
    # the assignment audit, decided in each run's pass, is among the tables equal to the full run's
    assert got["assignment_audit"] != []


def test_a_commit_marker_alone_completes_a_transaction_of_many_offsets(spark, replay_logdir, tmp_path):
    # the marker's batch is one row; the transaction it commits wrote five offsets runs earlier
    b = PartitionLogBuilder(0).commit("g", "t", 0, 1, T)
    for p in range(5):
        b.commit("g", "t", p, 10 + p, T, producer_id=7)
    b.write(str(tmp_path / "log"))
    replay_logdir(tmp_path / "log", tmp_path / "wh", NOW)
    b.marker(7, True, T)
    b.write(str(tmp_path / "log"))
    assert replay_logdir(tmp_path / "log", tmp_path / "wh", NOW).incremental
    got = rows(spark, str(tmp_path / "wh"), "group_offsets")
    assert sorted((r["partition"], r["committed_offset"], r["log_offset"]) for r in got) == [
        (p, 10 + p, 1 + p) for p in range(5)
    ]
    assert rows(spark, str(tmp_path / "wh"), "pending_transactional_offsets") == []


def test_a_log_behind_its_checkpoint_needs_full(spark, replay_logdir, tmp_path):
    from lib.spark.pipeline import ReplayError

    b = PartitionLogBuilder(0).commit("g", "t", 0, 1, T).commit("g", "t", 0, 2, T)
    b.write(str(tmp_path / "log"))
    replay_logdir(tmp_path / "log", tmp_path / "wh", NOW)
    (tmp_path / "log" / "__consumer_offsets-0" / "00000000000000000000.log").write_bytes(b"")
    with pytest.raises(ReplayError, match="partition 0 of the input ends at offset 0, before the checkpoint 2"):
        replay_logdir(tmp_path / "log", tmp_path / "wh", NOW)


def test_a_run_with_nothing_new_changes_no_row(spark, replay_logdir, tmp_path):
    """A new record rewrites only its partition's files, in one commit per table that changed;
    a run with nothing new makes no commit at all."""
    from lib.lake.delta import commit_history

    b = (
        PartitionLogBuilder(0)
        .commit("g", "t", 0, 1, T)
        .group("h", T, members=[consumer_member("m", ["t"], {"t": [0]})])
    )
    b.write(str(tmp_path / "log"))
    replay_logdir(tmp_path / "log", tmp_path / "wh", NOW)
    b.commit("g", "t", 1, 2, T)
    b.write(str(tmp_path / "log"))
    tables = (
        "offsets_log",
        "group_offsets",
        "consumer_groups",
        "group_fold_state",
        "replay_checkpoints",
        "expired_offsets",
        "pending_transactional_offsets",
        "expired_groups",
    )

    def versions():
        return {t: commit_history(str(tmp_path / "wh" / t), 1)[0][0] for t in tables if (tmp_path / "wh" / t).exists()}

    before = versions()
    result = replay_logdir(tmp_path / "log", tmp_path / "wh", NOW)  # one new offset
    after = versions()
    assert result.records == 1
    assert {t for t in after if after[t] != before.get(t)} == {
        "offsets_log",
        "group_offsets",
        "consumer_groups",
        "group_fold_state",
        "replay_checkpoints",
    }
    assert {(r["partition"], r["committed_offset"]) for r in rows(spark, str(tmp_path / "wh"), "group_offsets")} == {
        (0, 1),
        (1, 2),
    }
    result = replay_logdir(tmp_path / "log", tmp_path / "wh", NOW)  # nothing new
    assert (result.records, result.skipped_partitions) == (0, 1)
    assert versions() == after


def test_a_segment_rewritten_by_the_cleaner_is_read_from_its_start(spark, replay_logdir, tmp_path):
    """An incremental run starts at the byte position where the last one stopped; when the log
    cleaner has rewritten that segment meanwhile, the position means nothing and the segment is
    read from its start (stepping over what the checkpoint already covers)."""
    b = PartitionLogBuilder(0)
    for v in range(1, 7):
        b.commit("g", "t", 0, v, T)  # offsets 0..5, one batch each
    b.write(str(tmp_path / "log"))
    replay_logdir(tmp_path / "log", tmp_path / "wh", NOW)
    old_size = (tmp_path / "log" / "__consumer_offsets-0" / "00000000000000000000.log").stat().st_size
    cleaned = PartitionLogBuilder(0)
    cleaned.next_offset = 5  # the cleaner kept offset 5 only, same file
    cleaned.commit("g", "t", 0, 6, T)
    for v in range(7, 17):
        cleaned.commit("g", "t", 1, v, T)  # offsets 6..15, appended since
    cleaned.write(str(tmp_path / "log"))
    assert (tmp_path / "log" / "__consumer_offsets-0" / "00000000000000000000.log").stat().st_size > old_size
    result = replay_logdir(tmp_path / "log", tmp_path / "wh", NOW)
    assert result.records == 10
    assert {
        (r["partition"], r["committed_offset"], r["log_offset"])
        for r in rows(spark, str(tmp_path / "wh"), "group_offsets")
    } == {(0, 6, 5), (1, 16, 15)}


def test_an_incremental_run_starts_where_the_last_one_stopped(spark, replay_logdir, tmp_path):
    """Bytes already replayed are not read again (the damage below would stop any reader)."""
    import struct

    b = PartitionLogBuilder(0).commit("g", "t", 0, 1, T).commit("g", "t", 0, 2, T)
    b.write(str(tmp_path / "log"))
    replay_logdir(tmp_path / "log", tmp_path / "wh", NOW)
    b.commit("g", "t", 0, 3, T)
    segment = b.write(str(tmp_path / "log")) + "/00000000000000000000.log"
    data = bytearray(open(segment, "rb").read())
    data[8:12] = struct.pack(">i", 5)  # the first batch's length, now impossible
    open(segment, "wb").write(bytes(data))
    result = replay_logdir(tmp_path / "log", tmp_path / "wh", NOW)
    assert result.records == 1
    assert [r["committed_offset"] for r in rows(spark, str(tmp_path / "wh"), "group_offsets")] == [3]


# --- the state tables' layout: one file per Spark task, a row group per partition -------------


def _four_partitions(log_dir) -> list[PartitionLogBuilder]:
    """Four partitions, each with one classic group and two offsets of its own."""
    builders = []
    for p in range(4):
        b = PartitionLogBuilder(p)
        b.group(f"g{p}", T, members=[consumer_member("m", ["t"], {"t": [p]})])
        b.commit(f"g{p}", "t", p, 100 + p, T).commit(f"g{p}", "u", 0, 200 + p, T)
        b.write(str(log_dir))
        builders.append(b)
    return builders


def _expected_offsets(changed: dict) -> set:
    """(group, topic, partition, committed offset) of _four_partitions, with `changed` applied."""
    base = {(f"g{p}", "t", p): 100 + p for p in range(4)} | {(f"g{p}", "u", 0): 200 + p for p in range(4)}
    return {(*k, v) for k, v in (base | changed).items()}


def _offsets(spark, warehouse) -> set:
    return {
        (r["group_id"], r["topic"], r["partition"], r["committed_offset"])
        for r in rows(spark, str(warehouse), "group_offsets")
    }


def _files(warehouse, table: str) -> list:
    from lib.lake.delta import table_files

    listing = table_files(str(warehouse / table))
    assert listing is not None
    return listing[1]


def test_state_files_hold_a_task_and_keep_partitions_a_run_does_not_replay(spark, replay_logdir, tmp_path):
    """A state table gets one file per Spark task. When a run replays one partition of such a
    file, the file is replaced and the rows of its other partitions are written again as they
    were: nothing lost, nothing doubled, and their checkpoints untouched."""
    log_dir, wh = tmp_path / "log", tmp_path / "wh"
    builders = _four_partitions(log_dir)
    first = replay_logdir(log_dir, wh, NOW)
    files = _files(wh, "group_offsets")
    # fewer files than partitions: tasks of several partitions each (local[2]: two tasks)
    assert len(files) == spark.sparkContext.defaultParallelism == 2
    assert sorted((f.lo, f.hi) for f in files) in ([(0, 1), (2, 3)], [(0, 2), (1, 3)], [(0, 3), (1, 2)])
    assert all(f.partition_value is None for f in files)
    builders[1].commit("g1", "t", 1, 555, T + 1)
    builders[1].write(str(log_dir))
    second = replay_logdir(log_dir, wh, NOW)
    assert (second.records, second.skipped_partitions) == (1, 3)
    assert _offsets(spark, wh) == _expected_offsets({("g1", "t", 1): 555})
    assert {r["group_id"] for r in rows(spark, str(wh), "consumer_groups")} == {"g0", "g1", "g2", "g3"}
    assert len(rows(spark, str(wh), "group_fold_state")) == 4
    runs = {r["offsets_partition"]: r["run_id"] for r in rows(spark, str(wh), "replay_checkpoints")}
    assert runs == {0: first.run_id, 1: second.run_id, 2: first.run_id, 3: first.run_id}
    # the replaced file's rows went into one new file; the other old file stays
    assert len(_files(wh, "group_offsets")) == 2
    assert len([f for f in _files(wh, "group_offsets") if f.path in {g.path for g in files}]) == 1


def test_a_warehouse_with_partitioned_tables_keeps_its_layout(spark, replay_logdir, tmp_path):
    """Tables partitioned by offsets_partition (as earlier versions made them) are read and
    written in that layout: one file per partition, in its folder."""
    from deltalake import DeltaTable

    log_dir, wh = tmp_path / "log", tmp_path / "wh"
    builders = _four_partitions(log_dir)
    replay_logdir(log_dir, wh, NOW)
    for table in STATE_TABLES:
        path = str(wh / table)
        df = spark.read.format("delta").load(path).coalesce(1)  # (a file per partition, whatever the files read)
        (
            df.write.format("delta")
            .mode("overwrite")
            .option("overwriteSchema", "true")
            .partitionBy("offsets_partition")
            .save(path)
        )
    builders[2].commit("g2", "u", 0, 777, T + 1)
    builders[2].write(str(log_dir))
    replay_logdir(log_dir, wh, NOW)
    assert _offsets(spark, wh) == _expected_offsets({("g2", "u", 0): 777})
    assert len(rows(spark, str(wh), "group_fold_state")) == 4
    assert _log_rows(spark, wh) == {p: b.next_offset for p, b in enumerate(builders)}
    for table in ("group_offsets", "offsets_log"):
        files = _files(wh, table)
        assert all(f.path.startswith(f"offsets_partition={f.partition_value}/") for f in files), table
        assert DeltaTable(str(wh / table)).metadata().partition_columns == ["offsets_partition"]
    assert sorted(f.partition_value for f in _files(wh, "group_offsets")) == [0, 1, 2, 3]
    assert sorted(f.partition_value for f in _files(wh, "offsets_log")) == [0, 1, 2, 2, 3]


def _log_rows(spark, warehouse) -> dict:
    """offsets_log rows per offsets partition."""
    out: dict = {}
    for r in rows(spark, str(warehouse), "offsets_log"):
        out[r["offsets_partition"]] = out.get(r["offsets_partition"], 0) + 1
    return out


def test_a_full_run_of_some_partitions_keeps_the_others_log_rows(spark, replay_logdir, tmp_path):
    """A run writes the rows of its small partitions into one offsets_log file per task; a
    later full run of one of them replaces the files holding it and writes the other
    partitions' rows in them again: every partition keeps exactly the rows of its log."""
    from lib.source.logdir import find_partitions
    from lib.spark.pipeline import run_replay

    log_dir, wh = tmp_path / "log", tmp_path / "wh"
    builders = _four_partitions(log_dir)
    replay_logdir(log_dir, wh, NOW)
    for p in range(4):
        builders[p].commit(f"g{p}", "t", p, 300 + p, T + 1)
        builders[p].write(str(log_dir))
    replay_logdir(log_dir, wh, NOW)
    # small partitions: each run wrote its tasks' offsets_log files, of two partitions each: the
    # first run a file of the GroupMetadata records (2 a task) and one of the commits (4), without
    # the nested column; the second run its commits (2 a task)
    files = _files(wh, "offsets_log")
    assert sorted(len(f.with_partitions().partitions or ()) for f in files) == [2] * 6
    layout = sorted(
        ("group_metadata" in pq.read_schema(f.absolute).names, pq.read_metadata(f.absolute).num_rows) for f in files
    )
    assert layout == [(False, 2), (False, 2), (False, 4), (False, 4), (True, 2), (True, 2)]
    members = {
        (r["offsets_partition"], r["group_id"], r["group_metadata"]["members"][0]["member_id"])
        for r in rows(spark, str(wh), "offsets_log")
        if r["group_metadata"] is not None
    }
    assert members == {(p, f"g{p}", "m") for p in range(4)}
    builders[1].commit("g1", "u", 0, 555, T + 2)
    builders[1].write(str(log_dir))
    run_replay(spark, find_partitions(str(log_dir), [1]), str(wh), NOW, full=True)
    assert _log_rows(spark, wh) == {p: b.next_offset for p, b in enumerate(builders)}
    assert _offsets(spark, wh) == _expected_offsets(
        {("g0", "t", 0): 300, ("g1", "t", 1): 301, ("g1", "u", 0): 555, ("g2", "t", 2): 302, ("g3", "t", 3): 303}
    )
    logged = {(r["offsets_partition"], r["log_offset"]) for r in rows(spark, str(wh), "offsets_log")}
    assert logged == {(p, o) for p, b in enumerate(builders) for o in range(b.next_offset)}


def test_an_optimized_state_table_is_read_and_carried(spark, replay_logdir, tmp_path):
    """After OPTIMIZE a state table is one file whose row groups mix partitions: a run reads
    its partition's rows out of it and carries the others."""
    from delta.tables import DeltaTable

    log_dir, wh = tmp_path / "log", tmp_path / "wh"
    builders = _four_partitions(log_dir)
    replay_logdir(log_dir, wh, NOW)
    for table in ("group_offsets", "consumer_groups", "group_fold_state"):
        DeltaTable.forPath(spark, str(wh / table)).optimize().executeCompaction()
        assert len(_files(wh, table)) == 1
    builders[3].commit("g3", "t", 3, 999, T + 1)
    builders[3].write(str(log_dir))
    replay_logdir(log_dir, wh, NOW)
    assert _offsets(spark, wh) == _expected_offsets({("g3", "t", 3): 999})
    assert {r["group_id"] for r in rows(spark, str(wh), "consumer_groups")} == {"g0", "g1", "g2", "g3"}
    assert len(rows(spark, str(wh), "group_fold_state")) == 4


def test_a_run_that_skips_the_assignment_audit_leaves_its_generations_unaudited(spark, tmp_path):
    """The audit is decided in the replay's pass: generations replayed without it are never
    audited by a later incremental run (a --full run audits the whole log)."""
    from lib.lake.delta import table_exists
    from lib.source.logdir import find_partitions
    from lib.spark.pipeline import run_replay

    log, wh = str(tmp_path / "log"), str(tmp_path / "wh")
    b = PartitionLogBuilder(0).group("g", T, members=[consumer_member("m1", ["t"], {"t": [0]})])
    b.write(log)
    first = run_replay(spark, find_partitions(log), wh, NOW, assignments=False)
    assert first.audit_rows is None and not table_exists(f"{wh}/assignment_audit")
    b.group("g", T + 1, generation=2, members=[consumer_member("m1", ["t"], {"t": [0]})]).write(log)
    second = run_replay(spark, find_partitions(log), wh, NOW)
    assert second.audit_rows == 1
    assert [(r["generation"], r["verdict"]) for r in rows(spark, wh, "assignment_audit")] == [(2, "matches")]
    run_replay(spark, find_partitions(log), wh, NOW, full=True)
    assert sorted((r["generation"], r["verdict"]) for r in rows(spark, wh, "assignment_audit")) == [
        (1, "matches"),
        (2, "matches"),
    ]


def test_tasks_are_packed_by_their_bytes_and_a_cost_per_partition():
    """Largest first into the lightest task, each partition weighing its bytes and
    PARTITION_COST_BYTES (2 MiB): by bytes alone, the 3 MiB partition's task would get none of
    the twelve 256 KiB ones (12 x 256 KiB = 3 MiB), and its worker would wait for the other's."""
    from lib.spark.pipeline import _pack

    mib = 1 << 20
    tasks = [(3 * mib, "big")] + [(mib // 4, f"s{i}") for i in range(12)]
    # costs 5 MiB and 2.25 MiB each: three small ones pass the big one, then they alternate
    # (16.25 MiB against 15.75)
    assert _pack(tasks, 2) == [
        ["big", "s3", "s5", "s7", "s9", "s11"],
        ["s0", "s1", "s2", "s4", "s6", "s8", "s10"],
    ]
    # a full run's: a task per TASK_BYTES (256 MiB; seven for 8 x 200 MiB), at least two per core
    assert [len(t) for t in _pack([(200 * mib, f"p{i}") for i in range(8)], 2)] == [2, 1, 1, 1, 1, 1, 1]
    assert [len(t) for t in _pack([(10 * mib, f"p{i}") for i in range(30)], 2)] == [8, 8, 7, 7]


class _Task:
    """A replay task as _pack reads it: its partition."""

    def __init__(self, partition: int):
        self.partition = partition

    def __repr__(self) -> str:
        return f"p{self.partition}"


def _data_file(name: str, partitions=None, lo=None, hi=None, partition_value=None):
    from lib.lake.delta import DataFile

    return DataFile(
        name, "/t/" + name, 1, partition_value, lo, hi, None if partitions is None else frozenset(partitions)
    )


def test_partitions_sharing_a_state_file_are_joined():
    """An incremental run's replayed partitions are joined where one flat state file of the
    previous run holds rows of several (through any table's files, transitively); a file of a
    partition folder joins nothing, one whose partitions are unknown (no list, no min/max)
    joins every partition."""
    from lib.spark.pipeline import _sharing_a_file

    removed = {
        "group_offsets": [_data_file("a", {0, 2, 5}), _data_file("b", {1, 3}), _data_file("c", lo=8, hi=9)],
        "consumer_groups": [_data_file("d", {2, 7}), _data_file("e", partition_value=4)],
    }
    assert _sharing_a_file([0, 1, 2, 3, 4, 7, 8, 9, 11], removed) == [[0, 2, 7], [1, 3], [4], [8, 9], [11]]
    unknown = {"group_fold_state": [_data_file("f")]}
    assert _sharing_a_file([0, 1, 2], unknown) == [[0, 1, 2]]


def test_tasks_keep_a_state_file_s_partitions_together_when_that_stays_balanced():
    """With `units`, partitions that share a state file go to one task, if that leaves no task
    empty and the heaviest task at most ALIGNED_SLACK (1.15) times the heaviest without them."""
    from lib.spark.pipeline import _pack

    mib = 1 << 20
    tasks = [(mib, _Task(p)) for p in range(8)]  # 3 MiB each with its cost

    def parts(packed):
        return [[t.partition for t in members] for members in packed]

    # by weight alone: the partitions alternate (largest first, equal: in their order)
    assert parts(_pack(tasks, 2)) == [[0, 2, 4, 6], [1, 3, 5, 7]]
    # two files of four partitions each: a task each (12 MiB against 12)
    assert parts(_pack(tasks, 2, [[0, 1, 5, 6], [2, 3, 4, 7]])) == [[0, 1, 5, 6], [2, 3, 4, 7]]
    # 5 + 3 partitions: 15 MiB against the 12 of the plain packing, 1.25 times: not taken
    assert parts(_pack(tasks, 2, [[0, 1, 2, 3, 4], [5, 6, 7]])) == [[0, 2, 4, 6], [1, 3, 5, 7]]
    # one file holding every partition: one task would hold them all: not taken
    assert parts(_pack(tasks, 2, [list(range(8))])) == [[0, 2, 4, 6], [1, 3, 5, 7]]
    # three units into two tasks: 4 + 2 | 2 -> 12 MiB against 12; each task's in partition order
    assert parts(_pack(tasks, 2, [[0, 7], [1, 2, 3, 4], [5, 6]])) == [[1, 2, 3, 4], [0, 5, 6, 7]]


# --- a run with nothing to do starts no JVM ---------------------------------------------------------


def test_a_spark_context_starts_when_first_asked_for_and_once():
    """SparkJobs (build_context's `lazy`): its starter runs at the first ask, once, however
    many threads ask at that moment."""
    import threading
    import time

    from lib.spark.session import SparkJobs

    calls = []

    def starter():
        calls.append(threading.get_ident())
        time.sleep(0.2)  # (the others ask while it starts)
        return "context"

    jobs = SparkJobs(starter)
    assert not jobs.started and calls == []
    got = []
    threads = [threading.Thread(target=lambda: got.append(jobs.sparkContext)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == ["context"] * 4 and len(calls) == 1 and jobs.started


def test_a_spark_context_never_started_is_not_stopped():
    from lib.spark.session import SparkJobs

    def starter():
        raise AssertionError("started")

    SparkJobs(starter).stop()


def test_a_run_with_nothing_new_starts_no_jvm(tmp_path):
    """The default command, summary and all, on (a copy of) the bundled ten-day sample after a
    full run of it: with SPARK_HOME naming no Spark (a JVM cannot start) the no-op succeeds and
    says what it skipped. Work the peek before the JVM does not see (a consumed partition grown,
    the same --now) starts the context when the lag stage asks for it: with that SPARK_HOME
    the run fails with --executor spark; the default (auto: the local pool, no JVM, on this
    local master) scans that partition. At a later --now (the lag stage's now rows) the JVM of
    --executor spark starts at once, as for a replay; the default needs none."""
    import os
    import shutil
    import subprocess
    import sys

    from lib.codec.segments import SegmentReader, read_segment_bytes
    from lib.codec.writer import encode_batch
    from lib.lake.delta import open_delta, table_path
    from tests.helpers import REPO, replay_job

    sample = os.path.join(REPO, "samples", "days")
    log_dir = str(tmp_path / "logdir")
    shutil.copytree(os.path.join(sample, "logdir"), log_dir)
    with open(os.path.join(sample, "NOW")) as f:
        now = int(f.read())
    wh = str(tmp_path / "wh")
    out, err = replay_job(log_dir, wh, now=now).communicate()
    assert "replayed (full)" in out, err
    no_spark = {"SPARK_HOME": str(tmp_path / "no-spark")}
    env = dict(os.environ, PYTHONPATH=REPO, PYSPARK_PYTHON=sys.executable)
    cmd = [sys.executable, "-m", "jobs.replay_offsets", "--input", log_dir, "--warehouse", wh, "--now", str(now)]
    noop = subprocess.run(cmd, cwd=REPO, env=dict(env, **no_spark), capture_output=True, text=True)
    assert noop.returncode == 0, noop.stderr
    assert noop.stdout.startswith("replayed (incremental, 50 partitions unchanged) 0 records from 50 partitions")
    assert "lag: not computed (nothing new since the last run at the same --now)" in noop.stdout

    # a consumed partition grows by one batch; the offsets partitions do not
    segment = os.path.join(log_dir, "audit-log-0", "00000000000000000412.log")
    last = list(SegmentReader(read_segment_bytes(segment), verify_crc=False))[-1]
    with open(segment, "ab") as f:
        f.write(encode_batch(last.next_offset, [(last.next_offset, last.max_timestamp + 1000, None, b"x")]))
    spark = ("--executor", "spark")
    failed = replay_job(log_dir, wh, env=no_spark, now=now, args=spark)
    _, err = failed.communicate()
    assert failed.returncode != 0 and "no-spark/./bin/spark-submit" in err
    scanned = subprocess.run(cmd, cwd=REPO, env=dict(env, **no_spark), capture_output=True, text=True)
    assert scanned.returncode == 0, scanned.stderr
    assert "lag: 1 consumed partitions read (1 batch headers)" in scanned.stdout
    assert "tasks on a local pool of " in scanned.stdout

    later = now + 60_000
    failed = replay_job(log_dir, wh, env=no_spark, now=later, args=spark)
    _, err = failed.communicate()
    assert failed.returncode != 0 and "no-spark/./bin/spark-submit" in err
    out, err = replay_job(log_dir, wh, env=no_spark, now=later).communicate()
    assert "replayed (incremental, 50 partitions unchanged) 0 records" in out, err
    lag = open_delta(table_path(wh, "group_lag")).to_pyarrow_table(columns=["kind", "at"]).to_pylist()
    now_rows = [int(r["at"].timestamp() * 1000) for r in lag if r["kind"] == "now"]
    assert now_rows.count(later) == now_rows.count(now) > 0  # each partition's row again, a minute later
