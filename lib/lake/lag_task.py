"""One Spark task of the lag stage, JVM-free: the topic partitions of a range of buckets
(lib.lake.lag_input).

The partitions' new batches are read from their headers (lib.source.topic_scan: no CRC check,
no decompression) into partition_end_offsets rows, or a live cluster's samples come from the
driver; then the lag of every point on them (the commits that took effect since the last lag
stage, read from the replay's lag input, and every live offset at --now, from group_offsets)
is computed for all of them at once (lib.lake.lag_rows), from the new rows, what each
partition's checkpoint says of its earlier rows and its tail (its last rows, in the file of
_lag_tails the checkpoint names), or, for the partitions where a point needs more, the earlier
rows themselves (read from the table's files: the row groups of those partitions). The task
writes its partitions' next tails to one file. A record is decoded only where its batch header
does not tell its time. Rows go to Parquet files in the tables' folders, invisible until the
driver commits them; what returns is the files and each partition's checkpoint. Memory: the
task's points and its partitions' new rows (a task is sized so that they fit), their tails, and
the earlier rows of the partitions that need them."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from lib import storage
from lib.codec.errors import DecodeError
from lib.lake.behind import behind_now
from lib.lake.lag_input import NameTable, buckets, pair_cells, read_events
from lib.lake.lag_plan import LAG_TAILS, now_file_prefix
from lib.lake.lag_rows import (
    METHODS,
    NO,
    ROW_FIELDS,
    Earlier,
    Lag,
    Names,
    Rows,
    Tail,
    lag_at,
    next_tail,
    rows_of,
    summarise,
    time_lag,
)
from lib.lake.partition_task import FileWriter
from lib.lake.seams import LagTask, LagTaskResult, PartitionInput, WrittenFile
from lib.lake.worker_errors import WorkerError
from lib.source.topic_scan import TIMESTAMP_TYPES, record_timestamps, scan_partition
from schemas import tables as T

_TS = pa.timestamp("us", tz="UTC")
ROW_GROUP_ROWS = 65_536
# partition_end_offsets' row groups: where a tail cannot answer for a partition its rows are read,
# the row groups whose topic and partition statistics may hold it (_History): smaller ones, fewer
# other partitions' rows read with them
HISTORY_GROUP_ROWS = 8_192


def _same(value: str, n: int) -> pa.Array:
    """A string column holding `value` n times (built in Arrow: an object array of n strings
    cost 0.2 s a million rows)."""
    return pa.repeat(pa.scalar(value, pa.string()), n)


# --- points ----------------------------------------------------------------------------------------


@dataclass
class _Points:
    """The points of a task, sorted: the commits first, then the live offsets at now, each by
    topic partition (stable). `table`: _POINT_SCHEMA, its group ids and topics as codes into
    `groups` and `topics`; `pairs`: the distinct (topic, partition) of the points in that
    order, and `pair`: each point's index into it."""

    table: pa.Table
    commits: int
    groups: list[str]
    topics: list[str]
    pairs: list[tuple[str, int]]
    pair: np.ndarray


_POINT_SCHEMA = pa.schema(
    [
        ("group", pa.int32()),
        ("topic", pa.int32()),
        ("partition", pa.int32()),
        ("at", _TS),
        ("asof", _TS),
        ("committed_offset", pa.int64()),
        ("offsets_partition", pa.int32()),
        ("log_offset", pa.int64()),
    ]
)


def _points(task: LagTask) -> _Points:
    """The commits (at the record that made them effective) and the live offsets at now, of
    the task's buckets."""
    events = read_events(list(task.event_files), task.bucket_lo, task.bucket_hi, task.watermarks)
    table = events.table
    applied = table.column("applied_at")
    n = table.num_rows
    parts = [
        pa.table(
            {
                "group": table.column("group"),
                "topic": table.column("topic"),
                "partition": table.column("partition"),
                "at": applied,
                "asof": applied,
                "committed_offset": table.column("committed_offset"),
                "offsets_partition": table.column("offsets_partition"),
                "log_offset": table.column("applied_offset"),
            }
        )
    ]
    keep = [_valid(applied)]
    groups, topics = NameTable(events.groups), NameTable(events.topics)
    for path in task.live_offset_files:
        live = storage.open_parquet(path).read(
            columns=["group_id", "topic", "partition", "committed_offset", "offsets_partition"], use_threads=False
        )
        b = buckets(live.column("topic"), live.column("partition"))
        live = live.filter(pa.array((b >= task.bucket_lo) & (b < task.bucket_hi)))
        k = live.num_rows
        parts.append(
            pa.table(
                {
                    "group": pa.array(groups.encode(live.column("group_id")), pa.int32()),
                    "topic": pa.array(topics.encode(live.column("topic")), pa.int32()),
                    "partition": live.column("partition"),
                    "at": pa.array(np.full(k, task.now_ms * 1000, np.int64), _TS),
                    "asof": pa.array(np.full(k, task.now_asof_ms * 1000, np.int64), _TS),
                    "committed_offset": live.column("committed_offset"),
                    "offsets_partition": live.column("offsets_partition"),
                    "log_offset": pa.nulls(k, pa.int64()),
                }
            )
        )
        keep.append(np.ones(k, bool))
    # one table of chunks, taken once in its sorted order (numbers only)
    points = pa.concat_tables([p.cast(_POINT_SCHEMA) for p in parts])
    is_now = np.concatenate([np.zeros(n, np.int64), np.ones(points.num_rows - n, np.int64)])
    mask = np.concatenate(keep)
    topic_codes = _ints(points.column("topic"))
    # the topics' ranks by name: the order of (topic, partition) from integer keys
    by_name = np.argsort(np.array(topics.names, dtype=object), kind="stable") if topics.names else np.zeros(0, np.int64)
    rank = np.empty(len(topics.names), np.int64)
    rank[by_name] = np.arange(len(topics.names))
    order, pair_rank, pair_partition, pair = point_order(
        rank[topic_codes], _ints(points.column("partition")), is_now.astype(bool), mask
    )
    by_rank = [topics.names[i] for i in by_name.tolist()]
    pairs = [(by_rank[r], p) for r, p in zip(pair_rank.tolist(), pair_partition.tolist())]
    return _Points(points.take(order), int(np.count_nonzero(mask[:n])), groups.names, topics.names, pairs, pair)


