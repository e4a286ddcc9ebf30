"""SQL audits (lib/reporting/audit_queries.py, sql/audits/*.sql, jobs/audit.py) on one hand-built log.

The log is replayed in two runs (the second, incremental, adds one commit) so that Delta
time travel has two versions to tell apart. Every canned query runs through the code path
the CLI uses (load_queries -> bind -> run_query -> collect) and is checked against rows
worked out by hand from the records below. Times: T0 = 2024-01-01T00:00:00Z, NOW = T0 + 3 days."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys

import pytest

from lib.replay.partitioning import partition_for
from lib.reporting.audit_queries import AuditError, bind, collect, load_queries, open_catalog, plain, run_query
from lib.testdata.logbuilder import PartitionLogBuilder, consumer_member, offset_commit_key, offset_commit_value

pytestmark = pytest.mark.spark

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N = 2
T0 = 1_704_067_200_000  # 2024-01-01T00:00:00Z
MIN = 60_000
HOUR = 60 * MIN
DAY = 24 * HOUR
NOW = T0 + 3 * DAY
H2 = T0 + 2 * HOUR
EVENTS_ID = "ASNFZ4mrze8BI0VniavN7w"


def ts(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC)


def iso(ms: int) -> str:
    return plain(ts(ms))


def p_of(group: str) -> int:
    return partition_for(group, N)


class Log:
    def __init__(self):
        self.builders = {p: PartitionLogBuilder(p) for p in range(N)}
        self.off: dict[str, int] = {}

    def on(self, group: str) -> PartitionLogBuilder:
        return self.builders[p_of(group)]

    def mark(self, name: str, group: str) -> None:
        self.off[name] = self.on(group).next_offset

    def write(self, log_dir) -> None:
        for b in self.builders.values():
            b.write(str(log_dir))


def phase1(L: Log) -> None:
    g = "orders-app"  # classic consumer group: two generations, a rewind
    L.mark("orders-gen1", g)
    L.on(g).group(
        g,
        T0,
        generation=1,
        protocol="range",
        state_ts=T0,
        members=[consumer_member("m1", ["orders"], {"orders": [0, 1]}, client_id="c1", client_host="/10.0.0.1")],
    )
    # one OffsetCommit request for two partitions: one batch, two records
    L.on(g).batch(
        [
            (offset_commit_key(g, "orders", 0), offset_commit_value(100, T0 + 10 * MIN), T0 + 10 * MIN),
            (offset_commit_key(g, "orders", 1), offset_commit_value(200, T0 + 10 * MIN), T0 + 10 * MIN),
        ]
    )
    L.mark("orders-150", g)
    L.on(g).commit(g, "orders", 0, 150, T0 + 20 * MIN)
    L.mark("orders-gen2", g)
    L.on(g).group(
        g,
        T0 + 30 * MIN,
        generation=2,
        protocol="range",
        state_ts=T0 + 30 * MIN,
        members=[
            consumer_member("m1", ["orders"], {"orders": [0]}, client_id="c1", client_host="/10.0.0.1"),
            consumer_member("m2", ["orders"], {"orders": [1]}, client_id="c2", client_host="/10.0.0.2"),
        ],
    )
    L.mark("orders-120", g)
    L.on(g).commit(g, "orders", 0, 120, T0 + 40 * MIN)
    L.mark("orders-130", g)
    L.on(g).commit(g, "orders", 0, 130, T0 + 50 * MIN, leader_epoch=3, metadata="m50")

    g = "txn-app"  # simple group: transactions committed, aborted, overtaken; a tombstone
    L.mark("pay0-10", g)
    L.on(g).commit(g, "payments", 0, 10, T0 + 5 * MIN)
    L.mark("pay1-7", g)
    L.on(g).commit(g, "payments", 1, 7, T0 + 5 * MIN)
    L.mark("pay0-20", g)
    L.on(g).commit(g, "payments", 0, 20, T0 + 10 * MIN, producer_id=1000)
    L.on(g).marker(1000, True, T0 + 15 * MIN)  # 20 applies at M15
    L.on(g).commit(g, "payments", 0, 5, T0 + 20 * MIN, producer_id=1001)
    L.on(g).marker(1001, False, T0 + 25 * MIN)  # 5 is dropped
    L.on(g).commit(g, "payments", 0, 30, T0 + 30 * MIN, producer_id=1002)
    L.mark("pay0-25", g)
    L.on(g).commit(g, "payments", 0, 25, T0 + 35 * MIN, leader_epoch=2, metadata="manual")
    L.on(g).marker(1002, True, T0 + 40 * MIN)  # 30 loses to the later 25
    L.mark("pay1-tombstone", g)
    L.on(g).offset_tombstone(g, "payments", 1, T0 + 45 * MIN)
    L.on(g).commit(g, "payments", 2, 40, T0 + 50 * MIN, producer_id=1004)
    L.builders[1 - p_of(g)].marker(1004, True, T0 + 55 * MIN)  # other offsets partition: no effect

    g = "reset-app"  # a tombstone between a commit and a smaller one: not a rewind
    L.on(g).commit(g, "t", 0, 50, T0 + DAY)
    L.on(g).offset_tombstone(g, "t", 0, T0 + DAY + 10 * MIN)
    L.on(g).commit(g, "t", 0, 10, T0 + DAY + 20 * MIN)

    g = "empty-app"  # classic group that became Empty: expiry counts from the state timestamp
    L.mark("empty-gen1", g)
    L.on(g).group(
        g,
        T0,
        generation=1,
        protocol="range",
        state_ts=T0,
        members=[consumer_member("e1", ["logs"], {"logs": [0]}, client_id="ce", client_host="/10.0.0.5")],
    )
    L.on(g).commit(g, "logs", 0, 5, T0 + 5 * MIN)
    L.on(g).commit(g, "logs", 0, 9, T0 + DAY)
    L.mark("empty-gen2", g)
    L.on(g).group(g, T0 + DAY + 30 * MIN, generation=2, protocol=None, state_ts=T0 + DAY + 30 * MIN, members=[])

    g = "legacy-ts"  # v1 value with an explicit expire timestamp
    L.on(g).commit(g, "x", 0, 3, T0, version=1, expire_ts=T0 + 5 * DAY)

    g = "gone-app"  # group tombstone: the offsets stay (Kafka 4.x)
    L.mark("gone-gen1", g)
    L.on(g).group(
        g,
        T0,
        generation=1,
        protocol="range",
        state_ts=T0,
        members=[consumer_member("g1", ["g"], {"g": [0]}, client_id="cg", client_host="/10.0.0.7")],
    )
    L.mark("gone-1", g)
    L.on(g).commit(g, "g", 0, 1, T0 + 5 * MIN)
    L.on(g).group_tombstone(g, T0 + 30 * MIN)

    g = "stream-848"  # KIP-848 consumer group: epoch 1 (a owns 0,1), epoch 2 (a: 0, b: 1)
    rec = L.on(g).record
    a, b, grp = {"group_id": g, "member_id": "a"}, {"group_id": g, "member_id": "b"}, {"group_id": g}

    def meta(client, host):
        return {
            "instanceId": None,
            "rackId": None,
            "clientId": client,
            "clientHost": host,
            "subscribedTopicNames": ["events"],
            "subscribedTopicRegex": None,
            "rebalanceTimeoutMs": 300000,
            "serverAssignor": "uniform",
            "classicMemberMetadata": None,
        }

    def tps(*parts):
        return [{"topicId": EVENTS_ID, "partitions": list(parts)}]

    rec(3, grp, {"epoch": 1}, H2)
    rec(5, a, meta("ca", "/10.0.1.1"), H2)
    rec(7, a, {"topicPartitions": tps(0, 1)}, H2)
    L.mark("target-1", g)
    rec(6, grp, {"assignmentEpoch": 1}, H2)
    L.mark("a-epoch1", g)
    rec(
        8,
        a,
        {
            "memberEpoch": 1,
            "previousMemberEpoch": 0,
            "state": 0,
            "assignedPartitions": tps(0, 1),
            "partitionsPendingRevocation": [],
        },
        H2 + MIN,
    )
    rec(5, b, meta("cb", "/10.0.1.2"), H2 + 10 * MIN)
    rec(3, grp, {"epoch": 2}, H2 + 10 * MIN)
    rec(7, a, {"topicPartitions": tps(0)}, H2 + 10 * MIN)
    rec(7, b, {"topicPartitions": tps(1)}, H2 + 10 * MIN)
    L.mark("target-2", g)
    rec(6, grp, {"assignmentEpoch": 2}, H2 + 10 * MIN)
    L.mark("a-revoking", g)
    rec(
        8,
        a,
        {
            "memberEpoch": 1,
            "previousMemberEpoch": 0,
            "state": 1,
            "assignedPartitions": tps(0),
            "partitionsPendingRevocation": tps(1),
        },
        H2 + 11 * MIN,
    )
    L.mark("a-epoch2", g)
    rec(
        8,
        a,
        {
            "memberEpoch": 2,
            "previousMemberEpoch": 1,
            "state": 0,
            "assignedPartitions": tps(0),
            "partitionsPendingRevocation": [],
        },
        H2 + 12 * MIN,
    )
    L.mark("b-epoch2", g)
    rec(
        8,
        b,
        {
            "memberEpoch": 2,
            "previousMemberEpoch": 0,
            "state": 0,
            "assignedPartitions": tps(1),
            "partitionsPendingRevocation": [],
        },
        H2 + 13 * MIN,
    )
    L.on(g).commit(g, "events", 0, 500, H2 + 15 * MIN, version=4, topic_id=EVENTS_ID)  # names the topic id
    L.on(g).commit(g, "events", 1, 600, H2 + 15 * MIN, version=4, topic_id=EVENTS_ID)


def phase2(L: Log) -> None:
    g = "orders-app"
    L.mark("orders1-260", g)
    L.on(g).commit(g, "orders", 1, 260, T0 + 2 * DAY)


def last_commit(spark, warehouse, table: str) -> tuple[int, str]:
    """(version, commit time as ISO text) of the table's latest Delta commit."""
    from delta.tables import DeltaTable

    row = (
        DeltaTable.forPath(spark, os.path.join(str(warehouse), table))
        .history()
        .orderBy("version", ascending=False)
        .first()
    )
    return row["version"], plain(row["timestamp"])


