"""The live topic as a source: replaying __consumer_offsets fetched from the running broker
gives the same tables as replaying a copy of the broker's segment files."""

from __future__ import annotations

import time

import pytest

from tests.broker import scenarios as S
from tests.broker.compare import LIVE_VS_FILES, comparable_rows
from tests.broker.kafka_broker import snapshot_offsets_log_dir

pytestmark = [pytest.mark.broker, pytest.mark.spark]


@pytest.fixture(scope="module")
def quiet_broker(tmp_path_factory):
    """A broker of its own, so no other test's clients write while the two sources are read."""
    from tests.broker.kafka_broker import own_kafka4

    yield from own_kafka4(tmp_path_factory, "kafka4-live", 4)


def test_live_topic_and_segment_files_give_the_same_tables(spark, tmp_path, quiet_broker):
    from lib.source.logdir import find_partitions, live_partitions
    from lib.spark.pipeline import run_replay

    b = quiet_broker.bootstrap
    groups, clients = S.run_scenarios(b, "live", kip848=True)
    try:
        now_ms = int(time.time() * 1000)
        copy = snapshot_offsets_log_dir(quiet_broker, str(tmp_path / "copy"))
        run_replay(spark, live_partitions(b), str(tmp_path / "live"), now_ms)
        run_replay(spark, find_partitions(copy), str(tmp_path / "files"), now_ms)
    finally:
        S.close_clients(clients)
    for name in LIVE_VS_FILES:
        assert comparable_rows(spark, tmp_path / "live", name) == comparable_rows(spark, tmp_path / "files", name), (
            f"{name} differs"
        )
    pending = comparable_rows(spark, tmp_path / "live", "pending_transactional_offsets")
    assert [(r["group_id"], r["committed_offset"]) for r in pending] == [("live-txn", 33)]
    assert {r["group_id"] for r in comparable_rows(spark, tmp_path / "live", "consumer_groups")} >= {
        "live-kip848",
        "live-classic",
    }
