"""One Spark task of the lag stage, JVM-free: the topic partitions of a range of buckets
(lib.lake.lag_input), one partition at a time.

For each topic partition: its new batches are read from their headers (lib.source.topic_scan:
no CRC check, no decompression) into partition_end_offsets rows, or a live cluster's sample
given by the driver; then the lag of every point on it (the commits that took effect since the
last lag stage, read from the replay's lag input, and every live offset at --now, from
group_offsets) is computed with numpy (lib.lake.lag_rows), from the new rows and what the
partition's checkpoint says of the earlier ones, or, where a point needs them, the earlier rows
themselves (read from the table's files, the row groups of that partition). The record at a
committed offset is decoded only where its batch header does not tell its time. Rows go to
Parquet files in the tables' folders, invisible until the driver commits them; what returns is
the files and each partition's checkpoint. Memory: the task's commits plus one partition's
rows."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lib import storage
from lib.codec.errors import DecodeError
from lib.lake.lag_input import buckets, read_events
from lib.lake.lag_rows import NO, EarlierRows, Lag, Timeline, lag_at, time_lag
from lib.lake.partition_task import _FileWriter
from lib.lake.worker_errors import worker_error
from lib.source.topic_log import TopicPartitionLog
from lib.source.topic_scan import TIMESTAMP_TYPES, ScanStart, SegmentScan, record_timestamps, scan_partition
from schemas import tables as T

_TS_TYPES = np.array(TIMESTAMP_TYPES, dtype=object)
_TS = pa.timestamp("us", tz="UTC")
_EMPTY_END_OFFSETS = T.PARTITION_END_OFFSETS.arrow_schema.empty_table()
NOW_FILES = "now"  # group_lag files of kind-now rows: named now-<at ms>-<run>-...
ROW_GROUP_ROWS = 65_536


def now_file_prefix(now_ms: int) -> str:
    return f"{NOW_FILES}-{now_ms}"


def now_file_at(name: str) -> int | None:
    """The --now whose rows a group_lag file holds, from its name (None: not such a file)."""
    parts = name.split("/")[-1].split("-")
    if len(parts) > 2 and parts[0] == NOW_FILES and parts[1].isdigit():
        return int(parts[1])
    return None


@dataclass(frozen=True)
class PartitionInput:
    topic: str
    partition: int
    log: TopicPartitionLog | None  # its folder in the log dir; None when absent (or live)
    scan_from: ScanStart | None  # where its last scan stopped; None: from the start
    scan: bool  # its input changed since: read its new batches
    running_at_ms: int | None  # the checkpoint's `at`: new rows' `at` never go below it
    in_table: bool  # the table holds earlier rows of it
    earlier: EarlierRows | None  # None with in_table: unknown (read the rows when needed)
    samples: pa.Table | None = None  # a live cluster's new rows (partition_end_offsets schema)
    source_signature: str | None = None
    previous: dict | None = None  # its lag_checkpoints row, carried when nothing is read


@dataclass(frozen=True)
class LagTask:
    warehouse: str
    run_id: str
    object_store: object
    bucket_lo: int
    bucket_hi: int
    partitions: tuple[PartitionInput, ...]  # of these buckets with anything to read or a point
    event_files: tuple[str, ...]  # the lag input to read commits from
    watermarks: dict[int, int] | None  # offsets partition -> first applied offset to take
    now_ms: int
    now_asof_ms: int  # the instant whose end offsets the now rows take (a live sample's, if later)
    live_offset_files: tuple[str, ...]  # group_offsets' data files
    history_files: tuple[str, ...]  # partition_end_offsets' data files before this stage


@dataclass
class LagTaskResult:
    end_offset_files: list[dict] = field(default_factory=list)
    lag_files: list[dict] = field(default_factory=list)
    checkpoints: list[dict] = field(default_factory=list)
    batches: int = 0
    lag_rows: int = 0
    history_reads: int = 0
    lookups: int = 0
    seconds: dict = field(default_factory=dict)


# --- points ----------------------------------------------------------------------------------------

_POINT_COLUMNS = ["group_id", "topic", "partition", "at", "asof", "kind", "committed_offset", "offsets_partition"]


def _points(task: LagTask) -> pa.Table:
    """The commits (at the record that made them effective) and the live offsets at now, of
    the task's buckets, sorted by topic partition."""
    events = read_events(list(task.event_files), task.bucket_lo, task.bucket_hi, task.watermarks)
    applied = events.column("applied_at")
    commits = pa.table(
        {
            "group_id": events.column("group_id"),
            "topic": events.column("topic"),
            "partition": events.column("partition"),
            "at": applied,
            "asof": applied,
            "kind": pa.array(["commit"] * events.num_rows, pa.string()),
            "committed_offset": events.column("committed_offset"),
            "offsets_partition": events.column("offsets_partition"),
            "log_offset": events.column("applied_offset"),
        }
    ).filter(pc.is_valid(applied))
    parts = [commits]
    for path in task.live_offset_files:
        live = storage.open_parquet(path).read(
            columns=["group_id", "topic", "partition", "committed_offset", "offsets_partition"], use_threads=False
        )
        b = buckets(live.column("topic"), live.column("partition"))
        live = live.filter(pa.array((b >= task.bucket_lo) & (b < task.bucket_hi)))
        n = live.num_rows
        now = pa.array(np.full(n, task.now_ms * 1000, np.int64), _TS)
        parts.append(
            pa.table(
                {
                    "group_id": live.column("group_id"),
                    "topic": live.column("topic"),
                    "partition": live.column("partition"),
                    "at": now,
                    "asof": pa.array(np.full(n, task.now_asof_ms * 1000, np.int64), _TS),
                    "kind": pa.array(["now"] * n, pa.string()),
                    "committed_offset": live.column("committed_offset"),
                    "offsets_partition": live.column("offsets_partition"),
                    "log_offset": pa.nulls(n, pa.int64()),
                }
            )
        )
    schema = pa.schema(
        [
            ("group_id", pa.string()),
            ("topic", pa.string()),
            ("partition", pa.int32()),
            ("at", _TS),
            ("asof", _TS),
            ("kind", pa.string()),
            ("committed_offset", pa.int64()),
            ("offsets_partition", pa.int32()),
            ("log_offset", pa.int64()),
        ]
    )
    points = pa.concat_tables([p.cast(schema) for p in parts]).combine_chunks()
    return points.sort_by([("topic", "ascending"), ("partition", "ascending")])


