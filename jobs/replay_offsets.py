"""Replay __consumer_offsets segment files into Delta tables.

    python -m jobs.replay_offsets --input LOG_DIR --warehouse WAREHOUSE [--now TIME]
        [--retention-minutes N] [--partitions 0,7,12] [--full] [--conf key=value ...]

Works the same under spark-submit (the session picks up spark-submit's settings)."""

from __future__ import annotations

import argparse
import gc
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from lib import storage
from lib.allocator import use_run_allocator
from lib.blas import use_one_blas_thread
from lib.cli import (
    EXIT_BUSY,
    add_conf_argument,
    add_fetch_max_bytes_argument,
    exit_now,
    failer,
    fetch_max_bytes_error,
    format_duration_ms,
    format_ms,
    parse_partitions,
    parse_time_ms,
    spark_overrides,
)
from lib.kept_out import KeptOut
from lib.lake.lock import LockUnsupportedError
from lib.replay.expiry import DEFAULT_RETENTION_MINUTES
from lib.source.logdir import LogDirError, find_partitions, live_partitions

if TYPE_CHECKING:
    from lib.spark.pipeline import RunResult

fail = failer("replay_offsets", nothing_changed=True)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="replay_offsets", description=__doc__.splitlines()[0])
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--input", help="broker log dir holding __consumer_offsets-<P> folders (a path or s3a://bucket/prefix)"
    )
    source.add_argument(
        "--bootstrap-servers",
        metavar="HOST:PORT",
        help="read __consumer_offsets from a running cluster instead (up to each high watermark)",
    )
    add_fetch_max_bytes_argument(p)
    p.add_argument("--warehouse", required=True, help="folder of the Delta tables (a path or s3a://bucket/prefix)")
    p.add_argument("--now", help="expiry is judged as of this time: epoch ms or ISO-8601 (default: now)")
    p.add_argument(
        "--retention-minutes",
        type=int,
        default=DEFAULT_RETENTION_MINUTES,
        help=f"offsets.retention.minutes (default {DEFAULT_RETENTION_MINUTES})",
    )
    p.add_argument("--partitions", help="only these offsets partitions, e.g. 0,7,12 or 0-9")
    p.add_argument(
        "--full",
        action="store_true",
        help="rebuild the partitions from their first segment instead of continuing from the checkpoints",
    )
    add_conf_argument(p)
    p.add_argument(
        "--on-corrupt",
        choices=("fail", "quarantine"),
        default="fail",
        help="fail (default): stop at the first undecodable batch or record and change nothing; "
        "quarantine: keep each in the quarantined_records table with its bytes and go on",
    )
    p.add_argument(
        "--lock-wait",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="if another run is writing the warehouse, wait this long for it (default: fail at once)",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="after the replay, run the quality suites (jobs.quality); exit 1 if an error-level check fails",
    )
    p.add_argument(
        "--partition-count",
        type=int,
        default=50,
        help="with --check: partition count of __consumer_offsets (default 50)",
    )
    p.add_argument(
        "--skip-assignment-audit",
        action="store_true",
        help="do not audit the generations this run replays: they stay without assignment_audit rows for good "
        "(later runs do not go back to them; a --full run audits the whole log again)",
    )
    p.add_argument(
        "--skip-lag",
        action="store_true",
        help="leave the lag stage for a later run: the commits this run replays are kept for it (the lag "
        "input), and the next run without this flag computes their lag",
    )
    p.add_argument(
        "--pushgateway",
        metavar="HOST:PORT",
        help="push the run's Prometheus metrics (lag, group states, the run's figures) to this Pushgateway",
    )
    p.add_argument("--metrics-file", metavar="PATH", help="write them as a node_exporter textfile (*.prom)")
    p.add_argument(
        "--executor",
        choices=("auto", "spark", "local"),
        default="auto",
        help="where the Python tasks run: local (a pool of local processes, no JVM: a local master and a log "
        "dir on local disk only; the same tables), spark (a Spark context, its JVM), or auto (the default): local "
        "for a log dir on local disk on a local master, spark otherwise (a cluster master, an object store, "
        "--bootstrap-servers)",
    )
    p.add_argument("--quiet", action="store_true", help="print only the one-line result")
    return p.parse_args(argv)


