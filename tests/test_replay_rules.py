"""Replay rules (spec section 4) and traps (section 8) on one hand-built log.

Every scenario lives on its own group in the partition Kafka would give it (4 partitions),
the whole log is replayed once, and each test checks its group's rows against values
worked out by hand from the spec."""

from __future__ import annotations

import datetime as dt
import struct

import pytest

from lib.replay.partitioning import partition_for
from lib.source.logdir import find_partitions
from lib.testdata.logbuilder import (
    PartitionLogBuilder,
    consumer_member,
    offset_commit_key,
    offset_commit_value,
)
from tests.helpers import rows

pytestmark = pytest.mark.spark

N = 4
DAY = 86_400_000
NOW = 1_700_000_000_000 + 30 * DAY
RECENT = NOW - DAY
OLD = NOW - 8 * DAY
RETENTION_MIN = 10080
TOPIC_ID = "ASNFZ4mrze8BI0VniavN7w"  # 0123456789abcdef0123456789abcdef
PAYMENTS_ID = "AAECAwQFBgcICQoLDA0ODw"  # 000102030405060708090a0b0c0d0e0f


def same_partition_pair(prefix: str) -> tuple[str, str]:
    first = f"{prefix}-0"
    for i in range(1, 100):
        if partition_for(f"{prefix}-{i}", N) == partition_for(first, N):
            return first, f"{prefix}-{i}"
    raise AssertionError("no pair")


TXN_A, TXN_B = same_partition_pair("txn-multi")


class Scenario:
    def __init__(self):
        self.builders = {p: PartitionLogBuilder(p) for p in range(N)}
        self.offsets: dict[str, int] = {}  # name -> log offset of interesting records

    def on(self, group: str) -> PartitionLogBuilder:
        return self.builders[partition_for(group, N)]

    def mark(self, name: str, group: str):
        self.offsets[name] = self.on(group).next_offset


