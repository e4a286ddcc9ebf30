"""The live source at the edges of a fetch (issue 15), on a real 4.x broker.

- A record batch larger than a whole fetch: Kafka returns the first batch of a response whole
  however small the fetch (KIP-74); a ~12 MiB GroupMetadata record (a classic member's
  subscription user data) must be read from the live topic as from the segment files.
- Transactions whose batches fall on fetch boundaries: with a fetch size of one byte every
  fetch returns exactly one batch, so a fetch ends in the middle of each transaction and each
  COMMIT/ABORT marker is the first record of its own fetch.

Every expectation is what the broker reports (its admin API) or what its segment files hold
(read here with a batch-header parser of this module), and the live replay must equal a replay
of a copy of the same broker's segment files."""

from __future__ import annotations

import glob
import os
import random
import struct
import time

import pytest

from tests.broker import scenarios as S
from tests.broker.compare import (
    LIVE_VS_FILES,
    broker_view,
    committed_offsets,
    comparable_rows,
    differences,
    list_groups,
    replay_view,
)
from tests.broker.kafka_broker import snapshot_offsets_log_dir
from tests.broker.log_bytes import offsets_partition_for, varint

pytestmark = [pytest.mark.broker, pytest.mark.spark]

PARTITIONS = 4
DEFAULT_FETCH = 8 << 20  # the live source's fetch size
# A group coordinator appends a batch of at most the offsets topic's max.message.bytes (the
# broker's message.max.bytes unless the topic overrides it): 16 MiB lets a 12 MiB record in.
MAX_MESSAGE_BYTES = 16 << 20
USER_DATA = random.Random(15).randbytes(12 << 20)  # incompressible, and the coordinator writes uncompressed
BIG_GROUP, BIG_TOPIC = "edge-big", "edge-big-topic"
TXN_GROUP, TXN_TOPIC = "edge-txn", "edge-txn-topic"


@pytest.fixture(scope="module")
def edge_broker(tmp_path_factory):
    from tests.broker.kafka_broker import own_kafka4

    yield from own_kafka4(
        tmp_path_factory, "kafka4-edges", PARTITIONS, extra_config={"message.max.bytes": MAX_MESSAGE_BYTES}, heap="1g"
    )


# --- independent readings: Kafka's partitioning, segment files' batch headers ------------------


def batches(data: bytes) -> list[dict]:
    """The whole v2 record batches of `data` (a segment file or a fetched chunk), from their
    headers: base/last offset, size, producer id, transactional and control flags, and for a
    control batch its marker (the control record key's type: 0 ABORT, 1 COMMIT)."""
    out, pos = [], 0
    while pos + 61 <= len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        if pos + 12 + length > len(data):
            break  # a partial batch at the end
        assert data[pos + 16] == 2, f"magic {data[pos + 16]} at byte {pos}"
        (attributes,) = struct.unpack_from(">h", data, pos + 21)
        (last_delta,) = struct.unpack_from(">i", data, pos + 23)
        (producer_id,) = struct.unpack_from(">q", data, pos + 43)
        batch = {
            "base": base,
            "last": base + last_delta,
            "pos": pos,
            "size": 12 + length,
            "producer_id": producer_id,
            "transactional": bool(attributes & 0x10),
            "control": bool(attributes & 0x20),
            "marker": None,
        }
        if batch["control"]:
            # first record: length, attributes, timestamp delta, offset delta, key length, key
            r = pos + 61
            _, r = varint(data, r)
            r += 1
            for _ in range(3):
                _, r = varint(data, r)
            _version, kind = struct.unpack_from(">hh", data, r)
            batch["marker"] = {0: "ABORT", 1: "COMMIT"}[kind]
        out.append(batch)
        pos += 12 + length
    return out


def kafka_fetches(log: list[dict], max_bytes: int) -> list[int]:
    """The offsets of the Fetch requests that read `log` (its batches, from offset 0, in one
    segment) by Kafka's rule: an answer holds `max_bytes` from the fetch offset's batch on, or
    that batch whole when larger (KIP-74); the next fetch starts after its last whole batch."""
    offsets, i = [], 0
    while i < len(log):
        offsets.append(log[i]["base"])
        limit = log[i]["pos"] + max(max_bytes, log[i]["size"])
        while i < len(log) and log[i]["pos"] + log[i]["size"] <= limit:
            i += 1
    return offsets


def segment_bytes(log_dir: str, partition: int) -> bytes:
    files = glob.glob(os.path.join(log_dir, f"__consumer_offsets-{partition}", "*.log"))
    out = b""
    for path in sorted(files, key=lambda f: int(os.path.basename(f)[:-4])):
        with open(path, "rb") as f:
            out += f.read()
    return out


# --- the tables --------------------------------------------------------------------------------


