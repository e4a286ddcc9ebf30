"""lib.lake.lag_rows, the lag stage's per-partition rules in numpy, against the same rules
written in Spark SQL (lib.spark.lag: `lag_at_points`, `first_unconsumed_batches`, which the
report uses over whole tables) on random end-offset rows and points; and the shortcut through a
checkpoint's account of the earlier rows (EarlierRows) against all the rows themselves."""

from __future__ import annotations

import datetime as dt
import random

import numpy as np
import pyarrow as pa
import pytest

from lib.lake import lag_rows
from lib.lake.lag_rows import NO, Earlier, Names, Rows, Tail, lag_at, next_tail, rows_of, sorted_order, summarise
from schemas import tables as T

T0 = 1_763_000_000_000


def _ts(ms):
    return None if ms is None else dt.datetime.fromtimestamp(ms / 1000, dt.UTC)


def random_rows(rng: random.Random, topic: str, partition: int) -> list[dict]:
    """End-offset rows of one partition: strictly growing end offsets, `at` never going back,
    a few rows without a time first, segment batches and (some partitions) list_offsets samples."""
    rows = []
    end = rng.randrange(0, 5)
    at = T0 + rng.randrange(0, 10_000)
    untimed = rng.random() < 0.15
    sampled = rng.random() < 0.3
    for i in range(rng.randrange(0, 12)):
        first = end
        end += rng.randrange(1, 6)
        at += rng.choice((0, rng.randrange(1, 5000)))
        timed = not (untimed and i < 2)
        segment = not (sampled and rng.random() < 0.5)
        rows.append(
            {
                "topic": topic,
                "partition": partition,
                "end_offset": end,
                "at": _ts(at) if timed else None,
                "source": "segment" if segment else "list_offsets",
                "topic_id": f"id-{topic}-{rng.randrange(2)}",
                "first_offset": first if segment and rng.random() < 0.9 else None,
                "first_timestamp": _ts(at - rng.randrange(0, 50)) if segment and rng.random() < 0.7 else None,
                "max_timestamp": _ts(at),
                "timestamp_type": "CreateTime",
                "is_control": False,
                "segment_file": f"{rng.randrange(3):020d}.log" if segment else None,
                "byte_position": rng.randrange(0, 1 << 20) if segment else None,
                "run_id": "r",
            }
        )
    return rows


def random_points(rng: random.Random, topic: str, partition: int, rows: list[dict]) -> list[dict]:
    top = max((r["end_offset"] for r in rows), default=3)
    out = []
    for _ in range(rng.randrange(1, 8)):
        at = T0 + rng.randrange(-2000, 80_000)
        out.append(
            {
                "group_id": f"g{rng.randrange(3)}",
                "topic": topic,
                "partition": partition,
                "at": _ts(at),
                "_asof": _ts(at + rng.choice((0, 0, rng.randrange(0, 3000)))),
                "kind": "commit",
                "committed_offset": rng.randrange(0, top + 3),
                "offsets_partition": 0,
                "log_offset": rng.randrange(1000),
            }
        )
    return out


def _spark_reference(spark, rows, points):
    from lib.spark.lag_rules import first_unconsumed_batches, lag_at_points

    ends = spark.createDataFrame(rows, T.PARTITION_END_OFFSETS.ddl)
    pts = spark.createDataFrame(
        points,
        "group_id STRING, topic STRING, partition INT, at TIMESTAMP, _asof TIMESTAMP, kind STRING, "
        "committed_offset BIGINT, offsets_partition INT, log_offset BIGINT",
    )
    lagged = lag_at_points(pts, ends)
    batches = first_unconsumed_batches(lagged.where("lag_records > 0"), ends)
    joined = lagged.join(batches, ["topic", "partition", "committed_offset"], "left")
    return {
        (r["topic"], r["partition"], r["group_id"], r["log_offset"], _ms(r["at"]), r["committed_offset"]): r.asDict()
        for r in joined.collect()
    }


