"""What the driver hands a lag task (lib.lake.lag_task) and gets back: typed, picklable, and
light (no numba), so the driver never loads the kernels."""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from lib.source.topic_log import ScanStart, TopicPartitionLog

NOW_FILES = "now"  # group_lag files of kind-now rows: named now-<at ms>-<run>-...


def now_file_prefix(now_ms: int) -> str:
    return f"{NOW_FILES}-{now_ms}"


def now_file_at(name: str) -> int | None:
    """The --now whose rows a group_lag file holds, from its name (None: not such a file)."""
    parts = name.split("/")[-1].split("-")
    if len(parts) > 2 and parts[0] == NOW_FILES and parts[1].isdigit():
        return int(parts[1])
    return None


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


def earlier_rows(checkpoint: dict) -> EarlierRows | None:
    """EarlierRows from a lag_checkpoints row (None: written by an earlier version, which
    did not keep the account)."""
    if checkpoint.get("log_end_offset") is None:
        return None
    return EarlierRows(
        checkpoint.get("at_ms"),
        int(checkpoint["next_offset"]),
        checkpoint.get("topic_id"),
        int(checkpoint["log_end_offset"]),
        checkpoint.get("first_at_ms"),
        checkpoint.get("first_offset"),
    )


@dataclass(frozen=True)
class PartitionInput:
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
    previous: dict | None = None  # its lag_checkpoints row, carried when nothing is read


@dataclass(frozen=True)
class LagTask:
    warehouse: str
    run_id: str
    object_store: object
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
    end_offset_files: list[dict] = field(default_factory=list)
    lag_files: list[dict] = field(default_factory=list)
    checkpoints: list[dict] = field(default_factory=list)
    batches: int = 0
    lag_rows: int = 0
    history_partitions: int = 0
    lookups: int = 0
    seconds: dict = field(default_factory=dict)