def point_order(
    rank: np.ndarray, partition: np.ndarray, is_now: np.ndarray, mask: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The points kept (`mask`) ordered by (is_now, topic rank, partition), stably; their
    distinct (rank, partition) pairs ascending (ranks, partitions); and each ordered point's
    pair. Where the pairs fit a table (lag_input.pair_cells), by that table: radix passes of 16
    bits and a lookup, where sorting 64-bit keys twice (np.argsort, np.unique) was most of a lag
    task's reading of its commits."""
    table = pair_cells(rank, partition)
    if table is not None and table[3] <= 1 << 31:
        cell, span, low, size = table
        order = _stable_order(is_now.astype(np.int64) * size + cell, 2 * size)
        order = order[mask[order]]
        cell = cell[order]
        present = np.zeros(size, np.bool_)
        present[cell] = True
        cells = np.flatnonzero(present)
        ranks_of = np.cumsum(present, dtype=np.int64) - 1
        return order, cells // span, cells % span + low, ranks_of[cell]
    key = (rank << 32) | (partition + (1 << 31))
    order = np.argsort(is_now.astype(np.int64) << 62 | key, kind="stable")
    order = order[mask[order]]
    uniq, pair = np.unique(key[order], return_inverse=True)
    return order, uniq >> 32, (uniq & 0xFFFFFFFF) - (1 << 31), pair.reshape(-1).astype(np.int64)


def _stable_order(keys: np.ndarray, bound: int) -> np.ndarray:
    """np.argsort(keys, kind="stable") for keys in [0, bound), bound <= 2**32: numpy's radix
    sort on 16-bit keys, once or twice (low half, then high half)."""
    if bound <= 1 << 16:
        return np.argsort(keys.astype(np.uint16), kind="stable")
    order = np.argsort((keys & 0xFFFF).astype(np.uint16), kind="stable")
    return order[np.argsort((keys[order] >> 16).astype(np.uint16), kind="stable")]


def _ints(column: pa.ChunkedArray) -> np.ndarray:
    return np.concatenate([c.to_numpy(zero_copy_only=False) for c in column.chunks] or [np.zeros(0)]).astype(np.int64)


def _valid(column: pa.ChunkedArray) -> np.ndarray:
    if column.null_count == 0:
        return np.ones(len(column), bool)
    return np.concatenate([c.is_valid().to_numpy(zero_copy_only=False) for c in column.chunks] or [np.zeros(0, bool)])


# --- new end-offset rows ------------------------------------------------------------------------------


class _NewRows:
    """The partitions' new end-offset rows: for the kernel (Rows) and, at the end, as
    partition_end_offsets rows. A scanned segment's rows are kept as one block (an int64 row
    per Rows field, the header's -1s as they are) and made Rows all at once: Rows of their own,
    a few rows each, were 10 numpy calls a segment and 9 concatenations of 1,300 pieces a task
    (make bench's 1% incremental run: 40 of a lag task's 330 ms)."""

    def __init__(self, names: Names):
        self.names = names
        self.pieces: list[np.ndarray | Rows] = []  # in the order read: a scanned block, or a sample's Rows
        self.extra: list[tuple | None] = []  # per piece: max timestamp, timestamp type, control (None: sampled)
        self.samples: list[pa.Table] = []
        self.batches = 0

    def scan(self, i: int, tp: PartitionInput, checkpoint: dict) -> None:
        assert tp.log is not None
        try:
            scans = scan_partition(tp.log, tp.scan_from)
        except DecodeError as e:
            raise WorkerError(
                type(e).__name__,
                e.message,
                file=e.file,
                partition=e.partition,
                offset=e.offset,
                position=e.position,
                topic=tp.topic,
            ).exception() from None
        running = -1 if tp.running_at_ms is None else int(tp.running_at_ms)
        topic_id = self.names.code(tp.log.topic_id)
        for scan in scans:
            n = len(scan)
            checkpoint["segment_base_offset"] = scan.segment.base_offset
            checkpoint["next_byte_position"] = scan.next_position
            checkpoint["trailing_bytes"] = scan.trailing_bytes
            if n == 0:
                continue
            self.batches += n
            # end offsets never go back in time: `at` is the largest max timestamp so far
            block = np.empty((len(ROW_FIELDS), n), np.int64)
            at = block[_ROW["at"]]
            np.maximum.accumulate(np.maximum(scan.max_timestamp, running), out=at)
            running = int(at[-1])
            checkpoint["next_offset"] = int(scan.end_offset[-1])
            checkpoint["at_ms"] = running if running >= 0 else None
            block[_ROW["part"]] = i
            block[_ROW["end"]] = scan.end_offset
            block[_ROW["topic_id"]] = topic_id
            block[_ROW["first_offset"]] = scan.first_offset
            block[_ROW["first_ts"]] = scan.first_timestamp
            block[_ROW["is_segment"]] = 1
            block[_ROW["segment_file"]] = self.names.code(storage.basename(scan.segment.path))
            block[_ROW["byte_position"]] = scan.position
            self.pieces.append(block)
            self.extra.append((scan.max_timestamp, scan.timestamp_type, scan.is_control))

    def sampled(self, i: int, samples: pa.Table) -> None:
        self.samples.append(samples)
        self.pieces.append(rows_of(samples, i, self.names))
        self.extra.append(None)

    def rows(self) -> Rows:
        """Every new row, in the order read."""
        runs: list[Rows] = []
        blocks: list[np.ndarray] = []
        for piece in self.pieces:
            if isinstance(piece, np.ndarray):
                blocks.append(piece)
                continue
            if blocks:
                runs.append(_rows_of_blocks(blocks))
                blocks = []
            runs.append(piece)
        if blocks:
            runs.append(_rows_of_blocks(blocks))
        return runs[0] if len(runs) == 1 else Rows.concat(runs)

    def table(self, keys: list[tuple[str, int]], run_id: str) -> pa.Table | None:
        """The new rows as partition_end_offsets rows (scanned ones; samples as given)."""
        scanned = [(b, e) for b, e in zip(self.pieces, self.extra) if e is not None]
        tables = list(self.samples)
        if scanned:
            r = _rows_of_blocks([b for b, _ in scanned if isinstance(b, np.ndarray)])
            max_ts = np.concatenate([e[0] for _, e in scanned])
            ts_type = np.concatenate([e[1] for _, e in scanned])
            control = np.concatenate([e[2] for _, e in scanned])
            n = len(r)
            topics = pa.array([t for t, _ in keys], pa.string())
            partitions = pa.array(np.array([p for _, p in keys], np.int32))
            idx = pa.array(r.part)
            tables.append(
                pa.table(
                    {
                        "topic": topics.take(idx),
                        "partition": partitions.take(idx),
                        "end_offset": pa.array(r.end),
                        "at": _timestamps(r.at),
                        "source": _same("segment", n),
                        "topic_id": self.names.strings(r.topic_id),
                        "first_offset": pa.array(r.first_offset, mask=r.first_offset == NO),
                        "first_timestamp": _timestamps(r.first_ts),
                        "max_timestamp": _timestamps(np.where(max_ts < 0, NO, max_ts)),
                        "timestamp_type": pa.array(TIMESTAMP_TYPES, pa.string()).take(pa.array(ts_type)),
                        "is_control": pa.array(control),
                        "segment_file": self.names.strings(r.segment_file),
                        "byte_position": pa.array(r.byte_position),
                        "run_id": _same(run_id, n),
                    },
                    schema=T.PARTITION_END_OFFSETS.arrow_schema,
                )
            )
        if not tables:
            return None
        return pa.concat_tables([t.cast(T.PARTITION_END_OFFSETS.arrow_schema) for t in tables])


# a scanned block's row of each Rows field
_ROW = {name: k for k, name in enumerate(ROW_FIELDS)}


def _rows_of_blocks(blocks: list[np.ndarray]) -> Rows:
    """Scanned blocks as Rows: one concatenation, and the header's unknowns (-1: a time none
    was written for, a legacy wrapper's first offset) as NO."""
    whole = np.concatenate(blocks, axis=1)  # (a copy even of one: the blocks stay as read)
    for name in ("at", "first_offset", "first_ts"):
        column = whole[_ROW[name]]
        column[column < 0] = NO
    return Rows(*(whole[k].astype(bool) if name == "is_segment" else whole[k] for name, k in _ROW.items()))


def _timestamps(ms: np.ndarray) -> pa.Array:
    """Epoch ms (NO: none) -> TIMESTAMP (µs, UTC)."""
    return pa.array(np.where(ms == NO, 0, ms) * 1000, type=_TS, mask=ms == NO)


# --- earlier rows ---------------------------------------------------------------------------------------


# what lag_rows.rows_of reads of earlier partition_end_offsets rows; the strings that repeat
# as dictionaries (read as they are stored, not spelt out per row): an incremental lag task
# reads the rows of most of its partitions, 150,000 rows on make bench's 1% run
HISTORY_COLUMNS = (
    "topic",
    "partition",
    "end_offset",
    "at",
    "source",
    "topic_id",
    "first_offset",
    "first_timestamp",
    "segment_file",
    "byte_position",
)
HISTORY_DICTIONARIES = ("topic", "topic_id", "segment_file")
_HISTORY_SCHEMA = pa.schema(
    [
        pa.field(f.name, pa.dictionary(pa.int32(), f.type), f.nullable) if f.name in HISTORY_DICTIONARIES else f
        for f in (T.PARTITION_END_OFFSETS.arrow_schema.field(c) for c in HISTORY_COLUMNS)
    ]
)


class _History:
    """Earlier rows of topic partitions, from the table's files: the row groups whose topic and
    partition statistics may hold them (whole files where there are none); the columns the
    lag reads (HISTORY_COLUMNS)."""

    def __init__(self, files: tuple[str, ...]):
        self.files = files
        self._footers: dict[str, tuple] = {}

    def _groups(self, path: str) -> tuple:
        if path not in self._footers:
            f = storage.open_parquet(path, read_dictionary=list(HISTORY_DICTIONARIES))
            meta = f.metadata
            names = [meta.schema.column(j).path for j in range(meta.num_columns)]
            ranges = []
            for i in range(meta.num_row_groups):
                rg = meta.row_group(i)
                stats = {}
                for col in ("topic", "partition"):
                    st = rg.column(names.index(col)).statistics if col in names else None
                    stats[col] = (st.min, st.max) if st is not None and st.has_min_max else None
                ranges.append(stats)
            self._footers[path] = (f, ranges)
        return self._footers[path]

    def rows(self, wanted: list[tuple[str, int]]) -> pa.Table:
        """The rows of the partitions `wanted` (HISTORY_COLUMNS, as _HISTORY_SCHEMA)."""
        by_topic: dict[str, list[int]] = {}
        for t, p in wanted:
            by_topic.setdefault(t, []).append(p)
        topics = sorted(by_topic)
        out = []
        for path in self.files:
            f, ranges = self._groups(path)
            picked = []
            for i, st in enumerate(ranges):
                t, p = st["topic"], st["partition"]
                if t is not None and not any(t[0] <= topic <= t[1] for topic in topics):
                    continue
                if t is not None and t[0] == t[1] and p is not None:
                    if not any(tp[0] == t[0] and p[0] <= tp[1] <= p[1] for tp in wanted):
                        continue
                picked.append(i)
            if not picked:
                continue
            table = f.read_row_groups(picked, columns=list(HISTORY_COLUMNS), use_threads=False)
            out.append(table.filter(pa.array(_rows_of_partitions(table, by_topic))))
        if not out:
            return _HISTORY_SCHEMA.empty_table()
        return pa.concat_tables([t.cast(_HISTORY_SCHEMA) for t in out])


def _rows_of_partitions(table: pa.Table, by_topic: dict[str, list[int]]) -> np.ndarray:
    """Which rows of `table` (topic, partition columns) are of the partitions `by_topic` lists
    (integer keys in one lookup: a lookup per row cost most of an incremental lag task)."""
    if table.num_rows == 0:
        return np.zeros(0, bool)
    keys, code = _row_keys(table)
    wanted = [code[t] << 32 | (p + (1 << 31)) for t, ps in by_topic.items() if t in code for p in ps]
    return np.isin(keys, np.array(wanted, np.int64))


def _row_keys(table: pa.Table) -> tuple[np.ndarray, dict[str, int]]:
    """Each row's topic code << 32 | partition + 2**31, and the codes of the topics."""
    topics = pc.dictionary_encode(table.column("topic").combine_chunks())
    codes = topics.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    partitions = table.column("partition").combine_chunks().to_numpy(zero_copy_only=False).astype(np.int64)
    return codes << 32 | (partitions + (1 << 31)), {t: c for c, t in enumerate(topics.dictionary.to_pylist())}


def _earlier_of(inputs: list[PartitionInput | None], names: Names) -> Earlier:
    earlier = Earlier.none(len(inputs))
    for i, tp in enumerate(inputs):
        e = tp.earlier if tp is not None and tp.in_table else None
        if e is None:
            continue
        earlier.has[i] = True
        earlier.last_at[i] = NO if e.last_at_ms is None else e.last_at_ms
        earlier.last_end[i] = e.last_end
        earlier.last_topic_id[i] = names.code(e.last_topic_id)
        earlier.log_end[i] = e.log_end
        earlier.first_at[i] = NO if e.first_at_ms is None else e.first_at_ms
        earlier.first_offset[i] = NO if e.first_offset is None else e.first_offset
    return earlier


# --- the task -------------------------------------------------------------------------------------------


def run_lag_task(task: LagTask) -> LagTaskResult:
    storage.configure(task.object_store)
    result = LagTaskResult()
    clock = {"lag_read_points": 0.0, "lag_scan": 0.0, "lag_history": 0.0, "lag_compute": 0.0, "lag_lookup": 0.0}
    t = time.thread_time()

    def lap(what: str) -> None:
        nonlocal t
        now = time.thread_time()
        clock[what] += now - t
        t = now

    sorted_points = _points(task)
    points = sorted_points.table
    by_key = {(tp.topic, tp.partition): tp for tp in task.partitions}
    keys = sorted(set(sorted_points.pairs) | set(by_key))
    index = {k: i for i, k in enumerate(keys)}
    inputs = [by_key.get(k) for k in keys]
    part = np.array([index[k] for k in sorted_points.pairs], np.int64)[sorted_points.pair]
    lap("lag_read_points")

    # the new rows, and each input's checkpoint as far as the read
    names = Names()
    new = _NewRows(names)
    checkpoints: dict[int, dict] = {}
    for i, tp in enumerate(inputs):
        if tp is None:
            continue
        checkpoints[i] = _start_checkpoint(tp)
        if tp.samples is not None:
            new.sampled(i, tp.samples)
        elif tp.scan and tp.log is not None:
            new.scan(i, tp, checkpoints[i])
    fresh = new.rows()
    result.batches = new.batches
    lap("lag_scan")

    # what came before: the checkpoints' accounts, or the rows themselves where there is none
    # (a checkpoint of an earlier version) or the partition is read from its start again
    # (its topic was recreated)
    history = _History(task.history_files)
    earlier = _earlier_of(inputs, names)
    read_before = [
        i
        for i, tp in enumerate(inputs)
        if tp is not None and tp.in_table and (tp.earlier is None or (tp.scan_from is None and tp.log is not None))
    ]
    held = Rows.empty()
    if read_before:
        held = _held_rows(history, keys, read_before, index, names)
        exact = summarise(held, Earlier.none(len(keys)))
        for f in ("has", "last_at", "last_end", "last_topic_id", "log_end", "first_at", "first_offset"):
            getattr(earlier, f)[read_before] = getattr(exact, f)[read_before]
        lap("lag_history")

    tail = _read_tails(task.warehouse, inputs, keys, read_before, names)
    lap("lag_history")

    at = _ms(points.column("at"))
    asof = _ms(points.column("asof"))
    committed = points.column("committed_offset").to_numpy()
    lag = lag_at(fresh, earlier, part, at, asof, committed, tail)
    # the partitions the accounts and tails cannot answer for: again, with their earlier rows
    again = np.flatnonzero(~earlier.answers(lag, part, asof, committed, tail))
    lap("lag_compute")
    rows_before = held
    if len(again):
        result.history_partitions = len(again)
        missing = sorted(set(again.tolist()) - set(read_before))
        rows_before = Rows.concat([held, _held_rows(history, keys, missing, index, names)]) if missing else held
        lap("lag_history")
        redo = np.isin(part, again)
        sub = Earlier.none(len(keys))
        mine = np.isin(rows_before.part, again)
        whole = Rows.concat(
            [rows_before.take(np.flatnonzero(mine)), fresh.take(np.flatnonzero(np.isin(fresh.part, again)))]
        )
        sel = np.flatnonzero(redo)
        fixed = lag_at(whole, sub, part[sel], at[sel], asof[sel], committed[sel])
        for f in lag.__dataclass_fields__:
            getattr(lag, f)[sel] = getattr(fixed, f)
        lap("lag_compute")

    record_ms = np.full(len(at), NO, np.int64)
    wanted = np.flatnonzero(lag.lookups(committed, part, lambda: _present_files(inputs, names)))
    if len(wanted):
        record_ms[wanted] = _look_up(inputs, part, lag, committed, wanted, names)
        result.lookups = len(wanted)
    lap("lag_lookup")

    timed = time_lag(lag, at, committed, record_ms)
    out = _lag_table(sorted_points, lag, timed, names, task.run_id)
    result.lag_rows = out.num_rows
    commits = sorted_points.commits  # (the points at now follow the commits)
    now_rows = out.slice(commits)
    result.lag_files = _write(task, out.slice(0, commits), None) + _write(task, now_rows, now_file_prefix(task.now_ms))
    result.furthest_behind = behind_now(now_rows).cast(T.GROUP_LAG.arrow_schema)
    ends = new.table(keys, task.run_id)
    if ends is not None:
        result.end_offset_files = _write_table(task, T.PARTITION_END_OFFSETS, ends, None, HISTORY_GROUP_ROWS)
    after = summarise(fresh, earlier)
    read = np.zeros(len(keys), bool)
    read[read_before] = True
    read[again] = True
    tails = next_tail(_tail_base(inputs, earlier, tail, rows_before, read), fresh, _reach(part, committed, len(keys)))
    tail_file = _write_tails(task, tails, keys, names)
    for i, checkpoint in checkpoints.items():
        _account(checkpoint, after, i, names, inputs[i])
        checkpoint["tail_file"] = tail_file if tail_file is not None and tails.known[i] else None
        result.checkpoints.append(checkpoint)
    lap("lag_compute")
    result.seconds = clock
    return result


# --- tails ------------------------------------------------------------------------------------------


def _reach(part: np.ndarray, committed: np.ndarray, n: int) -> np.ndarray:
    """Per partition, the smallest offset its points committed (NO: no point): the next run's
    points start from there, as the groups move on, so its tail reaches back to it (next_tail)."""
    top = np.iinfo(np.int64).max
    reach = np.full(n, top, np.int64)
    np.minimum.at(reach, part, committed.astype(np.int64, copy=False))
    reach[reach == top] = NO
    return reach


_TAIL_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.dictionary(pa.int32(), pa.string())),
        pa.field("partition", pa.int32()),
        pa.field("end_offset", pa.int64()),
        pa.field("at_ms", pa.int64()),
        pa.field("topic_id", pa.dictionary(pa.int32(), pa.string())),
        pa.field("first_offset", pa.int64()),  # NO: null
        pa.field("first_timestamp_ms", pa.int64()),
        pa.field("is_segment", pa.bool_()),
        pa.field("segment_file", pa.dictionary(pa.int32(), pa.string())),
        pa.field("byte_position", pa.int64()),
        pa.field("complete", pa.bool_()),  # the partition's: its tail holds all its rows with a time
    ]
)