def _ms(ts):
    """Epoch ms of an aware datetime, or of a naive one in UTC (what collect() gives)."""
    if ts is None:
        return NO
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=dt.UTC)
    return round(ts.timestamp() * 1000)


def _table(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=T.PARTITION_END_OFFSETS.arrow_schema)


def _ours(rows: list[dict], points: list[dict], parts: int = 1, earlier_rows: list[dict] | None = None):
    """lag_at over every partition at once (a row's and a point's `partition` is its index)."""
    names = Names()
    table = _table(rows)
    r = rows_of(table, table.column("partition").to_numpy().astype(np.int64), names)
    earlier = Earlier.none(parts)
    if earlier_rows:
        before = _table(earlier_rows)
        earlier = summarise(rows_of(before, before.column("partition").to_numpy().astype(np.int64), names), earlier)
    part = np.array([p["partition"] for p in points], np.int64)
    at = np.array([_ms(p["at"]) for p in points], np.int64)
    asof = np.array([_ms(p["_asof"]) for p in points], np.int64)
    committed = np.array([p["committed_offset"] for p in points], np.int64)
    return lag_at(r, earlier, part, at, asof, committed), names, earlier


def _none(v):
    return None if v == NO else int(v)


def test_equals_the_spark_rules_on_random_partitions(spark):
    rng = random.Random(11)
    rows, points, by_tp = [], [], {}
    for tp in range(60):
        topic, partition = f"t{tp % 7}", tp  # the partition number is its index
        r = random_rows(rng, topic, partition)
        p = random_points(rng, topic, partition, r)
        rows += r
        points += p
        by_tp[(topic, partition)] = (r, p)
    want = _spark_reference(spark, rows, points)
    compared = behind = 0
    got, names, _ = _ours(rows, points, parts=60)

    def name(code):
        return None if code < 0 else names.values[code]

    for i, point in enumerate(points):
        key = (point["topic"], point["partition"], point["group_id"], point["log_offset"], _ms(point["at"]),
               point["committed_offset"])  # fmt: skip
        ref = want[key]
        mine = {
            "end_offset": _none(got.end_offset[i]),
            "end_offset_at": _none(got.end_offset_at[i]),
            "topic_id": name(got.topic_id[i]),
            "lag_records": _none(got.lag_records[i]),
            "truncated": bool(got.truncated[i]),
        }
        theirs = {
            "end_offset": ref["end_offset"],
            "end_offset_at": None if ref["end_offset_at"] is None else _ms(ref["end_offset_at"]),
            "topic_id": ref["topic_id"],
            "lag_records": ref["lag_records"],
            "truncated": ref["truncated"],
        }
        assert mine == theirs, (point, by_tp[(point["topic"], point["partition"])][0])
        if ref["lag_records"] is not None and ref["lag_records"] > 0:
            behind += 1
            assert {
                "first": _none(got.batch_first_offset[i]),
                "ts": _none(got.batch_first_ts[i]),
                "file": name(got.batch_segment_file[i]),
                "pos": _none(got.batch_byte_position[i]),
                "interpolated": _none(got.interpolated_ms[i]),
            } == {
                "first": ref["batch_first_offset"],
                "ts": None if ref["batch_first_timestamp"] is None else _ms(ref["batch_first_timestamp"]),
                "file": ref["batch_segment_file"],
                "pos": ref["batch_byte_position"],
                "interpolated": ref["interpolated_ms"],
            }, (point, by_tp[(point["topic"], point["partition"])][0])
        compared += 1
    assert compared > 200 and behind > 50  # the comparison has teeth


