"""The replay run: one Spark task per offsets partition, then one commit per table.

Each task (lib.lake.partition_task) reads its partition once, in log order, from its checkpoint:
decode, replay, group fold and expiry in one pass; it writes its rows as Parquet files into
the tables' folders, invisible until committed. Everything that can fail on bad input fails
there, before any commit, so bad input leaves every table as it was. The driver then commits
the files table by table (delta-rs, no copy), each commit naming the run and its checkpoint,
and the replay_checkpoints commit last: that commit is the run's commit point. A run that dies
between table commits is rolled back by the next run (lib.lake.delta.roll_back_incomplete_runs),
which then redoes the work. One run at a time writes a warehouse (lib.lake.lock)."""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from lib import storage
from lib.lake.crash_points import crash_point
from lib.lake.delta import (
    DataFile,
    commit_files,
    overwrite_small_table,
    read_small_table,
    roll_back_incomplete_runs,
    table_files,
    table_layout,
    table_path,
)
from lib.lake.lag_input import write_manifest
from lib.lake.lock import WarehouseBusyError, WarehouseLock  # noqa: F401 - re-exported for jobs
from lib.lake.run_tags import RUN_ID_TIME, rebuilt_tag, run_tag
from lib.lake.seams import AuditInput, ReplayTask, StateFile, TaskGroup, TaskResult
from lib.lake.tasks import replay_task
from lib.lake.worker_errors import ReplayError as ReplayError
from lib.lake.worker_errors import raising_worker_errors
from lib.replay.expiry import DEFAULT_RETENTION_MINUTES
from lib.source.logdir import PartitionLog, segments_from
from lib.source.topic_log import TopicPartitionLog
from lib.spark.lag import LagPreparation, LagResult, prepare_lag_stage
from lib.spark.session import SparkJobs
from schemas import tables as T

if TYPE_CHECKING:  # (the default command's driver imports no pyspark: 0.1 s a run)
    from pyspark.sql import SparkSession


@dataclass
class RunResult:
    run_id: str
    partitions: list[int]
    now_ms: int
    retention_minutes: int
    stage_seconds: dict = field(default_factory=dict)
    records: int = 0
    incremental: bool = False
    rolled_back: list = field(default_factory=list)
    on_corrupt: str = "fail"
    quarantined: int = 0
    # this run's records by (record type, -1 when unknown; a control record; not decoded)
    record_types: dict[tuple[int, bool, bool], int] = field(default_factory=dict)
    fetches: int = 0  # Fetch requests that read a live topic's records
    took_over_lock: dict | None = None
    skipped_partitions: int = 0
    lag: LagResult | None = None  # the lag stage's, None when it did not run
    audit_rows: int | None = None  # assignment_audit rows the run wrote (None: not audited)


@dataclass
class PreviousRun:
    """Where the last completed runs left each partition (from replay_checkpoints)."""

    next_offsets: dict[int, int]
    runs: dict[str, list[int]]  # run id -> partitions whose checkpoint it wrote
    rows: dict[int, dict] = field(default_factory=dict)  # partition -> its checkpoint row


def previous_run(spark: SparkSession | SparkJobs | None, warehouse: str, partitions: list[int]) -> PreviousRun | None:
    """Read with delta-rs: a small table, and no Spark job for a run that may have nothing to do."""
    table = read_small_table(table_path(warehouse, T.REPLAY_CHECKPOINTS))
    if table is None:
        return None
    wanted = set(partitions)
    rows = [r for r in table.to_pylist() if r["offsets_partition"] in wanted]
    if not rows:
        return None
    runs: dict[str, list[int]] = {}
    for r in rows:
        runs.setdefault(r["run_id"], []).append(r["offsets_partition"])
    return PreviousRun(
        {r["offsets_partition"]: r["next_log_offset"] for r in rows}, runs, {r["offsets_partition"]: r for r in rows}
    )


def new_run_id() -> str:
    return dt.datetime.now(dt.UTC).strftime(RUN_ID_TIME) + "-" + uuid.uuid4().hex[:8]