def build(s: Scenario) -> None:
    g = "latest-wins"
    s.on(g).commit(g, "t", 0, 10, RECENT - 3)
    s.on(g).commit(g, "t", 0, 20, RECENT - 2)
    s.mark("latest-wins", g)
    s.on(g).commit(g, "t", 0, 15, RECENT - 1, leader_epoch=4, metadata="rewound")

    g = "tombstone"
    s.on(g).commit(g, "t", 0, 5, RECENT).offset_tombstone(g, "t", 0, RECENT).commit(g, "t", 1, 7, RECENT)

    g = "txn-commit"
    s.mark("txn-commit", g)
    s.on(g).commit(g, "t", 0, 50, RECENT, producer_id=1001).marker(1001, True, RECENT)

    g = "txn-abort"
    s.mark("txn-abort", g)
    s.on(g).commit(g, "t", 0, 40, RECENT).commit(g, "t", 0, 60, RECENT, producer_id=1002).marker(1002, False, RECENT)

    g = "txn-later-wins"
    s.on(g).commit(g, "t", 0, 70, RECENT, producer_id=1003)
    s.mark("txn-later-wins", g)
    s.on(g).commit(g, "t", 0, 80, RECENT).marker(1003, True, RECENT)

    g = "txn-earlier-loses-to-none"  # committed entry older than the txn record -> txn wins
    s.on(g).commit(g, "t", 0, 1, RECENT)
    s.mark("txn-wins", g)
    s.on(g).commit(g, "t", 0, 2, RECENT, producer_id=1007).marker(1007, True, RECENT)

    g = "txn-open"
    s.mark("txn-open", g)
    s.on(g).commit(g, "t", 0, 90, OLD, producer_id=1004)

    g = "txn-tombstone-clears"
    s.on(g).commit(g, "t", 0, 100, RECENT, producer_id=1005).offset_tombstone(g, "t", 0, RECENT)
    s.on(g).marker(1005, True, RECENT)

    g = "txn-tombstone-clears-open"  # no marker yet: the tombstone still removed the pending entry
    s.on(g).commit(g, "t", 0, 100, RECENT, producer_id=1008).offset_tombstone(g, "t", 0, RECENT)

    s.on(TXN_A).commit(TXN_A, "t", 0, 1, RECENT, producer_id=1006).commit(TXN_B, "t", 0, 2, RECENT, producer_id=1006)
    s.on(TXN_A).marker(1006, True, RECENT)

    g = "pid-without-txn-bit"  # Kafka 4.x decides on producerId != -1, not the attribute bit
    s.on(g).batch([(offset_commit_key(g, "t", 0), offset_commit_value(3, RECENT), RECENT)], producer_id=2000)

    g = "group-tombstone-keeps-offsets"
    s.on(g).group(g, RECENT, members=[consumer_member("m1", ["t"], {"t": [0]})])
    s.on(g).commit(g, "t", 0, 3, RECENT)
    s.mark("group-tombstone", g)
    s.on(g).group_tombstone(g, RECENT)

    g = "orphan-old"
    s.on(g).commit(g, "t", 0, 1, OLD).group_tombstone(g, OLD)

    g = "recreated"
    s.on(g).group(g, RECENT, members=[consumer_member("m1", ["t"], {"t": [0]})])
    s.on(g).commit(g, "t", 0, 1, RECENT).group_tombstone(g, RECENT).commit(g, "t", 1, 2, RECENT)

    g = "classic-stable"
    s.on(g).group(
        g,
        RECENT,
        generation=5,
        protocol="range",
        state_ts=OLD,
        members=[
            consumer_member("m1", ["in"], {"in": [0]}, client_id="c1", client_host="/10.0.0.1"),
            consumer_member("m2", ["in"], {"in": [1]}, client_id="c2", client_host="/10.0.0.2", instance_id="static-2"),
        ],
    )
    s.on(g).commit(g, "in", 0, 11, OLD).commit(g, "gone", 0, 12, OLD)

    g = "classic-empty-kip211"
    s.on(g).group(g, NOW - 8 * DAY, generation=3, state_ts=NOW - 8 * DAY, members=[])
    s.on(g).commit(g, "t", 0, 1, RECENT)
    s.on(g).group(g, NOW - 8 * DAY, generation=3, state_ts=NOW - 8 * DAY, members=[])

    g = "classic-empty-recent"
    s.on(g).commit(g, "t", 0, 1, NOW - 30 * DAY)
    s.on(g).group(g, RECENT, generation=2, state_ts=RECENT, members=[])

    g = "simple-old"
    s.on(g).commit(g, "t", 0, 1, OLD)

    g = "expire-ts-past"
    s.on(g).commit(g, "t", 0, 1, RECENT, version=1, expire_ts=NOW - 1000)
    g = "expire-ts-future"
    s.on(g).commit(g, "t", 0, 1, NOW - 30 * DAY, version=1, expire_ts=NOW + 1000)

    # Timestamps as Kafka holds them (spec 4.7): the raw long. Only -1 means "absent" for an
    # expire or state timestamp; a commit timestamp has no sentinel at all.
    def commit_at(g, commit_ts, topic="t", **kw):
        s.on(g).batch([(offset_commit_key(g, topic, 0), offset_commit_value(1, commit_ts, **kw), RECENT)])

    commit_at("commit-ts-negative", -5)  # OffsetCommit v1 let clients pick it: now - (-5) >= retention
    commit_at("commit-ts-minus-one", -1)  # not a sentinel for commits
    commit_at("commit-ts-before-year-one", -(10**17))  # beyond a Spark TIMESTAMP: held as 0001-01-02
    commit_at("commit-ts-after-year-9999", 10**17)  # held as 9999-12-31T23:59:59.999, never due
    g = "commit-ts-negative-subscribed"  # a Stable group keeps its subscribed topics whatever the age
    s.on(g).group(g, RECENT, generation=1, members=[consumer_member("m1", ["in"], {"in": [0]})])
    commit_at(g, -5, topic="in")
    commit_at("expire-ts-minus-two", RECENT, version=1, expire_ts=-2)  # a real instant, long past
    commit_at("expire-ts-minus-one", RECENT, version=1, expire_ts=-1)  # absent: commit + retention
    g = "state-ts-negative"  # an Empty group's state timestamp of -2 is an instant, base of expiry
    commit_at(g, RECENT)
    s.on(g).group(g, RECENT, generation=2, state_ts=-2, members=[])
    g = "state-ts-minus-one"  # -1: no state timestamp, the commit's time is the base
    commit_at(g, RECENT)
    s.on(g).group(g, RECENT, generation=2, state_ts=-1, members=[])

    g = "group-v0"
    s.on(g).group(g, RECENT, version=0, members=[consumer_member("m1", ["t"], {"t": [0]}, session_timeout=10000)])

    g = "type0-then-type1"
    s.on(g).commit(g, "t", 0, 1, RECENT, record_type=0, version="legacy").commit(g, "t", 0, 2, RECENT)
    g = "type1-then-type0"
    s.on(g).commit(g, "t", 0, 3, RECENT)
    s.mark("type1-then-type0", g)
    s.on(g).commit(g, "t", 0, 4, RECENT, record_type=0, version="legacy")

    g = "unknown-type"
    s.mark("unknown-type", g)
    key = struct.pack(">h", 99) + struct.pack(">h", len(g)) + g.encode()
    s.on(g).batch([(key, b"\x00\x00whatever", RECENT)])

    g = "consumer-848"
    member = {"groupId": g, "memberId": "m1"}
    s.on(g).record(3, {"group_id": g}, {"epoch": 5}, RECENT)
    s.on(g).record(
        4,
        {"group_id": g},
        {"topics": [{"topicId": TOPIC_ID, "topicName": "orders", "numPartitions": 2, "partitionMetadata": []}]},
        RECENT,
    )
    s.on(g).record(
        5,
        {"group_id": g, "member_id": "m1"},
        {
            "instanceId": None,
            "rackId": None,
            "clientId": "c848",
            "clientHost": "/10.0.0.9",
            "subscribedTopicNames": ["orders"],
            "subscribedTopicRegex": None,
            "rebalanceTimeoutMs": 60000,
            "serverAssignor": "uniform",
            "classicMemberMetadata": None,
        },
        RECENT,
    )
    s.on(g).record(6, {"group_id": g}, {"assignmentEpoch": 5}, RECENT)
    s.on(g).record(
        7,
        {"group_id": g, "member_id": "m1"},
        {"topicPartitions": [{"topicId": TOPIC_ID, "partitions": [0, 1]}]},
        RECENT,
    )
    s.on(g).record(
        8,
        {"group_id": g, "member_id": "m1"},
        {
            "memberEpoch": 5,
            "previousMemberEpoch": 4,
            "state": 0,
            "assignedPartitions": [{"topicId": TOPIC_ID, "partitions": [1, 0]}],
            "partitionsPendingRevocation": [],
        },
        RECENT,
    )
    s.on(g).commit(g, "orders", 0, 11, OLD).commit(g, "other", 0, 12, OLD)
    del member

    g = "consumer-848-deleted"
    s.on(g).record(3, {"group_id": g}, {"epoch": 2}, RECENT)
    s.on(g).record(
        5,
        {"group_id": g, "member_id": "m1"},
        {"clientId": "c", "clientHost": "/h", "subscribedTopicNames": ["t"]},
        RECENT,
    )
    s.on(g).record(6, {"group_id": g}, {"assignmentEpoch": 2}, RECENT)
    s.on(g).record(
        8,
        {"group_id": g, "member_id": "m1"},
        {
            "memberEpoch": 2,
            "previousMemberEpoch": 1,
            "state": 0,
            "assignedPartitions": [],
            "partitionsPendingRevocation": [],
        },
        RECENT,
    )
    for rtype, key in ((8, {"member_id": "m1"}), (7, {"member_id": "m1"}), (6, {}), (5, {"member_id": "m1"}), (3, {})):
        s.on(g).record(rtype, {"group_id": g, **key}, None, RECENT)

    # a KIP-848 group assigned a topic whose name only another offsets partition's commits give
    g, namer = "consumer-848-named-elsewhere", "names-payments-elsewhere"
    assert partition_for(g, N) != partition_for(namer, N)
    s.on(g).record(3, {"group_id": g}, {"epoch": 3}, RECENT)
    s.on(g).record(
        5,
        {"group_id": g, "member_id": "m1"},
        {"clientId": "c", "clientHost": "/h", "subscribedTopicNames": ["payments"]},
        RECENT,
    )
    s.on(g).record(6, {"group_id": g}, {"assignmentEpoch": 3}, RECENT)
    s.on(g).record(
        8,
        {"group_id": g, "member_id": "m1"},
        {
            "memberEpoch": 3,
            "previousMemberEpoch": 2,
            "state": 0,
            "assignedPartitions": [{"topicId": PAYMENTS_ID, "partitions": [0]}],
            "partitionsPendingRevocation": [],
        },
        RECENT,
    )
    s.on(namer).commit(namer, "payments", 0, 5, RECENT, version=4, topic_id=PAYMENTS_ID)

    g = "classic-replaces-consumer"
    s.on(g).record(3, {"group_id": g}, {"epoch": 9}, RECENT)
    s.on(g).group(g, RECENT, generation=1, members=[consumer_member("m1", ["t"], {"t": [0]})])

    g = "gaps"
    b = s.on(g)
    s.mark("gaps", g)
    b.batch(
        [
            (offset_commit_key(g, "t", 0), offset_commit_value(1, RECENT), RECENT),
            (offset_commit_key(g, "t", 1), offset_commit_value(2, RECENT), RECENT),
        ],
        gaps=[0, 5],
    )
    b.batch([], gaps=[2])  # an empty batch left by the cleaner: 3 offsets, no records
    s.mark("gaps-after", g)
    b.commit(g, "t", 2, 3, RECENT)

    for codec, g in ((1, "gzip"), (2, "snappy"), (3, "lz4"), (4, "zstd")):
        s.on(g).batch(
            [(offset_commit_key(g, "t", p), offset_commit_value(100 + p, RECENT), RECENT) for p in range(3)],
            compression=codec,
        )

    g = "v4-topic-id"
    s.on(g).commit(g, "t", 0, 77, RECENT, version=4, topic_id=TOPIC_ID, metadata="ü")

    g = "grüppe-😀"
    s.on(g).commit(g, "tøpic", 0, 5, RECENT)

    # a second segment: latest-wins continues across segment boundaries
    for p in range(N):
        s.builders[p].roll()
    g = "across-segments"
    s.on(g).commit(g, "t", 0, 1, RECENT)
    s.on("latest-wins").roll().commit("latest-wins", "t", 1, 9, RECENT)


