"""A long-running, read-only SQL endpoint over the warehouse: Spark Connect and Spark's Thrift
JDBC/ODBC server in one driver, for SQL clients, BI tools and notebooks.

    python -m jobs.serve --warehouse WH [--host 127.0.0.1] [--connect-port 15002] [--jdbc-port 10000]
                         [--token-file FILE]

Every table is in database offsets_lake, every canned audit is a table function
(`SELECT * FROM lag_at('billing')`); see lib.reporting.endpoint. Loopback by default; any other
address needs a token (--token-file, or OFFSETS_LAKE_ENDPOINT_TOKEN): Spark Connect clients send
it as `;token=` in their sc:// URL, JDBC clients as the password. Runs until SIGINT or SIGTERM.
Exit code 0 after a clean stop, 2 on bad input (nothing started)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time

from lib import storage
from lib.cli import add_conf_argument, failer, spark_overrides
from lib.reporting.audit_queries import AuditError, warehouse_tables
from lib.reporting.endpoint import LOOPBACK, THRIFT_AUTHENTICATOR, EndpointAddress, publish, server_settings

fail = failer("serve")
TOKEN_ENV = "OFFSETS_LAKE_ENDPOINT_TOKEN"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="serve", description=__doc__.splitlines()[0])
    p.add_argument("--warehouse", required=True, help="folder of the Delta tables (a path or s3a://bucket/prefix)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback only)")
    p.add_argument("--connect-port", type=int, default=15002, help="Spark Connect's port (default 15002)")
    p.add_argument("--jdbc-port", type=int, default=10000, help="the Thrift JDBC/ODBC server's port (default 10000)")
    p.add_argument("--token-file", help=f"file holding the token clients must give (or ${TOKEN_ENV})")
    p.add_argument(
        "--refresh-seconds",
        type=float,
        default=2.0,
        help="how often to look for new commits of the tables behind the kept rule views (default 2)",
    )
    p.add_argument("--ready-file", help="write the endpoint's URLs here as JSON once it answers (for scripts)")
    add_conf_argument(p)
    return p.parse_args(argv)


def read_token(args: argparse.Namespace) -> str | None:
    if args.token_file:
        try:
            with open(args.token_file, encoding="utf-8") as f:
                token = f.read().strip()
        except OSError as e:
            raise AuditError(f"--token-file: {e.strerror}: {args.token_file}") from None
        if not token:
            raise AuditError(f"--token-file {args.token_file} is empty")
        return token
    return os.environ.get(TOKEN_ENV) or None


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        if not storage.is_remote(args.warehouse):
            warehouse_tables(args.warehouse)
        token = read_token(args)
        if args.host not in LOOPBACK and not token:
            raise AuditError(f"--host {args.host} is not loopback: give a token (--token-file or ${TOKEN_ENV})")
        address = EndpointAddress(args.host, args.connect_port, args.jdbc_port, token)
        overrides = {**server_settings(address), **spark_overrides(args.conf, args.master)}
    except (AuditError, ValueError) as e:
        return fail(str(e))

    from lib.spark.session import build_session

    started = time.monotonic()
    spark = build_session("offsets-lake-endpoint", overrides, object_store=storage.is_remote(args.warehouse))
    jvm = spark._jvm
    try:
        attached, refresher = publish(spark, args.warehouse)
    except AuditError as e:
        spark.stop()
        return fail(str(e))
    if token:
        jvm.java.lang.System.setProperty("offsetslake.endpoint.token", token)
        # Hive builds the CUSTOM provider from a new HiveConf, which reads system properties only
        jvm.java.lang.System.setProperty("hive.server2.custom.authentication.class", THRIFT_AUTHENTICATOR)
    jvm.org.apache.spark.sql.hive.thriftserver.HiveThriftServer2.startWithContext(spark._jsparkSession.sqlContext())
    # from here on, no session may write or change the catalog; this thread (the one refreshing
    # the kept views) still may replace its global temporary views
    jvm.offsetslake.ReadOnlyGuard.exemptThisThread()
    jvm.offsetslake.ReadOnlyGuard.lock()
    print(f"offsets-lake SQL endpoint over {args.warehouse} (read-only), up in {time.monotonic() - started:.1f} s")
    print(f"  Spark Connect: {address.connect_url}")
    print(f"  JDBC/ODBC:     {address.jdbc_url}" + ("  (password: the token)" if token else ""))
    print(f"  tables: {', '.join(attached.tables)}")
    print(f"  audits as table functions: {', '.join(attached.functions)}")
    sys.stdout.flush()
    if args.ready_file:
        ready = {"connect_url": address.connect_url, "jdbc_url": address.jdbc_url, "functions": attached.functions}
        tmp = args.ready_file + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(ready, f)
        os.replace(tmp, args.ready_file)

    stop, refreshing = threading.Event(), threading.Event()

    def on_signal(*_) -> None:
        stop.set()
        if refreshing.is_set():  # a refresh of a large warehouse takes minutes: leave it
            raise KeyboardInterrupt

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    try:
        while not stop.wait(args.refresh_seconds):
            refreshing.set()
            try:
                for snap in refresher.refresh():
                    print(f"kept {snap.view}: {snap.rows} rows, computed in {snap.seconds:.1f} s", flush=True)
            except Exception as e:  # a failed refresh keeps the previous snapshot and retries
                print(f"serve: warning: refreshing the views failed, serving the previous ones: {e}", file=sys.stderr)
            finally:
                refreshing.clear()
    except KeyboardInterrupt:
        pass
    print("offsets-lake SQL endpoint: stopping", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
