"""A broker with `log.preallocate=true` (topic config `preallocate`) that crashed: its active
__consumer_offsets segment is the full segment size, data at the front and zeros after. The
replay reads up to the zeros and reports them as trailing bytes; Kafka's own log recovery, on
the broker's restart, truncates the segment at the same byte, and the broker then reports the
same committed offsets."""

from __future__ import annotations

import os
import re
import shutil
import time

import pytest

from tests.broker import scenarios as S
from tests.broker.compare import committed_offsets
from tests.broker.kafka_broker import own_broker
from tests.helpers import rows

pytestmark = [pytest.mark.broker, pytest.mark.spark]

SEGMENT_BYTES = 1 << 20
GROUPS = {f"prealloc-{i}": {p: 100 * i + p for p in range(3)} for i in range(4)}
TOPIC = "prealloc-topic"


@pytest.fixture(scope="module")
def crashed(tmp_path_factory):
    """(the crashed broker, the offsets it reported before the crash)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    broker = own_broker(
        tmp_path_factory,
        "kafka4-prealloc",
        1,
        extra_config={"log.preallocate": "true", "offsets.topic.segment.bytes": SEGMENT_BYTES},
    )
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 3, 1)])[TOPIC].result(30)
        for group, offsets in GROUPS.items():
            S.standalone_commit(broker.bootstrap, group, TOPIC, offsets, metadata=group)
        reported = {g: committed_offsets(broker.bootstrap, g) for g in GROUPS}
        broker.crash()  # no trimming of the active segment
        yield broker, reported
    finally:
        broker.stop()


def test_preallocated_segment_of_a_crashed_broker(spark, tmp_path, crashed):
    from lib.source.logdir import find_partitions
    from lib.spark.pipeline import run_replay

    broker, reported = crashed
    (part,) = broker.offsets_partition_dirs()
    segments = sorted(f for f in os.listdir(part) if f.endswith(".log"))
    last = os.path.join(part, segments[-1])
    assert os.path.getsize(last) == SEGMENT_BYTES  # preallocated, not trimmed
    copy = tmp_path / "copy"
    shutil.copytree(part, copy / os.path.basename(part))
    run_replay(spark, find_partitions(str(copy)), str(tmp_path / "wh"), int(time.time() * 1000))

    (cp,) = rows(spark, str(tmp_path / "wh"), "replay_checkpoints")
    data_end = cp["next_byte_position"]
    assert 0 < data_end < SEGMENT_BYTES and cp["trailing_bytes"] == SEGMENT_BYTES - data_end
    assert open(last, "rb").read()[data_end:] == bytes(SEGMENT_BYTES - data_end)
    ours = {
        g: {
            (r["topic"], r["partition"]): (r["committed_offset"], r["metadata"], r["leader_epoch"])
            for r in rows(spark, str(tmp_path / "wh"), "group_offsets")
            if r["group_id"] == g
        }
        for g in GROUPS
    }
    assert ours == reported
    # (librdkafka sends the metadata string with a NUL at its end, and the broker keeps it)
    assert reported == {g: {(TOPIC, p): (o, g + "\0", None) for p, o in offs.items()} for g, offs in GROUPS.items()}

    # Kafka's recovery, on restart after the crash, stops at the first zero entry and truncates
    broker.start()
    try:
        with open(broker.server_log, errors="replace") as f:
            log = f.read()
        found = re.findall(r"Found invalid messages in log segment (\S+) at byte offset (\d+)", log)
        assert (last, str(data_end)) in [(os.path.abspath(p), n) for p, n in found], found
        assert os.path.getsize(last) == data_end
        assert {g: committed_offsets(broker.bootstrap, g) for g in GROUPS} == reported
    finally:
        broker.stop()