def run_replay(
    spark: SparkSession | SparkJobs,
    logs: list[PartitionLog],
    warehouse: str,
    now_ms: int,
    retention_minutes: int = DEFAULT_RETENTION_MINUTES,
    full: bool = False,
    end_offsets: dict[int, int] | None = None,
    lock_wait_seconds: float = 0.0,
    on_corrupt: str = "fail",
    lag: bool = True,
    assignments: bool = True,
    fetch_max_bytes: int | None = None,
    topic_listing: Future | None = None,
    replayed: Callable[[RunResult], None] | None = None,
) -> RunResult:
    """Replay `logs` into the tables. Incremental unless `full` or a partition has no
    checkpoint yet: only records at or after each partition's checkpoint are read, and their
    effect is applied on top of the state the last completed run left. `end_offsets` bounds
    what is read from a live topic (partition -> first offset not to read). `on_corrupt`:
    "fail" stops at the first undecodable batch or record, changing nothing; "quarantine"
    keeps each in quarantined_records (with its bytes) and goes on. `lag`: then run the lag
    stage (lib.spark.lag) on the consumed topics of the log dir or of the live cluster (without
    it, the commits replayed wait in the lag input for the next run's stage).
    `assignments`: audit the group assignments in the same pass (lib.replay.assignment; a run
    without it leaves the generations of the records it replays unaudited).
    `fetch_max_bytes`: the size limit of each Fetch of a live topic (default
    lib.source.live.FETCH_MAX_BYTES). `topic_listing`: the consumed topics' partitions of
    `logs` being listed already (list_topic_logs). `replayed`: called with the result once the
    replay's tables are committed, before the lag stage (which changes none of them). Raises
    WarehouseBusyError if another live run writes the warehouse."""
    if on_corrupt not in ("fail", "quarantine"):
        raise ValueError(f"on_corrupt must be fail or quarantine, not {on_corrupt!r}")
    run_id = new_run_id()
    storage.makedirs(warehouse)
    with WarehouseLock(warehouse, f"replay run {run_id}", lock_wait_seconds) as lock:
        result = RunResult(run_id, [pl.partition for pl in logs], now_ms, retention_minutes, on_corrupt=on_corrupt)
        result.took_over_lock = lock.took_over
        result.rolled_back = roll_back_incomplete(warehouse)
        prev = None if full else previous_run(spark, warehouse, result.partitions)
        todo = _changed(logs, prev, now_ms, retention_minutes)
        starting = start_workers(spark) if todo else None
        # the files this run replaces, listed while the consumed topics' listing ends
        t0 = time.monotonic()
        replacing = _replacing(warehouse, todo, prev, assignments)
        result.stage_seconds["plan"] = time.monotonic() - t0
        # the audit's partition counts of the tables, read while the listing below ends (the
        # replay's tasks wait for both)
        known = None
        if assignments and todo:
            from lib.spark.assignment import known_from_tables

            known = known_from_tables(warehouse)
        # the consumed topics' partitions beside the offsets partitions, listed once a run (7,500
        # folders of a busy log dir take a second); None for a live cluster
        topic_logs = topic_listing.result() if topic_listing is not None else _topic_logs(logs)
        # the commits that take effect go to the lag stage (lib.lake.lag_input), this run's or,
        # when it is skipped, the next one's
        lag_input = bool(logs) and (topic_logs is None or bool(topic_logs))
        # the lag stage's reads that the replay changes nothing of, while the replay's tasks run
        preparing = _LagPreparing(warehouse, full, topic_logs) if lag and topic_logs else None
        _run_locked(
            spark,
            logs,
            warehouse,
            result,
            prev,
            todo,
            replacing,
            end_offsets,
            fetch_max_bytes,
            lag_input,
            assignments,
            topic_logs,
            starting,
            preparing,
            known,
        )
        if replayed is not None:
            replayed(result)
        if lag and logs:
            result.lag = _run_lag_locked(spark, logs, warehouse, result, full, topic_logs, preparing)
        return result


def roll_back_incomplete(warehouse: str) -> list[dict]:
    """Undo what runs that died left without their commit points: the replay's tables (commit
    point replay_checkpoints) and the lag stage's (lag_checkpoints)."""
    return roll_back_incomplete_runs(warehouse, T.REPLAY_TABLES, T.REPLAY_CHECKPOINTS) + (
        roll_back_incomplete_runs(warehouse, T.LAG_TABLES, T.LAG_CHECKPOINTS)
    )


