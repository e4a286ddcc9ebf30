"""Scenarios on real brokers, compared with what the broker itself reports.

Each broker runs every scenario with real clients; then the broker's __consumer_offsets
folders are copied, replayed with --now = the snapshot time, and group_offsets /
consumer_groups are compared with the admin API's answers at the same moment."""
from __future__ import annotations

import time

import pytest

from tests.broker import scenarios as S
from tests.broker.compare import broker_view, differences, replay_view
from tests.broker.kafka_broker import KafkaBroker, snapshot_offsets_log_dir
from tests.conftest import rows

pytestmark = [pytest.mark.broker, pytest.mark.spark]

TABLES = ("group_offsets", "consumer_groups", "pending_transactional_offsets", "offsets_log", "expired_offsets")


def run_scenarios(broker: KafkaBroker, prefix: str, kip848: bool) -> tuple[list[str], list]:
    b = broker.bootstrap
    topic, small = f"{prefix}-orders", f"{prefix}-events"
    S.create_topic(b, topic, 6)
    S.create_topic(b, small, 3)
    keep = []
    groups = []
    g = f"{prefix}-classic"
    keep += S.classic_group_with_rebalances(b, g, topic)
    groups.append(g)
    g = f"{prefix}-static"
    keep += S.static_members_auto_commit(b, g, small)
    groups.append(g)
    g = f"{prefix}-standalone"
    S.standalone_commit(b, g, topic, {0: 7, 3: 9}, metadata="by-hand")
    groups.append(g)
    g = f"{prefix}-emptied"
    S.group_then_leave(b, g, small, 3)
    groups.append(g)
    g = f"{prefix}-deleted"
    S.group_then_leave(b, g, small, 3)
    S.delete_groups(b, [g])
    groups.append(g)
    g = f"{prefix}-offset-delete"
    S.standalone_commit(b, g, topic, {0: 1, 1: 2, 2: 3})
    S.delete_offsets(b, g, topic, [1])
    groups.append(g)
    g = f"{prefix}-txn"
    producers, member = S.transactions(b, g, small)
    keep += [member]
    groups.append(g)
    g = f"{prefix}-grüße-😀"
    S.standalone_commit(b, g, small, {1: 42})
    groups.append(g)
    if kip848:
        g = f"{prefix}-kip848"
        keep += S.kip848_group(b, g, topic, 6)
        groups.append(g)
    S.wait_settled(b, groups, keep)
    return groups, keep + producers


def snapshot_and_compare(spark, replay_logdir, broker: KafkaBroker, groups: list[str], tmp_path) -> dict:
    now_ms = int(time.time() * 1000)
    log_dir = snapshot_offsets_log_dir(broker, str(tmp_path / "snapshot"))
    seen_by_broker = broker_view(broker.bootstrap, groups)
    warehouse = tmp_path / "warehouse"
    replay_logdir(log_dir, warehouse, now_ms)
    tables = {t: rows(spark, str(warehouse), t) for t in TABLES}
    problems = differences(seen_by_broker, replay_view(tables, groups))
    assert not problems, "replay differs from the broker:\n" + "\n".join(problems)
    return {"broker": seen_by_broker, "tables": tables}


def close_all(clients) -> None:
    for c in clients:
        try:
            c.close()
        except Exception:  # noqa: BLE001 - producers have no close(); best effort
            pass


@pytest.mark.parametrize("name", ["kafka4", "kafka39"])
def test_replay_agrees_with_broker(request, spark, replay_logdir, tmp_path, name):
    broker = request.getfixturevalue(name)
    prefix = f"scn{name[-2:]}"
    groups, clients = run_scenarios(broker, prefix, kip848=(name == "kafka4"))
    try:
        result = snapshot_and_compare(spark, replay_logdir, broker, groups, tmp_path)
    finally:
        close_all(clients)
    seen = result["broker"]
    # the scenarios did what they claim (so the comparison is not vacuous)
    assert seen[f"{prefix}-deleted"] is None
    assert set(seen[f"{prefix}-offset-delete"]["offsets"]) == {(f"{prefix}-orders", 0), (f"{prefix}-orders", 2)}
    assert len(seen[f"{prefix}-classic"]["members"]) == 2 and seen[f"{prefix}-classic"]["state"] == "Stable"
    assert seen[f"{prefix}-standalone"]["simple"] is True
    assert {tp for tp in seen[f"{prefix}-txn"]["offsets"]} == {(f"{prefix}-events", 0)}
    pending = [(r["group_id"], r["partition"], r["committed_offset"])
               for r in result["tables"]["pending_transactional_offsets"] if r["group_id"] == f"{prefix}-txn"]
    assert pending == [(f"{prefix}-txn", 2, 33)]
    if name == "kafka4":
        assert seen[f"{prefix}-kip848"]["type"] == "consumer"
