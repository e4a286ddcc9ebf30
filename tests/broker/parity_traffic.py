"""Real coordinator traffic for the DumpLogSegments parity test (test_dumplog_parity.py).

`generate(bootstrap, kip848=...)` drives confluent-kafka clients against a broker so that its
`__consumer_offsets` log gets every kind of record a broker writes in normal operation:
classic group membership (joins, a rebalance after a member leaves, the group going empty),
offset commits with and without metadata, a standalone `assign()` commit, transactional offset
commits ending in a COMMIT and an ABORT marker, a group id with non-ASCII characters, a group
deletion (tombstones) and, on 4.x brokers, a KIP-848 consumer group (record types 3-8) that is
also deleted once empty. Every client is closed before it returns, so the log is quiet when the
caller snapshots it."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

POLL_S = 0.1
PARTITIONS = 3
MESSAGES = 30


@dataclass
class Traffic:
    topic: str
    classic_group: str  # 2 members, rebalance, commits (one with metadata); left alive as Empty
    deleted_group: str  # classic group that goes Empty and is deleted (tombstones)
    standalone_group: str  # assign() + commit, non-ASCII id
    txn_group: str  # transactional offset commits: one committed, one aborted
    kip848_group: str | None  # KIP-848 consumer group (4.x), emptied and deleted
    metadata: str  # the metadata string of the commit that carries one
    steps: dict = field(default_factory=dict)  # step name -> seconds

    @property
    def groups(self) -> list[str]:
        return [
            g
            for g in (self.classic_group, self.deleted_group, self.standalone_group, self.txn_group, self.kip848_group)
            if g
        ]


def _consumer(bootstrap: str, group: str, client_id: str, protocol: str = "classic") -> Consumer:
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "client.id": client_id,
        "log_level": 3,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    if protocol == "consumer":
        conf["group.protocol"] = "consumer"
    else:
        conf.update(
            {"session.timeout.ms": 30000, "heartbeat.interval.ms": 500, "partition.assignment.strategy": "range"}
        )
    return Consumer(conf)


def _poll_until(consumers: list[Consumer], done, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for c in consumers:
            msg = c.poll(POLL_S)
            if msg is not None and msg.error() and msg.error().fatal():
                raise KafkaException(msg.error())
        if done():
            return
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def _assigned(consumers: list[Consumer], total: int):
    def check():
        parts = {(tp.topic, tp.partition) for c in consumers for tp in c.assignment()}
        return len(parts) == total and all(c.assignment() for c in consumers)

    return check


def _commit(c: Consumer, tps: list[TopicPartition]) -> None:
    result = c.commit(offsets=tps, asynchronous=False)
    bad = [tp for tp in result or [] if tp.error]
    assert not bad, f"commit failed: {bad}"


def _delete_groups(admin: AdminClient, groups: list[str], timeout: float = 30.0) -> None:
    """Delete groups, retrying while the coordinator still sees them as non-empty."""
    deadline = time.monotonic() + timeout
    pending = list(groups)
    while pending:
        failed = []
        for g, f in admin.delete_consumer_groups(pending).items():
            try:
                f.result(30)
            except KafkaException as e:
                if time.monotonic() > deadline or "NOT_EMPTY" not in str(e).upper():
                    raise
                failed.append(g)
        pending = failed
        if pending:
            time.sleep(0.3)


def generate(bootstrap: str, *, kip848: bool) -> Traffic:
    tag = uuid.uuid4().hex[:8]
    t = Traffic(
        topic=f"parity-{tag}",
        classic_group=f"parity-classic-{tag}",
        deleted_group=f"parity-gone-{tag}",
        standalone_group=f"parity-grüppe-日本語-é\u00a0{tag}",
        txn_group=f"parity-txn-{tag}",
        kip848_group=f"parity-kip848-{tag}" if kip848 else None,
        metadata=f'meta "quoted" ünïcode ✓ {tag}',
    )
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})

    def step(name, fn):
        t0 = time.monotonic()
        fn()
        t.steps[name] = round(time.monotonic() - t0, 2)

    def topic_and_messages():
        for f in admin.create_topics([NewTopic(t.topic, PARTITIONS, 1)]).values():
            f.result(30)
        p = Producer({"bootstrap.servers": bootstrap, "log_level": 3})
        for i in range(MESSAGES):
            p.produce(t.topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % PARTITIONS)
        assert p.flush(30) == 0

    def classic_group():
        members = [_consumer(bootstrap, t.classic_group, f"parity-c{i}") for i in range(2)]
        try:
            for m in members:
                m.subscribe([t.topic])
            _poll_until(members, _assigned(members, PARTITIONS), f"{t.classic_group}: 2 members assigned")
            # First member: commit with metadata and a leader epoch; second: plain commit.
            _commit(
                members[0],
                [
                    TopicPartition(t.topic, tp.partition, 3 + tp.partition, t.metadata, 0)
                    for tp in members[0].assignment()
                ],
            )
            _commit(
                members[1], [TopicPartition(t.topic, tp.partition, 5 + tp.partition) for tp in members[1].assignment()]
            )
            members[1].close()  # LeaveGroup: rebalance to the one member left
            live = members[:1]
            _poll_until(live, _assigned(live, PARTITIONS), f"{t.classic_group}: rebalanced to 1 member")
            # consume a little so the commit of positions carries real leader epochs
            got = 0
            deadline = time.monotonic() + 10
            while got < 5 and time.monotonic() < deadline:
                msg = live[0].poll(POLL_S)
                if msg is not None and not msg.error():
                    got += 1
            live[0].commit(asynchronous=False)
        finally:
            for m in members:
                try:
                    m.close()
                except RuntimeError:  # already closed
                    pass

    def deleted_group():
        c = _consumer(bootstrap, t.deleted_group, "parity-gone")
        try:
            c.subscribe([t.topic])
            _poll_until([c], _assigned([c], PARTITIONS), f"{t.deleted_group}: assigned")
            _commit(c, [TopicPartition(t.topic, p, 7) for p in range(PARTITIONS)])
        finally:
            c.close()

    def standalone():
        c = _consumer(bootstrap, t.standalone_group, "parity-standalone")
        try:
            c.assign([TopicPartition(t.topic, p) for p in range(PARTITIONS)])
            _commit(
                c,
                [
                    TopicPartition(t.topic, 0, 1, "stand-alone ✓"),
                    TopicPartition(t.topic, 1, 2),
                    TopicPartition(t.topic, 2, 9, "", 0),
                ],
            )
        finally:
            c.close()

    def transactions():
        c = _consumer(bootstrap, t.txn_group, "parity-txn-consumer")
        try:
            meta = c.consumer_group_metadata()
            p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"parity-tx-{tag}", "log_level": 3})
            p.init_transactions(30)
            p.begin_transaction()
            p.produce(t.topic, value=b"txn-commit", partition=0)
            p.send_offsets_to_transaction([TopicPartition(t.topic, 0, 11), TopicPartition(t.topic, 1, 12)], meta, 30)
            p.commit_transaction(30)
            p.begin_transaction()
            p.produce(t.topic, value=b"txn-abort", partition=1)
            p.send_offsets_to_transaction([TopicPartition(t.topic, 1, 99), TopicPartition(t.topic, 2, 98)], meta, 30)
            p.abort_transaction(30)
            p.flush(10)
        finally:
            c.close()

    def kip848_group():
        members = [_consumer(bootstrap, t.kip848_group, f"parity-k{i}", protocol="consumer") for i in range(2)]
        try:
            for m in members:
                m.subscribe([t.topic])
            _poll_until(
                members, _assigned(members, PARTITIONS), f"{t.kip848_group}: KIP-848 members assigned", timeout=60
            )
            for i, m in enumerate(members):
                _commit(m, [TopicPartition(t.topic, tp.partition, 20 + tp.partition, f"k{i}") for tp in m.assignment()])
        finally:
            for m in members:
                m.close()

    step("topic", topic_and_messages)
    step("classic", classic_group)
    step("deleted", deleted_group)
    step("standalone", standalone)
    step("transactions", transactions)
    if kip848:
        step("kip848", kip848_group)
    step("delete", lambda: _delete_groups(admin, [t.deleted_group] + ([t.kip848_group] if kip848 else [])))
    return t
