"""What crosses between the driver and the replay's Spark workers, typed: the driver plans
ReplayTasks (one offsets partition each), packs them into TaskGroups (one Spark task each) and
ships those; lib.lake.partition_task runs them. Frozen: a worker never changes its input, and
the driver makes a changed copy (dataclasses.replace) to run a task again."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from lib.storage import ObjectStoreSettings


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