@pytest.fixture(scope="module")
def tables(spark, replay_logdir, tmp_path_factory):
    s = Scenario()
    build(s)
    log_dir = tmp_path_factory.mktemp("rules-log")
    for b in s.builders.values():
        b.write(str(log_dir))
    warehouse = tmp_path_factory.mktemp("rules-wh")
    replay_logdir(log_dir, warehouse, NOW, RETENTION_MIN)
    out: dict = {
        name: rows(spark, str(warehouse), name)
        for name in (
            "offsets_log",
            "group_offsets",
            "expired_offsets",
            "pending_transactional_offsets",
            "consumer_groups",
            "expired_groups",
            "replay_checkpoints",
        )
    }
    out["scenario"] = s
    out["log_dir"] = str(log_dir)
    return out


def offsets_of(tables, group, table="group_offsets"):
    return {(r["topic"], r["partition"]): r["committed_offset"] for r in tables[table] if r["group_id"] == group}


def group_row(tables, group, table="consumer_groups"):
    found = [r for r in tables[table] if r["group_id"] == group]
    assert len(found) <= 1
    return found[0] if found else None


def test_latest_record_in_log_order_wins_even_when_it_rewinds(tables):
    assert offsets_of(tables, "latest-wins") == {("t", 0): 15, ("t", 1): 9}
    row = [r for r in tables["group_offsets"] if r["group_id"] == "latest-wins" and r["partition"] == 0][0]
    assert row["leader_epoch"] == 4 and row["metadata"] == "rewound"
    assert row["log_offset"] == tables["scenario"].offsets["latest-wins"]
    assert row["offsets_partition"] == partition_for("latest-wins", N)


