"""The hand-over from the replay to the lag stage: the offset commits that took effect, as the
replay engine found them (lib.replay.engine COMMIT_EVENT_SCHEMA), grouped by topic partition.

The lag of a commit needs its topic partition's end offsets over time; a replay task holds one
offsets partition, whose groups commit on many topic partitions. So each replay task writes its
commits to one Arrow IPC file of the run's lag input (WAREHOUSE/_lag_input/<run id>/), as record
batches that each hold one bucket of topic partitions (BUCKETS of them, by a stable hash), and a
lag task reads, from every file, the batches of its buckets: a shuffle by topic partition whose
memory is one bucket's commits, never the log's. A run's lag input is kept until a lag stage has
consumed it (its lag_checkpoints commit), so a stage that died is redone from it."""

from __future__ import annotations

import json
import uuid
import zlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from lib import storage
from schemas.tables import COMMIT_EVENT_SCHEMA

LAG_INPUT = "_lag_input"
BUCKETS = 1024
FLUSH_ROWS = 1 << 20  # commits held before they are sorted into bucket batches and written
EVENT_SCHEMA = COMMIT_EVENT_SCHEMA.append(pa.field("bucket", pa.int16()))
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
        self._batch_buckets: list[tuple[int, int]] = []  # (bucket, rows) of each batch
        self._partitions: set[tuple[str, int]] = set()

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
        b = buckets(events.column("topic"), events.column("partition"))
        pairs = (
            pa.table({"t": events.column("topic"), "p": events.column("partition")}).group_by(["t", "p"]).aggregate([])
        )
        self._partitions.update(zip(pairs.column("t").to_pylist(), pairs.column("p").to_pylist()))
        order = np.argsort(b, kind="stable")
        b = b[order]
        events = events.take(pa.array(order)).append_column("bucket", pa.array(b))
        cuts = np.flatnonzero(np.diff(b)) + 1
        if self._writer is None:
            storage.makedirs(self.folder)
            self.path = storage.join(self.folder, f"part-{uuid.uuid4().hex}.arrow")
            self._out = storage.OutputFile(self.path)
            self._writer = ipc.new_file(self._out.sink, EVENT_SCHEMA)
        for lo, hi in zip(np.concatenate([[0], cuts]), np.concatenate([cuts, [events.num_rows]])):
            for batch in events.slice(int(lo), int(hi - lo)).cast(EVENT_SCHEMA).to_batches():
                self._writer.write_batch(batch)
                self._batch_buckets.append((int(b[lo]), batch.num_rows))
        self.rows += events.num_rows

    def close(self) -> str | None:
        """The file written (None: no commits), and beside it its index (<file>.index.json: the
        bucket and rows of each batch, and the topic partitions it holds), so a reader reads its
        buckets' batches only, and the driver learns what the file holds without reading it."""
        self._flush()
        if self._writer is not None:
            self._writer.close()
            assert self._out is not None and self.path is not None
            self._out.close()
            index = {"batches": self._batch_buckets, "partitions": sorted(self._partitions)}
            storage.write_bytes(self.path + INDEX_SUFFIX, json.dumps(index).encode())
        return self.path


def read_events(paths: list[str], lo: int, hi: int, watermarks: dict[int, int] | None) -> pa.Table:
    """The commits of buckets lo..hi-1 in the files `paths`, those made effective at or after
    their offsets partition's watermark (all, with no watermarks)."""
    parts: list[pa.Table] = []
    for path in paths:
        wanted = [i for i, (b, _) in enumerate(read_index(path)["batches"]) if lo <= b < hi]
        if not wanted:
            continue
        # a local file is memory-mapped: the batches read stay valid while referenced (the map
        # is released with the last of them)
        reader = ipc.open_file(_open(path))
        parts.extend(pa.Table.from_batches([reader.get_batch(i)]) for i in wanted)
    if not parts:
        return EVENT_SCHEMA.empty_table()
    events = pa.concat_tables(parts).combine_chunks()
    if watermarks:
        marks = np.array([watermarks.get(p, -1) for p in range(max(watermarks) + 1)], np.int64)
        op = events.column("offsets_partition").to_numpy()
        known = op < len(marks)
        mark = np.where(known, marks[np.where(known, op, 0)], -1)
        events = events.filter(pa.array(events.column("applied_offset").to_numpy() >= mark))
    return events


def read_index(path: str) -> dict:
    """A lag input file's index (see EventWriter.close)."""
    return json.loads(storage.read_text(path + INDEX_SUFFIX))


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