@pytest.fixture(scope="module")
def audit(spark, replay_logdir, tmp_path_factory):
    L = Log()
    log_dir = tmp_path_factory.mktemp("audit-log")
    warehouse = tmp_path_factory.mktemp("audit-wh")
    phase1(L)
    L.write(log_dir)
    replay_logdir(log_dir, warehouse, NOW)
    run1 = last_commit(spark, warehouse, "group_offsets")
    phase2(L)
    L.write(log_dir)
    replay_logdir(log_dir, warehouse, NOW)  # incremental: reads only the new commit
    run2 = last_commit(spark, warehouse, "group_offsets")
    open_catalog(spark, str(warehouse))
    queries = load_queries()

    def run(name: str, **params) -> list[dict]:
        q = queries[name]
        columns, rows = collect(run_query(spark, q, bind(q, {k: str(v) for k, v in params.items()})))
        return rows

    yield {"run": run, "log": L, "warehouse": str(warehouse), "run1": run1, "run2": run2}
    spark.catalog.setCurrentDatabase("default")


def pick(rows: list[dict], *cols: str) -> list[tuple]:
    return [tuple(r[c] for c in cols) for r in rows]


# --- committed_offset_as_of ---------------------------------------------------------------
COLS = (
    "topic",
    "partition",
    "status",
    "committed_offset",
    "leader_epoch",
    "metadata",
    "record_log_offset",
    "record_time",
    "applied_at",
    "transactional",
    "producer_id",
    "offsets_partition",
)


