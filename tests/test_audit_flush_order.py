"""AssignmentTracker audits the classic generations waiting in a batch before the KIP-848 epochs
waiting with them (lib.replay.assignment._flush). A classic generation over after an epoch in
log order may raise a topic's known partition count: the epoch's row must still show the count
as it was at its own record (audit_generation in log order, as audit_records does it). The rows
are checked against that reference, for a raise of a topic the epoch subscribes to (the epochs
are audited again in turn) and of a topic it does not (their rows stand). The epochs waiting are
audited as one batch of the kernels: the same rows, previous owners and counts as one by one."""

from __future__ import annotations

import dataclasses
import random
from types import SimpleNamespace

import pyarrow as pa
import pytest

from lib.assignors.audit import CONSUMER, AuditMember, Generation, audit_generation, classic_generation
from lib.assignors.fast_audit import GROUP_METADATA_TYPE, audit_rows_table, audit_view, epoch_value, epoch_values
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


def random_epochs(rng: random.Random, n: int) -> list[Generation]:
    """KIP-848 epochs of a few groups in log order: members with or without instance and rack
    ids, subscriptions over a few topics, targets within and beyond them (a partition of a topic
    the member does not subscribe to), some members sharing a partition or an instance id."""
    epochs = []
    for i in range(n):
        group = f"g{rng.randrange(4)}"
        members = []
        for k in range(rng.randrange(1, 5)):
            topics = tuple(sorted(rng.sample(["a", "b", "c", "d"], rng.randrange(0, 3))))
            pool = [*topics, *(["d"] if rng.random() < 0.1 else [])]
            assignment = tuple((t, p) for t in pool for p in sorted(rng.sample(range(6), rng.randrange(0, 4))))
            members.append(
                AuditMember(
                    member_id=f"m{rng.randrange(6)}-{k}",
                    topics=topics,
                    assignment=assignment,
                    group_instance_id=rng.choice([None, None, f"i{rng.randrange(3)}"]),
                    client_id=rng.choice([None, "c"]),
                    rack_id=rng.choice([None, "r1"]),
                )
            )
        members.sort(key=lambda m: m.member_id)
        epochs.append(
            Generation(group, CONSUMER, i, 1000 + i, rng.choice([None, "uniform", "range"]), tuple(members),
                       PARTITION, 100 + i, protocol_type=CONSUMER)
        )  # fmt: skip
    return epochs


@pytest.mark.parametrize("seed", range(12))
def test_epochs_in_one_batch_audit_as_one_by_one(seed):
    """AssignmentTracker._audit_epochs (the kernels, in one batch) gives the rows, the previous
    owners and the known counts _audit_consumer (audit_generation) gives epoch by epoch."""
    rng = random.Random(seed)
    epochs = random_epochs(rng, 40)
    carried = {"g0": {"members": [{"member_id": "x", "instance": "i1", "assignment": [["a", 1], ["b", 0]]}]}}
    batched, single = AssignmentTracker({"a": 3, "b": 5}), AssignmentTracker({"a": 3, "b": 5})
    for tracker in (batched, single):
        tracker.load("g0", {"previous": carried["g0"]})
        tracker._apply_newer()
    batched._audit_epochs(epochs)
    for gen in epochs:
        single._audit_consumer(gen)
    single._apply_newer()
    got = sorted((r for t in batched.outcome.closed for r in t.to_pylist()), key=lambda r: r["log_offset"])
    want = sorted(audit_rows_table(single._consumer_rows).to_pylist(), key=lambda r: r["log_offset"])
    assert len(got) == len(epochs)
    assert got == want
    assert batched._previous.states() == single._previous.states()
    assert batched.known == single.known


