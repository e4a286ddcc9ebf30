"""The SQL endpoint over a warehouse (jobs.serve): one Spark driver serving Spark Connect
(sc://) and Spark's Thrift JDBC/ODBC server (HiveServer2 protocol), read-only.

What a client sees, in every session:
- the warehouse's tables in database `offsets_lake` (external Delta tables: each query reads
  the table's latest committed version, so a replay committing beside the server shows in the
  next query, and the server never locks or writes a table);
- the views and functions the canned audits read (lib.spark.audit_views: offset_effects,
  lag_timeline, ...), temporary, since Spark keeps views built from DataFrames in a session only;
- each canned audit of sql/audits as a SQL table function of the same name and parameters
  (`SELECT * FROM lag_at('billing', TIMESTAMP '2026-11-20 12:00:00')`, or by name:
  `lag_at(group => 'billing')`), made from the same file jobs.audit runs.

The Thrift server runs in single-session mode, so every JDBC client shares the server's own
session and its temporary objects. A Spark Connect client gets a session of its own, which
`attach` fills with the same objects (jobs.audit --remote does it before its query)."""

from __future__ import annotations

import datetime as dt
import os
import re
from dataclasses import dataclass

from lib.cli import parse_time_ms
from lib.reporting.audit_queries import (
    DATABASE,
    PARAMETER_MODE,
    SQL_TYPES,
    AuditError,
    Query,
    load_queries,
    parse_duration,
    sql_tokens,
)

# the session extension that refuses writes once the server is up (conf/jvm)
READ_ONLY_EXTENSION = "offsetslake.ReadOnlyExtension"
THRIFT_AUTHENTICATOR = "offsetslake.TokenAuthenticator"
LOOPBACK = ("127.0.0.1", "localhost", "::1")
JVM_JAR = "offsets-lake-jvm.jar"  # conf/jvm, built by `make jvm-extension` into .jars/spark


@dataclass(frozen=True)
class EndpointAddress:
    """Where the endpoint listens; a token is required unless the host is loopback."""

    host: str = "127.0.0.1"
    connect_port: int = 15002
    jdbc_port: int = 10000
    token: str | None = None

    @property
    def connect_url(self) -> str:
        # Spark's client sends a token over TLS, or in the clear to "localhost" only
        host = "localhost" if self.host in LOOPBACK else self.host
        return f"sc://{host}:{self.connect_port}" + (f"/;token={self.token}" if self.token else "")

    @property
    def jdbc_url(self) -> str:
        return f"jdbc:hive2://{self.host}:{self.jdbc_port}/{DATABASE}"


def server_settings(address: EndpointAddress) -> dict[str, str]:
    """The Spark settings of the endpoint's driver: the Connect plugin, the Thrift server's
    address and single session, the read-only extension after Delta's, and the token."""
    from lib.spark.session import DEFAULT_JARS

    out = {
        # on the JVM's own class path too: Hive's Thrift threads load the authenticator with a
        # class loader that does not always see spark.jars
        "spark.driver.extraClassPath": os.path.join(DEFAULT_JARS, JVM_JAR),
        "spark.plugins": "org.apache.spark.sql.connect.SparkConnectPlugin",
        "spark.connect.grpc.binding.address": address.host,
        "spark.connect.grpc.binding.port": str(address.connect_port),
        "spark.hive.server2.thrift.bind.host": address.host,
        "spark.hive.server2.thrift.port": str(address.jdbc_port),
        "spark.sql.hive.thriftServer.singleSession": "true",
        "spark.sql.extensions": f"io.delta.sql.DeltaSparkSessionExtension,{READ_ONLY_EXTENSION}",
        # ad-hoc delta.`/path` reads are off: every table a client reads is one of the catalog's
        "spark.sql.runSQLOnFiles": "false",
        PARAMETER_MODE[0]: PARAMETER_MODE[1],
    }
    if address.token:
        out["spark.connect.authenticate.token"] = address.token
        out["spark.hive.server2.authentication"] = "CUSTOM"
        out["spark.hive.server2.custom.authentication.class"] = THRIFT_AUTHENTICATOR
    return out


