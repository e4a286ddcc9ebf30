"""Great Expectations checks on the Delta tables (suites in schemas/quality_checks.py).

run_suites() reads every table with Spark, adds the suite's helper columns, validates it
with GX Core (an ephemeral context: a Spark data source, one ExpectationSuite,
ValidationDefinition and Checkpoint per table) and writes, under WAREHOUSE/_quality/:
- data_docs/index.html: GX's Data Docs of this check run (rebuilt each run);
- results.json: a machine-readable summary (shape in `QualityResult.to_json`).
Nothing is written outside the warehouse; GX keeps its stores in memory."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lib import storage
from lib.lake.run_tags import rebuilt_partitions, tagged_run
from lib.reporting.model import QUALITY_DIR
from schemas import quality_checks as Q
from schemas import tables as T

if TYPE_CHECKING:  # imported where used: GX is slow to import
    import great_expectations as gx

RESULTS_FILE = "results.json"
DOCS_DIR = "data_docs"
DETAIL_FORMAT = {"result_format": "SUMMARY", "partial_unexpected_count": 5}
GX_SEVERITY = {Q.ERROR: "critical", Q.WARNING: "warning"}


class QualityInputError(Exception):
    """The warehouse or one of its tables is missing: nothing to check."""


@dataclass
class ExpectationOutcome:
    name: str
    expectation_type: str
    column: str | None
    severity: str
    success: bool
    unexpected_count: int | None
    details: str

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "expectation_type": self.expectation_type,
            "column": self.column,
            "severity": self.severity,
            "success": self.success,
            "unexpected_count": self.unexpected_count,
            "details": self.details,
        }


@dataclass
class TableOutcome:
    table: str
    rows: int
    expectations: list[ExpectationOutcome] = field(default_factory=list)

    @property
    def success(self) -> bool:
        """No error-level expectation failed (warnings do not fail a table)."""
        return not self.errors

    @property
    def errors(self) -> list[ExpectationOutcome]:
        return [e for e in self.expectations if not e.success and e.severity == Q.ERROR]

    @property
    def warnings(self) -> list[ExpectationOutcome]:
        return [e for e in self.expectations if not e.success and e.severity == Q.WARNING]

    def expectation(self, name: str) -> ExpectationOutcome:
        return next(e for e in self.expectations if e.name == name)

    def to_json(self) -> dict:
        return {
            "table": self.table,
            "success": self.success,
            "rows": self.rows,
            "expectations": [e.to_json() for e in self.expectations],
        }


@dataclass
class QualityResult:
    checked_at: str
    tables: list[TableOutcome]
    results_path: str
    docs_path: str

    @property
    def success(self) -> bool:
        return all(t.success for t in self.tables)

    def table(self, name: str) -> TableOutcome:
        return next(t for t in self.tables if t.table == name)

    @property
    def failures(self) -> list[tuple[str, ExpectationOutcome]]:
        """(table, expectation) of every error-level failure."""
        return [(t.table, e) for t in self.tables for e in t.errors]

    def to_json(self) -> dict:
        return {"checked_at": self.checked_at, "success": self.success, "tables": [t.to_json() for t in self.tables]}


# --- the DataFrames to validate -------------------------------------------------------------
def _full_rebuilds(spark, warehouse: str) -> set[tuple[str, int | None]]:
    """(run id, partition) of every offsets_log commit that rebuilt partitions (a --full run,
    or a partition's first run; its userMetadata lists them); partition None = the whole
    table."""
    from delta.tables import DeltaTable

    out: set[tuple[str, int | None]] = set()
    path = storage.join(warehouse, T.OFFSETS_LOG.name)
    for r in (
        DeltaTable.forPath(spark, path).history().select("operation", "operationParameters", "userMetadata").collect()
    ):
        run_id = tagged_run(r["userMetadata"])
        rebuilt = rebuilt_partitions(r["userMetadata"])
        if run_id is not None and rebuilt is not None:
            out.update((run_id, p) for p in rebuilt)
            continue
        # an earlier version's offsets_log, partitioned: a WRITE overwriting partitions
        params = r["operationParameters"] or {}
        if run_id is None or r["operation"] != "WRITE" or params.get("mode") != "Overwrite":
            continue
        predicate = params.get("predicate") or ""
        m = re.search(r"offsets_partition IN \(([-\d, ]*)\)", predicate)
        if m:
            out.update((run_id, int(p)) for p in m.group(1).split(",") if p.strip())
        elif not predicate or predicate == "[]":
            out.add((run_id, None))
    return out


def _previous_checkpoint(spark, warehouse: str, df, derived: Q.Derived):
    """Join the previous Delta version's next_log_offset. It is nulled (no comparison) where
    the current checkpoint was written by a different run that rebuilt the partition
    (overwrote it in offsets_log): the one legitimate reset. A row changed without a new
    run (same run id) is always compared."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    path = storage.join(warehouse, T.REPLAY_CHECKPOINTS.name)
    version = DeltaTable.forPath(spark, path).history(1).select("version").collect()[0]["version"]
    if version == 0:
        return df.withColumn(derived.name, F.lit(None).cast("bigint"))
    prev = (
        spark.read.format("delta")
        .option("versionAsOf", version - 1)
        .load(path)
        .select(
            "offsets_partition",
            F.col("next_log_offset").alias(derived.name),
            F.col("run_id").alias("_q_previous_run_id"),
        )
    )
    rebuilt = _full_rebuilds(spark, warehouse)
    whole = [run for run, p in rebuilt if p is None]
    reset = F.col("run_id").isin(whole) if whole else F.lit(False)
    for run_id, p in rebuilt:
        if p is not None:
            reset = reset | ((F.col("run_id") == run_id) & (F.col("offsets_partition") == p))
    reset = reset & ~F.col("run_id").eqNullSafe(F.col("_q_previous_run_id"))
    return (
        df.join(prev, "offsets_partition", "left")
        .withColumn(derived.name, F.when(reset, F.lit(None).cast("bigint")).otherwise(F.col(derived.name)))
        .drop("_q_previous_run_id")
    )


def _log_end(spark, warehouse: str, df, derived: Q.Derived):
    from pyspark.sql import functions as F

    ends = (
        spark.read.format("delta")
        .load(storage.join(warehouse, T.OFFSETS_LOG.name))
        .groupBy("offsets_partition")
        .agg(F.max("log_offset").alias(derived.name))
    )
    return df.join(ends, "offsets_partition", "left")


def table_frame(
    spark,
    warehouse: str,
    suite: Q.Suite,
    partitions: list[int] | None = None,
    partition_count: int = Q.DEFAULT_PARTITION_COUNT,
):
    """The table as validated: its rows (of `partitions` only, if given) plus the helper columns."""
    from pyspark.sql import functions as F

    df = spark.read.format("delta").load(storage.join(warehouse, suite.name))
    if partitions and "offsets_partition" in df.columns:
        df = df.filter(F.col("offsets_partition").isin([int(p) for p in partitions]))
    for d in suite.derived:
        if d.kind == "sql":
            df = df.withColumn(d.name, F.expr(d.sql.format(partition_count=int(partition_count))))
        elif d.kind == "previous_checkpoint":
            df = _previous_checkpoint(spark, warehouse, df, d)
        elif d.kind == "log_end":
            df = _log_end(spark, warehouse, df, d)
        else:
            raise ValueError(f"unknown helper column kind {d.kind!r}")
    return df


def check_inputs(spark, warehouse: str, suites) -> None:
    from lib.lake.delta import table_exists

    if not storage.isdir(warehouse):
        raise QualityInputError(f"warehouse {warehouse} does not exist")
    missing = [s.name for s in suites if not table_exists(storage.join(warehouse, s.name))]
    if missing:
        raise QualityInputError(
            f"warehouse {warehouse} has no Delta table {', '.join(missing)} (run jobs.replay_offsets first)"
        )


# --- Great Expectations ----------------------------------------------------------------------
def _context(docs_dir: str):
    import great_expectations as gx
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        InMemoryStoreBackendDefaults,
        ProgressBarsConfig,
    )

    config = DataContextConfig(
        analytics_enabled=False,
        progress_bars=ProgressBarsConfig(globally=False),
        store_backend_defaults=InMemoryStoreBackendDefaults(),
    )
    ctx = gx.get_context(mode="ephemeral", project_config=config)
    ctx.add_data_docs_site(
        "offsets_lake",
        {
            "class_name": "SiteBuilder",
            "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": docs_dir},
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
        },
    )
    return ctx


