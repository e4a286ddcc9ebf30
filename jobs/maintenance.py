"""Compact and vacuum the Delta tables of a warehouse.

    python -m jobs.maintenance --warehouse WAREHOUSE [--vacuum-hours 168] [--tables offsets_log,group_offsets]
        [--allow-short-retention] [--no-optimize] [--no-vacuum] [--conf key=value ...]

For each table (default: every table of schemas/tables.py that exists): OPTIMIZE (bin-packing
compaction), then VACUUM of the files no version younger than the retention references. The
retention defaults to 168 hours, Delta's own default; a shorter one is refused unless
--allow-short-retention is given, which is the only case where Delta's retention check is
switched off. Readers time-travelling to older versions (queries AS OF a version or time;
the roll-back of a run that died restores the version before it) need the files VACUUM would
delete. Incremental replays read only the latest versions.

Must not run while a replay writes the same warehouse (the Airflow DAGs share one pool).
Works the same under spark-submit. Exit code 0 on success, 2 on bad arguments."""

from __future__ import annotations

import argparse
import os
import sys
import time

from lib import storage
from lib.cli import add_conf_argument, exit_now, failer, spark_overrides

fail = failer("maintenance", nothing_changed=True)

DEFAULT_VACUUM_HOURS = 168  # Delta's default delta.deletedFileRetentionDuration (7 days)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="maintenance", description=__doc__.splitlines()[0])
    p.add_argument("--warehouse", required=True, help="folder of the Delta tables (a path or s3a://bucket/prefix)")
    p.add_argument(
        "--vacuum-hours",
        type=float,
        default=DEFAULT_VACUUM_HOURS,
        help=f"VACUUM retention in hours (default {DEFAULT_VACUUM_HOURS})",
    )
    p.add_argument(
        "--allow-short-retention",
        action="store_true",
        help=f"allow --vacuum-hours below {DEFAULT_VACUUM_HOURS} (disables Delta's retention check)",
    )
    p.add_argument("--tables", help="comma-separated table names (default: every table)")
    p.add_argument("--no-optimize", action="store_true", help="skip OPTIMIZE")
    p.add_argument("--no-vacuum", action="store_true", help="skip VACUUM")
    add_conf_argument(p)
    return p.parse_args(argv)


def choose_tables(text: str | None) -> list[str]:
    from schemas.tables import ALL_TABLES

    known = [t.name for t in ALL_TABLES]
    if not text:
        return known
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown table(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return list(dict.fromkeys(names))


def vacuumed_files(table) -> str:
    """Files the last VACUUM deleted, from its VACUUM END commit ("?" if not logged)."""
    for r in table.history(2).select("operation", "operationMetrics").collect():
        if r["operation"] == "VACUUM END":
            return (r["operationMetrics"] or {}).get("numDeletedFiles", "?")
    return "?"


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        tables = choose_tables(args.tables)
        extra = spark_overrides(args.conf, args.master)
    except ValueError as e:
        return fail(str(e))
    if not storage.is_remote(args.warehouse) and not os.path.isdir(args.warehouse):
        return fail(f"warehouse {args.warehouse} is not a directory")
    if args.vacuum_hours < 0:
        return fail("--vacuum-hours must not be negative")
    if args.vacuum_hours < DEFAULT_VACUUM_HOURS and not args.allow_short_retention and not args.no_vacuum:
        return fail(
            f"--vacuum-hours {args.vacuum_hours:g} is below Delta's default retention of "
            f"{DEFAULT_VACUUM_HOURS} h: older versions (time travel: VERSION AS OF, the roll-back of a run that died) would lose "
            "their files; pass --allow-short-retention if that is really wanted"
        )

    from delta.tables import DeltaTable

    from lib.lake.delta import table_path
    from lib.spark.session import build_session

    # VACUUM lists the table's folder with this many tasks (Spark's default: 10000, which costs
    # minutes even on a one-file table); a small number suits these tables.
    overrides = {"spark.sql.sources.parallelPartitionDiscovery.parallelism": "8"}
    overrides.update(extra)
    if args.vacuum_hours < DEFAULT_VACUUM_HOURS and not args.no_vacuum:
        overrides["spark.databricks.delta.retentionDurationCheck.enabled"] = "false"
    from lib.lake.lock import WarehouseBusyError, WarehouseLock
    from lib.spark.pipeline import roll_back_incomplete

    spark = build_session("maintenance", overrides, object_store=storage.is_remote(args.warehouse))
    started = time.monotonic()
    try:
        lock = WarehouseLock(args.warehouse, "maintenance").acquire()
    except WarehouseBusyError as e:
        print(f"maintenance: error: {e}", file=sys.stderr)
        return 75
    try:
        # A replay that died left commits no checkpoint vouches for: undo them before
        # OPTIMIZE stacks commits of its own on top.
        for r in roll_back_incomplete(args.warehouse):
            print(f"rolled back {r['table']}: run {r['run']} died before its checkpoint commit")
        done = _maintain(spark, args, tables, table_path, DeltaTable)
    finally:
        lock.release()
    print(f"maintenance: {done} of {len(tables)} tables in {args.warehouse} in {time.monotonic() - started:.1f}s")
    return 0


def _maintain(spark, args, tables, table_path, DeltaTable) -> int:
    done = 0
    for name in tables:
        path = table_path(args.warehouse, name)
        if not DeltaTable.isDeltaTable(spark, path):
            print(f"{name}: skipped, no Delta table at {path}")
            continue
        table = DeltaTable.forPath(spark, path)
        parts = []
        if not args.no_optimize:
            detail = spark.sql(f"DESCRIBE DETAIL delta.`{path}`").select("partitionColumns").first()
            columns = spark.read.format("delta").load(path).columns
            if "offsets_partition" in columns and "offsets_partition" not in detail["partitionColumns"]:
                # a table that holds offsets_partition as a column: compaction alone would mix
                # partitions in its files and end data skipping on it; Z-order keeps them apart
                # (it rewrites the table's files, once per maintenance run)
                result = table.optimize().executeZOrderBy("offsets_partition")
                how = "optimize zorder by offsets_partition"
            else:
                result = table.optimize().executeCompaction()
                how = "optimize"
            metrics = result.select("metrics.*").first()
            parts.append(f"{how} {metrics['numFilesRemoved']} files -> {metrics['numFilesAdded']}")
        if not args.no_vacuum:
            table.vacuum(args.vacuum_hours)
            parts.append(f"vacuum (retain {args.vacuum_hours:g} h) deleted {vacuumed_files(table)} files")
        detail = spark.sql(f"DESCRIBE DETAIL delta.`{path}`").select("numFiles", "sizeInBytes").first()
        version = table.history(1).select("version").first()["version"]
        parts.append(f"now version {version}, {detail['numFiles']} files, {detail['sizeInBytes']} bytes")
        print(f"{name}: " + "; ".join(parts))
        done += 1
    return done


if __name__ == "__main__":
    exit_now(main())
