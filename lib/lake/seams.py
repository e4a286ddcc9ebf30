"""What crosses between the driver and its Spark workers, typed. The replay: the driver plans
ReplayTasks (one offsets partition each), packs them into TaskGroups (one Spark task each) and
ships those; lib.lake.partition_task runs them and sends back a TaskResult (a PartitionSummary
per partition, the WrittenFiles to commit). The lag stage: LagTasks of PartitionInputs, run by
lib.lake.lag_task, back as LagTaskResults. Errors: lib.lake.worker_errors.WorkerError. Inputs
are frozen: a worker never changes them, and the driver makes a changed copy
(dataclasses.replace) to run a task again."""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lib.storage import ObjectStoreSettings

if TYPE_CHECKING:
    import pyarrow as pa

    from lib.source.topic_log import ScanStart, TopicPartitionLog


@dataclass(frozen=True)
class AuditInput:
    """The assignment audit's facts from outside the partition: partition counts known per
    topic (floors) and topic id -> name."""

    floors: Mapping[str, int]
    names: Mapping[str, str]


@dataclass(frozen=True)
class ReplayTask:
    """One offsets partition to replay from start_offset: from segment files
    (path, base offset; start_position: the byte of the first segment where the previous run
    stopped) or, with bootstrap, from the live topic (up to end_offset when given)."""

    partition: int
    start_offset: int
    warehouse: str
    run_id: str
    now_ms: int
    retention_ms: int
    quarantine: bool = False
    end_offset: int | None = None
    audit: AuditInput | None = None
    segments: tuple[tuple[str, int], ...] = ()
    start_position: int | None = None
    bootstrap: str | None = None
    fetch_max_bytes: int | None = None
    topic_names: Mapping[str, str] = field(default_factory=dict)  # topic id -> name known before


@dataclass(frozen=True)
class StateFile:
    """A file of a state table that may hold rows of the task's partitions."""

    path: str
    partition_value: int | None  # the file's offsets_partition in a partitioned table


@dataclass(frozen=True)
class TaskGroup:
    """One Spark task: its partitions' ReplayTasks (ascending: the state files' row groups hold
    partitions in that order), the state files that may hold their previous rows (by table),
    the files of flat tables to carry (rows of partitions this run does not replay, written
    again), and whether the tables are flat (no partition columns)."""

    tasks: tuple[ReplayTask, ...]
    warehouse: str
    run_id: str
    replayed: tuple[int, ...]
    flat: Mapping[str, bool]
    state_files: Mapping[str, tuple[StateFile, ...]] = field(default_factory=dict)
    carry: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    object_store: ObjectStoreSettings | None = None  # the driver's settings: never in a log
    lag_input: bool = False


@dataclass(frozen=True)
class WrittenFile:
    """A Parquet file a worker wrote into a table's folder; the driver's commit adds it."""

    path: str  # relative to the table's folder, as in the Delta log
    size: int
    rows: int
    modification_time: int  # ms
    stats: str  # Delta's JSON statistics (numRecords, minValues, maxValues, nullCount)
    partition_value: int | None = None  # its offsets_partition, in a table partitioned by it


@dataclass(frozen=True)
class PartitionSummary:
    """What replaying one offsets partition found: the driver's checkpoint row and counters."""

    partition: int
    records: int
    record_types: tuple[tuple[int, bool, bool, int], ...]  # (record type, control, undecoded, count)
    audit_rows: int
    next_offset: int | None  # the offset after the last record read (None: none read)
    trailing_bytes: int  # bytes after the last whole batch (a segment being written)
    end_position: int | None  # the byte of the last segment where the read stopped
    fetches: int  # Fetch requests (a live source)
    quarantined: int
    expiry_changes_at: int | None  # ms: the next instant an expiry verdict changes
    topic_names: Mapping[str, str]  # topic id -> name the partition's records name
    unresolved_topic_ids: tuple[str, ...]  # ids its groups' assignments use and nothing named
    seconds: Mapping[str, float]  # CPU seconds by step


@dataclass(frozen=True)
class TaskResult:
    """One Spark task's outcome: its partitions' summaries, the files to add by table, its own
    steps' CPU seconds and its lag input file (lib.lake.lag_input; None without the lag stage)."""

    partitions: tuple[PartitionSummary, ...]
    files: Mapping[str, tuple[WrittenFile, ...]]
    seconds: Mapping[str, float]
    lag_input: str | None = None


