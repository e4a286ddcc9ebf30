"""The ten-day sample (samples/days): it is what samples/make_days_sample.py says it is. No
Spark: the script regenerates it byte for byte, every batch of every segment reads with the
project's reader (CRCs checked), the layout is a broker's (partition folders, metadata and
checkpoint files), each group's records sit in the __consumer_offsets partition Kafka gives
it, no commit is ahead of its partition's end offset at the commit's time, and a few facts
stated by hand hold. Also the topic builder's segment rolls, deletions and bulk generator."""

from __future__ import annotations

import base64
import bisect
import importlib.util
import itertools
import os
import re
import struct
import sys
from collections import defaultdict

import pytest

from lib.codec.errors import CorruptBatchError
from lib.codec.segments import SegmentReader
from lib.codec.serde import decode_assignment, decode_key, decode_offset_commit_value, decode_value
from lib.codec.writer import encode_batch
from lib.replay.expiry import DEFAULT_RETENTION_MINUTES
from lib.replay.partitioning import partition_for
from lib.source.logdir import read_offset_checkpoint
from lib.testdata.topicbuilder import (
    Producer,
    TopicPartitionBuilder,
    generate_topics,
    topic_id_for,
    write_checkpoints,
)
from tests.helpers import REPO

SAMPLE = os.path.join(REPO, "samples", "days")
LOG_DIR = os.path.join(SAMPLE, "logdir")
OFFSETS = "__consumer_offsets"
DAY = 86_400_000
_FOLDER = re.compile(r"^(.+)-(\d+)$")