def assert_same_tables(spark, live, files):
    for name in LIVE_VS_FILES:
        assert comparable_rows(spark, live, name) == comparable_rows(spark, files, name), (
            f"{name} differs between the live and file replays"
        )


def replay(spark, logs, warehouse, now_ms, **kw):
    """The replay alone: the lag stage and the assignment audit read no __consumer_offsets."""
    from lib.spark.pipeline import run_replay

    return run_replay(spark, logs, str(warehouse), now_ms, lag=False, assignments=False, **kw)


def wait_stable(bootstrap: str, group: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    state = None
    while time.monotonic() < deadline:
        state = list_groups(bootstrap).get(group, {}).get("group_state")
        if state == "Stable":
            return
        time.sleep(0.2)
    raise AssertionError(f"{group} is {state}, not Stable")


# --- A: a record larger than one fetch --------------------------------------------------------


def big_member(bootstrap: str):
    """A classic-protocol member (kafka-python) whose subscription carries USER_DATA: the group
    coordinator writes it, whole, in the group's GroupMetadata record."""
    from kafka import KafkaConsumer
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

    class BigUserDataRange(RangePartitionAssignor):
        @classmethod
        def metadata(cls, topics):
            return ConsumerProtocolSubscription(cls.version, sorted(topics), USER_DATA)

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=BIG_GROUP,
        client_id="edge-big-member",
        partition_assignment_strategy=[BigUserDataRange],
        enable_auto_commit=False,
        session_timeout_ms=60000,
        heartbeat_interval_ms=1000,
    )
    consumer.subscribe([BIG_TOPIC])
    return consumer


def test_a_record_larger_than_one_fetch_is_read_whole(spark, tmp_path, edge_broker):
    from kafka.structs import OffsetAndMetadata, TopicPartition

    from lib.source.live import OffsetsTopicReader
    from lib.source.logdir import find_partitions, live_partitions

    b = edge_broker.bootstrap
    p = offsets_partition_for(BIG_GROUP, PARTITIONS)
    S.create_topic(b, BIG_TOPIC, 3)
    member = big_member(b)
    try:
        deadline = time.monotonic() + 90
        while len(member.assignment()) < 3 and time.monotonic() < deadline:
            member.poll(timeout_ms=200)
        assert len(member.assignment()) == 3, member.assignment()
        member.commit({TopicPartition(BIG_TOPIC, i): OffsetAndMetadata(4 + i, "big", -1) for i in range(3)})
        wait_stable(b, BIG_GROUP)
        seen = broker_view(b, [BIG_GROUP])
        described = _describe(b, BIG_GROUP)
        now_ms = int(time.time() * 1000)
        copy = snapshot_offsets_log_dir(edge_broker, str(tmp_path / "copy"))
        live_run = replay(spark, live_partitions(b, [p]), tmp_path / "live", now_ms)
        replay(spark, find_partitions(copy, [p]), tmp_path / "files", now_ms)
    finally:
        member.close()

    # the broker's log really holds a record batch larger than one fetch, with the bytes sent:
    # one per generation the member joined (one, unless its client rejoined once the new topic's
    # metadata reached it; a busy machine saw two, offsets 1 and 2)
    disk = segment_bytes(copy, p)
    big = [x for x in batches(disk) if x["size"] > DEFAULT_FETCH]
    assert big, [(x["base"], x["size"]) for x in batches(disk)]
    last = big[-1]
    big_batch = disk[last["pos"] : last["pos"] + last["size"]]
    assert USER_DATA in big_batch
    # KIP-74: a fetch of the default size at that batch returns it whole, and nothing more
    reader = OffsetsTopicReader(b)
    try:
        chunk = reader.fetch(p, last["base"])
    finally:
        reader.close()
    assert chunk.data == big_batch
    # the replay's Spark task fetched as Kafka's rule says: the batch came whole in a fetch of
    # its own, after a fetch that ended inside it (the records before it, then its first bytes)
    fetches = kafka_fetches(batches(disk), DEFAULT_FETCH)
    assert live_run.fetches == len(fetches)
    assert big[0]["pos"] > 0 and all(x["base"] in fetches[1:] for x in big)

    # the broker's own view of the group and its member: the subscription, byte for byte
    assert (described.group_state, described.protocol_type, described.protocol_data) == ("Stable", "consumer", "range")
    (m,) = described.members
    assert subscription(bytes(m.member_metadata)) == (0, [BIG_TOPIC], USER_DATA)

    # the live replay has the record, with the member's exact subscription user data
    log = comparable_rows(spark, tmp_path / "live", "offsets_log")
    records = [r for r in log if r["record_type_name"] == "GroupMetadata" and r["group_id"] == BIG_GROUP]
    with_member = [r for r in records if r["group_metadata"]["members"]]
    assert [r["log_offset"] for r in with_member] == [x["base"] for x in big]
    generations = [r["group_metadata"]["generation"] for r in with_member]
    assert generations == sorted(set(generations)) and generations[0] == 1  # a record per generation
    gm = with_member[-1]["group_metadata"]
    (logged,) = gm["members"]
    assert logged["subscription_user_data"] == USER_DATA
    assert logged["subscribed_topics"] == [BIG_TOPIC]
    assert (gm["protocol_type"], gm["protocol"]) == ("consumer", "range")
    assert (logged["member_id"], logged["client_id"], logged["client_host"]) == (
        m.member_id,
        m.client_id,
        m.client_host,
    )
    assert logged["subscription_bytes"] == bytes(m.member_metadata)

    # the group and its offsets as the broker reports them
    tables = {t: comparable_rows(spark, tmp_path / "live", t) for t in ("consumer_groups", "group_offsets")}
    problems = differences(seen, replay_view(tables, [BIG_GROUP]))
    assert not problems, "the live replay differs from the broker:\n" + "\n".join(problems)
    assert seen[BIG_GROUP]["state"] == "Stable"
    assert seen[BIG_GROUP]["offsets"] == {(BIG_TOPIC, i): (4 + i, "big", None) for i in range(3)}
    (group_row,) = [r for r in tables["consumer_groups"] if r["group_id"] == BIG_GROUP]
    broker_said = (described.group_state, described.protocol_type, described.protocol_data)
    assert (group_row["state"], group_row["protocol_type"], group_row["protocol"]) == broker_said
    assert group_row["generation"] == gm["generation"]  # the last record's
    assert [mm["member_id"] for mm in group_row["members"]] == [m.member_id]

    # ... and as a replay of the broker's segment files has them
    assert_same_tables(spark, tmp_path / "live", tmp_path / "files")