def test_committed_offset_before_the_commit_marker(audit):
    o, p = audit["log"].off, p_of("txn-app")
    assert pick(audit["run"]("committed_offset_as_of", group="txn-app", at=iso(T0 + 12 * MIN)), *COLS) == [
        ("payments", 0, "committed", 10, None, "", o["pay0-10"], ts(T0 + 5 * MIN), ts(T0 + 5 * MIN), False, -1, p),
        ("payments", 1, "committed", 7, None, "", o["pay1-7"], ts(T0 + 5 * MIN), ts(T0 + 5 * MIN), False, -1, p),
    ]


def test_transactional_commit_applies_at_its_marker_and_abort_drops(audit):
    o, p = audit["log"].off, p_of("txn-app")
    expected = [
        ("payments", 0, "committed", 20, None, "", o["pay0-20"], ts(T0 + 10 * MIN), ts(T0 + 15 * MIN), True, 1000, p)
    ]
    for at in (T0 + 15 * MIN, T0 + 27 * MIN):  # the COMMIT marker's time, then after the ABORT
        assert (
            pick(
                audit["run"]("committed_offset_as_of", group="txn-app", topic="payments", partition=0, at=iso(at)),
                *COLS,
            )
            == expected
        )


def test_later_plain_commit_wins_over_older_transactional_record(audit):
    o, p = audit["log"].off, p_of("txn-app")
    assert pick(audit["run"]("committed_offset_as_of", group="txn-app", at=iso(T0 + 42 * MIN)), *COLS) == [
        ("payments", 0, "committed", 25, 2, "manual", o["pay0-25"], ts(T0 + 35 * MIN), ts(T0 + 35 * MIN), False, -1, p),
        ("payments", 1, "committed", 7, None, "", o["pay1-7"], ts(T0 + 5 * MIN), ts(T0 + 5 * MIN), False, -1, p),
    ]