# --- the lag stage (lib.spark.lag plans, lib.lake.lag_task runs) ---------------------------------


@dataclass(frozen=True)
class EarlierRows:
    """What a topic partition's lag checkpoint says of its rows in the table (see
    lib.lake.lag_rows.Earlier): the last row's time, end offset and topic id, the largest end
    offset, and the first row's time and first offset."""

    last_at_ms: int | None
    last_end: int
    last_topic_id: str | None
    log_end: int
    first_at_ms: int | None
    first_offset: int | None


@dataclass(frozen=True)
class PartitionInput:
    """One consumed topic partition of a lag task: where its log is, where its last scan
    stopped, and what the lag_checkpoints row says of its rows in group_lag."""

    topic: str
    partition: int
    log: TopicPartitionLog | None  # its folder in the log dir; None when absent (or live)
    scan_from: ScanStart | None  # where its last scan stopped; None: from the start
    scan: bool  # its input changed since: read its new batches
    running_at_ms: int | None  # the checkpoint's `at`: new rows' `at` never go below it
    in_table: bool  # the table holds earlier rows of it
    earlier: EarlierRows | None  # None with in_table: unknown (its rows are read)
    samples: pa.Table | None = None  # a live cluster's new rows (partition_end_offsets schema)
    source_signature: str | None = None
    tail_file: str | None = None  # the file of _lag_tails its lag_checkpoints row names


class PartitionInputs(tuple):
    """A lag task's PartitionInputs (a tuple of them), pickled part by part where each part's
    pickle was made before: the lag stage's preparation pickles, bucket by bucket, the inputs
    of the partitions the last stage read while the replay's tasks run, and a task whose bucket
    holds those and no other sends their bytes as they are. Pickling a task's 4,000 inputs at
    its dispatch (nested dataclasses: 25-35 ms each, one task after the other) held back the
    start of make bench's 1% incremental run's second lag task by 0.1 s. It unpickles as a
    plain PartitionInputs of the same inputs, in the same order."""

    _parts: tuple[bytes, ...] | None = None

    @classmethod
    def of(cls, parts: Iterable[tuple[Sequence[PartitionInput], bytes | None]]) -> PartitionInputs:
        """The inputs of `parts` in order, each part with its pickle (None: pickled now)."""
        parts = list(parts)
        inputs = cls(tp for part, _ in parts for tp in part)
        inputs._parts = tuple(blob if blob is not None else pickle_inputs(part) for part, blob in parts if part)
        return inputs

    def __reduce__(self):
        parts = self._parts if self._parts is not None else (pickle_inputs(self),)
        return (_unpickled_inputs, (parts,))


def pickle_inputs(inputs: Sequence[PartitionInput]) -> bytes:
    """A part of PartitionInputs as PartitionInputs.of takes it."""
    return pickle.dumps(tuple(inputs), pickle.HIGHEST_PROTOCOL)


def _unpickled_inputs(parts: tuple[bytes, ...]) -> PartitionInputs:
    return PartitionInputs(tp for blob in parts for tp in pickle.loads(blob))


@dataclass(frozen=True)
class LagTask:
    """One Spark task of the lag stage: a range of buckets of topic partitions, the commits to
    read (the run's lag input), the instants of the now rows, the files of the tables before."""

    warehouse: str
    run_id: str
    object_store: ObjectStoreSettings | None
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
    """A lag task's files to add (partition_end_offsets, group_lag), what it sets of its
    partitions' lag_checkpoints rows (the driver lays it over the previous rows), counters and
    CPU seconds by step (filled in as the task goes, hence not frozen)."""

    end_offset_files: list[WrittenFile] = field(default_factory=list)
    lag_files: list[WrittenFile] = field(default_factory=list)
    checkpoints: list[dict] = field(default_factory=list)
    batches: int = 0
    lag_rows: int = 0
    history_partitions: int = 0
    lookups: int = 0
    seconds: dict = field(default_factory=dict)
    # of its rows of kind now, the furthest behind (lib.lake.behind.behind_now; group_lag's
    # schema): what the run's summary prints is the first of all tasks' (None: none written)
    furthest_behind: pa.Table | None = None
