"""One answer for "what was group G's lag on T/P at instant X", on the bundled ten-day sample
(samples/days: 32 groups over consumed topics with segments, retention and rebalances):

- the lag stage's own rows (group_lag, written record by record by lib.lake.lag_rows) at every
  effective commit and at --now, against the view the audits read (lib.spark.lag_rules'
  lag_timeline) at the same instants;
- the SQL audits lag_at, lag_history and groups_falling_behind, at instants spread over the ten
  days (before some groups' first commits, during, at now);
- the report's lag points (sum of the records, the oldest unconsumed record's age), against
  lag_at at each point's instant."""

from __future__ import annotations

import datetime as dt
import os

import pytest

from lib.source.logdir import find_partitions
from tests.helpers import audits_of

pytestmark = pytest.mark.spark

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(REPO, "samples", "days", "logdir")
with open(os.path.join(REPO, "samples", "days", "NOW")) as _f:
    NOW = int(_f.read().strip())
HOUR = 3_600_000
INSTANTS = [NOW - k * 31 * HOUR for k in range(7, -1, -1)]  # every 31 h back to ~9 days before now


@pytest.fixture(scope="module")
def warehouse(spark, tmp_path_factory):
    from lib.spark.pipeline import run_replay

    wh = str(tmp_path_factory.mktemp("days-lag") / "wh")
    run_replay(spark, find_partitions(SAMPLE), wh, NOW, full=True)
    return wh


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat()


def _ms(ts) -> int | None:
    return None if ts is None else int(ts.timestamp() * 1000)


def test_group_lag_rows_are_the_timeline_at_their_instants(spark, warehouse):
    from pyspark.sql import functions as F

    from lib.spark.delta import read_table
    from lib.spark.lag_rules import lag_at_instants, lag_timeline

    group_lag = read_table(spark, warehouse, "group_lag")
    ends = read_table(spark, warehouse, "partition_end_offsets")
    # the last row of each (group, partition, instant): two commits at one instant leave the last
    rows = (
        group_lag.selectExpr(
            "group_id",
            "topic",
            "partition",
            "at",
            "kind",
            "committed_offset",
            "end_offset",
            "lag_records",
            "lag_ms",
            "lag_ms_method",
            "truncated",
            "row_number() OVER (PARTITION BY group_id, topic, partition, at ORDER BY kind = 'now', log_offset DESC) AS n",
        )
        .where("n = 1")
        .drop("n")
    )
    probes = rows.select("group_id", "at").distinct()
    answered = lag_at_instants(lag_timeline(group_lag, ends), probes).select(
        "group_id",
        "at",
        "topic",
        "partition",
        *[
            F.col(c).alias(f"v_{c}")
            for c in ("committed_offset", "end_offset", "lag_records", "lag_ms", "lag_ms_method", "truncated")
        ],
    )
    joined = rows.join(answered, ["group_id", "at", "topic", "partition"], "left")
    cols = ("committed_offset", "end_offset", "lag_records", "lag_ms", "lag_ms_method", "truncated")
    differ = joined.where(" OR ".join(f"NOT ({c} <=> v_{c})" for c in cols))
    kinds = {r["kind"]: r["count"] for r in rows.groupBy("kind").count().collect()}
    assert kinds["commit"] > 20_000 and kinds["now"] > 90  # (what the sample holds)
    assert differ.limit(5).collect() == []


def test_lag_at_lag_history_groups_falling_behind_and_the_report_agree(spark, warehouse):
    from lib.reporting.report_builder import collect_report

    data = collect_report(spark, warehouse, NOW)
    run = audits_of(spark, warehouse)
    # each lag query plans and runs the whole view for its group (a few seconds here): cached
    # once for the test's hundred queries, the same answers
    spark.catalog.cacheTable("lag_timeline")
    try:
        every = sorted({r["group_id"] for r in spark.table("lag_timeline").select("group_id").distinct().collect()})
        assert len(every) >= 20
        at: dict = {}
        for g in every:
            for x in INSTANTS:
                for r in run("lag_at", group=g, at=_iso(x)):
                    at[(g, x, r["topic"], r["partition"])] = (
                        r["committed_offset"],
                        r["end_offset"],
                        r["lag_records"],
                        r["lag_ms"],
                    )
        assert {k[1] for k in at} == set(INSTANTS)  # (every instant has answers...)
        assert len({k[0] for k in at if k[1] == INSTANTS[0]}) < len(every)  # (...and some group none yet)
        history: dict = {}
        for g in every:
            for r in run("lag_history", group=g, since=_iso(INSTANTS[0]), until=_iso(NOW), bucket="31h"):
                history[(g, _ms(r["at"]), r["topic"], r["partition"])] = (
                    r["committed_offset"],
                    r["end_offset"],
                    r["lag_records"],
                    r["lag_ms"],
                )
        assert history == at
        for x in (INSTANTS[2], INSTANTS[5], NOW):
            behind = run("groups_falling_behind", now=_iso(x), min_records=1, for_at_least="0s")
            got = {(r["group_id"], r["topic"], r["partition"]): (r["lag_records"], r["lag_ms"]) for r in behind}
            want = {(g, t, p): v[2:] for (g, y, t, p), v in at.items() if y == x and v[2] is not None and v[2] > 0}
            assert want and got == want, _iso(x)
        # the report: at each plotted group's last bucket ends, the sum of the records behind
        # (truncated partitions left out) and the oldest unconsumed record's age
        checked = 0
        for plot in data.plots:
            for at_ms, records, ms in plot.lag[-3:]:
                rows = run("lag_at", group=plot.group_id, at=_iso(at_ms))
                behind_rows = [r for r in rows if r["lag_records"] is not None and r["lag_records"] > 0]
                assert records == sum(r["lag_records"] for r in behind_rows), (plot.group_id, at_ms)
                known = [r["lag_ms"] for r in rows if r["lag_ms"] is not None]
                assert ms == (max(known) if known else None), (plot.group_id, at_ms)
                checked += 1
        assert checked >= 10
    finally:
        spark.catalog.uncacheTable("lag_timeline")
        spark.catalog.setCurrentDatabase("default")