def test_tombstone_deletes_and_marker_elsewhere_commits_nothing(audit):
    o, p = audit["log"].off, p_of("txn-app")
    assert pick(audit["run"]("committed_offset_as_of", group="txn-app", at=iso(NOW)), *COLS) == [
        ("payments", 0, "committed", 25, 2, "manual", o["pay0-25"], ts(T0 + 35 * MIN), ts(T0 + 35 * MIN), False, -1, p),
        (
            "payments",
            1,
            "deleted",
            None,
            None,
            None,
            o["pay1-tombstone"],
            ts(T0 + 45 * MIN),
            ts(T0 + 45 * MIN),
            False,
            None,
            p,
        ),
    ]  # payments-2: its producer's marker is in the other offsets partition, so still pending


def test_group_tombstone_keeps_offsets_and_rewind_is_visible_as_of(audit):
    o = audit["log"].off
    assert pick(
        audit["run"]("committed_offset_as_of", group="gone-app"),
        "topic",
        "partition",
        "status",
        "committed_offset",
        "record_log_offset",
    ) == [("g", 0, "committed", 1, o["gone-1"])]
    assert pick(
        audit["run"]("committed_offset_as_of", group="orders-app", topic="orders", partition=0, at=iso(T0 + 45 * MIN)),
        "committed_offset",
        "record_log_offset",
    ) == [(120, o["orders-120"])]


# --- group_offsets_as_of_version (Delta time travel) --------------------------------------
def test_group_offsets_as_of_version(audit):
    cols = ("group_id", "topic", "partition", "committed_offset")
    assert audit["run1"][0] < audit["run2"][0]
    assert pick(audit["run"]("group_offsets_as_of_version", at=audit["run1"][1], group="orders-app"), *cols) == [
        ("orders-app", "orders", 0, 130),
        ("orders-app", "orders", 1, 200),
    ]
    assert pick(audit["run"]("group_offsets_as_of_version", at=audit["run2"][1], group="orders-app"), *cols) == [
        ("orders-app", "orders", 0, 130),
        ("orders-app", "orders", 1, 260),
    ]
    with pytest.raises(AuditError, match="DELTA_TIMESTAMP"):
        audit["run"]("group_offsets_as_of_version", at="2000-01-01T00:00:00Z")


# --- offset_rewinds -------------------------------------------------------------------------
def test_offset_rewinds(audit):
    o = audit["log"].off
    # txn-app's aborted 5 and overtaken 30 and reset-app's commit after a tombstone are not rewinds
    assert pick(
        audit["run"]("offset_rewinds"),
        "group_id",
        "topic",
        "partition",
        "previous_offset",
        "previous_applied_at",
        "offset",
        "applied_at",
        "rewound_by",
        "transactional",
        "previous_log_offset",
        "log_offset",
        "offsets_partition",
    ) == [
        (
            "orders-app",
            "orders",
            0,
            150,
            ts(T0 + 20 * MIN),
            120,
            ts(T0 + 40 * MIN),
            30,
            False,
            o["orders-150"],
            o["orders-120"],
            p_of("orders-app"),
        )
    ]
    assert audit["run"]("offset_rewinds", group="txn-app") == []


# --- commit_rate_per_hour -------------------------------------------------------------------
def test_commit_rate_per_hour(audit):
    cols = ("group_id", "hour", "commits", "requests", "transactional_commits", "topic_partitions")
    assert pick(audit["run"]("commit_rate_per_hour"), *cols) == [
        ("empty-app", ts(T0), 1, 1, 0, 1),
        ("empty-app", ts(T0 + DAY), 1, 1, 0, 1),
        ("gone-app", ts(T0), 1, 1, 0, 1),
        ("legacy-ts", ts(T0), 1, 1, 0, 1),
        ("orders-app", ts(T0), 5, 4, 0, 2),
        ("orders-app", ts(T0 + 2 * DAY), 1, 1, 0, 1),
        ("reset-app", ts(T0 + DAY), 2, 2, 0, 1),
        ("stream-848", ts(H2), 2, 2, 0, 2),
        ("txn-app", ts(T0), 7, 7, 4, 3),
    ]
    assert pick(audit["run"]("commit_rate_per_hour", group="orders-app", since=iso(T0 + DAY)), *cols) == [
        ("orders-app", ts(T0 + 2 * DAY), 1, 1, 0, 1)
    ]


