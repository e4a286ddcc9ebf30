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
from tests.helpers import rows

pytestmark = [pytest.mark.broker, pytest.mark.spark]

TABLES = ("group_offsets", "consumer_groups", "pending_transactional_offsets", "offsets_log", "expired_offsets")


def snapshot_and_compare(
    spark, replay_logdir, broker: KafkaBroker, groups: list[str], tmp_path, clients: list = ()
) -> dict:
    """Snapshot the log while the broker's answers stay the same before and after the copy
    (live clients may still commit or rebalance), then replay and compare."""
    for attempt in range(5):
        before = broker_view(broker.bootstrap, groups)
        now_ms = int(time.time() * 1000)
        log_dir = snapshot_offsets_log_dir(broker, str(tmp_path / f"snapshot-{attempt}"))
        seen_by_broker = broker_view(broker.bootstrap, groups)
        if seen_by_broker == before:
            break
        S.wait_settled(broker.bootstrap, groups, list(clients), timeout=30)
    else:
        raise AssertionError(
            "the broker's answers kept changing while the log was copied:\n"
            + "\n".join(
                f"{g}: {before[g]!r} -> {seen_by_broker[g]!r}" for g in groups if before[g] != seen_by_broker[g]
            )
        )
    warehouse = tmp_path / "warehouse"
    replay_logdir(log_dir, warehouse, now_ms)
    tables = {t: rows(spark, str(warehouse), t) for t in TABLES}
    problems = differences(seen_by_broker, replay_view(tables, groups))
    assert not problems, "replay differs from the broker:\n" + "\n".join(problems)
    return {"broker": seen_by_broker, "tables": tables}


@pytest.mark.parametrize("name", ["kafka4", "kafka39"])
def test_replay_agrees_with_broker(request, spark, replay_logdir, tmp_path, name):
    broker = request.getfixturevalue(name)
    prefix = f"scn{name[-2:]}"
    groups, clients = S.run_scenarios(broker.bootstrap, prefix, kip848=(name == "kafka4"))
    try:
        result = snapshot_and_compare(spark, replay_logdir, broker, groups, tmp_path, clients)
    finally:
        S.close_clients(clients)
    seen = result["broker"]
    # the scenarios did what they claim (so the comparison is not vacuous)
    assert seen[f"{prefix}-deleted"] is None
    assert set(seen[f"{prefix}-offset-delete"]["offsets"]) == {(f"{prefix}-orders", 0), (f"{prefix}-orders", 2)}
    assert len(seen[f"{prefix}-classic"]["members"]) == 2 and seen[f"{prefix}-classic"]["state"] == "Stable"
    assert seen[f"{prefix}-standalone"]["simple"] is True
    assert set(seen[f"{prefix}-txn"]["offsets"]) == {(f"{prefix}-events", 0)}
    pending = [
        (r["group_id"], r["partition"], r["committed_offset"])
        for r in result["tables"]["pending_transactional_offsets"]
        if r["group_id"] == f"{prefix}-txn"
    ]
    assert pending == [(f"{prefix}-txn", 2, 33)]
    if name == "kafka4":
        assert seen[f"{prefix}-kip848"]["type"] == "consumer"


@pytest.fixture(scope="module")
def kafka4_default_partitions(tmp_path_factory):
    """A second 4.x broker with the default 50 __consumer_offsets partitions."""
    from tests.broker.kafka_broker import own_kafka4

    yield from own_kafka4(tmp_path_factory, "kafka4-50", 50)


def test_default_fifty_partitions(spark, replay_logdir, tmp_path, kafka4_default_partitions):
    from lib.replay.partitioning import partition_for

    broker = kafka4_default_partitions
    b = broker.bootstrap
    S.create_topic(b, "fifty-orders", 6)
    groups = ["fifty-classic", "fifty-standalone", "my-group", "polygenelubricants", "fifty-grp-😀"]
    clients = S.classic_group_with_rebalances(b, groups[0], "fifty-orders")
    for g in groups[1:]:
        S.standalone_commit(b, g, "fifty-orders", {0: 3, 5: 8})
    S.wait_settled(b, groups, clients)
    try:
        result = snapshot_and_compare(spark, replay_logdir, broker, groups, tmp_path, clients)
    finally:
        S.close_clients(clients)
    # every group sits in the partition Kafka's partitionFor gives it (spec 5 vectors included)
    placed = {r["group_id"]: r["offsets_partition"] for r in result["tables"]["group_offsets"]}
    assert placed == {g: partition_for(g, 50) for g in groups}
    assert placed["my-group"] == 12 and placed["polygenelubricants"] == 0
