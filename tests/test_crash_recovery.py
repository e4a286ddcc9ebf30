"""A replay killed with SIGKILL, or racing another replay, never leaves a half-written table.

Run 1 replays the first phase of a log (the "before" state); an uninterrupted run 2 over the
grown log gives the "after" state. Run 2 is then repeated in a separate process that is
SIGKILLed at each crash point (during the read, before the commits, between table commits)
and at random moments. After each kill every table must equal its before or its after state,
with the checkpoint its newest commit names agreeing with its rows; the next run must roll
back what the dead run committed and end exactly in the after state."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys

import pytest

from lib.lake.delta import commit_history, completed_runs, read_committed
from lib.lake.run_tags import tagged_run
from tests.helpers import KEYS, NOW, STATE_TABLES, phases, replay_job, rows, snapshot

pytestmark = pytest.mark.spark

KILL_POINTS = [
    "after_decode",
    "before_commit",
    "after_commit:offsets_log",
    "after_commit:group_offsets",
    "after_commit:consumer_groups",
    "after_commit:group_fold_state",
]


def job(log_dir, warehouse, env_extra=None, **popen):
    return replay_job(log_dir, warehouse, env_extra, ("spark.sql.shuffle.partitions=2",), **popen)


def checkpoints(spark, warehouse) -> dict[int, int]:
    return {r["offsets_partition"]: r["next_log_offset"] for r in rows(spark, str(warehouse), "replay_checkpoints")}


@pytest.fixture(scope="module")
def states(spark, replay_logdir, tmp_path_factory):
    """Log dirs of phase 1 and of phases 1+2, the warehouse after run 1, and both snapshots."""
    tmp = tmp_path_factory.mktemp("crash")
    builders, steps = phases()
    steps[0]()
    for b in builders:
        b.write(str(tmp / "log1"))
    steps[1]()
    for b in builders:
        b.write(str(tmp / "log2"))
    replay_logdir(tmp / "log1", tmp / "before", NOW)
    shutil.copytree(tmp / "before", tmp / "after")
    replay_logdir(tmp / "log2", tmp / "after", NOW)
    return {
        "tmp": tmp,
        "log2": tmp / "log2",
        "before_wh": tmp / "before",
        "before": snapshot(spark, tmp / "before"),
        "after": snapshot(spark, tmp / "after"),
        "before_cp": checkpoints(spark, tmp / "before"),
        "after_cp": checkpoints(spark, tmp / "after"),
    }


def assert_each_table_before_or_after(spark, warehouse, states) -> dict[str, str]:
    """Every table is wholly at one of the two states, and its newest run commit is the dead
    run's exactly when it is at the after state. Returns table -> "before" / "after"."""
    got = snapshot(spark, warehouse)
    completed = completed_runs(str(warehouse / "replay_checkpoints"))
    where = {}
    for table in STATE_TABLES:
        if got[table] == states["after"][table] and got[table] != states["before"][table]:
            where[table] = "after"
        elif got[table] == states["before"][table]:
            where[table] = "before"
        else:
            raise AssertionError(f"{table} is neither the before nor the after state: half-written")
        history = commit_history(str(warehouse / table))
        newest_run = next(run for _, meta in history if (run := tagged_run(meta)))
        if states["before"][table] != states["after"][table]:
            assert (newest_run not in completed) == (where[table] == "after"), table
    assert checkpoints(spark, warehouse) == states["before_cp"], "checkpoint moved without the run completing"
    return where


