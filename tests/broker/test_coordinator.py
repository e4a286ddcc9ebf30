"""The coordinator's warm start: tables written by an earlier replay, plus the tail of the
live topic, must answer exactly as the broker does (and as a full replay does)."""

from __future__ import annotations

import time

import pytest

from lib.coordinator.group_coordinator import CoordinatorLoadInProgressError, GroupCoordinator, NotCoordinatorError
from tests.broker import scenarios as S
from tests.broker.compare import broker_view, differences, replay_view
from tests.broker.kafka_broker import snapshot_offsets_log_dir
from tests.helpers import rows

pytestmark = [pytest.mark.broker, pytest.mark.spark]
PARTITIONS = 4


@pytest.fixture(scope="module")
def own_broker(tmp_path_factory):
    from tests.broker.kafka_broker import own_kafka4

    yield from own_kafka4(tmp_path_factory, "kafka4-coord", PARTITIONS)


def coordinator_view(coordinator: GroupCoordinator, groups: list[str]) -> dict:
    """The coordinator's answers shaped like the tables, for tests.broker.compare."""
    tables = {"consumer_groups": [], "group_offsets": []}
    for g in groups:
        row = coordinator.describe_group(g)
        if row is not None:
            tables["consumer_groups"].append(row)
        for (topic, partition), e in coordinator.committed_offsets(g).items():
            tables["group_offsets"].append(
                {
                    "group_id": g,
                    "topic": topic,
                    "partition": partition,
                    "committed_offset": e["committed_offset"],
                    "metadata": e["metadata"],
                    "leader_epoch": e["leader_epoch"],
                }
            )
    return replay_view(tables, groups)


def test_warm_start_answers_like_the_broker(spark, replay_logdir, tmp_path, own_broker):
    b = own_broker.bootstrap
    groups, clients = S.run_scenarios(b, "coord", kip848=True)
    try:
        copy = snapshot_offsets_log_dir(own_broker, str(tmp_path / "copy"))
        replay_logdir(copy, tmp_path / "wh", int(time.time() * 1000))
        # the tail: records the tables have not seen
        open_txn = clients[-1]
        open_txn.commit_transaction(30)
        S.standalone_commit(b, "coord-standalone", "coord-orders", {0: 70, 4: 71})
        S.standalone_commit(b, "coord-late", "coord-events", {2: 5})
        groups.append("coord-late")
        S.wait_settled(b, groups, clients)
        coordinator = GroupCoordinator(str(tmp_path / "wh"), b)
        assert coordinator.partition_count == PARTITIONS
        with pytest.raises(NotCoordinatorError):
            coordinator.committed_offsets("coord-standalone")
        for _attempt in range(5):  # live clients may still commit: load while the broker's answers hold
            before = broker_view(b, groups)
            for p in range(PARTITIONS):
                coordinator.emigrate(p)
                coordinator.immigrate(p)
            seen = broker_view(b, groups)
            if seen == before:
                break
            S.wait_settled(b, groups, clients, timeout=30)
        states = [coordinator._partitions[p] for p in range(PARTITIONS)]
        assert sum(s.tail_records for s in states) >= 3  # the tail really was replayed
        assert sum(s.loaded_from_tables for s in states) > 0  # ... on top of the tables
        # a full replay of exactly the records the coordinator saw, from the live topic
        from lib.source.logdir import live_partitions
        from lib.spark.pipeline import run_replay

        run_replay(
            spark,
            live_partitions(b),
            str(tmp_path / "full"),
            int(time.time() * 1000),
            full=True,
            end_offsets={p: s.next_offset for p, s in enumerate(states)},
        )
    finally:
        S.close_clients(clients)
    problems = differences(seen, coordinator_view(coordinator, groups))
    assert not problems, "coordinator differs from the broker:\n" + "\n".join(problems)
    tables = {t: rows(spark, str(tmp_path / "full"), t) for t in ("consumer_groups", "group_offsets")}
    problems = differences(replay_view(tables, groups), coordinator_view(coordinator, groups))
    assert not problems, "coordinator differs from a full replay:\n" + "\n".join(problems)
    assert seen["coord-txn"]["offsets"][("coord-events", 2)][0] == 33  # committed in the tail
    assert {g["group_id"] for g in coordinator.list_groups()} >= {"coord-late", "coord-kip848"}


def test_loading_and_not_coordinator_answers(tmp_path, own_broker):
    b = own_broker.bootstrap
    S.create_topic(b, "coord-x", 1)
    S.standalone_commit(b, "coord-x-group", "coord-x", {0: 1})
    coordinator = GroupCoordinator(None, b, partition_count=PARTITIONS)
    p = coordinator.partition_for("coord-x-group")
    coordinator._states[p] = "loading"  # as immigrate() sets it before the load
    with pytest.raises(CoordinatorLoadInProgressError):
        coordinator.committed_offsets("coord-x-group")
    coordinator.immigrate(p)  # no tables: the whole partition from the topic
    assert {tp: e["committed_offset"] for tp, e in coordinator.committed_offsets("coord-x-group").items()} == {
        ("coord-x", 0): 1
    }
    coordinator.emigrate(p)
    with pytest.raises(NotCoordinatorError):
        coordinator.describe_group("coord-x-group")
