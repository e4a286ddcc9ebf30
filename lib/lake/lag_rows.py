"""Consumer lag of one topic partition at given points, from that partition's end-offset rows
(numpy; no Spark, no I/O). The rules, once:

- The end offset as of an instant is the last end-offset row at or before it (rows first at
  equal times; among rows of one instant the largest end offset). A group that committed O had
  read the records below O, so the end offset is never taken below O; before the partition's
  first known row, a group that had committed exactly that row's first offset had nothing left.
- A committed offset beyond everything the partition's log ever held (its largest end offset)
  is `truncated` (the topic was truncated or recreated): the end offset is then the one as of
  the instant, the lag negative, and no lag in time.
- The lag in time is the age, at the point, of the first record not consumed (the record at the
  committed offset O): its timestamp from the header of the batch that holds it when the batch
  opens with it, else from its batch decoded (the caller looks it up: `Lag.lookups`), else
  interpolated between the end-offset rows around it (the last whose end offset is at most O and
  the first above O), as kafka-lag-exporter does. `lag_ms_method` says which (`caught_up` when
  nothing is left to consume).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

NO = np.iinfo(np.int64).min  # an absent value in an int64 column of this module


def _ms(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """TIMESTAMP (µs) -> epoch ms as Spark's unix_micros / 1000 cast to BIGINT (toward zero);
    null -> NO."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    micros = arr.cast(pa.int64()).fill_null(NO).to_numpy()
    out = np.where(micros == NO, NO, (np.abs(micros) // 1000) * np.sign(micros))
    return out.astype(np.int64)


def _ints(col, fill: int = NO) -> np.ndarray:
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    return arr.cast(pa.int64()).fill_null(fill).to_numpy()


@dataclass
class Timeline:
    """A topic partition's end-offset rows (partition_end_offsets columns), sorted by
    (at, end_offset), rows without a time first."""

    end: np.ndarray
    at: np.ndarray  # ms, NO when null
    topic_id: np.ndarray  # object
    first_offset: np.ndarray  # NO when null
    first_ts: np.ndarray  # ms, NO when null
    timestamp_type: np.ndarray  # object
    is_segment: np.ndarray  # bool
    segment_file: np.ndarray  # object
    byte_position: np.ndarray  # NO when null

    @staticmethod
    def of(rows: pa.Table) -> Timeline:
        at = _ms(rows.column("at"))
        end = _ints(rows.column("end_offset"))
        order = np.lexsort((end, at))  # NO sorts first: rows without a time, as Spark's nulls
        return Timeline(
            end[order],
            at[order],
            np.asarray(rows.column("topic_id").to_pylist(), dtype=object)[order],
            _ints(rows.column("first_offset"))[order],
            _ms(rows.column("first_timestamp"))[order],
            np.asarray(rows.column("timestamp_type").to_pylist(), dtype=object)[order],
            (np.asarray(rows.column("source").to_pylist(), dtype=object) == "segment")[order],
            np.asarray(rows.column("segment_file").to_pylist(), dtype=object)[order],
            _ints(rows.column("byte_position"))[order],
        )

    def __len__(self) -> int:
        return len(self.end)


@dataclass(frozen=True)
class EarlierRows:
    """What a topic partition's lag checkpoint says of its rows in the table: the last (the
    largest `at` and, then, end offset), the largest end offset of any, and the first (the
    smallest (`at`, end offset), rows without a time first). Enough to answer every point after
    the last row's time whose first unconsumed record is not among them (`lag_at`)."""

    last_at_ms: int | None
    last_end: int
    last_topic_id: str | None
    log_end: int
    first_at_ms: int | None
    first_offset: int | None

    @staticmethod
    def of(tl: Timeline) -> EarlierRows | None:
        if not len(tl):
            return None
        timed = np.flatnonzero(tl.at != NO)
        last = int(timed[-1]) if len(timed) else len(tl) - 1
        return EarlierRows(
            None if tl.at[last] == NO else int(tl.at[last]),
            int(tl.end[last]),
            tl.topic_id[last],
            int(tl.end.max()),
            None if tl.at[0] == NO else int(tl.at[0]),
            None if tl.first_offset[0] == NO else int(tl.first_offset[0]),
        )

    def answers(self, lag: Lag, asof: np.ndarray, committed: np.ndarray) -> bool:
        """Whether `lag` (computed with these EarlierRows for the rows themselves) is exact: no
        point before the last row's time, none behind whose first unconsumed record lies among
        the earlier rows, and end offsets that never went back (a recreated topic)."""
        if self.log_end > self.last_end:
            return False
        if self.last_at_ms is not None and bool((asof < self.last_at_ms).any()):
            return False
        behind = (lag.lag_records != NO) & (lag.lag_records > 0)
        return not bool((behind & (committed < self.last_end)).any())


@dataclass
class Lag:
    """Per point: the end offset and lag in records; for the points behind, the batch holding
    the first unconsumed record and the interpolated time of that record."""

    end_offset: np.ndarray  # NO: unknown
    end_offset_at: np.ndarray  # ms, NO
    topic_id: np.ndarray  # object
    lag_records: np.ndarray  # NO: unknown
    truncated: np.ndarray  # bool
    batch_first_offset: np.ndarray
    batch_first_ts: np.ndarray
    batch_segment_file: np.ndarray  # object
    batch_byte_position: np.ndarray
    interpolated_ms: np.ndarray

    def lookups(self, committed: np.ndarray, present: set[str]) -> np.ndarray:
        """The points whose first unconsumed record's time needs its batch decoded: behind, in a
        segment batch still in the log dir (`present`: its segment file names) whose header does
        not tell it, and that holds the offset."""
        behind = (self.lag_records != NO) & (self.lag_records > 0)
        held = np.array([f is not None and f in present for f in self.batch_segment_file], dtype=bool)
        header_tells = (self.batch_first_offset == committed) & (self.batch_first_ts != NO)
        holds = (self.batch_first_offset == NO) | (self.batch_first_offset <= committed)
        return behind & held & ~header_tells & holds


def _before(tl: Timeline, earlier: EarlierRows) -> Timeline:
    """`tl` with the earlier rows' last row in front (not a segment batch: no batch holds an
    offset at or above its end)."""

    def one(value, dtype=np.int64):
        return np.array([value], dtype=dtype)

    return Timeline(
        np.concatenate([one(earlier.last_end), tl.end]),
        np.concatenate([one(earlier.last_at_ms), tl.at]),
        np.concatenate([one(earlier.last_topic_id, object), tl.topic_id]),
        np.concatenate([one(NO), tl.first_offset]),
        np.concatenate([one(NO), tl.first_ts]),
        np.concatenate([one(None, object), tl.timestamp_type]),
        np.concatenate([one(False, bool), tl.is_segment]),
        np.concatenate([one(None, object), tl.segment_file]),
        np.concatenate([one(NO), tl.byte_position]),
    )


def lag_at(
    tl: Timeline, at: np.ndarray, asof: np.ndarray, committed: np.ndarray, earlier: EarlierRows | None = None
) -> Lag:
    """The lag of points (`at` and `asof` in ms: the instant of the point and the one whose end
    offset it takes; `committed`: the committed offsets) on the partition of `tl`, whose rows
    follow `earlier` ones when given (exact where `earlier.answers` says so)."""
    n = len(at)
    first_at: int | None = None
    first_offset: int | None = None
    log_end: int | None = None
    if len(tl):
        first_at = None if tl.at[0] == NO else int(tl.at[0])
        first_offset = None if tl.first_offset[0] == NO else int(tl.first_offset[0])
        log_end = int(tl.end.max())
    if earlier is not None:
        first_at, first_offset = earlier.first_at_ms, earlier.first_offset
        log_end = earlier.log_end if log_end is None else max(log_end, earlier.log_end)
        if earlier.last_at_ms is not None:
            tl = _before(tl, earlier)
    timed = tl.at != NO
    t_at, t_end, t_id = tl.at[timed], tl.end[timed], tl.topic_id[timed]
    # as of `asof`: the last timed row at or before it (sorted by (at, end): the largest end then)
    idx = np.searchsorted(t_at, asof, side="right") - 1
    found = idx >= 0
    safe = np.where(found, idx, 0)
    end_asof = np.where(found, t_end[safe] if len(t_end) else NO, NO)
    end_at = np.where(found, t_at[safe] if len(t_at) else NO, NO)
    topic_id = np.full(n, None, dtype=object)
    if len(t_id):
        topic_id[found] = t_id[safe[found]]
    truncated = committed > log_end if log_end is not None else np.zeros(n, bool)
    if first_at is not None and first_offset is not None:
        before_first = ~found & (at < first_at) & (committed == first_offset)
    else:
        before_first = np.zeros(n, bool)
    end = np.where(truncated, end_asof, np.maximum(end_asof, committed))
    end = np.where(found, end, NO)
    end = np.where(before_first, committed, end)
    lag = np.where(end != NO, end - committed, NO)

    # the first unconsumed record (offset O = committed): rows by end offset; the last timed row
    # ending at or below O, the first above it, and the first segment batch above it
    b_first = np.full(n, NO, np.int64)
    b_ts = np.full(n, NO, np.int64)
    b_file = np.full(n, None, dtype=object)
    b_pos = np.full(n, NO, np.int64)
    interpolated = np.full(n, NO, np.int64)
    behind = (lag != NO) & (lag > 0)
    if behind.any() and len(t_end):
        by_end = np.lexsort((t_at, t_end))
        e, t = t_end[by_end], t_at[by_end].astype(np.float64)
        seg = tl.is_segment[timed][by_end]
        o = committed[behind]
        after = np.searchsorted(e, o, side="right")  # first row whose end is above O
        has_next = after < len(e)
        has_prev = after > 0
        nxt = np.where(has_next, after, 0)
        prv = np.where(has_prev, after - 1, 0)
        e1, t1, e2, t2 = e[prv], t[prv], e[nxt], t[nxt]
        ok = has_prev & has_next & (e2 > e1)
        with np.errstate(invalid="ignore", divide="ignore"):
            value = np.floor(t1 + (o + 1 - e1) * (t2 - t1) / np.where(ok, e2 - e1, 1))
        interpolated[behind] = np.where(ok, value, NO).astype(np.int64)
        # the first segment batch at or after `after`
        seg_rows = np.flatnonzero(seg)
        k = np.searchsorted(seg_rows, after, side="left")
        held = k < len(seg_rows)
        holder = by_end[seg_rows[np.where(held, k, 0)]] if len(seg_rows) else np.zeros(len(o), np.int64)
        timed_rows = np.flatnonzero(timed)
        src = timed_rows[holder] if len(seg_rows) else holder
        b_first[behind] = np.where(held, tl.first_offset[src], NO)
        b_ts[behind] = np.where(held, tl.first_ts[src], NO)
        files = np.full(len(o), None, dtype=object)
        files[held] = tl.segment_file[src[held]]
        b_file[behind] = files
        b_pos[behind] = np.where(held, tl.byte_position[src], NO)
    return Lag(end, end_at, topic_id, lag, truncated, b_first, b_ts, b_file, b_pos, interpolated)


@dataclass
class TimeLag:
    lag_ms: np.ndarray  # NO: unknown
    method: np.ndarray  # object: record, interpolated, caught_up, None
    first_unconsumed_ms: np.ndarray  # NO


def time_lag(lag: Lag, at: np.ndarray, committed: np.ndarray, record_ms: np.ndarray) -> TimeLag:
    """The lag in time of points (`record_ms`: the first unconsumed record's timestamp where its
    batch was decoded, NO elsewhere)."""
    header = (lag.batch_first_offset == committed) & (lag.batch_first_ts != NO)
    record = np.where(header, lag.batch_first_ts, record_ms)
    unknown = (lag.lag_records == NO) | lag.truncated
    behind = ~unknown & (lag.lag_records > 0)
    has_record = record != NO
    has_interp = lag.interpolated_ms != NO
    method = np.full(len(at), None, dtype=object)
    method[~unknown & ~behind] = "caught_up"
    method[behind & ~has_record & has_interp] = "interpolated"
    method[behind & has_record] = "record"
    lag_ms = np.full(len(at), NO, np.int64)
    lag_ms[~unknown & ~behind] = 0
    from_record = behind & has_record
    lag_ms[from_record] = np.maximum(0, at[from_record] - record[from_record])
    from_interp = behind & ~has_record & has_interp
    lag_ms[from_interp] = np.maximum(0, at[from_interp] - lag.interpolated_ms[from_interp])
    first = np.where(has_record, record, lag.interpolated_ms)
    first_ms = np.where(behind & (first != NO), first, NO)
    return TimeLag(lag_ms, method, first_ms)