def build_suite(name: str, checks) -> gx.ExpectationSuite:
    """A GX ExpectationSuite of `checks`: our name, severity and doc ride in each expectation's meta."""
    import great_expectations as gx

    gx_suite = gx.ExpectationSuite(name=name)
    for c in checks:
        cls = getattr(gx.expectations, c.expectation)
        gx_suite.add_expectation(
            cls(
                **c.kwargs,
                severity=GX_SEVERITY[c.severity],
                meta={"name": c.name, "severity": c.severity, "doc": c.doc},
                notes=f"{c.name} ({c.severity}): {c.doc}",
            )
        )
    return gx_suite


def _validate(ctx, source, name: str, checks, df, result_format: dict) -> dict:
    """One GX checkpoint run of `checks` over `df`: {check name: result}. The results stay in
    the context's (in-memory) validation results store; Data Docs are built once at the end."""
    import great_expectations as gx

    batch = source.add_dataframe_asset(name).add_batch_definition_whole_dataframe("whole_table")
    gx_suite = ctx.suites.add(build_suite(name, checks))
    vd = ctx.validation_definitions.add(gx.ValidationDefinition(name=name, data=batch, suite=gx_suite))
    checkpoint = ctx.checkpoints.add(
        gx.Checkpoint(name=f"quality_{name}", validation_definitions=[vd], actions=[], result_format=result_format)
    )
    run = checkpoint.run(batch_parameters={"dataframe": df})
    out = {}
    for suite_result in run.run_results.values():
        for r in suite_result.results:
            out[(r.expectation_config.meta or {}).get("name")] = r
    return out


