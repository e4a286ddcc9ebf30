"""The work of one Spark task: one __consumer_offsets partition, read once, in log order.

Framing, CRC, decode (lib.decode / lib.decode.fast), the offsets replay and the group fold
(lib.replay.engine) and expiry happen in one pass in the Python worker. The worker writes
its rows as Parquet files straight into the Delta tables' folders (offsets_log: files of
its own per partition, the GroupMetadata rows apart, or a share of the task's file when few
rows are new (_LogWriter); each state table: one file per Spark task, a row group per
partition), where the driver's commit adds them without rewriting; until that commit
they are invisible to readers (and VACUUM removes them if the run dies). What goes back to
the driver (lib.lake.seams.TaskResult) is one small PartitionSummary per partition (counts,
the checkpoint) and the WrittenFiles to add, with their stats.
No pyspark here: the same function runs without Spark (tests, the coordinator)."""

from __future__ import annotations

import contextlib
import functools
import json
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute
import pyarrow.parquet as pq

from lib import storage
from lib.codec.errors import DecodeError
from lib.lake import audit_digest
from lib.lake.audit_digest import DIGEST_KEY, AuditDigest
from lib.lake.seams import PartitionSummary, ReplayTask, StateFile, TaskGroup, TaskResult, WrittenFile
from lib.lake.worker_errors import WorkerError
from schemas import tables as T

if TYPE_CHECKING:
    from lib.replay.engine import PartitionReplay

OFFSETS_LOG_FILE_ROWS = 4_000_000  # roll the offsets_log file past this many rows
STATE_TABLES = (
    T.GROUP_OFFSETS,
    T.EXPIRED_OFFSETS,
    T.PENDING_TRANSACTIONAL_OFFSETS,
    T.CONSUMER_GROUPS,
    T.EXPIRED_GROUPS,
    T.GROUP_FOLD_STATE,
)
# columns whose min/max go into the add action's stats: data skipping on the log's position, and
# the offsets partitions of a state table's file (offsets_partition is a column of a flat file only)
STATS_COLUMNS = ("log_offset", "batch_base_offset", "offsets_partition")
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
# assignment_audit is written two ways: the rows of generations that are over are added, and
# those of the generations still open (replaced as their generation goes on) are state, in
# files named open-... that a run replaces for the partitions it replays, as a state table's
STATE_FILE_PREFIX = {T.ASSIGNMENT_AUDIT.name: "open"}
PARTITIONS_KEY = "offsets_partitions"  # footer metadata of a flat file: the partitions it holds
STATE_ROW_GROUP_ROWS = 65536  # a state file's row group: up to this many rows, of several partitions
# a row group of rows added (assignment_audit's), of several partitions: an incremental run's few
# rows a partition to one; a full run's partitions, thousands of rows each, one each (held
# longer, a worker's peak grew 50-70 MB on make bench's log)
APPEND_ROW_GROUP_ROWS = 8192
STATISTICS_COLUMNS = ("offsets_partition", "log_offset", "batch_base_offset", "log_timestamp", "commit_timestamp")
# values the Parquet writer encodes at a time in a file of flat columns (pyarrow's default 1,024):
# offsets_log's flat rows 6% faster to write (1.5M rows of make bench's log: 0.376 against 0.398
# s of CPU, median of 7), the same bytes and memory. Not in a file with nested columns: no
# faster there, and its GroupMetadata rows' writer held 112 MB more at once
FLAT_WRITE_BATCH_SIZE = 65536
PYARROW_WRITE_BATCH_SIZE = 1024


def _write_batch_size(schema: pa.Schema) -> int:
    nested = any(pa.types.is_nested(f.type) for f in schema)
    return PYARROW_WRITE_BATCH_SIZE if nested else FLAT_WRITE_BATCH_SIZE


# row-group statistics of the other tables, where readers pick row groups: a state table's by
# offsets partition, the lag tables' by topic partition (rows sorted so)
ROW_GROUP_STATISTICS = {
    T.PARTITION_END_OFFSETS.name: ["topic", "partition", "end_offset", "at"],
    T.GROUP_LAG.name: ["topic", "partition", "at"],
}


def partition_dir(warehouse: str, table: T.Table, partition: int) -> str:
    return storage.join(warehouse, table.name, f"offsets_partition={partition}")


_FILE_SCHEMAS: dict[tuple[str, tuple, bool], pa.Schema] = {}


def _file_schema(table: T.Table, drop: tuple, partitioned: bool = True) -> pa.Schema:
    """A data file's schema: the table's without `drop`, and without its partition column in
    a partition folder. Built once per process: building it cost 0.2 ms, eight times per
    partition."""
    key = (table.name, drop, partitioned)
    if key not in _FILE_SCHEMAS:
        _FILE_SCHEMAS[key] = pa.schema(
            [
                f
                for f in table.arrow_schema
                if not (partitioned and f.name == "offsets_partition") and f.name not in drop
            ]
        )
    return _FILE_SCHEMAS[key]