def test_rows_of_generations_over_go_to_the_sink_as_they_are_made():
    """With a sink (as the replay task sets one: its audit file), the rows of generations over
    leave the tracker when their batch is audited (by the first call after the batch's end that
    reads or adds audits: a batch's at most are held), not at the partition's end: the tracker
    holds none of them at finish, and the sink has the rows, in the order, that a tracker
    without one returns in `closed`."""
    values = [classic_value(1, "x", [0, 1]), classic_value(2, "x", [0, 1]), classic_value(3, "y", [0])]
    array = pa.array(values, GROUP_METADATA_TYPE)
    sunk: list[pa.Table] = []
    streaming, holding = AssignmentTracker(FLOORS), AssignmentTracker(FLOORS)
    streaming.outcome.sink = sunk.append
    for tracker in (streaming, holding):
        # generation 1 is over at generation 2's record; generation 2 at the epoch's batch end
        tracker.classic("C", 1, PARTITION, 10, 1000, array, 0)
        tracker.classic("C", 2, PARTITION, 12, 1002, array, 1)
        tracker.end_batch()
    assert sunk == []  # (due)
    for tracker in (streaming, holding):
        tracker.consumer_epoch("K", 7, PARTITION, 13, 1003, consumer_fold())
        assert [r["log_offset"] for t in sunk for r in t.to_pylist()] == [10]  # before finish
        tracker.classic("C", 3, PARTITION, 14, 1004, array, 2)
        tracker.end_batch()
    done, held = streaming.finish(), holding.finish()
    assert done.closed == []
    assert [r for t in sunk for r in t.to_pylist()] == [r for t in held.closed for r in t.to_pylist()]
    assert [r["log_offset"] for t in sunk for r in t.to_pylist()] == [10, 12, 13]
    assert [r for t in done.opened for r in t.to_pylist()] == [r for t in held.opened for r in t.to_pylist()]
    assert [r["log_offset"] for t in done.opened for r in t.to_pylist()] == [14]
    assert done.rows == held.rows == 4


@pytest.mark.parametrize("epoch", [None, "waiting", "raised"])
def test_the_last_flush_and_the_open_generations_in_one_batch_audit_as_in_two(monkeypatch, epoch):
    """At finish, the generations over since the batch's end and those still open are audited
    in one batch of the kernels (AssignmentTracker._closed_and_opened): the same rows, in the same
    order, the same owners kept for the next run and the same counts as the flush then the open
    generations' own batch (that path forced). With a KIP-848 epoch waiting, the same; where a
    classic generation raises a count the epoch reads, the two calls (the flush redoes them in
    turn)."""
    import lib.replay.assignment as tracking

    values = [
        classic_value(1, "x", [0, 1]),  # A gen 1: over at gen 2
        classic_value(2, "x", [1]),  # A gen 2: open
        classic_value(4, "y", [0]),  # B gen 4: over at gen 5
        classic_value(5, "y", [0, 1]),  # B gen 5: open
        classic_value(7, "x", [0, 4] if epoch == "raised" else [0]),  # C gen 7: over at gen 8
        classic_value(8, "y", [1]),  # C gen 8: open
        classic_value(3, "x", [0]),  # D gen 3: over at its tombstone
    ]
    array = pa.array(values, GROUP_METADATA_TYPE)
    batches = {"merged": 0, "two": 0}

    def run(merged: bool):
        tracker = AssignmentTracker(FLOORS)
        tracker.load("A", {"previous": {"members": [{"member_id": "c-1", "instance": None, "assignment": [["x", 0]]}]}})
        if not merged:
            monkeypatch.setattr(tracker, "_closed_and_opened", lambda opened: False)
        tracker.classic("A", 1, PARTITION, 10, 1000, array, 0)
        tracker.classic("B", 4, PARTITION, 11, 1001, array, 2)
        tracker.classic("C", 7, PARTITION, 12, 1002, array, 4)
        if epoch is not None:
            tracker.consumer_epoch("K", 9, PARTITION, 13, 1003, consumer_fold())
        tracker.classic("A", 2, PARTITION, 14, 1004, array, 1)
        tracker.classic("D", 3, PARTITION, 15, 1005, array, 6)
        tracker.classic("B", 5, PARTITION, 16, 1006, array, 3)
        tracker.classic("C", 8, PARTITION, 17, 1007, array, 5)
        tracker.group_deleted("D")
        tracker.end_batch()
        done = tracker.finish()
        closed = [comparable(r) for t in done.closed for r in t.to_pylist()]
        opened = [comparable(r) for t in done.opened for r in t.to_pylist()]
        states = {g: tracker.state(g) for g in "ABCDK"}
        return closed, opened, states, dict(tracker.known)

    def counting(name: str, key: str):
        kernels = getattr(tracking, name)

        def counted(*args, **kwargs):
            batches[key] += 1
            return kernels(*args, **kwargs)

        monkeypatch.setattr(tracking, name, counted)

    counting("audit_closed_then_open", "merged")
    counting("audit_classic_batch", "two")
    one = run(merged=True)
    calls = dict(batches)
    two = run(merged=False)
    assert one == two
    closed, opened, states, known = one
    assert [(r["group_id"], r["generation"]) for r in closed] == [("A", 1), ("B", 4), ("C", 7), ("D", 3)] + (
        [("K", 9)] if epoch else []
    )
    assert [(r["group_id"], r["generation"]) for r in opened] == [("A", 2), ("B", 5), ("C", 8)]
    # A's gen 1 against the loaded owners (x-0 kept), gen 2 against gen 1 (x-0 taken back)
    assert (closed[0]["moved"], opened[0]["moved"]) == (0, 1)
    assert states["A"]["previous"]["members"][0]["assignment"] == [["x", 0], ["x", 1]]  # gen 1's
    assert states["A"]["open"]["owners"]["members"][0]["assignment"] == [["x", 1]]  # gen 2's
    assert states["D"] is None
    assert known == ({"x": 5, "y": 2} if epoch == "raised" else {"x": 2, "y": 2})
    # one batch of the kernels at finish; raised: that batch tried, then the flush's (classic
    # and epoch together, then again in turn: the epoch first in log order, alone, in Python;
    # the classic ones after it) and the open generations' own
    assert calls == ({"merged": 1, "two": 0} if epoch != "raised" else {"merged": 1, "two": 3})


