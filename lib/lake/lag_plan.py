"""The lag stage's plan helpers shared by the driver and its tasks; what crosses between them
is in lib.lake.seams (LagTask, PartitionInput, LagTaskResult). Light (no numba), so the driver
never loads the kernels."""

from __future__ import annotations

from lib.lake.seams import EarlierRows

NOW_FILES = "now"  # group_lag files of kind-now rows: named now-<at ms>-<run>-...
# The partitions' tails (lib.lake.lag_rows.Tail), one Arrow file per lag task: a file is the
# stage's state once a committed lag_checkpoints row names it (`tail_file`), garbage before and
# once none does (lib.spark.lag removes those after its commit point)
LAG_TAILS = "_lag_tails"


def now_file_prefix(now_ms: int) -> str:
    return f"{NOW_FILES}-{now_ms}"


def now_file_at(name: str) -> int | None:
    """The --now whose rows a group_lag file holds, from its name (None: not such a file)."""
    parts = name.split("/")[-1].split("-")
    if len(parts) > 2 and parts[0] == NOW_FILES and parts[1].isdigit():
        return int(parts[1])
    return None


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
