"""Consumer lag at given points, from the topic partitions' end-offset rows (numpy and a numba
kernel; no Spark, no I/O), for many partitions at once. The rules, once:

- The end offset as of an instant is the last end-offset row at or before it (rows first at
  equal times; among rows of one instant the largest end offset). A group that committed O had
  read the records below O, so the end offset is never taken below O; before the partition's
  first known row, a group that had committed exactly that row's first offset had nothing left.
- A committed offset beyond everything the partition's log ever held (its largest end offset)
  is `truncated` (the topic was truncated or recreated): the end offset is then the one as of
  the instant, the lag negative, and no lag in time.
- The lag in time is the age, at the point, of the first record not consumed (the record at the
  committed offset O): its timestamp from the header of the batch that holds it when the batch
  opens with it, else from its batch, decoded (the caller looks it up: `Lag.lookups`), else
  interpolated between the end-offset rows around it (the last whose end offset is at most O and
  the first above it; rows with a time only), as kafka-lag-exporter does. `lag_ms_method` says
  which (`caught_up` when nothing is left to consume).

Rows and points carry the index of their partition (`part`). A partition's earlier rows, those
of earlier lag stages, may be given by what its checkpoint says of them (`Earlier`) and by its
last rows (`Tail`: a suffix of its rows with a time, by end offset, kept beside the checkpoint)
instead of all the rows themselves; `Earlier.answers` says for which partitions that is exact:
a point behind needs the rows around its committed offset, which a tail holds from its smallest
end offset on."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from numba import njit

from lib.numba_cache import use_stable_zip_cache

use_stable_zip_cache(__file__)  # before the first @njit(cache=True): see lib.numba_cache

NO = np.iinfo(np.int64).min  # an absent value in an int64 column of this module
# A partition's tail: its last rows with a time. On make bench's log a consumer behind had its
# first unconsumed record in the last 8 rows for 95.5% of commits, 64 for 99.9% (of 39,679)
TAIL_ROWS = 64
# ... and further back, to the last row at or below the smallest offset a group has committed
# (next_tail's `reach`), when that takes at most this many rows: a partition whose slowest group
# is more than TAIL_ROWS rows behind was read from partition_end_offsets in every run otherwise
# (make bench's 1% incremental run: 24 of 7,681 partitions, a fifth of its lag tasks' CPU)
TAIL_REACH_ROWS = 4_096
# ... and at most this many rows beyond TAIL_ROWS in all a task's tails (the partitions that need
# fewest first): stale groups, whose offsets stay while their partitions grow, are common, and a
# task's tails are held, written and read back whole (some 20 MB in memory at most)
TAIL_REACH_BUDGET = 262_144


def ms_of(col) -> np.ndarray:
    """TIMESTAMP (µs) -> epoch ms, toward zero as Spark's CAST(unix_micros / 1000 AS BIGINT);
    null -> NO."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    micros = arr.cast(pa.int64()).fill_null(NO).to_numpy()
    out = np.where(micros == NO, NO, (np.abs(micros) // 1000) * np.sign(micros))
    return out.astype(np.int64)


def ints_of(col) -> np.ndarray:
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    return arr.cast(pa.int64()).fill_null(NO).to_numpy()


def sorted_order(part: np.ndarray, first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """np.lexsort((second, first, part)), the same permutation: a stable sort by partition
    alone where each partition's rows already come in (first, second) order (a tail's rows
    then the new ones: runs that a stable sort merges in linear time), else the lexsort."""
    order = np.argsort(part, kind="stable")
    p, a, b = part[order], first[order], second[order]
    same = p[1:] == p[:-1]
    if np.all(~same | (a[1:] > a[:-1]) | ((a[1:] == a[:-1]) & (b[1:] >= b[:-1]))):
        return order
    return np.lexsort((second, first, part))


@dataclass
class Rows:
    """End-offset rows (partition_end_offsets' columns) of many partitions: `part` the
    partition's index; strings as codes into `names` (topic_id, segment_file)."""

    part: np.ndarray  # int64
    end: np.ndarray
    at: np.ndarray  # ms, NO when null
    topic_id: np.ndarray  # int64 code into names, -1 null
    first_offset: np.ndarray  # NO when null
    first_ts: np.ndarray  # ms, NO when null
    is_segment: np.ndarray  # bool
    segment_file: np.ndarray  # int64 code into names, -1 null
    byte_position: np.ndarray  # NO when null

    @staticmethod
    def empty() -> Rows:
        z = np.zeros(0, np.int64)
        return Rows(z, z, z, z, z, z, np.zeros(0, bool), z, z)

    # Rows are never written in place, so a concat of one non-empty part and a take of every row
    # in order return the rows as they are: an incremental lag task's tails (64 rows a partition,
    # thousands of partitions) were copied whole six times, 15% of its CPU on make bench's log
    @staticmethod
    def concat(parts: list[Rows]) -> Rows:
        some = [p for p in parts if len(p)]
        if len(some) == 1 and some[0]._contiguous():
            return some[0]
        if not parts:
            return Rows.empty()
        return Rows(*(np.concatenate([getattr(p, f) for p in parts]) for f in ROW_FIELDS))

    def take(self, idx: np.ndarray) -> Rows:
        n = len(self)
        if len(idx) == n and idx.dtype.kind in "iu" and self._contiguous() and _is_range(idx):
            return self
        return Rows(*(getattr(self, f)[idx] for f in ROW_FIELDS))

    def _contiguous(self) -> bool:
        """Whether every column is C-contiguous, as a copy's is (the kernels are compiled for it)."""
        return all(getattr(self, f).flags.c_contiguous for f in ROW_FIELDS)

    def __len__(self) -> int:
        return len(self.end)


ROW_FIELDS = (
    "part",
    "end",
    "at",
    "topic_id",
    "first_offset",
    "first_ts",
    "is_segment",
    "segment_file",
    "byte_position",
)


def _is_range(idx: np.ndarray) -> bool:
    """Whether idx is 0, 1, ..., len(idx) - 1."""
    n = len(idx)
    return n == 0 or (idx[0] == 0 and idx[-1] == n - 1 and bool((idx[1:] - idx[:-1] == 1).all()))


class Names:
    """Strings as codes, for the kernel (topic ids, segment file names)."""

    def __init__(self) -> None:
        self.values: list[str] = []
        self._codes: dict[str, int] = {}

    def code(self, value: str | None) -> int:
        if value is None:
            return -1
        c = self._codes.get(value)
        if c is None:
            c = self._codes[value] = len(self.values)
            self.values.append(value)
        return c

    def codes(self, arr) -> np.ndarray:
        """Codes of a string column (-1 for null), a lookup per distinct value."""
        import pyarrow.compute as pc

        arr = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
        enc = arr if isinstance(arr, pa.DictionaryArray) else pc.dictionary_encode(arr)
        table = np.array([self.code(v) for v in enc.dictionary.to_pylist()] + [-1], np.int64)
        idx = enc.indices.fill_null(len(enc.dictionary)).to_numpy()
        return table[idx]

    def strings(self, codes: np.ndarray) -> pa.Array:
        table = pa.array(self.values + [None], pa.string())
        return table.take(pa.array(np.where(codes < 0, len(self.values), codes)))


def rows_of(table: pa.Table, part: np.ndarray | int, names: Names) -> Rows:
    """Rows from partition_end_offsets rows (Arrow), all of partition `part` (or one each)."""
    n = table.num_rows
    parts = np.full(n, part, np.int64) if isinstance(part, int) else part.astype(np.int64)
    return Rows(
        parts,
        ints_of(table.column("end_offset")),
        ms_of(table.column("at")),
        names.codes(table.column("topic_id")),
        ints_of(table.column("first_offset")),
        ms_of(table.column("first_timestamp")),
        np.asarray(table.column("source").to_numpy(zero_copy_only=False) == "segment", dtype=bool),
        names.codes(table.column("segment_file")),
        ints_of(table.column("byte_position")),
    )


@dataclass
class Earlier:
    """Per partition (by index), what its lag checkpoint says of its rows in the table: whether
    it has any (`has`), the last (largest `at` and, then, end offset; its end offset and topic
    id), the largest end offset of any, and the first (smallest (`at`, end offset), rows without
    a time first: its `at` and first offset)."""

    has: np.ndarray  # bool
    last_at: np.ndarray
    last_end: np.ndarray
    last_topic_id: np.ndarray  # code
    log_end: np.ndarray
    first_at: np.ndarray
    first_offset: np.ndarray

    @staticmethod
    def none(n: int) -> Earlier:
        z = np.full(n, NO, np.int64)
        return Earlier(np.zeros(n, bool), z, z.copy(), np.full(n, -1, np.int64), z.copy(), z.copy(), z.copy())

    def last_rows(self, which: np.ndarray) -> Rows:
        """The last row of partitions `which`, as the account tells it (no batch: no segment row)."""
        k = len(which)
        z = np.full(k, NO, np.int64)
        return Rows(which.astype(np.int64), self.last_end[which], self.last_at[which], self.last_topic_id[which],
                    z, z.copy(), np.zeros(k, bool), np.full(k, -1, np.int64), z.copy())  # fmt: skip

    def answers(
        self, lag: Lag, part: np.ndarray, asof: np.ndarray, committed: np.ndarray, tail: Tail | None = None
    ) -> np.ndarray:
        """Per partition: whether the lag computed with this account (and `tail`) instead of its
        earlier rows is exact. It is not where a point comes before the last earlier row's time,
        or is behind with its first unconsumed record among the earlier rows the tail does not
        hold, or the partition's end offsets once went back (recreated)."""
        bad = self.has & (self.log_end > self.last_end)
        early = self.has[part] & (self.last_at[part] != NO) & (asof < self.last_at[part])
        behind = (lag.lag_records != NO) & (lag.lag_records > 0)
        floor = self.last_end if tail is None else tail.floor(self.last_end)
        inside = self.has[part] & behind & (committed < floor[part])
        hit = np.zeros(len(self.has), bool)
        np.logical_or.at(hit, part[early | inside], True)
        return ~(bad | hit)


@dataclass
class Tail:
    """Per partition (by index), its last earlier rows with a time: a suffix of them by (end
    offset, at), TAIL_ROWS at most. `known`: it has one; `complete`: it holds every earlier row
    with a time. A point behind is answered from it when its committed offset is at least the
    tail's smallest end offset (the last row at or below the offset and every row after it are
    in the tail), or always when it is complete."""

    rows: Rows
    known: np.ndarray  # bool
    complete: np.ndarray  # bool

    @staticmethod
    def none(n: int) -> Tail:
        return Tail(Rows.empty(), np.zeros(n, bool), np.zeros(n, bool))

    def floor(self, last_end: np.ndarray) -> np.ndarray:
        """Per partition: the committed offset from which a point behind is answered (NO: any);
        `last_end` where it has no tail (only the last row is known)."""
        out = np.array(last_end)
        low = np.full(len(out), np.iinfo(np.int64).max, np.int64)
        np.minimum.at(low, self.rows.part, self.rows.end)
        out[self.known] = low[self.known]
        out[self.known & self.complete] = NO
        return out


def next_tail(base: Tail, fresh: Rows, reach: np.ndarray | None = None) -> Tail:
    """The tails once `fresh` rows follow the earlier ones `base` holds (for its known
    partitions: none elsewhere). A partial tail whose partition got a row below its smallest
    (end offset, at) is no longer a suffix: that partition's tail is dropped. A tail holds the
    partition's last TAIL_ROWS rows; with `reach` (per partition, the smallest committed offset
    it should answer for, NO: none), from its last row at or below that offset on if more, when
    that is at most TAIL_REACH_ROWS rows, and while the rows beyond TAIL_ROWS of all the tails
    so made stay within TAIL_REACH_BUDGET (the partitions that need fewest first)."""
    n = len(base.known)
    old = np.flatnonzero(base.known[base.rows.part] & (base.rows.at != NO))
    new = np.flatnonzero(base.known[fresh.part] & (fresh.at != NO))
    every = Rows.concat([base.rows.take(old), fresh.take(new)])
    is_new = np.r_[np.zeros(len(old), bool), np.ones(len(new), bool)]
    order = sorted_order(every.part, every.end, every.at)  # stable: at a tie the earlier row first
    part = every.part[order]
    first = np.r_[True, part[1:] != part[:-1]] if len(part) else np.zeros(0, bool)
    has_old = np.zeros(n, bool)
    has_old[every.part[: len(old)]] = True
    # a new row first while earlier ones are held: below the partial tail's lowest row
    below = part[first & is_new[order]]
    keep = base.known.copy()
    keep[below[~base.complete[below] & has_old[below]]] = False
    ends = np.searchsorted(part, np.arange(n), side="right")
    from_end = ends[part] - 1 - np.arange(len(part))  # 0 for each partition's last row
    counts = np.bincount(part, minlength=n)
    limit = np.full(n, TAIL_ROWS, np.int64)
    if reach is not None and len(part):
        # rows sorted by end offset within a partition: those at or below its reach come first
        below = np.bincount(part[every.end[order] <= reach[part]], minlength=n)
        wanted = counts - np.maximum(below - 1, 0)  # from the last row at or below on (all if none)
        deeper = np.flatnonzero((reach != NO) & (wanted > TAIL_ROWS) & (wanted <= TAIL_REACH_ROWS))
        extra = wanted[deeper] - TAIL_ROWS
        fewest = np.argsort(extra, kind="stable")
        deeper = deeper[fewest[np.cumsum(extra[fewest]) <= TAIL_REACH_BUDGET]]
        limit[deeper] = wanted[deeper]
    tail = every.take(order[(from_end < limit[part]) & keep[part]])
    return Tail(tail, keep, keep & base.complete & (counts <= limit))


def summarise(rows: Rows, earlier: Earlier) -> Earlier:
    """The account of each partition's rows once `rows` follow its earlier ones."""
    n = len(earlier.has)
    out = Earlier(*(np.array(getattr(earlier, f)) for f in _EARLIER_FIELDS))
    order = sorted_order(rows.part, rows.at, rows.end)
    r = rows.take(order)
    _summarise(r.part, r.at, r.end, r.topic_id, r.first_offset, out.has, out.last_at, out.last_end,
               out.last_topic_id, out.log_end, out.first_at, out.first_offset, n)  # fmt: skip
    return out


_EARLIER_FIELDS = ("has", "last_at", "last_end", "last_topic_id", "log_end", "first_at", "first_offset")


@njit(cache=True, nogil=True)
def _summarise(part, at, end, tid, first_offset, has, last_at, last_end, last_tid, log_end, first_at, first_off, n):
    # rows sorted by (part, at, end); NO (no time) is the smallest `at`
    for i in range(len(part)):
        p = part[i]
        if not has[p]:
            has[p] = True
            first_at[p] = at[i]
            first_off[p] = first_offset[i]
            log_end[p] = end[i]
            last_at[p] = at[i]
            last_end[p] = end[i]
            last_tid[p] = tid[i]
            continue
        if (i == 0 or part[i - 1] != p) and at[i] < first_at[p]:
            first_at[p] = at[i]
            first_off[p] = first_offset[i]
        if end[i] > log_end[p]:
            log_end[p] = end[i]
        if at[i] > last_at[p] or (at[i] == last_at[p] and end[i] >= last_end[p]):
            last_at[p] = at[i]
            last_end[p] = end[i]
            last_tid[p] = tid[i]


@dataclass
class Lag:
    """Per point: the end offset and lag in records; for the points behind, the batch holding
    the first unconsumed record and the interpolated time of that record."""

    end_offset: np.ndarray  # NO: unknown
    end_offset_at: np.ndarray  # ms, NO
    topic_id: np.ndarray  # code, -1
    lag_records: np.ndarray  # NO: unknown
    truncated: np.ndarray  # bool
    batch_first_offset: np.ndarray
    batch_first_ts: np.ndarray
    batch_segment_file: np.ndarray  # code, -1
    batch_byte_position: np.ndarray
    interpolated_ms: np.ndarray

    def lookups(self, committed: np.ndarray, part: np.ndarray, present: Callable[[], np.ndarray]) -> np.ndarray:
        """The points whose first unconsumed record's time needs its batch decoded: behind, in a
        segment batch still in the log dir (`present()`: the segment files there, as keys of the
        partition's index (`part`) << 32 | the file's code; asked only if a point may need one)
        whose header does not tell it, and that holds the offset."""
        behind = (self.lag_records != NO) & (self.lag_records > 0)
        file = self.batch_segment_file
        header_tells = (self.batch_first_offset == committed) & (self.batch_first_ts != NO)
        holds = self.batch_first_offset <= committed  # (NO, unknown, holds)
        wanted = behind & (file >= 0) & ~header_tells & holds
        # whether the file is still there, asked of those only: np.isin sorts what it is given,
        # and most points are not behind or have their time in the batch header
        some = np.flatnonzero(wanted)
        if len(some):
            wanted[some] = np.isin(part[some].astype(np.int64) << 32 | file[some], present())
        return wanted


def lag_at(
    rows: Rows,
    earlier: Earlier,
    part: np.ndarray,
    at: np.ndarray,
    asof: np.ndarray,
    committed: np.ndarray,
    tail: Tail | None = None,
) -> Lag:
    """The lag of points (`part`: their partition's index; `at` and `asof` in ms: the instant
    of the point and the one whose end offset it takes; `committed`: the committed offsets) from
    each partition's `rows` after its `earlier` ones and their `tail` (exact where
    `earlier.answers` says so)."""
    n_parts = len(earlier.has)
    known = np.zeros(n_parts, bool) if tail is None else tail.known
    # each partition's earlier last row before its rows (it holds no batch: no segment row),
    # or its tail
    before = earlier.last_rows(np.flatnonzero(earlier.has & (earlier.last_at != NO) & ~known))
    if tail is not None and len(tail.rows):
        before = Rows.concat([before, tail.rows.take(np.flatnonzero(known[tail.rows.part]))])
    every = Rows.concat([before, rows]) if len(before) else rows
    order = sorted_order(every.part, every.at, every.end)  # NO first: rows without a time, as Spark's nulls
    r = every.take(order)
    starts = np.searchsorted(r.part, np.arange(n_parts + 1), side="left")
    timed = r.at != NO
    # rows with a time, by (part, end, at): the order the first unconsumed record is found in
    t_idx = np.flatnonzero(timed)
    by_end = t_idx[sorted_order(r.part[t_idx], r.end[t_idx], r.at[t_idx])]
    t_starts = np.searchsorted(r.part[by_end], np.arange(n_parts + 1), side="left")
    # per partition: its first row and largest end offset, over the earlier rows and these
    whole = summarise(rows, earlier)
    n = len(part)
    out = [np.empty(n, np.int64) for _ in range(9)]
    truncated = np.zeros(n, bool)
    _lag(  # type: ignore[call-arg]  # (numba's Dispatcher stub takes no *args)
        r.end, r.at, r.topic_id, r.first_offset, r.first_ts, r.is_segment, r.segment_file, r.byte_position,
        starts, by_end, t_starts, _next_segment(by_end, r.is_segment, t_starts),
        whole.has, whole.log_end, whole.first_at, whole.first_offset,
        part, at, asof, committed, *out, truncated,
    )  # fmt: skip
    end, end_at, tid, lag, b_first, b_ts, b_file, b_pos, interp = out
    return Lag(end, end_at, tid, lag, truncated, b_first, b_ts, b_file, b_pos, interp)


@njit(cache=True, nogil=True)
def _next_segment(by_end, is_segment, t_starts):
    """For each position of `by_end`: the first at or after it, in its partition, that is a
    segment batch (-1: none)."""
    out = np.full(len(by_end), -1, np.int64)
    for p in range(len(t_starts) - 1):
        nxt = -1
        for k in range(t_starts[p + 1] - 1, t_starts[p] - 1, -1):
            if is_segment[by_end[k]]:
                nxt = k
            out[k] = nxt
    return out


@njit(cache=True, nogil=True)
def _lag(
    end, at, tid, first_offset, first_ts, is_segment, segment_file, byte_position,
    starts, by_end, t_starts, next_segment,
    has_rows, log_ends, first_ats, first_offsets,
    p_part, p_at, p_asof, committed,
    o_end, o_end_at, o_tid, o_lag, o_b_first, o_b_ts, o_b_file, o_b_pos, o_interp, o_trunc,
):  # fmt: skip
    for i in range(len(p_part)):
        p = p_part[i]
        lo, hi = starts[p], starts[p + 1]
        c = committed[i]
        o_b_first[i] = NO
        o_b_ts[i] = NO
        o_b_file[i] = -1
        o_b_pos[i] = NO
        o_interp[i] = NO
        has = has_rows[p]
        log_end = log_ends[p]
        first_at = first_ats[p]
        first_off = first_offsets[p]
        # as of `asof`: the last row with a time at or before it (rows sorted by (at, end))
        a, b = lo, hi
        while a < b:
            mid = (a + b) // 2
            if at[mid] <= p_asof[i]:  # NO sorts first and is at or before any instant
                a = mid + 1
            else:
                b = mid
        idx = a - 1
        found = idx >= lo and at[idx] != NO
        truncated = has and log_end != NO and c > log_end
        o_trunc[i] = truncated
        if found:
            e = end[idx]
            o_end_at[i] = at[idx]
            o_tid[i] = tid[idx]
            o_end[i] = e if truncated else max(e, c)
        else:
            o_end_at[i] = NO
            o_tid[i] = -1
            o_end[i] = NO
            if has and first_at != NO and first_off != NO and p_at[i] < first_at and c == first_off:
                o_end[i] = c
        o_lag[i] = o_end[i] - c if o_end[i] != NO else NO
        if o_lag[i] == NO or o_lag[i] <= 0:
            continue
        # behind: the rows around O by end offset (rows with a time only)
        tlo, thi = t_starts[p], t_starts[p + 1]
        a, b = tlo, thi
        while a < b:
            mid = (a + b) // 2
            if end[by_end[mid]] <= c:
                a = mid + 1
            else:
                b = mid
        after = a  # the first whose end offset is above O
        if after > tlo and after < thi:
            e1 = end[by_end[after - 1]]
            t1 = float(at[by_end[after - 1]])
            e2 = end[by_end[after]]
            t2 = float(at[by_end[after]])
            if e2 > e1:
                o_interp[i] = np.int64(np.floor(t1 + (c + 1 - e1) * (t2 - t1) / (e2 - e1)))
        k = next_segment[after] if after < thi else -1
        if k >= 0:
            j = by_end[k]
            o_b_first[i] = first_offset[j]
            o_b_ts[i] = first_ts[j]
            o_b_file[i] = segment_file[j]
            o_b_pos[i] = byte_position[j]


@dataclass
class TimeLag:
    lag_ms: np.ndarray  # NO: unknown
    method: np.ndarray  # int8 code into METHODS, -1 null
    first_unconsumed_ms: np.ndarray  # NO


METHODS = ("caught_up", "record", "interpolated", "end_offset_unknown")


def time_lag(lag: Lag, at: np.ndarray, committed: np.ndarray, record_ms: np.ndarray) -> TimeLag:
    """The lag in time of points (`record_ms`: the first unconsumed record's timestamp where its
    batch was decoded, NO elsewhere)."""
    header = (lag.batch_first_offset == committed) & (lag.batch_first_ts != NO)
    record = np.where(header, lag.batch_first_ts, record_ms)
    unknown = (lag.lag_records == NO) | lag.truncated
    behind = ~unknown & (lag.lag_records > 0)
    has_record = record != NO
    has_interp = lag.interpolated_ms != NO
    method = np.full(len(at), -1, np.int8)
    method[~unknown & ~behind] = 0
    method[(lag.lag_records == NO) & ~lag.truncated] = 3  # no end offset known yet
    method[behind & ~has_record & has_interp] = 2
    method[behind & has_record] = 1
    lag_ms = np.full(len(at), NO, np.int64)
    lag_ms[~unknown & ~behind] = 0
    from_record = behind & has_record
    lag_ms[from_record] = np.maximum(0, at[from_record] - record[from_record])
    from_interp = behind & ~has_record & has_interp
    lag_ms[from_interp] = np.maximum(0, at[from_interp] - lag.interpolated_ms[from_interp])
    first = np.where(has_record, record, lag.interpolated_ms)
    first_ms = np.where(behind & (first != NO), first, NO)
    return TimeLag(lag_ms, method, first_ms)