class FileWriter:
    """Parquet files of one table, as Delta data files: of one partition, in its folder and
    without the partition column (`partition` given), or of any partitions at the table's root
    (a flat table; each write is its own row group, with offsets_partition statistics, so a
    reader of one partition reads its row groups only)."""

    def __init__(
        self, warehouse: str, table: T.Table, partition: int | None, run_id: str, drop: tuple = (), prefix: str = "part"
    ):
        self.table = table
        self.prefix = prefix
        self.partition = partition
        self.table_dir = storage.join(warehouse, table.name)
        self.folder = self.table_dir if partition is None else partition_dir(warehouse, table, partition)
        self.run_id = run_id
        self.schema = _file_schema(table, drop, partition is not None)
        # (non-null columns only: the stats say they hold no null)
        not_null = {c.name for c in table.columns if not c.nullable}
        self.stats_columns = [c for c in STATS_COLUMNS if c in self.schema.names and c in not_null]
        # a flat file names the partitions it holds in its footer: the min/max of the Delta
        # log's stats cannot tell {0, 2} from {0, 1, 2}
        self._partitions: set[int] | None = set() if "offsets_partition" in self.schema.names else None
        self.files: list[WrittenFile] = []
        self._writer: pq.ParquetWriter | None = None
        self._path: str | None = None
        self._out: storage.OutputFile | None = None
        self._rows = 0
        self._min: dict = {}
        self._max: dict = {}
        # assignment_audit: what the run summary reads of the file, kept in its footer (none
        # past DIGEST_MAX_GROUPS)
        self._digest: AuditDigest | None = None
        self._digested = table is T.ASSIGNMENT_AUDIT

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        if batch.num_rows == 0:
            return
        if self._writer is None:
            name = f"{self.prefix}-{self.run_id}-{uuid.uuid4().hex[:12]}.snappy.parquet"
            self._path = storage.join(self.folder, name)
            self._out = storage.OutputFile(self._path)
            names = set(self.schema.names)
            options: dict[str, bool | list[str]]
            if self.table is T.OFFSETS_LOG:
                options = {
                    "use_dictionary": [c for c in DICTIONARY_COLUMNS if c in names],
                    "write_statistics": [c for c in STATISTICS_COLUMNS if c in names],
                }
            else:
                # state tables: a few thousand rows a partition, rewritten every run; plain pages
                # (a file is read whole), statistics only where a reader picks row groups
                statistics = ROW_GROUP_STATISTICS.get(self.table.name)
                if statistics is None:
                    statistics = ["offsets_partition"] if "offsets_partition" in names else []
                # the lag tables are large, their strings repeat: dictionaries there
                strings = [f.name for f in self.schema if pa.types.is_string(f.type)]  # (plain or dictionary)
                dictionary: bool | list[str] = strings if self.table.name in ROW_GROUP_STATISTICS else False
                if self.table is T.ASSIGNMENT_AUDIT:
                    # history, a row per generation: member ids, client ids and topics repeat from
                    # one generation to the next, in the nested columns too. Half the bytes of
                    # plain pages (busy log: 57 MB instead of 115 per 10M records) for the same
                    # CPU, and a fifth less to read back whole
                    dictionary = True
                options = {"use_dictionary": dictionary, "write_statistics": statistics or False}
            data = batch.select(self.schema.names)
            # strings given as dictionaries (the lag tables') are written as they are, and the
            # file keeps no Arrow schema: readers see the table's plain strings
            dictionaries = any(pa.types.is_dictionary(f.type) for f in data.schema)
            self._writer = pq.ParquetWriter(
                self._out.sink,
                data.schema if dictionaries else self.schema,
                compression="snappy",
                store_schema=not dictionaries,
                write_batch_size=_write_batch_size(self.schema),
                **options,
            )
        assert self._writer is not None
        data = batch.select(self.schema.names)
        # a row group per batch: holding batches for larger row groups was a few % faster to
        # write, but made a worker's memory grow with its partition's size
        if isinstance(data, pa.RecordBatch):
            self._writer.write_batch(data)
        else:
            self._writer.write_table(data)
        self._rows += data.num_rows
        if self._digested:
            digest = AuditDigest.of_rows(data)
            if self._digest is None:
                self._digest = digest
            else:
                self._digest.add(digest)
            if self._digest.latest.num_rows > audit_digest.DIGEST_MAX_GROUPS:
                self._digest, self._digested = None, False
        if self._partitions is not None:
            self._partitions.update(pa.compute.unique(data.column("offsets_partition")).to_pylist())
        for c in self.stats_columns:
            col = data.column(c)
            lo, hi = int(pa.compute.min(col).as_py()), int(pa.compute.max(col).as_py())
            self._min[c] = min(self._min.get(c, lo), lo)
            self._max[c] = max(self._max.get(c, hi), hi)
        if self._rows >= OFFSETS_LOG_FILE_ROWS:
            self.close()

    def close(self) -> None:
        if self._writer is None:
            return
        footer = {}
        if self._partitions is not None:
            footer[PARTITIONS_KEY] = ",".join(map(str, sorted(self._partitions)))
            self._partitions = set()
        if self._digest is not None:
            footer[DIGEST_KEY] = self._digest.to_json()
        self._digest, self._digested = None, self.table is T.ASSIGNMENT_AUDIT
        if footer:
            self._writer.add_key_value_metadata(footer)
        self._writer.close()
        assert self._path is not None and self._out is not None
        self._out.close()
        stats = {
            "numRecords": self._rows,
            "minValues": dict(self._min),
            "maxValues": dict(self._max),
            "nullCount": dict.fromkeys(self._min, 0),
        }
        self.files.append(
            WrittenFile(
                path=storage.relpath(self._path, self.table_dir),
                size=self._out.size,
                rows=self._rows,
                modification_time=int(time.time() * 1000),
                stats=json.dumps(stats),
                partition_value=self.partition,
            )
        )
        self._writer = None
        self._rows = 0
        self._min, self._max = {}, {}