def start_workers(spark: SparkSession | SparkJobs) -> threading.Thread:
    """Start the Python workers (a task each that only imports the replay's modules) while the
    driver plans, for a run that will replay something: their start, the daemon's fork and
    pyspark's and lib's imports, was a third of a second of an incremental run's replay job
    (make bench's 1% run: its job 1.8 s without, 1.5 s with). The planning holds one core, the
    workers use the others; a run with nothing to replay starts none. The replay's job waits for
    this one (join the thread): never behind it, nor outlived by it. A worker that cannot start
    fails the replay's own job, which says why."""
    from lib.lake.tasks import start_task

    n = max(1, spark.sparkContext.defaultParallelism)

    def run() -> None:
        try:
            spark.sparkContext.parallelize(range(n), n).map(start_task).collect()
        except Exception as e:  # the replay's own job fails with the reason; this one only warns
            logging.getLogger(__name__).warning(
                "the replay's workers did not start ahead of it: %s", str(e).splitlines()[0] if str(e) else e
            )

    thread = threading.Thread(target=run, name="start-workers", daemon=True)
    thread.start()
    return thread


def _changed(
    logs: list[PartitionLog], prev: PreviousRun | None, now_ms: int, retention_minutes: int
) -> list[PartitionLog]:
    """The partitions with anything to replay (all of them without a previous run)."""
    return [
        pl for pl in logs if prev is None or not _unchanged(pl, prev.rows.get(pl.partition), now_ms, retention_minutes)
    ]


def _topic_logs(logs: list[PartitionLog]) -> list[TopicPartitionLog] | None:
    """The topic partition folders beside the offsets partitions of a log dir (None: a live
    cluster, or no input)."""
    from lib.source.topic_log import find_topic_partitions

    if not logs or logs[0].bootstrap is not None:
        return None
    return find_topic_partitions(storage.dirname(logs[0].path))


def replay_bytes(
    logs: list[PartitionLog], warehouse: str, now_ms: int, retention_minutes: int, full: bool = False
) -> int | None:
    """The bytes of segments run_replay would read, as seen now (None: it would replay no
    partition of `logs`): a peek before the JVM starts, without the lock (run_replay decides
    again under it). A partition re-judged for expiry with nothing new reads 0 bytes."""
    if not logs:
        return None
    try:
        prev = None if full else previous_run(None, warehouse, [pl.partition for pl in logs])
    except Exception:  # (the run itself reads it again, and says what is wrong)
        return None
    changed = _changed(logs, prev, now_ms, retention_minutes)
    if not changed:
        return None
    starts = prev.next_offsets if prev is not None else {}
    return sum(_segments_to_read(pl, starts.get(pl.partition, 0), prev)[0] for pl in changed)


def list_topic_logs(logs: list[PartitionLog]) -> Future:
    """_topic_logs(logs) in a thread of its own, for run_replay's `topic_listing`: a job starts
    it before its JVM, which starts on one core of two for two seconds or more, and a busy log
    dir's 7,500 topic folders take a second to list (in system calls mostly, out of the GIL)."""
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="topic-listing")
    try:
        return executor.submit(_topic_logs, logs)
    finally:
        executor.shutdown(wait=False)


class _LagPreparing:
    """lib.spark.lag.prepare_lag_stage, in a thread of its own once the replay's tasks are
    handed out (start: the driver only waits for them then; before, it would slow the driver's
    planning), else in the caller's when the stage asks for it (result: its value or its error)."""

    def __init__(self, warehouse: str, full: bool, topic_logs: list[TopicPartitionLog]):
        self._args = (warehouse, full, topic_logs)
        self._future: Future | None = None

    def start(self) -> None:
        if self._future is None:
            executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lag-preparation")
            try:
                self._future = executor.submit(prepare_lag_stage, *self._args)
            finally:
                executor.shutdown(wait=False)

    def result(self) -> LagPreparation:
        return self._future.result() if self._future is not None else prepare_lag_stage(*self._args)


