"""lib.lake.lag_input, the replay's hand-over to the lag stage: what a replay task's file says it
holds (its index's topic partitions, each bucket's rows) against the events written, counted here
in plain Python; and every event read back by bucket."""

from __future__ import annotations

import datetime as dt
import random

import pyarrow as pa
import pytest

from lib.lake import lag_input
from lib.lake.lag_input import BUCKETS, EventWriter, bucket_of, read_events, read_index
from schemas.tables import COMMIT_EVENT_SCHEMA


def _events(rng: random.Random, n: int, topics: int, partitions: tuple[int, int]) -> list[dict]:
    at = dt.datetime(2025, 10, 1, tzinfo=dt.UTC)
    return [
        {
            "group_id": f"g{rng.randrange(7)}",
            "topic": f"topic-{rng.randrange(topics)}",
            "partition": rng.randint(*partitions),
            "committed_offset": rng.randrange(1000),
            "offsets_partition": rng.randrange(3),
            "log_offset": i,
            "applied_offset": i,
            "applied_at": None if rng.random() < 0.1 else at + dt.timedelta(milliseconds=i),
        }
        for i in range(n)
    ]


@pytest.mark.parametrize(
    "topics, partitions",
    [
        (5, (0, 11)),  # a few topics of a few partitions: counted in a table of them
        (4, (-6, 30)),  # the same, from the smallest partition number on
        (40, (0, 2_000_000)),  # partition numbers spread wide: sorted instead
        (3, (-(2**31), 2**31 - 1)),  # any int32 a commit key may hold
    ],
)
@pytest.mark.parametrize("batch_rows", [1 << 16, 40])
def test_the_index_names_the_topic_partitions_and_buckets_written(
    tmp_path, monkeypatch, topics, partitions, batch_rows
):
    monkeypatch.setattr(lag_input, "BATCH_ROWS", batch_rows)  # 40: a flush's buckets in many batches
    rng = random.Random(topics)
    events = _events(rng, 3000, topics, partitions)
    writer = EventWriter(str(tmp_path), "run-1")
    for lo in range(0, len(events), 700):  # several writes, as a task's batches
        writer.write(pa.Table.from_pylist(events[lo : lo + 700], schema=COMMIT_EVENT_SCHEMA))
    path = writer.close()
    assert path is not None
    index = read_index(path)
    assert sorted(index.partitions) == sorted({(e["topic"], e["partition"]) for e in events})
    per_bucket: dict[int, int] = {}
    for e in events:
        b = bucket_of(e["topic"], e["partition"])
        per_bucket[b] = per_bucket.get(b, 0) + 1
    assert dict(zip(index.bucket.tolist(), index.rows.tolist())) == per_bucket
    for lo, hi in ((0, BUCKETS), (0, 300), (300, 301), (301, 700), (700, BUCKETS)):  # as lag tasks read
        back = read_events([path], lo, hi, None)
        got = sorted(
            (back.groups[g], back.topics[t], p, o, c)
            for g, t, p, o, c in zip(
                back.table.column("group").to_pylist(),
                back.table.column("topic").to_pylist(),
                back.table.column("partition").to_pylist(),
                back.table.column("log_offset").to_pylist(),
                back.table.column("committed_offset").to_pylist(),
            )
        )
        assert got == sorted(
            (e["group_id"], e["topic"], e["partition"], e["log_offset"], e["committed_offset"])
            for e in events
            if lo <= bucket_of(e["topic"], e["partition"]) < hi
        )
