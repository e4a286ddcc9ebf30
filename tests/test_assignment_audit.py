"""The assignment audit of hand-built group histories (lib.assignors.audit; no Spark): spread,
moves, the fewest moves a balanced assignment could make, verdicts against Kafka's assignors,
worked out by hand."""

from __future__ import annotations

import json

from lib.assignors.audit import audit_records
from schemas.records import RecordType as R

T0, T1 = "t0", "t1"


def member(member_id, assignment, topics=(T0, T1), instance=None, owned=()):
    return {
        "member_id": member_id,
        "group_instance_id": instance,
        "client_id": member_id.split("-")[0],
        "rack_id": None,
        "subscribed_topics": list(topics),
        "owned_partitions": [{"topic": t, "partitions": ps} for t, ps in owned],
        "generation_id": -1,
        "subscription_user_data": None,
        "assignment": [{"topic": t, "partitions": ps} for t, ps in assignment or ()],
        "assignment_bytes": b"\x00\x01" if assignment is not None else b"",
    }


def group_record(offset, generation, members, protocol="range", group="g", ts=1_000):
    return {
        "offsets_partition": 3,
        "log_offset": offset,
        "log_timestamp_ms": ts + offset,
        "record_type": R.GROUP_METADATA,
        "group_id": group,
        "member_id": None,
        "is_tombstone": False,
        "group_metadata": {
            "protocol_type": "consumer",
            "generation": generation,
            "protocol": protocol,
            "leader": members[0]["member_id"] if members else None,
            "members": members,
        },
        "value_json": None,
    }


def tombstone(offset, group="g"):
    return {**group_record(offset, 0, []), "is_tombstone": True, "group_metadata": None, "group_id": group}


def tps(row_value):
    return {(a["topic"], p) for a in row_value for p in a["partitions"]}


def what_if(row):
    return {w["assignor"]: (w["imbalance"], w["moved"], w["unassigned"]) for w in row["what_if"]}


# Kafka's RangeAssignor over two topics of 10 partitions: three members, then a fourth joins.
GEN1 = [
    member("c0-1", [(T0, [0, 1, 2, 3]), (T1, [0, 1, 2, 3])]),
    member("c1-1", [(T0, [4, 5, 6]), (T1, [4, 5, 6])]),
    member("c2-1", [(T0, [7, 8, 9]), (T1, [7, 8, 9])]),
]
GEN2 = [
    member("c0-1", [(T0, [0, 1, 2]), (T1, [0, 1, 2])]),
    member("c1-1", [(T0, [3, 4, 5]), (T1, [3, 4, 5])]),
    member("c2-1", [(T0, [6, 7]), (T1, [6, 7])]),
    member("c3-1", [(T0, [8, 9]), (T1, [8, 9])]),
]
FLOORS = {T0: 10, T1: 10}


def test_range_skew_and_moves_against_the_fewest_possible():
    rows = list(audit_records([group_record(10, 1, GEN1), group_record(20, 2, GEN2)], FLOORS))
    first, second = rows
    assert (first["generation"], first["log_offset"], first["at_ms"]) == (1, 10, 1_010)
    assert [m["partition_count"] for m in first["members"]] == [8, 6, 6]
    assert (first["partitions"], first["assigned"], first["min_per_member"], first["max_per_member"]) == (20, 20, 6, 8)
    assert (first["imbalance"], first["moved"], first["min_moves"]) == (2, None, None)
    assert (first["verdict"], first["differing_members"]) == ("matches", [])
    # 20 partitions over 3: range keeps its skew (8/6/6), the others spread 7/7/6
    assert {k: v[0] for k, v in what_if(first).items()} == {
        "range": 2,
        "roundrobin": 1,
        "sticky": 1,
        "cooperative-sticky": 1,
    }
    # Range moves t*-3 (c0 -> c1), t*-6 (c1 -> c2), t*-8 and t*-9 (c2 -> c3): 8. Balanced, each
    # of four holds 5: c0 keeps 5 of its 8, c1 and c2 5 of their 6, so 5 must move.
    assert [m["partition_count"] for m in second["members"]] == [6, 6, 4, 4]
    assert (second["moved"], second["min_moves"], second["imbalance"], second["verdict"]) == (8, 5, 2, "matches")
    w = what_if(second)
    assert w["range"] == (2, 8, 0)
    assert w["sticky"] == (0, 5, 0)  # the fewest, all given to c3
    # the same five, revoked first: unassigned in this generation (c3 gets them in the next)
    assert w["cooperative-sticky"] == (5, 5, 5)


def test_kafka_python_groupby_bug_differs_from_kafkas_range():
    # broker order dynamic, static, dynamic: kafka-python keeps only the last run of dynamic
    # members, so a-1 gets nothing; Kafka's RangeAssignor puts the static member first, then the
    # dynamic ones by member id: i1 (b-1) 0-1, a-1 2-3, c-1 4-5
    members = [
        member("a-1", [], topics=(T0,)),
        member("b-1", [(T0, [0, 1, 2])], topics=(T0,), instance="i1"),
        member("c-1", [(T0, [3, 4, 5])], topics=(T0,)),
    ]
    (row,) = audit_records([group_record(5, 1, members)], {T0: 6})
    assert row["verdict"] == "differs" and row["differing_members"] == ["a-1", "b-1", "c-1"]
    assert {r["member_id"]: tps(r["assignment"]) for r in row["reference"]} == {
        "a-1": {(T0, 2), (T0, 3)},
        "b-1": {(T0, 0), (T0, 1)},
        "c-1": {(T0, 4), (T0, 5)},
    }
    assert (row["imbalance"], row["unassigned"], row["assigned_twice"]) == (3, [], [])