PANDAS_KEPT_OUT = KeptOut(("pandas",))  # (the run's driver: main)


def main(argv=None) -> int:
    use_run_allocator()  # (before the pool, the JVM and their workers start: lib.allocator)
    use_one_blas_thread()  # (before numpy is imported here and there: lib.blas)
    args = parse_args(argv)
    # pandas kept out while the run goes (lib.kept_out): no step uses it, and pyarrow imported it
    # (0.2-0.3 s of CPU) when deltalake first imported pyarrow.dataset and on its first
    # conversion; --check's suites take it in after (run_checks)
    with PANDAS_KEPT_OUT:
        return _main(args)


def _main(args) -> int:
    try:
        now_ms = parse_time_ms(args.now)
        partitions = parse_partitions(args.partitions)
        overrides = spark_overrides(args.conf, args.master)
    except ValueError as e:
        return fail(str(e))
    if args.retention_minutes <= 0:
        return fail("--retention-minutes must be positive")
    if error := fetch_max_bytes_error(args):
        return fail(error)
    # an object store's settings may come from the session (--conf spark.hadoop.fs.s3a.*):
    # such an input is listed once the session is up; a local one first, failing fast
    object_store = any(storage.is_remote(p) for p in (args.input or "", args.warehouse))
    from lib.spark.session import REPO_ROOT, starts_local_daemon

    # (the job's conf read once: a log on local disk or a live cluster, run on a local master)
    daemon_here = not object_store and starts_local_daemon(overrides)
    pool_early = _start_pool_early(args, daemon_here)
    try:
        logs = None
        if args.bootstrap_servers:
            logs = live_partitions(args.bootstrap_servers, partitions)
            args.input = args.bootstrap_servers
        elif not storage.is_remote(args.input):
            logs = find_partitions(args.input, partitions)
    except (ValueError, LogDirError) as e:
        _stop_pool_if(pool_early)
        return fail(str(e))

    started = time.monotonic()
    local_daemon = bool(logs) and daemon_here
    here = local_daemon and not args.bootstrap_servers
    _stop_pool_if(pool_early and not here)  # (a log dir without offsets partitions: no pool)
    if args.executor == "local" and not here:
        return fail("--executor local runs a log dir on local disk on a local master (spark.master local[...])")
    # (on a local master Spark runs the same tasks in Python workers on this machine: its JVM only
    # schedules them, and costs a run 2-3 s of both cores to start; make bench's full run took
    # 26-29 s on the pool against 31-32 s on Spark, its 1% incremental run 5.2 against 9.0 s)
    # (on the pool, its fork server is running: _start_pool_early)
    local = args.executor == "local" or (args.executor == "auto" and here)

    from lib.spark.daemon import start_zygote
    from lib.spark.lag import waits as lag_waits
    from lib.spark.pipeline import list_topic_logs, replay_bytes

    # while the JVM starts: the Python daemon of a run that will replay something prepares
    # (lib.spark.daemon's zygote), and a log dir's consumed topics are listed
    zygote = None
    idle = False  # nothing to do, as the peeks see it: the JVM starts only if the run finds work after all
    to_read = (
        replay_bytes(logs, args.warehouse, now_ms, args.retention_minutes, args.full) if logs and local_daemon else None
    )
    if local_daemon:
        if to_read is None:  # (a lag stage at a later --now has work: its JVM starts now, beside the run's start)
            idle = args.skip_lag or lag_waits(args.warehouse, now_ms)
        elif not local:
            zygote = start_zygote(REPO_ROOT)
    _stop_pool_if(local and to_read is None and idle)  # (a pool asked for after all starts another)
    # the modules are in: the collector's full passes skip what they made (it stays), as they
    # otherwise walked it whenever the plans' per-partition dicts filled the young generations
    gc.freeze()
    topic_listing = list_topic_logs(logs) if logs is not None else None
    try:
        return _run(
            args, overrides, logs, partitions, object_store, now_ms, started, topic_listing, idle, local, to_read
        )
    finally:
        if zygote is not None:
            zygote.stop()