# --- group_generation_history ---------------------------------------------------------------
def member(mid, client, host, assignment, instance=None):
    return {
        "member_id": mid,
        "group_instance_id": instance,
        "client_id": client,
        "client_host": host,
        "assignment": [{"topic": t, "partitions": p} for t, p in assignment],
    }


def test_group_generation_history(audit):
    o = audit["log"].off
    cols = (
        "group_id",
        "group_type",
        "generation",
        "started_at",
        "reconciled_at",
        "protocol_type",
        "protocol",
        "leader",
        "members",
        "offsets_partition",
        "log_offset",
    )
    assert pick(audit["run"]("group_generation_history"), *cols) == [
        (
            "empty-app",
            "classic",
            1,
            ts(T0),
            None,
            "consumer",
            "range",
            "e1",
            [member("e1", "ce", "/10.0.0.5", [("logs", [0])])],
            p_of("empty-app"),
            o["empty-gen1"],
        ),
        (
            "empty-app",
            "classic",
            2,
            ts(T0 + DAY + 30 * MIN),
            None,
            "consumer",
            None,
            None,
            [],
            p_of("empty-app"),
            o["empty-gen2"],
        ),
        (
            "gone-app",
            "classic",
            1,
            ts(T0),
            None,
            "consumer",
            "range",
            "g1",
            [member("g1", "cg", "/10.0.0.7", [("g", [0])])],
            p_of("gone-app"),
            o["gone-gen1"],
        ),
        (
            "orders-app",
            "classic",
            1,
            ts(T0),
            None,
            "consumer",
            "range",
            "m1",
            [member("m1", "c1", "/10.0.0.1", [("orders", [0, 1])])],
            p_of("orders-app"),
            o["orders-gen1"],
        ),
        (
            "orders-app",
            "classic",
            2,
            ts(T0 + 30 * MIN),
            None,
            "consumer",
            "range",
            "m1",
            [member("m1", "c1", "/10.0.0.1", [("orders", [0])]), member("m2", "c2", "/10.0.0.2", [("orders", [1])])],
            p_of("orders-app"),
            o["orders-gen2"],
        ),
        (
            "stream-848",
            "consumer",
            1,
            ts(H2),
            ts(H2 + MIN),
            "consumer",
            "uniform",
            None,
            [member("a", "ca", "/10.0.1.1", [("events", [0, 1])])],
            p_of("stream-848"),
            o["target-1"],
        ),
        (
            "stream-848",
            "consumer",
            2,
            ts(H2 + 10 * MIN),
            ts(H2 + 13 * MIN),
            "consumer",
            "uniform",
            None,
            [member("a", "ca", "/10.0.1.1", [("events", [0])]), member("b", "cb", "/10.0.1.2", [("events", [1])])],
            p_of("stream-848"),
            o["target-2"],
        ),
    ]


# --- assignment_history, unbalanced_groups ---------------------------------------------------
def test_assignment_history(audit):
    cols = ("generation", "member_count", "per_member", "partitions", "imbalance", "moved", "min_moves", "verdict")
    # range over orders' two partitions: m1 holds both, then m2 joins and takes partition 1 (one
    # move, the fewest possible; every assignor moves one)
    rows = audit["run"]("assignment_history", group="orders-app")
    assert pick(rows, *cols) == [
        (1, 1, "c1..m1=2", 2, 0, None, None, "matches"),
        (2, 2, "c1..m1=1, c2..m2=1", 2, 0, 1, 1, "matches"),
    ]
    assert pick(rows, "what_if_imbalance", "what_if_moved") == [
        ("range=0 roundrobin=0 sticky=0 cooperative-sticky=0", "range=- roundrobin=- sticky=- cooperative-sticky=-"),
        # cooperative-sticky revokes partition 1 first: m2 empty for one rebalance
        ("range=0 roundrobin=0 sticky=0 cooperative-sticky=1", "range=1 roundrobin=1 sticky=1 cooperative-sticky=1"),
    ]
    # KIP-848: target assignment epochs, the server's assignor not recomputed
    assert pick(
        audit["run"]("assignment_history", group="stream-848"), "generation", "per_member", "moved", "verdict"
    ) == [
        (1, "ca..a=2", None, "not_recomputed"),
        (2, "ca..a=1, cb..b=1", 1, "not_recomputed"),
    ]


