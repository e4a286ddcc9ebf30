"""AssignmentTracker audits the classic generations waiting in a batch before the KIP-848 epochs
waiting with them (lib.replay.assignment._flush). A classic generation over after an epoch in
log order may raise a topic's known partition count: the epoch's row must still show the count
as it was at its own record (audit_generation in log order, as audit_records does it). The rows
are checked against that reference, for a raise of a topic the epoch subscribes to (the epochs
are audited again in turn) and of a topic it does not (their rows stand)."""

from __future__ import annotations

from types import SimpleNamespace

import pyarrow as pa
import pytest

from lib.assignors.audit import CONSUMER, AuditMember, Generation, audit_generation, classic_generation
from lib.assignors.fast_audit import GROUP_METADATA_TYPE
from lib.replay.assignment import AssignmentTracker

FLOORS = {"x": 2, "y": 2}
PARTITION = 3


def classic_value(generation: int, topic: str, partitions: list[int]) -> dict:
    """A range group's GroupMetadata value: one member subscribed to x and y, assigned `partitions`
    of `topic`."""
    return {
        "protocol_type": "consumer",
        "generation": generation,
        "protocol": "range",
        "leader": "c-1",
        "members": [
            {
                "member_id": "c-1",
                "client_id": "client",
                "subscribed_topics": ["x", "y"],
                "assignment": [{"topic": topic, "partitions": partitions}],
                "assignment_bytes": b"\x00\x01",
            }
        ],
    }


def consumer_fold() -> SimpleNamespace:
    """A KIP-848 group's fold after its target assignment record: one member subscribed to x,
    its target x-0 and x-1 (within x's known count: the epoch waits for the flush)."""
    return SimpleNamespace(
        topic_names={},
        target={"k-1": {"topicPartitions": [{"topicId": "x", "partitions": [0, 1]}]}},
        members={"k-1": {"subscribedTopicNames": ["x"], "serverAssignor": "uniform", "clientId": "kc"}},
    )


def comparable(row: dict) -> dict:
    return {k: v for k, v in row.items() if k not in ("what_if", "at", "at_ms")}


@pytest.mark.parametrize("raised", ["x", "y"])
def test_an_epoch_waiting_reads_the_counts_of_its_own_record(raised):
    values = [classic_value(1, raised, [0, 5]), classic_value(2, "x", [0, 1])]
    array = pa.array(values, GROUP_METADATA_TYPE)
    tracker = AssignmentTracker(FLOORS)
    # log order: C's generation 1 (offset 10), K's target epoch (11), C's generation 2 (12),
    # which ends generation 1: its assignment of partition 5 raises the topic's count
    tracker.classic("C", 1, PARTITION, 10, 1000, array, 0)
    tracker.consumer_epoch("K", 7, PARTITION, 11, 1001, consumer_fold())
    tracker.classic("C", 2, PARTITION, 12, 1002, array, 1)
    tracker.end_batch()
    outcome = tracker.finish()
    got = [r for t in outcome.closed + outcome.opened for r in t.to_pylist()]

    # the reference: audit_generation record by record, the counts raised in log order
    known = dict(FLOORS)
    member = AuditMember(member_id="k-1", topics=("x",), assignment=(("x", 0), ("x", 1)), client_id="kc")
    epoch = Generation("K", CONSUMER, 7, 1001, "uniform", (member,), PARTITION, 11, protocol_type=CONSUMER)
    want_epoch = audit_generation(epoch, None, known)
    first = classic_generation("C", values[0], 1000, PARTITION, 10)
    known[raised] = 6
    want_first = audit_generation(first, None, known)
    second = classic_generation("C", values[1], 1002, PARTITION, 12)
    want_second = audit_generation(second, first, known)

    by_key = {(r["group_id"], r["log_offset"]): comparable(r) for r in got}
    assert sorted(by_key) == [("C", 10), ("C", 12), ("K", 11)]
    assert by_key[("K", 11)] == comparable(want_epoch)
    assert by_key[("K", 11)]["topics"] == [{"topic": "x", "partitions": 2}]
    assert by_key[("K", 11)]["unassigned"] == []
    for key, want in ((("C", 10), want_first), (("C", 12), want_second)):
        assert {k: by_key[key][k] for k in ("topics", "partitions", "unassigned", "moved")} == {
            k: want[k] for k in ("topics", "partitions", "unassigned", "moved")
        }
    assert by_key[("C", 10)]["topics"] == sorted(
        [
            {"topic": "x", "partitions": 6 if raised == "x" else 2},
            {"topic": "y", "partitions": 6 if raised == "y" else 2},
        ],
        key=lambda t: t["topic"],
    )
    assert tracker.known == {**FLOORS, raised: 6}