@pytest.mark.parametrize("point", KILL_POINTS)
def test_kill_at_a_crash_point_then_recover(spark, replay_logdir, states, tmp_path, point):
    wh = tmp_path / "wh"
    shutil.copytree(states["before_wh"], wh)
    proc = job(states["log2"], wh, {"OFFSETS_LAKE_KILL_AT": point})
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == -signal.SIGKILL
    assert err.rstrip().endswith(f"offsets-lake: SIGKILL at crash point {point}"), err[-2000:]
    where = assert_each_table_before_or_after(spark, wh, states)
    committed = point.split(":", 1)[1] if ":" in point else None
    order = list(STATE_TABLES)  # commit order
    done = set(order[: order.index(committed) + 1]) if committed else set()
    for table in STATE_TABLES:
        if states["before"][table] != states["after"][table]:
            assert where[table] == ("after" if table in done else "before"), table

    # tables that had nothing to change (empty before and after) get no commit
    completed = completed_runs(str(wh / "replay_checkpoints"))
    committed_by_dead = {t for t in order if tagged_run(commit_history(str(wh / t), 1)[0][1]) not in completed}
    assert committed_by_dead <= done
    assert {t for t in done if states["before"][t] != states["after"][t]} <= committed_by_dead
    # a reader outside a run (the coordinator's warm start) sees the before state in every table
    for table in STATE_TABLES:
        seen = read_committed(str(wh / table), completed)
        keys = sorted(tuple(str(r[k]) for k in KEYS[table]) for r in (seen.to_pylist() if seen is not None else []))
        assert keys == [tuple(str(r[k]) for k in KEYS[table]) for r in states["before"][table]], table
    result = replay_logdir(states["log2"], wh, NOW)
    assert result.took_over_lock is not None and result.took_over_lock["owner"].startswith("replay run ")
    rolled = {r["table"] for r in result.rolled_back}
    assert rolled == committed_by_dead
    assert snapshot(spark, wh) == states["after"]
    assert checkpoints(spark, wh) == states["after_cp"]


def test_kill_at_random_moments_then_recover(spark, replay_logdir, states, tmp_path):
    """Two kills at moments drawn over an uninterrupted run's duration; a draw that lands after
    the run ended is drawn again, not counted as a kill."""
    import time

    shutil.copytree(states["before_wh"], tmp_path / "timed")
    started = time.monotonic()
    proc = job(states["log2"], tmp_path / "timed")
    proc.communicate(timeout=300)
    duration = time.monotonic() - started
    assert proc.returncode == 0
    rng = random.Random(20261122)
    kills, draws = 0, 0
    while kills < 2:
        draws += 1
        assert draws <= 8, f"{draws - 1} draws, {kills} kills: the run ends before the drawn moments"
        wh = tmp_path / f"wh{draws}"
        shutil.copytree(states["before_wh"], wh)
        proc = job(states["log2"], wh, start_new_session=True)
        delay = rng.uniform(0.2, 0.95) * duration
        try:
            proc.wait(timeout=delay)
            continue  # finished before the moment: draw again
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the whole process group: driver JVM included
            proc.wait()
        if proc.returncode == 0:
            continue  # it ended as the kill came (between the wait's last look and the kill): drawn again
        assert proc.returncode == -signal.SIGKILL
        kills += 1
        if checkpoints(spark, wh) == states["after_cp"]:
            # killed after its commit point (while stopping Spark): the after state
            assert snapshot(spark, wh) == states["after"]
        else:
            assert_each_table_before_or_after(spark, wh, states)
        replay_logdir(states["log2"], wh, NOW)
        assert snapshot(spark, wh) == states["after"], f"delay {delay:.1f}s"
        assert checkpoints(spark, wh) == states["after_cp"]


def test_a_live_writer_makes_a_second_run_fail_clearly(spark, states, tmp_path):
    from lib.lake.lock import WarehouseLock

    wh = tmp_path / "wh"
    shutil.copytree(states["before_wh"], wh)
    with WarehouseLock(str(wh), "a test holding the warehouse"):
        proc = job(states["log2"], wh)
        out, err = proc.communicate(timeout=300)
    assert proc.returncode == 75
    assert (
        f"warehouse {wh} is being written by a test holding the warehouse (pid {os.getpid()} on {socket.gethostname()}"
    ) in err
    assert "no table was changed" in err
    assert snapshot(spark, wh) == states["before"]


def test_a_second_replay_while_the_first_holds_the_lock_exits_75(spark, states, tmp_path):
    """The first run is held inside its locked section (before its commits) until the second
    has started and ended: the second must exit 75 naming the first, the first must finish."""
    import time

    wh = tmp_path / "wh"
    shutil.copytree(states["before_wh"], wh)
    pause = str(tmp_path / "hold")
    first = job(states["log2"], wh, {"OFFSETS_LAKE_PAUSE_AT": "before_commit", "OFFSETS_LAKE_PAUSE_FILE": pause})
    deadline = time.monotonic() + 300
    while not os.path.exists(pause + ".paused"):
        assert first.poll() is None, first.communicate()
        assert time.monotonic() < deadline, "the first run never reached its commits"
        time.sleep(0.1)
    second = job(states["log2"], wh)
    _, second_err = second.communicate(timeout=300)
    open(pause + ".go", "w").close()
    _, first_err = first.communicate(timeout=300)
    assert (first.returncode, second.returncode) == (0, 75), (first_err, second_err)
    assert "is being written by replay run" in second_err
    assert snapshot(spark, wh) == states["after"]
    assert checkpoints(spark, wh) == states["after_cp"]
    assert not (wh / "_writer.lock").exists()