@pytest.mark.parametrize("seed", range(200))
def test_a_checkpoint_account_answers_as_the_rows_do(seed):
    """Where Earlier.answers says so, the new rows after a checkpoint's account of the earlier
    ones give what all the rows give."""
    rng = random.Random(seed)
    rows = random_rows(rng, "t", 0)
    cut = rng.randrange(len(rows) + 1)
    points = random_points(rng, "t", 0, rows)
    whole, names, _ = _ours(rows, points)
    shortcut, names2, earlier = _ours(rows[cut:], points, earlier_rows=rows[:cut])
    part = np.zeros(len(points), np.int64)
    asof = np.array([_ms(p["_asof"]) for p in points], np.int64)
    committed = np.array([p["committed_offset"] for p in points], np.int64)
    if not earlier.answers(shortcut, part, asof, committed)[0]:
        return
    for field in ("end_offset", "end_offset_at", "lag_records", "truncated", "interpolated_ms", "batch_first_offset"):
        assert list(getattr(shortcut, field)) == list(getattr(whole, field)), (field, rows, cut, points)

    def names_of(codes, n):
        return [None if c < 0 else n.values[c] for c in codes]

    assert names_of(shortcut.topic_id, names2) == names_of(whole.topic_id, names)
    assert names_of(shortcut.batch_segment_file, names2) == names_of(whole.batch_segment_file, names)


@pytest.mark.parametrize("tail_rows,reaching", [(1, False), (2, False), (3, False), (64, False), (1, True), (2, True)])
def test_a_tail_answers_as_the_rows_do(tail_rows, reaching, monkeypatch):
    answered, only_with_tail, partial = _tail_answers(tail_rows, reaching, monkeypatch)
    assert answered > 90 and only_with_tail > 20  # the comparison has teeth
    assert partial > 50 if tail_rows < 4 else partial == 0


def _tail_answers(tail_rows: int, reaching: bool, monkeypatch) -> tuple[int, int, int]:
    """A partition's rows come in over one to four earlier stages, each stage's tail made from
    the last one's and its new rows (next_tail, TAIL_ROWS of 1 to 64; `reaching`: back to the
    last row at or below an offset each stage draws, that of a point half the time); where
    Earlier.answers with the tail says so, the last rows after the account and the tail give what
    all the rows give, batches included. And the tail answers for points the account alone does
    not."""
    monkeypatch.setattr(lag_rows, "TAIL_ROWS", tail_rows)
    answered = only_with_tail = partial = 0
    for seed in range(300):
        rng = random.Random(seed)
        rows = random_rows(rng, "t", 0)
        points = random_points(rng, "t", 0, rows)
        whole, names, _ = _ours(rows, points)
        cuts = sorted(rng.sample(range(len(rows) + 1), rng.randrange(1, min(4, len(rows) + 1) + 1)))
        mine = Names()
        table = _table(rows)
        every = rows_of(table, np.zeros(table.num_rows, np.int64), mine)
        tail = Tail(Rows.empty(), np.ones(1, bool), np.ones(1, bool))  # nothing yet: complete

        smallest = min((p["committed_offset"] for p in points), default=None)
        start = 0
        for cut in cuts[:-1]:  # the earlier stages
            tail = next_tail(tail, every.take(np.arange(start, cut)), _reach(rng, reaching, smallest))
            start = cut
        last = cuts[-1]
        tail = next_tail(tail, every.take(np.arange(start, last)), _reach(rng, reaching, smallest))
        partial += int(tail.known[0] and not tail.complete[0])
        earlier = summarise(every.take(np.arange(0, last)), Earlier.none(1))
        fresh = every.take(np.arange(last, len(rows)))
        part = np.zeros(len(points), np.int64)
        at = np.array([_ms(p["at"]) for p in points], np.int64)
        asof = np.array([_ms(p["_asof"]) for p in points], np.int64)
        committed = np.array([p["committed_offset"] for p in points], np.int64)
        shortcut = lag_at(fresh, earlier, part, at, asof, committed, tail)
        if not earlier.answers(shortcut, part, asof, committed, tail)[0]:
            continue
        answered += 1
        alone = lag_at(fresh, earlier, part, at, asof, committed)
        only_with_tail += int(not earlier.answers(alone, part, asof, committed)[0])
        for field in ("end_offset", "end_offset_at", "lag_records", "truncated", "interpolated_ms",
                      "batch_first_offset", "batch_first_ts", "batch_byte_position"):  # fmt: skip
            assert list(getattr(shortcut, field)) == list(getattr(whole, field)), (field, seed, rows, cuts, points)

        def names_of(codes, n):
            return [None if c < 0 else n.values[c] for c in codes]

        assert names_of(shortcut.topic_id, mine) == names_of(whole.topic_id, names)
        assert names_of(shortcut.batch_segment_file, mine) == names_of(whole.batch_segment_file, names)
    return answered, only_with_tail, partial


