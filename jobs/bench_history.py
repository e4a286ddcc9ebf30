"""What a run's questions of the warehouse's commit history cost on a warehouse a month old
(lib.lake.delta.CompletedRuns): `make bench`'s warehouses have a few commits, a warehouse
run every 5 minutes keeps 30 days of them (Delta's log retention), 8,640 in replay_checkpoints.

    python -m jobs.bench_history [--commits 8640] [--every 300] [--rounds 5] [--tree DIR]

Builds build/bench-history/wh (again when its shape differs): replay_checkpoints with a
checkpoint commit every `--every` seconds up to a minute ago, `--commits` of them, each naming
its run (an id 30 s older than the commit); group_offsets committed by every run (a busy table,
as long a log) and pending_transactional_offsets last by the run of 20 days ago (a quiet
cluster's).
The commits past a table's first are written as Delta log files directly, one data file each
(hard links of the first): delta-rs takes some 0.1 s a commit on such a log. A delta-rs
checkpoint at the newest commit, as delta-rs makes one every 100. Then, each in its own process, `--rounds`
times, every question as a run or the coordinator asks it:

- roll_back: roll_back_incomplete_runs over the two tables (each run's first step, for its
  replay tables and again for its lag tables);
- coordinator: committed_version of the two tables (the coordinator's load of a partition);
- lag_plan: whether the newest run is named by a commit (the lag stage's plan).

Prints each as `name value unit` (the median, ms). `--tree`: the lib of another checkout
(e.g. an older commit's worktree), to measure it on the same warehouse."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUESTIONS = ("roll_back", "coordinator", "lag_plan")
QUIET_DAYS = 20


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="bench_history")
    p.add_argument("--commits", type=int, default=8640)
    p.add_argument("--every", type=int, default=300, help="seconds between checkpoint commits")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--dir", default=os.path.join(HERE, "build", "bench-history"))
    p.add_argument("--tree", default=HERE, help="the checkout whose lib answers the questions")
    p.add_argument("--ask", choices=QUESTIONS, help=argparse.SUPPRESS)  # one process's question
    args = p.parse_args(argv)
    wh = os.path.join(args.dir, "wh")
    if args.ask:
        print(json.dumps(_ask(wh, args.ask, args.rounds)))
        return 0
    shape = {"commits": args.commits, "every": args.every, "layout": 3}
    shape_file = os.path.join(args.dir, "shape.json")
    if not os.path.exists(shape_file) or json.load(open(shape_file)) != shape:
        import shutil

        shutil.rmtree(args.dir, ignore_errors=True)
        t0 = time.monotonic()
        _build(wh, args.commits, args.every)
        with open(shape_file, "w") as f:
            json.dump(shape, f)
        print(f"built {args.commits} commits in {time.monotonic() - t0:.1f} s", file=sys.stderr)
    env = {**os.environ, "PYTHONPATH": os.path.abspath(args.tree)}
    for question in QUESTIONS:
        out = subprocess.run(
            [  # (the script by its path: `-m` would put this checkout's root before --tree's)
                sys.executable,
                os.path.abspath(__file__),
                "--dir",
                args.dir,
                "--rounds",
                str(args.rounds),
                "--ask",
                question,
            ],
            cwd=HERE,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        ms = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"history_{question}_at_{args.commits}_commits {statistics.median(ms):.1f} ms")
    return 0


def _run_id(t_s: float, n: int) -> str:
    from lib.lake.run_tags import RUN_ID_TIME

    return time.strftime(RUN_ID_TIME, time.gmtime(t_s - 30)) + f"-{n:08x}"


def _build(wh: str, commits: int, every: int) -> None:
    import pyarrow as pa

    from lib.lake.delta import table_path
    from schemas import tables as T

    newest = int(time.time()) - 60
    at = [newest - (commits - 1 - k) * every for k in range(commits)]  # each checkpoint commit's time, s
    schema = T.REPLAY_CHECKPOINTS.arrow_schema
    row: dict[str, object] = {f.name: None for f in schema}
    row.update(offsets_partition=0, next_log_offset=1, records_read=1, trailing_bytes=0, run_id=_run_id(at[0], 0))
    row["finished_at"] = dt.datetime.fromtimestamp(at[0], dt.UTC)
    runs = [_run_id(t, k) for k, t in enumerate(at)]  # (30 s before its checkpoint commit)
    checkpoint_rows = pa.Table.from_pylist([row], schema=schema)
    _history(table_path(wh, T.REPLAY_CHECKPOINTS), T.REPLAY_CHECKPOINTS, checkpoint_rows, at, runs)
    # each run commits the busy table 10 s before its checkpoint; the quiet one was last
    # committed 20 days ago
    busy = [t - 10 for t in at]
    _history(table_path(wh, T.GROUP_OFFSETS), T.GROUP_OFFSETS, T.GROUP_OFFSETS.arrow_schema.empty_table(), busy, runs)
    q = max(commits - 1 - QUIET_DAYS * 86_400 // every, 0)
    quiet = T.PENDING_TRANSACTIONAL_OFFSETS
    _history(table_path(wh, quiet), quiet, quiet.arrow_schema.empty_table(), busy[q : q + 1], runs[q : q + 1])


def _history(path: str, table, rows, at: list[int], runs: list[str]) -> None:
    """A table overwritten with `rows` at each time of `at` (s), by the runs `runs` (one a
    commit): the first commit by delta-rs, the others as Delta log files, then a checkpoint."""
    from lib.lake.delta import open_delta, overwrite_small_table
    from lib.lake.run_tags import run_tag

    overwrite_small_table(path, table, rows, run_tag(runs[0]))
    _restamp(path, 0, at[0] * 1000)
    log = os.path.join(path, "_delta_log")
    with open(os.path.join(log, f"{0:020d}.json")) as f:
        first = next(a["add"] for a in map(json.loads, f) if "add" in a)
    previous = first["path"]
    for k in range(1, len(at)):
        name = f"part-{k:08d}.snappy.parquet"
        os.link(os.path.join(path, first["path"]), os.path.join(path, name))
        ms = at[k] * 1000
        actions = [
            {
                "commitInfo": {
                    "timestamp": ms,
                    "operation": "WRITE",
                    "operationParameters": {"mode": "Overwrite", "partitionBy": "[]"},
                    "userMetadata": run_tag(runs[k]),
                }
            },
            {"add": {**first, "path": name, "modificationTime": ms}},
            {
                "remove": {
                    "path": previous,
                    "dataChange": True,
                    "deletionTimestamp": ms,
                    "extendedFileMetadata": True,
                    "partitionValues": {},
                    "size": first["size"],
                }
            },
        ]
        with open(os.path.join(log, f"{k:020d}.json"), "w") as f:
            f.write("".join(json.dumps(a) + "\n" for a in actions))
        previous = name
    if len(at) > 1:
        open_delta(path).create_checkpoint()


def _restamp(path: str, version: int, ms: int) -> None:
    """Set a commit's timestamp (a commit delta-rs made now, dated as the warehouse's history)."""
    name = os.path.join(path, "_delta_log", f"{version:020d}.json")
    with open(name) as f:
        actions = [json.loads(line) for line in f if line.strip()]
    for a in actions:
        if "commitInfo" in a:
            a["commitInfo"]["timestamp"] = ms
    with open(name, "w") as f:
        f.write("".join(json.dumps(a) + "\n" for a in actions))


def _ask(wh: str, question: str, rounds: int) -> list[float]:
    from lib.lake.delta import commit_history, committed_version, completed_runs, roll_back_incomplete_runs, table_path
    from lib.lake.run_tags import tagged_run
    from schemas import tables as T

    checkpoints = table_path(wh, T.REPLAY_CHECKPOINTS)
    tables = [T.GROUP_OFFSETS, T.PENDING_TRANSACTIONAL_OFFSETS]
    ((_, meta),) = commit_history(checkpoints, limit=1)
    newest_run = tagged_run(meta)
    newest_versions = [commit_history(table_path(wh, t), limit=1)[0][0] for t in tables]
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        if question == "roll_back":
            assert roll_back_incomplete_runs(wh, tables, T.REPLAY_CHECKPOINTS) == []
        elif question == "coordinator":
            completed = completed_runs(checkpoints)
            assert [committed_version(table_path(wh, t), completed) for t in tables] == newest_versions
        else:
            completed = completed_runs(checkpoints)
            # (a tree older than CompletedRuns.named: the set of every run named)
            older: Any = completed
            assert completed.named(newest_run) if hasattr(completed, "named") else newest_run in older.runs
        times.append((time.perf_counter() - t0) * 1000)
    return times


if __name__ == "__main__":
    sys.exit(main())