def test_offset_tombstone_removes_the_offset(tables):
    assert offsets_of(tables, "tombstone") == {("t", 1): 7}


def test_group_existing_only_through_commits_is_simple_classic_empty(tables):
    g = group_row(tables, "tombstone")
    assert (g["group_type"], g["protocol_type"], g["state"], g["generation"], g["members"]) == (
        "classic",
        None,
        "Empty",
        0,
        [],
    )


def test_transactional_commit_materializes_on_commit_marker(tables):
    assert offsets_of(tables, "txn-commit") == {("t", 0): 50}
    row = [r for r in tables["group_offsets"] if r["group_id"] == "txn-commit"][0]
    assert row["log_offset"] == tables["scenario"].offsets["txn-commit"]  # the record, not the marker


def test_aborted_transaction_is_discarded(tables):
    assert offsets_of(tables, "txn-abort") == {("t", 0): 40}


def test_commit_marker_keeps_later_non_transactional_commit(tables):
    assert offsets_of(tables, "txn-later-wins") == {("t", 0): 80}


def test_commit_marker_replaces_older_committed_entry(tables):
    assert offsets_of(tables, "txn-earlier-loses-to-none") == {("t", 0): 2}


def test_open_transaction_stays_pending_and_blocks_expiry(tables):
    assert offsets_of(tables, "txn-open") == {}
    pending = [r for r in tables["pending_transactional_offsets"] if r["group_id"] == "txn-open"]
    assert [
        (r["producer_id"], r["topic"], r["partition"], r["committed_offset"], r["log_offset"]) for r in pending
    ] == [(1004, "t", 0, 90, tables["scenario"].offsets["txn-open"])]
    # the group has an open transaction: not deleted, though it has no committed offsets
    assert group_row(tables, "txn-open")["state"] == "Empty"
    assert group_row(tables, "txn-open", "expired_groups") is None


