"""A run killed inside the stages after the replay (lag, assignment audit), then run again as a
scheduler retries a failed task, ends exactly where an uninterrupted run ends.

On the bundled ten-day sample: run A replays the log dir as it was a day before the sample's
end (every partition cut there, consumed topics included); the log dir then grows to the whole
sample and run B replays it incrementally. B is killed (SIGKILL, the whole process group) at
each commit point of the lag stage and of the assignment audit, and at random moments inside
the lag stage; the retry must leave every table, row for row, as A followed by an
uninterrupted B (run ids and commit times aside), and every commit of every table must name
the run that made it."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import time

import pytest

from lib.lake.delta import commit_history, open_delta, table_exists, table_path
from lib.lake.run_tags import ROLLBACK_TAG, tagged_run
from lib.testdata.logcut import cut_log_dir_at
from schemas import tables as T
from tests.helpers import REPO, replay_job

pytestmark = pytest.mark.spark

SAMPLE = os.path.join(REPO, "samples", "days", "logdir")
with open(os.path.join(REPO, "samples", "days", "NOW")) as _f:
    NOW = int(_f.read())
DAY = 86_400_000
# where the input was read and when, the name of a file of the lag's tails: differ from run to run
IGNORED = {"run_id", "finished_at", "tail_file"}
COMMIT_POINTS = [
    "lag_start",
    "after_commit:partition_end_offsets",
    "after_commit:group_lag",
    "after_commit:lag_checkpoints",  # the run's last commit
    "after_commit:assignment_audit",  # in the replay's commits (the audit is in its pass)
]


def tables(warehouse) -> dict[str, list[tuple]]:
    """Every table's rows (delta-rs), without IGNORED columns, sorted."""
    out = {}
    for table in T.ALL_TABLES:
        path = table_path(str(warehouse), table)
        if not table_exists(path):
            continue
        data = open_delta(path).to_pyarrow_table()
        names = [n for n in data.column_names if n not in IGNORED]
        out[table.name] = sorted(repr(r) for r in data.select(names).to_pylist())
    return out


def lag_tails(warehouse) -> dict[tuple[str, int], list[tuple]]:
    """Each consumed partition's tail, from the file its lag checkpoint names (a file may hold
    older tails of partitions that have moved on to another); and no file in _lag_tails that
    no checkpoint names."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    from lib.lake.lag_plan import LAG_TAILS

    rows = open_delta(table_path(str(warehouse), T.LAG_CHECKPOINTS)).to_pyarrow_table().to_pylist()
    file_of = {(r["topic"], r["partition"]): r["tail_file"] for r in rows if r["tail_file"]}
    folder = os.path.join(str(warehouse), LAG_TAILS)
    assert set(os.listdir(folder)) == set(file_of.values())
    out: dict[tuple[str, int], list[tuple]] = {}
    for name in set(file_of.values()):
        with pa.memory_map(os.path.join(folder, name)) as f:
            table = ipc.open_file(f).read_all()
        for r in table.to_pylist():
            key = (r.pop("topic"), r.pop("partition"))
            if file_of.get(key) == name:
                out.setdefault(key, []).append(tuple(r.values()))
    return out


def assert_every_commit_names_its_run(warehouse) -> None:
    for table in T.ALL_TABLES:
        path = table_path(str(warehouse), table)
        if not table_exists(path):
            continue
        for version, meta in commit_history(path):
            assert tagged_run(meta) is not None or (meta or "").startswith(ROLLBACK_TAG), (table.name, version, meta)


def differing(got: dict, want: dict) -> list[str]:
    return [
        f"{name}: {len(set(got.get(name, [])) - set(want.get(name, [])))} rows not expected, "
        f"{len(set(want.get(name, [])) - set(got.get(name, [])))} missing, {len(got.get(name, []))} rows"
        for name in sorted(set(got) | set(want))
        if got.get(name) != want.get(name)
    ]


@pytest.fixture(scope="module")
def states(replay_logdir, tmp_path_factory):
    """The log dir (grown to the whole sample), the warehouse after run A, the tables after an
    uninterrupted run B, and B's lag stage seconds."""
    tmp = tmp_path_factory.mktemp("stage-crash")
    log = tmp / "log"
    cut_log_dir_at(SAMPLE, str(log), NOW - DAY)
    replay_logdir(log, tmp / "prefix", NOW - DAY)
    shutil.rmtree(log)
    shutil.copytree(SAMPLE, log)
    shutil.copytree(tmp / "prefix", tmp / "after")
    b = replay_logdir(log, tmp / "after", NOW)
    assert b.incremental and b.lag is not None and b.lag.partitions_scanned > 0
    lag_seconds = sum(s for k, s in b.stage_seconds.items() if k.startswith("lag_"))
    return {
        "log": log,
        "prefix": tmp / "prefix",
        "after_wh": tmp / "after",
        "after": tables(tmp / "after"),
        "after_tails": lag_tails(tmp / "after"),
        "lag_seconds": lag_seconds,
    }