def test_unbalanced_groups(audit):
    cols = ("group_id", "generation", "imbalance", "verdict", "best_assignor", "reason")
    # groups with members now: empty-app is Empty and gone-app deleted; range, roundrobin and
    # sticky all balance orders-app with one move (cooperative-sticky would leave m2 empty for a
    # rebalance): the first by name
    assert pick(audit["run"]("unbalanced_groups", min_imbalance=0), *cols) == [
        ("orders-app", 2, 0, "matches", "range", "imbalance 0"),
        ("stream-848", 2, 0, "not_recomputed", None, "imbalance 0"),
    ]
    assert audit["run"]("unbalanced_groups") == []


# --- partition_owner_at ---------------------------------------------------------------------
OWNER = (
    "topic",
    "partition",
    "group_id",
    "group_type",
    "member_id",
    "client_id",
    "client_host",
    "generation",
    "pending_revocation",
    "since",
    "log_offset",
)


def test_partition_owner_at_classic(audit):
    o = audit["log"].off
    run = audit["run"]
    assert pick(run("partition_owner_at", topic="orders", partition=1, at=iso(T0 + 25 * MIN)), *OWNER) == [
        ("orders", 1, "orders-app", "classic", "m1", "c1", "/10.0.0.1", 1, False, ts(T0), o["orders-gen1"])
    ]
    assert pick(run("partition_owner_at", topic="orders", partition=1, at=iso(T0 + 35 * MIN)), *OWNER) == [
        ("orders", 1, "orders-app", "classic", "m2", "c2", "/10.0.0.2", 2, False, ts(T0 + 30 * MIN), o["orders-gen2"])
    ]
    assert pick(run("partition_owner_at", topic="logs", at=iso(T0 + 10 * MIN)), *OWNER) == [
        ("logs", 0, "empty-app", "classic", "e1", "ce", "/10.0.0.5", 1, False, ts(T0), o["empty-gen1"])
    ]
    assert run("partition_owner_at", topic="logs", at=iso(T0 + 2 * DAY)) == []  # the group is Empty
    assert run("partition_owner_at", topic="g", at=iso(NOW)) == []  # group tombstone


def test_partition_owner_at_consumer_group(audit):
    o = audit["log"].off
    run = lambda at, **kw: pick(audit["run"]("partition_owner_at", topic="events", at=iso(at), **kw), *OWNER)  # noqa: E731
    assert run(H2 + 5 * MIN, partition=1) == [
        ("events", 1, "stream-848", "consumer", "a", "ca", "/10.0.1.1", 1, False, ts(H2 + MIN), o["a-epoch1"])
    ]
    assert run(H2 + 11 * MIN + 30_000, partition=1) == [  # revoking: still owned
        ("events", 1, "stream-848", "consumer", "a", "ca", "/10.0.1.1", 1, True, ts(H2 + 11 * MIN), o["a-revoking"])
    ]
    assert run(H2 + 12 * MIN + 30_000, partition=1) == []  # released by a, not yet taken by b
    assert run(H2 + 14 * MIN) == [
        ("events", 0, "stream-848", "consumer", "a", "ca", "/10.0.1.1", 2, False, ts(H2 + 12 * MIN), o["a-epoch2"]),
        ("events", 1, "stream-848", "consumer", "b", "cb", "/10.0.1.2", 2, False, ts(H2 + 13 * MIN), o["b-epoch2"]),
    ]


# --- idle_groups ----------------------------------------------------------------------------
def test_idle_groups(audit):
    td = lambda ms: dt.timedelta(milliseconds=ms)  # noqa: E731
    cols = (
        "group_id",
        "group_type",
        "state",
        "last_commit",
        "last_group_record",
        "last_activity",
        "idle_for",
        "live_offsets",
    )
    assert pick(audit["run"]("idle_groups", now=iso(NOW), idle_for="2d"), *cols) == [
        ("legacy-ts", "classic", "Empty", ts(T0), None, ts(T0), td(3 * DAY), 1),
        ("gone-app", None, None, ts(T0 + 5 * MIN), ts(T0), ts(T0 + 5 * MIN), td(3 * DAY - 5 * MIN), 1),
        ("txn-app", "classic", "Empty", ts(T0 + 50 * MIN), None, ts(T0 + 50 * MIN), td(3 * DAY - 50 * MIN), 1),
        (
            "stream-848",
            "consumer",
            "Stable",
            ts(H2 + 15 * MIN),
            ts(H2 + 13 * MIN),
            ts(H2 + 15 * MIN),
            td(3 * DAY - 2 * HOUR - 15 * MIN),
            2,
        ),
    ]