class _LogWriter:
    """offsets_log files of one partition. Rows with a GroupMetadata value go to files of their
    own: in the others the group_metadata column is left out (a Delta reader reads a column a
    file lacks as null), because writing its deep nesting for rows that are all null cost as
    much as every other column together. A partition with few new rows (an incremental run)
    gets no file of its own: its rows go to `small` (the task's shared files, split the same
    way: `small(rows, drop)`), as a file's fixed cost outweighs the rows; in a table partitioned
    by offsets_partition (`flat` False: made by an earlier version) they get one file."""

    NESTED = "group_metadata"
    SMALL_ROWS = 32768

    def __init__(self, warehouse: str, partition: int, run_id: str, flat: bool = True, small=None):
        folder_partition = None if flat else partition
        self.plain = FileWriter(warehouse, T.OFFSETS_LOG, folder_partition, run_id, drop=(self.NESTED,))
        self.groups = FileWriter(warehouse, T.OFFSETS_LOG, folder_partition, run_id)
        self.small = small if flat else None
        self.held: list[pa.RecordBatch] | None = []
        self.held_rows = 0

    def write(self, batch: pa.RecordBatch, parts: Callable[[], tuple] | None = None) -> None:
        """`parts`: the decoder's build of the batch's rows without a GroupMetadata value
        (without that column) and with one (SegmentDecoder.batch_parts), asked for only when
        the batch is written now (not while it is held: it may go to `small`); else filtered here."""
        if self.held is not None:
            self.held.append(batch)
            self.held_rows += batch.num_rows
            if self.held_rows < self.SMALL_ROWS:
                return
            held, self.held = self.held, None
            for b in held[:-1]:
                self._split(b)
            self._split(batch, parts)
            return
        self._split(batch, parts)

    def _split(self, batch: pa.RecordBatch, parts: Callable[[], tuple] | None = None) -> None:
        nested = batch.column(self.NESTED)
        if nested.null_count == batch.num_rows:
            self.plain.write(batch)
            return
        plain, groups = parts() if parts is not None else (None, None)
        has = pa.compute.is_valid(nested)
        # (the nested column is left out before filtering: copying it costs more than the rest)
        self.plain.write(
            plain if plain is not None else batch.drop_columns([self.NESTED]).filter(pa.compute.invert(has))
        )
        self.groups.write(groups if groups is not None else batch.filter(has))

    def close(self) -> None:
        if self.held:
            if self.small is not None:
                self._small(pa.Table.from_batches(self.held))
            else:
                for b in self.held:
                    self.groups.write(b)
        self.held = None
        self.plain.close()
        self.groups.close()

    def _small(self, rows: pa.Table) -> None:
        """The held rows to the task's files: those without a GroupMetadata value without the
        column (the 1% incremental run's two tasks wrote their offsets_log rows in 77 ms of
        CPU with it, in 50 without)."""
        assert self.small is not None
        nested = rows.column(self.NESTED)
        if nested.null_count == rows.num_rows:
            self.small(rows.drop_columns([self.NESTED]), (self.NESTED,))
            return
        has = pa.compute.is_valid(nested)
        self.small(rows.drop_columns([self.NESTED]).filter(pa.compute.invert(has)), (self.NESTED,))
        self.small(rows.filter(has), ())

    @property
    def files(self) -> list[WrittenFile]:
        return self.plain.files + self.groups.files


def row_group_partitions(meta: pq.FileMetaData) -> list[tuple[int | None, int | None]]:
    """Each row group's offsets_partition (min, max) from a flat file's footer; (None, None)
    where the statistics are missing (or the file has no such column)."""
    leaf = next((j for j in range(meta.num_columns) if meta.schema.column(j).path == "offsets_partition"), None)
    ranges: list[tuple[int | None, int | None]] = []
    for i in range(meta.num_row_groups):
        st = meta.row_group(i).column(leaf).statistics if leaf is not None else None
        ranges.append((st.min, st.max) if st is not None and st.has_min_max else (None, None))
    return ranges


