"""The coordinator's load from a broker log dir that changes while it is read (no broker, no
Spark: the tail comes from segment files, no warehouse)."""

from __future__ import annotations

import pytest

import lib.lake.partition_task as partition_task
from lib.coordinator.group_coordinator import RELOADS, GroupCoordinator, NotCoordinatorError
from lib.replay.partitioning import partition_for
from lib.testdata.logbuilder import T0, PartitionLogBuilder

PARTITIONS = 4


@pytest.fixture
def log_dir(tmp_path):
    p = partition_for("g", PARTITIONS)
    PartitionLogBuilder(p).commit("g", "orders", 0, 5, T0).commit("g", "orders", 0, 9, T0 + 1000).write(str(tmp_path))
    return str(tmp_path), p


def _vanishing(monkeypatch, times: int) -> list:
    """read_segments raising FileNotFoundError (a segment gone: the log cleaner's merge, or
    retention) the first `times` calls, then reading."""
    real = partition_task.read_segments
    calls: list = []

    def read(partition, start, segments, *rest):
        calls.append(partition)
        if len(calls) <= times:
            raise FileNotFoundError(2, "No such file or directory", segments[0][0])
        return real(partition, start, segments, *rest)

    monkeypatch.setattr(partition_task, "read_segments", read)
    return calls


def test_a_segment_gone_during_the_load_loads_the_partition_again(log_dir, monkeypatch):
    path, p = log_dir
    calls = _vanishing(monkeypatch, 1)
    coordinator = GroupCoordinator(None, partition_count=PARTITIONS, log_dir=path)
    state = coordinator.immigrate(p)
    assert calls == [p, p] and coordinator.owned_partitions() == [p]
    # the commits once each, the last one standing (not 5 then 9 again over a half-read engine)
    assert state.tail_records == 2
    offsets = coordinator.committed_offsets("g")
    assert [(tp, e["committed_offset"], e["log_offset"]) for tp, e in offsets.items()] == [(("orders", 0), 9, 1)]


def test_a_load_that_keeps_failing_leaves_the_partition_not_owned(log_dir, monkeypatch):
    path, p = log_dir
    calls = _vanishing(monkeypatch, RELOADS + 1)
    coordinator = GroupCoordinator(None, partition_count=PARTITIONS, log_dir=path)
    with pytest.raises(FileNotFoundError):
        coordinator.immigrate(p)
    assert len(calls) == RELOADS + 1 and coordinator.owned_partitions() == []
    # not "loading" for ever: the partition is not this coordinator's
    with pytest.raises(NotCoordinatorError):
        coordinator.committed_offsets("g")
