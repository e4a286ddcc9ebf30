"""How a commit names the replay run that made it: the userMetadata of every commit of a run
is `offsets-lake run <run id>` (see DESCRIBE HISTORY); a roll-back's is `offsets-lake rollback
of run <run id>`. The run's checkpoint lives in replay_checkpoints only. A run that rebuilds partitions
from their first record (--full, or a partition's first run) says so in its offsets_log
commit: `offsets-lake run <run id> rebuilt 0,7,12`."""

from __future__ import annotations

import datetime as dt

RUN_TAG = "offsets-lake run "
ROLLBACK_TAG = "offsets-lake rollback of run "
RUN_ID_TIME = "%Y%m%dT%H%M%SZ"  # a run id starts with its start time, UTC (then a random suffix)


def run_tag(run_id: str) -> str:
    return f"{RUN_TAG}{run_id}"


REBUILT = " rebuilt "


def rebuilt_tag(run_id: str, partitions: list[int]) -> str:
    return f"{RUN_TAG}{run_id}{REBUILT}{','.join(map(str, partitions))}"


def rebuilt_partitions(user_metadata: str | None) -> list[int] | None:
    """The partitions a commit's userMetadata says its run rebuilt (None: not such a commit)."""
    if tagged_run(user_metadata) is None or REBUILT not in (user_metadata or ""):
        return None
    listed = (user_metadata or "").split(REBUILT, 1)[1]
    return [int(p) for p in listed.split(",") if p.strip()]


def tagged_run(user_metadata: str | None) -> str | None:
    """The run id a commit's userMetadata names, or None for commits made by anything else
    (older runs appended their checkpoint after a space: ignored)."""
    if not user_metadata or not user_metadata.startswith(RUN_TAG):
        return None
    return user_metadata[len(RUN_TAG) :].split(" ", 1)[0]


def run_started_ms(run_id: str) -> int | None:
    """When a run started, from its id (RUN_ID_TIME), in epoch ms; None for an id of another shape."""
    try:
        started = dt.datetime.strptime(run_id.split("-", 1)[0], RUN_ID_TIME)
    except ValueError:
        return None
    return int(started.replace(tzinfo=dt.UTC).timestamp() * 1000)