# --- groups_expiring_within -----------------------------------------------------------------
EXP = ("group_id", "kind", "topic", "partition", "committed_offset", "expires_at", "already_due", "basis")


def test_groups_expiring_within_default_retention(audit):
    run = audit["run"]
    assert pick(run("groups_expiring_within", now=iso(NOW), within="7d"), *EXP) == [
        ("legacy-ts", "offset", "x", 0, 3, ts(T0 + 5 * DAY), False, "expire_timestamp"),
        ("legacy-ts", "group", None, None, None, ts(T0 + 5 * DAY), False, "last offset expires"),
        ("txn-app", "offset", "payments", 0, 25, ts(T0 + 7 * DAY + 35 * MIN), False, "commit_timestamp"),
        ("reset-app", "offset", "t", 0, 10, ts(T0 + 8 * DAY + 20 * MIN), False, "commit_timestamp"),
        ("reset-app", "group", None, None, None, ts(T0 + 8 * DAY + 20 * MIN), False, "last offset expires"),
        ("empty-app", "offset", "logs", 0, 9, ts(T0 + 8 * DAY + 30 * MIN), False, "current_state_timestamp"),
        ("empty-app", "group", None, None, None, ts(T0 + 8 * DAY + 30 * MIN), False, "last offset expires"),
    ]  # txn-app's group stays (open transaction); orders-app, stream-848 subscribe; gone-app has no group
    assert pick(run("groups_expiring_within", now=iso(NOW), within="P3D"), "group_id", "kind") == [
        ("legacy-ts", "offset"),
        ("legacy-ts", "group"),
    ]


def test_groups_expiring_within_one_day_retention(audit):
    assert pick(audit["run"]("groups_expiring_within", now=iso(NOW), within="24h", retention_minutes=1440), *EXP) == [
        ("txn-app", "offset", "payments", 0, 25, ts(T0 + DAY + 35 * MIN), True, "commit_timestamp"),
        ("reset-app", "offset", "t", 0, 10, ts(T0 + 2 * DAY + 20 * MIN), True, "commit_timestamp"),
        ("reset-app", "group", None, None, None, ts(T0 + 2 * DAY + 20 * MIN), True, "last offset expires"),
        ("empty-app", "offset", "logs", 0, 9, ts(T0 + 2 * DAY + 30 * MIN), True, "current_state_timestamp"),
        ("empty-app", "group", None, None, None, ts(T0 + 2 * DAY + 30 * MIN), True, "last offset expires"),
    ]


# --- validation, CLI, prompt ----------------------------------------------------------------
def test_parameters_are_validated(audit):
    q = load_queries()["committed_offset_as_of"]
    with pytest.raises(AuditError, match="unknown parameter"):
        bind(q, {"group": "g", "nope": "1"})
    with pytest.raises(AuditError, match="missing parameter 'group'"):
        bind(q, {})
    with pytest.raises(AuditError, match="'partition' \\(int\\)"):
        bind(q, {"group": "g", "partition": "zero"})
    # a value is bound, never pasted into the SQL: quotes are just characters of the group id
    assert audit["run"]("committed_offset_as_of", group="x' OR '1'='1") == []