class TaskState:
    """The state tables of one Spark task's partitions. Reads each partition's previous state
    from the files the driver listed (`sources`: table name -> [lib.lake.seams.StateFile]):
    from a flat file, the row groups that may hold the partition; from a partition folder's
    file (a table an older version made partitioned), the whole file. Writes the new state:
    one file per flat table for the whole task, partitions in ascending order, several to a
    row group (a row group's fixed cost outweighs a partition's few thousand rows); one file
    per partition in a partitioned table (`flat`: table name -> whether it is flat). Holds at
    most a row group per table and file."""

    def __init__(
        self, warehouse: str, run_id: str, sources: Mapping[str, Sequence[StateFile]], flat: Mapping[str, bool]
    ):
        self.warehouse, self.run_id = warehouse, run_id
        self.sources, self.flat = sources, flat
        self._footers: dict[str, tuple[pq.ParquetFile, list[tuple[int | None, int | None]]]] = {}
        self._groups: dict[tuple[str, str], tuple[tuple[int, ...], pa.Table, np.ndarray | None]] = {}
        # the state's rows (replaced each run) and the rows added (assignment_audit's), per table
        # (by table and the columns its files leave out)
        self._state_rows: dict[tuple[str, tuple], _HeldRows] = {}
        self._added_rows: dict[tuple[str, tuple], _HeldRows] = {}
        self.files: dict[str, list[WrittenFile]] = {}

    def _footer(self, path: str) -> tuple[pq.ParquetFile, list[tuple[int | None, int | None]]]:
        """A file's reader and each row group's offsets_partition (min, max), None if unknown;
        read once per task."""
        if path not in self._footers:
            f = storage.open_parquet(path)
            self._footers[path] = (f, row_group_partitions(f.metadata))
        return self._footers[path]

    def read(self, table: T.Table, partition: int) -> pa.Table | None:
        """The partition's rows of `table` in the listed files (None: none listed)."""
        sources = self.sources.get(table.name)
        if not sources:
            return None
        parts = []
        for src in sources:
            if src.partition_value is not None:
                if int(src.partition_value) == partition:
                    parts.append(self._partition_file(src.path, table, partition))
                continue
            part = self._rows_of(src.path, table, partition)
            if part is not None and part.num_rows:
                parts.append(part)
        if not parts:
            return pa.Table.from_batches([], schema=table.arrow_schema)
        return pa.concat_tables(parts) if len(parts) > 1 else parts[0]

    def _partition_file(self, path: str, table: T.Table, partition: int) -> pa.Table:
        schema = _file_schema(table, ())
        # ParquetFile, not read_table: the dataset layer costs more than reading a small file;
        # one thread, as a pool's hand-offs cost more than such a file's decoding
        t = storage.open_parquet(path).read(columns=schema.names, use_threads=False)
        t = t if t.schema.equals(schema) else t.cast(schema)
        t = t.append_column(
            pa.field("offsets_partition", pa.int32(), False), pa.array(np.full(t.num_rows, partition, np.int32))
        )
        return t.select(table.column_names)

    def _read_groups(self, path: str, table: T.Table, picked: list[int], drop: tuple = ()) -> pa.Table:
        """Row groups of a flat file, the table's columns but `drop` (those the file lacks)."""
        f, _ = self._footer(path)
        schema = _file_schema(table, drop, partitioned=False) if drop else table.arrow_schema
        t = f.read_row_groups(picked, columns=schema.names, use_threads=False)
        return t if t.schema.equals(schema) else t.cast(schema)

    def _rows_of(self, path: str, table: T.Table, partition: int) -> pa.Table | None:
        """A partition's rows in a flat file: its row groups that may hold the partition (all
        where statistics are missing), read once while the task's partitions go through
        them in ascending order, and sliced (or filtered, where not sorted)."""
        _, ranges = self._footer(path)
        picked = tuple(i for i, (lo, hi) in enumerate(ranges) if lo is None or hi is None or lo <= partition <= hi)
        if not picked:
            return None
        key = (table.name, path)
        held = self._groups.get(key)
        if held is None or held[0] != picked:
            t = self._read_groups(path, table, list(picked))
            keys = t.column("offsets_partition").to_numpy()
            self._groups[key] = held = (picked, t, keys if bool(np.all(keys[:-1] <= keys[1:])) else None)
        _, t, keys = held
        if keys is None:
            return t.filter(pa.compute.equal(t.column("offsets_partition"), partition))
        lo, hi = np.searchsorted(keys, partition, "left"), np.searchsorted(keys, partition, "right")
        return t.slice(int(lo), int(hi - lo))

    def write(self, table: T.Table, partition: int, rows: pa.Table, drop: tuple = ()) -> None:
        """`drop`: columns the rows lack (null in each), left out of their file (a file of the
        task's own for each set)."""
        if self.flat.get(table.name, True):
            if rows.num_rows:
                self._held(
                    self._state_rows, table, STATE_ROW_GROUP_ROWS, STATE_FILE_PREFIX.get(table.name, "part"), drop
                ).add(rows)
            return
        w = FileWriter(self.warehouse, table, partition, self.run_id, drop)
        w.write(rows)
        w.close()
        self.files.setdefault(table.name, []).extend(w.files)

    def append(self, table: T.Table, rows: pa.Table) -> None:
        """Rows added to a table whose other rows stay (one file per task and table), several
        partitions' to a row group as the state's (an incremental run's partitions add a few
        rows each: a row group each cost three times the task's one write)."""
        if rows.num_rows:
            self._held(self._added_rows, table, APPEND_ROW_GROUP_ROWS, "part").add(rows)

    def _held(
        self, by_table: dict[tuple[str, tuple], _HeldRows], table: T.Table, limit: int, prefix: str, drop: tuple = ()
    ) -> _HeldRows:
        held = by_table.get((table.name, drop))
        if held is None:
            held = by_table[(table.name, drop)] = _HeldRows(
                lambda: FileWriter(self.warehouse, table, None, self.run_id, drop, prefix), limit
            )
        return held

    def carry(self, carry: Mapping[str, Sequence[str]], replayed: Sequence[int]) -> None:
        """Rows of partitions this run does not replay that sit in files the run replaces
        (files it was told to carry): written again, unchanged, into this task's files."""
        done = set(replayed)
        done_array = pa.array(sorted(done), pa.int32())
        for name, paths in carry.items():
            table = T.TABLES[name]
            if not self.flat.get(name, True):
                raise ValueError(f"{name}: rows to carry, but the table is partitioned")
            for path in paths:
                f, ranges = self._footer(path)
                # (an offsets_log file of rows without a GroupMetadata value lacks that column:
                # its rows go to the task's file without it)
                drop = tuple(n for n in table.column_names if n not in f.schema_arrow.names)
                for i, (lo, hi) in enumerate(ranges):
                    if lo is not None and hi is not None and all(p in done for p in range(lo, hi + 1)):
                        continue
                    rows = self._read_groups(path, table, [i], drop)
                    rows = rows.filter(
                        pa.compute.invert(pa.compute.is_in(rows.column("offsets_partition"), done_array))
                    )
                    self.write(table, -1, rows, drop)

    def close(self) -> dict[str, list[WrittenFile]]:
        for by_table in (self._state_rows, self._added_rows):
            for (name, _), held in by_table.items():
                self.files.setdefault(name, []).extend(held.close())
        self._state_rows, self._added_rows = {}, {}
        return self.files