@pytest.mark.parametrize("case", ["joined", "raised", "shared group", "other counts"])
def test_partitions_finished_together_audit_as_each_alone(monkeypatch, case):
    """finish_together (a replay task's small partitions, their finish in one batch of the
    kernels) gives each tracker the rows, in the same order, the owners kept for the next run
    and the counts its own finish gives. It joins trackers only where that holds: not where a
    generation of the batch raises a count (the rows of partitions after it would read it), a
    group is in two trackers, or the trackers know different counts; those finish alone."""
    import lib.replay.assignment as tracking

    values = [
        classic_value(1, "x", [0, 1]),  # gen 1: over at gen 2
        classic_value(2, "x", [1]),  # gen 2: open
        classic_value(4, "y", [0]),  # gen 4: over at gen 5
        classic_value(5, "y", [0, 1]),  # gen 5: open
        classic_value(3, "x", [0, 4] if case == "raised" else [0]),  # gen 3: over at its tombstone
    ]
    array = pa.array(values, GROUP_METADATA_TYPE)
    calls = {"together": 0, "alone": 0}

    def feed(tracker: AssignmentTracker, p: int) -> None:
        a, b, d = (f"A{p}", f"B{p}", f"D{p}") if not (case == "shared group" and p == 2) else ("A1", "B2", "D2")
        tracker.load(a, {"previous": {"members": [{"member_id": "c-1", "instance": None, "assignment": [["x", 0]]}]}})
        if case == "other counts" and p == 2:
            tracker.known["y"] = 3
        tracker.classic(a, 1, p, 10, 1000, array, 0)
        tracker.classic(b, 4, p, 11, 1001, array, 2)
        if p == 2:
            tracker.consumer_epoch(f"K{p}", 9, p, 12, 1002, consumer_fold())
        tracker.classic(a, 2, p, 13, 1003, array, 1)
        tracker.classic(d, 3, p, 14, 1004, array, 4)
        tracker.classic(b, 5, p, 15, 1005, array, 3)
        tracker.group_deleted(d)
        tracker.end_batch()

    def results(tracker: AssignmentTracker, p: int):
        done = tracker.finish()
        closed = [comparable(r) for t in done.closed for r in t.to_pylist()]
        opened = [comparable(r) for t in done.opened for r in t.to_pylist()]
        states = {g: tracker.state(g) for g in (f"A{p}", f"B{p}", f"D{p}", f"K{p}", "A1")}
        return closed, opened, states, dict(tracker.known)

    def run(together: bool):
        trackers = [AssignmentTracker(FLOORS) for _ in range(3)]
        for p, tracker in enumerate(trackers, start=1):
            feed(tracker, p)
        if together:
            tracking.finish_together(trackers)
        return [results(tracker, p) for p, tracker in enumerate(trackers, start=1)]

    for name, key in (("audit_closed_then_open_rows", "together"), ("audit_closed_then_open", "alone")):
        kernels = getattr(tracking, name)

        def counted(*args, _kernels=kernels, _key=key, **kwargs):
            calls[_key] += 1
            return _kernels(*args, **kwargs)

        monkeypatch.setattr(tracking, name, counted)
    alone = run(together=False)
    assert calls == {"together": 0, "alone": 3}
    calls.update(together=0, alone=0)
    together = run(together=True)
    assert together == alone
    # the rows: each partition's generations over, then its open ones
    for p, (closed, opened, _, _) in enumerate(together, start=1):
        assert [(r["group_id"], r["generation"]) for r in closed] == [
            *([("A1" if case == "shared group" and p == 2 else f"A{p}", 1)]),
            (f"B{p}", 4),
            (f"D{p}", 3),
            *([(f"K{p}", 9)] if p == 2 else []),  # (an epoch after the classic generations, as alone)
        ]
        assert [r["offsets_partition"] for r in closed + opened] == [p] * len(closed + opened)
    closed, opened, states, known = together[0]
    assert (closed[0]["moved"], opened[0]["moved"]) == (0, 1)  # against the loaded owners, then gen 1's
    assert states["A1"]["previous"]["members"][0]["assignment"] == [["x", 0], ["x", 1]]
    assert states["A1"]["open"]["owners"]["members"][0]["assignment"] == [["x", 1]]
    assert states["D1"] is None
    assert known == ({"x": 5, "y": 2} if case == "raised" else FLOORS)
    # one batch of the kernels for the three partitions; else each its own (raised: the joint
    # batch tried first, and nothing of it kept)
    assert (
        calls
        == {
            "joined": {"together": 1, "alone": 0},
            "raised": {"together": 1, "alone": 3},
            "shared group": {"together": 0, "alone": 3},
            "other counts": {"together": 0, "alone": 3},
        }[case]
    )


@pytest.mark.parametrize("seed", range(6))
def test_epoch_values_are_epoch_value_as_arrow(seed):
    """epoch_values (the epochs' values built as columns) equals epoch_value's dicts made Arrow and
    put in audit_view, as the flush built them before: every field, null or not, and None where
    one epoch has no value there (no members; an empty instance or rack id)."""
    rng = random.Random(seed)
    epochs = random_epochs(rng, 30)
    expected = audit_view(pa.array([epoch_value(gen) for gen in epochs], GROUP_METADATA_TYPE))
    got = epoch_values(epochs)
    assert got is not None and got.type == expected.type
    assert got.equals(expected)
    assert got.to_pylist() == expected.to_pylist()
    assert epoch_values(epochs[:1]).equals(expected.slice(0, 1))
    member = epochs[0].members[0]
    for odd in (
        dataclasses.replace(epochs[1], members=()),
        dataclasses.replace(epochs[1], members=(dataclasses.replace(member, group_instance_id=""),)),
        dataclasses.replace(epochs[1], members=(dataclasses.replace(member, rack_id=""),)),
    ):
        assert epoch_value(odd) is None
        assert epoch_values([epochs[0], odd]) is None
    assert epoch_values([]) is None