def _read_tails(
    warehouse: str, inputs: list[PartitionInput | None], keys, read_before: list[int], names: Names
) -> Tail:
    """The tails the partitions' checkpoints name (not those whose rows are read anyway); a
    file gone (a table restored to an older version) leaves its partitions without one."""
    tail = Tail.none(len(keys))
    skip = set(read_before)
    by_file: dict[str, dict[tuple[str, int], int]] = {}
    for i, tp in enumerate(inputs):
        name = tp.tail_file if tp is not None and tp.in_table and i not in skip else None
        if name:
            by_file.setdefault(name, {})[keys[i]] = i
    parts: list[Rows] = []
    for name, wanted in by_file.items():
        path = storage.join(warehouse, LAG_TAILS, name)
        if not storage.exists(path):
            continue
        table = ipc.open_file(pa.py_buffer(storage.read_bytes(path))).read_all().combine_chunks()
        row_keys, code = _row_keys(table)
        lookup = {code[t] << 32 | (p + (1 << 31)): i for (t, p), i in wanted.items() if t in code}
        if not lookup:
            continue
        known_keys = np.array(sorted(lookup), np.int64)
        pick = np.flatnonzero(np.isin(row_keys, known_keys))
        idx = np.array([lookup[k] for k in known_keys], np.int64)[np.searchsorted(known_keys, row_keys[pick])]

        def ints(c: str) -> np.ndarray:
            return table.column(c).chunk(0).to_numpy(zero_copy_only=False)[pick]  # noqa: B023

        def codes(c: str) -> np.ndarray:
            return names.codes(table.column(c))[pick]  # noqa: B023

        parts.append(
            Rows(
                idx,
                ints("end_offset"),
                ints("at_ms"),
                codes("topic_id"),
                ints("first_offset"),
                ints("first_timestamp_ms"),
                ints("is_segment").astype(bool),
                codes("segment_file"),
                ints("byte_position"),
            )
        )
        tail.known[idx] = True
        tail.complete[idx] = ints("complete").astype(bool)
    tail.rows = Rows.concat(parts)
    return tail