def _run_lag_locked(
    spark: SparkSession | SparkJobs,
    logs,
    warehouse: str,
    result: RunResult,
    full: bool,
    topic_logs: list | None = None,
    preparing: _LagPreparing | None = None,
):
    from lib.spark.lag import run_lag_stage, run_live_lag_stage

    crash_point("lag_start")
    try:
        bootstrap = logs[0].bootstrap
        if bootstrap is not None:  # a live cluster: ListOffsets samples
            lag = run_live_lag_stage(spark, bootstrap, warehouse, result.run_id, result.now_ms, full)
        else:
            lag = run_lag_stage(
                spark,
                storage.dirname(logs[0].path),
                warehouse,
                result.run_id,
                result.now_ms,
                full,
                topic_logs=topic_logs,
                prepared=preparing.result() if preparing is not None else None,
            )
    except BaseException:
        roll_back_incomplete_runs(warehouse, T.LAG_TABLES, T.LAG_CHECKPOINTS)
        raise
    result.stage_seconds.update(lag.stage_seconds)
    return lag


def _unchanged(log: PartitionLog, row: dict | None, now_ms: int, retention_minutes: int) -> bool:
    """A partition whose input and expiry judgement cannot have changed since its checkpoint."""
    if row is None or row.get("source_signature") is None:
        return False
    if row["source_signature"] != log.signature or row.get("retention_minutes") != retention_minutes:
        return False
    judged = row.get("judged_at_ms")
    changes = row.get("expiry_changes_at_ms")
    return judged is not None and judged <= now_ms and (changes is None or now_ms < changes)