def _short(value, limit: int = 160) -> str:
    text = json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _outcome(check: Q.Check, r, rows: int) -> ExpectationOutcome:
    gx_type = r.expectation_config.type if r is not None else ""

    def failed(detail: str) -> ExpectationOutcome:
        return ExpectationOutcome(check.name, gx_type, Q.report_column(check), check.severity, False, None, detail)

    if r is None:
        return failed("no result from Great Expectations")
    result = dict(r.result or {})
    exc = r.exception_info or {}
    if isinstance(exc, dict) and exc.get("raised_exception"):
        return failed("check raised: " + str(exc.get("exception_message", ""))[:200])
    unexpected = result.get("unexpected_count")
    if r.success:
        # BOOLEAN_ONLY pass: a map expectation with mostly=1 passes only with no unexpected row
        unexpected = 0 if unexpected is None else unexpected
        details = f"{rows} rows checked"
    else:
        checked = result.get("element_count", rows)
        details = f"{unexpected} of {checked} rows unexpected" if unexpected is not None else "failed"
        examples = result.get("partial_unexpected_list") or []
        if examples:
            details += "; e.g. " + _short(examples[:3])
        elif "observed_value" in result:
            details += "; observed " + _short(result["observed_value"])
    return ExpectationOutcome(
        check.name,
        gx_type,
        Q.report_column(check),
        check.severity,
        bool(r.success),
        None if unexpected is None else int(unexpected),
        details,
    )


