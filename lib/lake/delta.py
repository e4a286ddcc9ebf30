"""Reading and committing the Delta tables without Spark (delta-rs): the pipeline's commits,
the coordinator's warm start, the run summary and crash recovery share this one module.

Delta commits one table at a time, so a run's commit point is its replay_checkpoints commit,
written last. Every commit names its run in its userMetadata (lib.lake.run_tags). A run is
complete when replay_checkpoints has a commit of it; a later run rolls back (RESTORE) any
table whose newest commits belong to a run that never completed, so the latest versions
always hold what the completed runs left."""

from __future__ import annotations

import bisect
import dataclasses
import json
import os
import time
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from lib import storage
from lib.lake.partition_task import PARTITIONS_KEY, row_group_partitions
from lib.lake.run_tags import ROLLBACK_TAG, run_started_ms, tagged_run
from lib.lake.seams import WrittenFile
from schemas.tables import Table


def commit_history(path: str, limit: int | None = None) -> list[tuple[int, str | None]]:
    """(version, userMetadata) of every commit (or the newest `limit`), newest first."""

    history = open_delta(path).history(limit)
    return sorted(((h["version"], h.get("userMetadata")) for h in history), reverse=True)


@dataclass(frozen=True)
class Commit:
    """A table's commit as the roll-back and the readers outside a run judge it."""

    version: int
    run: str | None  # the run its userMetadata names (None: not a run's)
    at_ms: int | None  # its timestamp


def commits(path: str, limit: int | None = None) -> list[Commit]:
    """The table's commits (or the newest `limit`), newest first."""
    history = open_delta(path).history(limit)
    found = [Commit(h["version"], tagged_run(h.get("userMetadata")), h.get("timestamp")) for h in history]
    return sorted(found, key=lambda c: c.version, reverse=True)


def newest_commit(path: str) -> Commit | None:
    """A table's newest commit (None: no table there): its version's log file, as the Delta
    protocol names it (`_delta_log/<version>.json`), read after delta-rs opens the table.
    history(1) lists the whole log first: 9 ms a table at 8,640 commits, and a run asks
    this of each of its 11 tables."""
    table = _open_table(path)
    if table is None:
        return None
    version = table.version()
    text = storage.read_text(storage.join(path, "_delta_log", f"{version:020d}.json"))
    actions = (json.loads(line) for line in text.splitlines() if line.strip())
    info: dict = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
    return Commit(version, tagged_run(info.get("userMetadata")), info.get("timestamp"))


def table_path(warehouse: str, table: Table | str) -> str:
    return storage.join(warehouse, table if isinstance(table, str) else table.name)


def open_delta(path: str, version: int | None = None):
    """delta-rs's table at a local path or an object-store URI (lib.storage's settings)."""
    from deltalake import DeltaTable

    return DeltaTable(path, version=version, storage_options=storage.delta_options(path))


def _open_table(path: str):
    """delta-rs's table at `path`, or None where there is none: told by the open itself
    (is_deltatable first reads the log once more)."""
    from deltalake.exceptions import TableNotFoundError

    if not storage.is_remote(path) and not os.path.isdir(os.path.join(path, "_delta_log")):
        return None
    try:
        return open_delta(path)
    except TableNotFoundError:
        return None


def table_exists(path: str) -> bool:
    from deltalake import DeltaTable

    if not storage.is_remote(path) and not os.path.isdir(os.path.join(path, "_delta_log")):
        return False
    return DeltaTable.is_deltatable(path, storage_options=storage.delta_options(path))


# How far before a run's start its checkpoint commit may be stamped: a run makes its id from
# its start time and stamps its commits later, on the same host's clock, so only a clock stepped
# back (or runs on hosts whose clocks disagree) makes it earlier. An hour covers both.
CLOCK_MARGIN_MS = 3_600_000
# the history pages CompletedRuns reads, newest first (None: the whole log)
HISTORY_PAGES: tuple[int | None, ...] = (16, 256, None)