# --- end-offset rows ---------------------------------------------------------------------------------


def _timestamps(ms: np.ndarray) -> pa.Array:
    """Epoch ms -> TIMESTAMP (µs, UTC); negative (none or unknown) -> null."""
    return pa.array(ms * 1000, type=_TS, mask=ms < 0)


def end_offset_rows(
    scans: list[SegmentScan], tp: PartitionInput, run_id: str, checkpoint: dict
) -> tuple[pa.Table | None, int]:
    """partition_end_offsets rows of a partition's scanned batches (`at`: the largest max
    timestamp so far, so that end offsets never go back in time), and the number of batches;
    `checkpoint` is brought up to where the scan stopped."""
    running = -1 if tp.running_at_ms is None else int(tp.running_at_ms)
    tables = []
    batches = 0
    for scan in scans:
        n = len(scan)
        checkpoint["segment_base_offset"] = scan.segment.base_offset
        checkpoint["next_byte_position"] = scan.next_position
        checkpoint["trailing_bytes"] = scan.trailing_bytes
        if n == 0:
            continue
        batches += n
        at = np.maximum.accumulate(np.maximum(scan.max_timestamp, running))
        running = int(at[-1])
        checkpoint["next_offset"] = int(scan.end_offset[-1])
        checkpoint["at_ms"] = running if running >= 0 else None
        tables.append(
            pa.table(
                {
                    "topic": pa.array([tp.topic] * n, pa.string()),
                    "partition": pa.array(np.full(n, tp.partition, dtype=np.int32)),
                    "end_offset": pa.array(scan.end_offset),
                    "at": _timestamps(at),
                    "source": pa.array(["segment"] * n, pa.string()),
                    "topic_id": pa.array([tp.log.topic_id if tp.log else None] * n, pa.string()),
                    "first_offset": pa.array(scan.first_offset, mask=scan.first_offset < 0),
                    "first_timestamp": _timestamps(scan.first_timestamp),
                    "max_timestamp": _timestamps(scan.max_timestamp),
                    "timestamp_type": pa.array(_TS_TYPES[scan.timestamp_type], pa.string()),
                    "is_control": pa.array(scan.is_control),
                    "segment_file": pa.array([storage.basename(scan.segment.path)] * n, pa.string()),
                    "byte_position": pa.array(scan.position),
                    "run_id": pa.array([run_id] * n, pa.string()),
                },
                schema=T.PARTITION_END_OFFSETS.arrow_schema,
            )
        )
    if not tables:
        return None, 0
    return (pa.concat_tables(tables) if len(tables) > 1 else tables[0]), batches


