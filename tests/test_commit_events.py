"""The offset commits that took effect, as the replay engine reports them while it replays
(lib.replay.engine, `emit_commit_events`): each at the record that made it effective. Hand cases
with their expected events worked out from Kafka's rules, then random logs against the
record-by-record reference (lib.replay.offsets.PartitionOffsets), whole and split into two runs
whose second starts from the state the first left."""

from __future__ import annotations

import os
import random

import pyarrow as pa
import pytest

from lib.decode import SegmentDecoder
from lib.replay.engine import PartitionReplay
from lib.replay.offsets import PartitionOffsets
from lib.testdata.logbuilder import PartitionLogBuilder, offset_commit_key, offset_commit_value

T = 1_763_000_000_000
NOW = T + 86_400_000
RETENTION_MS = 7 * 86_400_000


def decoded(builder: PartitionLogBuilder, tmp_path) -> list[pa.RecordBatch]:
    folder = builder.write(str(tmp_path))
    (segment,) = [f for f in sorted(os.listdir(folder)) if f.endswith(".log")]
    return list(SegmentDecoder(f"{folder}/{segment}", builder.partition))


def engine_events(batches, engine: PartitionReplay | None = None) -> tuple[list[dict], PartitionReplay]:
    engine = engine or PartitionReplay(0)
    engine.emit_commit_events = True
    out: list[dict] = []
    for b in batches:
        engine.feed(b)
        got = engine.take_commit_events()
        if got is not None:
            out.extend(got.to_pylist())
    # in the order they took effect: by the record that made each effective, then its own
    effect = [(e["applied_offset"], e["log_offset"]) for e in out]
    assert effect == sorted(effect)
    return out, engine


def in_order(events: list[tuple]) -> list[tuple]:
    """Events by the record that made them effective, then by their own record (the order of
    the offsets one marker commits is not a rule)."""
    return sorted(events, key=lambda e: (e[5], e[4]))


def as_tuples(events: list[dict]) -> list[tuple]:
    return in_order(
        [
            (e["group_id"], e["topic"], e["partition"], e["committed_offset"], e["log_offset"], e["applied_offset"])
            for e in events
        ]
    )


def reference_events(batches) -> list[tuple]:
    ref = PartitionOffsets(record_effects=True)
    for b in batches:
        for row in b.to_pylist():
            ref.apply(row)
    assert ref.took_effect is not None
    return in_order(
        [
            (e["group_id"], e["topic"], e["partition"], e["committed_offset"], e["log_offset"], applied)
            for e, applied, _ in ref.took_effect
        ]
    )


def test_hand_cases(tmp_path):
    b = PartitionLogBuilder(0)
    b.commit("g", "t", 0, 10, T)  # 0: plain, at once
    b.commit("g", "t", 0, 20, T + 1, producer_id=7)  # 1: pending
    b.commit("g", "t", 1, 5, T + 2, producer_id=7)  # 2: pending
    b.commit("g", "t", 0, 30, T + 3)  # 3: plain, newer than the pending record
    b.marker(7, True, T + 4)  # 4: commits 2 (t-1); t-0's record 1 is older than 3: nothing
    b.commit("g", "t", 2, 1, T + 5, producer_id=8)  # 5
    b.marker(8, False, T + 6)  # 6: aborted: nothing
    b.commit("g", "t", 2, 2, T + 7, producer_id=9)  # 7
    b.offset_tombstone("g", "t", 2, T + 8)  # 8: clears 7's pending entry
    b.marker(9, True, T + 9)  # 9: nothing left to commit
    b.commit("g", "t", 2, 3, T + 10, producer_id=9)  # 10
    b.commit("g", "t", 2, 4, T + 11, producer_id=9)  # 11: the same producer's newer record
    b.marker(9, True, T + 12)  # 12: commits 11 only
    got, _ = engine_events(decoded(b, tmp_path))
    assert as_tuples(got) == [
        ("g", "t", 0, 10, 0, 0),
        ("g", "t", 0, 30, 3, 3),
        ("g", "t", 1, 5, 2, 4),
        ("g", "t", 2, 4, 11, 12),
    ]
    assert [e["applied_at"].timestamp() * 1000 for e in got] == [T, T + 3, T + 4, T + 12]
    assert {e["offsets_partition"] for e in got} == {0}


def test_a_marker_commits_the_offsets_of_several_batches_in_key_order(tmp_path):
    b = PartitionLogBuilder(0)
    keys = [offset_commit_key("g", "t", p) for p in (2, 0, 1)]
    b.batch([(k, offset_commit_value(100 + i, T), T) for i, k in enumerate(keys)], producer_id=5, producer_epoch=0)
    b.commit("h", "u", 0, 1, T + 1, producer_id=5)
    b.marker(5, True, T + 2)
    got, _ = engine_events(decoded(b, tmp_path))
    # in the order their records were written, all at the marker
    assert as_tuples(got) == [
        ("g", "t", 2, 100, 0, 4),
        ("g", "t", 0, 101, 1, 4),
        ("g", "t", 1, 102, 2, 4),
        ("h", "u", 0, 1, 3, 4),
    ]