def _reach(rng: random.Random, reaching: bool, smallest: int | None) -> np.ndarray | None:
    """A stage's reach: none, or half the time the smallest committed offset of the points,
    else an offset drawn (or NO)."""
    if not reaching:
        return None
    if smallest is not None and rng.random() < 0.5:
        return np.array([smallest], np.int64)
    return np.array([rng.choice([NO, rng.randrange(-1, 60)])], np.int64)


def test_a_tail_reaching_back_answers_more(monkeypatch):
    """With the same rows and points, tails that reach back to a point's offset answer for more
    partitions than the last TAIL_ROWS rows alone (146 against 104 of the 300 with one row)."""
    alone, _, _ = _tail_answers(1, False, monkeypatch)
    reaching, _, _ = _tail_answers(1, True, monkeypatch)
    assert reaching >= alone + 30, (alone, reaching)


def test_next_tail_keeps_the_last_rows_by_end_offset_and_drops_one_no_longer_a_suffix(monkeypatch):
    """Exact tails of hand-made rows: the last TAIL_ROWS by (end offset, at), rows without a time
    left out, complete while every row is in; a partial tail whose partition gets a row below
    it is dropped; a complete one takes any row."""
    monkeypatch.setattr(lag_rows, "TAIL_ROWS", 2)

    def rows(part, end, at):
        n = len(part)
        z = np.full(n, NO, np.int64)
        return Rows(np.array(part, np.int64), np.array(end, np.int64), np.array(at, np.int64), z, z, z,
                    np.zeros(n, bool), np.full(n, -1, np.int64), z)  # fmt: skip

    start = Tail(Rows.empty(), np.array([True, True, False]), np.array([True, True, False]))
    t = next_tail(start, rows([0, 0, 0, 1, 2], [5, 7, 9, 3, 4], [10, NO, 30, 40, 50]))
    assert list(zip(t.rows.part, t.rows.end, t.rows.at)) == [(0, 5, 10), (0, 9, 30), (1, 3, 40)]
    assert list(t.known) == [True, True, False] and list(t.complete) == [True, True, False]
    t = next_tail(t, rows([0, 1, 1], [11, 8, 6], [31, 41, 45]))
    assert list(zip(t.rows.part, t.rows.end, t.rows.at)) == [(0, 9, 30), (0, 11, 31), (1, 6, 45), (1, 8, 41)]
    assert list(t.complete) == [False, False, False]
    assert list(t.floor(np.array([11, 8, 4]))) == [9, 6, 4]
    t = next_tail(t, rows([0, 1], [10, 9], [32, 46]))  # partition 0: (10, 32) is below (11, 31)? no: above (9, 30)
    assert list(t.known) == [True, True, False]
    assert list(zip(t.rows.part, t.rows.end)) == [(0, 10), (0, 11), (1, 8), (1, 9)]
    t = next_tail(t, rows([0], [9], [29]))  # below partition 0's lowest row, (10, 32): no longer a suffix
    assert list(t.known) == [False, True, False]
    assert list(t.floor(np.array([11, 9, 4]))) == [11, 8, 4]