class CompletedRuns:
    """The runs that reached their commit point (`run in completed`): each commit of the
    checkpoints table names one. Where that table's history no longer starts at version 0,
    also every run that started before the oldest commit kept: Delta's log clean-up (delta-rs,
    at a checkpoint: every 100 commits) removes the commits older than the table's log
    retention (30 days by default). Such a run either completed or was rolled back by a later
    run (each run rolls back the dead ones first, under the lock), so its commit is a table's
    newest only if it completed. Without this, a table no run had changed since (a quiet
    cluster's pending_transactional_offsets, expired_offsets, quarantined_records) was taken
    for a dead run's, once its run's checkpoint commit was cleaned up, and removed.

    A table's commit is judged by `made` (a completed run's, or no run's): also sound is any
    commit stamped before the newest checkpoint commit (CLOCK_MARGIN_MS). Whoever commits to a
    checkpoints table (a run, or jobs.maintenance's OPTIMIZE) holds the warehouse's lock and
    has rolled back what dead runs left before committing anything; the commit's run held the
    lock before that, so it completed or was rolled back. A quiet table's newest commit, weeks
    old, is judged so without reading weeks of history.

    The history is read newest first, a page at a time (`history(limit)`: the newest `limit`
    commits, as delta-rs's DeltaTable.history gives them), and only as far back as a question
    needs: a run's checkpoint commit is newer than its start (CLOCK_MARGIN_MS), so reading stops
    at a commit older than that. The questions a run asks are of its recent predecessors, so
    its cost stays that of a few commits however long the log is (the whole log, at a run every
    5 minutes, is 8,640 commits)."""

    def __init__(self, history: Callable[[int | None], list[dict]]):
        self._history = history
        self._names: set[str] = set()
        self._oldest_ms: int | None = None  # the oldest commit's timestamp read so far
        self._whole = False  # read to the oldest commit kept
        self._horizon_ms: int | None = None  # that commit's timestamp, where older ones are gone
        self._newest_ms: int | None = None  # the newest commit's timestamp
        self._pages = iter(HISTORY_PAGES)
        self._read = False

    def made(self, commit: Commit) -> bool:
        """Whether a table's commit is sound: no run's, a completed run's, or made before the
        newest checkpoint commit (see the class)."""
        if commit.run is None or commit.run in self._names:
            return True
        if not self._read:
            self._read_page()
        if (
            commit.at_ms is not None
            and self._newest_ms is not None
            and commit.at_ms < self._newest_ms - CLOCK_MARGIN_MS
        ):
            return True
        return commit.run in self

    def named(self, run: object) -> bool:
        """Whether a commit kept names the run (exactly: the horizon aside)."""
        if not isinstance(run, str):
            return False
        started = run_started_ms(run)
        while run not in self._names and not self._whole and not self._read_past(started):
            self._read_page()
        return run in self._names

    def __contains__(self, run: object) -> bool:
        if self.named(run):
            return True
        started = run_started_ms(run) if isinstance(run, str) else None
        # (named stopped before the oldest commit kept only at a commit older than the run)
        return self._whole and self._horizon_ms is not None and started is not None and started < self._horizon_ms

    def _read_past(self, started_ms: int | None) -> bool:
        """Whether the commits read reach back before a run started at `started_ms` (None: an
        id without a time, which only the whole history answers)."""
        return started_ms is not None and self._oldest_ms is not None and self._oldest_ms < started_ms - CLOCK_MARGIN_MS

    def _read_page(self) -> None:
        limit = next(self._pages)
        history = self._history(limit)
        self._read = True
        self._names.update(r for h in history if (r := tagged_run(h.get("userMetadata"))) is not None)
        newest = max(history, key=lambda h: h["version"], default=None)
        self._newest_ms = None if newest is None else newest.get("timestamp")
        oldest = min(history, key=lambda h: h["version"], default=None)
        self._oldest_ms = None if oldest is None else oldest.get("timestamp")
        if limit is not None and len(history) >= limit:
            return
        self._whole = True
        if oldest is not None and oldest["version"] != 0 and oldest.get("timestamp") is not None:
            self._horizon_ms = int(oldest["timestamp"])


def completed_runs(checkpoints_path: str) -> CompletedRuns:
    """Runs that reached their commit point (CompletedRuns): from the checkpoints table's history
    (one version of it for every page), read as far as the questions asked of it need."""
    table = _open_table(checkpoints_path)
    return CompletedRuns(table.history if table is not None else lambda limit: [])


def roll_back_incomplete_runs(warehouse: str, tables: Sequence[Table], checkpoints: Table) -> list[dict]:
    """Undo the commits of runs that died before their checkpoint commit: each table whose
    newest commits name such a run goes back (RESTORE, itself a new commit) to the version
    before them, or is removed if such a run created it. Returns what was rolled back."""
    from deltalake import CommitProperties

    completed = completed_runs(table_path(warehouse, checkpoints))
    done = []
    for table in tables:
        if table is checkpoints:
            continue
        path = table_path(warehouse, table)
        # the usual case, a table whose newest commit is sound, needs no more than that commit
        newest = newest_commit(path)
        if newest is None or completed.made(newest):
            continue
        streak: list[tuple[int, str]] = []
        for commit in commits(path):
            if commit.run is None or completed.made(commit):
                break
            streak.append((commit.version, commit.run))
        if not streak:
            continue
        first_version, run = streak[-1]
        if first_version == 0:
            storage.delete_tree(path)
            done.append({"table": table.name, "run": run, "from_version": streak[0][0], "to_version": None})
            continue
        open_delta(path).restore(
            first_version - 1, commit_properties=CommitProperties(custom_metadata={"userMetadata": ROLLBACK_TAG + run})
        )
        done.append({"table": table.name, "run": run, "from_version": streak[0][0], "to_version": first_version - 1})
    return done