class _HeldRows:
    """Rows of one table held until `limit` rows, then written as one row group (a row group's
    fixed cost outweighs a partition's few rows) to the file `new_writer` makes when first
    needed."""

    def __init__(self, new_writer: Callable[[], FileWriter], limit: int):
        self._new_writer = new_writer
        self._limit = limit
        self._writer: FileWriter | None = None
        self._held: list[pa.Table] = []
        self._rows = 0

    def add(self, rows: pa.Table) -> None:
        self._held.append(rows)
        self._rows += rows.num_rows
        if self._rows >= self._limit:
            self._flush()

    def _flush(self) -> None:
        if not self._held:
            return
        if self._writer is None:
            self._writer = self._new_writer()
        self._writer.write(pa.concat_tables(self._held) if len(self._held) > 1 else self._held[0])
        self._held, self._rows = [], 0

    def close(self) -> list[WrittenFile]:
        self._flush()
        if self._writer is None:
            return []
        self._writer.close()
        return self._writer.files


def replay_group(group: TaskGroup) -> TaskResult:
    """One Spark task: its partitions' ReplayTasks one after another (replay_partition), then
    the rows it must carry; the state tables' files are shared by its partitions."""
    from lib.lake.lag_input import EventWriter

    storage.configure(group.object_store)
    state = TaskState(group.warehouse, group.run_id, group.state_files, group.flat)
    # the commits that took effect, for the lag stage (lib.lake.lag_input)
    events = EventWriter(group.warehouse, group.run_id) if group.lag_input else None
    done: list[tuple[PartitionSummary, dict[str, list[WrittenFile]]]] = []
    waiting: list[_Replayed] = []
    for task in group.tasks:
        replayed = _read_partition(task, state, events)
        if replayed.small:
            waiting.append(replayed)
            if sum(r.size for r in waiting) <= WAIT_SIZE:
                continue
        done.extend(_finish_partitions(waiting, state))
        if not replayed.small:
            done.append(_finish_partition(replayed, state))
        waiting = []
    done.extend(_finish_partitions(waiting, state))
    t = time.thread_time()
    lag_input = events.close() if events is not None else None
    events_seconds = time.thread_time() - t
    t = time.thread_time()
    state.carry(group.carry, group.replayed)
    carried = time.thread_time() - t
    files = state.close()
    for _, written in done:
        for name, fs in written.items():
            files.setdefault(name, []).extend(fs)
    # the task's shared files (state tables, small partitions' offsets_log) are written here
    seconds = {"carry": carried, "write_task_files": time.thread_time() - t - carried, "lag_input": events_seconds}
    return TaskResult(
        partitions=tuple(summary for summary, _ in done),
        files={name: tuple(fs) for name, fs in files.items()},
        seconds=seconds,
        lag_input=lag_input,
    )