class _History:
    """Earlier rows of topic partitions, from the table's files: the row groups whose topic and
    partition statistics may hold the partition (whole files where there are none); partitions
    are asked for in (topic, partition) order, the order rows are written in."""

    def __init__(self, files: tuple[str, ...]):
        self.files = files
        self._footers: dict[str, tuple] = {}
        self._held: dict[str, tuple[list[int], pa.Table]] = {}
        self.reads = 0

    def _groups(self, path: str) -> tuple:
        if path not in self._footers:
            f = storage.open_parquet(path)
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

    def rows(self, topic: str, partition: int) -> pa.Table:
        out = []
        for path in self.files:
            f, ranges = self._groups(path)
            picked = []
            for i, st in enumerate(ranges):
                t, p = st["topic"], st["partition"]
                if t is not None and not (t[0] <= topic <= t[1]):
                    continue
                if t is not None and t[0] == t[1] == topic and p is not None and not (p[0] <= partition <= p[1]):
                    continue
                picked.append(i)
            if not picked:
                continue
            held = self._held.get(path)
            if held is None or held[0] != picked:
                # partitions come in the order rows are written: the groups read before are done with
                held = (
                    picked,
                    f.read_row_groups(picked, columns=T.PARTITION_END_OFFSETS.column_names, use_threads=False),
                )
                self._held[path] = held
                self.reads += 1
            table = held[1]
            mask = pc.and_(pc.equal(table.column("topic"), topic), pc.equal(table.column("partition"), partition))
            out.append(table.filter(mask))
        if not out:
            return T.PARTITION_END_OFFSETS.arrow_schema.empty_table()
        return pa.concat_tables([t.cast(T.PARTITION_END_OFFSETS.arrow_schema) for t in out])


# --- the task -------------------------------------------------------------------------------------------