# --- the canned audits as table functions -------------------------------------------------
def _default_sql(type_: str, raw: str) -> str:
    if raw == "null":
        return "NULL"
    if raw == "now":
        return "current_timestamp()"
    if type_ == "string":
        return "'" + raw.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if type_ == "int":
        return str(int(raw))
    if type_ == "timestamp":
        ts = dt.datetime.fromtimestamp(parse_time_ms(raw) / 1000, dt.UTC)
        return f"TIMESTAMP '{ts.strftime('%Y-%m-%d %H:%M:%S.%f')}'"
    seconds = parse_duration(raw).total_seconds()
    return f"make_dt_interval(0, 0, 0, {seconds!r})"


def audit_function_sql(query: Query) -> str:
    """`CREATE OR REPLACE TEMPORARY FUNCTION <query>(<its parameters>) RETURNS TABLE RETURN <its
    SQL>`: the same file, its markers `:name` read as the function's parameters."""
    params = []
    for p in query.params:
        spec = f"`{p.name}` {SQL_TYPES[p.type]}"
        if not p.required:
            spec += f" DEFAULT {_default_sql(p.type, p.default or 'null')}"
        params.append(spec)

    def token(m: re.Match) -> str:
        if m.group(1) is not None:
            return f"`{query.name}`.`{m.group(1)}`"
        if m.group(3) is not None:  # a JDBC client may have made another database current
            return f"{m.group(2)}{DATABASE}.`{m.group(3)}`"
        return m.group(0)

    body = sql_tokens().sub(token, query.sql).strip().rstrip(";")
    return f"CREATE OR REPLACE TEMPORARY FUNCTION `{query.name}`({', '.join(params)}) RETURNS TABLE RETURN\n{body}"


def has_function_form(query: Query) -> bool:
    """Spark takes a function's parameter anywhere a constant may stand, except the instant of
    a time-travel clause (`TIMESTAMP AS OF :at`): such a query stays jobs.audit's only."""
    return re.search(r"(?i)\bAS\s+OF\s+:", query.sql) is None


@dataclass(frozen=True)
class Attached:
    """What `attach` made in a session."""

    tables: tuple[str, ...]
    views: tuple[str, ...]
    functions: tuple[str, ...]


def session_script(views: list[str], queries: dict[str, Query]) -> str:
    """One SQL script (one round trip) that makes a session answer as the server's: database
    offsets_lake, the rule views (over the global temporary views the server published), the
    rule functions and each of `queries` as a table function."""
    from lib.replay.expiry_spark import EXPIRY_DUE_FUNCTION
    from lib.spark.lag_rules import LAG_MS_AT_FUNCTION

    statements = [f"USE {DATABASE}"]
    statements += [f"CREATE OR REPLACE TEMPORARY VIEW `{v}` AS SELECT * FROM global_temp.`{v}`" for v in views]
    statements += [LAG_MS_AT_FUNCTION, EXPIRY_DUE_FUNCTION]
    statements += [audit_function_sql(q) for q in queries.values()]
    return "BEGIN\n" + ";\n".join(statements) + ";\nEND"


def table_version(warehouse: str, table: str) -> int | None:
    """The table's latest committed version: its newest _delta_log/<version>.json (a listing,
    no log replay: the refresher asks every few seconds)."""
    from lib import storage

    log = storage.join(warehouse, table, "_delta_log")
    versions = [int(e.name[:-5]) for e in storage.list_dir(log) if e.name.endswith(".json") and e.name[:-5].isdigit()]
    return max(versions) if versions else None


@dataclass(frozen=True)
class ViewSnapshot:
    """A rule view as the endpoint serves it: computed from these versions of its tables."""

    view: str
    versions: tuple[tuple[str, int | None], ...]
    rows: int
    refreshed_at: dt.datetime
    seconds: float


