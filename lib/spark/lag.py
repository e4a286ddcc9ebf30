"""The lag stage of a run: end offsets of the consumed partitions, and every group's lag.

After the replay's commit point, under the same warehouse lock:
1. The replay handed over the offset commits that took effect, as its engine found them, in
   its lag input (lib.lake.lag_input: grouped into buckets of topic partitions). The topic
   partitions to read are those the last stage read, those with a live offset and those with
   new commits; each is read from its checkpoint on, batch headers only.
2. Spark tasks (lib.lake.lag_task), one per range of buckets, take one topic partition at a
   time: its new batches into partition_end_offsets rows, then group_lag rows for every commit
   since the last lag stage and, at the run's --now, for every live offset: the end offset as
   of that time and the age of the first unconsumed record (lib.lake.lag_rows: its time from
   the batch header, or from its batch, decoded; else interpolated between end-offset rows).
   Nothing here is a Spark shuffle: memory is a task's commits plus one partition's rows.
3. Commits: partition_end_offsets, group_lag, then lag_checkpoints (the stage's commit point;
   a stage that died is rolled back by the next run like the replay's tables, and redone from
   the lag input, which is removed only after that commit).

From a live cluster (`run_live_lag_stage`) step 1 samples instead: ListOffsets of the same
partitions (lib.source.live), one partition_end_offsets row each (source list_offsets, `at` the
sampling time on this machine's clock); there are no batches to decode, so a lag in time is
interpolated between the samples of successive runs, as kafka-lag-exporter does. Steps 2 and 3
are the same.

lib.spark.lag_rules answers the same rules over whole tables, for the SQL audits and the report
(tests/test_lag_rows.py holds them to lib.lake.lag_rows).
"""

from __future__ import annotations

import datetime as dt
import re
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa

from lib import storage
from lib.lake.behind import SUMMARY_ROWS, furthest_behind
from lib.lake.crash_points import crash_point
from lib.lake.delta import (
    DataFile,
    commit_files,
    open_delta,
    overwrite_small_table,
    read_small_table,
    table_files,
    table_path,
)
from lib.lake.lag_input import BUCKETS, bucket_of, manifest_files, read_index, remove_lag_input, runs_with_input
from lib.lake.lag_plan import LAG_TAILS, earlier_rows, now_file_at
from lib.lake.run_tags import run_tag
from lib.lake.seams import LagTask, PartitionInput, PartitionInputs, WrittenFile, pickle_inputs
from lib.lake.tasks import lag_task
from lib.lake.worker_errors import raising_worker_errors
from lib.source.topic_log import ScanStart, find_topic_partitions, scan_plan
from lib.spark.session import SparkJobs
from schemas import tables as T

if TYPE_CHECKING:  # (the default command's driver imports no pyspark: 0.1 s a run)
    from pyspark.sql import SparkSession

OFFSETS_TOPIC = "__consumer_offsets"


@dataclass
class LagResult:
    partitions_scanned: int = 0
    batches: int = 0
    lag_rows: int = 0
    skipped: str | None = None  # why the stage did nothing
    stage_seconds: dict = field(default_factory=dict)
    # the rows of kind now at this --now furthest behind (lib.lake.behind), from the tasks that
    # wrote them all (None: the stage wrote none, the summary reads the table's)
    furthest_behind: pa.Table | None = None


def live_offset_files(warehouse: str) -> list[DataFile]:
    """group_offsets' data files (none: no table), as the lag tasks read them."""
    listing = table_files(table_path(warehouse, T.GROUP_OFFSETS))
    return listing[1] if listing else []


def live_partitions(files: list[DataFile]) -> set[tuple[str, int]]:
    """The topic partitions with a live committed offset: group_offsets' two columns, read
    from its files (`live_offset_files`) as the tasks read them. delta-rs's scan of the table
    took 15-53 ms of make bench's 1% incremental run, on the stage's path, against a few."""
    out: set[tuple[str, int]] = set()
    for f in files:
        data = storage.open_parquet(f.absolute).read(columns=["topic", "partition"], use_threads=False)
        out.update(zip(data.column("topic").to_pylist(), data.column("partition").to_pylist()))
    return out


def _replayed_to(warehouse: str) -> dict[int, int]:
    """offsets partition -> the replay's checkpoint (next log offset)."""
    replay = read_small_table(table_path(warehouse, T.REPLAY_CHECKPOINTS))
    return {r["offsets_partition"]: r["next_log_offset"] for r in (replay.to_pylist() if replay is not None else [])}


