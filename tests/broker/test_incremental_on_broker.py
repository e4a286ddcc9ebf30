"""Incremental runs on a real broker's log, copied at several points in time while clients
keep working, equal one full replay of the last copy (issue: incremental runs)."""

from __future__ import annotations

import time

import pytest

from tests.broker import scenarios as S
from tests.broker.kafka_broker import snapshot_offsets_log_dir
from tests.helpers import rows

pytestmark = [pytest.mark.broker, pytest.mark.spark]

TABLES = {
    "offsets_log": ("offsets_partition", "log_offset"),
    "group_offsets": ("group_id", "topic", "partition"),
    "expired_offsets": ("group_id", "topic", "partition"),
    "pending_transactional_offsets": ("producer_id", "group_id", "topic", "partition"),
    "consumer_groups": ("group_id",),
    "expired_groups": ("group_id",),
}


def table_rows(spark, warehouse, table):
    return sorted(rows(spark, str(warehouse), table), key=lambda r: tuple(str(r[k]) for k in TABLES[table]))


def test_incremental_runs_on_real_log_equal_full_run(spark, replay_logdir, tmp_path, kafka4):
    b = kafka4.bootstrap
    S.create_topic(b, "inc-orders", 6)
    S.create_topic(b, "inc-events", 3)
    now_ms = int(time.time() * 1000)
    warehouse = tmp_path / "incremental"
    clients = []
    steps = [
        lambda: clients.extend(S.classic_group_with_rebalances(b, "inc-classic", "inc-orders")),
        lambda: (
            S.standalone_commit(b, "inc-standalone", "inc-events", {0: 1, 1: 2}),
            clients.extend(S.transactions(b, "inc-txn", "inc-events")[0]),
        ),
        lambda: (
            S.group_then_leave(b, "inc-gone", "inc-events", 3),
            S.delete_groups(b, ["inc-gone"]),
            clients.extend(S.kip848_group(b, "inc-kip848", "inc-orders", 6)),
        ),
    ]
    try:
        for i, step in enumerate(steps):
            step()
            copy = snapshot_offsets_log_dir(kafka4, str(tmp_path / f"copy-{i}"))
            result = replay_logdir(copy, warehouse, now_ms)
            assert result.incremental == (i > 0)
    finally:
        S.close_clients(clients)
    full = tmp_path / "full"
    replay_logdir(copy, full, now_ms)
    for table in TABLES:
        got, expected = table_rows(spark, warehouse, table), table_rows(spark, full, table)
        assert got == expected, f"table {table} differs after incremental runs"
    groups = {r["group_id"] for r in table_rows(spark, warehouse, "consumer_groups")}
    assert {"inc-classic", "inc-standalone", "inc-txn", "inc-kip848"} <= groups and "inc-gone" not in groups