# --- commits of files the workers wrote (delta-rs: no Spark job, no copy) ----------------------


def delta_schema(table: Table):
    from deltalake import Schema

    return Schema.from_arrow(table.arrow_schema)


@dataclass(frozen=True)
class DataFile:
    """A data file of a table's latest version, and the offsets partitions its rows may hold:
    its partition value in a table partitioned by offsets_partition, else the min/max of the
    column in its stats (None when unknown, e.g. a file written without them: any partition),
    and the exact set where its row groups' statistics tell it (`with_partitions`)."""

    path: str  # relative to the table, as in the Delta log
    absolute: str
    size: int
    partition_value: int | None
    lo: int | None
    hi: int | None
    partitions: frozenset[int] | None = None

    def may_hold(self, partitions: list[int]) -> bool:
        """Whether the file may hold rows of any of the sorted `partitions`."""
        if self.partitions is not None:
            return any(p in self.partitions for p in partitions)
        if self.lo is None or self.hi is None:
            return bool(partitions)
        i = bisect.bisect_left(partitions, self.lo)
        return i < len(partitions) and partitions[i] <= self.hi

    def holds_only(self, partitions: set[int]) -> bool:
        """Whether every row of the file belongs to one of `partitions`."""
        if self.partitions is not None:
            return self.partitions <= partitions
        if self.lo is None or self.hi is None:
            return False
        return all(p in partitions for p in range(self.lo, self.hi + 1))

    def with_partitions(self) -> DataFile:
        """The file with the exact set of partitions it holds, from its Parquet footer: the
        list a worker writes there (the min/max in the Delta log cannot tell {0, 2} from
        {0, 1, 2}), else row group statistics where each row group holds one partition.
        Unchanged where neither tells (a file OPTIMIZE wrote)."""

        if self.partition_value is not None or self.partitions is not None:
            return self
        meta = storage.read_parquet_metadata(self.absolute)
        named = (meta.metadata or {}).get(PARTITIONS_KEY.encode())
        if named is not None:
            return dataclasses.replace(self, partitions=frozenset(int(p) for p in named.decode().split(",") if p))
        found: set[int] = set()
        for lo, hi in row_group_partitions(meta):
            if lo is None or lo != hi:
                return self
            found.add(lo)
        return dataclasses.replace(self, partitions=frozenset(found))


def table_layout(path: str) -> tuple[str, ...] | None:
    """A table's partition columns (None: no table)."""

    if not table_exists(path):
        return None
    return tuple(open_delta(path).metadata().partition_columns)


def table_files(path: str) -> tuple[tuple[str, ...], list[DataFile]] | None:
    """The partition columns and data files of a table's latest version (None: no table).
    Read from the Delta log with delta-rs: no Spark job."""
    import pyarrow as pa

    if not table_exists(path):
        return None
    dt = open_delta(path)
    partition_columns = tuple(dt.metadata().partition_columns)
    actions = pa.table(dt.get_add_actions(flatten=True))
    names = set(actions.column_names)

    def column(name: str) -> list:
        return actions.column(name).to_pylist() if name in names else [None] * actions.num_rows

    values = column("partition.offsets_partition")
    lows, highs = column("min.offsets_partition"), column("max.offsets_partition")
    files = []
    for rel, size, value, lo, hi in zip(column("path"), column("size_bytes"), values, lows, highs):
        if value is not None:
            lo = hi = int(value)
        files.append(
            DataFile(
                rel,
                storage.join(path, urllib.parse.unquote(rel)),
                int(size),
                None if value is None else int(value),
                lo,
                hi,
            )
        )
    return partition_columns, files


