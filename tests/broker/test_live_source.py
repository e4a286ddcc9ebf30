"""The live topic as a source: replaying __consumer_offsets fetched from the running broker
gives the same tables as replaying a copy of the broker's segment files."""

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
    "pending_transactional_offsets": ("producer_id", "group_id", "topic", "partition"),
    "consumer_groups": ("group_id",),
    "expired_groups": ("group_id",),
    "replay_checkpoints": ("offsets_partition",),
}
# where the input was read from (files: the last segment's signature and byte position)
IGNORED = {
    "offsets_log": {"segment_file"},
    "replay_checkpoints": {"run_id", "finished_at", "high_watermark", "source_signature", "next_byte_position"},
}


@pytest.fixture(scope="module")
def quiet_broker(tmp_path_factory):
    """A broker of its own, so no other test's clients write while the two sources are read."""
    from tests.broker.kafka_broker import own_kafka4

    yield from own_kafka4(tmp_path_factory, "kafka4-live", 4)


def table(spark, warehouse, name):
    out = []
    for r in rows(spark, str(warehouse), name):
        out.append({k: v for k, v in r.items() if k not in IGNORED.get(name, ())})
    return sorted(out, key=lambda r: tuple(str(r[k]) for k in TABLES[name]))


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
    for name in TABLES:
        assert table(spark, tmp_path / "live", name) == table(spark, tmp_path / "files", name), f"{name} differs"
    pending = table(spark, tmp_path / "live", "pending_transactional_offsets")
    assert [(r["group_id"], r["committed_offset"]) for r in pending] == [("live-txn", 33)]
    assert {r["group_id"] for r in table(spark, tmp_path / "live", "consumer_groups")} >= {
        "live-kip848",
        "live-classic",
    }