def _run_locked(
    spark: SparkSession | SparkJobs,
    logs: list[PartitionLog],
    warehouse: str,
    result: RunResult,
    prev: PreviousRun | None,
    todo: list[PartitionLog],
    replacing: _Replacing,
    end_offsets: dict[int, int] | None,
    fetch_max_bytes: int | None = None,
    lag_input: bool = False,
    audit: bool = True,
    topic_logs: list[TopicPartitionLog] | None = None,
    starting: threading.Thread | None = None,
    preparing: _LagPreparing | None = None,
    known: tuple[dict[str, int], dict[str, str]] | None = None,
) -> None:
    """Each partition with anything to do is one Spark task (lib.lake.partition_task) that reads it
    once and writes its files; the driver then commits them table by table (delta-rs), the
    checkpoints last. `todo`: the partitions whose input or judgement may have changed
    (`_changed`); the others are skipped: a run with nothing new makes no Spark job and no
    commit."""
    run_id, now_ms, retention_minutes, partitions = (
        result.run_id,
        result.now_ms,
        result.retention_minutes,
        result.partitions,
    )
    start_offsets = dict.fromkeys(partitions, 0)
    if prev is not None:
        start_offsets.update(prev.next_offsets)
        result.incremental = True
    t0 = time.monotonic()
    result.skipped_partitions = len(logs) - len(todo)
    if not todo:
        result.stage_seconds["plan"] += time.monotonic() - t0
        return
    todo_ids = sorted(pl.partition for pl in todo)
    layouts, removed = replacing.layouts, replacing.removed
    audit_input = None
    if audit:
        from lib.spark.assignment import known_topics

        floors, names = known_topics(warehouse, topic_logs or [], known)
        audit_input = AuditInput(floors, {**_topic_names_of(topic_logs), **names})
    common = ReplayTask(
        partition=-1,
        start_offset=0,
        warehouse=storage.absolute(warehouse),
        run_id=run_id,
        now_ms=int(now_ms),
        retention_ms=int(retention_minutes) * 60_000,
        quarantine=result.on_corrupt == "quarantine",
        audit=audit_input,
        # the topic ids the input names already (a log dir's partition.metadata files): a KIP-848
        # group's assignment names topics by id only, and a task that finds one unnamed is run again
        topic_names=_topic_names_of(topic_logs),
    )
    sized_tasks = [
        _replay_task(common, pl, start_offsets[pl.partition], prev, end_offsets, fetch_max_bytes) for pl in todo
    ]
    # an incremental run's partitions that share a state file go to one task: each file is then
    # read by one task, not by every task holding one of its partitions
    units = _sharing_a_file(todo_ids, removed) if prev is not None else None
    packed = _pack(sized_tasks, spark.sparkContext.defaultParallelism, units)
    # a full run starts every partition from nothing; an incremental one from its last state
    groups = _group_tasks(
        packed, warehouse, run_id, todo_ids, layouts, removed, previous_state=prev is not None, lag_input=lag_input
    )
    result.stage_seconds["plan"] += time.monotonic() - t0

    t0 = time.monotonic()
    if preparing is not None:
        preparing.start()  # (the planning is done: beside the workers' start, then the tasks)
    if starting is not None:
        starting.join()
    with raising_worker_errors():
        results = spark.sparkContext.parallelize(groups, len(groups)).map(replay_task).collect()
        results = _resolve_topic_names(spark, groups, results)
    summaries = [s for r in results for s in r.partitions]
    by_partition = {s.partition: s for s in summaries}
    ends = {p: max(start_offsets[p], s.next_offset or 0) for p, s in by_partition.items()}
    log_ends = {
        pl.partition: (
            next_offset
            if (next_offset := by_partition[pl.partition].next_offset) is not None
            else (pl.segments[-1].base_offset if pl.segments else 0)
        )
        for pl in todo
    }
    _check_not_behind(todo, log_ends, prev)
    if lag_input:
        write_manifest(warehouse, run_id, [r.lag_input for r in results if r.lag_input])
    crash_point("after_decode")
    result.stage_seconds["read_replay_write"] = time.monotonic() - t0
    for seconds_by_step in [s.seconds for s in summaries] + [r.seconds for r in results]:
        for step, seconds in seconds_by_step.items():
            key = f"worker_{step}"
            result.stage_seconds[key] = result.stage_seconds.get(key, 0.0) + seconds
    result.records = sum(s.records for s in summaries)
    result.quarantined = sum(s.quarantined for s in summaries)
    if audit:
        result.audit_rows = sum(s.audit_rows for s in summaries)
    for s in summaries:
        for rtype, control, bad, n in s.record_types:
            kind = (rtype, control, bad)
            result.record_types[kind] = result.record_types.get(kind, 0) + n
    result.fetches = sum(s.fetches for s in summaries)
    crash_point("before_commit")

    t0 = time.monotonic()
    finished = dt.datetime.now(dt.UTC)
    checkpoint_rows = []
    for pl in logs:
        p = pl.partition
        if p not in by_partition:
            continue
        s = by_partition[p]
        checkpoint_rows.append(
            {
                "offsets_partition": p,
                "next_log_offset": int(ends[p]),
                "records_read": int(s.records),
                "high_watermark": pl.high_watermark,
                "trailing_bytes": int(s.trailing_bytes),
                "run_id": run_id,
                "finished_at": finished,
                "source_signature": pl.signature,
                "judged_at_ms": int(now_ms),
                "retention_minutes": int(retention_minutes),
                "expiry_changes_at_ms": s.expiry_changes_at,
                "next_byte_position": s.end_position,
            }
        )
    tag = run_tag(run_id)
    try:
        for table in T.REPLAY_TABLES:
            if table is T.ASSIGNMENT_AUDIT and not audit:
                continue  # (its open rows and every earlier row stay as they are)
            path = table_path(warehouse, table)
            if table is T.REPLAY_CHECKPOINTS:
                _commit_checkpoints(path, checkpoint_rows, prev, tag)
            else:
                commit_files(
                    path,
                    table,
                    [f for r in results for f in r.files.get(table.name, ())],
                    rebuilt_tag(run_id, todo_ids) if table is T.OFFSETS_LOG and table.name in removed else tag,
                    remove=removed.get(table.name, []),
                    partition_by=layouts.get(table.name),
                    overwrite_partitions=todo_ids if table.name in removed else None,
                )
            crash_point(f"after_commit:{table.name}")
    except BaseException:
        # A commit failed (a conflict, a full disk): take back what this run committed.
        roll_back_incomplete_runs(warehouse, T.REPLAY_TABLES, T.REPLAY_CHECKPOINTS)
        raise
    result.stage_seconds["commit"] = time.monotonic() - t0


@dataclass(frozen=True)
class _Replacing:
    """What a run replaces, from the tables' logs: each table's partition columns (`layouts`)
    and the files of the replayed partitions it removes (`removed`, by table name)."""

    layouts: dict[str, tuple[str, ...]]
    removed: dict[str, list[DataFile]]