def _start_pool_early(args, daemon_here: bool) -> bool:
    """Whether the run will use the local pool if its log dir holds offsets partitions (a log
    dir on local disk, a local master: `daemon_here`; not --executor spark); if so its fork
    server starts now, before the log dir is listed: the pool's first task waits for the
    server's preparation (0.9 s of CPU), not for the driver's (make bench's 1% incremental run
    waited 0.25-0.3 s for it when it started after the listing, 0.15-0.2 s now)."""
    if args.executor == "spark" or args.bootstrap_servers or not daemon_here:
        return False
    from lib.spark.local_jobs import start_fork_server

    start_fork_server()
    return True


def _stop_pool_if(started: bool) -> None:
    """The pool's fork server stopped, for a run that will not use it (or not yet)."""
    if started:
        from lib.spark.local_jobs import stop_fork_server

        stop_fork_server()


def _run(
    args,
    overrides,
    logs,
    partitions,
    object_store: bool,
    now_ms: int,
    started: float,
    topic_listing,
    idle: bool,
    local: bool = False,
    to_read: int | None = None,
) -> int:
    """The run, once the daemon's zygote (if any) is on its way. `idle`: as the peeks before the
    lock see it, a run with nothing to replay and nothing new for its lag stage; its Spark
    context starts only if a stage asks for a job after all (a consumed partition grown at the
    same --now): a no-op starts no JVM (2.4 s of its 3.3 s on the bench log). `local`: the tasks
    run in a local pool (lib.spark.local_jobs), started now unless the peeks found nothing to do,
    on first use then."""
    from lib.reporting.run_summary import lag_summary
    from lib.spark.pipeline import ReplayError, WarehouseBusyError, run_replay
    from lib.spark.session import REPLAY_DEFAULTS, build_context, build_session

    spark: Any
    if local:
        from lib.spark.local_jobs import LocalJobs, local_parallelism
        from lib.spark.session import spark_master

        spark = LocalJobs(
            local_parallelism(spark_master(overrides)) or 1,
            session=lambda: build_session("replay_offsets", overrides),
        )
        if to_read is not None or not idle:  # (work ahead: the fork server's imports start now)
            spark.start()
    else:
        spark = build_context("replay_offsets", overrides, REPLAY_DEFAULTS, object_store=object_store, lazy=idle)
    # --quiet prints one line: no summary queries (on a large log they cost more than the replay).
    # Those of the replay's tables run beside the lag stage, which changes none of them
    queries = ThreadPoolExecutor(1, thread_name_prefix="summary")
    replay_summary: Future | None = None

    def replayed(result: RunResult) -> None:
        nonlocal replay_summary
        if not args.quiet:
            replay_summary = queries.submit(_replay_summary, args.warehouse, result)

    if logs is None:
        try:
            logs = find_partitions(args.input, partitions)
        except LogDirError as e:
            return fail(str(e))
    try:
        result = run_replay(
            spark,
            logs,
            args.warehouse,
            now_ms,
            args.retention_minutes,
            full=args.full,
            lock_wait_seconds=args.lock_wait,
            on_corrupt=args.on_corrupt,
            assignments=not args.skip_assignment_audit,
            lag=not args.skip_lag,
            fetch_max_bytes=args.fetch_max_bytes,
            topic_listing=topic_listing,
            replayed=replayed,
        )
        # the lag part of the summary: the tasks' (they wrote this --now's rows), else read
        # beside the pool's stop
        lag_part: Future | None = None
        if replay_summary is not None and result.lag is not None and not result.lag.skipped:
            if result.lag.furthest_behind is not None:
                lag_part = Future()
                lag_part.set_result(result.lag.furthest_behind.to_pylist())
            else:
                lag_part = queries.submit(lag_summary, args.warehouse, result.now_ms)
    except ReplayError as e:
        return fail(str(e))
    except WarehouseBusyError as e:
        return fail(str(e), EXIT_BUSY)
    except LockUnsupportedError as e:
        return fail(str(e))
    finally:
        queries.shutdown(wait=False)
        if local:
            spark.stop()  # (its processes idle now: they end at once)
    wall = time.monotonic() - started
    summary = replay_summary.result() if replay_summary is not None else None  # (None with --quiet)
    if summary is not None and lag_part is not None:
        summary["lag"] = lag_part.result()
    print_summary(args, result, summary, wall, f"a local pool of {spark.parallelism} processes" if local else "Spark")
    export_metrics(args, result, wall)
    if args.check:
        PANDAS_KEPT_OUT.release()
        return run_checks(spark.session(), args, result.partitions)
    return 0