def test_a_failed_commit_is_taken_back_at_once(spark, replay_logdir, states, tmp_path, monkeypatch):
    """An exception between table commits (a Delta conflict, say) rolls the run back before it
    propagates: the tables stay at the before state without waiting for the next run."""
    import lib.spark.pipeline as pipeline

    wh = tmp_path / "wh"
    shutil.copytree(states["before_wh"], wh)
    real = pipeline.commit_files

    def failing(path, table, files, tag, **kwargs):
        if table.name == "consumer_groups":
            raise RuntimeError("simulated commit conflict")
        return real(path, table, files, tag, **kwargs)

    monkeypatch.setattr(pipeline, "commit_files", failing)
    with pytest.raises(RuntimeError, match="simulated commit conflict"):
        replay_logdir(states["log2"], wh, NOW)
    assert snapshot(spark, wh) == states["before"]
    assert checkpoints(spark, wh) == states["before_cp"]
    assert not (wh / "_writer.lock").exists()
    monkeypatch.setattr(pipeline, "commit_files", real)
    result = replay_logdir(states["log2"], wh, NOW)
    assert result.rolled_back == []
    assert snapshot(spark, wh) == states["after"]


def test_a_stale_lock_is_taken_over(spark, replay_logdir, states, tmp_path):
    wh = tmp_path / "wh"
    shutil.copytree(states["before_wh"], wh)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (wh / "_writer.lock").write_text(
        json.dumps(
            {
                "pid": dead.pid,
                "host": socket.gethostname(),
                "owner": "replay run dead-one",
                "since": "2026-11-22T00:00:00+00:00",
            }
        )
    )
    result = replay_logdir(states["log2"], wh, NOW)
    assert result.took_over_lock["owner"] == "replay run dead-one"
    assert snapshot(spark, wh) == states["after"]
    assert not (wh / "_writer.lock").exists()


def test_an_empty_lock_file_of_a_writer_that_died_is_taken_over(spark, replay_logdir, states, tmp_path):
    """A writer killed between creating its lock file and filling it (or a power loss before
    the write reached the disk) leaves an empty file: once it is a few seconds old, the next
    run takes it over."""
    from lib.lake.lock import UNREADABLE_GRACE_SECONDS

    wh = tmp_path / "wh"
    shutil.copytree(states["before_wh"], wh)
    lock = wh / "_writer.lock"
    lock.write_bytes(b"")
    old = os.stat(lock).st_mtime - UNREADABLE_GRACE_SECONDS - 1
    os.utime(lock, (old, old))
    result = replay_logdir(states["log2"], wh, NOW)
    assert result.took_over_lock["owner"] == "unreadable lock file"
    assert snapshot(spark, wh) == states["after"]
    assert not lock.exists()


def test_a_lock_file_being_filled_is_not_taken_over(tmp_path):
    """An empty lock file younger than the grace period may be a live writer between its two
    steps: the newcomer looks again, and finds that writer once the file is filled."""
    import threading

    from lib.lake.lock import WarehouseBusyError, WarehouseLock

    lock = tmp_path / "_writer.lock"
    lock.write_bytes(b"")
    holder = {"pid": os.getpid(), "host": socket.gethostname(), "owner": "a slow writer", "since": "now"}
    filler = threading.Timer(1.0, lambda: lock.write_text(json.dumps(holder)))
    filler.start()
    with pytest.raises(WarehouseBusyError, match=r"is being written by a slow writer \(pid"):
        WarehouseLock(str(tmp_path), "a newcomer").acquire()
    filler.join()
    assert json.loads(lock.read_text()) == holder


def test_an_empty_lock_file_is_taken_over_after_the_grace_period(tmp_path):
    import time

    from lib.lake.lock import UNREADABLE_GRACE_SECONDS, WarehouseLock

    (tmp_path / "_writer.lock").write_bytes(b"")
    started = time.monotonic()
    with WarehouseLock(str(tmp_path), "a newcomer") as lock:
        assert time.monotonic() - started >= UNREADABLE_GRACE_SECONDS - 0.5
        assert lock.took_over["owner"] == "unreadable lock file"
        assert json.loads((tmp_path / "_writer.lock").read_text())["owner"] == "a newcomer"
    assert not (tmp_path / "_writer.lock").exists()
