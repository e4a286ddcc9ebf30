"""Put a consumer group back where it was: its committed offsets as of an instant, from the warehouse, into a live cluster.

    python -m jobs.restore_offsets --warehouse WH --group G --as-of TIME --bootstrap-servers HOST:PORT \\
        [--topics t1,t2] [--to-group G2] [--execute] [--export-csv FILE] [--format table|json] \\
        [--below-log-start refuse|skip|clamp] [--above-log-end refuse|skip|clamp] [--allow-stale]

The target of each topic partition is the group's effective committed offset at TIME, by the
loader's rules (transactional commits at their COMMIT marker, aborted and pending never; after
a tombstone or an expiry: no offset then), with its leader epoch and metadata. Without
--execute it is a dry run: per partition the committed offset now (OffsetFetch), the target,
the difference, the log start and end now (ListOffsets), and what a restore would do.
--execute commits the targets as `kafka-consumer-groups --reset-offsets --execute` does, only
while the group (or --to-group) has no members (Empty or Dead), and only when no partition
needs a decision (a target below the log start or above the end: --below-log-start /
--above-log-end say what to do); then it checks with OffsetFetch. --export-csv writes the plan
as `kafka-consumer-groups --reset-offsets --from-file` reads it. Every run, dry or not, is
recorded in the warehouse's offset_restores table.

Exit code 0 on success (dry run or restore), 2 on bad input (unknown group, TIME outside the
warehouse's history, unreachable cluster: nothing changed), 3 when the restore was refused
(the group has members, or a partition needs a decision: nothing committed)."""

from __future__ import annotations

import argparse
import getpass
import json
import sys
import time
import uuid

from lib import storage
from lib.cli import add_conf_argument, exit_now, failer, format_ms, parse_time_ms, spark_overrides
from lib.restore.plan import CHOICES, REFUSE, PartitionPlan, blocking, plan_restore, reset_offsets_csv, to_apply

EXIT_REFUSED = 3
fail = failer("restore_offsets")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="restore_offsets", description=__doc__.splitlines()[0])
    p.add_argument("--warehouse", required=True, help="folder of the Delta tables (a path or s3a://bucket/prefix)")
    p.add_argument("--group", required=True, help="the group whose offsets to put back")
    p.add_argument("--as-of", required=True, help="the instant: ISO-8601 (UTC unless it names a zone) or epoch ms")
    p.add_argument("--bootstrap-servers", required=True, help="the live cluster")
    p.add_argument("--topics", help="only these topics (comma-separated)")
    p.add_argument("--to-group", help="commit into this group instead (e.g. a canary), leaving --group as it is")
    p.add_argument("--execute", action="store_true", help="commit the plan (default: a dry run)")
    p.add_argument("--export-csv", metavar="FILE", help="write the plan as kafka-consumer-groups --from-file reads it")
    p.add_argument("--format", default="table", choices=("table", "json"))
    p.add_argument(
        "--below-log-start",
        default=REFUSE,
        choices=CHOICES,
        help="a target whose records are gone: refuse (default; nothing is committed), skip the partition, "
        "or clamp to the log start",
    )
    p.add_argument(
        "--above-log-end",
        default=REFUSE,
        choices=CHOICES,
        help="a target beyond the log end (topic recreated or truncated): refuse, skip, or clamp to the log end",
    )
    p.add_argument(
        "--cluster-timeout-s", type=float, default=30.0, help="how long to wait for the cluster (default 30)"
    )
    p.add_argument(
        "--allow-stale", action="store_true", help="answer even when the warehouse's last replay is older than TIME"
    )
    add_conf_argument(p)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        as_of_ms = parse_time_ms(args.as_of)
        overrides = spark_overrides(args.conf, args.master)
    except ValueError as e:
        return fail(str(e))
    from lib.reporting.audit_queries import AuditError, warehouse_tables

    try:
        if not storage.is_remote(args.warehouse):
            warehouse_tables(args.warehouse)
    except AuditError as e:
        return fail(str(e))
    topics = [t.strip() for t in args.topics.split(",") if t.strip()] if args.topics else None
    to_group = args.to_group or args.group

    from lib.restore.cluster import ClusterError, ClusterGroups

    try:
        cluster = ClusterGroups(args.bootstrap_servers, timeout_ms=int(args.cluster_timeout_s * 1000))
    except ClusterError as e:
        return fail(str(e))
    with cluster:
        return _restore(args, overrides, as_of_ms, topics, to_group, cluster)