def test_tombstone_clears_pending_transactional_offset(tables):
    assert offsets_of(tables, "txn-tombstone-clears") == {}
    assert not [r for r in tables["pending_transactional_offsets"] if r["group_id"] == "txn-tombstone-clears"]


def test_tombstone_clears_pending_entry_of_an_open_transaction(tables):
    assert offsets_of(tables, "txn-tombstone-clears-open") == {}
    assert not [r for r in tables["pending_transactional_offsets"] if r["group_id"] == "txn-tombstone-clears-open"]


def test_one_marker_completes_a_producer_across_groups(tables):
    assert offsets_of(tables, TXN_A) == {("t", 0): 1}
    assert offsets_of(tables, TXN_B) == {("t", 0): 2}


def test_producer_id_alone_makes_a_commit_transactional(tables):
    assert offsets_of(tables, "pid-without-txn-bit") == {}
    assert [
        (r["producer_id"], r["committed_offset"])
        for r in tables["pending_transactional_offsets"]
        if r["group_id"] == "pid-without-txn-bit"
    ] == [(2000, 3)]


def test_group_tombstone_orphans_offsets_which_never_expire(tables):
    # Kafka 4.x: the tombstone removes only the group; its earlier offsets stay in the offsets
    # map with no group, and the cleanup (which walks groups) never expires them.
    assert offsets_of(tables, "group-tombstone-keeps-offsets") == {("t", 0): 3}
    assert offsets_of(tables, "orphan-old") == {("t", 0): 1}
    assert group_row(tables, "group-tombstone-keeps-offsets") is None
    assert group_row(tables, "orphan-old") is None


def test_commit_after_group_tombstone_recreates_a_simple_group(tables):
    assert offsets_of(tables, "recreated") == {("t", 0): 1, ("t", 1): 2}
    g = group_row(tables, "recreated")
    assert (g["group_type"], g["protocol_type"], g["state"], g["members"]) == ("classic", None, "Empty", [])


def test_classic_stable_group_members_and_assignment(tables):
    g = group_row(tables, "classic-stable")
    assert (g["group_type"], g["protocol_type"], g["generation"], g["protocol"], g["leader"], g["state"]) == (
        "classic",
        "consumer",
        5,
        "range",
        "m1",
        "Stable",
    )
    assert g["subscribed_topics"] == ["in"]
    assert [
        (
            m["member_id"],
            m["group_instance_id"],
            m["client_id"],
            m["client_host"],
            m["session_timeout_ms"],
            m["rebalance_timeout_ms"],
            m["subscribed_topics"],
            m["assignment"],
        )
        for m in g["members"]
    ] == [
        ("m1", None, "c1", "/10.0.0.1", 45000, 300000, ["in"], [{"topic": "in", "partitions": [0]}]),
        ("m2", "static-2", "c2", "/10.0.0.2", 45000, 300000, ["in"], [{"topic": "in", "partitions": [1]}]),
    ]


def test_stable_consumer_group_expires_only_unsubscribed_topics(tables):
    assert offsets_of(tables, "classic-stable") == {("in", 0): 11}
    assert offsets_of(tables, "classic-stable", "expired_offsets") == {("gone", 0): 12}


def test_empty_classic_group_expires_by_state_timestamp_and_is_deleted(tables):
    # commit is one day old, but the group became Empty 8 days ago (KIP-211)
    assert offsets_of(tables, "classic-empty-kip211") == {}
    assert offsets_of(tables, "classic-empty-kip211", "expired_offsets") == {("t", 0): 1}
    assert group_row(tables, "classic-empty-kip211") is None
    assert group_row(tables, "classic-empty-kip211", "expired_groups")["generation"] == 3