def _replacing(warehouse: str, todo: list[PartitionLog], prev: PreviousRun | None, audit: bool) -> _Replacing:
    """The state of the partitions a run replays (with the assignment audit's open rows) and, in
    a full run, all their rows: the files that hold them, and each table's layout."""
    from lib.lake.partition_task import STATE_FILE_PREFIX, STATE_TABLES

    if not todo:
        return _Replacing({}, {})
    todo_ids = sorted(pl.partition for pl in todo)
    replaced = [
        t
        for t in T.REPLAY_TABLES
        if t in STATE_TABLES
        or (t is T.ASSIGNMENT_AUDIT and audit)
        or (prev is None and t not in (T.REPLAY_CHECKPOINTS, T.ASSIGNMENT_AUDIT))
    ]
    layouts: dict[str, tuple[str, ...]] = {}
    removed: dict[str, list[DataFile]] = {}
    for table in (T.OFFSETS_LOG, T.QUARANTINED_RECORDS):
        if table not in replaced:
            layout = table_layout(table_path(warehouse, table))
            layouts[table.name] = table.partition_by if layout is None else layout
    for table in replaced:
        listing = table_files(table_path(warehouse, table))
        layouts[table.name] = table.partition_by if listing is None else listing[0]
        files = listing[1] if listing else []
        if table is T.ASSIGNMENT_AUDIT and prev is not None:  # its rows of generations over stay
            files = [f for f in files if storage.basename(f.path).startswith(STATE_FILE_PREFIX[table.name] + "-")]
        # the exact partitions of the files whose min/max covers one replayed (a footer read each)
        candidates = [f.with_partitions() for f in files if f.may_hold(todo_ids)]
        removed[table.name] = [f for f in candidates if f.may_hold(todo_ids)]
    return _Replacing(layouts, removed)


def _replay_task(
    common: ReplayTask,
    pl: PartitionLog,
    start_offset: int,
    prev: PreviousRun | None,
    end_offsets: dict[int, int] | None,
    fetch_max_bytes: int | None,
) -> tuple[int, ReplayTask]:
    """The partition's task and its size in bytes to read (0 for a live source)."""
    p = pl.partition
    task = replace(common, partition=p, start_offset=int(start_offset), end_offset=(end_offsets or {}).get(p))
    if pl.bootstrap is not None:
        return 0, replace(task, bootstrap=pl.bootstrap, fetch_max_bytes=fetch_max_bytes)
    size, segs, start_position = _segments_to_read(pl, start_offset, prev)
    task = replace(task, segments=tuple((s.path, s.base_offset) for s in segs), start_position=start_position)
    return size, task


def _segments_to_read(pl: PartitionLog, start_offset: int, prev: PreviousRun | None) -> tuple[int, list, int | None]:
    """A log dir partition's bytes to read from `start_offset`, its segments from there, and
    the byte position in the first where its checkpoint stopped (None: from its start)."""
    segs = segments_from(pl, start_offset)
    row = prev.rows.get(pl.partition) if prev is not None else None
    start_position = None
    if (
        row
        and segs
        and row.get("next_byte_position") is not None
        and row.get("source_signature")
        and row["source_signature"].split(":", 1)[0] == str(segs[0].base_offset)
    ):
        start_position = int(row["next_byte_position"])
    return sum(s.size for s in segs) - (start_position or 0), segs, start_position


def _resolve_topic_names(
    spark: SparkSession | SparkJobs, groups: list[TaskGroup], results: list[TaskResult]
) -> list[TaskResult]:
    """KIP-848 assignments name topics by id; names come from offset commits (v4 values), which
    may sit in another offsets partition. A Spark task with a partition whose groups use ids
    that only another partition names is run again with those names (rare: a group assigned a
    topic it has never committed); the state files of a task hold all its partitions, so the
    whole task is redone. Its first files are left unreferenced (VACUUM removes them)."""
    names: dict[str, str] = {}
    for r in results:
        for s in r.partitions:
            names.update(s.topic_names)
    again = [i for i, r in enumerate(results) if any(set(s.unresolved_topic_ids) & set(names) for s in r.partitions)]
    if not again:
        return results
    redo = [
        replace(groups[i], tasks=tuple(replace(t, topic_names={**t.topic_names, **names}) for t in groups[i].tasks))
        for i in again
    ]
    redone = spark.sparkContext.parallelize(redo, len(redo)).map(replay_task).collect()
    out = list(results)
    for i, r in zip(again, redone):
        out[i] = r  # its first lag input file is not in the run's manifest: never read
    return out