def _previous_checkpoints(warehouse: str, full: bool) -> dict[tuple[str, int], dict]:
    """The last lag stage's lag_checkpoints rows by (topic, partition); none for a full run."""
    previous = None if full else read_small_table(table_path(warehouse, T.LAG_CHECKPOINTS))
    return {(r["topic"], r["partition"]): r for r in (previous.to_pylist() if previous is not None else [])}


def waits(warehouse: str, now_ms: int) -> bool:
    """Whether, as its checkpoints tell, this run's lag stage has nothing new to do at `now_ms`:
    the last stage ran as of `now_ms`, or none ever wrote a checkpoint (a log dir without consumed
    partitions). A peek before the JVM starts, as the replay's
    (lib.spark.pipeline.replay_bytes): what it cannot see (a consumed partition grown, one
    that appeared) the stage finds, later; anything unexpected answers False."""
    try:
        table = read_small_table(table_path(warehouse, T.LAG_CHECKPOINTS))
    except Exception:  # (the run reads it again, and says what is wrong)
        return False
    if table is None:
        return True
    return _judged_at(table.select(["topic", "at_ms"]).to_pylist(), now_ms)


def _judged_at(checkpoints, now_ms: int) -> bool:
    """Whether the lag_checkpoints rows of the offsets partitions all say the stage ran as of
    `now_ms` (the stage's own skip rule and the peek's, in one place)."""
    return all(r.get("at_ms") == now_ms for r in checkpoints if r["topic"] == OFFSETS_TOPIC)


@dataclass
class _Plan:
    """What a lag stage reads: the lag input of the replay runs since the last stage, the
    watermarks below which their commits are old, and the previous checkpoints."""

    prev_rows: dict[tuple[str, int], dict]
    watermarks: dict[int, int] | None
    runs: list[str]  # replay runs whose lag input is read
    event_files: list[str]
    event_partitions: set[tuple[str, int]]  # the topic partitions those files hold commits of
    bucket_rows: dict[int, int]  # commits per bucket in those files


@dataclass(frozen=True)
class LagPreparation:
    """What a log dir's lag stage reads that its run's replay changes nothing of, read while the
    replay's tasks run (prepare_lag_stage): the last stage's checkpoints, and the inputs of the
    topic partitions it read (most of a busy log dir's: their checkpoints made into inputs took
    0.3 s of make bench's 1% incremental run, on the stage's path)."""

    prev_rows: dict[tuple[str, int], dict]
    inputs: dict[tuple[str, int], PartitionInput]  # of the topic partitions in prev_rows
    seconds: float  # its time (the stage's lag_prepare)
    # bucket -> its inputs of `inputs`, in key order, and them pickled (PartitionInputs' parts)
    pickled: dict[int, tuple[list[PartitionInput], bytes]] = field(default_factory=dict)


def prepare_lag_stage(warehouse: str, full: bool, topic_logs: list) -> LagPreparation:
    """The lag stage's preparation for a log dir's `topic_logs` (run_lag_stage's `prepared`)."""
    t0 = time.monotonic()
    prev_rows = _previous_checkpoints(warehouse, full)
    by_tp = {(t.topic, t.partition): t for t in topic_logs}
    inputs = {key: _log_input(key, prev, by_tp.get(key)) for key, prev in prev_rows.items() if key[0] != OFFSETS_TOPIC}
    # (pickled here, while the replay's tasks run, not when the stage's tasks are handed out)
    by_bucket: dict[int, list[PartitionInput]] = {}
    for key in sorted(inputs):
        by_bucket.setdefault(bucket_of(*key), []).append(inputs[key])
    pickled = {b: (members, pickle_inputs(members)) for b, members in by_bucket.items()}
    return LagPreparation(prev_rows, inputs, time.monotonic() - t0, pickled)


def _log_input(key: tuple[str, int], prev: dict | None, log) -> PartitionInput:
    """A log dir's topic partition as the stage's tasks take it: from its checkpoint (`prev`, if
    read before) on, scanned if its folder (`log`) holds anything the checkpoint has not seen."""
    start = None
    if prev is not None and log is not None and prev.get("topic_id") == log.topic_id:
        start = ScanStart(prev["next_offset"], prev.get("segment_base_offset"), prev.get("next_byte_position"))
    signature = log.signature if log is not None else None
    scan = log is not None and (start is None or prev is None or prev.get("source_signature") != signature)
    return PartitionInput(
        key[0],
        key[1],
        log,
        start,
        scan,
        prev.get("at_ms") if start is not None and prev is not None else None,
        _in_table(prev),
        earlier_rows(prev) if prev is not None else None,
        source_signature=signature if log is not None else (prev or {}).get("source_signature"),
        tail_file=_tail_file(prev),
    )