def _tail_base(
    inputs: list[PartitionInput | None], earlier: Earlier, tail: Tail, rows_before: Rows, read: np.ndarray
) -> Tail:
    """What each partition's next tail starts from: all its earlier rows where they were read;
    its tail; else the account's last row (a partial tail: written by an earlier version, or
    dropped), where that is the row of the largest end offset; nothing before a partition's
    first rows."""
    fresh_start = np.array([tp is not None and not tp.in_table for tp in inputs], bool)
    use_tail = tail.known & ~read
    last = ~read & ~use_tail & earlier.has & (earlier.last_at != NO) & (earlier.log_end == earlier.last_end)
    every = Rows.concat(
        [
            rows_before.take(np.flatnonzero(read[rows_before.part])),
            tail.rows.take(np.flatnonzero(use_tail[tail.rows.part])),
            earlier.last_rows(np.flatnonzero(last)),
        ]
    )
    known = read | use_tail | last | (fresh_start & ~earlier.has)
    complete = read | (use_tail & tail.complete) | (fresh_start & ~earlier.has)
    has_input = np.array([tp is not None for tp in inputs], bool)
    return Tail(every, known & has_input, complete & has_input)


def _write_tails(task: LagTask, tails: Tail, keys, names: Names) -> str | None:
    """The task's tails in one file of the warehouse's _lag_tails (its name; None: no tails)."""
    r = tails.rows
    if not tails.known.any():
        return None

    def strings(codes: np.ndarray, values: list) -> pa.DictionaryArray:
        return pa.DictionaryArray.from_arrays(
            pa.array(codes.astype(np.int32), mask=codes < 0), pa.array(values, pa.string())
        )

    topics = sorted({t for t, _ in keys})  # (a dictionary's values distinct: _row_keys reads it)
    topic_code = {t: c for c, t in enumerate(topics)}
    key_topic = np.array([topic_code[t] for t, _ in keys], np.int64)
    table = pa.table(
        {
            "topic": strings(key_topic[r.part], topics),
            "partition": pa.array(np.array([p for _, p in keys], np.int32)[r.part]),
            "end_offset": r.end,
            "at_ms": r.at,
            "topic_id": strings(r.topic_id, names.values),
            "first_offset": r.first_offset,
            "first_timestamp_ms": r.first_ts,
            "is_segment": r.is_segment,
            "segment_file": strings(r.segment_file, names.values),
            "byte_position": r.byte_position,
            "complete": tails.complete[r.part],
        },
        schema=_TAIL_SCHEMA,
    )
    sink = pa.BufferOutputStream()
    # LZ4: a third of the bytes (make bench's tails, 169K rows a task: 9.6 -> 3.5 MB) for 5 ms of
    # reading; no slower to write
    with ipc.new_file(sink, _TAIL_SCHEMA, options=ipc.IpcWriteOptions(compression="lz4")) as writer:
        writer.write_table(table)
    name = f"tail-{task.run_id}-{task.bucket_lo}-{uuid.uuid4().hex[:8]}.arrow"
    storage.write_bytes(storage.join(task.warehouse, LAG_TAILS, name), memoryview(sink.getvalue()))
    return name