# A partition whose replay (records read, and offsets it holds) is at most this is finished with
# the task's next ones, their assignment audits in one batch of the kernels
# (lib.replay.assignment.finish_together); those waiting hold at most this much together
WAIT_SIZE = 100_000


class _Clock:
    """A partition's CPU seconds by step: each lap() adds the time since the last to a step."""

    def __init__(self):
        self.seconds = {
            "read_state": 0.0,
            "decode": 0.0,
            "replay": 0.0,
            "write_log": 0.0,
            "finish": 0.0,
            "lag_input": 0.0,
        }
        self._t = time.thread_time()

    def lap(self, what: str) -> None:
        now = time.thread_time()
        self.seconds[what] += now - self._t
        self._t = now

    def restart(self) -> None:
        self._t = time.thread_time()


@dataclass
class _Replayed:
    """A partition read and replayed, not finished yet (replay_partition's two halves)."""

    task: ReplayTask
    engine: PartitionReplay
    log_files: list[WrittenFile]
    quarantine: list[dict] | None
    progress: ReadProgress
    record_types: dict[tuple[int, bool, bool], int]
    clock: _Clock

    @property
    def size(self) -> int:
        return self.progress.records + self.engine.keys.count

    @property
    def small(self) -> bool:
        return self.engine.audit is not None and self.size <= WAIT_SIZE


def replay_partition(
    task: ReplayTask, state: TaskState, events=None
) -> tuple[PartitionSummary, dict[str, list[WrittenFile]]]:
    """One partition. Its previous state comes from `state`, and its new state goes there.
    Returns the partition's summary and the offsets_log (and quarantine) files it wrote."""
    return _finish_partition(_read_partition(task, state, events), state)


def _read_partition(task: ReplayTask, state: TaskState, events=None) -> _Replayed:
    """replay_partition's first half: the partition's state loaded, its log read and replayed,
    its offsets_log rows written."""
    from lib.replay.engine import PartitionReplay

    p = task.partition
    clock = _Clock()
    engine = PartitionReplay(p)
    engine.emit_commit_events = events is not None
    audit = task.audit
    if audit is not None:
        from lib.replay.assignment import AssignmentTracker

        engine.audit = AssignmentTracker(dict(audit.floors), dict(audit.names))
        # the rows of generations over go to the task's file as the replay makes them
        engine.audit.outcome.sink = functools.partial(state.append, T.ASSIGNMENT_AUDIT)
    if state.sources:
        offsets = [state.read(T.GROUP_OFFSETS, p), state.read(T.EXPIRED_OFFSETS, p)]
        group_rows = [state.read(T.CONSUMER_GROUPS, p), state.read(T.EXPIRED_GROUPS, p)]
        committed = [x for x in offsets if x is not None and x.num_rows]
        groups = [x for x in group_rows if x is not None and x.num_rows]
        engine.load(
            pa.concat_tables(committed) if committed else None,
            state.read(T.PENDING_TRANSACTIONAL_OFFSETS, p),
            state.read(T.GROUP_FOLD_STATE, p),
            pa.concat_tables(groups) if groups else None,
        )
    clock.lap("read_state")
    log_writer = _LogWriter(
        task.warehouse,
        p,
        task.run_id,
        flat=state.flat.get(T.OFFSETS_LOG.name, True),
        small=lambda rows, drop: state.write(T.OFFSETS_LOG, p, rows, drop),
    )
    quarantine: list[dict] | None = [] if task.quarantine else None
    progress = ReadProgress()

    record_types: dict[tuple[int, bool, bool], int] = {}

    def consume(batches):
        for batch in batches:
            clock.lap("decode")
            _count_types(batch, record_types)
            log_writer.write(batch, getattr(batches, "batch_parts", None))  # (a live fetch has none)
            clock.lap("write_log")
            engine.feed(batch, getattr(batches, "batch_group_metadata", None))
            clock.lap("replay")
            if events is not None:
                events.write(engine.take_commit_events())
                clock.lap("lag_input")

    with _worker_errors(p):
        if task.bootstrap:
            _fetch(task, progress, quarantine, consume)
        else:
            read_segments(
                task.partition, task.start_offset, task.segments, task.start_position, progress, quarantine, consume
            )
        log_writer.close()
        clock.lap("write_log")
    return _Replayed(task, engine, log_writer.files, quarantine, progress, record_types, clock)


