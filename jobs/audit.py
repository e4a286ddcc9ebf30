"""SQL audits over the warehouse's Delta tables (canned queries in sql/audits/, ad-hoc SQL, or a prompt).

    python -m jobs.audit --warehouse WH --list
    python -m jobs.audit --warehouse WH QUERY_NAME [--param name=value ...] [--format table|json|csv]
    python -m jobs.audit --warehouse WH --sql "SELECT ..." [--param name=value ...]
    python -m jobs.audit --warehouse WH            # interactive SQL prompt
    python -m jobs.audit --remote sc://HOST:PORT QUERY_NAME ...   # through jobs.serve's endpoint

Exit code 0 on success, 2 on bad input (unknown query or parameter, bad value, missing
warehouse, SQL that fails)."""

from __future__ import annotations

import argparse
import sys

from lib import storage
from lib.cli import add_conf_argument, exit_now, failer, spark_overrides
from lib.reporting.audit_queries import (
    FORMATS,
    AuditError,
    bind,
    collect,
    format_rows,
    get_query,
    interactive,
    list_text,
    load_queries,
    open_catalog,
    parse_param_args,
    run_query,
    spark_message,
    sql,
    warehouse_tables,
)

fail = failer("audit")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="audit", description=__doc__.splitlines()[0])
    p.add_argument("query", nargs="?", help="canned query name (see --list)")
    p.add_argument("--warehouse", help="folder of the Delta tables (a path or s3a://bucket/prefix)")
    p.add_argument(
        "--remote",
        metavar="sc://HOST:PORT",
        help="ask jobs.serve's endpoint (Spark Connect URL, ;token=... if it wants one) instead of starting Spark",
    )
    p.add_argument("--list", action="store_true", help="list the canned queries and their parameters")
    p.add_argument("--sql", help="run this SQL statement instead of a canned query")
    p.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="query parameter (timestamps: ISO-8601 or epoch ms; durations: 7d, 36h, P7D)",
    )
    p.add_argument("--format", default="table", choices=FORMATS)
    add_conf_argument(p)
    return p.parse_args(argv)


def quiet_sql_errors() -> None:
    """PySpark logs every failing query with its plan and JVM stack; the CLI prints the error itself."""
    try:
        from pyspark.logger import PySparkLogger

        for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
            PySparkLogger.getLogger(name).disabled = True
    except ImportError:
        pass


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        queries = load_queries()
        if args.list:
            print(list_text(queries))
            return 0
        if args.query and args.sql:
            raise AuditError("give a query name or --sql, not both")
        raw = parse_param_args(args.param)
        query = None
        bound: dict = {}
        if args.query:
            query = get_query(args.query, queries)
            bound = bind(query, raw)
        elif args.sql is None and raw:
            raise AuditError("--param needs a query name or --sql")
        if args.remote:
            if args.warehouse or args.conf or args.master:
                raise AuditError("--remote asks the endpoint's warehouse and Spark: no --warehouse, --conf or --master")
            return remote(args, query, bound, raw)
        if not args.warehouse:
            raise AuditError("--warehouse is required (or --remote sc://HOST:PORT)")
        if not storage.is_remote(args.warehouse):  # fail fast; an object store's settings need the session
            warehouse_tables(args.warehouse)
        overrides = spark_overrides(args.conf, args.master)
    except (AuditError, ValueError) as e:
        return fail(str(e))

    from lib.spark.session import build_session

    spark = build_session("audit", overrides, object_store=storage.is_remote(args.warehouse))
    quiet_sql_errors()
    try:
        open_catalog(spark, args.warehouse)
        if query is not None:
            columns, rows = collect(run_query(spark, query, bound))
        elif args.sql is not None:
            columns, rows = collect(sql(spark, args.sql, dict(raw)))
        else:
            return interactive(spark, args.warehouse, sys.stdin, sys.stdout, queries, args.format)
    except AuditError as e:
        return fail(str(e))
    print(format_rows(columns, rows, args.format))
    return 0


def remote(args: argparse.Namespace, query, bound: dict, raw: dict) -> int:
    """The same answer, from a running jobs.serve over Spark Connect."""
    from pyspark.errors import PySparkException
    from pyspark.sql import SparkSession

    from lib.reporting.audit_queries import inline_query, inline_sql
    from lib.reporting.endpoint import attach

    try:
        spark = SparkSession.builder.remote(args.remote).getOrCreate()
        quiet_sql_errors()
        attach(spark, audit_functions=False)  # the audit's own SQL goes, not its function
    except (PySparkException, ValueError) as e:  # bad URL, endpoint down, wrong token
        return fail(f"endpoint {args.remote}: {spark_message(e)}")
    try:
        if query is not None:
            columns, rows = collect(sql(spark, inline_query(query, bound)))
        elif args.sql is not None:
            columns, rows = collect(sql(spark, inline_sql(args.sql, {k: ("string", v) for k, v in raw.items()})))
        else:
            return interactive(spark, args.remote, sys.stdin, sys.stdout, load_queries(), args.format, inline=True)
    except AuditError as e:
        return fail(str(e))
    print(format_rows(columns, rows, args.format))
    return 0


if __name__ == "__main__":
    exit_now(main())