def _held_rows(history: _History, keys, which: list[int], index: dict, names: Names) -> Rows:
    if not which:
        return Rows.empty()
    table = history.rows([keys[i] for i in which])
    if table.num_rows == 0:
        return Rows.empty()
    keys, code = _row_keys(table)  # (every row is of a partition in `index`: _History.rows)
    known = sorted((code[t] << 32 | (p + (1 << 31)), i) for (t, p), i in index.items() if t in code)
    lookup = np.array(known, np.int64).reshape(-1, 2)
    return rows_of(table, lookup[np.searchsorted(lookup[:, 0], keys), 1], names)


def _ms(col) -> np.ndarray:
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    return arr.cast(pa.int64()).fill_null(NO).to_numpy() // 1000


def _start_checkpoint(tp: PartitionInput) -> dict:
    """What the task sets of the partition's lag_checkpoints row before its read (a read from
    the start sets where it starts); the driver lays what the task sets over the previous row
    (lib.spark.lag._commit_checkpoints), which the task is not sent."""
    checkpoint = {"topic": tp.topic, "partition": tp.partition, "source_signature": tp.source_signature}
    if tp.log is not None:
        checkpoint["topic_id"] = tp.log.topic_id
    if tp.scan_from is None and tp.log is not None:
        checkpoint.update(
            next_offset=0, segment_base_offset=None, next_byte_position=None, at_ms=None, trailing_bytes=0
        )
    return checkpoint


