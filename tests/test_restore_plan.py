"""The restore plan (lib.restore.plan): what a restore does with each partition, and the CSV
kafka-consumer-groups --reset-offsets --from-file reads. Pure: hand-made inputs, exact rows."""

from __future__ import annotations

import pytest

from lib.restore.plan import (
    Committed,
    PartitionNow,
    Target,
    blocking,
    plan_restore,
    reset_offsets_csv,
    to_apply,
)


def _case(below="refuse", above="refuse"):
    targets = [
        Target("t", 0, Committed(40, 3, "m0"), 1_000),  # back from 90
        Target("t", 1, Committed(7, None, ""), 1_000),  # below the log start 10
        Target("t", 2, Committed(500, 2, None), 1_000),  # above the log end 100
        Target("t", 3, None, 1_000),  # deleted before the instant
        Target("t", 4, Committed(60, 1, "x"), 1_000),  # already there
        Target("gone", 0, Committed(5, None, None), 1_000),  # topic deleted since
    ]
    current = {
        ("t", 0): Committed(90, 4, "m1"),
        ("t", 3): Committed(12, None, None),
        ("t", 4): Committed(60, 1, "x"),
        ("t", 5): Committed(8, None, None),  # no offset at the instant
    }
    now = {("t", p): PartitionNow(10 if p == 1 else 0, 100) for p in range(6)} | {("gone", 0): None}
    return plan_restore(targets, current, now, below, above)


def _rows(plan):
    return [
        (
            p.topic,
            p.partition,
            p.action,
            p.current.offset if p.current else None,
            p.target.offset if p.target else None,
            p.difference,
            p.apply,
        )
        for p in plan
    ]


def test_every_case_gets_its_action_and_nothing_is_guessed():
    plan = _case()
    assert _rows(plan) == [
        ("gone", 0, "not_in_cluster", None, 5, None, None),
        ("t", 0, "restore", 90, 40, -50, Committed(40, 3, "m0")),
        ("t", 1, "below_log_start", None, 7, None, None),
        ("t", 2, "above_log_end", None, 500, None, None),
        ("t", 3, "no_offset_then", 12, None, None, None),
        ("t", 4, "unchanged", 60, 60, 0, None),
        ("t", 5, "no_offset_then", 8, None, None, None),
    ]
    assert [(p.topic, p.partition) for p in blocking(plan)] == [("t", 1), ("t", 2)]
    assert plan[2].note.startswith("target 7 is below the log start 10: its records are gone")
    assert "auto.offset.reset" in plan[2].note
    assert plan[4].note == "deleted before the instant; left as it is"
    assert plan[6].note == "no offset committed by the instant; left as it is"
    assert (plan[1].log_start, plan[1].log_end) == (0, 100)


@pytest.mark.parametrize(
    ("choice", "p1", "p2"),
    [
        ("skip", ("skipped", None), ("skipped", None)),
        ("clamp", ("restore", Committed(10, None, "")), ("restore", Committed(100, None, None))),
    ],
)
def test_the_operators_choice_for_targets_outside_the_log(choice, p1, p2):
    plan = _case(choice, choice)
    by = {(p.topic, p.partition): (p.action, p.apply) for p in plan}
    assert by[("t", 1)] == p1 and by[("t", 2)] == p2
    assert blocking(plan) == []


def test_what_execute_commits_and_the_csv_of_it():
    plan = _case("clamp", "skip")
    assert to_apply(plan) == {("t", 0): Committed(40, 3, "m0"), ("t", 1): Committed(10, None, "")}
    assert reset_offsets_csv(plan) == "t,0,40\nt,1,10\n"
