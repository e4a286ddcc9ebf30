"""Delta's log clean-up (delta-rs, at a checkpoint: the commits older than the log retention,
30 days by default, are removed) must not make a completed run look dead: the roll-back would
take back, or remove, a table no run had changed since."""

from __future__ import annotations

import datetime as dt
import glob
import os
import time

import pyarrow as pa

from lib.lake.delta import (
    CompletedRuns,
    committed_version,
    completed_runs,
    open_delta,
    overwrite_small_table,
    read_small_table,
    roll_back_incomplete_runs,
    table_path,
)
from lib.lake.run_tags import run_started_ms, run_tag
from schemas import tables as T

FIRST = "20261001T120000Z-0000aaaa"  # the warehouse's first run
LATER = "20261101T{:06d}Z-later{:03d}"  # the runs after it, a second apart


def _pending(group: str) -> pa.Table:
    rows = [
        {
            "group_id": group,
            "topic": "orders",
            "partition": 0,
            "producer_id": 7,
            "committed_offset": 42,
            "offsets_partition": 3,
            "log_offset": 9,
        }
    ]
    schema = T.PENDING_TRANSACTIONAL_OFFSETS.arrow_schema
    return pa.Table.from_pylist([{f.name: r.get(f.name) for f in schema} for r in rows], schema=schema)


def _checkpoint_row() -> pa.Table:
    schema = T.REPLAY_CHECKPOINTS.arrow_schema
    row = {f.name: None for f in schema}
    row.update(offsets_partition=3, next_log_offset=100, records_read=100, trailing_bytes=0, run_id=FIRST)
    row["finished_at"] = dt.datetime(2026, 10, 1, 12, 0, 1, tzinfo=dt.UTC)
    return pa.Table.from_pylist([row], schema=schema)


def test_run_ids_say_when_their_run_started():
    assert run_started_ms("20261001T120000Z-0000aaaa") == 1_790_856_000_000  # 20,727 days and 12 h after 1970-01-01
    assert run_started_ms("not-a-run") is None


def test_completed_runs_past_the_oldest_commit_kept():
    whole = CompletedRuns(frozenset({FIRST}))
    assert FIRST in whole and LATER.format(1, 1) not in whole
    cut = CompletedRuns(frozenset({LATER.format(5, 5)}), horizon_ms=run_started_ms(LATER.format(3, 3)))
    assert FIRST in cut  # started before the oldest commit kept: completed or rolled back since
    assert LATER.format(5, 5) in cut  # named by a commit
    assert LATER.format(4, 4) not in cut  # after the horizon and named by none: dead
    assert "not-a-run" not in cut and None not in cut


def test_a_table_untouched_since_a_cleaned_up_run_stays(tmp_path):
    wh = str(tmp_path / "wh")
    checkpoints, pending = table_path(wh, T.REPLAY_CHECKPOINTS), table_path(wh, T.PENDING_TRANSACTIONAL_OFFSETS)
    overwrite_small_table(pending, T.PENDING_TRANSACTIONAL_OFFSETS, _pending("g"), run_tag(FIRST))
    overwrite_small_table(checkpoints, T.REPLAY_CHECKPOINTS, _checkpoint_row(), run_tag(FIRST))
    # later runs commit their checkpoints only (nothing pending changes): a checkpoint at 99
    for n in range(1, 121):
        overwrite_small_table(checkpoints, T.REPLAY_CHECKPOINTS, _checkpoint_row(), run_tag(LATER.format(n, n)))
    # 40 days on, the next checkpoint (199) cleans up the commits before 99
    old = time.time() - 40 * 86_400
    for f in glob.glob(os.path.join(checkpoints, "_delta_log", "*")):
        os.utime(f, (old, old))
    for n in range(121, 201):
        overwrite_small_table(checkpoints, T.REPLAY_CHECKPOINTS, _checkpoint_row(), run_tag(LATER.format(n, n)))
    kept = [h["version"] for h in open_delta(checkpoints).history()]
    assert min(kept) == 99  # (the scenario: the first run's checkpoint commit is gone)
    completed = completed_runs(checkpoints)
    assert FIRST not in completed.runs and FIRST in completed

    assert roll_back_incomplete_runs(wh, T.REPLAY_TABLES, T.REPLAY_CHECKPOINTS) == []
    assert read_small_table(pending).to_pylist() == _pending("g").to_pylist()
    assert committed_version(pending, completed) == 0  # (the coordinator reads it too)

    # a run that dies now, after the oldest commit kept, is still taken back
    dead = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-dead0000"
    overwrite_small_table(pending, T.PENDING_TRANSACTIONAL_OFFSETS, _pending("h"), run_tag(dead))
    assert committed_version(pending, completed_runs(checkpoints)) == 0
    (back,) = roll_back_incomplete_runs(wh, T.REPLAY_TABLES, T.REPLAY_CHECKPOINTS)
    assert (back["table"], back["run"], back["to_version"]) == ("pending_transactional_offsets", dead, 0)
    assert read_small_table(pending).to_pylist() == _pending("g").to_pylist()
