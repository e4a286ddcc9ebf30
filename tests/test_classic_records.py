"""AssignmentTracker.classic_records (the compiled loop's GroupMetadata records of a batch, as
arrays) leaves the tracker as `classic` and `group_deleted` record by record do: the same
entries waiting for the audit (each generation over, with its value and place, and the
tombstones), the same open generations, and the same carried state, on random sequences of
values and tombstones of a few groups over several batches, with generations carried from an
earlier run (audited or not) and from earlier batches."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from lib.assignors.fast_audit import GROUP_METADATA_TYPE
from lib.replay.assignment import AssignmentTracker

GROUPS = ["a", "b", "c", "d"]
PARTITION = 7


def _values(n: int, batch: int) -> pa.Array:
    """A batch's group_metadata column: each row a value whose generation tells batch and row
    (so a wrongly picked value shows in the comparison)."""
    rows = [
        {"protocol_type": "consumer", "generation": batch * 1000 + r, "protocol": "range", "members": []}
        for r in range(n)
    ]
    return pa.array(rows, GROUP_METADATA_TYPE)


def _trackers(carried: dict) -> tuple[AssignmentTracker, AssignmentTracker]:
    pair = (AssignmentTracker(), AssignmentTracker())
    for tracker in pair:
        for group_id, state in carried.items():
            tracker.load(group_id, state)
    return pair


def _pending(tracker: AssignmentTracker) -> list:
    """The entries waiting, as the audit reads them, and clears them (a flush without the audit)."""
    if not tracker._pending:
        return []
    batch = tracker._batch(list(tracker._pending))
    tracker._pending, tracker._pending_kind = [], {}
    return [
        (g, d, p, o, a, None if v is None else v["generation"])
        for g, d, p, o, a, v in zip(
            batch.group_id.to_pylist(),
            batch.deleted.to_pylist(),
            batch.offsets_partition.to_pylist(),
            batch.log_offset.to_pylist(),
            batch.at_ms.to_pylist(),
            batch.group_metadata.to_pylist(),
        )
    ]


def _state(tracker: AssignmentTracker) -> tuple:
    opens = {
        g: (
            o.generation,
            o.log_offset,
            o.at_ms,
            o.carried,
            o.audited,
            None if o.carried else o.values[o.row]["generation"],
        )
        for g, o in tracker.open.items()
    }
    newer = dict(tracker._newer)
    out = tracker.outcome
    return opens, newer, sorted(tracker.touched), sorted(out.carried_closed), sorted(out.carried_replaced)


@pytest.mark.parametrize("seed", range(40))
def test_classic_records_equals_record_by_record(seed):
    rng = random.Random(seed)
    carried = {}
    for group_id in GROUPS:
        pick = rng.random()
        if pick < 0.3:  # an open generation carried from an earlier run, audited
            owners = {"members": [{"member_id": "m", "instance": None, "assignment": [["t", 0]]}]}
            carried[group_id] = {"open": {"generation": rng.randrange(3), "log_offset": 5, "owners": owners}}
        elif pick < 0.5:  # carried, never audited (nothing assigned)
            carried[group_id] = {"open": {"generation": rng.randrange(3), "log_offset": 4}}
    by_record, by_array = _trackers(carried)
    offset = 100
    for batch in range(rng.randrange(1, 5)):
        n = rng.randrange(0, 25)
        values = _values(n, batch)
        groups = [rng.choice(GROUPS) for _ in range(n)]
        generations = [rng.randrange(4) for _ in range(n)]
        tombstones = [rng.random() < 0.15 for _ in range(n)]
        offsets = list(range(offset, offset + n))
        at_ms = [None if rng.random() < 0.1 else 1_000 + o for o in offsets]
        offset += n + 3
        for r in range(n):
            if tombstones[r]:
                by_record.group_deleted(groups[r])
            else:
                by_record.classic(groups[r], generations[r], PARTITION, offsets[r], at_ms[r], values, r)
        if n:
            by_array.classic_records(
                groups,
                np.array([GROUPS.index(g) for g in groups], np.int64),
                np.array(generations, np.int64),
                PARTITION,
                np.array(offsets, np.int64),
                at_ms,
                np.array(tombstones, bool),
                values,
                np.arange(n, dtype=np.int64),
            )
        assert _pending(by_array) == _pending(by_record), (seed, batch)
        assert _state(by_array) == _state(by_record), (seed, batch)
        for tracker in (by_record, by_array):  # the batch goes: the open generations' values are kept
            tracker.end_batch()