def _finish_partitions(
    waiting: list[_Replayed], state: TaskState
) -> list[tuple[PartitionSummary, dict[str, list[WrittenFile]]]]:
    """Partitions replayed, finished in order, their assignment audits in one batch where they
    can be (finish_together)."""
    if len(waiting) > 1:
        from lib.replay.assignment import finish_together

        t = time.thread_time()
        with _worker_errors(waiting[0].task.partition):
            finish_together([r.engine.audit for r in waiting if r.engine.audit is not None])
        share = (time.thread_time() - t) / len(waiting)
        for r in waiting:
            r.clock.seconds["finish"] += share
    return [_finish_partition(r, state) for r in waiting]


def _finish_partition(replayed: _Replayed, state: TaskState) -> tuple[PartitionSummary, dict[str, list[WrittenFile]]]:
    """replay_partition's second half: the partition's state judged and written."""
    task, engine, clock, progress, quarantine = (
        replayed.task,
        replayed.engine,
        replayed.clock,
        replayed.progress,
        replayed.quarantine,
    )
    p = task.partition
    clock.restart()  # (other partitions' work since its first half is theirs)
    with _worker_errors(p):
        result = engine.finish(task.now_ms, task.retention_ms, dict(task.topic_names))
    files: dict[str, list[WrittenFile]] = {T.OFFSETS_LOG.name: replayed.log_files}
    for table in STATE_TABLES:
        state.write(table, p, result[table.name])
    audit_rows = _write_audit(state, p, result) if task.audit is not None else 0
    if quarantine:
        w = FileWriter(task.warehouse, T.QUARANTINED_RECORDS, p, task.run_id)
        rows = [{**r, "run_id": task.run_id} for r in quarantine]
        w.write(pa.Table.from_pylist(rows, schema=T.QUARANTINED_RECORDS.arrow_schema))
        w.close()
        files[T.QUARANTINED_RECORDS.name] = w.files
    clock.lap("finish")
    summary = PartitionSummary(
        partition=p,
        records=progress.records,
        record_types=tuple((t, c, b, n) for (t, c, b), n in replayed.record_types.items()),
        audit_rows=audit_rows,
        next_offset=progress.next_offset,
        trailing_bytes=progress.trailing_bytes,
        end_position=progress.end_position,
        fetches=progress.fetches,
        quarantined=len(quarantine or ()),
        expiry_changes_at=result["expiry_changes_at"],
        topic_names=dict(engine.topic_names),
        unresolved_topic_ids=tuple(result["unresolved_topic_ids"]),
        seconds=clock.seconds,
    )
    return summary, files


@contextlib.contextmanager
def _worker_errors(p: int):
    """The replay's errors as the WorkerErrors the driver reports (file, partition, offset)."""
    from lib.replay.groups import GroupReplayError

    try:
        yield
    except DecodeError as e:
        raise WorkerError(
            type(e).__name__, e.message, file=e.file, partition=e.partition, offset=e.offset, position=e.position
        ).exception() from None
    except FileNotFoundError as e:
        # a broker's live log dir: the log cleaner deleted a segment it merged into another, or
        # retention one it expired, after the run listed it. Read on, the replay could miss the
        # records it merged elsewhere; a run started now lists the folder as it is
        raise WorkerError(
            "SegmentGone",
            "a listed segment was deleted while the run read the log (the log cleaner or retention on a live "
            "log dir): run again",
            file=e.filename,
            partition=p,
        ).exception() from None
    except GroupReplayError as e:
        raise WorkerError(
            "GroupReplayError",
            "group replay failed as Kafka's loader would: " + str(e),
            partition=getattr(e, "partition", p),
            offset=getattr(e, "offset", None),
        ).exception() from None


def _write_audit(state: TaskState, p: int, result: dict) -> int:
    """The partition's assignment_audit rows: those of generations over are added; the open
    ones replace the partition's open rows (those of groups without a new record stay open, and
    those whose generation is over now move to the rows that are over, as they are)."""
    from lib.assignors.fast_audit import audit_rows_table  # here: the driver loads no numba

    outcome = result["assignment_audit"]
    # (the rows of generations over that the replay made went to the task's file as it made
    # them: the tracker's sink, which replay_partition sets)
    opened = [audit_rows_table([]), *outcome.opened]
    before = state.read(T.ASSIGNMENT_AUDIT, p)
    if before is not None and before.num_rows:
        group = before.column("group_id")
        over = pa.compute.is_in(group, pa.array(sorted(outcome.carried_closed), pa.string()))
        redone = pa.compute.is_in(group, pa.array(sorted(outcome.carried_replaced), pa.string()))
        state.append(T.ASSIGNMENT_AUDIT, before.filter(over))
        opened.insert(0, before.filter(pa.compute.invert(pa.compute.or_(over, redone))))
    state.write(T.ASSIGNMENT_AUDIT, p, pa.concat_tables(opened))
    return outcome.rows


