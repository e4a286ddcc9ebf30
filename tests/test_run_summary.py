"""The run summary's lag part: which rows of this --now are the furthest behind, in order."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from lib.lake.behind import furthest_behind

ROWS = pa.schema(
    [
        ("group_id", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("lag_ms", pa.int64()),
        ("lag_records", pa.int64()),
    ]
)


def _rows(rows: list[tuple]) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(ROWS.names, r)) for r in rows], schema=ROWS)


# (group, topic, partition, lag_ms, lag_records); four rows tie at 5000 ms and 10 records
TIED = [
    ("g2", "t", 0, 5000, 10),
    ("g1", "t", 1, 5000, 10),
    ("g1", "t", 0, 5000, 10),
    ("g3", "t", 0, 9000, 1),
    ("g0", "t", 0, 5000, 7),
    ("g9", "t", 0, None, 99),
    ("g5", "u", 2, 5000, 10),
]


@pytest.mark.parametrize(
    ("limit", "groups"),
    [
        (1, ["g3"]),
        (3, ["g3", "g1", "g1"]),
        (4, ["g3", "g1", "g1", "g2"]),
        (6, ["g3", "g1", "g1", "g2", "g5", "g0"]),
        (7, ["g3", "g1", "g1", "g2", "g5", "g0", "g9"]),
        (12, ["g3", "g1", "g1", "g2", "g5", "g0", "g9"]),
        (0, []),
    ],
)
def test_the_furthest_behind_are_ordered_by_time_records_then_names(limit, groups):
    out = furthest_behind(_rows(TIED), limit).to_pylist()
    assert [r["group_id"] for r in out] == groups
    if limit >= 3:  # the two g1 rows: partition 0 before 1
        assert [(r["group_id"], r["partition"]) for r in out[1:3]] == [("g1", 0), ("g1", 1)]
    if limit >= 7:  # a row without a time comes last, whatever its records
        assert out[6] == {"group_id": "g9", "topic": "t", "partition": 0, "lag_ms": None, "lag_records": 99}


def test_the_furthest_behind_of_many_tied_rows_are_the_first_of_them_all_sorted():
    rng = random.Random(11)
    rows = [
        (
            f"g{rng.randrange(30)}",
            f"t{rng.randrange(4)}",
            rng.randrange(8),
            rng.choice([None, 0, 1000, 1000, 2000, 2000, 2000]),
            rng.choice([1, 2, 2, 3]),
        )
        for _ in range(3000)
    ]

    def key(r):  # the order the summary promises, on every row
        return (-(-1 if r[3] is None else r[3]), -r[4], r[0], r[1], r[2])

    expected = sorted(rows, key=key)
    for limit in (1, 12, 50, 2999, 3000, 3001):
        got = [tuple(r.values()) for r in furthest_behind(_rows(rows), limit).to_pylist()]
        assert [key(r) for r in got] == [key(r) for r in expected[:limit]]