def _describe(bootstrap: str, group: str):
    """The broker's DescribeGroups answer for `group`, member metadata as raw bytes (the
    single test broker, node 1, is every group's coordinator)."""
    from kafka.net.compat import KafkaNetClient
    from kafka.protocol.admin import DescribeGroupsRequest

    client = KafkaNetClient(bootstrap_servers=bootstrap, receive_message_max_bytes=64 << 20)
    try:
        client._manager.bootstrap(30000)
        response = client.send_and_receive(1, DescribeGroupsRequest(groups=[group]), timeout_ms=30000)
    finally:
        client.close()
    (described,) = response.groups
    assert described.error_code == 0, described
    return described


def subscription(data: bytes) -> tuple[int, list[str], bytes]:
    """ConsumerProtocolSubscription: version, topics, user data (the fields every version has)."""
    version, count = struct.unpack_from(">hi", data, 0)
    pos, topics = 6, []
    for _ in range(count):
        (n,) = struct.unpack_from(">h", data, pos)
        topics.append(data[pos + 2 : pos + 2 + n].decode())
        pos += 2 + n
    (n,) = struct.unpack_from(">i", data, pos)
    return version, topics, data[pos + 4 : pos + 4 + n]


# --- B: transactions on fetch boundaries ------------------------------------------------------


def transaction(bootstrap: str, transactional_id: str, group_meta, commits: list[dict[int, int]], commit: bool):
    """One transaction of offset commits only, one TxnOffsetCommit (one batch) per dict."""
    from confluent_kafka import Producer, TopicPartition

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    producer.init_transactions(30)
    producer.begin_transaction()
    for offsets in commits:
        tps = [TopicPartition(TXN_TOPIC, partition, offset) for partition, offset in offsets.items()]
        producer.send_offsets_to_transaction(tps, group_meta, 30)
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)