def _replay_summary(warehouse: str, result: RunResult) -> dict:
    """What the summary says of the replay's tables (committed when this runs)."""
    from lib.reporting.run_summary import assignment_summary, summarize

    summary = summarize(warehouse, result.partitions, result.record_types)
    if result.audit_rows is not None:
        summary["assignments"] = assignment_summary(warehouse)
    return summary


def export_metrics(args, result, wall: float) -> None:
    """The run's Prometheus metrics (lib.reporting.metrics). The tables are written by now, so a
    Pushgateway that cannot be reached is a warning, not a failed run."""
    if not (args.pushgateway or args.metrics_file):
        return
    from lib.reporting.metrics import RunFigures, push, write_textfile

    run = RunFigures(result.now_ms, time.time(), wall, result.records, result.quarantined, len(result.partitions))
    for target, export in ((args.metrics_file, write_textfile), (args.pushgateway, push)):
        if not target:
            continue
        try:
            samples = export(args.warehouse, run, target)
            if not args.quiet:
                print(f"metrics: {samples} samples to {target}")
        except OSError as e:  # urllib's URLError and HTTPError are OSErrors
            print(f"replay_offsets: warning: metrics not written to {target}: {e}", file=sys.stderr)


def run_checks(spark, args, partitions) -> int:
    from lib.reporting.quality_suites import print_results, run_suites

    print("\nquality checks:")
    if print_results(run_suites(spark, args.warehouse, partitions, args.partition_count)) == 0:
        return 0
    print("replay_offsets: the tables were written but failed error-level quality checks", file=sys.stderr)
    return 1


