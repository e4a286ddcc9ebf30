"""Huge and odd inputs, end to end through the replay, with exact expected results.

One log, one partition per oddity, replayed once:
  0  a GroupMetadata value with 10 000 members (about 1.4 MB, one record)
  1  an offset commit whose metadata is 9 MiB (v4: compact string), larger than the 8 MiB a
     live Fetch asks for (lib/source/live.py); segment files are memory-mapped whole, no read buffer
  2  only tombstones: offsets (type 1, type 0, transactional), a classic group, a KIP-848 group
  3  an empty (0-byte) segment between two non-empty ones
  4  a partition whose only segment is empty (base offset 0)
  5  a partition whose only segment is empty and starts at 42 (everything before was deleted)
  6  segment 00000000000000000000.log whose first batch has base offset 57 (as after compaction)
  7  the empty group id "", markers of producers with nothing pending, and an empty batch
     (a cleaner leftover) as the last thing in the log
Expected values are written out by hand from the log built here.
"""

from __future__ import annotations

import os

import pytest

from lib.testdata.logbuilder import T0, PartitionLogBuilder, consumer_member
from tests.helpers import STATE_TABLES, rows

pytestmark = pytest.mark.spark

DAY = 86_400_000
NOW = T0 + DAY
MEMBERS = 10_000
BIG_METADATA = ("0123456789abcdef" * (9 * 2**20 // 16 + 1))[: 9 * 2**20 - 4] + "-end"  # 9 MiB exactly
EMPTY_PARTITIONS = (4, 5)


def big_member(i: int) -> dict:
    return consumer_member(
        f"member-{i:05d}",
        ["t"],
        {"t": [i]},
        client_id=f"client-{i % 7}",
        client_host=f"/10.0.{i // 256}.{i % 256}",
        instance_id=f"static-{i}" if i % 2 == 0 else None,
        session_timeout=45_000 + i,
        rebalance_timeout=300_000,
    )


def build(log_dir: str) -> None:
    # 0: one huge group, then a commit of it
    b = PartitionLogBuilder(0)
    b.commit("big", "t", 0, 5, T0)  # offset 0
    b.group("big", T0, generation=42, protocol="range", members=[big_member(i) for i in range(MEMBERS)])  # 1
    b.commit("big", "t", 9999, 7, T0)  # offset 2
    b.write(log_dir)

    # 1: a 9 MiB record
    PartitionLogBuilder(1).commit("small", "t", 0, 1, T0).commit(
        "huge-meta", "t", 3, 33, T0 + 1, version=4, metadata=BIG_METADATA
    ).commit("small", "t", 1, 2, T0).write(log_dir)

    # 2: tombstones only
    b = PartitionLogBuilder(2)
    b.offset_tombstone("g2", "t", 0, T0)  # 0
    b.offset_tombstone("g2", "t", 1, T0, record_type=0)  # 1
    b.offset_tombstone("g2", "t", 2, T0, producer_id=500)  # 2: a tombstone is never pending
    b.group_tombstone("g2", T0)  # 3
    b.record(3, {"group_id": "k2"}, None, T0)  # 4: KIP-848 group that never existed
    b.group_tombstone("never", T0)  # 5
    b.write(log_dir)

    # 3: segments at 0 (offsets 0-1), 2 (0 bytes: offsets 2-4 compacted away), 5 (offsets 5-6)
    b = PartitionLogBuilder(3)
    b.commit("g3", "t", 0, 1, T0).commit("g3", "t", 0, 2, T0)
    b.roll()
    b.next_offset = 5
    b.roll()
    b.commit("g3", "t", 1, 3, T0).commit("g3", "t", 0, 4, T0)
    assert [base for base, _ in b.segments] == [0, 2, 5] and len(b.segments[1][1]) == 0
    b.write(log_dir)

    # 4 and 5: nothing but an empty segment
    for p, base in ((4, 0), (5, 42)):
        folder = os.path.join(log_dir, f"__consumer_offsets-{p}")
        os.makedirs(folder)
        open(os.path.join(folder, f"{base:020d}.log"), "wb").close()

    # 6: file 0 holding batches from offset 57 on
    b = PartitionLogBuilder(6, start_offset=57)
    b.commit("g6", "t", 0, 10, T0).commit("g6", "t", 0, 11, T0).group("g6", T0, generation=3, members=[])
    b.segments[0] = (0, b.segments[0][1])
    b.write(log_dir)

    # 7: group id "", markers with nothing pending, an empty batch at the very end
    b = PartitionLogBuilder(7)
    b.commit("", "t", 0, 100, T0)  # 0
    b.commit("x7", "t", 0, 200, T0)  # 1
    b.marker(77, True, T0)  # 2
    b.marker(78, False, T0)  # 3
    b.batch([], gaps=[2])  # offsets 4-6, no record
    assert b.next_offset == 7
    b.write(log_dir)


@pytest.fixture(scope="module")
def wh(spark, replay_logdir, tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("odd-log")
    build(str(log_dir))
    warehouse = tmp_path_factory.mktemp("odd-wh")
    result = replay_logdir(log_dir, warehouse, NOW)
    assert sorted(result.partitions) == list(range(8))
    return str(warehouse)


def table(spark, wh, name):
    from lib.lake.delta import table_path

    return spark.read.format("delta").load(table_path(wh, name))


def on(spark, wh, name, partition, *cols):
    df = table(spark, wh, name).filter(f"offsets_partition = {partition}")
    if cols:
        df = df.select(*cols)
    return [r.asDict(recursive=True) for r in df.collect()]


def offsets(spark, wh, partition, name="group_offsets"):
    return sorted(
        (r["group_id"], r["topic"], r["partition"], r["committed_offset"], r["log_offset"])
        for r in on(spark, wh, name, partition, "group_id", "topic", "partition", "committed_offset", "log_offset")
    )


@pytest.fixture(scope="module")
def checkpoints(spark, wh):
    return {
        r["offsets_partition"]: (r["next_log_offset"], r["records_read"], r["trailing_bytes"])
        for r in rows(spark, wh, "replay_checkpoints")
    }


def test_checkpoints_of_every_odd_partition(checkpoints):
    assert checkpoints == {
        0: (3, 3, 0),
        1: (3, 3, 0),
        2: (6, 6, 0),
        3: (7, 4, 0),
        4: (0, 0, 0),
        5: (42, 0, 0),
        6: (60, 3, 0),
        7: (7, 4, 0),
    }


def test_group_with_ten_thousand_members(spark, wh):
    (g,) = on(spark, wh, "consumer_groups", 0)
    assert (
        g["group_id"],
        g["group_type"],
        g["protocol_type"],
        g["generation"],
        g["protocol"],
        g["leader"],
        g["state"],
        g["subscribed_topics"],
        g["log_offset"],
    ) == ("big", "classic", "consumer", 42, "range", "member-00000", "Stable", ["t"], 1)
    members = g["members"]
    assert len(members) == MEMBERS
    assert len({m["member_id"] for m in members}) == MEMBERS
    picks = {i: members[i] for i in (0, 1, 4097, MEMBERS - 1)}
    assert picks[0] == {
        "member_id": "member-00000",
        "group_instance_id": "static-0",
        "client_id": "client-0",
        "client_host": "/10.0.0.0",
        "rebalance_timeout_ms": 300_000,
        "session_timeout_ms": 45_000,
        "subscribed_topics": ["t"],
        "assignment": [{"topic": "t", "partitions": [0]}],
    }
    assert picks[1]["group_instance_id"] is None and picks[1]["client_id"] == "client-1"
    assert (
        picks[4097]["member_id"],
        picks[4097]["client_host"],
        picks[4097]["session_timeout_ms"],
        picks[4097]["group_instance_id"],
        picks[4097]["client_id"],
    ) == ("member-04097", "/10.0.16.1", 49_097, None, "client-2")
    assert picks[MEMBERS - 1] == {
        "member_id": "member-09999",
        "group_instance_id": None,
        "client_id": "client-3",
        "client_host": "/10.0.39.15",
        "rebalance_timeout_ms": 300_000,
        "session_timeout_ms": 54_999,
        "subscribed_topics": ["t"],
        "assignment": [{"topic": "t", "partitions": [9999]}],
    }
    # the group is Stable and subscribes to t: both offsets stay
    assert offsets(spark, wh, 0) == [("big", "t", 0, 5, 0), ("big", "t", 9999, 7, 2)]
    assert offsets(spark, wh, 0, "expired_offsets") == []


def test_group_with_ten_thousand_members_in_offsets_log(spark, wh):
    from pyspark.sql import functions as F

    (r,) = [
        x.asDict()
        for x in table(spark, wh, "offsets_log")
        .filter("offsets_partition = 0 AND log_offset = 1")
        .select(
            "record_type",
            "value_version",
            F.size("group_metadata.members").alias("n"),
            F.col("group_metadata.members")[MEMBERS - 1]["assignment"].alias("last"),
            F.col("group_metadata.members")[MEMBERS - 1]["subscription_version"].alias("sv"),
            F.length("raw_value").alias("raw_len"),
        )
        .collect()
    ]
    assert (r["record_type"], r["value_version"], r["n"], r["sv"]) == (2, 3, MEMBERS, 3)
    assert [x.asDict(recursive=True) for x in r["last"]] == [{"topic": "t", "partitions": [9999]}]
    assert r["raw_len"] > 1_000_000


def test_record_of_nine_mib(spark, wh):
    from pyspark.sql import functions as F

    got = (
        table(spark, wh, "group_offsets")
        .filter("offsets_partition = 1 AND group_id = 'huge-meta'")
        .select(
            "committed_offset",
            "log_offset",
            F.length("metadata").alias("n"),
            F.substring("metadata", -8, 8).alias("tail"),
            F.md5(F.col("metadata").cast("binary")).alias("md5"),
        )
        .collect()
    )
    import hashlib

    assert [r.asDict() for r in got] == [
        {
            "committed_offset": 33,
            "log_offset": 1,
            "n": 9 * 2**20,
            "tail": "89ab-end",
            "md5": hashlib.md5(BIG_METADATA.encode()).hexdigest(),
        }
    ]
    # the records around it are read normally
    assert offsets(spark, wh, 1) == [("huge-meta", "t", 3, 33, 1), ("small", "t", 0, 1, 0), ("small", "t", 1, 2, 2)]
    raw = on(spark, wh, "offsets_log", 1, "log_offset", F.length("raw_value").alias("n"))
    assert sorted((r["log_offset"], r["n"] > 9 * 2**20) for r in raw) == [(0, False), (1, True), (2, False)]


def test_partition_of_tombstones_only(spark, wh):
    log = sorted(
        on(
            spark,
            wh,
            "offsets_log",
            2,
            "log_offset",
            "is_tombstone",
            "record_type",
            "group_id",
            "topic",
            "partition",
            "producer_id",
        ),
        key=lambda r: r["log_offset"],
    )
    assert [
        (
            r["log_offset"],
            r["is_tombstone"],
            r["record_type"],
            r["group_id"],
            r["topic"],
            r["partition"],
            r["producer_id"],
        )
        for r in log
    ] == [
        (0, True, 1, "g2", "t", 0, -1),
        (1, True, 0, "g2", "t", 1, -1),
        (2, True, 1, "g2", "t", 2, 500),
        (3, True, 2, "g2", None, None, -1),
        (4, True, 3, "k2", None, None, -1),
        (5, True, 2, "never", None, None, -1),
    ]
    for name in (
        "group_offsets",
        "expired_offsets",
        "pending_transactional_offsets",
        "consumer_groups",
        "expired_groups",
        "group_fold_state",
    ):
        assert on(spark, wh, name, 2) == [], name


def test_empty_segment_between_two_others(spark, wh):
    log = sorted(
        (r["log_offset"], r["segment_file"]) for r in on(spark, wh, "offsets_log", 3, "log_offset", "segment_file")
    )
    assert log == [
        (0, "00000000000000000000.log"),
        (1, "00000000000000000000.log"),
        (5, "00000000000000000005.log"),
        (6, "00000000000000000005.log"),
    ]
    assert offsets(spark, wh, 3) == [("g3", "t", 0, 4, 6), ("g3", "t", 1, 3, 5)]


@pytest.mark.parametrize("partition", EMPTY_PARTITIONS)
def test_partition_whose_only_segment_is_empty(spark, wh, partition):
    for name in STATE_TABLES:
        assert on(spark, wh, name, partition) == [], name


def test_first_batch_above_the_segment_base_offset(spark, wh):
    log = sorted(
        (r["log_offset"], r["batch_base_offset"], r["segment_file"])
        for r in on(spark, wh, "offsets_log", 6, "log_offset", "batch_base_offset", "segment_file")
    )
    assert log == [
        (57, 57, "00000000000000000000.log"),
        (58, 58, "00000000000000000000.log"),
        (59, 59, "00000000000000000000.log"),
    ]
    assert offsets(spark, wh, 6) == [("g6", "t", 0, 11, 58)]
    (g,) = on(spark, wh, "consumer_groups", 6, "group_id", "state", "generation", "log_offset")
    assert g == {"group_id": "g6", "state": "Empty", "generation": 3, "log_offset": 59}


def test_empty_group_id_markers_without_data_and_a_trailing_empty_batch(spark, wh):
    log = sorted(
        (r["log_offset"], r["is_control"], r["control_type"], r["producer_id"], r["group_id"])
        for r in on(spark, wh, "offsets_log", 7, "log_offset", "is_control", "control_type", "producer_id", "group_id")
    )
    assert log == [
        (0, False, None, -1, ""),
        (1, False, None, -1, "x7"),
        (2, True, "COMMIT", 77, None),
        (3, True, "ABORT", 78, None),
    ]
    assert offsets(spark, wh, 7) == [("", "t", 0, 100, 0), ("x7", "t", 0, 200, 1)]
    groups = sorted(
        (r["group_id"], r["group_type"], r["protocol_type"], r["state"], r["generation"])
        for r in on(spark, wh, "consumer_groups", 7)
    )
    assert groups == [("", "classic", None, "Empty", 0), ("x7", "classic", None, "Empty", 0)]
    assert on(spark, wh, "pending_transactional_offsets", 7) == []