def test_transactions_on_fetch_boundaries(spark, tmp_path, edge_broker, monkeypatch):
    from confluent_kafka import Consumer

    from lib.coordinator.group_coordinator import GroupCoordinator
    from lib.lake.partition_task import LiveTopicRead
    from lib.source.live import OffsetsTopicReader
    from lib.source.logdir import find_partitions, live_partitions

    b = edge_broker.bootstrap
    p = offsets_partition_for(TXN_GROUP, PARTITIONS)
    S.create_topic(b, TXN_TOPIC, 4)
    S.standalone_commit(b, TXN_GROUP, TXN_TOPIC, {0: 5, 1: 5})
    meta_source = Consumer({"bootstrap.servers": b, "group.id": TXN_GROUP})
    try:
        meta = meta_source.consumer_group_metadata()  # no member: generation -1, as a simple group
        transaction(b, "edge-tx-commit", meta, [{0: 10}, {1: 11}, {2: 12}], commit=True)
        transaction(b, "edge-tx-abort", meta, [{0: 20}, {1: 21}, {3: 23}], commit=False)
    finally:
        meta_source.close()
    # the broker: the committed transaction's offsets, the aborted one's not (0 and 1 keep the
    # committed transaction's, 3 has none)
    broker = committed_offsets(b, TXN_GROUP)
    expected = {(TXN_TOPIC, 0): 10, (TXN_TOPIC, 1): 11, (TXN_TOPIC, 2): 12}
    assert {tp: o for tp, (o, _, _) in broker.items()} == expected
    now_ms = int(time.time() * 1000)
    copy = snapshot_offsets_log_dir(edge_broker, str(tmp_path / "copy"))

    # the log: each transaction is three transactional batches and then its marker
    disk = batches(segment_bytes(copy, p))
    txn = [x for x in disk if x["transactional"]]
    shape = [("marker", x["marker"]) if x["control"] else ("data", x["producer_id"]) for x in txn]
    committer, aborter = txn[0]["producer_id"], txn[4]["producer_id"]
    assert committer != aborter
    assert shape == [("data", committer)] * 3 + [("marker", "COMMIT")] + [("data", aborter)] * 3 + [("marker", "ABORT")]
    disk_offsets = [o for x in disk for o in range(x["base"], x["last"] + 1)]

    # the live read and the coordinator's load with fetches that end: after every batch (one
    # byte: each fetch returns exactly one batch, KIP-74); right before the COMMIT marker; and
    # inside the committed transaction's second batch
    commit_at = next(k for k, x in enumerate(disk) if x["marker"] == "COMMIT")
    second = disk[commit_at - 2]
    fetched: list[tuple[int, int, bytes]] = []
    real_fetch = OffsetsTopicReader.fetch

    def recording_fetch(self, partition, offset, max_bytes=DEFAULT_FETCH):
        chunk = real_fetch(self, partition, offset, max_bytes)
        fetched.append((offset, max_bytes, chunk.data))
        return chunk

    monkeypatch.setattr(OffsetsTopicReader, "fetch", recording_fetch)
    for size in (1, disk[commit_at]["pos"], second["pos"] + second["size"] // 2):
        fetched.clear()
        live = LiveTopicRead(b, p, 0, fetch_max_bytes=size)
        read = [o for batch in live for o in batch.column("log_offset").to_pylist()]
        assert read == disk_offsets and live.next_offset == disk[-1]["last"] + 1, size
        assert live.fetches == len(fetched) and {n for _, n, _ in fetched} == {size}
        # each fetch starts with a whole batch at the offset asked
        assert all(batches(data)[0]["base"] == offset for offset, _, data in fetched), size
        whole = [[x["base"] for x in batches(data)] for _, _, data in fetched]
        if size == 1:
            assert whole == [[x["base"]] for x in disk]
            assert [len(data) for _, _, data in fetched] == [x["size"] for x in disk]
            # the committed transaction's batches came one per fetch, then the COMMIT opened one
            firsts = [batches(data)[0] for _, _, data in fetched]
            assert [
                (x["transactional"], x["control"], x["producer_id"]) for x in firsts[commit_at - 3 : commit_at + 1]
            ] == [(True, False, committer)] * 3 + [(True, True, committer)]
            assert firsts[commit_at]["marker"] == "COMMIT"
        elif size == disk[commit_at]["pos"]:
            # the first fetch ends after the transaction's last offset commit, the next one
            # starts with its COMMIT marker
            assert len(fetched[0][2]) == size and whole[0] == [x["base"] for x in disk[:commit_at]]
            assert batches(fetched[1][2])[0]["marker"] == "COMMIT"
        else:
            # the first fetch ends inside the transaction's second batch: read again from there
            assert len(fetched[0][2]) == size and whole[0] == [x["base"] for x in disk[: commit_at - 2]]
            assert fetched[1][0] == second["base"]
        # the coordinator's load, with the same fetches, answers as the broker does
        fetched.clear()
        coordinator = GroupCoordinator(None, b, partition_count=PARTITIONS, fetch_max_bytes=size)
        coordinator.immigrate(p)
        got = {tp: e["committed_offset"] for tp, e in coordinator.committed_offsets(TXN_GROUP).items()}
        assert got == expected, size
        assert {n for _, n, _ in fetched} == {size} and len(fetched) == live.fetches

    # the pipeline, one batch per fetch, equals the broker and the file replay
    result = replay(spark, live_partitions(b, [p]), tmp_path / "live", now_ms, fetch_max_bytes=1)
    assert result.fetches == len(disk)  # the Spark task, too, fetched one batch at a time
    replay(spark, find_partitions(copy, [p]), tmp_path / "files", now_ms)
    offsets = comparable_rows(spark, tmp_path / "live", "group_offsets")
    assert {(r["topic"], r["partition"]): r["committed_offset"] for r in offsets if r["group_id"] == TXN_GROUP} == (
        expected
    )
    assert comparable_rows(spark, tmp_path / "live", "pending_transactional_offsets") == []
    assert_same_tables(spark, tmp_path / "live", tmp_path / "files")