def run_lag_task(task: LagTask) -> LagTaskResult:
    storage.configure(task.object_store)  # type: ignore[arg-type]
    result = LagTaskResult()
    clock = {"lag_read_points": 0.0, "lag_scan": 0.0, "lag_history": 0.0, "lag_compute": 0.0, "lag_lookup": 0.0}
    t = time.thread_time()

    def lap(what: str) -> None:
        nonlocal t
        now = time.thread_time()
        clock[what] += now - t
        t = now

    points = _points(task)
    lap("lag_read_points")
    ends = _FileWriter(task.warehouse, T.PARTITION_END_OFFSETS, None, task.run_id)
    commits = _RowWriter(_FileWriter(task.warehouse, T.GROUP_LAG, None, task.run_id))
    nows = _RowWriter(_FileWriter(task.warehouse, T.GROUP_LAG, None, task.run_id, prefix=now_file_prefix(task.now_ms)))
    history = _History(task.history_files)
    inputs = {(tp.topic, tp.partition): tp for tp in task.partitions}
    topics = points.column("topic").to_pylist() if points.num_rows else []
    parts = points.column("partition").to_numpy() if points.num_rows else np.zeros(0, np.int32)
    # the points' runs of one topic partition (sorted)
    spans: dict[tuple[str, int], tuple[int, int]] = {}
    start = 0
    for i in range(1, len(topics) + 1):
        if i == len(topics) or topics[i] != topics[start] or parts[i] != parts[start]:
            spans[(topics[start], int(parts[start]))] = (start, i)
            start = i
    for key in sorted(set(spans) | set(inputs)):
        tp = inputs.get(key)
        new_rows = _EMPTY_END_OFFSETS
        earlier: EarlierRows | None = None
        held: pa.Table | None = None  # the partition's earlier rows, once read
        if tp is not None:
            checkpoint = _start_checkpoint(tp)
            if tp.samples is not None:
                new_rows = tp.samples
            elif tp.scan and tp.log is not None:
                new_rows, n = _scan(tp, task.run_id, checkpoint)
                result.batches += n
            lap("lag_scan")
            if tp.in_table:
                earlier = tp.earlier
                if earlier is None or (tp.scan_from is None and tp.log is not None):
                    # a checkpoint of an earlier version, or a partition read again from its
                    # start (recreated): what came before is told by the rows themselves
                    held = history.rows(*key)
                    earlier = EarlierRows.of(Timeline.of(held))
                    lap("lag_history")
            ends.write(new_rows)
            _summarise(checkpoint, tp, held, earlier, new_rows)
            result.checkpoints.append(checkpoint)
        span = spans.get(key)
        if span is None:
            continue
        p = points.slice(span[0], span[1] - span[0])
        at = _ms_of(p.column("at"))
        asof = _ms_of(p.column("asof"))
        committed = p.column("committed_offset").to_numpy()
        lag = None
        if held is None:
            lag = lag_at(Timeline.of(new_rows), at, asof, committed, earlier)
            if earlier is not None and not earlier.answers(lag, asof, committed):
                lap("lag_compute")
                held = history.rows(*key)
                lap("lag_history")
        if held is not None:
            lag = lag_at(Timeline.of(pa.concat_tables([held, new_rows])), at, asof, committed)
        assert lag is not None
        lap("lag_compute")
        record_ms = np.full(len(at), NO, np.int64)
        if tp is not None and tp.log is not None:
            present = {storage.basename(s.path) for s in tp.log.segments}
            wanted = np.flatnonzero(lag.lookups(committed, present))
            if len(wanted):
                record_ms[wanted] = _look_up(tp.log, lag, committed, wanted)
                result.lookups += len(wanted)
        lap("lag_lookup")
        timed = time_lag(lag, at, committed, record_ms)
        out = _lag_table(p, lag, timed, task.run_id)
        kinds = p.column("kind").to_numpy(zero_copy_only=False)
        commits.add(out.filter(pa.array(kinds == "commit")))
        nows.add(out.filter(pa.array(kinds == "now")))
        result.lag_rows += out.num_rows
        lap("lag_compute")
    ends.close()
    result.end_offset_files = ends.files
    result.lag_files = commits.close() + nows.close()
    result.history_reads = history.reads
    lap("lag_compute")
    result.seconds = clock
    return result


def _ms_of(col) -> np.ndarray:
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    return arr.cast(pa.int64()).fill_null(NO).to_numpy() // 1000


def _start_checkpoint(tp: PartitionInput) -> dict:
    """The partition's lag_checkpoints row before this stage's read (its previous one, or a read
    from the start)."""
    checkpoint = dict(tp.previous or {}) | {
        "topic": tp.topic,
        "partition": tp.partition,
        "topic_id": tp.log.topic_id if tp.log else (tp.previous or {}).get("topic_id"),
        "source_signature": tp.source_signature,
    }
    if tp.scan_from is None and tp.log is not None:
        checkpoint.update(
            next_offset=0, segment_base_offset=None, next_byte_position=None, at_ms=None, trailing_bytes=0
        )
    return checkpoint


def _scan(tp: PartitionInput, run_id: str, checkpoint: dict) -> tuple[pa.Table, int]:
    assert tp.log is not None
    try:
        scans = scan_partition(tp.log, tp.scan_from)
    except DecodeError as e:
        raise worker_error(
            type(e).__name__,
            e.message,
            file=e.file,
            partition=e.partition,
            offset=e.offset,
            position=e.position,
            topic=tp.topic,
        ) from None
    rows, n = end_offset_rows(scans, tp, run_id, checkpoint)
    return (rows if rows is not None else _EMPTY_END_OFFSETS), n