def test_recently_emptied_group_keeps_old_commits(tables):
    assert offsets_of(tables, "classic-empty-recent") == {("t", 0): 1}
    assert group_row(tables, "classic-empty-recent")["state"] == "Empty"


def test_simple_group_expires_by_commit_time_and_is_deleted(tables):
    assert offsets_of(tables, "simple-old", "expired_offsets") == {("t", 0): 1}
    assert group_row(tables, "simple-old") is None
    assert group_row(tables, "simple-old", "expired_groups")["group_type"] == "classic"


def test_explicit_expire_timestamp_overrides_retention(tables):
    assert offsets_of(tables, "expire-ts-past", "expired_offsets") == {("t", 0): 1}
    assert offsets_of(tables, "expire-ts-future") == {("t", 0): 1}


def at_ms(ms):
    """The instant as PySpark's collect() gives it (naive, local time: UTC here, conf/spark.conf)."""
    return dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=ms)


def offset_row(tables, group, table):
    found = [r for r in tables[table] if r["group_id"] == group]
    assert len(found) == 1, found
    return found[0]


def test_negative_commit_timestamp_is_kept_and_expires_at_once(tables):
    row = offset_row(tables, "commit-ts-negative", "expired_offsets")
    assert row["commit_timestamp"] == at_ms(-5) == dt.datetime(1969, 12, 31, 23, 59, 59, 995000)
    assert row["expire_timestamp"] is None
    assert offsets_of(tables, "commit-ts-negative") == {}
    assert group_row(tables, "commit-ts-negative", "expired_groups")["group_type"] == "classic"
    assert offset_row(tables, "commit-ts-minus-one", "expired_offsets")["commit_timestamp"] == at_ms(-1)


def test_negative_commit_timestamp_in_the_log(tables):
    by_group = {r["group_id"]: r for r in tables["offsets_log"] if r["record_type"] == 1}
    assert by_group["commit-ts-negative"]["commit_timestamp"] == at_ms(-5)
    assert by_group["commit-ts-minus-one"]["commit_timestamp"] == at_ms(-1)
    assert by_group["commit-ts-before-year-one"]["commit_timestamp"] == dt.datetime(1, 1, 2)
    assert by_group["commit-ts-after-year-9999"]["commit_timestamp"] == dt.datetime(9999, 12, 31, 23, 59, 59, 999000)
    assert by_group["expire-ts-minus-two"]["expire_timestamp"] == at_ms(-2)
    assert by_group["expire-ts-minus-one"]["expire_timestamp"] is None


def test_timestamps_beyond_spark_range_expire_as_their_raw_value(tables):
    assert offsets_of(tables, "commit-ts-before-year-one", "expired_offsets") == {("t", 0): 1}
    assert offsets_of(tables, "commit-ts-after-year-9999") == {("t", 0): 1}


def test_negative_commit_timestamp_of_a_subscribed_topic_is_not_eligible(tables):
    row = offset_row(tables, "commit-ts-negative-subscribed", "group_offsets")
    assert (row["topic"], row["committed_offset"], row["commit_timestamp"]) == ("in", 1, at_ms(-5))


def test_only_minus_one_means_no_expire_timestamp(tables):
    row = offset_row(tables, "expire-ts-minus-two", "expired_offsets")
    assert row["expire_timestamp"] == at_ms(-2)
    assert offsets_of(tables, "expire-ts-minus-one") == {("t", 0): 1}
    assert offset_row(tables, "expire-ts-minus-one", "group_offsets")["expire_timestamp"] is None


def test_only_minus_one_means_no_state_timestamp(tables):
    assert offsets_of(tables, "state-ts-negative", "expired_offsets") == {("t", 0): 1}
    assert group_row(tables, "state-ts-negative") is None
    assert group_row(tables, "state-ts-negative", "expired_groups")["current_state_timestamp"] == at_ms(-2)
    assert offsets_of(tables, "state-ts-minus-one") == {("t", 0): 1}
    assert group_row(tables, "state-ts-minus-one")["current_state_timestamp"] is None