def _topic_names_of(topic_logs: list[TopicPartitionLog] | None) -> dict[str, str]:
    """topic id -> name of the topic partition folders beside the offsets partitions (none for
    a live source)."""
    return {t.topic_id: t.topic for t in topic_logs or () if t.topic_id}


def _group_tasks(
    packed: list[list[ReplayTask]],
    warehouse: str,
    run_id: str,
    replayed: list[int],
    layouts: dict[str, tuple[str, ...]],
    removed: dict[str, list[DataFile]],
    previous_state: bool,
    lag_input: bool,
) -> list[TaskGroup]:
    """The Spark tasks' inputs: each gets the state files that may hold its partitions' rows
    (its previous state, if `previous_state`) and the files it must carry: a replaced file of a flat table that may
    hold rows of partitions this run does not replay goes to the task of the first replayed
    partition it may hold, which writes those rows again into its own file."""
    from lib.lake.partition_task import STATE_TABLES

    owner = {t.partition: i for i, members in enumerate(packed) for t in members}
    replayed_set = set(replayed)
    carry: list[dict[str, list[str]]] = [{} for _ in packed]
    for name, files in removed.items():
        for f in files:
            if f.partition_value is not None or f.holds_only(replayed_set):
                continue
            first = next((p for p in replayed if f.may_hold([p])), None)
            carry[owner[first] if first is not None else 0].setdefault(name, []).append(f.absolute)
    groups: list[TaskGroup] = []
    for members, to_carry in zip(packed, carry):
        mine = sorted(t.partition for t in members)
        state_files = {
            table.name: tuple(
                StateFile(f.absolute, f.partition_value) for f in removed.get(table.name, []) if f.may_hold(mine)
            )
            for table in (*STATE_TABLES, T.ASSIGNMENT_AUDIT)
            if previous_state and table.name in removed
        }
        groups.append(
            TaskGroup(
                tasks=tuple(sorted(members, key=lambda t: t.partition)),
                warehouse=storage.absolute(warehouse),
                run_id=run_id,
                replayed=tuple(replayed),
                flat={name: not cols for name, cols in layouts.items()},
                state_files=state_files,
                carry={name: tuple(paths) for name, paths in to_carry.items()},
                # the driver's object-store settings travel inside the task, never in a log
                object_store=storage.settings(),
                lag_input=lag_input,
            )
        )
    return groups


TASK_BYTES = 256 << 20  # a Spark task's share of segment bytes, when partitions are small
# a partition's own cost (its state read and written, its files), as bytes read: an incremental
# run's partitions hold a few KB to MB each, and packed by their bytes alone one task got 38 of
# 50 partitions and the other 12 (0.64 s against 0.39 s of CPU, measured on make bench's log).
# Measured partition by partition in make bench's 1% incremental run: some 18 ms of CPU each,
# and 10 ms a MB read (a partition of 487 bytes 23 ms, of 2.2 MB 43 ms): 2 MB's worth
PARTITION_COST_BYTES = 2 << 20


# a packing that keeps each state file's partitions together is taken while its heaviest task
# weighs at most this times the plain packing's heaviest: in make bench's 1% incremental run,
# packed plain, each of the two tasks read all six state files of the full run (three times its
# partitions' rows); kept together, each reads three
ALIGNED_SLACK = 1.15


