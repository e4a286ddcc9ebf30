"""The work of one Spark task: one __consumer_offsets partition, read once, in log order.

Framing, CRC, decode (lib.decode / lib.decode.fast), the offsets replay and the group fold
(lib.replay.engine) and expiry happen in one pass in the Python worker. The worker writes
its rows as Parquet files straight into the Delta tables' folders (offsets_partition=P/),
where the driver's commit adds them without rewriting; until that commit they are invisible
to readers (and VACUUM removes them if the run dies). What goes back to the driver is one
small summary per partition: counts, the checkpoint and the files to add, with their stats.
No pyspark here: the same function runs without Spark (tests, the coordinator)."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute
import pyarrow.parquet as pq

from lib.codec.errors import DecodeError
from lib.lake.worker_errors import worker_error
from schemas import tables as T

OFFSETS_LOG_FILE_ROWS = 4_000_000  # roll the offsets_log file past this many rows
STATE_TABLES = (
    T.GROUP_OFFSETS,
    T.EXPIRED_OFFSETS,
    T.PENDING_TRANSACTIONAL_OFFSETS,
    T.CONSUMER_GROUPS,
    T.EXPIRED_GROUPS,
    T.GROUP_FOLD_STATE,
)
# columns whose min/max go into the add action's stats (data skipping on the log's position)
STATS_COLUMNS = ("log_offset", "batch_base_offset")
# Parquet settings measured on offsets_log (about 2x faster to write than pyarrow's defaults,
# and smaller): dictionaries only where values repeat; statistics only on the columns that grow
# with the log (a row group of a busy partition spans every group, topic and partition, so
# their min/max would prune nothing).
DICTIONARY_COLUMNS = (
    "compression",
    "segment_file",
    "decode_status",
    "record_type_name",
    "control_type",
    "group_id",
    "topic",
    "metadata",
    "topic_id",
    "raw_key",
    "group_type",
    "state",
    "protocol",
    "protocol_type",
    "run_id",
    "level",
    "error_kind",
)
STATISTICS_COLUMNS = ("log_offset", "batch_base_offset", "log_timestamp", "commit_timestamp")


def partition_dir(warehouse: str, table: T.Table, partition: int) -> str:
    return os.path.join(warehouse, table.name, f"offsets_partition={partition}")


_FILE_SCHEMAS: dict[tuple[str, tuple], pa.Schema] = {}


def _file_schema(table: T.Table, drop: tuple) -> pa.Schema:
    """A data file's schema: the table's without its partition column (and `drop`). Built once
    per process: building it cost 0.2 ms, eight times per partition."""
    key = (table.name, drop)
    if key not in _FILE_SCHEMAS:
        _FILE_SCHEMAS[key] = pa.schema(
            [f for f in table.arrow_schema if f.name != "offsets_partition" and f.name not in drop]
        )
    return _FILE_SCHEMAS[key]


class _FileWriter:
    """Parquet files of one table and partition, as Delta data files (no partition column)."""

    def __init__(self, warehouse: str, table: T.Table, partition: int, run_id: str, drop: tuple = ()):
        self.table = table
        self.partition = partition
        self.folder = partition_dir(warehouse, table, partition)
        self.run_id = run_id
        self.schema = _file_schema(table, drop)
        self.files: list[dict] = []
        self._writer: pq.ParquetWriter | None = None
        self._path: str | None = None
        self._rows = 0
        self._min: dict = {}
        self._max: dict = {}

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        if batch.num_rows == 0:
            return
        if self._writer is None:
            os.makedirs(self.folder, exist_ok=True)
            name = f"part-{self.run_id}-{uuid.uuid4().hex[:12]}.snappy.parquet"
            self._path = os.path.join(self.folder, name)
            names = set(self.schema.names)
            options: dict[str, bool | list[str]]
            if self.table is T.OFFSETS_LOG:
                options = {
                    "use_dictionary": [c for c in DICTIONARY_COLUMNS if c in names],
                    "write_statistics": [c for c in STATISTICS_COLUMNS if c in names],
                }
            else:
                # state tables: a partition's few thousand rows, rewritten every run; plain pages
                # and no statistics halve the cost of such a file (a file is read whole)
                options = {"use_dictionary": False, "write_statistics": False}
            self._writer = pq.ParquetWriter(self._path, self.schema, compression="snappy", **options)
        assert self._writer is not None
        data = batch.select(self.schema.names)
        # a row group per batch: holding batches for larger row groups was a few % faster to
        # write, but made a worker's memory grow with its partition's size
        if isinstance(data, pa.RecordBatch):
            self._writer.write_batch(data)
        else:
            self._writer.write_table(data)
        self._rows += data.num_rows
        for c in STATS_COLUMNS:
            if c in self.schema.names:
                col = data.column(c)
                lo, hi = int(pa.compute.min(col).as_py()), int(pa.compute.max(col).as_py())
                self._min[c] = min(self._min.get(c, lo), lo)
                self._max[c] = max(self._max.get(c, hi), hi)
        if self._rows >= OFFSETS_LOG_FILE_ROWS:
            self.close()

    def close(self) -> None:
        if self._writer is None:
            return
        self._writer.close()
        assert self._path is not None
        stats = {
            "numRecords": self._rows,
            "minValues": dict(self._min),
            "maxValues": dict(self._max),
            "nullCount": dict.fromkeys(self._min, 0),
        }
        self.files.append(
            {
                "path": os.path.relpath(self._path, os.path.dirname(self.folder)),
                "size": os.path.getsize(self._path),
                "rows": self._rows,
                "modification_time": int(time.time() * 1000),
                "stats": json.dumps(stats),
            }
        )
        self._writer = None
        self._rows = 0
        self._min, self._max = {}, {}


class _LogWriter:
    """offsets_log files of one partition. Rows with a GroupMetadata value go to files of their
    own: in the others the group_metadata column is left out (a Delta reader reads a column a
    file lacks as null), because writing its deep nesting for rows that are all null cost as
    much as every other column together. A partition with few new rows (an incremental run)
    gets one file with every column: there a file's fixed cost outweighs the nesting's."""

    NESTED = "group_metadata"
    SMALL_ROWS = 32768

    def __init__(self, warehouse: str, partition: int, run_id: str):
        self.plain = _FileWriter(warehouse, T.OFFSETS_LOG, partition, run_id, drop=(self.NESTED,))
        self.groups = _FileWriter(warehouse, T.OFFSETS_LOG, partition, run_id)
        self.held: list[pa.RecordBatch] | None = []
        self.held_rows = 0

    def write(self, batch: pa.RecordBatch) -> None:
        if self.held is not None:
            self.held.append(batch)
            self.held_rows += batch.num_rows
            if self.held_rows < self.SMALL_ROWS:
                return
            held, self.held = self.held, None
            for b in held:
                self._split(b)
            return
        self._split(batch)

    def _split(self, batch: pa.RecordBatch) -> None:
        nested = batch.column(self.NESTED)
        if nested.null_count == batch.num_rows:
            self.plain.write(batch)
            return
        has = pa.compute.is_valid(nested)
        # the nested column is left out before filtering: copying it costs more than the rest
        self.plain.write(batch.drop_columns([self.NESTED]).filter(pa.compute.invert(has)))
        self.groups.write(batch.filter(has))

    def close(self) -> None:
        if self.held:
            for b in self.held:
                self.groups.write(b)
        self.held = None
        self.plain.close()
        self.groups.close()

    @property
    def files(self) -> list[dict]:
        return self.plain.files + self.groups.files


def _read_state(paths: list[str] | None, table: T.Table, partition: int) -> pa.Table | None:
    if not paths:
        return None
    schema = _file_schema(table, ())
    # ParquetFile, not read_table: the dataset layer costs more than reading a small file;
    # one thread, as a pool's hand-offs cost more than such a file's decoding
    parts = []
    for path in paths:
        part = pq.ParquetFile(path).read(columns=schema.names, use_threads=False)
        parts.append(part if part.schema.equals(schema) else part.cast(schema))
    t = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
    t = t.append_column(
        pa.field("offsets_partition", pa.int32(), False), pa.array(np.full(t.num_rows, partition, np.int32))
    )
    return t.select(table.column_names)


def replay_partition(task: dict) -> dict:
    """One partition: task keys partition, segments [(path, base_offset)] or bootstrap,
    start_offset, end_offset, warehouse, run_id, previous {table name: [file paths]},
    now_ms, retention_ms, quarantine (bool). Returns the partition's summary."""
    from lib.replay.engine import PartitionReplay
    from lib.replay.groups import GroupReplayError

    started = time.time()
    p = task["partition"]
    warehouse, run_id = task["warehouse"], task["run_id"]
    clock = {"read_state": 0.0, "decode": 0.0, "replay": 0.0, "write_log": 0.0, "finish": 0.0}
    t = time.thread_time()

    def lap(what):
        nonlocal t
        now = time.thread_time()
        clock[what] += now - t
        t = now

    engine = PartitionReplay(p)
    prev = task.get("previous") or {}
    if prev:
        committed = [
            x
            for x in (
                _read_state(prev.get(T.GROUP_OFFSETS.name), T.GROUP_OFFSETS, p),
                _read_state(prev.get(T.EXPIRED_OFFSETS.name), T.EXPIRED_OFFSETS, p),
            )
            if x is not None
        ]
        group_rows = [
            x
            for x in (
                _read_state(prev.get(T.CONSUMER_GROUPS.name), T.CONSUMER_GROUPS, p),
                _read_state(prev.get(T.EXPIRED_GROUPS.name), T.EXPIRED_GROUPS, p),
            )
            if x is not None
        ]
        engine.load(
            pa.concat_tables(committed) if committed else None,
            _read_state(prev.get(T.PENDING_TRANSACTIONAL_OFFSETS.name), T.PENDING_TRANSACTIONAL_OFFSETS, p),
            _read_state(prev.get(T.GROUP_FOLD_STATE.name), T.GROUP_FOLD_STATE, p),
            pa.concat_tables(group_rows) if group_rows else None,
        )
    lap("read_state")
    log_writer = _LogWriter(warehouse, p, run_id)
    quarantine: list[dict] | None = [] if task.get("quarantine") else None
    summary: dict = {"records": 0, "next_offset": None, "trailing_bytes": 0, "end_position": None}

    def consume(batches):
        for batch in batches:
            lap("decode")
            log_writer.write(batch)
            lap("write_log")
            engine.feed(batch, getattr(batches, "batch_group_metadata", None))
            lap("replay")

    try:
        if task.get("bootstrap"):
            _fetch(task, summary, quarantine, consume)
        else:
            read_segments(task, summary, quarantine, consume)
        log_writer.close()
        lap("write_log")
        state = engine.finish(task["now_ms"], task["retention_ms"], task.get("topic_names"))
    except DecodeError as e:
        raise worker_error(
            type(e).__name__, e.message, file=e.file, partition=e.partition, offset=e.offset, position=e.position
        ) from None
    except GroupReplayError as e:
        raise worker_error(
            "GroupReplayError",
            "group replay failed as Kafka's loader would: " + str(e),
            partition=getattr(e, "partition", p),
            offset=getattr(e, "offset", None),
        ) from None
    files = {T.OFFSETS_LOG.name: log_writer.files}
    for table in STATE_TABLES:
        w = _FileWriter(warehouse, table, p, run_id)
        w.write(state[table.name])
        w.close()
        files[table.name] = w.files
    if quarantine:
        w = _FileWriter(warehouse, T.QUARANTINED_RECORDS, p, run_id)
        rows = [{**r, "run_id": run_id} for r in quarantine]
        w.write(pa.Table.from_pylist(rows, schema=T.QUARANTINED_RECORDS.arrow_schema))
        w.close()
        files[T.QUARANTINED_RECORDS.name] = w.files
    lap("finish")
    return {
        "partition": p,
        "records": summary["records"],
        "next_offset": summary["next_offset"],
        "trailing_bytes": summary["trailing_bytes"],
        "end_position": summary["end_position"],
        "quarantined": len(quarantine or ()),
        "expiry_changes_at": state["expiry_changes_at"],
        "topic_names": engine.topic_names,
        "unresolved_topic_ids": state["unresolved_topic_ids"],
        "files": files,
        "seconds": clock,
        "span": (started, time.time(), os.getpid()),
    }