def _plan(warehouse: str, run_id: str, full: bool, prev_rows: dict[tuple[str, int], dict] | None = None) -> _Plan:
    from lib.lake.delta import completed_runs

    if prev_rows is None:
        prev_rows = _previous_checkpoints(warehouse, full)
    offsets_rows = [r for (topic, _), r in prev_rows.items() if topic == OFFSETS_TOPIC]
    watermarks = {r["partition"]: r["next_offset"] for r in offsets_rows} or None
    inputs = runs_with_input(warehouse)
    if full:
        runs = [run_id] if run_id in inputs else []
    else:
        # the runs a commit names only: a dead run's lag input stays until a stage commits (no
        # roll-back removes it), so a run before the log's oldest commit kept may be a dead one
        completed = completed_runs(table_path(warehouse, T.REPLAY_CHECKPOINTS))
        runs = sorted(r for r in inputs if completed.named(r))
    files: list[str] = []
    partitions: set[tuple[str, int]] = set()
    bucket_rows: dict[int, int] = {}
    for run in runs:
        for path in manifest_files(warehouse, run):  # what its replay's tasks wrote
            files.append(path)
            index = read_index(path)
            partitions.update(index.partitions)
            for b, n in zip(index.bucket.tolist(), index.rows.tolist()):
                bucket_rows[b] = bucket_rows.get(b, 0) + n
    return _Plan(prev_rows, watermarks, runs, files, partitions, bucket_rows)


