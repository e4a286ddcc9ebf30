"""What the run summary needs of assignment_audit, kept in each of its files' Parquet footer:
the file's verdict counts and, per group, its latest row's flat fields (with the numbers of
partitions its `unassigned` and `assigned_twice` lists hold). The table is history, a row per
generation: the summary of a run that adds a few rows read every row's keys before (0.3-0.4 s
of a 1% incremental run on make bench's log, growing with the generations); now it reads a
footer per file. A file is never changed once written, so its digest stays true; a file
without one (written by OPTIMIZE, by write_deltalake, by an older version) is digested from
its rows, by the same function."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lib import storage
from schemas import tables as T

DIGEST_KEY = "offsets_lake.assignment_digest"
# groups a file's digest holds at most (about 150 bytes each in the footer): a file of more, a
# cluster of many groups in a few partitions, gets none, and the summary reads its rows, so no
# footer grows past some 1.5 MB for every reader of the file (Spark's too) to parse
DIGEST_MAX_GROUPS = 10_000
# the latest row's fields as the summary shows them, in its order
FLAT_COLUMNS = ("group_id", "log_offset", "generation", "assignor", "member_count", "imbalance", "moved", "verdict")
COUNTED_COLUMNS = ("unassigned", "assigned_twice")  # -> unassigned_n, twice
READ_COLUMNS = FLAT_COLUMNS + COUNTED_COLUMNS
LATEST_SCHEMA = pa.schema(
    [T.ASSIGNMENT_AUDIT.arrow_schema.field(c) for c in FLAT_COLUMNS]
    + [pa.field("unassigned_n", pa.int64(), False), pa.field("twice", pa.int64(), False)]
)


@dataclass
class AuditDigest:
    """Verdict counts of a set of rows, and each group's latest row among them (LATEST_SCHEMA)."""

    verdicts: dict[str, int] = field(default_factory=dict)
    latest: pa.Table = field(default_factory=LATEST_SCHEMA.empty_table)

    @classmethod
    def of_rows(cls, rows: pa.Table | pa.RecordBatch) -> AuditDigest:
        """The digest of assignment_audit rows (READ_COLUMNS at least)."""
        if isinstance(rows, pa.RecordBatch):
            rows = pa.Table.from_batches([rows])
        counts = pc.value_counts(rows.column("verdict").combine_chunks().cast(pa.string()))
        verdicts = dict(zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist()))
        last = _latest_rows(rows)
        picked = rows.select(list(READ_COLUMNS)).take(pa.array(last, pa.int64()))
        return cls(verdicts, _counted(picked))

    def add(self, other: AuditDigest) -> None:
        for verdict, n in other.verdicts.items():
            self.verdicts[verdict] = self.verdicts.get(verdict, 0) + n
        both = pa.concat_tables([self.latest, other.latest])
        self.latest = both.take(pa.array(_latest_rows(both), pa.int64()))

    def to_json(self) -> str:
        return json.dumps({"verdicts": self.verdicts, "latest": self.latest.to_pydict()}, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> AuditDigest:
        d = json.loads(text)
        return cls(dict(d["verdicts"]), pa.Table.from_pydict(d["latest"], schema=LATEST_SCHEMA))


def _latest_rows(rows: pa.Table) -> np.ndarray:
    """Row numbers of each group's row of the largest log offset (of equals, the last)."""
    if rows.num_rows == 0:
        return np.zeros(0, np.int64)
    group = rows.column("group_id").combine_chunks()
    codes = (group if pa.types.is_dictionary(group.type) else pc.dictionary_encode(group)).indices
    codes = codes.to_numpy(zero_copy_only=False)
    order = np.lexsort((rows.column("log_offset").to_numpy(), codes))
    return order[np.flatnonzero(np.append(codes[order][1:] != codes[order][:-1], True))]


def _counted(picked: pa.Table) -> pa.Table:
    """The rows' flat fields, their two partition lists replaced by their sizes."""
    flat = picked.select(list(FLAT_COLUMNS)).cast(pa.schema(LATEST_SCHEMA.field(c) for c in FLAT_COLUMNS))
    return flat.append_column(
        LATEST_SCHEMA.field("unassigned_n"), pa.array(partitions_in(picked["unassigned"]))
    ).append_column(LATEST_SCHEMA.field("twice"), pa.array(partitions_in(picked["assigned_twice"])))


def partitions_in(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Per row, how many partitions a topic-partitions list column holds (vectorised)."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    out = np.zeros(len(arr), np.int64)
    entries = pc.list_flatten(arr)
    parts = pc.list_value_length(pc.struct_field(entries, "partitions")).fill_null(0).to_numpy(zero_copy_only=False)
    np.add.at(out, pc.list_parent_indices(arr).to_numpy(), parts)
    return out


def file_digest(uri: str) -> AuditDigest:
    """A file's digest: from its footer, else from its rows."""
    f = storage.open_parquet(uri)
    stored = (f.metadata.metadata or {}).get(DIGEST_KEY.encode())
    if stored is not None:
        return AuditDigest.from_json(stored)
    return AuditDigest.of_rows(f.read(columns=list(READ_COLUMNS), use_threads=False))