class ViewRefresher:
    """The rule views (lib.spark.audit_views) kept computed: each is evaluated once per change
    of its tables and kept (memory, then local disk) as the global temporary view every session
    reads. Recomputing them per query cost 8-11 s of Spark jobs for a lag_at on the ten-day
    sample; a kept view answers in a fraction of a second. The tables themselves are read at
    query time; a view follows a commit once `refresh` has seen it (jobs.serve asks every
    --refresh-seconds), and global_temp.endpoint_views says which versions each view shows
    (a view not in it yet is still evaluated from the tables at each query)."""

    def __init__(self, spark, warehouse: str, tables: list[str]):
        from lib.spark.audit_views import view_builders

        self.spark, self.warehouse = spark, warehouse
        self.views = {v: nb for v, nb in view_builders(spark, DATABASE).items() if set(nb[0]) <= set(tables)}
        self.snapshots: dict[str, ViewSnapshot] = {}
        self._kept: dict[str, object] = {}

    def refresh(self) -> list[ViewSnapshot]:
        """Recompute the views whose tables changed since they were computed; returns those."""
        import time

        from pyspark import StorageLevel

        done = []
        for view, (needs, build) in self.views.items():
            versions = tuple((t, table_version(self.warehouse, t)) for t in needs)
            old = self.snapshots.get(view)
            if old is not None and old.versions == versions:
                continue
            started = time.monotonic()
            df = build().persist(StorageLevel.MEMORY_AND_DISK)
            rows = df.count()
            df.createOrReplaceGlobalTempView(view)  # sessions read it by name: the swap is atomic
            previous = self._kept.pop(view, None)
            if previous is not None:
                previous.unpersist()  # type: ignore[attr-defined]
            self._kept[view] = df
            snap = ViewSnapshot(view, versions, rows, dt.datetime.now(dt.UTC), time.monotonic() - started)
            self.snapshots[view] = snap
            done.append(snap)
        if done:
            self._publish_state()
        return done

    def _publish_state(self) -> None:
        rows = [
            (s.view, ", ".join(f"{t}@{v}" for t, v in s.versions), s.rows, s.refreshed_at, round(s.seconds, 3))
            for s in self.snapshots.values()
        ]
        ddl = "view STRING, table_versions STRING, rows BIGINT, refreshed_at TIMESTAMP, seconds DOUBLE"
        self.spark.createDataFrame(rows, ddl).createOrReplaceGlobalTempView("endpoint_views")


def publish(spark, warehouse: str, queries: dict[str, Query] | None = None) -> tuple[Attached, ViewRefresher]:
    """The server's own session: register the warehouse (audit_queries.open_catalog), publish
    the rule views as global temporary views for every session, evaluated from the tables at
    each query until ViewRefresher.refresh has computed them (on a large warehouse that takes
    minutes: the endpoint answers meanwhile), and attach."""
    from lib.reporting.audit_queries import open_catalog

    tables = open_catalog(spark, warehouse)
    refresher = ViewRefresher(spark, warehouse, tables)
    for view in refresher.views:
        spark.table(view).createOrReplaceGlobalTempView(view)  # open_catalog's live views
    # restores: jobs.restore_offsets' small table, read at query time
    spark.table("restores").createOrReplaceGlobalTempView("restores")
    return attach(spark, queries), refresher


def attach(spark, queries: dict[str, Query] | None = None, audit_functions: bool = True) -> Attached:
    """Make a session of the endpoint (a Spark Connect client's, or the server's own) answer
    what jobs.audit answers. Creates temporary objects only; four round trips.
    audit_functions=False leaves out the canned audits' table functions (jobs.audit --remote
    sends the audit's own SQL): making them resolves every table they read, most of a second
    attach's cost."""
    from lib.spark.assignment import register_what_if

    queries = load_queries() if queries is None else queries
    # SHOW TABLES, not catalog.listTables: that one loads every Delta table's log
    listed = spark.sql(f"SHOW TABLES IN {DATABASE}").collect()
    tables = tuple(sorted(r.tableName for r in listed if not r.isTemporary))
    if not tables:
        raise AuditError(f"the endpoint's database {DATABASE} holds no table")
    published = spark.sql("SHOW VIEWS IN global_temp").collect()
    views = sorted({r.viewName for r in published if r.namespace == "global_temp"} - {"endpoint_views"})
    spark.conf.set(*PARAMETER_MODE)
    # assignor_what_if is a Python function, which a script cannot make; the audits' functions
    # that call it are checked against it as they are made
    register_what_if(spark)
    made = {n: q for n, q in queries.items() if has_function_form(q)} if audit_functions else {}
    spark.sql(session_script(views, made)).collect()
    return Attached(tables, tuple(views), tuple(made))