def run_lag_stage(
    spark: SparkSession | SparkJobs,
    log_dir: str | None,
    warehouse: str,
    run_id: str,
    now_ms: int,
    full: bool,
    samples: list | None = None,
    sampled_at: int | None = None,
    topic_logs: list | None = None,
    prepared: LagPreparation | None = None,
) -> LagResult:
    """The lag stage after a replay run's commit point (see the module's doc): from the log
    dir's consumed partitions, or from a live cluster's `samples` (lib.source.live
    EndOffsetSample, taken at `sampled_at`). The partitions read are those the last stage
    read, those with a live offset, and those with commits in the replay's lag input since;
    with nothing new to read at the same --now the stage is skipped (no Spark job, no commit).
    What to read is judged from the stage's own commit point and the lag input it has not
    consumed, never from what this run's replay found new: a stage that died after its replay
    committed is redone whole. `prepared`: prepare_lag_stage's for a log dir's `topic_logs`,
    read under the same lock before this run's replay committed."""
    result = LagResult()
    if prepared is not None:
        result.stage_seconds["lag_prepare"] = prepared.seconds
    t0 = time.monotonic()
    live = samples is not None
    if topic_logs is None:  # (the run's own listing, when it has one)
        topic_logs = find_topic_partitions(log_dir) if log_dir else []
    if not live and not topic_logs:
        result.skipped = "the input holds no consumed topic partitions"
        return result
    plan = _plan(warehouse, run_id, full, prepared.prev_rows if prepared is not None else None)
    ready = prepared.inputs if prepared is not None else {}
    tracked = {tp for tp in plan.prev_rows if tp[0] != OFFSETS_TOPIC}
    offsets_files = live_offset_files(warehouse)
    wanted = tracked | live_partitions(offsets_files) | plan.event_partitions
    by_tp = {(t.topic, t.partition): t for t in topic_logs}
    sampled = {(s.topic, s.partition): s for s in samples or ()}
    inputs: list[PartitionInput] = []
    changed = False
    for key in sorted(wanted):
        prev = plan.prev_rows.get(key)
        log = by_tp.get(key)
        if live:
            sample = sampled.get(key)
            if sample is None and prev is None:
                continue
            inputs.append(
                PartitionInput(
                    key[0],
                    key[1],
                    None,
                    None,
                    False,
                    None,
                    _in_table(prev),
                    earlier_rows(prev) if prev is not None else None,
                    samples=_sample_rows([sample], run_id) if sample is not None else None,
                    tail_file=_tail_file(prev),
                )
            )
            changed |= sample is not None
            continue
        if log is None and prev is None:
            continue  # neither in the log dir nor read before: its points get no end offset
        tp = ready.get(key) or _log_input(key, prev, log)
        changed |= tp.scan
        inputs.append(tp)
    offsets_rows = [r for (topic, _), r in plan.prev_rows.items() if topic == OFFSETS_TOPIC]
    # (read once: under the lock nothing commits replay_checkpoints before this stage's commit point)
    replayed_to = _replayed_to(warehouse)
    caught_up = bool(plan.watermarks) and plan.watermarks == replayed_to
    result.stage_seconds["lag_plan"] = time.monotonic() - t0
    if caught_up and not changed and _judged_at(offsets_rows, now_ms):
        result.skipped = "nothing new since the last run at the same --now"
        # (what a stage killed after its commit point left)
        _remove_unnamed_tails(warehouse, {str(r["tail_file"]) for r in plan.prev_rows.values() if r.get("tail_file")})
        return result

    # 1. the tasks: end offsets and lag rows
    t0 = time.monotonic()
    tasks = _tasks(
        spark,
        warehouse,
        run_id,
        now_ms,
        max(now_ms, sampled_at or now_ms),
        inputs,
        plan,
        full,
        offsets_files,
        prepared.pickled if prepared is not None else {},
    )
    with raising_worker_errors():
        outcomes = spark.sparkContext.parallelize(tasks, len(tasks)).map(lag_task).collect() if tasks else []
    result.partitions_scanned = sum(1 for tp in inputs if tp.scan or tp.samples is not None)
    result.batches = sum(o.batches for o in outcomes)
    result.lag_rows = sum(o.lag_rows for o in outcomes)
    tops = [o.furthest_behind for o in outcomes if o.furthest_behind is not None]
    if len(tops) == len(outcomes):  # (every task's: the stage replaces this --now's rows whole)
        result.furthest_behind = furthest_behind(
            pa.concat_tables(tops) if tops else T.GROUP_LAG.arrow_schema.empty_table(), SUMMARY_ROWS
        )
    for o in outcomes:
        for step, seconds in o.seconds.items():
            result.stage_seconds[f"worker_{step}"] = result.stage_seconds.get(f"worker_{step}", 0.0) + seconds
    result.stage_seconds["lag_tasks"] = time.monotonic() - t0

    # 2. the commits: end offsets, lag rows, then the stage's commit point
    t0 = time.monotonic()
    end_path = table_path(warehouse, T.PARTITION_END_OFFSETS)
    removed = []
    if full:
        listing = table_files(end_path)
        removed = listing[1] if listing else []
    commit_files(
        end_path,
        T.PARTITION_END_OFFSETS,
        [f for o in outcomes for f in o.end_offset_files],
        run_tag(run_id),
        remove=removed,
    )
    crash_point("after_commit:partition_end_offsets")
    _commit_group_lag(warehouse, run_id, now_ms, full, [f for o in outcomes for f in o.lag_files])
    crash_point("after_commit:group_lag")
    checkpoints = [c for o in outcomes for c in o.checkpoints]
    tails = _commit_checkpoints(warehouse, run_id, now_ms, plan.prev_rows, checkpoints, replayed_to)
    crash_point("after_commit:lag_checkpoints")
    _remove_unnamed_tails(warehouse, tails)
    result.stage_seconds["lag_commit"] = time.monotonic() - t0
    remove_lag_input(warehouse)
    return result


_SET_AT_COMMIT = ("run_id", "finished_at")  # what _commit_checkpoints stamps every row with


def _tail_file(prev: dict | None) -> str | None:
    """The tail file a lag_checkpoints row names, one string per file (a task's partitions
    share a few files: pickled once each, not once per partition)."""
    name = prev.get("tail_file") if prev is not None else None
    return sys.intern(name) if name else None


def _in_table(prev: dict | None) -> bool:
    """Whether partition_end_offsets holds rows of the partition of this checkpoint row (it
    keeps an account of them, or, written by an earlier version, it had read some)."""
    if prev is None:
        return False
    return prev.get("log_end_offset") is not None or bool(prev.get("next_offset")) or prev.get("at_ms") is not None