def print_summary(args, result, s: dict | None, wall: float, executor: str = "Spark") -> None:
    rate = result.records / max(wall, 1e-9)
    mode = "incremental" if result.incremental else "full"
    if result.skipped_partitions:
        mode += f", {result.skipped_partitions} partitions unchanged"
    if result.took_over_lock:
        held = result.took_over_lock
        if held.get("pid") is None:
            print("took over an unreadable lock file (left by a writer that died before filling it)")
        else:
            print(f"took over the lock of {held.get('owner')} (pid {held.get('pid')}, no longer running)")
    for r in result.rolled_back:
        after = (
            "removed (the run had created it)" if r["to_version"] is None else f"restored to version {r['to_version']}"
        )
        print(f"rolled back {r['table']}: run {r['run']} died before its checkpoint commit; {after}")
    print(
        f"replayed ({mode}) {result.records} records from {len(result.partitions)} partitions of {args.input} "
        f"into {args.warehouse} in {wall:.1f}s (run {result.run_id})"
        + (f"; QUARANTINED {result.quarantined} undecodable batches/records" if result.quarantined else "")
    )
    if args.quiet or s is None:
        return
    print(
        f"  as of {format_ms(result.now_ms)}, retention {result.retention_minutes} min; tasks on {executor}; stages: "
        + ", ".join(f"{k} {v:.1f}s" for k, v in result.stage_seconds.items())
        + f"; {rate:,.0f} records/s"
    )
    print("\npartitions:")
    print(f"  {'partition':>9} {'records':>9} {'next_offset':>11} {'high_watermark':>14} {'trailing_bytes':>14}")
    empty = [p["offsets_partition"] for p in s["partitions"] if p["records_read"] == 0 and p["next_log_offset"] == 0]
    for p in s["partitions"]:
        if p["offsets_partition"] in empty:
            continue
        hw = "-" if p["high_watermark"] is None else p["high_watermark"]
        print(
            f"  {p['offsets_partition']:>9} {p['records_read']:>9} {p['next_log_offset']:>11} {hw:>14} "
            f"{p['trailing_bytes']:>14}"
        )
    if empty:
        print(f"  ({len(empty)} partitions hold no records)")
    print("\nrecords by type:")
    for r in s["record_types"]:
        name = "control (txn marker)" if r["is_control"] else (r["record_type_name"] or "unknown type")
        print(f"  {name:<40} {r['count']:>9}")
    print(
        f"\ngroups: {s['group_count']}   live offsets: {s['offset_count']}   "
        f"pending transactional offsets: {s['pending_count']}   undecoded records: {s['unknown_records']}"
    )
    print(
        f"  {'group':<32} {'type':<9} {'protocol':<9} {'state':<12} {'gen':>5} {'members':>7} {'offsets':>7}"
        "  last commit"
    )
    for g in s["groups"]:
        last = g["last_commit"].strftime("%Y-%m-%d %H:%M:%S") if g["last_commit"] else "-"
        print(
            f"  {g['group_id'][:32]:<32} {g['group_type']:<9} {(g['protocol_type'] or '-'):<9} "
            f"{g['state']:<12} {g['generation'] if g['generation'] is not None else '-':>5} "
            f"{g['members'] if g['members'] is not None else 0:>7} {g['offsets'] or 0:>7}  {last}"
        )
    if s["group_count"] > len(s["groups"]):
        print(f"  ... and {s['group_count'] - len(s['groups'])} more")
    if result.quarantined:
        print(
            f"\nQUARANTINED {result.quarantined} undecodable batches/records of this run into table "
            "quarantined_records (file, offset, error, raw bytes); the replay skipped them:"
        )
        for q in s["quarantined"]:
            print(f"  partition {q['offsets_partition']} {q['segment_file']}: {q['count']} {q['level']}(s)")
    print(
        f"\nexpired as of {format_ms(result.now_ms)}: {s['expired_offset_count']} offsets, "
        f"{len(s['expired_groups'])} groups deleted"
    )
    for e in s["expired_offsets"]:
        print(f"  offsets  {e['group_id']}: {e['offsets']}")
    for g in s["expired_groups"]:
        print(f"  group    {g}")
    _print_lag(result, s)
    _print_assignments(s.get("assignments"))


def _print_assignments(a: dict | None) -> None:
    if not a:
        return
    verdicts = ", ".join(f"{v} {n}" for v, n in sorted(a["verdicts"].items()))
    total = sum(a["verdicts"].values())
    print(f"\nassignments: {total} generations of {a['groups']} groups audited ({verdicts or 'none'})")
    if not a["flagged"]:
        return
    print("  latest generation worth a look:")
    print(f"  {'group':<28} {'generation':>10} {'assignor':<18} {'members':>7} {'imbalance':>9}  why")
    for r in a["flagged"]:
        print(
            f"  {r['group_id'][:28]:<28} {r['generation']:>10} {(r['assignor'] or '-')[:18]:<18} "
            f"{r['member_count']:>7} {r['imbalance']:>9}  {r['why']}"
        )


def _print_lag(result, s: dict) -> None:
    lag = result.lag
    if lag is None:
        return
    if lag.skipped:
        print(f"\nlag: not computed ({lag.skipped})")
        return
    print(
        f"\nlag: {lag.partitions_scanned} consumed partitions read ({lag.batches} batch headers), "
        f"{lag.lag_rows} group_lag rows; furthest behind as of {format_ms(result.now_ms)}:"
    )
    print(f"  {'group':<28} {'topic-partition':<26} {'committed':>9} {'end':>9} {'records':>8} {'behind':>14}")
    for r in s.get("lag", []):
        behind = "-" if r["lag_ms"] is None else format_duration_ms(r["lag_ms"])
        print(
            f"  {r['group_id'][:28]:<28} {(r['topic'] + '-' + str(r['partition']))[:26]:<26} "
            f"{r['committed_offset']:>9} {r['end_offset']:>9} {r['lag_records']:>8} {behind:>14}"
        )


if __name__ == "__main__":
    exit_now(main())