def test_unassigned_twice_custom_and_a_generation_before_its_sync():
    before_sync = [member("c0-1", None), member("c1-1", None)]  # JoinGroup done, no assignment yet
    synced = [
        member("c0-1", [(T0, [0, 1, 2, 3, 4])]),
        member("c1-1", [(T0, [4, 5, 6, 7, 8])]),
    ]
    rows = list(audit_records([group_record(1, 1, before_sync, "mine"), group_record(2, 1, synced, "mine")], FLOORS))
    assert len(rows) == 1 and rows[0]["log_offset"] == 2
    row = rows[0]
    assert row["verdict"] == "custom" and row["reference"] is None
    assert row["assigned_twice"] == [{"topic": T0, "partitions": [4]}]
    assert row["unassigned"] == [{"topic": T0, "partitions": [9]}, {"topic": T1, "partitions": list(range(10))}]
    assert (row["partitions"], row["assigned"]) == (20, 9)


def test_a_deleted_group_starts_over():
    rows = list(audit_records([group_record(1, 1, GEN1), tombstone(2), group_record(3, 1, GEN1)], FLOORS))
    assert [(r["generation"], r["moved"]) for r in rows] == [(1, None), (1, None)]


def test_consumer_group_target_assignments():
    def rec(offset, rtype, value, member_id=None):
        return {
            "offsets_partition": 3,
            "log_offset": offset,
            "log_timestamp_ms": 5_000 + offset,
            "record_type": rtype,
            "group_id": "kip848",
            "member_id": member_id,
            "is_tombstone": value is None,
            "group_metadata": None,
            "value_json": None if value is None else json.dumps(value),
        }

    meta = {"clientId": "c", "clientHost": "/h", "subscribedTopicNames": [T0], "serverAssignor": "uniform"}
    records = [
        rec(1, R.CONSUMER_GROUP_MEMBER_METADATA, meta, "m1"),
        rec(2, R.CONSUMER_GROUP_MEMBER_METADATA, meta, "m2"),
        rec(
            3,
            R.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
            {"topicPartitions": [{"topicId": "ID0", "partitions": [0, 1, 2]}]},
            "m1",
        ),
        rec(
            4,
            R.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
            {"topicPartitions": [{"topicId": "ID0", "partitions": [3]}]},
            "m2",
        ),
        rec(5, R.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, {"assignmentEpoch": 7}),
        rec(6, R.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, None, "m2"),  # m2 leaves
        rec(
            7,
            R.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
            {"topicPartitions": [{"topicId": "ID0", "partitions": [0, 1, 2, 3]}]},
            "m1",
        ),
        rec(8, R.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, {"assignmentEpoch": 8}),
    ]
    first, second = audit_records(records, {T0: 4}, {"ID0": T0})
    assert (first["group_type"], first["generation"], first["assignor"], first["verdict"]) == (
        "consumer",
        7,
        "uniform",
        "not_recomputed",
    )
    assert [(m["member_id"], m["partition_count"]) for m in first["members"]] == [("m1", 3), ("m2", 1)]
    assert (first["imbalance"], first["topics"]) == (2, [{"topic": T0, "partitions": 4}])
    # m2's partition 3 goes to m1: one move, and one is the fewest (m2 left)
    assert (second["member_count"], second["moved"], second["min_moves"], second["imbalance"]) == (1, 1, 1, 0)


def test_a_topic_the_leader_had_no_metadata_for():
    # right after the topic is created the leader's metadata lacks it: Kafka's assignors skip it,
    # so an empty assignment matches; its partitions show as unassigned
    members = [member("a-1", [], topics=(T0,))]
    (row,) = audit_records([group_record(5, 1, members)], {T0: 3})
    assert (row["verdict"], row["differing_members"]) == ("matches", [])
    assert row["unassigned"] == [{"topic": T0, "partitions": [0, 1, 2]}]
    # the group's own assignor is recomputed as the leader saw it, the others knowing the topic
    assert what_if(row)["range"] == (0, None, 3) and what_if(row)["roundrobin"] == (0, None, 0)


def test_as_good_but_other_partitions_is_equivalent():
    # Kafka's range gives c0 t0-0,1 and c1 t0-2,3; this leader swapped them: as many each, all
    # assigned, nothing moved either way
    members = [member("c0-1", [(T0, [2, 3])], topics=(T0,)), member("c1-1", [(T0, [0, 1])], topics=(T0,))]
    (row,) = audit_records([group_record(5, 1, members)], {T0: 4})
    assert (row["verdict"], row["differing_members"]) == ("equivalent", ["c0-1", "c1-1"])
    # one member holding three is not as good: differs
    members = [member("c0-1", [(T0, [0, 1, 2])], topics=(T0,)), member("c1-1", [(T0, [3])], topics=(T0,))]
    (row,) = audit_records([group_record(5, 1, members)], {T0: 4})
    assert (row["verdict"], row["differing_members"]) == ("differs", ["c0-1", "c1-1"])