def commit_files(
    path: str,
    table: Table,
    files: Sequence[WrittenFile],
    tag: str,
    remove: Sequence[DataFile] = (),
    partition_by: tuple[str, ...] | None = None,
    overwrite_partitions: list[int] | None = None,
    overwrite_all: bool = False,
) -> bool:
    """The one way a table is written: one commit adding `files` (written by the workers: in
    offsets_partition=P/ folders for a partitioned table, at its root otherwise) and removing
    `remove`. In a table partitioned by offsets_partition, `overwrite_partitions` makes the
    commit a WRITE in mode Overwrite of those partitions (delta-rs removes their files; the
    quality suite recognises a rebuild by it); `overwrite_all`, of the whole table. No commit
    when it would change nothing. `partition_by`: the existing table's partition columns (a new
    table takes the spec's). Returns whether a commit was made."""
    from deltalake import CommitProperties
    from deltalake.transaction import AddAction, RemoveAction, create_table_with_add_actions

    adds = [
        AddAction(
            f.path,
            f.size,
            {"offsets_partition": str(f.partition_value)} if f.partition_value is not None else {},
            f.modification_time,
            True,
            f.stats,
        )
        for f in files
    ]
    props = CommitProperties(custom_metadata={"userMetadata": tag})
    if not table_exists(path):
        storage.makedirs(path)
        create_table_with_add_actions(
            path,
            delta_schema(table),
            adds,
            mode="error",
            partition_by=list(table.partition_by) or None,
            storage_options=storage.delta_options(path),
            commit_properties=props,
        )
        return True
    if not adds and not remove:
        return False
    layout = list(table.partition_by if partition_by is None else partition_by) or None
    if overwrite_all:
        open_delta(path).create_write_transaction(
            adds, mode="overwrite", schema=delta_schema(table), partition_by=layout, commit_properties=props
        )
        return True
    if overwrite_partitions is not None and layout == ["offsets_partition"]:
        added: list[AddAction | RemoveAction] = [*adds]
        open_delta(path).create_write_transaction(
            added,
            mode="overwrite",
            schema=delta_schema(table),
            partition_by=layout,
            partition_filters=[("offsets_partition", "in", [str(p) for p in overwrite_partitions])],
            commit_properties=props,
        )
        return True
    now_ms = int(time.time() * 1000)
    removes = [
        RemoveAction(
            f.path,
            True,
            now_ms,
            f.size,
            {"offsets_partition": str(f.partition_value)} if f.partition_value is not None else None,
        )
        for f in remove
    ]
    open_delta(path).create_write_transaction(
        [*adds, *removes],
        mode="append",
        schema=delta_schema(table),
        partition_by=layout,
        commit_properties=props,
    )
    return True


def read_small_table(path: str):
    """A small table (replay_checkpoints) as Arrow, latest version; None when absent."""
    import pyarrow as pa

    if not table_exists(path):
        return None
    return pa.table(open_delta(path).to_pyarrow_table())


def overwrite_small_table(path: str, table: Table, rows, tag: str) -> None:
    """Replace a small unpartitioned table's content with `rows` (Arrow) in one commit."""
    commit_files(path, table, [_write_small_file(path, table, rows)], tag, overwrite_all=True)


def append_small_table(path: str, table: Table, rows, tag: str) -> None:
    """Add `rows` (Arrow) to a small unpartitioned table in one commit (creating it)."""
    commit_files(path, table, [_write_small_file(path, table, rows)], tag)


def _write_small_file(path: str, table: Table, rows) -> WrittenFile:
    """`rows` as one Parquet file in the table's folder, not yet committed."""
    import uuid

    import pyarrow.parquet as pq

    name = f"part-{uuid.uuid4().hex}.snappy.parquet"
    out = storage.OutputFile(storage.join(path, name))
    pq.write_table(rows.select(table.column_names).cast(table.arrow_schema), out.sink, compression="snappy")
    out.close()
    return WrittenFile(
        name, out.size, rows.num_rows, int(time.time() * 1000), json.dumps({"numRecords": rows.num_rows})
    )


def committed_version(path: str, completed: CompletedRuns) -> int | None:
    """The newest version of a table that no incomplete run wrote (a run that died between its
    table commits, not yet rolled back by the next run): what the completed runs left. None
    when there is no table, or every version is such a run's."""
    newest = newest_commit(path)
    if newest is None:
        return None
    if completed.made(newest):
        return newest.version
    for commit in commits(path):
        if completed.made(commit):
            return commit.version
    return None


def read_committed(path: str, completed: CompletedRuns, partition: int | None = None):
    """A table's rows (of one offsets partition, when given) as Arrow, as the completed runs
    left them (committed_version); None when there is no such version. A reader outside a run
    (the coordinator) never sees a dead run's half."""
    import pyarrow as pa

    version = committed_version(path, completed)
    if version is None:
        return None
    filters = None if partition is None else [("offsets_partition", "=", partition)]
    return pa.table(open_delta(path, version).to_pyarrow_table(filters=filters))
