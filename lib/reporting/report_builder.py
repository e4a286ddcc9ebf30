"""The warehouse report: one self-contained HTML page (WAREHOUSE/report/index.html) a person
looks at. Everything is aggregated in Spark with built-in functions; only small results are
collected (top-N groups, bucketed plot points, bounded lists).

What it shows, and how each number is computed:

- Commits: OffsetCommit records (key types 0 and 1) of `offsets_log` with a value, that took
  effect: non-transactional ones (producer id -1, as Kafka 4.x decides) and transactional ones
  whose producer's next marker is a COMMIT (aborted, still-open and tombstone-cleared ones are
  left out, and so are those superseded or outdated before their marker;
  `lib.replay.offsets_spark.classify_transactional` decides). A commit's time is when it took
  effect: the record's `log_timestamp` (its `commit_timestamp` for legacy records without one),
  or its transaction's COMMIT marker's, as in `group_lag`.
- Per group (the top N by commits): commits per hour over time, and the committed offset of each
  topic-partition over time (the last commit in each time bucket; at most `MAX_SERIES`
  partitions per group, the first in (topic, partition) order), drawn at the time of that last
  commit. Bucket width per group: the smallest of `BUCKET_LADDER_MS` (1 hour and up) giving at
  most `MAX_BUCKETS` buckets over the group's span, aligned to multiples of the width since the
  epoch; the rate is in commits per hour (count / bucket hours).
- Largest groups: by live offsets (`group_offsets` rows), by members (size of `members` in
  `consumer_groups`), by commits (as above); groups with 0 of the ranked quantity are left out.
- Expiring soon: the live offsets the coordinator's cleanup would remove at now + N days if
  nothing changed in between (no new commits, the groups' state as it is): the same rules as the
  replay (`lib.replay.expiry_spark.judge_offsets`) judged at that horizon. The due time shown is the
  explicit `expire_timestamp` when there is one, else base + retention, where the base is the
  group's `current_state_timestamp` for an Empty classic group with a protocol type, and the
  offset's `commit_timestamp` otherwise. Groups due: `judge_groups` at the same horizon; a
  group's due time is that of its last offset to go (now, when it has none).
- Assignments (`assignment_audit`): up to `MAX_ASSIGNMENT_GROUPS` groups, those whose latest
  generation is flagged first (the leader's assignment differs from Kafka's assignor of that
  name, a partition assigned twice or unassigned, an imbalance of 2 or more), then the most
  rebalanced; per group its latest `MAX_GENERATIONS` generations: partitions per member, and the
  partitions moved in each rebalance next to the fewest a balanced assignment could have moved
  and to what cooperative-sticky would have moved from the same previous assignment.
- Quality: WAREHOUSE/_quality/results.json (written by jobs/quality.py), with a link to
  WAREHOUSE/_quality/data_docs/index.html when that exists.
"""

from __future__ import annotations

import datetime as dt
import json

from lib import storage
from lib.replay.expiry import DEFAULT_RETENTION_MINUTES
from lib.reporting.html import render_html
from lib.reporting.model import (
    BUCKET_LADDER_MS,
    DAY_MS,
    HOUR_MS,
    MAX_ASSIGNMENT_GROUPS,
    MAX_BEHIND_PLOTS,
    MAX_BUCKETS,
    MAX_EXPIRING_ROWS,
    MAX_GENERATIONS,
    MAX_SERIES,
    MINUTE_MS,
    QUALITY_DIR,
    REPORT_DIR,
    AssignmentPlot,
    GroupPlot,
    Rebalance,
    ReportData,
    Series,
)