def random_log(seed: int) -> PartitionLogBuilder:
    rng = random.Random(seed)
    b = PartitionLogBuilder(0)
    keys = [(g, t, p) for g in ("a", "b", "c") for t in ("x", "y") for p in range(2)]
    ts = T
    for _ in range(rng.randrange(20, 120)):
        ts += rng.randrange(1, 1000)
        g, t, p = rng.choice(keys)
        roll = rng.random()
        producer = rng.choice((11, 12, 13))
        if roll < 0.35:
            b.commit(g, t, p, rng.randrange(1000), ts)
        elif roll < 0.6:
            b.commit(g, t, p, rng.randrange(1000), ts, producer_id=producer)
        elif roll < 0.7:
            chosen = rng.sample(keys, rng.randrange(2, 5))
            txn = rng.random() < 0.5
            b.batch(
                [(offset_commit_key(*k), offset_commit_value(rng.randrange(1000), ts), ts) for k in chosen],
                producer_id=producer if txn else -1,
                producer_epoch=0 if txn else -1,
                transactional=txn,
            )
        elif roll < 0.85:
            b.marker(producer, rng.random() < 0.7, ts)
        else:
            b.offset_tombstone(g, t, p, ts)
    return b


@pytest.mark.parametrize("seed", range(40))
def test_random_logs_equal_the_reference(tmp_path, seed):
    batches = decoded(random_log(seed), tmp_path)
    got, _ = engine_events(batches)
    assert as_tuples(got) == reference_events(batches)


@pytest.mark.parametrize("seed", range(40))
def test_random_logs_split_into_two_runs(tmp_path, seed):
    """The second run starts from the state the first left (its committed and pending offsets,
    as the replay's state tables hold them): its events are the rest of the whole log's."""
    batches = decoded(random_log(seed), tmp_path)
    rows = pa.Table.from_batches(batches)
    cut = random.Random(seed).randrange(rows.num_rows + 1)
    first_part = rows.slice(0, cut).to_batches(max_chunksize=7)
    second_part = rows.slice(cut).to_batches(max_chunksize=5)
    first, engine = engine_events(first_part)
    state = engine.finish(NOW, RETENTION_MS)
    second_engine = PartitionReplay(0)
    second_engine.load(
        pa.concat_tables([state["group_offsets"], state["expired_offsets"]]),
        state["pending_transactional_offsets"],
        state["group_fold_state"],
        pa.concat_tables([state["consumer_groups"], state["expired_groups"]]),
    )
    second, _ = engine_events(second_part, second_engine)
    assert as_tuples(first + second) == reference_events(batches)


# --- the topic names of the topic ids commits carry -------------------------------------------------
ID_A = "ASNFZ4mrze8BI0VniavN7w"  # 0123456789abcdef0123456789abcdef
ID_B = "AAAAAAAAAAAAAAAAAAAAAQ"  # 00000000000000000000000000000001


def topic_id_log() -> PartitionLogBuilder:
    """Two batches of v4 commits: in the first, id A under two names (the later commit's last),
    id B, a v3 commit without an id and a tombstone; in the second, B under another name."""
    b = PartitionLogBuilder(0)
    b.batch(
        [
            (offset_commit_key("g", "a", 0), offset_commit_value(1, T, version=4, topic_id=ID_A), T),
            (offset_commit_key("g", "b", 0), offset_commit_value(2, T, version=4, topic_id=ID_B), T),
            (offset_commit_key("g", "a-renamed", 0), offset_commit_value(3, T, version=4, topic_id=ID_A), T),
            (offset_commit_key("g", "plain", 0), offset_commit_value(4, T), T),
            (offset_commit_key("g", "gone", 0), None, T),
        ]
    )
    b.batch([(offset_commit_key("h", "b-later", 0), offset_commit_value(5, T, version=4, topic_id=ID_B), T)])
    return b


def test_topic_ids_take_the_name_of_their_last_commit(tmp_path):
    (rows,) = decoded(topic_id_log(), tmp_path)  # (one Arrow batch: fed as two, a log batch each)
    engine = PartitionReplay(0)
    engine.feed(rows.slice(0, 5))
    assert engine.topic_names == {ID_A: "a-renamed", ID_B: "b"}
    engine.feed(rows.slice(5))
    assert engine.topic_names == {ID_A: "a-renamed", ID_B: "b-later"}


def test_a_replay_imports_no_arrow_group_by(tmp_path):
    """The local pool's fork server leaves pyarrow.acero and pyarrow.dataset out of its
    preparation (lib.spark.pool_server): a replay must not need them (a task would import them
    on its first batch)."""
    import subprocess
    import sys

    folder = topic_id_log().write(str(tmp_path))
    code = (
        "import sys, os\n"
        "from lib.decode import SegmentDecoder\n"
        "from lib.replay.engine import PartitionReplay\n"
        f"folder = {folder!r}\n"
        "(seg,) = [f for f in sorted(os.listdir(folder)) if f.endswith('.log')]\n"
        "engine = PartitionReplay(0)\n"
        "engine.emit_commit_events = True\n"
        "for b in SegmentDecoder(os.path.join(folder, seg), 0):\n"
        "    engine.feed(b)\n"
        "    engine.take_commit_events()\n"
        "assert len(engine.topic_names) == 2, engine.topic_names\n"
        "print(sorted(m for m in ('pyarrow.acero', 'pyarrow.dataset') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