def _batch_starts_at(data, pos: int, start_offset: int) -> bool:
    """Whether the batch that starts at byte `pos` is whole, valid and the next after the
    checkpoint (its base offset is `start_offset`: a leader appends at the log end offset), or
    `pos` is the end. The log cleaner may have rewritten the segment since the position was
    taken, and then the position means nothing (the caller reads from the start): batches of
    equal size make a valid batch at the old position likely, so its offset must match too."""
    import struct

    import crc32c

    if pos == len(data):
        return True
    if pos > len(data) or pos + 61 > len(data):
        return False
    base, size = struct.unpack_from(">qi", data, pos)
    if base != start_offset or size < 49 or pos + 12 + size > len(data) or data[pos + 16] != 2:
        return False
    (crc,) = struct.unpack_from(">I", data, pos + 17)
    return crc32c.crc32c(data[pos + 21 : pos + 12 + size]) == crc


def read_segments(task: dict, summary: dict, quarantine, consume) -> None:
    """The segments from start_offset on. `start_position` (the byte position in the first
    segment where the previous run stopped) lets an incremental run start there, as Kafka's
    offset index lets a fetch start near its offset, instead of stepping over every earlier
    batch header: the read costs what the new records cost."""

    from lib.codec.segments import read_segment_bytes
    from lib.decode import SegmentDecoder

    p, start = task["partition"], task["start_offset"]
    for i, (path, base) in enumerate(task["segments"]):
        data, shift = None, 0
        pos = task.get("start_position") if i == 0 else None
        if pos:
            whole = read_segment_bytes(path)
            if _batch_starts_at(whole, pos, start):
                data, shift = memoryview(whole)[pos:], pos
        decoder = SegmentDecoder(
            path,
            p,
            start_offset=start,
            quarantine=quarantine,
            data=data,
            source_name=os.path.basename(path) if data is not None else None,
        )
        first_quarantined = len(quarantine) if quarantine is not None else 0
        try:
            consume(decoder)
        except DecodeError as e:
            if shift and e.position is not None:
                e.position += shift
            raise
        finally:
            if shift and quarantine is not None:
                for row in quarantine[first_quarantined:]:
                    row["byte_position"] += shift
        size = shift + (len(data) if data is not None else os.path.getsize(path))
        summary["records"] += decoder.records
        summary["trailing_bytes"] += decoder.trailing_bytes
        summary["end_position"] = size - decoder.trailing_bytes
        # started past the checkpoint's batch: nothing read there means the log ends at the checkpoint
        nxt = max(base, decoder.next_offset or (start if shift else 0))
        summary["next_offset"] = nxt if summary["next_offset"] is None else max(summary["next_offset"], nxt)


