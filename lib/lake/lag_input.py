"""The hand-over from the replay to the lag stage: the offset commits that took effect, as the
replay engine found them (lib.replay.engine COMMIT_EVENT_SCHEMA), grouped by topic partition.

The lag of a commit needs its topic partition's end offsets over time; a replay task holds one
offsets partition, whose groups commit on many topic partitions. So each replay task writes its
commits to one Arrow IPC file of the run's lag input (WAREHOUSE/_lag_input/<run id>/), in buckets
of topic partitions (BUCKETS of them, by a stable hash): record batches of whole buckets' rows,
in bucket order, which its index places. A lag task reads, from every file, the batches holding
its buckets and slices their rows out: a shuffle by topic partition whose memory is its buckets'
commits (and, at the ends of its range of buckets, two batches' more a flush), never the log's. A run's lag input is kept until a lag stage has
consumed it (its lag_checkpoints commit), so a stage that died is redone from it.

The batches hold numbers only (EVENT_SCHEMA): group ids and topics are codes into the file's
own tables of names, kept in its index. Sorting, reading and taking fixed-width rows cost a
fraction of what the strings did, and the lag stage writes its rows' names as dictionaries (a
busy run hands over tens of millions of commits, a few thousand distinct names)."""

from __future__ import annotations

import json
import uuid
import zlib
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from lib import storage
from schemas.tables import COMMIT_EVENT_SCHEMA

LAG_INPUT = "_lag_input"
BUCKETS = 1024
FLUSH_ROWS = 1 << 20  # commits held before they are sorted into bucket batches and written
# rows of a batch of the file, about (whole buckets': a reader reads the batches holding its
# buckets, so its memory is its buckets' commits and, for each flush, two batches' more at most)
BATCH_ROWS = 1 << 16
# COMMIT_EVENT_SCHEMA with the group id and the topic as codes into the file's names
EVENT_SCHEMA = pa.schema(
    [
        pa.field("group", pa.int32()),
        pa.field("topic", pa.int32()),
        *(COMMIT_EVENT_SCHEMA.field(name) for name in COMMIT_EVENT_SCHEMA.names if name not in ("group_id", "topic")),
        pa.field("bucket", pa.int16()),
    ]
)
INDEX_SUFFIX = ".index.json"


def topic_hash(topic: str) -> int:
    return zlib.crc32(topic.encode())


def bucket_of(topic: str, partition: int) -> int:
    """The bucket of a topic partition: stable across processes and versions of Python."""
    return (topic_hash(topic) + 31 * partition) % BUCKETS