def test_v0_member_without_rebalance_timeout_uses_session_timeout(tables):
    m = group_row(tables, "group-v0")["members"][0]
    assert (m["session_timeout_ms"], m["rebalance_timeout_ms"]) == (10000, 10000)


def test_type0_and_type1_keys_resolve_by_log_order(tables):
    assert offsets_of(tables, "type0-then-type1") == {("t", 0): 2}
    assert offsets_of(tables, "type1-then-type0") == {("t", 0): 4}


def test_unknown_record_type_is_kept_undecoded_and_skipped(tables):
    log = [
        r
        for r in tables["offsets_log"]
        if r["log_offset"] == tables["scenario"].offsets["unknown-type"]
        and r["offsets_partition"] == partition_for("unknown-type", N)
    ]
    assert [(r["record_type"], r["decode_status"], r["group_id"], r["value_version"]) for r in log] == [
        (99, "unknown_type", None, 0)
    ]
    assert group_row(tables, "unknown-type") is None


def test_kip848_consumer_group(tables):
    g = group_row(tables, "consumer-848")
    assert (g["group_type"], g["generation"], g["state"], g["protocol"], g["subscribed_topics"]) == (
        "consumer",
        5,
        "Stable",
        "uniform",
        ["orders"],
    )
    assert [
        (
            m["member_id"],
            m["client_id"],
            m["client_host"],
            m["rebalance_timeout_ms"],
            m["subscribed_topics"],
            m["assignment"],
        )
        for m in g["members"]
    ] == [("m1", "c848", "/10.0.0.9", 60000, ["orders"], [{"topic": "orders", "partitions": [0, 1]}])]


def test_kip848_group_expires_unsubscribed_topics_by_commit_time(tables):
    assert offsets_of(tables, "consumer-848") == {("orders", 0): 11}
    assert offsets_of(tables, "consumer-848", "expired_offsets") == {("other", 0): 12}


def test_kip848_tombstones_in_kafka_order_delete_the_group(tables):
    assert group_row(tables, "consumer-848-deleted") is None
    assert group_row(tables, "consumer-848-deleted", "expired_groups") is None


def test_group_metadata_replaces_a_group_of_another_type(tables):
    g = group_row(tables, "classic-replaces-consumer")
    assert (g["group_type"], g["protocol_type"], g["generation"], g["state"]) == ("classic", "consumer", 1, "Stable")


def test_absolute_offsets_follow_deltas_across_gaps_and_empty_batches(tables):
    base = tables["scenario"].offsets["gaps"]
    got = sorted((r["partition"], r["log_offset"]) for r in tables["group_offsets"] if r["group_id"] == "gaps")
    assert got == [(0, base), (1, base + 5), (2, base + 9)]
    assert tables["scenario"].offsets["gaps-after"] == base + 9


@pytest.mark.parametrize("group,codec", [("gzip", "gzip"), ("snappy", "snappy"), ("lz4", "lz4"), ("zstd", "zstd")])
def test_compressed_batches(tables, group, codec):
    assert offsets_of(tables, group) == {("t", 0): 100, ("t", 1): 101, ("t", 2): 102}
    assert {r["compression"] for r in tables["offsets_log"] if r["group_id"] == group} == {codec}


def test_v4_value_with_topic_id(tables):
    row = [r for r in tables["group_offsets"] if r["group_id"] == "v4-topic-id"][0]
    assert (row["committed_offset"], row["topic_id"], row["metadata"], row["leader_epoch"]) == (77, TOPIC_ID, "ü", None)


def test_non_ascii_group_and_topic(tables):
    assert offsets_of(tables, "grüppe-😀") == {("tøpic", 0): 5}
    row = [r for r in tables["group_offsets"] if r["group_id"] == "grüppe-😀"][0]
    assert row["offsets_partition"] == partition_for("grüppe-😀", N)


def test_checkpoints_hold_each_partitions_log_end(tables):
    s = tables["scenario"]
    got = {r["offsets_partition"]: (r["next_log_offset"], r["trailing_bytes"]) for r in tables["replay_checkpoints"]}
    assert got == {p: (b.next_offset, 0) for p, b in s.builders.items()}
    counted = {}
    for r in tables["offsets_log"]:
        counted[r["offsets_partition"]] = counted.get(r["offsets_partition"], 0) + 1
    assert {r["offsets_partition"]: r["records_read"] for r in tables["replay_checkpoints"]} == counted