def test_next_tail_reaches_back_to_the_last_row_at_or_below_the_smallest_commit(monkeypatch):
    """Exact tails with `reach`: from the last row at or below the offset on, when that is more
    than TAIL_ROWS rows and at most TAIL_REACH_ROWS; every row when none is at or below it."""
    monkeypatch.setattr(lag_rows, "TAIL_ROWS", 2)
    monkeypatch.setattr(lag_rows, "TAIL_REACH_ROWS", 4)
    z = np.full(5, NO, np.int64)
    fresh = Rows(np.zeros(5, np.int64), np.array([1, 3, 5, 7, 9], np.int64), np.array([10, 20, 30, 40, 50], np.int64),
                 z, z, z, np.zeros(5, bool), np.full(5, -1, np.int64), z)  # fmt: skip
    start = Tail(Rows.empty(), np.array([True]), np.array([True]))

    def ends(reach):
        t = next_tail(start, fresh, None if reach is None else np.array([reach], np.int64))
        return list(t.rows.end), bool(t.complete[0])

    assert ends(None) == ([7, 9], False)
    assert ends(NO) == ([7, 9], False)
    assert ends(8) == ([7, 9], False)  # the last row at or below 8 is 7: two rows, as TAIL_ROWS
    assert ends(4) == ([3, 5, 7, 9], False)  # from 3 on
    assert ends(3) == ([3, 5, 7, 9], False)  # (3 itself is at or below 3)
    assert ends(2) == ([1, 3, 5, 7, 9][-2:], False)  # from 1 on: 5 rows, more than TAIL_REACH_ROWS
    monkeypatch.setattr(lag_rows, "TAIL_REACH_ROWS", 5)
    assert ends(2) == ([1, 3, 5, 7, 9], True)
    assert ends(0) == ([1, 3, 5, 7, 9], True)  # none at or below 0: every row, and so complete


def test_the_tails_reaching_back_stay_within_the_budget(monkeypatch):
    """Three partitions whose reach wants 3 more rows than TAIL_ROWS, 1 more, and 2 more: with a
    budget of 3 rows beyond TAIL_ROWS in all, the two that need fewest reach back (1 + 2), the
    third keeps its last TAIL_ROWS rows."""
    monkeypatch.setattr(lag_rows, "TAIL_ROWS", 1)
    monkeypatch.setattr(lag_rows, "TAIL_REACH_BUDGET", 3)
    part = [0, 0, 0, 0, 1, 1, 2, 2, 2]
    end = [1, 2, 3, 4, 1, 2, 1, 2, 3]
    n = len(part)
    z = np.full(n, NO, np.int64)
    fresh = Rows(np.array(part, np.int64), np.array(end, np.int64), np.arange(10, 10 + n, dtype=np.int64),
                 z, z, z, np.zeros(n, bool), np.full(n, -1, np.int64), z)  # fmt: skip
    start = Tail(Rows.empty(), np.ones(3, bool), np.zeros(3, bool))
    t = next_tail(start, fresh, np.array([1, 1, 1], np.int64))
    assert list(zip(t.rows.part, t.rows.end)) == [(0, 4), (1, 1), (1, 2), (2, 1), (2, 2), (2, 3)]


def test_sorted_order_is_lexsorts_permutation():
    """lag_rows.sorted_order against np.lexsort: rows in order within their partitions (runs of
    a tail then new rows, the shortcut), ties (equal keys keep their order) and rows out of
    order (the lexsort)."""
    rng = np.random.default_rng(5)
    shortcut = 0
    for trial in range(300):
        n = int(rng.integers(0, 400))
        part = rng.integers(0, int(rng.integers(1, 30)), n)
        first = rng.integers(0, 6, n)
        second = rng.integers(0, 6, n)
        if trial % 2:  # each partition's rows in (first, second) order, in two runs
            half = n // 2
            for lo, hi in ((0, half), (half, n)):
                o = np.lexsort((second[lo:hi], first[lo:hi], part[lo:hi]))
                part[lo:hi], first[lo:hi], second[lo:hi] = part[lo:hi][o], first[lo:hi][o], second[lo:hi][o]
            top = np.zeros(int(part.max(initial=0)) + 1, np.int64)
            np.maximum.at(top, part[:half], first[:half] if half else first[:0])
            first[half:] += top[part[half:]]  # the second run's rows come after the first's
            shortcut += 1
        assert list(sorted_order(part, first, second)) == list(np.lexsort((second, first, part)))
    assert shortcut > 100


