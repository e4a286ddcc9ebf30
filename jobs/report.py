"""Write the warehouse report: one self-contained HTML page, WAREHOUSE/report/index.html.

    python -m jobs.report --warehouse WH [--now TIME] [--top 20] [--days 7] [--retention-minutes MINUTES]

Prints the page's path."""

from __future__ import annotations

import argparse
import sys

from lib import storage
from lib.cli import add_conf_argument, exit_now, failer, parse_time_ms, spark_overrides
from lib.replay.expiry import DEFAULT_RETENTION_MINUTES

fail = failer("report")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="report", description=__doc__.splitlines()[0])
    p.add_argument("--warehouse", required=True, help="folder of the Delta tables (a path or s3a://bucket/prefix)")
    p.add_argument("--now", help="the report's 'now' for expiry: epoch ms or ISO-8601 (default: now)")
    p.add_argument("--top", type=int, default=20, help="groups per ranking and groups plotted (default 20)")
    p.add_argument("--days", type=int, default=7, help="list what expires within this many days (default 7)")
    p.add_argument(
        "--retention-minutes",
        type=int,
        default=DEFAULT_RETENTION_MINUTES,
        help=f"offsets.retention.minutes the expiry is judged with (default {DEFAULT_RETENTION_MINUTES})",
    )
    add_conf_argument(p)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        now_ms = parse_time_ms(args.now)
        overrides = spark_overrides(args.conf, args.master)
    except ValueError as e:
        return fail(str(e))
    if args.top <= 0 or args.days < 0 or args.retention_minutes <= 0:
        return fail("--top and --retention-minutes must be positive, --days not negative")

    from lib.reporting.report_builder import write_report
    from lib.spark.session import build_session

    spark = build_session("report", overrides, object_store=storage.is_remote(args.warehouse))
    try:
        path = write_report(
            spark, args.warehouse, now_ms, top=args.top, days=args.days, retention_minutes=args.retention_minutes
        )
    except FileNotFoundError as e:
        print(f"report: error: {e}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    exit_now(main())