def retry_and_compare(replay_logdir, states, wh) -> None:
    held = (wh / "_writer.lock").exists()  # not when the kill came after the run let it go
    result = replay_logdir(states["log"], wh, NOW)
    assert (result.took_over_lock is not None) == held
    problems = differing(tables(wh), states["after"])
    assert not problems, "the retry differs from an uninterrupted run:\n" + "\n".join(problems)
    assert lag_tails(wh) == states["after_tails"]
    assert_every_commit_names_its_run(wh)


def test_the_prefix_lacks_what_the_grown_log_adds(states):
    """The scenario has teeth: topic partitions appear after the cut (the real-broker capture's
    topics), and the grown log adds lag rows and audited generations."""

    def read(warehouse) -> set:
        data = open_delta(table_path(str(warehouse), T.LAG_CHECKPOINTS)).to_pyarrow_table(
            columns=["topic", "partition"]
        )
        return set(zip(data["topic"].to_pylist(), data["partition"].to_pylist()))

    prefix = tables(states["prefix"])
    assert {"live-clicks", "live-orders"} <= {t for t, _ in read(states["after_wh"]) - read(states["prefix"])}
    for name in ("group_lag", "partition_end_offsets", "assignment_audit", "offsets_log"):
        assert len(states["after"][name]) > len(prefix[name]), name


def test_every_commit_of_every_stage_names_its_run(states):
    assert_every_commit_names_its_run(states["prefix"])
    assert_every_commit_names_its_run(states["after_wh"])


@pytest.mark.parametrize("point", COMMIT_POINTS)
def test_killed_at_a_stage_commit_point_then_retried(replay_logdir, states, tmp_path, point):
    wh = tmp_path / "wh"
    shutil.copytree(states["prefix"], wh)
    proc = replay_job(states["log"], wh, {"OFFSETS_LAKE_KILL_AT": point}, now=NOW)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == -signal.SIGKILL, err[-3000:]
    assert err.rstrip().endswith(f"offsets-lake: SIGKILL at crash point {point}"), err[-2000:]
    assert (wh / "_writer.lock").exists()
    retry_and_compare(replay_logdir, states, wh)


def test_killed_at_random_moments_inside_the_lag_stage_then_retried(replay_logdir, states, tmp_path):
    """The run is held at the lag stage's start, released, and its process group killed after a
    draw over the stage's duration; a draw that lands after the run ended is drawn again."""
    rng = random.Random(20261125)
    kills = draws = 0
    while kills < 2:
        draws += 1
        assert draws <= 8, f"{draws - 1} draws, {kills} kills: the stage ends before the drawn moments"
        wh = tmp_path / f"wh{draws}"
        shutil.copytree(states["prefix"], wh)
        hold = str(tmp_path / f"hold{draws}")
        env = {"OFFSETS_LAKE_PAUSE_AT": "lag_start", "OFFSETS_LAKE_PAUSE_FILE": hold}
        proc = replay_job(states["log"], wh, env, now=NOW, start_new_session=True)
        deadline = time.monotonic() + 300
        while not os.path.exists(hold + ".paused"):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the run never reached its lag stage"
            time.sleep(0.05)
        open(hold + ".go", "w").close()
        try:
            proc.wait(timeout=rng.uniform(0.05, 0.9) * states["lag_seconds"])
            continue  # the stage ended before the moment: draw again
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
        kills += 1
        retry_and_compare(replay_logdir, states, wh)


def test_a_warehouse_of_the_version_before_tails_goes_on(replay_logdir, states, tmp_path):
    """Run A's warehouse as the version before the lag's tails left it: lag_checkpoints without
    its tail_file column, no _lag_tails folder. Run B then reads the partitions' rows where its
    points need them, ends with the tables of an uninterrupted B, and keeps tails from then on."""
    from deltalake import write_deltalake

    wh = tmp_path / "wh"
    shutil.copytree(states["prefix"], wh)
    path = table_path(str(wh), T.LAG_CHECKPOINTS)
    write_deltalake(
        path, open_delta(path).to_pyarrow_table().drop_columns(["tail_file"]), mode="overwrite", schema_mode="overwrite"
    )
    shutil.rmtree(wh / "_lag_tails")
    assert "tail_file" not in open_delta(path).to_pyarrow_table().column_names
    replay_logdir(states["log"], wh, NOW)
    problems = differing(tables(wh), states["after"])
    assert not problems, "B after the version before differs from B:\n" + "\n".join(problems)
    tails = lag_tails(wh)
    assert tails and set(tails) <= set(states["after_tails"])