def _summarise(
    checkpoint: dict, tp: PartitionInput, held: pa.Table | None, earlier: EarlierRows | None, new_rows: pa.Table
) -> None:
    """The checkpoint's account of the partition's rows so far (the next stage's EarlierRows):
    from the rows themselves where they were read (`held`), else the earlier account with the
    new rows after it."""
    if held is not None:
        summary = EarlierRows.of(Timeline.of(pa.concat_tables([held, new_rows])))
    elif new_rows.num_rows == 0:
        summary = earlier
    else:
        summary = EarlierRows.of(Timeline.of(new_rows))
        assert summary is not None
        if earlier is not None:
            summary = EarlierRows(
                summary.last_at_ms if summary.last_at_ms is not None else earlier.last_at_ms,
                summary.last_end if summary.last_at_ms is not None else earlier.last_end,
                summary.last_topic_id if summary.last_at_ms is not None else earlier.last_topic_id,
                max(summary.log_end, earlier.log_end),
                earlier.first_at_ms,
                earlier.first_offset,
            )
    if summary is None:
        return
    checkpoint.update(
        log_end_offset=summary.log_end,
        first_at_ms=summary.first_at_ms,
        first_offset=summary.first_offset,
    )
    if tp.samples is not None:  # a live sample: its time and end offset are where the stage stopped
        checkpoint["at_ms"] = summary.last_at_ms
        checkpoint["next_offset"] = summary.last_end


def earlier_rows(checkpoint: dict) -> EarlierRows | None:
    """EarlierRows from a lag_checkpoints row (None: written by an earlier version)."""
    if checkpoint.get("log_end_offset") is None:
        return None
    return EarlierRows(
        checkpoint.get("at_ms"),
        int(checkpoint["next_offset"]),
        checkpoint.get("topic_id"),
        int(checkpoint["log_end_offset"]),
        checkpoint.get("first_at_ms"),
        checkpoint.get("first_offset"),
    )


def _look_up(log: TopicPartitionLog, lag: Lag, committed: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """The timestamps of the records at `committed[wanted]`, their batches decoded (each once)."""
    out = np.full(len(wanted), NO, np.int64)
    by_file: dict[str, list[int]] = {}
    for j, i in enumerate(wanted.tolist()):
        by_file.setdefault(lag.batch_segment_file[i], []).append(j)
    for name, js in by_file.items():
        path = storage.join(log.path, name)
        lookups = [(int(lag.batch_byte_position[wanted[j]]), int(committed[wanted[j]])) for j in js]
        try:
            found = record_timestamps(path, lookups, log.partition)
        except DecodeError as e:
            raise worker_error(
                type(e).__name__,
                e.message,
                file=path,
                partition=log.partition,
                offset=e.offset,
                position=e.position,
                topic=log.topic,
            ) from None
        for j, ts in zip(js, found):
            if ts is not None:
                out[j] = ts
    return out


def _lag_table(p: pa.Table, lag: Lag, timed, run_id: str) -> pa.Table:
    n = p.num_rows

    def ints(values: np.ndarray) -> pa.Array:
        return pa.array(values, pa.int64(), mask=values == NO)

    def ts(values: np.ndarray) -> pa.Array:
        return pa.array(np.where(values == NO, 0, values) * 1000, _TS, mask=values == NO)

    return pa.table(
        {
            "group_id": p.column("group_id"),
            "topic": p.column("topic"),
            "partition": p.column("partition"),
            "at": p.column("at"),
            "kind": p.column("kind"),
            "committed_offset": p.column("committed_offset"),
            "end_offset": ints(lag.end_offset),
            "end_offset_at": ts(lag.end_offset_at),
            "lag_records": ints(lag.lag_records),
            "lag_ms": ints(timed.lag_ms),
            "lag_ms_method": pa.array(timed.method, pa.string()),
            "first_unconsumed_timestamp": ts(timed.first_unconsumed_ms),
            "truncated": pa.array(lag.truncated, pa.bool_()),
            "topic_id": pa.array(lag.topic_id, pa.string()),
            "offsets_partition": p.column("offsets_partition"),
            "log_offset": p.column("log_offset"),
            "run_id": pa.array([run_id] * n, pa.string()),
        },
        schema=T.GROUP_LAG.arrow_schema,
    )


class _RowWriter:
    """group_lag rows into one file, a row group per ROW_GROUP_ROWS rows."""

    def __init__(self, writer: _FileWriter):
        self.writer = writer
        self.held: list[pa.Table] = []
        self.rows = 0

    def add(self, rows: pa.Table) -> None:
        if rows.num_rows == 0:
            return
        self.held.append(rows)
        self.rows += rows.num_rows
        if self.rows >= ROW_GROUP_ROWS:
            self._flush()

    def _flush(self) -> None:
        if self.held:
            self.writer.write(pa.concat_tables(self.held))
        self.held, self.rows = [], 0

    def close(self) -> list[dict]:
        self._flush()
        self.writer.close()
        return self.writer.files