def test_offsets_log_keeps_every_record_once(tables):
    keys = [(r["offsets_partition"], r["log_offset"]) for r in tables["offsets_log"]]
    assert len(keys) == len(set(keys))
    markers = [r for r in tables["offsets_log"] if r["is_control"]]
    assert {(r["producer_id"], r["control_type"]) for r in markers} == {
        (1001, "COMMIT"),
        (1002, "ABORT"),
        (1003, "COMMIT"),
        (1007, "COMMIT"),
        (1005, "COMMIT"),
        (1006, "COMMIT"),
    }


def test_assignment_topic_named_by_another_partitions_commit(tables):
    row = group_row(tables, "consumer-848-named-elsewhere")
    assert (row["state"], [m["assignment"] for m in row["members"]]) == (
        "Stable",
        [[{"topic": "payments", "partitions": [0]}]],
    )


# --- the expiry rules' consumers agree ------------------------------------------------------------
EARLY = NOW - 9 * DAY
LATER = (EARLY, NOW - 2 * DAY, NOW - DAY + 1, NOW, NOW + 8 * DAY)
WITHIN_DAYS = 20


def _replay(spark, log_dir, wh, now_ms):
    from lib.spark.pipeline import run_replay

    run_replay(spark, find_partitions(log_dir), wh, now_ms, retention_minutes=RETENTION_MIN, full=True)


def _removed(spark, wh) -> set[tuple]:
    from lib.lake.delta import table_exists, table_path

    out: set[tuple] = set()
    for name, cols in (("expired_offsets", ("group_id", "topic", "partition")), ("expired_groups", ("group_id",))):
        path = table_path(wh, name)
        if table_exists(path):
            for r in spark.read.format("delta").load(path).collect():
                out.add(("offset", *[r[c] for c in cols]) if len(cols) == 3 else ("group", r["group_id"], None, None))
    return out


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat()


def test_the_engine_removes_what_the_audit_and_the_report_said_would_be_due(spark, tables, tmp_path):
    """One answer for "what will the offset cleanup remove, and when", on this log of every
    expiry case: the replay engine (which expires as of a run's --now:
    PartitionReplay._judge_offsets), the SQL audit groups_expiring_within (over the views
    offset_expiry / group_expiry, lib.replay.expiry_spark) and the report's "expiring within"
    lists (judge_offsets / judge_groups). The audit and the report look ahead from a warehouse
    replayed at EARLY; the engine, replaying the same log at a later instant X, must remove
    exactly the offsets and groups they list as due by X (beyond what it had removed at EARLY)."""
    from lib.reporting.audit_queries import bind, collect, load_queries, open_catalog, run_query
    from lib.reporting.report_builder import collect_report

    log_dir = tables["log_dir"]
    early = str(tmp_path / "early")
    _replay(spark, log_dir, early, EARLY)
    removed_early = _removed(spark, early)
    open_catalog(spark, early)
    q = load_queries()["groups_expiring_within"]
    try:
        args = {"now": _iso(EARLY), "within": f"{WITHIN_DAYS}d", "retention_minutes": str(RETENTION_MIN)}
        sql_rows = collect(run_query(spark, q, bind(q, args)))[1]
    finally:
        spark.catalog.setCurrentDatabase("default")
    due_at = {
        (r["kind"], r["group_id"], r["topic"], r["partition"]): int(r["expires_at"].timestamp() * 1000)
        for r in sql_rows
    }
    assert len(due_at) == len(sql_rows)
    assert not set(due_at) & removed_early
    # the audit lists what is already due at EARLY too: nothing the engine had left then
    assert {k for k, ms in due_at.items() if ms <= EARLY} == set()

    report = collect_report(spark, early, EARLY, days=WITHIN_DAYS, retention_minutes=RETENTION_MIN)
    report_due = {("offset", r["group_id"], r["topic"], r["partition"]): r["due_ms"] for r in report.expiring_offsets}
    report_due |= {("group", r["group_id"], None, None): r["due_ms"] for r in report.expiring_groups}
    assert report_due == due_at

    checked = 0
    for x in LATER:
        wh = str(tmp_path / f"at-{x}")
        _replay(spark, log_dir, wh, x)
        removed = _removed(spark, wh) - removed_early
        assert removed == {k for k, ms in due_at.items() if ms <= x}, _iso(x)
        checked += len(removed)
    assert checked  # (the instants see offsets and groups go)