def _rows(part, end) -> Rows:
    """Rows whose every column is a function of (part, end), so a row's place shows in each."""
    part, end = np.array(part, np.int64), np.array(end, np.int64)
    return Rows(part, end, end * 10, part + 100, end - 1, end * 20, end % 2 == 0, part * 7, end * 3)


def _columns(rows: Rows) -> list[list]:
    return [getattr(rows, f).tolist() for f in lag_rows.ROW_FIELDS]


def test_rows_concat_and_take_give_the_rows_and_share_them_when_nothing_moves():
    """Rows.concat and Rows.take: the expected rows in every column; a concat of one non-empty
    part, or a take of every row in order, returns the rows themselves (no copy of a task's
    tails); a column that is a strided view is copied (the kernels take C-contiguous arrays)."""
    a, b = _rows([0, 0, 1], [5, 6, 7]), _rows([2], [9])
    both = Rows.concat([a, Rows.empty(), b])
    assert _columns(both) == _columns(_rows([0, 0, 1, 2], [5, 6, 7, 9]))
    assert Rows.concat([Rows.empty(), a, Rows.empty()]) is a
    assert _columns(Rows.concat([])) == _columns(Rows.empty())
    assert both.take(np.arange(4)) is both
    assert _columns(both.take(np.array([3, 0]))) == _columns(_rows([2, 0], [9, 5]))
    assert _columns(both.take(np.array([0, 1, 2]))) == _columns(a)  # (a prefix: not every row)
    assert _columns(both.take(np.array([1, 0, 2, 3]))) == _columns(_rows([0, 0, 1, 2], [6, 5, 7, 9]))
    wide = np.array([[0, 1, 2, 3], [4, 5, 6, 7]], np.int64)
    strided = Rows(*(wide[:, 0] if f != "is_segment" else np.array([True, False]) for f in lag_rows.ROW_FIELDS))
    for copied in (Rows.concat([strided]), strided.take(np.arange(2))):
        assert copied is not strided
        assert all(getattr(copied, f).flags.c_contiguous for f in lag_rows.ROW_FIELDS)
        assert _columns(copied) == _columns(strided)


@pytest.mark.parametrize("seed", range(4))
def test_point_order_is_the_stable_sort_and_distinct_pairs(seed):
    """lib.lake.lag_task.point_order against numpy's sorts: the points kept, stably by (now,
    topic rank, partition); the distinct pairs ascending; each point's pair. Narrow partition
    ranges go through its table of pairs, wide ones (and any int32) through the sorts."""
    from lib.lake.lag_task import point_order

    rng = np.random.default_rng(seed)
    for trial in range(60):
        n = int(rng.integers(0, 4000))
        low = int(rng.integers(-(2**31), 2**31 - 1)) if trial % 6 == 0 else int(rng.integers(-10, 10))
        width = int(rng.choice([1, 7, 64, 5000, 2**20, 2**31]))
        rank = rng.integers(0, int(rng.integers(1, 60)), n).astype(np.int64)
        partition = np.clip(low + rng.integers(0, width, n), -(2**31), 2**31 - 1).astype(np.int64)
        is_now = rng.random(n) < 0.2
        mask = rng.random(n) < 0.9
        key = (rank << 32) | (partition + (1 << 31))
        order = np.argsort(is_now.astype(np.int64) << 62 | key, kind="stable")
        order = order[mask[order]]
        uniq, pair = np.unique(key[order], return_inverse=True)
        got = point_order(rank, partition, is_now, mask)
        assert np.array_equal(got[0], order)
        assert np.array_equal(got[1], uniq >> 32)
        assert np.array_equal(got[2], (uniq & 0xFFFFFFFF) - (1 << 31))
        assert np.array_equal(got[3], pair.reshape(-1))