def _account(checkpoint: dict, after: Earlier, i: int, names: Names, tp: PartitionInput | None) -> None:
    """The checkpoint's account of the partition's rows so far (the next stage's EarlierRows)."""
    if not after.has[i]:
        return

    def value(v) -> int | None:
        return None if v == NO else int(v)

    checkpoint.update(
        log_end_offset=int(after.log_end[i]),
        first_at_ms=value(after.first_at[i]),
        first_offset=value(after.first_offset[i]),
    )
    if tp is not None and tp.samples is not None:  # a live sample: where the stage stopped
        checkpoint["at_ms"] = value(after.last_at[i])
        checkpoint["next_offset"] = int(after.last_end[i])


def _present_files(inputs: list[PartitionInput | None], names: Names) -> np.ndarray:
    """The segment files the partitions' folders hold, as Lag.lookups takes them: keys of
    (partition index, file code). A file's name is its base offset, the same in many partitions
    (00000000000000000000.log in most): one partition's file gone to retention is not present
    because another partition has a file of that name."""
    keys = [
        i << 32 | c
        for i, tp in enumerate(inputs)
        if tp is not None and tp.log is not None
        for c in (names._codes.get(storage.basename(s.path)) for s in tp.log.segments)
        if c is not None
    ]
    return np.unique(np.array(keys, np.int64))


