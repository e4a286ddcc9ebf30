"""How a commit names the replay run that made it: the userMetadata of every commit of a run
is `offsets-lake run <run id>` (see DESCRIBE HISTORY); a roll-back's is `offsets-lake rollback
of run <run id>`. The run's checkpoint lives in replay_checkpoints only."""

from __future__ import annotations

RUN_TAG = "offsets-lake run "
ROLLBACK_TAG = "offsets-lake rollback of run "


def run_tag(run_id: str) -> str:
    return f"{RUN_TAG}{run_id}"


def tagged_run(user_metadata: str | None) -> str | None:
    """The run id a commit's userMetadata names, or None for commits made by anything else
    (older runs appended their checkpoint after a space: ignored)."""
    if not user_metadata or not user_metadata.startswith(RUN_TAG):
        return None
    return user_metadata[len(RUN_TAG) :].split(" ", 1)[0]
