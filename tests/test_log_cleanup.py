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
    Commit,
    CompletedRuns,
    commits,
    committed_version,
    completed_runs,
    newest_commit,
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


def _history(commits: list[tuple[int, str, int]]):
    """A checkpoints table's history as DeltaTable.history(limit) gives it, from (version, run,
    commit timestamp) newest first; and the limits asked, in order."""
    entries = [{"version": v, "timestamp": ts, "userMetadata": run_tag(run)} for v, run, ts in commits]
    asked: list[int | None] = []

    def history(limit: int | None) -> list[dict]:
        asked.append(limit)
        return entries if limit is None else entries[:limit]

    return history, asked


def test_completed_runs_past_the_oldest_commit_kept():
    history, _ = _history([(0, FIRST, run_started_ms(FIRST) + 1_000)])
    whole = CompletedRuns(history)
    assert FIRST in whole and LATER.format(1, 1) not in whole
    # the oldest commit kept is version 7, stamped when the run of 00:00:03 started
    history, _ = _history([(7, LATER.format(5, 5), run_started_ms(LATER.format(3, 3)))])
    cut = CompletedRuns(history)
    assert FIRST in cut  # started before the oldest commit kept: completed or rolled back since
    assert LATER.format(5, 5) in cut  # named by a commit
    assert LATER.format(4, 4) not in cut  # after the horizon and named by none: dead
    assert "not-a-run" not in cut and None not in cut
    assert cut.named(LATER.format(5, 5)) and not cut.named(FIRST)


FIVE_MINUTES = 300_000
T0 = run_started_ms("20261101T000000Z-x")


def _run(n: int) -> str:
    """The n-th of runs five minutes apart from T0 (its checkpoint commit is version n)."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime((T0 + n * FIVE_MINUTES) / 1000)) + f"-run{n:05d}"


def test_completed_runs_read_the_history_only_as_far_back_as_a_run_started():
    # 300 runs, each committing its checkpoint 30 s after it started; run 283's host clock was
    # 40 minutes ahead (its id says 40 minutes later than its commit's stamp)
    commits = [(n, _run(n), T0 + n * FIVE_MINUTES + 30_000) for n in range(299, -1, -1)]
    ahead = 299 - 283
    commits[ahead] = (283, f"{_run(283 + 8).split('-')[0]}-run00283", T0 + 283 * FIVE_MINUTES + 30_000)

    history, asked = _history(commits)
    completed = CompletedRuns(history)
    assert _run(299) in completed and _run(284) in completed
    assert asked == [16]  # the newest 16 commits: versions 299 to 284
    dead = _run(300)  # started after the newest commit, committed none
    assert dead not in completed and not completed.named(dead)
    assert asked == [16]  # the oldest commit read (284) is over an hour older than it
    # 283's id says 00:00 + 291 * 5 min: the commits read reach back only 35 minutes before that
    assert completed.named(commits[ahead][1])
    assert asked == [16, 256]
    assert _run(100) in completed and asked == [16, 256]
    assert _run(10) in completed and asked == [16, 256, None]  # the whole log, from version 0
    assert "not-a-run" not in completed

    history, asked = _history(commits)
    assert "not-a-run" not in CompletedRuns(history)
    assert asked == [16, 256, None]  # an id without a time: only the whole history answers


def test_a_commit_stamped_before_the_newest_checkpoint_commit_is_sound():
    # a checkpoint commit every five minutes, 30 s after its run started
    commits = [(n, _run(n), T0 + n * FIVE_MINUTES + 30_000) for n in range(299, -1, -1)]
    history, asked = _history(commits)
    completed = CompletedRuns(history)
    assert completed.made(Commit(4, None, None))  # not a run's (a roll-back's RESTORE)
    assert asked == []
    # a quiet table's newest commit, by run 12 (1,435 minutes before the newest checkpoint
    # commit): sound without reading back to run 12's checkpoint commit
    assert completed.made(Commit(3, _run(12), T0 + 12 * FIVE_MINUTES + 20_000))
    assert asked == [16]
    # a run that started after the newest checkpoint commit and died: not sound
    assert not completed.made(Commit(5, _run(300), T0 + 300 * FIVE_MINUTES + 20_000))
    assert asked == [16]
    # stamped 30 minutes before the newest checkpoint commit (within the clock margin) by a
    # run no commit names: judged by the history back to an hour before its start
    early = T0 + 299 * FIVE_MINUTES - 30 * 60_000
    run = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(early / 1000)) + "-early000"
    assert not completed.made(Commit(6, run, early + 20_000))
    assert asked == [16, 256]
    assert completed.made(Commit(7, _run(280), early + 20_000))  # (named: in the pages read)


def test_the_newest_commit_is_its_versions_log_file(tmp_path):
    from deltalake import CommitProperties

    path = str(tmp_path / "pending")
    assert newest_commit(path) is None
    os.makedirs(os.path.join(path, "_delta_log"))
    assert newest_commit(path) is None  # a folder, no table
    overwrite_small_table(path, T.PENDING_TRANSACTIONAL_OFFSETS, _pending("g"), run_tag(FIRST))
    first = newest_commit(path)
    assert first is not None and (first.version, first.run) == (0, FIRST)
    assert first == commits(path, limit=1)[0]  # (delta-rs's history says the same)
    overwrite_small_table(path, T.PENDING_TRANSACTIONAL_OFFSETS, _pending("h"), run_tag(LATER.format(1, 1)))
    open_delta(path).restore(0, commit_properties=CommitProperties(custom_metadata={"userMetadata": "not a run"}))
    restored = newest_commit(path)
    assert restored is not None and (restored.version, restored.run) == (2, None)
    assert restored == commits(path, limit=1)[0]
    assert restored.at_ms is not None and abs(restored.at_ms - time.time() * 1000) < 600_000


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
    assert not completed.named(FIRST) and FIRST in completed

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