def _look_up(
    inputs: list[PartitionInput | None],
    part: np.ndarray,
    lag: Lag,
    committed: np.ndarray,
    wanted: np.ndarray,
    names: Names,
) -> np.ndarray:
    """The timestamps of the records at `committed[wanted]`, their batches decoded (each once)."""
    out = np.full(len(wanted), NO, np.int64)
    by_file: dict[tuple[int, int], list[int]] = {}
    for j, i in enumerate(wanted.tolist()):
        by_file.setdefault((int(part[i]), int(lag.batch_segment_file[i])), []).append(j)
    for (p, code), js in by_file.items():
        tp = inputs[p]
        assert tp is not None and tp.log is not None
        path = storage.join(tp.log.path, names.values[code])
        lookups = [(int(lag.batch_byte_position[wanted[j]]), int(committed[wanted[j]])) for j in js]
        try:
            found = record_timestamps(path, lookups, tp.partition)
        except FileNotFoundError:
            continue  # deleted since the folder was listed (retention): as a file gone, interpolated
        except DecodeError as e:
            raise WorkerError(
                type(e).__name__,
                e.message,
                file=path,
                partition=tp.partition,
                offset=e.offset,
                position=e.position,
                topic=tp.topic,
            ).exception() from None
        for j, ts in zip(js, found):
            if ts is not None:
                out[j] = ts
    return out


