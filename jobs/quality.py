"""Check the Delta tables with Great Expectations (suites in schemas/quality_checks.py).

    python -m jobs.quality --warehouse WAREHOUSE [--partitions 0,7] [--partition-count 50]
        [--tables t1,t2] [--conf key=value ...]

Prints one line per table and where the Data Docs are; writes WAREHOUSE/_quality/results.json.
Exit 0: no error-level expectation failed (warnings are reported only); 1: one did;
2: bad input (no warehouse, a missing table, a bad argument)."""

from __future__ import annotations

import argparse

from lib import storage
from lib.cli import add_conf_argument, exit_now, failer, parse_partitions, spark_overrides
from schemas.quality_checks import DEFAULT_PARTITION_COUNT

fail = failer("quality")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="quality", description=__doc__.splitlines()[0])
    p.add_argument("--warehouse", required=True, help="folder of the Delta tables (a path or s3a://bucket/prefix)")
    p.add_argument("--partitions", help="only the rows of these offsets partitions, e.g. 0,7,12 or 0-9")
    p.add_argument(
        "--partition-count",
        type=int,
        default=DEFAULT_PARTITION_COUNT,
        help="partition count of __consumer_offsets, for partitionFor(group_id) (default 50)",
    )
    p.add_argument("--tables", help="only these tables, e.g. group_offsets,consumer_groups (default: all)")
    add_conf_argument(p)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        partitions = parse_partitions(args.partitions)
        overrides = spark_overrides(args.conf, args.master)
    except ValueError as e:
        return fail(f"bad argument: {e}")
    from schemas.quality_checks import SUITES

    tables = [t.strip() for t in args.tables.split(",") if t.strip()] if args.tables else None
    unknown = [t for t in tables or [] if t not in SUITES]
    if unknown:
        return fail(f"no such table: {', '.join(unknown)} (tables: {', '.join(SUITES)})")
    if args.partition_count <= 0:
        return fail("--partition-count must be positive")
    import os

    if not storage.is_remote(args.warehouse) and not os.path.isdir(args.warehouse):
        return fail(f"warehouse {args.warehouse} does not exist")

    from lib.reporting.quality_suites import QualityInputError, print_results, run_suites
    from lib.spark.session import build_session

    spark = build_session("quality", overrides, object_store=storage.is_remote(args.warehouse))
    try:
        result = run_suites(spark, args.warehouse, partitions, args.partition_count, tables)
    except QualityInputError as e:
        return fail(str(e))
    return print_results(result)


if __name__ == "__main__":
    exit_now(main())