def _count_types(batch: pa.RecordBatch, into: dict[tuple[int, bool, bool], int]) -> None:
    """Records by (record type, -1 when unknown; a control record; not decoded), added to `into`."""
    rtype = batch.column("record_type").fill_null(-1).to_numpy().astype(np.int64)
    control = batch.column("is_control").to_numpy(zero_copy_only=False).astype(np.int64)
    bad = pa.compute.not_equal(batch.column("decode_status"), "ok").to_numpy(zero_copy_only=False).astype(np.int64)
    keys, counts = np.unique((rtype + 1) * 4 + control * 2 + bad, return_counts=True)
    for k, n in zip(keys.tolist(), counts.tolist()):
        key = (k // 4 - 1, bool(k & 2), bool(k & 1))
        into[key] = into.get(key, 0) + n


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


@dataclass
class ReadProgress:
    """What a read of a partition's log has covered so far (read_segments, a live fetch)."""

    records: int = 0
    next_offset: int | None = None  # the offset after the last record read
    trailing_bytes: int = 0  # bytes after the last whole batch of a segment
    end_position: int | None = None  # the byte of the last segment where the read stopped
    fetches: int = 0  # Fetch requests (a live source)


def read_segments(
    p: int,
    start: int,
    segments: Sequence[tuple[str, int]],
    start_position: int | None,
    progress: ReadProgress,
    quarantine,
    consume,
) -> None:
    """The segments (path, base offset) of partition p from offset `start` on.
    `start_position` (the byte position in the first
    segment where the previous run stopped) lets an incremental run start there, as Kafka's
    offset index lets a fetch start near its offset, instead of stepping over every earlier
    batch header: the read costs what the new records cost."""

    from lib.codec.segments import is_zero_padding, read_segment_bytes
    from lib.decode import SegmentDecoder

    for i, (path, base) in enumerate(segments):
        data, shift = None, 0
        pos = start_position if i == 0 else None
        if pos:
            # from the checkpoint's byte on: a slice of the mapped file, or one range read
            tail = read_segment_bytes(path, pos)
            # nothing from pos on: the log ends there (or only a preallocated file's zeros
            # follow), or the file shrank (rewritten) below it
            at_end = storage.getsize(path) == pos if len(tail) == 0 else is_zero_padding(tail, 0, len(tail))
            if at_end or (len(tail) and _batch_starts_at(tail, 0, start)):
                data, shift = memoryview(tail), pos
        if data is None and storage.is_remote(path):
            data = memoryview(read_segment_bytes(path))
        decoder = SegmentDecoder(
            path,
            p,
            start_offset=start,
            quarantine=quarantine,
            data=data,
            source_name=storage.basename(path) if data is not None else None,
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
        size = shift + (len(data) if data is not None else storage.getsize(path))
        progress.records += decoder.records
        progress.trailing_bytes += decoder.trailing_bytes
        progress.end_position = size - decoder.trailing_bytes
        # started past the checkpoint's batch: nothing read there means the log ends at the checkpoint
        nxt = max(base, decoder.next_offset or (start if shift else 0))
        progress.next_offset = nxt if progress.next_offset is None else max(progress.next_offset, nxt)


class LiveTopicRead:
    """The live topic's partition from `start_offset` up to its high watermark as the read
    began (or `end_offset` if lower), fetched chunk by chunk and decoded: iterate for the
    batches; `batch_group_metadata` is the decoder's for the batch just yielded (None when
    the batch was cut at the end). After iteration: `next_offset`, `records` and `fetches` (the
    Fetch requests that read records). One loop for the Spark tasks and the coordinator.
    `fetch_max_bytes`: each Fetch's size limit (default lib.source.live.FETCH_MAX_BYTES); a
    batch larger than it still comes whole (KIP-74), so 1 fetches one batch at a time."""

    def __init__(
        self,
        bootstrap: str,
        partition: int,
        start_offset: int,
        end_offset: int | None = None,
        quarantine: list | None = None,
        fetch_max_bytes: int | None = None,
    ):
        from lib.source.live import FETCH_MAX_BYTES

        self.bootstrap, self.partition = bootstrap, partition
        self.start_offset, self.end_offset = start_offset, end_offset
        self.quarantine = quarantine
        self.fetch_max_bytes = FETCH_MAX_BYTES if fetch_max_bytes is None else int(fetch_max_bytes)
        if self.fetch_max_bytes < 1:
            raise ValueError(f"fetch_max_bytes must be at least 1, not {fetch_max_bytes}")
        self.next_offset = start_offset
        self.records = 0
        self.fetches = 0
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
                chunk = reader.fetch(p, offset, self.fetch_max_bytes)
                self.fetches += 1
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


def _fetch(task: ReplayTask, progress: ReadProgress, quarantine, consume) -> None:
    """The live topic from start_offset to its high watermark as the task began (or
    end_offset if lower)."""
    assert task.bootstrap is not None
    live = LiveTopicRead(
        task.bootstrap,
        task.partition,
        task.start_offset,
        task.end_offset,
        quarantine,
        fetch_max_bytes=task.fetch_max_bytes,
    )
    consume(live)
    progress.records += live.records
    progress.fetches += live.fetches
    progress.next_offset = live.next_offset