def buckets(topic: pa.ChunkedArray | pa.Array, partition: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """bucket_of for columns (a hash per distinct topic)."""
    codes = (
        pc.dictionary_encode(topic).combine_chunks()
        if isinstance(topic, pa.ChunkedArray)
        else pc.dictionary_encode(topic)
    )
    hashes = np.array([topic_hash(t) for t in codes.dictionary.to_pylist()], np.int64)
    parts = (partition.combine_chunks() if isinstance(partition, pa.ChunkedArray) else partition).to_numpy()
    return ((hashes[codes.indices.to_numpy()] + 31 * parts.astype(np.int64)) % BUCKETS).astype(np.int16)


def run_dir(warehouse: str, run_id: str) -> str:
    return storage.join(warehouse, LAG_INPUT, run_id)


class NameTable:
    """Strings -> dense codes, in order of first appearance."""

    def __init__(self, names: list[str] | None = None):
        self.names: list[str] = list(names or [])
        self.codes: dict[str, int] = {n: i for i, n in enumerate(self.names)}

    def encode(self, column: pa.ChunkedArray | pa.Array) -> np.ndarray:
        """The codes of a string column (no nulls), the distinct strings hashed once by Arrow."""
        encoded = pc.dictionary_encode(column)
        if isinstance(encoded, pa.ChunkedArray):
            encoded = encoded.combine_chunks() if encoded.num_chunks != 1 else encoded.chunk(0)
        mapping = np.array([self.code(n) for n in encoded.dictionary.to_pylist()] or [0], np.int32)
        return mapping[encoded.indices.to_numpy(zero_copy_only=False)] if len(encoded) else np.zeros(0, np.int32)

    def code(self, name: str) -> int:
        c = self.codes.get(name)
        if c is None:
            c = self.codes[name] = len(self.names)
            self.names.append(name)
        return c


class EventWriter:
    """A replay task's commits into one IPC file of the run's lag input."""

    def __init__(self, warehouse: str, run_id: str):
        self.folder = run_dir(warehouse, run_id)
        self.path: str | None = None
        self.rows = 0
        self._held: list[pa.Table] = []
        self._held_rows = 0
        self._out: storage.OutputFile | None = None
        self._writer: ipc.RecordBatchFileWriter | None = None
        self._runs: list[tuple[int, int, int]] = []  # (batch, bucket, rows) of each bucket's rows
        self._batches = 0
        self._groups, self._topics = NameTable(), NameTable()
        self._topic_hashes: list[int] = []  # by topic code
        self._partitions: set[int] = set()  # topic code << 32 | partition + 2**31

    def write(self, events: pa.Table | None) -> None:
        if events is None or events.num_rows == 0:
            return
        self._held.append(events)
        self._held_rows += events.num_rows
        if self._held_rows >= FLUSH_ROWS:
            self._flush()

    def _flush(self) -> None:
        if not self._held:
            return
        events = pa.concat_tables(self._held)
        self._held, self._held_rows = [], 0
        group = self._groups.encode(events.column("group_id"))
        topic = self._topics.encode(events.column("topic"))
        for name in self._topics.names[len(self._topic_hashes) :]:
            self._topic_hashes.append(topic_hash(name))
        partition = _numbers(events.column("partition"), np.int32)
        b = ((np.array(self._topic_hashes, np.int64)[topic] + 31 * partition.astype(np.int64)) % BUCKETS).astype(
            np.int16
        )
        self._partitions.update(_distinct_pairs(topic, partition).tolist())
        order = np.argsort(b, kind="stable")
        b = b[order]
        columns = {
            "group": group[order],
            "topic": topic[order],
            "partition": partition[order],
            **{
                name: _numbers(events.column(name), np.int64 if name != "offsets_partition" else np.int32)[order]
                for name in ("committed_offset", "offsets_partition", "log_offset", "applied_offset")
            },
        }
        applied = events.column("applied_at").combine_chunks()
        at = applied.cast(pa.int64()).fill_null(0).to_numpy()[order]
        valid = applied.is_valid().to_numpy(zero_copy_only=False)[order] if applied.null_count else None
        cuts = np.flatnonzero(np.diff(b)) + 1
        if self._writer is None:
            storage.makedirs(self.folder)
            self.path = storage.join(self.folder, f"part-{uuid.uuid4().hex}.arrow")
            self._out = storage.OutputFile(self.path)
            self._writer = ipc.new_file(self._out.sink, EVENT_SCHEMA)
        arrays = [pa.array(columns[f.name], f.type) for f in EVENT_SCHEMA if f.name in columns]
        arrays.append(pa.array(at, EVENT_SCHEMA.field("applied_at").type, mask=None if valid is None else ~valid))
        arrays.append(pa.array(b, pa.int16()))
        # the flush's rows in bucket order, written as batches of whole buckets' rows of about
        # BATCH_ROWS (a batch a bucket was a fifth of the flush's time, in IPC framing); the
        # index says which batch holds each bucket's rows, and a reader slices them out of it
        whole = pa.RecordBatch.from_arrays(arrays, schema=EVENT_SCHEMA)
        first = 0
        for lo, hi in zip(np.concatenate([[0], cuts]).tolist(), np.concatenate([cuts, [len(b)]]).tolist()):
            self._runs.append((self._batches, int(b[lo]), hi - lo))
            if hi - first >= BATCH_ROWS or hi == len(b):
                self._writer.write_batch(whole.slice(first, hi - first))
                self._batches += 1
                first = hi
        self.rows += len(b)

    def close(self) -> str | None:
        """The file written (None: no commits), and beside it its index (<file>.index.json: the
        bucket and rows of each bucket's run of rows and the batch holding it, the topic
        partitions it holds, and its tables of group ids and topics), so a reader reads its
        buckets' rows only, and the driver learns what the file holds without reading it."""
        self._flush()
        if self._writer is not None:
            self._writer.close()
            assert self._out is not None and self.path is not None
            self._out.close()
            pairs = sorted(self._partitions)
            index = {
                "bucket": [b for _, b, _ in self._runs],
                "rows": [n for _, _, n in self._runs],
                "batch": [i for i, _, _ in self._runs],
                # the topic partitions it holds: topic codes and partitions
                "partition_topic": [k >> 32 for k in pairs],
                "partition": [(k & 0xFFFFFFFF) - (1 << 31) for k in pairs],
                "groups": self._groups.names,
                "topics": self._topics.names,
            }
            storage.write_bytes(self.path + INDEX_SUFFIX, json.dumps(index).encode())
        return self.path


def pair_cells(codes: np.ndarray, partition: np.ndarray) -> tuple[np.ndarray, int, int, int] | None:
    """Each (code, partition) pair's cell in a table of codes by partitions, and the table's
    partition span, lowest partition and size: (cells, span, low, size). None where the table
    would be larger than the pairs plus 65,536 cells (partition numbers spread wide), or a code
    is negative: there, sort. A run's commits name a few thousand topic partitions, and the
    table finds them and orders them without sorting millions of keys."""
    if not len(codes) or int(codes.min()) < 0:
        return None
    low = int(partition.min())
    span = int(partition.max()) - low + 1
    size = (int(codes.max()) + 1) * span
    if size > len(codes) + (1 << 16):
        return None
    return codes.astype(np.int64) * span + (partition.astype(np.int64) - low), span, low, size


def _distinct_pairs(topic: np.ndarray, partition: np.ndarray) -> np.ndarray:
    """The distinct (topic code, partition) pairs as topic << 32 | partition + 2**31, ascending:
    np.unique's answer, by pair_cells where it can (the sort was a fifth of a flush)."""
    table = pair_cells(topic, partition)
    if table is None:
        return np.unique(topic.astype(np.int64) << 32 | (partition.astype(np.int64) + (1 << 31)))
    cells, span, low, size = table
    seen = np.zeros(size, np.bool_)
    seen[cells] = True
    at = np.flatnonzero(seen)
    return (at // span) << 32 | (at % span + low + (1 << 31))


def _numbers(column: pa.ChunkedArray | pa.Array, dtype) -> np.ndarray:
    """A column of numbers without nulls as numpy."""
    if column.null_count:
        raise ValueError("a commit event without a number where one is required")
    if isinstance(column, pa.ChunkedArray):
        if column.num_chunks == 0:
            return np.zeros(0, dtype)
        return np.concatenate([c.to_numpy(zero_copy_only=False) for c in column.chunks]).astype(dtype, copy=False)
    return column.to_numpy(zero_copy_only=False).astype(dtype, copy=False)


@dataclass
class Events:
    """Commits read back from lag input files: EVENT_SCHEMA rows whose `group` and `topic` are
    codes into `groups` and `topics` (one table of names for every file read)."""

    table: pa.Table
    groups: list[str]
    topics: list[str]


def read_events(paths: list[str], lo: int, hi: int, watermarks: dict[int, int] | None) -> Events:
    """The commits of buckets lo..hi-1 in the files `paths`, those made effective at or after
    their offsets partition's watermark (all, with no watermarks)."""
    parts: list[pa.Table] = []
    groups, topics = NameTable(), NameTable()
    for path in paths:
        index = read_index(path)
        wanted = np.flatnonzero((index.bucket >= lo) & (index.bucket < hi)).tolist()
        if not wanted:
            continue
        # a local file is memory-mapped: the batches read stay valid while referenced (the map
        # is released with the last of them)
        reader = ipc.open_file(_open(path))
        # each run's rows: a slice of its batch, from the rows of the runs before it there
        starts = np.cumsum(index.rows) - index.rows
        first = np.searchsorted(index.batch, index.batch, "left")
        at = starts - starts[first]
        held: dict[int, pa.RecordBatch] = {}
        slices = []
        for i in wanted:
            k = int(index.batch[i])
            if k not in held:
                held[k] = reader.get_batch(k)
            slices.append(held[k].slice(int(at[i]), int(index.rows[i])))
        table = pa.Table.from_batches(slices, schema=reader.schema)
        if index.groups is not None:  # codes into the file's names: into the shared ones
            g = np.array([groups.code(n) for n in index.groups] or [0], np.int32)
            t = np.array([topics.code(n) for n in index.topics or ()] or [0], np.int32)
            table = table.set_column(0, "group", pa.array(g[_numbers(table.column("group"), np.int64)], pa.int32()))
            table = table.set_column(1, "topic", pa.array(t[_numbers(table.column("topic"), np.int64)], pa.int32()))
        else:  # an earlier version's file: the names themselves
            table = table.drop_columns(["bucket"])
            group = pa.array(groups.encode(table.column("group_id")), pa.int32())
            topic = pa.array(topics.encode(table.column("topic")), pa.int32())
            table = table.drop_columns(["group_id", "topic"])
            table = table.add_column(0, "group", group).add_column(1, "topic", topic)
            table = table.append_column("bucket", pa.nulls(table.num_rows, pa.int16()))
        parts.append(table.cast(EVENT_SCHEMA))
    if not parts:
        return Events(pa.Table.from_batches([], schema=EVENT_SCHEMA), [], [])
    events = pa.concat_tables(parts)
    if watermarks:
        marks = np.array([watermarks.get(p, -1) for p in range(max(watermarks) + 1)], np.int64)
        op = _numbers(events.column("offsets_partition"), np.int64)
        known = op < len(marks)
        mark = np.where(known, marks[np.where(known, op, 0)], -1)
        keep = _numbers(events.column("applied_offset"), np.int64) >= mark
        if not keep.all():
            events = events.filter(pa.array(keep))
    return Events(events, groups.names, topics.names)


@dataclass
class LagInputIndex:
    """A lag input file's index (see EventWriter.close): each run of one bucket's rows, its
    bucket, rows and batch (ascending; in an earlier version's file a batch a run), the topic
    partitions the file holds, and its tables of names (None in an earlier version's file,
    whose batches hold the names themselves)."""

    bucket: np.ndarray
    rows: np.ndarray
    batch: np.ndarray
    partitions: list[tuple[str, int]]
    groups: list[str] | None
    topics: list[str] | None


def read_index(path: str) -> LagInputIndex:
    index = json.loads(storage.read_text(path + INDEX_SUFFIX))
    if "batches" in index:  # an earlier version's: [[bucket, rows], ...] and [[topic, partition], ...]
        batches = np.array(index["batches"], np.int64).reshape(-1, 2)
        return LagInputIndex(
            batches[:, 0],
            batches[:, 1],
            np.arange(len(batches)),
            [(t, int(p)) for t, p in index["partitions"]],
            None,
            None,
        )
    topics = index["topics"]
    bucket = np.array(index["bucket"], np.int64)
    return LagInputIndex(
        bucket,
        np.array(index["rows"], np.int64),
        np.array(index["batch"], np.int64) if "batch" in index else np.arange(len(bucket)),
        [(topics[t], p) for t, p in zip(index["partition_topic"], index["partition"])],
        index["groups"],
        topics,
    )


def _open(path: str):
    if storage.is_remote(path):
        fs, key = storage.filesystem(path)
        return fs.open_input_file(key)  # batches are read into memory (range reads)
    return pa.memory_map(path)


def runs_with_input(warehouse: str) -> dict[str, list[str]]:
    """The runs with lag input in the warehouse: run id -> its files."""
    root = storage.join(warehouse, LAG_INPUT)
    if not storage.exists(root):
        return {}
    return {
        d.name: [f.path for f in storage.list_dir(d.path) if f.name.endswith(".arrow")]
        for d in storage.list_dir(root)
        if d.is_dir
    }


MANIFEST = "manifest.json"


def write_manifest(warehouse: str, run_id: str, files: list[str]) -> None:
    """The run's lag input files, as its replay's tasks returned them (a file a failed attempt
    of a task left is not in it), written before the replay's commit point."""
    storage.write_bytes(storage.join(run_dir(warehouse, run_id), MANIFEST), json.dumps(sorted(files)).encode())


def manifest_files(warehouse: str, run_id: str) -> list[str]:
    path = storage.join(run_dir(warehouse, run_id), MANIFEST)
    if not storage.exists(path):
        return []
    return json.loads(storage.read_text(path))


def remove_lag_input(warehouse: str) -> None:
    """Every run's lag input: once a lag stage committed, it has consumed all of it (and what a
    replay that died left was never to be read)."""
    storage.delete_tree(storage.join(warehouse, LAG_INPUT))