def _maker():
    spec = importlib.util.spec_from_file_location(
        "make_days_sample", os.path.join(REPO, "samples", "make_days_sample.py")
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _files(root: str) -> dict[str, str]:
    return {
        os.path.relpath(os.path.join(d, f), root): os.path.join(d, f) for d, _, names in os.walk(root) for f in names
    }


@pytest.fixture(scope="module")
def now_ms() -> int:
    with open(os.path.join(SAMPLE, "NOW")) as f:
        return int(f.read().strip())


@pytest.fixture(scope="module")
def log():
    """Every partition folder of the sample: (topic, partition) -> its batches in offset order,
    read with CRC checks, and its segments' base offsets."""
    out = {}
    for name in sorted(os.listdir(LOG_DIR)):
        m = _FOLDER.match(name)
        folder = os.path.join(LOG_DIR, name)
        if not m or not os.path.isdir(folder):
            continue
        bases, batches = [], []
        for seg in sorted(f for f in os.listdir(folder) if f.endswith(".log")):
            with open(os.path.join(folder, seg), "rb") as f:
                data = f.read()
            reader = SegmentReader(data, file=seg, verify_crc=True)
            got = list(reader)
            assert reader.trailing_bytes == 0, f"{name}/{seg}: {reader.trailing_bytes} trailing bytes"
            bases.append(int(seg[:-4]))
            if got:
                assert got[0].base_offset == bases[-1], f"{name}/{seg} starts at {got[0].base_offset}"
            batches += got
        out[(m.group(1), int(m.group(2)))] = {"bases": bases, "batches": batches}
    return out


@pytest.fixture(scope="module")
def coordinator(log):
    """The records of the __consumer_offsets partitions: (partition, offset, ts, batch, key, value)."""
    out = []
    for (topic, p), part in sorted(log.items()):
        if topic != OFFSETS:
            continue
        for b in part["batches"]:
            if b.is_control:
                continue
            for offset, ts, k, v in b.records:
                out.append((p, offset, ts, b, decode_key(k), v))
    return out


def _commits(coordinator, group: str) -> list[tuple[int, str, int, object]]:
    """(record timestamp, topic, partition, OffsetCommit) of a group's commits in log order."""
    return [
        (ts, key.topic, key.partition, decode_offset_commit_value(key.record_type, v))
        for _, _, ts, _, key, v in coordinator
        if key.record_type in (0, 1) and key.group_id == group and v is not None
    ]


def _last_offsets(log, coordinator, group: str) -> dict:
    """The committed offsets that took effect, by (topic, partition): a transactional one only
    when the next marker of its producer in the partition is a COMMIT."""
    markers = defaultdict(list)
    for (topic, p), part in log.items():
        if topic == OFFSETS:
            for b in part["batches"]:
                if b.is_control:
                    markers[p].append((b.base_offset, b.producer_id, b.records[0][2][3] == 1))
    out = {}
    for p, offset, _, b, key, v in coordinator:
        if key.record_type not in (0, 1) or key.group_id != group or v is None:
            continue
        if b.producer_id >= 0:
            outcome = next((c for o, pid, c in markers[p] if o > offset and pid == b.producer_id), None)
            if not outcome:
                continue
        out[(key.topic, key.partition)] = decode_offset_commit_value(key.record_type, v).offset
    return out


# --- the script regenerates it ------------------------------------------------------------------


def test_regenerates_byte_for_byte(tmp_path):
    maker = _maker()
    maker.make(str(tmp_path), maker.CAPTURE)
    committed, made = _files(LOG_DIR), _files(str(tmp_path / "logdir"))
    assert sorted(made) == sorted(committed)
    differ = []
    for rel, path in committed.items():
        with open(path, "rb") as a, open(made[rel], "rb") as b:
            if a.read() != b.read():
                differ.append(rel)
    assert differ == []
    with open(os.path.join(SAMPLE, "NOW")) as a, open(tmp_path / "NOW") as b:
        assert a.read() == b.read()


# --- a broker's log dir -----------------------------------------------------------------------


def test_layout_is_a_brokers(log):
    offsets = sorted(p for t, p in log if t == OFFSETS)
    assert offsets == list(range(50))
    topics = defaultdict(set)
    for (topic, p), part in log.items():
        folder = os.path.join(LOG_DIR, f"{topic}-{p}")
        names = set(os.listdir(folder))
        assert not {n for n in names if n.endswith((".index", ".timeindex", ".txnindex"))}, folder
        with open(os.path.join(folder, "partition.metadata")) as f:
            text = f.read()
        m = re.fullmatch(r"version: 0\ntopic_id: ([A-Za-z0-9_-]{22})", text)  # no line end, as Kafka writes it
        assert m, (folder, text)
        topics[topic].add(m.group(1))
        with open(os.path.join(folder, "leader-epoch-checkpoint")) as f:
            lines = f.read().splitlines()
        assert lines[0] == "0" and int(lines[1]) == len(lines) - 2 >= 1
        starts = [int(x.split()[1]) for x in lines[2:]]
        assert starts == sorted(starts) and starts[0] >= part["bases"][0]
        assert part["bases"], folder
    assert all(len(ids) == 1 for ids in topics.values()), "one topic id per topic"
    assert len({next(iter(ids)) for ids in topics.values()}) == len(topics), "topic ids differ"
    size = sum(os.path.getsize(p) for p in _files(LOG_DIR).values())
    assert size < 6.5e6, f"the sample grew to {size / 1e6:.1f} MB"


def test_checkpoints_match_the_segments(log):
    hw = read_offset_checkpoint(os.path.join(LOG_DIR, "replication-offset-checkpoint"))
    starts = read_offset_checkpoint(os.path.join(LOG_DIR, "log-start-offset-checkpoint"))
    assert set(hw) == set(log)
    for tp, part in log.items():
        end = part["batches"][-1].next_offset if part["batches"] else part["bases"][-1]
        assert hw[tp] == end, tp
    # Kafka lists only log start offsets past the first segment's base (DeleteRecords); a head
    # deleted by retention leaves its start at the first remaining segment's base offset
    for tp, start in starts.items():
        assert start > log[tp]["bases"][0], tp
    assert set(starts) == {("dead-letters", 0)}
    assert all(log[("audit-log", p)]["bases"][0] > 0 for p in range(3))


def test_every_batch_is_whole_and_in_order(log):
    for tp, part in log.items():
        expected = part["bases"][0]
        for b in part["batches"]:
            assert b.magic == 2 and b.base_offset == expected, (tp, b.base_offset, expected)
            assert b.last_offset - b.base_offset + 1 == len(b.records), (tp, b.base_offset)
            assert [r[0] for r in b.records] == list(range(b.base_offset, b.last_offset + 1))
            assert b.max_timestamp == max(r[1] for r in b.records)
            assert b.timestamp_type == 0  # CreateTime
            expected = b.next_offset


def test_topics_look_like_producers_wrote_them(log):
    data = [(tp, b) for tp, part in log.items() if tp[0] != OFFSETS for b in part["batches"]]
    codecs = {b.compression for _, b in data}
    assert codecs == {0, 1, 2, 3, 4}
    sizes = [len(b.records) for _, b in data if not b.is_control]
    assert sum(1 for n in sizes if n == 1) > len(sizes) / 3  # quiet: a record per batch
    assert max(sizes) >= 300 and sum(1 for n in sizes if n >= 50) > 100  # busy: linger windows, full batches
    idempotent = [b for _, b in data if b.producer_id >= 0 and not b.is_transactional]
    assert idempotent and all(b.base_sequence >= 0 and b.producer_epoch >= 0 for b in idempotent)
    plain = [b for _, b in data if b.producer_id < 0]
    assert plain and all(b.base_sequence == -1 for b in plain)
    # sequences count records per producer and partition
    for tp, part in log.items():
        if tp[0] == OFFSETS:
            continue
        seq = {}
        for b in part["batches"]:
            if b.producer_id >= 0 and not b.is_control:
                key = (b.producer_id, b.producer_epoch)
                if key in seq:
                    assert b.base_sequence == seq[key], (tp, b.base_offset)
                seq[key] = b.base_sequence + len(b.records)
    for topic in ("payments", "payments-ledger"):
        markers = [b for (t, _), b in data if t == topic and b.is_control]
        outcomes = {b.records[0][2][3] for b in markers}
        assert outcomes == {0, 1}, topic  # ABORT and COMMIT
        assert all(b.is_transactional for (t, _), b in data if t == topic)


def test_each_group_is_in_its_offsets_partition(coordinator):
    groups = set()
    for p, offset, _, _, key, _ in coordinator:
        assert partition_for(key.group_id, 50) == p, (key.group_id, p, offset)
        groups.add(key.group_id)
    assert len(groups) >= 25


def test_commits_are_never_ahead_of_the_log(log, coordinator):
    """A committed offset is the next one the group reads: at most the partition's end offset
    at the commit's time (batches count from their max timestamp). Commits older than the
    first batch left after a deletion may only point at or below it."""
    ends = {}
    for tp, part in log.items():
        if tp[0] != OFFSETS:
            bs = part["batches"]
            times = list(itertools.accumulate((b.max_timestamp for b in bs), max))  # appended in order
            ends[tp] = (times, [b.next_offset for b in bs], bs[0].base_offset)
    checked = 0
    for _, _, ts, _, key, v in coordinator:
        if key.record_type not in (0, 1) or v is None:
            continue
        c = decode_offset_commit_value(key.record_type, v)
        times, nexts, first = ends[(key.topic, key.partition)]
        i = bisect.bisect_right(times, ts) - 1
        limit = nexts[i] if i >= 0 else first
        assert c.offset <= limit, (key.group_id, key.topic, key.partition, c.offset, limit, ts)
        assert c.commit_timestamp <= ts and c.expire_timestamp == -1
        checked += 1
    assert checked > 10_000


def test_groups_shapes(log, coordinator, now_ms):
    retention = DEFAULT_RETENTION_MINUTES * 60_000
    metadata = defaultdict(list)
    for _, _, ts, _, key, v in coordinator:
        if key.record_type == 2 and v is not None:
            metadata[key.group_id].append((ts, decode_value(2, v)[1]))
    # expires: Empty for more than offsets.retention.minutes before NOW
    ts, last = metadata["orders-audit-legacy"][-1]
    assert last["members"] == [] and last["protocol"] is None and now_ms - last["currentStateTimestamp"] > retention
    assert max(t for t, *_ in _commits(coordinator, "orders-audit-legacy")) < ts
    # stops: Empty, not expired, its lag grew until NOW
    ts, last = metadata["email-notifier"][-1]
    assert last["members"] == [] and 3 * DAY < now_ms - ts < 5 * DAY
    # rebalances: generations climb
    assert [m["generation"] for _, m in metadata["shipment-tracker"]] == list(range(1, 18))
    assert max(m["generation"] for _, m in metadata["orders-fraud"]) >= 10
    # range skew over two topics: 4 partitions for one member, 2 for the other
    first = metadata["inventory-search-indexer"][0][1]
    counts = sorted(
        sum(len(tp["partitions"]) for tp in decode_assignment(base64.b64decode(m["assignment"]))["assignedPartitions"])
        for m in first["members"]
    )
    assert counts == [2, 4]
    # static members: a restart keeps the generation
    assert {m["generation"] for _, m in metadata["push-notifier"]} == {1} and len(metadata["push-notifier"]) == 3
    # simple groups write no group record; KIP-848 groups their own types
    assert "sms-notifier" not in metadata and "dlq-inspector" not in metadata
    types = {key.record_type for _, _, _, _, key, _ in coordinator if key.group_id == "clickstream-archiver"}
    assert {3, 5, 6, 7, 8, 1} <= types and 2 not in types


def test_exactly_once_group(log, coordinator):
    txn = [(p, o, b) for p, o, _, b, key, _ in coordinator if key.group_id == "payments-eos" and key.record_type == 1]
    assert txn and all(b.is_transactional and b.producer_id in (3001, 3002) for _, _, b in txn)
    p = partition_for("payments-eos", 50)
    markers = [b for b in log[(OFFSETS, p)]["batches"] if b.is_control]
    assert {b.producer_id for b in markers} == {3001, 3002}
    assert {b.records[0][2][3] for b in markers} == {0, 1}
    assert {b.producer_epoch for b in markers} == {0, 1}  # the restart's InitProducerId bumps the epoch
    ledger_pids = {b.producer_id for pp in range(3) for b in log[("payments-ledger", pp)]["batches"]}
    assert ledger_pids == {3001, 3002}


def test_commit_value_versions_follow_the_upgrade(coordinator):
    """OffsetCommitValue v3 from the 3.9 broker, v4 after the upgrade (with the topic id when
    the client sent one; never for TxnOffsetCommit); leader epochs 0, then 2."""
    versions = defaultdict(set)
    for _, _, ts, b, key, v in coordinator:
        if key.record_type == 1 and v is not None:
            c = decode_offset_commit_value(1, v)
            versions[c.version].add(ts)
            if c.version == 4 and b.producer_id >= 0:
                assert c.topic_id is None
    assert max(versions[3]) < min(versions[4])
    ids = {c.topic_id for _, _, _, c in _commits(coordinator, "orders-billing") if c.version == 4}
    assert ids == {topic_id_for("orders", 20261120)}
    assert {c.topic_id for _, _, _, c in _commits(coordinator, "metrics-alerting")} == {None}
    epochs = {c.leader_epoch for _, _, _, c in _commits(coordinator, "orders-billing")}
    assert {0, 2} <= epochs <= {-1, 0, 2}  # -1: nothing consumed yet


def test_hand_stated_facts(log, coordinator):
    """Numbers read off the sample once (see samples/README.md) and stated here by hand."""
    hw = read_offset_checkpoint(os.path.join(LOG_DIR, "replication-offset-checkpoint"))
    last = _last_offsets(log, coordinator, "orders-audit-legacy")
    assert last[("orders", 0)] == FACTS["orders-audit-legacy orders-0"]
    last = _last_offsets(log, coordinator, "email-notifier")
    assert hw[("notifications", 0)] - last[("notifications", 0)] == FACTS["email-notifier lag notifications-0"]
    last = _last_offsets(log, coordinator, "audit-compliance-export")
    for p in range(3):  # retention deleted what this group would read next
        assert last[("audit-log", p)] < log[("audit-log", p)]["bases"][0]
    assert log[("audit-log", 0)]["bases"][0] == FACTS["audit-log-0 log start"]
    last = _last_offsets(log, coordinator, "payments-eos")
    assert all(last[("payments", p)] == hw[("payments", p)] for p in range(3))
    starts = read_offset_checkpoint(os.path.join(LOG_DIR, "log-start-offset-checkpoint"))
    assert starts[("dead-letters", 0)] == FACTS["dead-letters-0 log start"]


FACTS = {
    "orders-audit-legacy orders-0": 165,
    "email-notifier lag notifications-0": 147,
    "audit-log-0 log start": 230,
    "dead-letters-0 log start": 100,
}


# --- the topic builder ----------------------------------------------------------------------------


def test_partition_builder_rolls_and_deletes(tmp_path):
    log = TopicPartitionBuilder("t", 0, topic_id=topic_id_for("t"), segment_bytes=400, segment_ms=1000)
    prod = Producer(7, 0)
    for i in range(12):  # 12 batches of 3 records, 300 ms apart: a time roll every 4 batches
        log.append([(10_000 + 300 * i + j, None, b"v") for j in range(3)], compression=4, producer=prod)
    bases = [b for b, _ in log.segments]
    assert bases == [0, 12, 24]
    big = TopicPartitionBuilder("u", 0, topic_id=topic_id_for("u"), segment_bytes=400)
    for i in range(6):  # a size roll before an append that would pass segment.bytes
        big.append([(i, None, b"x" * 100)])
    assert len(big.segments) == 3 and all(len(d) <= 400 for _, d in big.segments)
    # the first segment's newest record is at 10_902, the second's at 12_102
    assert log.delete_by_retention(now_ms=13_500, retention_ms=1500) == 1
    assert log.log_start_offset == 12
    log.delete_records(30)
    assert [b for b, _ in log.segments] == [24] and log.log_start_offset == 30
    log.write(str(tmp_path))
    out = write_checkpoints(str(tmp_path), {("t", 0): log.log_start_offset})
    assert out[("t", 0)] == (30, 36)
    with open(tmp_path / "log-start-offset-checkpoint") as f:
        assert f.read() == "0\n1\nt 0 30\n"
    with open(tmp_path / "replication-offset-checkpoint") as f:
        assert f.read() == "0\n1\nt 0 36\n"


def test_partition_builder_batches_equal_the_writers(tmp_path):
    recs = [(1_700_000_000_000 + 3 * i, None if i % 2 else b"k%d" % i, b"v%d" % i) for i in range(7)]
    for codec in (0, 2, 3, 4):  # gzip: Python stamps the time in its header, Java writes 0
        log = TopicPartitionBuilder("t", 0, topic_id=topic_id_for("t"))
        log.append(recs, compression=codec, producer=Producer(5, 0))
        expected = encode_batch(
            0,
            [(i, ts, k, v) for i, (ts, k, v) in enumerate(recs)],
            producer_id=5,
            producer_epoch=0,
            base_sequence=0,
            compression=codec,
        )
        assert bytes(log.segments[0][1]) == expected
    log = TopicPartitionBuilder("t", 0, topic_id=topic_id_for("t"))
    log.append(recs, compression=1)
    assert struct.unpack_from("<I", log.segments[0][1], 61 + 4)[0] == 0  # gzip MTIME
    assert [r[1:] for r in next(iter(SegmentReader(bytes(log.segments[0][1])))).records] == [
        (ts, k, v) for ts, k, v in recs
    ]


def test_bulk_generator(tmp_path):
    stats = generate_topics(str(tmp_path), 200_000, topics=5, partitions_per_topic=21, seed=3)
    assert stats["partition_count"] == 105 and len(stats["partitions"]) == 105
    assert stats["records"] >= 200_000 - 105
    again = generate_topics(str(tmp_path / "again"), 200_000, topics=5, partitions_per_topic=21, seed=3)
    assert again["partitions"] == stats["partitions"]
    hw = read_offset_checkpoint(str(tmp_path / "replication-offset-checkpoint"))
    for part in stats["partitions"][::20]:
        folder = tmp_path / f"{part['topic']}-{part['partition']}"
        records = batches = 0
        offset = 0
        for seg in sorted(os.listdir(folder)):
            if not seg.endswith(".log"):
                continue
            for b in SegmentReader((folder / seg).read_bytes(), verify_crc=True):
                assert b.base_offset == offset and b.last_offset - b.base_offset + 1 == len(b.records)
                offset = b.next_offset
                records += len(b.records)
                batches += 1
        assert (records, batches, offset) == (part["records"], part["batches"], part["end_offset"])
        assert hw[(part["topic"], part["partition"])] == offset
    with pytest.raises(CorruptBatchError):  # a flipped byte fails the CRC
        data = bytearray((tmp_path / "bulk-00-0" / f"{0:020d}.log").read_bytes())
        data[-3] ^= 1
        list(SegmentReader(bytes(data), verify_crc=True))
