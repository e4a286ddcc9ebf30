"""One answer for "what will the offset cleanup remove, and when": the replay engine (which
expires as of a run's --now, record by record: PartitionReplay._judge_offsets), the SQL audit
groups_expiring_within (over the views offset_expiry / group_expiry, lib.replay.expiry_spark)
and the report's "expiring within" lists (lib.replay.expiry_spark.judge_offsets /
judge_groups), on tests/test_replay_rules.py's log of every expiry case (group kinds and
states, explicit expire timestamps, pending transactions, orphaned offsets, raw timestamps
beyond a Spark TIMESTAMP).

The SQL and the report look ahead from a warehouse replayed at EARLY; the engine, replaying the
same log at a later instant X, must remove exactly the offsets and groups they list as due by X
(beyond what it had removed at EARLY already)."""

from __future__ import annotations

import datetime as dt
import os

import pytest

from lib.source.logdir import find_partitions
from tests.test_replay_rules import DAY, NOW, RETENTION_MIN, Scenario, build

pytestmark = pytest.mark.spark

EARLY = NOW - 9 * DAY
LATER = (EARLY, NOW - 2 * DAY, NOW - DAY + 1, NOW, NOW + 8 * DAY)
WITHIN_DAYS = 20


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory):
    base = tmp_path_factory.mktemp("expiry-parity")
    s = Scenario()
    build(s)
    path = str(base / "logdir")
    os.makedirs(path)
    for b in s.builders.values():
        b.write(path)
    return path


def _replay(spark, log_dir, wh, now_ms):
    from lib.spark.pipeline import run_replay

    run_replay(spark, find_partitions(log_dir), wh, now_ms, retention_minutes=RETENTION_MIN, full=True)


def _removed(spark, wh) -> set[tuple]:
    from lib.spark.delta import table_exists, table_path

    out: set[tuple] = set()
    for name, cols in (("expired_offsets", ("group_id", "topic", "partition")), ("expired_groups", ("group_id",))):
        path = table_path(wh, name)
        if table_exists(spark, path):
            for r in spark.read.format("delta").load(path).collect():
                out.add(("offset", *[r[c] for c in cols]) if len(cols) == 3 else ("group", r["group_id"], None, None))
    return out


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat()


def test_the_engine_removes_what_the_audit_and_the_report_said_would_be_due(spark, log_dir, tmp_path):
    from lib.reporting.audit_queries import bind, collect, load_queries, open_catalog, run_query
    from lib.reporting.report_builder import collect_report

    early = str(tmp_path / "early")
    _replay(spark, log_dir, early, EARLY)
    removed_early = _removed(spark, early)
    open_catalog(spark, early)
    q = load_queries()["groups_expiring_within"]
    try:
        args = {"now": _iso(EARLY), "within": f"{WITHIN_DAYS}d", "retention_minutes": str(RETENTION_MIN)}
        sql_rows = collect(run_query(spark, q, bind(q, args)))[1]
    finally:
        spark.catalog.setCurrentDatabase("default")
    due_at = {
        (r["kind"], r["group_id"], r["topic"], r["partition"]): int(r["expires_at"].timestamp() * 1000)
        for r in sql_rows
    }
    assert len(due_at) == len(sql_rows)
    assert not set(due_at) & removed_early
    # the audit lists what is already due at EARLY too: nothing the engine had left then
    assert {k for k, ms in due_at.items() if ms <= EARLY} == set()

    report = collect_report(spark, early, EARLY, days=WITHIN_DAYS, retention_minutes=RETENTION_MIN)
    report_due = {("offset", r["group_id"], r["topic"], r["partition"]): r["due_ms"] for r in report.expiring_offsets}
    report_due |= {("group", r["group_id"], None, None): r["due_ms"] for r in report.expiring_groups}
    assert report_due == due_at

    checked = 0
    for x in LATER:
        wh = str(tmp_path / f"at-{x}")
        _replay(spark, log_dir, wh, x)
        removed = _removed(spark, wh) - removed_early
        assert removed == {k for k, ms in due_at.items() if ms <= x}, _iso(x)
        checked += len(removed)
    assert checked  # (the instants see offsets and groups go)