def run_suites(
    spark,
    warehouse: str,
    partitions: list[int] | None = None,
    partition_count: int = Q.DEFAULT_PARTITION_COUNT,
    tables: list[str] | None = None,
) -> QualityResult:
    """Validate the tables (all, or `tables`) of `warehouse`, restricted to `partitions` if
    given; write WAREHOUSE/_quality/results.json and data_docs/. Raises QualityInputError
    when the warehouse or a table is missing."""

    if partition_count <= 0:
        raise QualityInputError("partition count must be positive")
    if tables:
        suites = [Q.SUITES[n] for n in tables]
    else:
        # the lag stage's tables exist only where the input held consumed topics,
        # assignment_audit only in warehouses a run of this version wrote, offset_restores
        # once a restore ran
        from lib.lake.delta import table_exists

        optional = {t.name for t in (*T.LAG_TABLES, *T.RESTORE_TABLES, T.ASSIGNMENT_AUDIT)}
        suites = [s for s in Q.ALL_SUITES if s.name not in optional or table_exists(storage.join(warehouse, s.name))]
    check_inputs(spark, warehouse, suites)
    for name in ("great_expectations", "py4j"):
        logging.getLogger(name).setLevel(logging.ERROR)

    # Great Expectations writes its data docs to a local folder: for a warehouse on an object
    # store, a temporary one, uploaded at the end
    stage = tempfile.mkdtemp(prefix="offsets-lake-quality-") if storage.is_remote(warehouse) else None
    out_dir = os.path.join(stage or os.path.abspath(warehouse), QUALITY_DIR)  # GX wants absolute paths
    docs_dir = os.path.join(out_dir, DOCS_DIR)
    shutil.rmtree(docs_dir, ignore_errors=True)
    os.makedirs(docs_dir, exist_ok=True)
    checked_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")

    ctx = _context(docs_dir)
    source = ctx.data_sources.add_spark("warehouse", persist=False)
    outcomes = []
    for suite in suites:
        df = table_frame(spark, warehouse, suite, partitions, partition_count).cache()
        try:
            rows = df.count()
            # Pass 1 asks only pass/fail (one aggregate job for the whole suite); every check
            # here is a map expectation with mostly=1, so a pass means 0 unexpected rows.
            # Pass 2 re-runs the failed checks alone for counts and examples.
            first = _validate(ctx, source, suite.name, suite.checks, df, {"result_format": "BOOLEAN_ONLY"})
            failed = [c for c in suite.checks if c.name in first and not first[c.name].success]
            detail = _validate(ctx, source, f"{suite.name}.failed", failed, df, DETAIL_FORMAT) if failed else {}
            by_name = {**first, **detail}
            outcomes.append(
                TableOutcome(suite.name, rows, [_outcome(c, by_name.get(c.name), rows) for c in suite.checks])
            )
        finally:
            df.unpersist()

    ctx.build_data_docs()
    result = QualityResult(
        checked_at, outcomes, os.path.join(out_dir, RESULTS_FILE), os.path.join(docs_dir, "index.html")
    )
    tmp = result.results_path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(result.to_json(), f, indent=2)
        f.write("\n")
    os.replace(tmp, result.results_path)
    if stage is not None:
        remote_dir = storage.join(warehouse, QUALITY_DIR)
        storage.upload_tree(out_dir, remote_dir)
        shutil.rmtree(stage, ignore_errors=True)
        result = dataclasses.replace(
            result,
            results_path=storage.join(remote_dir, RESULTS_FILE),
            docs_path=storage.join(remote_dir, DOCS_DIR, "index.html"),
        )
    return result


def print_results(result, out=None) -> int:
    """Print the per-table lines and the failures (to stdout by default); return the exit code."""
    out = out if out is not None else sys.stdout
    for t in result.tables:
        passed = sum(e.success for e in t.expectations)
        failed = len(t.expectations) - passed
        status = "ok" if t.success else "FAILED"
        warn = f", {len(t.warnings)} warning(s)" if t.warnings else ""
        print(f"{t.table:<30} {status:<6} {passed:>3} passed, {failed:>2} failed{warn}  ({t.rows} rows)", file=out)
        for e in t.errors + t.warnings:
            print(
                f"    {e.severity}: {e.name} ({e.expectation_type}"
                f"{', column ' + e.column if e.column else ''}): {e.details}",
                file=out,
            )
    print(f"data docs: {result.docs_path}", file=out)
    print(f"results:   {result.results_path}", file=out)
    if result.success:
        return 0
    names = ", ".join(f"{table}.{e.name}" for table, e in result.failures)
    print(f"quality: error-level expectations failed: {names}", file=sys.stderr)
    return 1