def _pack(
    sized_tasks: list[tuple[int, ReplayTask]], parallelism: int, units: list[list[int]] | None = None
) -> list[list[ReplayTask]]:
    """Partitions into Spark tasks: a task costs tens of milliseconds to schedule, so small
    partitions share one (each still read whole, in log order, by one worker). One task per
    TASK_BYTES of input and at least two per core (one per core for an input under
    TASK_BYTES, as an incremental run's: there a task's own cost outweighs imbalance), at most
    one per partition; largest first into the lightest task, so the tasks end together (a
    partition weighs its bytes and PARTITION_COST_BYTES). `units`: partitions that had better
    share a task (_sharing_a_file); packed as units where that leaves no task empty and the
    heaviest at most ALIGNED_SLACK times the heaviest of the packing without them."""
    if not sized_tasks:
        return []
    total = sum(size for size, _ in sized_tasks)
    per_core = 2 if total > TASK_BYTES else 1
    n = min(len(sized_tasks), max(per_core * max(parallelism, 1), -(-total // TASK_BYTES)))
    plain = _fill(n, [(size + PARTITION_COST_BYTES, [task]) for size, task in sized_tasks])
    if not units:
        return [members for _, members in plain]
    by_partition = {task.partition: (size, task) for size, task in sized_tasks}
    grouped = [
        (sum(by_partition[p][0] + PARTITION_COST_BYTES for p in unit), [by_partition[p][1] for p in unit])
        for unit in units
    ]
    aligned = _fill(n, grouped)
    if len(aligned) == len(plain) and aligned[0][0] <= plain[0][0] * ALIGNED_SLACK:
        return [sorted(members, key=lambda t: t.partition) for _, members in aligned]
    return [members for _, members in plain]


def _fill(n: int, items: list[tuple[int, list]]) -> list[tuple[int, list]]:
    """Weighed items (weight, members) into at most n bins, heaviest first into the lightest
    bin: the bins that got any, heaviest first, with their loads."""
    import heapq

    bins: list[tuple[int, int, list]] = [(0, i, []) for i in range(n)]
    heapq.heapify(bins)
    for weight, members in sorted(items, key=lambda item: -item[0]):
        load, i, held = heapq.heappop(bins)
        held.extend(members)
        heapq.heappush(bins, (load + weight, i, held))
    return [(load, held) for load, _, held in sorted(bins, key=lambda b: -b[0]) if held]


def _sharing_a_file(partitions: list[int], removed: dict[str, list[DataFile]]) -> list[list[int]]:
    """The replayed `partitions` (sorted) joined where a state file of the previous run (a flat
    file `removed` lists) holds rows of several: a task reads a flat file's row groups whole,
    so a file shared by two tasks is read twice."""
    root = {p: p for p in partitions}

    def find(p: int) -> int:
        while root[p] != p:
            root[p] = root[root[p]]
            p = root[p]
        return p

    seen: set[tuple[int, ...]] = set()  # (the state tables' files hold the same partitions: joined once)
    for files in removed.values():
        for f in files:
            if f.partition_value is not None:
                continue
            held = tuple(p for p in partitions if f.may_hold([p]))
            if held in seen:
                continue
            seen.add(held)
            for p in held[1:]:
                root[find(p)] = find(held[0])
    units: dict[int, list[int]] = {}
    for p in partitions:
        units.setdefault(find(p), []).append(p)
    return list(units.values())


def _commit_checkpoints(path: str, rows: list[dict], prev: PreviousRun | None, tag: str) -> None:
    """replay_checkpoints is one small file: the rows of the partitions this run replayed
    replace theirs, the others stay. Its commit is the run's commit point."""
    import pyarrow as pa

    kept = []
    current = read_small_table(path)
    if current is not None:
        replaced = {r["offsets_partition"] for r in rows}
        names = T.REPLAY_CHECKPOINTS.column_names
        kept = [{c: r.get(c) for c in names} for r in current.to_pylist() if r["offsets_partition"] not in replaced]
    table = pa.Table.from_pylist(
        sorted(kept + rows, key=lambda r: r["offsets_partition"]), schema=T.REPLAY_CHECKPOINTS.arrow_schema
    )
    overwrite_small_table(path, T.REPLAY_CHECKPOINTS, table, tag)


def _check_not_behind(logs: list[PartitionLog], ends: dict[int, int], prev: PreviousRun | None) -> None:
    """A log that now ends before its checkpoint was truncated or replaced: refuse to guess."""
    if prev is None:
        return
    for pl in logs:
        checkpoint = prev.next_offsets.get(pl.partition)
        if checkpoint is None or pl.partition not in ends:
            continue
        end = ends[pl.partition]
        if end < checkpoint:
            raise ReplayError(
                f"partition {pl.partition} of the input ends at offset {end}, before the checkpoint "
                f"{checkpoint} of the last run: the log was truncated or replaced; run with --full"
            )