def _restore(args, overrides, as_of_ms: int, topics, to_group: str, cluster) -> int:
    from lib.reporting.audit_queries import AuditError, open_catalog
    from lib.reporting.restore import RestoreInputError, check_history, history, targets_as_of
    from lib.restore.cluster import ClusterError
    from lib.spark.session import build_session

    spark = build_session("restore_offsets", overrides, object_store=storage.is_remote(args.warehouse))
    try:
        tables = open_catalog(spark, args.warehouse)
        if "offsets_log" not in tables or "replay_checkpoints" not in tables:
            raise RestoreInputError(f"warehouse {args.warehouse} has no offsets_log (run jobs.replay_offsets first)")
        check_history(history(spark, args.group), args.group, as_of_ms, args.allow_stale)
        targets = targets_as_of(spark, args.group, as_of_ms, topics)
    except (AuditError, RestoreInputError) as e:
        return fail(str(e))

    run_at_ms = int(time.time() * 1000)
    try:
        group_now = cluster.describe(to_group)
        current = {tp: c for tp, c in cluster.committed(to_group).items() if topics is None or tp[0] in topics}
        tps = {(t.topic, t.partition) for t in targets} | set(current)
        plan = plan_restore(targets, current, cluster.partitions_now(tps), args.below_log_start, args.above_log_end)
    except ClusterError as e:
        return fail(str(e))
    if args.export_csv:
        storage.write_bytes(args.export_csv, reset_offsets_csv(plan).encode())

    mode, refusal, after = "dry_run", None, {}
    applying = to_apply(plan)
    if args.execute:
        if not group_now.restorable:
            members = ", ".join(f"{m.member_id} ({m.client_id}@{m.client_host})" for m in group_now.members)
            refusal = (
                f"group {to_group!r} is {group_now.state} with {len(group_now.members)} member(s)"
                + (f": {members}" if members else "")
                + "; stop its consumers first (a commit from outside is accepted only while it is Empty or Dead)"
            )
        elif blocking(plan):
            refusal = "partitions need a decision: " + "; ".join(
                f"{p.topic}-{p.partition}: {p.note}" for p in blocking(plan)
            )
        if refusal is not None:
            mode = "refused"
        else:
            mode = "executed"
            errors = {tp: e for tp, e in cluster.commit(to_group, applying).items() if e is not None}
            fetched = cluster.committed(to_group)
            after = {tp: fetched[tp].offset for tp in applying if tp in fetched}
            if errors:
                refusal = "the cluster refused the commit of " + ", ".join(
                    f"{t}-{p}: {e}" for (t, p), e in errors.items()
                )
    _record(args, to_group, as_of_ms, run_at_ms, mode, plan, after)
    _print(args, to_group, as_of_ms, group_now, plan, mode, after)
    if refusal is not None:
        print(f"restore_offsets: refused: {refusal}", file=sys.stderr)
        return EXIT_REFUSED
    if mode == "executed":
        wrong = {tp: off for tp, off in after.items() if off != applying[tp].offset}
        if wrong:
            return fail(f"OffsetFetch after the commit does not answer what was committed: {wrong}", EXIT_REFUSED)
    return 0


def _record(args, to_group: str, as_of_ms: int, run_at_ms: int, mode: str, plan, after) -> None:
    from lib.lake.delta import append_small_table, table_path
    from lib.lake.run_tags import run_tag
    from lib.reporting.restore import RestoreRun, restore_rows
    from schemas import tables as T

    run = RestoreRun(
        uuid.uuid4().hex, getpass.getuser(), run_at_ms, args.bootstrap_servers, args.group, to_group, as_of_ms, mode
    )
    rows = restore_rows(run, plan, after)
    append_small_table(table_path(args.warehouse, T.OFFSET_RESTORES), T.OFFSET_RESTORES, rows, run_tag(run.restore_id))


def _print(args, to_group: str, as_of_ms: int, group_now, plan: list[PartitionPlan], mode: str, after) -> None:
    if args.format == "json":
        print(
            json.dumps(
                {
                    "group": args.group,
                    "to_group": to_group,
                    "as_of": format_ms(as_of_ms),
                    "group_state": group_now.state,
                    "members": len(group_now.members),
                    "mode": mode,
                    "partitions": [
                        {
                            "topic": p.topic,
                            "partition": p.partition,
                            "current": p.current.offset if p.current else None,
                            "target": p.target.offset if p.target else None,
                            "difference": p.difference,
                            "log_start": p.log_start,
                            "log_end": p.log_end,
                            "action": p.action,
                            "apply": p.apply.offset if p.apply else None,
                            "after": after.get((p.topic, p.partition)),
                            "note": p.note,
                        }
                        for p in plan
                    ],
                },
                indent=1,
            )
        )
        return
    target = f"{args.group}" + (f" into {to_group}" if to_group != args.group else "")
    print(f"restore of {target} as of {format_ms(as_of_ms)} ({mode.replace('_', ' ')})")
    print(f"group {to_group} now: {group_now.state}, {len(group_now.members)} member(s)")
    header = ("topic", "partition", "current", "target", "difference", "log start", "log end", "action", "after")
    lines = [header] + [
        (
            p.topic,
            str(p.partition),
            _num(p.current.offset if p.current else None),
            _num(p.target.offset if p.target else None),
            _num(p.difference),
            _num(p.log_start),
            _num(p.log_end),
            p.action if p.apply is None or p.apply == p.target else f"{p.action} ({p.apply.offset})",
            _num(after.get((p.topic, p.partition))),
        )
        for p in plan
    ]
    widths = [max(len(row[i]) for row in lines) for i in range(len(header))]
    for row in lines:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    for p in plan:
        if p.note:
            print(f"  {p.topic}-{p.partition}: {p.note}")


def _num(value) -> str:
    return "-" if value is None else str(value)


if __name__ == "__main__":
    exit_now(main())