def test_a_lag_tasks_new_rows_from_scanned_segments_by_hand(monkeypatch):
    """lib.lake.lag_task._NewRows on two partitions' scans (stubbed: the headers' values as
    scan_segment gives them, -1 where a header has none): `at` is the largest max timestamp so
    far from the checkpoint's, across the partition's segments; the unknowns are NO; the
    checkpoint ends where the last segment's scan does."""
    from lib.lake import lag_task
    from lib.lake.seams import PartitionInput
    from lib.source.logdir import Segment
    from lib.source.topic_log import TopicPartitionLog
    from lib.source.topic_scan import SegmentScan

    def scan(seg, rows, next_position):
        cols = np.array(rows, np.int64).reshape(-1, 7).T  # position, first, end, first_ts, max_ts, type, control
        n = cols.shape[1]
        return SegmentScan(
            seg, cols[0], cols[1], cols[2], cols[3], cols[4], cols[5].astype(np.int8), cols[6].astype(bool),
            np.full(n, 70, np.int64), np.full(n, -1, np.int64), next_position, 0,
        )  # fmt: skip

    s0, s1 = Segment(0, 0, "/d/t-0/00000000000000000000.log", 1), Segment(0, 3, "/d/t-0/00000000000000000003.log", 1)
    s2 = Segment(2, 10, "/d/t-2/00000000000000000010.log", 1)
    scans = {
        ("t", 0): [
            scan(s0, [(0, 0, 2, T0 + 5, T0 + 9, 0, 0), (70, -1, 3, -1, -1, 2, 0)], 140),
            scan(s1, [(0, 3, 5, T0 + 3, T0 + 4, 1, 1)], 70),
        ],
        ("t", 2): [scan(s2, [(200, 10, 12, T0 + 20, T0 + 21, 0, 0)], 270)],
    }
    monkeypatch.setattr(lag_task, "scan_partition", lambda log, start: scans[(log.topic, log.partition)])
    names = Names()
    new = lag_task._NewRows(names)
    checkpoints = []
    for i, (partition, running) in enumerate(((0, T0 + 7), (2, None))):
        log = TopicPartitionLog("t", partition, f"/d/t-{partition}", [], topic_id=f"id{partition}")
        tp = PartitionInput("t", partition, log, None, True, running, True, None)
        checkpoints.append({})
        new.scan(i, tp, checkpoints[-1])
    rows = new.rows()
    assert rows.part.tolist() == [0, 0, 0, 1]
    assert rows.end.tolist() == [2, 3, 5, 12]
    assert rows.at.tolist() == [T0 + 9, T0 + 9, T0 + 9, T0 + 21]  # (the checkpoint's T0+7 below them)
    assert rows.first_offset.tolist() == [0, NO, 3, 10]
    assert rows.first_ts.tolist() == [T0 + 5, NO, T0 + 3, T0 + 20]
    assert rows.is_segment.tolist() == [True] * 4
    assert [names.values[c] for c in rows.topic_id] == ["id0", "id0", "id0", "id2"]
    files = ["00000000000000000000.log"] * 2 + ["00000000000000000003.log", "00000000000000000010.log"]
    assert [names.values[c] for c in rows.segment_file] == files
    assert rows.byte_position.tolist() == [0, 70, 0, 200]
    assert new.batches == 4
    assert checkpoints[0] == {
        "segment_base_offset": 3,
        "next_byte_position": 70,
        "trailing_bytes": 0,
        "next_offset": 5,
        "at_ms": T0 + 9,
    }
    assert checkpoints[1]["next_offset"] == 12 and checkpoints[1]["at_ms"] == T0 + 21
    table = new.table([("t", 0), ("t", 2)], "run")
    assert table.column("partition").to_pylist() == [0, 0, 0, 2]
    assert table.column("first_offset").to_pylist() == [0, None, 3, 10]
    assert table.column("max_timestamp").to_pylist() == [_ts(T0 + 9), None, _ts(T0 + 4), _ts(T0 + 21)]
    assert table.column("timestamp_type").to_pylist() == ["CreateTime", "NoTimestamp", "LogAppendTime", "CreateTime"]
    assert table.column("is_control").to_pylist() == [False, False, True, False]
