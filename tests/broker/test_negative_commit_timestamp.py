"""A negative commit timestamp on a real broker. Brokers before 4.0 accept OffsetCommit v1, whose
client sets the commit timestamp itself (-1 asks for the broker's clock); Kafka 4.0 dropped v1.
A 3.9 broker stores what it was sent, and its periodic cleanup expires the offset at once:
`now - commitTimestamp >= retention` on the raw long. The replay, judging the log as the broker
wrote it up to the commits, expires the same offset and keeps the other; the broker's own
tombstone for it follows in the log."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import struct
import time

import pytest

from tests.broker.compare import committed_offsets
from tests.broker.kafka_broker import own_broker, snapshot_offsets_log_dir
from tests.broker.log_bytes import varint
from tests.helpers import rows

pytestmark = [pytest.mark.broker, pytest.mark.spark]

TOPIC = "negative-ts-topic"
# group -> (offset, commit timestamp sent), in this order: the negative one last, so the cleanup's
# tombstone for it can only follow both commits in the log
COMMITS = {"broker-clock": (8, -1), "negative-ts": (7, -5)}


def _str(s: str) -> bytes:
    return struct.pack(">h", len(s)) + s.encode()


def offset_commit_v1(port: int, group: str, topic: str, partition: int, offset: int, commit_ts: int) -> int:
    """One OffsetCommit v1 request (generation -1, no member: a standalone commit) over a plain
    socket, laid out by hand from the protocol's v1 schema; returns the partition's error code."""
    body = (
        _str(group)
        + struct.pack(">i", -1)
        + _str("")
        + struct.pack(">i", 1)
        + _str(topic)
        + struct.pack(">i", 1)
        + struct.pack(">iqq", partition, offset, commit_ts)
        + _str("")
    )
    header = struct.pack(">hhi", 8, 1, 42) + _str("offsets-lake-tests")
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
        (size,) = struct.unpack(">i", _read(s, 4))
        resp = _read(s, size)
    correlation, topics = struct.unpack_from(">ii", resp, 0)
    pos = 8
    (name_len,) = struct.unpack_from(">h", resp, pos)
    pos += 2 + name_len
    n_parts, got_partition, error = struct.unpack_from(">iih", resp, pos)
    assert (correlation, topics, n_parts, got_partition) == (42, 1, 1, partition)
    return error


def first_tombstone_batch(data: bytes) -> int:
    """Byte position of the first record batch whose first record has a null value (the
    coordinator writes one record per batch here), read from the v2 layout: the records start
    61 bytes into the batch; a record is length, attributes, timestamp delta, offset delta,
    key length, key, value length (varints, -1 for null)."""
    pos = 0
    while pos < len(data):
        size = struct.unpack_from(">i", data, pos + 8)[0]
        p = varint(data, pos + 61)[1] + 1  # record length, attributes
        p = varint(data, varint(data, p)[1])[1]  # timestamp delta, offset delta
        key_len, p = varint(data, p)
        if varint(data, p + key_len)[0] == -1:
            return pos
        pos += 12 + size
    raise AssertionError("no tombstone in the log")


def _read(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        assert chunk, "the broker closed the connection"
        out += chunk
    return out


@pytest.fixture(scope="module")
def broker39(tmp_path_factory):
    broker = own_broker(
        tmp_path_factory,
        "kafka39-negative-ts",
        1,
        extra_config={"offsets.retention.check.interval.ms": 1000},
        jars="kafka39",
    ).start()
    yield broker
    broker.stop()


def test_negative_commit_timestamp_expires_at_once_as_on_the_broker(spark, tmp_path, broker39):
    from confluent_kafka.admin import AdminClient, NewTopic
    from kafka.errors import CoordinatorNotAvailableError

    from lib.source.logdir import find_partitions
    from lib.spark.pipeline import run_replay

    admin = AdminClient({"bootstrap.servers": broker39.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
    for group, (offset, commit_ts) in COMMITS.items():
        # FindCoordinator (an OffsetFetch through the admin client) has the broker create
        # __consumer_offsets; retry while its coordinator is not there yet
        # (COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR)
        deadline = time.monotonic() + 60
        while True:
            try:
                assert committed_offsets(broker39.bootstrap, group) == {}
                break
            except CoordinatorNotAvailableError:
                assert time.monotonic() < deadline, f"no coordinator for {group}"
                time.sleep(0.5)
        while (error := offset_commit_v1(broker39.port, group, TOPIC, 0, offset, commit_ts)) in (14, 15, 16):
            assert time.monotonic() < deadline, f"no coordinator for {group}"
            time.sleep(0.5)
        assert error == 0
    committed_at = int(time.time() * 1000)

    # the broker's cleanup (every second here) removes the negative one, and only it
    deadline = time.monotonic() + 60
    while committed_offsets(broker39.bootstrap, "negative-ts") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert committed_offsets(broker39.bootstrap, "negative-ts") == {}
    assert committed_offsets(broker39.bootstrap, "broker-clock") == {(TOPIC, 0): (8, "", None)}

    copy = snapshot_offsets_log_dir(broker39, str(tmp_path / "copy"))
    # the log as the broker wrote it up to the commits: cut before its tombstone
    (segment,) = glob.glob(os.path.join(copy, "__consumer_offsets-0", "*.log"))
    pos = first_tombstone_batch(open(segment, "rb").read())
    upto = str(tmp_path / "upto")
    shutil.copytree(copy, upto)
    with open(os.path.join(upto, "__consumer_offsets-0", os.path.basename(segment)), "r+b") as f:
        f.truncate(pos)
    wh = str(tmp_path / "wh")
    run_replay(spark, find_partitions(upto), wh, committed_at, lag=False, assignments=False)
    expired = {r["group_id"]: r for r in rows(spark, wh, "expired_offsets")}
    live = {r["group_id"]: r for r in rows(spark, wh, "group_offsets")}
    assert set(expired) == {"negative-ts"} and set(live) == {"broker-clock"}
    # stored as sent (1969-12-31T23:59:59.995Z); -1 became the broker's clock
    assert expired["negative-ts"]["commit_timestamp"].isoformat() == "1969-12-31T23:59:59.995000"
    assert (expired["negative-ts"]["committed_offset"], live["broker-clock"]["committed_offset"]) == (7, 8)
    assert live["broker-clock"]["commit_timestamp"].year >= 2026

    # the broker's own verdict, in its log after the commits: a tombstone of that key alone
    full = str(tmp_path / "full")
    run_replay(spark, find_partitions(copy), full, committed_at, lag=False, assignments=False)
    tombstones = [
        (r["group_id"], r["topic"], r["partition"])
        for r in rows(spark, full, "offsets_log")
        if r["is_tombstone"] and r["record_type"] == 1
    ]
    assert tombstones == [("negative-ts", TOPIC, 0)]
