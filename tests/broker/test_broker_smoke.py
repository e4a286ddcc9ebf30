"""The broker harness itself: each real broker takes a topic, messages and a group's commits,
keeps them in __consumer_offsets on disk, and Kafka's DumpLogSegments can read them back."""

from __future__ import annotations

import os
import time
import uuid

import pytest

from .kafka_broker import dump_log_segments, snapshot_offsets_log_dir
from .log_bytes import offsets_partition_for

pytestmark = pytest.mark.broker

MESSAGES = 10


@pytest.fixture(params=["kafka4", "kafka39"])
def broker(request):
    return request.getfixturevalue(request.param)


def test_produce_consume_commit_and_dump(broker, tmp_path):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = f"smoke-{uuid.uuid4().hex[:8]}"
    group = f"smoke-group-{uuid.uuid4().hex[:8]}"
    admin = broker.admin()
    try:
        admin.create_topics({topic: {"num_partitions": 2, "replication_factor": 1}}, wait_for_metadata=True)
        assert topic in admin.list_topics()

        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
        try:
            for i in range(MESSAGES):
                producer.send(topic, key=f"k{i}".encode(), value=f"v{i}".encode())
            producer.flush(timeout=30)
        finally:
            producer.close()

        consumer = KafkaConsumer(
            topic,
            bootstrap_servers=broker.bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        try:
            got = []
            deadline = time.monotonic() + 60
            while len(got) < MESSAGES and time.monotonic() < deadline:
                for records in consumer.poll(timeout_ms=1000).values():
                    got.extend(records)
            assert sorted(r.value for r in got) == sorted(f"v{i}".encode() for i in range(MESSAGES))
            consumer.commit()
            expected = {tp: consumer.position(tp) for tp in consumer.assignment()}
        finally:
            consumer.close()
        counts = _per_partition_counts(got)
        assert expected == {TopicPartition(topic, p): counts.get(p, 0) for p in (0, 1)}

        committed = admin.list_group_offsets({group: None})[group]
        assert {tp: om.offset for tp, om in committed.items()} == expected
    finally:
        admin.close()

    # __consumer_offsets on disk: every partition's folder, the group's one non-empty.
    dirs = broker.offsets_partition_dirs()
    assert [os.path.basename(d) for d in dirs] == [f"__consumer_offsets-{p}" for p in range(broker.offsets_partitions)]
    part_dir = os.path.join(
        broker.log_dir, f"__consumer_offsets-{offsets_partition_for(group, broker.offsets_partitions)}"
    )
    segments = [os.path.join(part_dir, n) for n in sorted(os.listdir(part_dir)) if n.endswith(".log")]
    non_empty = [s for s in segments if os.path.getsize(s) > 0]
    assert non_empty, f"no bytes in {part_dir} for {group}"
    segment = non_empty[0]

    t0 = time.monotonic()
    out = dump_log_segments(broker.jar_dir, [segment])
    print(f"\n[{broker.version}] DumpLogSegments took {time.monotonic() - t0:.1f}s")
    assert group in out, out[-3000:]
    assert topic in out, out[-3000:]

    # A snapshot of the live broker's offsets log, as the replay job reads it.
    snap = snapshot_offsets_log_dir(broker, str(tmp_path / "logdir"))
    assert os.path.getsize(os.path.join(snap, "replication-offset-checkpoint")) > 0
    copied = os.path.join(snap, os.path.basename(part_dir), os.path.basename(segment))
    with open(copied, "rb") as f, open(segment, "rb") as g:
        data = f.read()
        assert data and g.read(len(data)) == data  # a prefix of the live segment (appends go on)


def _per_partition_counts(records) -> dict[int, int]:
    counts: dict[int, int] = {}
    for r in records:
        counts[r.partition] = counts.get(r.partition, 0) + 1
    return counts