def _tasks(
    spark: SparkSession | SparkJobs,
    warehouse: str,
    run_id: str,
    now_ms: int,
    now_asof_ms: int,
    inputs: list[PartitionInput],
    plan: _Plan,
    full: bool,
    offsets_files: list[DataFile],
    pickled: dict[int, tuple[list[PartitionInput], bytes]] | None = None,
) -> list[LagTask]:
    """The topic partitions split by bucket ranges into tasks of about equal work (commits to
    place, batches to read): one per core for a small stage (an incremental run's: there a
    task's own cost, its reads of the tables before, outweighs imbalance), else two, more when
    there are many commits (a task holds its commits). `pickled`: the preparation's pickled
    buckets (LagPreparation), sent as they are where a bucket's inputs are those."""
    weight = dict(plan.bucket_rows)
    by_bucket: dict[int, list[PartitionInput]] = {}
    for tp in inputs:
        b = bucket_of(tp.topic, tp.partition)
        weight[b] = weight.get(b, 0) + 1 + _scan_bytes(tp) // 200
        by_bucket.setdefault(b, []).append(tp)
    if not weight:
        return []
    total = sum(weight.values())
    parallelism = max(1, spark.sparkContext.defaultParallelism)
    per_core = 2 if total > SMALL_STAGE else 1
    count = max(1, min(len(weight), max(per_core * parallelism, -(-total // TASK_COMMITS))))
    live_files = tuple(f.absolute for f in offsets_files)
    history = table_files(table_path(warehouse, T.PARTITION_END_OFFSETS)) if not full else None
    history_files = tuple(f.absolute for f in history[1]) if history else ()
    pickled = pickled or {}

    def part(bucket: int) -> tuple[list[PartitionInput], bytes | None]:
        members = by_bucket.get(bucket, [])
        ready = pickled.get(bucket)
        if ready is None or len(ready[0]) != len(members) or any(a is not b for a, b in zip(ready[0], members)):
            return members, None
        return members, ready[1]

    tasks = []
    lo, acc = 0, 0
    share = total / count
    ordered = sorted(weight)
    for i, b in enumerate(ordered):
        acc += weight[b]
        last = i == len(ordered) - 1
        if acc >= share or last:
            hi = BUCKETS if last else b + 1
            members = PartitionInputs.of(part(bucket) for bucket in range(lo, hi) if bucket in by_bucket)
            tasks.append(
                LagTask(
                    storage.absolute(warehouse),
                    run_id,
                    storage.settings(),
                    lo,
                    hi,
                    members,
                    tuple(plan.event_files),
                    None if full else plan.watermarks,
                    now_ms,
                    now_asof_ms,
                    live_files,
                    history_files,
                )
            )
            lo, acc = hi, 0
    return tasks


TASK_COMMITS = 1_000_000  # commits a lag task holds at most, about
# a stage's work (commits, partitions, bytes to read / 200) under which it gets one task per core:
# make bench's 1% incremental run weighs about 200,000 and spent 0.5 s of CPU reading the tables
# before in four tasks against 0.3 s in two; its full run weighs 11 million
SMALL_STAGE = 1_000_000


def _scan_bytes(tp: PartitionInput) -> int:
    """The bytes of the partition's segments the task reads (its `scan_plan`)."""
    if tp.log is None or not tp.scan:
        return 0
    return sum(max(seg.size - position, 0) for seg, position in scan_plan(tp.log, tp.scan_from))


_SPARK_FILE = re.compile(r"^part-\d{5}-")


def _commit_group_lag(warehouse: str, run_id: str, now_ms: int, full: bool, files: list[WrittenFile]) -> None:
    """group_lag: the new rows' files added; a full stage replaces every file, another the now
    rows of an earlier stage at the same --now (files named for it; in a table an earlier
    version wrote, those rows are deleted first, in a commit of their own)."""
    path = table_path(warehouse, T.GROUP_LAG)
    listing = table_files(path)
    removed = []
    if listing is not None:
        if full:
            removed = listing[1]
        else:
            removed = [f for f in listing[1] if now_file_at(f.path) == now_ms]
            # files an earlier version wrote with Spark (part-00000-<uuid>-c000...) mix both kinds
            if any(_SPARK_FILE.match(f.path.split("/")[-1]) for f in listing[1]):
                _delete_now_rows(path, now_ms, run_id)
    commit_files(path, T.GROUP_LAG, files, run_tag(run_id), remove=removed)


def _delete_now_rows(path: str, now_ms: int, run_id: str) -> None:
    from deltalake import CommitProperties

    at = dt.datetime.fromtimestamp(now_ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    open_delta(path).delete(
        f"kind = 'now' AND at = '{at}'",
        commit_properties=CommitProperties(custom_metadata={"userMetadata": run_tag(run_id)}),
    )


def _remove_unnamed_tails(warehouse: str, named: set[str]) -> None:
    """The tail files no committed checkpoint names: those a task wrote for a stage that died
    or a task attempt that failed, and those every partition has moved on from."""
    root = storage.join(warehouse, LAG_TAILS)
    if not storage.exists(root):
        return
    for entry in storage.list_dir(root):
        if not entry.is_dir and entry.name not in named:
            storage.delete_file(entry.path)


def _commit_checkpoints(
    warehouse: str,
    run_id: str,
    now_ms: int,
    prev_rows: dict[tuple[str, int], dict],
    checkpoints: list[dict],
    replayed_to: dict[int, int],
) -> set[str]:
    """lag_checkpoints, the stage's commit point: the topic partitions' rows from the tasks over
    the previous ones, and every offsets partition's watermark from replay_checkpoints
    (`replayed_to`). Returns the tail files its rows name."""
    import pyarrow as pa

    stamp = dict(zip(_SET_AT_COMMIT, (run_id, dt.datetime.now(dt.UTC))))
    new_rows: dict[tuple[str, int], dict] = dict(prev_rows)
    for c in checkpoints:
        # a task returns what it set of a partition's row (not sent the row, it sets what its
        # read changed): laid over the previous row
        key = (c["topic"], c["partition"])
        new_rows[key] = {**prev_rows.get(key, {}), **c, **stamp}
    for p, nxt in replayed_to.items():
        new_rows[(OFFSETS_TOPIC, p)] = {
            "topic": OFFSETS_TOPIC,
            "partition": p,
            "next_offset": nxt,
            "at_ms": now_ms,  # the --now its `now` rows were computed at
            **stamp,
        }
    # (from_pylist takes the schema's columns of each row: a column a row lacks is null)
    table = pa.Table.from_pylist([row for _, row in sorted(new_rows.items())], schema=T.LAG_CHECKPOINTS.arrow_schema)
    overwrite_small_table(table_path(warehouse, T.LAG_CHECKPOINTS), T.LAG_CHECKPOINTS, table, run_tag(run_id))
    return {name for name in table.column("tail_file").unique().to_pylist() if name}


def run_live_lag_stage(
    spark: SparkSession | SparkJobs, bootstrap_servers: str, warehouse: str, run_id: str, now_ms: int, full: bool
) -> LagResult:
    """The lag stage after a replay run from a live cluster (see the module's doc): the
    partitions groups commit on are sampled with ListOffsets (LATEST; the newest record's
    timestamp, KIP-734, where the leader has it), one partition_end_offsets row each, appended
    (also by a full run: past samples cannot be taken again). Partitions of deleted topics get
    no row. The live offsets were fetched after --now and before the sample, so their `now`
    rows take the end offset as of the sample when --now is earlier: that of the same moment
    as kafka-consumer-groups --describe would show it."""
    from lib.source.live import sample_end_offsets

    t0 = time.monotonic()
    plan = _plan(warehouse, run_id, full)
    wanted = {tp for tp in plan.prev_rows if tp[0] != OFFSETS_TOPIC} | live_partitions(live_offset_files(warehouse))
    wanted |= plan.event_partitions
    if not wanted:
        result = LagResult()
        result.skipped = "no group commits on a topic partition"
        return result
    samples = sample_end_offsets(bootstrap_servers, wanted)
    sampled_at = max((s.at_ms for s in samples), default=None)
    seconds = time.monotonic() - t0
    result = run_lag_stage(spark, None, warehouse, run_id, now_ms, full, samples=samples, sampled_at=sampled_at)
    result.stage_seconds["lag_sample"] = seconds
    return result


def _sample_rows(samples: list, run_id: str):
    """partition_end_offsets rows of ListOffsets samples (lib.source.live.EndOffsetSample):
    end_offset, at, max_timestamp and topic_id; the batch columns are null."""
    import pyarrow as pa

    def ts(ms: int | None):
        return None if ms is None else dt.datetime.fromtimestamp(ms / 1000, dt.UTC)

    rows = [
        {
            "topic": s.topic,
            "partition": s.partition,
            "end_offset": s.end_offset,
            "at": ts(s.at_ms),
            "source": "list_offsets",
            "topic_id": s.topic_id,
            "max_timestamp": ts(s.max_timestamp_ms),
            "run_id": run_id,
        }
        for s in samples
    ]
    schema = T.PARTITION_END_OFFSETS.arrow_schema
    return pa.Table.from_pylist([{c: r.get(c) for c in schema.names} for r in rows], schema=schema)
