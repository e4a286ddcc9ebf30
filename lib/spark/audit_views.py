"""The views and functions the SQL audits (sql/audits) select from: each Kafka rule an audit
answers is built here, once, from the code the report and the pipeline use, so a query reads
as SQL yet cannot drift from them.

Views (temporary, over the catalog's tables; a view is left out when a table it reads is not
in the warehouse):
- offset_effects: every change to a committed offset, in the loader's order
  (lib.replay.offsets_spark.offset_effects; needs offsets_log);
- lag_timeline: each group's lag on each partition, stretch by stretch
  (lib.spark.lag_rules.lag_timeline; group_lag, partition_end_offsets);
- offset_expiry, group_expiry: what the cleanup may expire or delete, and from when retention
  counts (lib.replay.expiry_spark; group_offsets, consumer_groups,
  pending_transactional_offsets);
- restores: the restores jobs.restore_offsets executed (offset_restores; empty without it).
Functions: lag_ms_at(lag_records, truncated, first_unconsumed_at, at) and
expiry_due(expire_timestamp, retention_base, retention_ms)."""

from __future__ import annotations

from lib.replay.expiry_spark import EXPIRY_DUE_FUNCTION, group_expiry, offset_expiry
from lib.replay.offsets_spark import offset_effects
from lib.spark.lag_rules import LAG_MS_AT_FUNCTION, lag_timeline
from schemas import tables as T

# view -> the tables it reads
VIEW_TABLES = {
    "offset_effects": ("offsets_log",),
    "lag_timeline": ("group_lag", "partition_end_offsets"),
    "offset_expiry": ("group_offsets", "consumer_groups", "pending_transactional_offsets"),
    "group_expiry": ("consumer_groups", "pending_transactional_offsets"),
}


def view_builders(spark, database: str) -> dict:
    """view -> (the tables it reads, a function building its DataFrame) over `database`."""

    def t(name):
        return spark.table(f"{database}.`{name}`")

    build = {
        "offset_effects": lambda: offset_effects(t("offsets_log")),
        "lag_timeline": lambda: lag_timeline(t("group_lag"), t("partition_end_offsets")),
        "offset_expiry": lambda: offset_expiry(
            t("group_offsets"), t("consumer_groups"), t("pending_transactional_offsets")
        ),
        "group_expiry": lambda: group_expiry(t("consumer_groups"), t("pending_transactional_offsets")),
    }
    return {view: (needs, build[view]) for view, needs in VIEW_TABLES.items()}


def register_views(spark, database: str, tables: list[str]) -> list[str]:
    """Create (or replace) the views whose tables are among `tables` (names in `database`) and
    the functions. Returns the names of the views created."""
    made = []
    for name, (needs, build) in view_builders(spark, database).items():
        spark.catalog.dropTempView(name)  # a warehouse opened before may have had the table
        if set(needs) <= set(tables):
            build().createOrReplaceTempView(name)
            made.append(name)
    # the restores jobs.restore_offsets executed (empty before the first: offset_rewinds joins it)
    restores = (
        spark.table(f"{database}.`offset_restores`")
        if "offset_restores" in tables
        else spark.createDataFrame([], T.OFFSET_RESTORES.ddl)
    )
    restores.where("mode = 'executed'").createOrReplaceTempView("restores")
    made.append("restores")
    spark.sql(LAG_MS_AT_FUNCTION)
    spark.sql(EXPIRY_DUE_FUNCTION)
    return made