def cli(args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=REPO, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    return subprocess.run(
        [sys.executable, "-m", "jobs.audit", *args],
        cwd=REPO,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_cli_list_query_json_and_errors(audit):
    wh = audit["warehouse"]
    listed = cli(["--warehouse", wh, "--list"])
    assert listed.returncode == 0
    names = [line.split(":")[0] for line in listed.stdout.splitlines() if not line.startswith(" ")]
    assert names == [
        "assignment_history",
        "commit_rate_per_hour",
        "committed_offset_as_of",
        "group_generation_history",
        "group_offsets_as_of_version",
        "groups_expiring_within",
        "groups_falling_behind",
        "idle_groups",
        "lag_at",
        "lag_history",
        "offset_rewinds",
        "partition_owner_at",
        "unbalanced_groups",
    ]
    assert "    --param at (timestamp) = now: " in listed.stdout
    assert cli(["--warehouse", wh, "no_such_query"]).returncode == 2
    bad = cli(["--warehouse", os.path.join(wh, "missing"), "idle_groups"])
    assert bad.returncode == 2 and "does not exist" in bad.stderr

    out = cli(
        [
            "--warehouse",
            wh,
            "committed_offset_as_of",
            "--param",
            "group=txn-app",
            "--param",
            "topic=payments",
            "--param",
            "partition=0",
            "--param",
            "at=2024-01-01T00:15:00Z",
            "--format",
            "json",
        ]
    )
    assert out.returncode == 0, out.stderr
    o = audit["log"].off
    assert json.loads(out.stdout) == [
        {
            "group_id": "txn-app",
            "topic": "payments",
            "partition": 0,
            "status": "committed",
            "committed_offset": 20,
            "leader_epoch": None,
            "metadata": "",
            "commit_timestamp": "2024-01-01T00:10:00Z",
            "expire_timestamp": None,
            "record_log_offset": o["pay0-20"],
            "record_time": "2024-01-01T00:10:00Z",
            "applied_at": "2024-01-01T00:15:00Z",
            "transactional": True,
            "producer_id": 1000,
            "offsets_partition": p_of("txn-app"),
        }
    ]


def test_interactive_prompt_via_stdin(audit):
    script = (
        "\n".join(
            [
                "SELECT group_id, count(*) AS n",
                "FROM group_offsets GROUP BY group_id ORDER BY group_id;",
                "SELECT nope FROM offsets_log;",  # an error: printed, the prompt goes on
                "SELECT committed_offset FROM group_offsets WHERE group_id = 'orders-app' AND partition = 1; "
                "SELECT committed_offset AS c FROM delta.`"
                + os.path.join(audit["warehouse"], "group_offsets")
                + f"` VERSION AS OF {audit['run1'][0]} WHERE group_id = 'orders-app' AND partition = 1;",
                "\\q",
                "SELECT 'not reached';",
            ]
        )
        + "\n"
    )
    res = cli(["--warehouse", audit["warehouse"], "--format", "csv"], stdin=script)
    assert res.returncode == 0, res.stderr
    out = res.stdout.splitlines()
    first = out.index("group_id,n")
    assert out[first : first + 8] == [
        "group_id,n",
        "empty-app,1",
        "gone-app,1",
        "legacy-ts,1",
        "orders-app,2",
        "reset-app,1",
        "stream-848,2",
        "txn-app,1",
    ]
    errors = [line for line in out if line.startswith("error: ")]
    assert len(errors) == 1 and "nope" in errors[0]
    assert out[out.index("committed_offset") + 1] == "260"
    assert out[out.index("c") + 1] == "200"  # time travel by path to the first run's version
    assert "not reached" not in res.stdout


def test_durations_statements_and_output_helpers():
    from lib.reporting.audit_queries import format_rows, iso_duration, parse_duration, split_statements

    td = dt.timedelta
    assert [parse_duration(t) for t in ("7d", "36h", "1d12h30m", "500ms", "2w", "P7D", "PT36H", "P1DT12H")] == [
        td(days=7),
        td(hours=36),
        td(days=1, hours=12, minutes=30),
        td(milliseconds=500),
        td(weeks=2),
        td(days=7),
        td(hours=36),
        td(days=1, hours=12),
    ]
    for bad in ("7x", "", "P", "7", "d"):
        with pytest.raises(ValueError):
            parse_duration(bad)
    assert [iso_duration(t) for t in (td(days=3), td(days=2, hours=23, minutes=55), td(0), -td(hours=1))] == [
        "P3D",
        "P2DT23H55M",
        "PT0S",
        "-PT1H",
    ]
    assert split_statements("select ';' as a; select 1 -- x;y\n; sel") == (
        ["select ';' as a", "select 1 -- x;y"],
        " sel",
    )
    rows = [{"g": "a", "t": ts(T0), "m": [{"x": 1}]}, {"g": None, "t": None, "m": None}]
    assert format_rows(["g", "t", "m"], rows, "table").splitlines() == [
        "g    | t                    | m",
        "-----+----------------------+----------",
        'a    | 2024-01-01T00:00:00Z | [{"x":1}]',
        "NULL | NULL                 | NULL",
        "(2 rows)",
    ]
    assert format_rows(["g", "t"], rows, "csv") == "g,t\na,2024-01-01T00:00:00Z\n,"