class LiveTopicRead:
    """The live topic's partition from `start_offset` up to its high watermark as the read
    began (or `end_offset` if lower), fetched chunk by chunk and decoded: iterate for the
    batches; `batch_group_metadata` is the decoder's for the batch just yielded (None when
    the batch was cut at the end). After iteration: `next_offset` and `records`. One loop for
    the Spark tasks and the coordinator."""

    def __init__(
        self,
        bootstrap: str,
        partition: int,
        start_offset: int,
        end_offset: int | None = None,
        quarantine: list | None = None,
    ):
        self.bootstrap, self.partition = bootstrap, partition
        self.start_offset, self.end_offset = start_offset, end_offset
        self.quarantine = quarantine
        self.next_offset = start_offset
        self.records = 0
        self.batch_group_metadata: dict | None = None

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        import pyarrow.compute as pc

        from lib.decode import SegmentDecoder
        from lib.source.live import OffsetsTopicReader

        p = self.partition
        reader = OffsetsTopicReader(self.bootstrap)
        offset = self.start_offset
        try:
            end = reader.end_offset(p)
            if self.end_offset is not None and self.end_offset >= 0:
                end = min(end, self.end_offset)
            while offset < end:
                chunk = reader.fetch(p, offset)
                decoder = SegmentDecoder(
                    f"{self.bootstrap} __consumer_offsets-{p} fetched at offset {offset}",
                    p,
                    start_offset=offset,
                    data=chunk.data,
                    source_name=f"fetch:{offset}",
                    quarantine=self.quarantine,
                )
                for batch in decoder:
                    self.batch_group_metadata = decoder.batch_group_metadata
                    if batch.num_rows and batch.column("log_offset")[-1].as_py() >= end:
                        batch = batch.filter(pc.less(batch.column("log_offset"), end))
                        self.batch_group_metadata = None  # its row numbers no longer hold
                    if batch.num_rows:
                        self.records += batch.num_rows
                        yield batch
                if decoder.next_offset is None or decoder.next_offset <= offset:
                    break  # nothing more below the high watermark
                offset = min(decoder.next_offset, end)
        finally:
            reader.close()
        self.next_offset = offset


def _fetch(task: dict, summary: dict, quarantine, consume) -> None:
    """The live topic from start_offset to its high watermark as the task began (or
    end_offset if lower)."""
    live = LiveTopicRead(task["bootstrap"], task["partition"], task["start_offset"], task.get("end_offset"), quarantine)
    consume(live)
    summary["records"] += live.records
    summary["next_offset"] = live.next_offset