def bucket_width(span_ms: int, max_buckets: int = MAX_BUCKETS) -> int:
    """The smallest ladder width that covers `span_ms` in at most `max_buckets` buckets
    (multiples of 30 days past the ladder)."""
    for w in BUCKET_LADDER_MS:
        if span_ms // w + 1 <= max_buckets:
            return w
    w = BUCKET_LADDER_MS[-1]
    return w * (-(-(span_ms // w + 1) // max_buckets))


def applied_commits(log):
    """Offset commits that took effect: group_id, topic, partition, committed_offset, ts (when it
    took effect), offsets_partition, log_offset (the record that made it effective: the commit,
    or its transaction's COMMIT marker), as group_lag's commit rows (see the module doc)."""
    from pyspark.sql import functions as F

    from lib.replay.offsets_spark import offset_effects

    return (
        offset_effects(log)
        .filter((F.col("kind") == "commit") & F.col("applied_at").isNotNull())
        .select(
            "group_id",
            "topic",
            "partition",
            "committed_offset",
            F.col("applied_at").alias("ts"),
            "offsets_partition",
            F.col("applied_offset").alias("log_offset"),
        )
    )


def _add_lag(spark, plots: list[GroupPlot], group_lag, end_offsets, now_ms: int) -> None:
    """Each plotted group's lag at the end of each of its commit-rate buckets (up to now): the
    sum over its partitions in records, the largest in time (lib.spark.lag_rules.lag_at_instants;
    a few hundred rows collected)."""
    from pyspark.sql import functions as F

    from lib.spark.lag_rules import lag_at_instants, lag_timeline

    probes = [(p.group_id, b, min(b + p.bucket_ms, now_ms)) for p in plots for b, _ in p.rate if b <= now_ms]
    if not probes:
        return
    probe_df = spark.createDataFrame(probes, "group_id STRING, bucket BIGINT, at_ms BIGINT").select(
        "group_id", "bucket", F.timestamp_millis("at_ms").alias("at")
    )
    timeline = lag_timeline(group_lag, end_offsets, only_groups=probe_df.select("group_id").distinct())
    rows = (
        lag_at_instants(timeline, probe_df)
        .groupBy("group_id", "bucket")
        .agg(
            # truncated partitions (negative lag) left out of the sum
            F.sum(F.when(F.col("lag_records") > 0, F.col("lag_records")).otherwise(0)).alias("records"),
            F.max("lag_ms").alias("ms"),
            F.max(F.unix_millis("at")).alias("at_ms"),
        )
        .collect()
    )
    by_group: dict[str, list] = {}
    for r in rows:
        by_group.setdefault(r["group_id"], []).append((r["at_ms"], r["records"], r["ms"]))
    for p in plots:
        p.lag = sorted(by_group.get(p.group_id, []))


def _ms(value) -> int | None:
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return int(value.timestamp() * 1000)
    return int(value)


def collect_assignments(audit, limit: int = MAX_ASSIGNMENT_GROUPS) -> list[AssignmentPlot]:
    """The groups of the assignment section: those whose latest generation is flagged first, then
    the most rebalanced; each with its latest MAX_GENERATIONS generations (small, collected)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from lib.assignors.audit import what_if_of_row
    from lib.spark.assignment import partitions_in, previous_members, why_flagged

    rows = audit.select(
        "group_id",
        "group_type",
        "generation",
        "at",
        "assignor",
        "members",
        "imbalance",
        "moved",
        "min_moves",
        "what_if",
        "topics",
        "reference",
        previous_members().alias("previous_members"),
        "verdict",
        "offsets_partition",
        "log_offset",
        partitions_in("unassigned").alias("unassigned_n"),
        partitions_in("assigned_twice").alias("twice"),
        F.count("*").over(Window.partitionBy("group_id")).alias("generations"),
        F.row_number()
        .over(Window.partitionBy("group_id").orderBy(F.col("at").desc_nulls_last(), F.col("log_offset").desc()))
        .alias("age"),
    )
    latest = [r.asDict() for r in rows.where("age = 1").collect()]  # one row per group
    for r in latest:
        r["flag"] = why_flagged(r)
    latest.sort(key=lambda r: (r["flag"] is None, -r["generations"], r["group_id"]))
    chosen = {r["group_id"]: r for r in latest[:limit]}
    if not chosen:
        return []
    history: dict[str, list[Rebalance]] = {g: [] for g in chosen}
    kept = rows.where(F.col("group_id").isin(list(chosen)) & (F.col("age") <= MAX_GENERATIONS))
    for r in kept.orderBy("group_id", "age").collect():
        history[r["group_id"]].append(
            Rebalance(
                generation=r["generation"],
                at_ms=_ms(r["at"]),
                per_member={
                    (m["group_instance_id"] or m["member_id"]): m["partition_count"] for m in r["members"] or []
                },
                imbalance=r["imbalance"],
                moved=r["moved"],
                min_moves=r["min_moves"],
                what_if_moved={
                    w["assignor"]: w["moved"]
                    # the table leaves what_if null: computed for the generations shown
                    for w in (r["what_if"] or what_if_of_row(r.asDict(True), r.asDict(True)["previous_members"]) or [])
                },
                unassigned=r["unassigned_n"],
                assigned_twice=r["twice"],
                verdict=r["verdict"],
            )
        )
    return [
        AssignmentPlot(g, r["group_type"], r["assignor"], r["generations"], list(reversed(history[g])), r["flag"])
        for g, r in chosen.items()
    ]


def _read_quality(warehouse: str) -> tuple[dict | None, str | None, str | None]:
    """(results, error, data docs href relative to the report page)."""
    qdir = storage.join(warehouse, QUALITY_DIR)
    href = None
    if storage.exists(storage.join(qdir, "data_docs", "index.html")):
        href = f"../{QUALITY_DIR}/data_docs/index.html"
    path = storage.join(qdir, "results.json")
    if not storage.exists(path):
        return None, None, href
    try:
        results = json.loads(storage.read_text(path))
        if not isinstance(results, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as e:
        return None, f"{path} could not be read: {e}", href
    return results, None, href


def collect_report(
    spark,
    warehouse: str,
    now_ms: int,
    *,
    top: int = 20,
    days: int = 7,
    retention_minutes: int = DEFAULT_RETENTION_MINUTES,
) -> ReportData:
    """Aggregate the warehouse's tables into the (small) data the page shows."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from lib.lake.delta import table_exists, table_path
    from lib.replay.expiry_spark import judge_groups, judge_offsets
    from lib.spark.delta import read_table

    def table(name):
        if not table_exists(table_path(warehouse, name)):
            return None
        return read_table(spark, warehouse, name)

    log = table("offsets_log")
    if log is None:
        raise FileNotFoundError(f"no offsets_log table under {warehouse}: replay a log into it first")
    offsets, groups, pending = table("group_offsets"), table("consumer_groups"), table("pending_transactional_offsets")
    expired_offsets, expired_groups, checkpoints = (
        table("expired_offsets"),
        table("expired_groups"),
        table("replay_checkpoints"),
    )
    if offsets is None or groups is None or pending is None:
        raise FileNotFoundError(f"state tables missing under {warehouse}: replay a log into it first")
    retention_ms = retention_minutes * MINUTE_MS

    # Every table's row count in one Spark job.
    counted = {
        "records": log,
        "groups": groups,
        "live_offsets": offsets,
        "expired_offsets": expired_offsets,
        "expired_groups": expired_groups,
        "pending_offsets": pending,
        "partitions": checkpoints,
    }
    parts = [
        df.select(
            F.lit(key).alias("k"),
            (F.col("finished_at") if key == "partitions" else F.lit(None).cast("timestamp")).alias("at"),
        )
        for key, df in counted.items()
        if df is not None
    ]
    union = parts[0]
    for part in parts[1:]:
        union = union.unionByName(part)
    totals: dict[str, int | None] = dict.fromkeys(counted, 0)
    totals["last_run_ms"] = None
    for r in union.groupBy("k").agg(F.count("*").alias("n"), F.max("at").alias("at")).collect():
        totals[r["k"]] = r["n"]
        if r["k"] == "partitions":
            totals["last_run_ms"] = _ms(r["at"])

    commits = applied_commits(log).persist()
    behind: list[str] = []
    overview = None
    try:
        # ---- per-group figures and the three rankings
        by_commits = commits.groupBy("group_id").agg(
            F.count("*").alias("commits"), F.min("ts").alias("first_commit"), F.max("ts").alias("last_commit")
        )
        by_offsets = offsets.groupBy("group_id").agg(F.count("*").alias("live_offsets"))
        by_members = groups.select(
            "group_id", "group_type", "state", F.size(F.coalesce("members", F.array())).alias("members")
        )
        overview = (
            by_members.join(by_offsets, "group_id", "full")
            .join(by_commits, "group_id", "full")
            .select(
                "group_id",
                "group_type",
                "state",
                *[F.coalesce(c, F.lit(0)).alias(c) for c in ("members", "live_offsets", "commits")],
                "first_commit",
                "last_commit",
            )
        ).persist()
        totals["commits"] = overview.agg(F.sum("commits")).collect()[0][0] or 0
        largest = {}
        for metric in ("live_offsets", "members", "commits"):
            rows = overview.filter(F.col(metric) > 0).orderBy(F.desc(metric), "group_id").limit(top).collect()
            largest[metric] = [
                {**r.asDict(), "first_commit": _ms(r["first_commit"]), "last_commit": _ms(r["last_commit"])}
                for r in rows
            ]

        # ---- plots of the top groups by commits
        plotted = largest["commits"]
        lag_table, ends_table = table("group_lag"), table("partition_end_offsets")
        if lag_table is not None and ends_table is not None:
            # the groups furthest behind now come first, whatever their commit count
            behind = [
                r["group_id"]
                for r in lag_table.where(
                    (F.col("kind") == "now")
                    & (F.col("at") == F.timestamp_millis(F.lit(now_ms)))
                    & (F.col("lag_ms") > 0)
                )
                .groupBy("group_id")
                .agg(F.max("lag_ms").alias("ms"))
                .orderBy(F.desc("ms"), "group_id")
                .limit(MAX_BEHIND_PLOTS)
                .collect()
            ]
            if behind:
                extra = overview.filter(F.col("group_id").isin(behind) & (F.col("commits") > 0)).collect()
                rows = {
                    r["group_id"]: {
                        **r.asDict(),
                        "first_commit": _ms(r["first_commit"]),
                        "last_commit": _ms(r["last_commit"]),
                    }
                    for r in extra
                }
                plotted = [rows[g] for g in behind if g in rows] + [r for r in plotted if r["group_id"] not in rows]
        plots: list[GroupPlot] = []
        if plotted:
            # a group behind now is drawn up to now: after its last commit its lag still grows
            ends = {
                r["group_id"]: max(r["last_commit"], now_ms) if r["group_id"] in behind else r["last_commit"]
                for r in plotted
            }
            widths = {r["group_id"]: bucket_width(ends[r["group_id"]] - r["first_commit"]) for r in plotted}
            widths_df = spark.createDataFrame(list(widths.items()), "group_id STRING, bucket_ms BIGINT")
            sel = commits.join(F.broadcast(widths_df), "group_id").withColumn(
                "bucket", F.floor(F.unix_millis("ts") / F.col("bucket_ms")) * F.col("bucket_ms")
            )
            rate_rows = sel.groupBy("group_id", "bucket").count().collect()
            per_series = (
                sel.groupBy("group_id", "topic", "partition")
                .count()
                .withColumn("rn", F.row_number().over(Window.partitionBy("group_id").orderBy("topic", "partition")))
                .withColumn("total", F.count("*").over(Window.partitionBy("group_id")))
                .filter(F.col("rn") <= MAX_SERIES)
            )
            chosen = per_series.select("group_id", "topic", "partition", "total")
            point_rows = (
                sel.join(F.broadcast(chosen.drop("total")), ["group_id", "topic", "partition"], "left_semi")
                .groupBy("group_id", "topic", "partition", "bucket")
                .agg(
                    F.max_by(
                        F.struct(F.unix_millis("ts").alias("ms"), "committed_offset"), F.struct("ts", "log_offset")
                    ).alias("last")
                )
                .collect()
            )
            totals_by_group = {}
            for r in chosen.collect():
                totals_by_group[r["group_id"]] = r["total"]
            rates: dict[str, dict[int, int]] = {}
            for r in rate_rows:
                rates.setdefault(r["group_id"], {})[int(r["bucket"])] = r["count"]
            points: dict[tuple, list] = {}
            for r in point_rows:
                points.setdefault((r["group_id"], r["topic"], r["partition"]), []).append(
                    (r["last"]["ms"], r["last"]["committed_offset"])
                )
            for g in plotted:
                gid, w = g["group_id"], widths[g["group_id"]]
                counts = rates.get(gid, {})
                first, last = min(counts), max(counts)
                if gid in behind:
                    last = max(last, ends[gid] // w * w)
                rate = [(b, counts.get(b, 0) * HOUR_MS / w) for b in range(first, last + w, w)]
                series = [
                    Series(t, p, sorted(pts))
                    for (gg, t, p), pts in sorted(points.items(), key=lambda kv: (kv[0][1], kv[0][2]))
                    if gg == gid
                ]
                plots.append(GroupPlot(gid, g["commits"], w, rate, series, totals_by_group.get(gid, len(series))))
            if lag_table is not None and ends_table is not None:
                _add_lag(spark, plots, lag_table, ends_table, now_ms)
    finally:
        commits.unpersist()
        if overview is not None:
            overview.unpersist()

    # ---- expiring within `days`
    horizon = now_ms + days * DAY_MS
    judged = judge_offsets(offsets, groups, pending, horizon, retention_ms)
    due = (
        judged.filter("expired")
        .select(
            "group_id",
            "topic",
            "partition",
            "committed_offset",
            "commit_timestamp",
            "expire_timestamp",
            "offsets_partition",
            "due_ms",
            F.col("basis").alias("reason"),
            F.col("state").alias("group_state"),
        )
        .persist()
    )
    expiring_offsets_total = due.count()
    expiring_offsets = [
        {**r.asDict(), "commit_timestamp": _ms(r["commit_timestamp"]), "expire_timestamp": _ms(r["expire_timestamp"])}
        for r in due.orderBy("due_ms", "group_id", "topic", "partition").limit(MAX_EXPIRING_ROWS).collect()
    ]
    deleted = judge_groups(groups, judged, pending).filter("deleted")
    group_due = due.groupBy("offsets_partition", "group_id").agg(
        F.max("due_ms").alias("due_ms"), F.count("*").alias("offsets")
    )
    due_groups = deleted.join(group_due, ["offsets_partition", "group_id"], "left").select(
        "group_id",
        "group_type",
        "state",
        F.coalesce("offsets", F.lit(0)).alias("offsets"),
        F.coalesce("due_ms", F.lit(now_ms)).alias("due_ms"),
    )
    expiring_groups_total = due_groups.count()
    expiring_groups = [r.asDict() for r in due_groups.orderBy("due_ms", "group_id").limit(MAX_EXPIRING_ROWS).collect()]
    due.unpersist()

    audit = table("assignment_audit")
    assignments = collect_assignments(audit) if audit is not None else []

    quality, quality_error, docs = _read_quality(warehouse)
    return ReportData(
        warehouse=storage.absolute(warehouse),
        now_ms=now_ms,
        days=days,
        top=top,
        retention_minutes=retention_minutes,
        generated_ms=int(dt.datetime.now(dt.UTC).timestamp() * 1000),
        totals=totals,
        largest=largest,
        expiring_offsets=expiring_offsets,
        expiring_offsets_total=expiring_offsets_total,
        expiring_groups=expiring_groups,
        expiring_groups_total=expiring_groups_total,
        plots=plots,
        behind=behind,
        quality=quality,
        quality_error=quality_error,
        quality_docs_href=docs,
        assignments=assignments,
    )


def report_path(warehouse: str) -> str:
    return storage.join(warehouse, REPORT_DIR, "index.html")


def write_html(data: ReportData, warehouse: str) -> str:
    """Render `data` to WAREHOUSE/report/index.html (replaced atomically); returns its path."""

    html = render_html(data)
    path = report_path(warehouse)
    storage.write_bytes(path, html.encode("utf-8"))
    return path


def write_report(
    spark,
    warehouse: str,
    now_ms: int,
    *,
    top: int = 20,
    days: int = 7,
    retention_minutes: int = DEFAULT_RETENTION_MINUTES,
) -> str:
    """Collect, render and write WAREHOUSE/report/index.html; returns its path."""
    data = collect_report(spark, warehouse, now_ms, top=top, days=days, retention_minutes=retention_minutes)
    return write_html(data, warehouse)