def _lag_table(points: _Points, lag: Lag, timed, names: Names, run_id: str) -> pa.Table:
    """The group_lag rows of the points, their strings as dictionaries (GROUP_LAG_WRITTEN: the
    Parquet writer takes a dictionary as it is, where it hashed every string of a plain one)."""
    table = points.table
    n = table.num_rows

    def ints(values: np.ndarray) -> pa.Array:
        return pa.array(values, pa.int64(), mask=values == NO)

    kind = np.zeros(n, np.int32)
    kind[points.commits :] = 1
    topic_ids = lag.topic_id
    return pa.table(
        {
            "group_id": _dictionary(table.column("group"), points.groups),
            "topic": _dictionary(table.column("topic"), points.topics),
            "partition": table.column("partition"),
            "at": table.column("at"),
            "kind": _dictionary(kind, ["commit", "now"]),
            "committed_offset": table.column("committed_offset"),
            "end_offset": ints(lag.end_offset),
            "end_offset_at": _timestamps(lag.end_offset_at),
            "lag_records": ints(lag.lag_records),
            "lag_ms": ints(timed.lag_ms),
            "lag_ms_method": _dictionary(timed.method, list(METHODS)),
            "first_unconsumed_timestamp": _timestamps(timed.first_unconsumed_ms),
            "truncated": pa.array(lag.truncated, pa.bool_()),
            "topic_id": _dictionary(topic_ids, names.values),
            "offsets_partition": table.column("offsets_partition"),
            "log_offset": table.column("log_offset"),
            "run_id": _dictionary(np.zeros(n, np.int32), [run_id]),
        },
        schema=GROUP_LAG_WRITTEN,
    )


# group_lag's rows as the lag task writes them: its strings as dictionaries
GROUP_LAG_WRITTEN = pa.schema(
    [
        f.with_type(pa.dictionary(pa.int32(), pa.string())) if pa.types.is_string(f.type) else f
        for f in T.GROUP_LAG.arrow_schema
    ]
)


def _dictionary(codes, names: list[str]) -> pa.DictionaryArray:
    """Codes (< 0: null) into `names` as a dictionary array."""
    if isinstance(codes, pa.ChunkedArray):
        codes = _ints(codes)
    codes = np.asarray(codes)
    indices = pa.array(codes.astype(np.int32, copy=False), pa.int32(), mask=codes < 0 if (codes < 0).any() else None)
    return pa.DictionaryArray.from_arrays(indices, pa.array(names, pa.string()))


def _write(task: LagTask, rows: pa.Table, prefix: str | None) -> list[WrittenFile]:
    return _write_table(task, T.GROUP_LAG, rows, prefix)


def _write_table(
    task: LagTask, table: T.Table, rows: pa.Table, prefix: str | None, group_rows: int = ROW_GROUP_ROWS
) -> list[WrittenFile]:
    """One file of `rows` (sorted by topic partition), a row group per `group_rows`."""
    if rows.num_rows == 0:
        return []
    writer = FileWriter(task.warehouse, table, None, task.run_id, prefix=prefix or "part")
    for start in range(0, rows.num_rows, group_rows):
        writer.write(rows.slice(start, group_rows))
    writer.close()
    return writer.files
