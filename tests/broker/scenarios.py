"""Real client traffic for the broker scenarios: each function drives clients against a
broker and returns what it did. Clients that must stay in their group (so the group is Stable
when the snapshot is taken) are returned open; the caller closes them."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

POLL_S = 0.2
AUTO_COMMIT_MS = 200
QUIET_S = 5 * AUTO_COMMIT_MS / 1000  # no message handed out for this long: auto-commits are done


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(bootstrap: str, name: str, partitions: int, messages: int = 50) -> None:
    a = admin(bootstrap)
    for f in a.create_topics([NewTopic(name, partitions, 1)]).values():
        try:
            f.result(30)
        except KafkaException as e:
            if "TOPIC_ALREADY_EXISTS" not in str(e):
                raise
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(messages):
        p.produce(name, value=f"m{i}".encode(), partition=i % partitions)
    p.flush(30)


def consumer(
    bootstrap: str,
    group: str,
    *,
    protocol: str = "classic",
    instance_id: str | None = None,
    auto_commit: bool = False,
    client_id: str | None = None,
    assignor: str | None = None,
) -> Consumer:
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "log_level": 3,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": auto_commit,
        "auto.commit.interval.ms": AUTO_COMMIT_MS,
        "client.id": client_id or f"client-{uuid.uuid4().hex[:6]}",
    }
    if protocol == "consumer":
        conf["group.protocol"] = "consumer"
    else:
        conf.update(
            {
                "session.timeout.ms": 60000,
                "heartbeat.interval.ms": 1000,
                "partition.assignment.strategy": assignor or "range",
            }
        )
        if instance_id:
            conf["group.instance.id"] = instance_id
    return Consumer(conf)


def poll_until(consumers: list[Consumer], done, timeout: float = 60.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for c in consumers:
            c.poll(POLL_S)
        if done():
            return
    raise AssertionError(f"timed out waiting for {what}")


def assigned(consumers: list[Consumer], total: int):
    """All `total` partitions assigned, each once, and every member holding some."""

    def check():
        parts = [tp for c in consumers for tp in c.assignment()]
        return (
            len(parts) == total
            and len({(tp.topic, tp.partition) for tp in parts}) == total
            and all(c.assignment() for c in consumers)
        )

    return check


def commit(c: Consumer, topic: str, offsets: dict[int, int], metadata: str | None = None) -> None:
    if not offsets:
        return
    tps = [
        TopicPartition(topic, p, o, metadata) if metadata is not None else TopicPartition(topic, p, o)
        for p, o in offsets.items()
    ]
    c.commit(offsets=tps, asynchronous=False)


def classic_group_with_rebalances(bootstrap: str, group: str, topic: str, partitions: int = 6) -> list[Consumer]:
    """Three members join, commit with metadata, one leaves (rebalance), the two left commit
    again. Returns the two live members."""
    members = [consumer(bootstrap, group, client_id=f"{group}-c{i}") for i in range(3)]
    for m in members:
        m.subscribe([topic])
    poll_until(members, assigned(members, partitions), what=f"{group}: 3 members assigned")
    for i, m in enumerate(members):
        commit(m, topic, {tp.partition: 10 + tp.partition for tp in m.assignment()}, metadata=f"first-{i}")
    members[2].close()
    live = members[:2]
    poll_until(live, assigned(live, partitions), what=f"{group}: 2 members assigned")
    for m in live:
        commit(m, topic, {tp.partition: 20 + tp.partition for tp in m.assignment()})
    return live


def static_members_auto_commit(bootstrap: str, group: str, topic: str, partitions: int = 3) -> list[Consumer]:
    members = [
        consumer(
            bootstrap,
            group,
            instance_id=f"{group}-static-{i}",
            auto_commit=True,
            client_id=f"{group}-s{i}",
            assignor="roundrobin",
        )
        for i in range(2)
    ]
    for m in members:
        m.subscribe([topic])
    poll_until(members, assigned(members, partitions), what=f"{group}: static members assigned")
    consumed = {"n": 0}

    def consumed_some():
        return consumed["n"] >= 20

    deadline = time.monotonic() + 30
    while not consumed_some() and time.monotonic() < deadline:
        for m in members:
            if m.poll(POLL_S) is not None:
                consumed["n"] += 1
    for m in members:  # plus a manual commit, so every partition has an offset
        commit(m, topic, {tp.partition: 3 for tp in m.assignment()})
    return members


def standalone_commit(bootstrap: str, group: str, topic: str, offsets: dict[int, int], metadata: str = "") -> None:
    c = consumer(bootstrap, group)
    c.assign([TopicPartition(topic, p) for p in offsets])
    commit(c, topic, offsets, metadata=metadata or None)
    c.close()


def group_then_leave(bootstrap: str, group: str, topic: str, partitions: int) -> None:
    c = consumer(bootstrap, group)
    c.subscribe([topic])
    poll_until([c], assigned([c], partitions), what=f"{group}: assigned")
    commit(c, topic, dict.fromkeys(range(partitions), 5))
    c.close()


def delete_groups(bootstrap: str, groups: list[str]) -> None:
    a = admin(bootstrap)  # keep the client alive until its futures complete
    for f in a.delete_consumer_groups(groups).values():
        f.result(30)


def delete_offsets(bootstrap: str, group: str, topic: str, partitions: list[int]) -> None:
    """OffsetDelete (KIP-496), through kafka-python's admin client."""
    from kafka import KafkaAdminClient
    from kafka.structs import TopicPartition as KTP

    a = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        result = a.delete_group_offsets(group, [KTP(topic, p) for p in partitions])
        failed = {
            tp: err
            for tp, err in (result.items() if isinstance(result, dict) else [])
            if err and err.__name__ != "NoError"
        }
        assert not failed, failed
    finally:
        a.close()


def transactions(bootstrap: str, group: str, topic: str) -> tuple[list, Consumer]:
    """One committed, one aborted, one left open (its producer is returned, still open)."""
    member = consumer(bootstrap, group)
    member.subscribe([topic])
    poll_until([member], lambda: len(member.assignment()) > 0, what=f"{group}: assigned")
    meta = member.consumer_group_metadata()
    producers = []
    for i, (partition, offset, outcome) in enumerate(((0, 11, "commit"), (1, 22, "abort"), (2, 33, "open"))):
        # the open one must outlive the test's waits (librdkafka's default aborts it after 60 s)
        p = Producer(
            {"bootstrap.servers": bootstrap, "transactional.id": f"{group}-tx-{i}", "transaction.timeout.ms": 600_000}
        )
        p.init_transactions(30)
        p.begin_transaction()
        p.produce(topic, value=b"x", partition=partition)
        p.send_offsets_to_transaction([TopicPartition(topic, partition, offset)], meta, 30)
        if outcome == "commit":
            p.commit_transaction(30)
        elif outcome == "abort":
            p.abort_transaction(30)
        else:
            p.flush(30)
        producers.append(p)
    return producers, member


def kip848_group(bootstrap: str, group: str, topic: str, partitions: int) -> list[Consumer]:
    members = [consumer(bootstrap, group, protocol="consumer", client_id=f"{group}-k{i}") for i in range(2)]
    for m in members:
        m.subscribe([topic])
    poll_until(members, assigned(members, partitions), timeout=90, what=f"{group}: KIP-848 members assigned")
    for i, m in enumerate(members):
        commit(m, topic, {tp.partition: 100 + tp.partition for tp in m.assignment()}, metadata=f"k{i}")
    # let the coordinator settle: members acknowledge their assignment with the next heartbeats
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        for m in members:
            m.poll(POLL_S)
    return members


def wait_settled(bootstrap: str, groups: list[str], clients: list, timeout: float = 60.0) -> None:
    """Poll the live members until no group is rebalancing (classic) or reconciling (KIP-848):
    the broker's in-memory transitional states are not in the log."""
    from tests.broker.compare import list_groups

    consumers = [c for c in clients if isinstance(c, Consumer)]
    settled = {"Stable", "Empty"}
    deadline = time.monotonic() + timeout
    states = {}
    last_message = time.monotonic()
    while time.monotonic() < deadline:
        for c in consumers:
            if c.consume(1000, POLL_S):  # drains what is readable (poll hands out one message)
                last_message = time.monotonic()
        listed = list_groups(bootstrap)
        states = {g: listed[g]["group_state"] for g in groups if g in listed}
        # every live member holds partitions (a generation formed without one of them is
        # about to rebalance again), and auto-committing members have drained what they can
        # read and had their last position committed by librdkafka's background timer: a
        # message handed out by this poll is otherwise committed while the log is copied
        quiet = time.monotonic() - last_message >= QUIET_S
        if quiet and all(s in settled for s in states.values()) and all(c.assignment() for c in consumers):
            return
    raise AssertionError(f"groups did not settle: {states}")


def run_scenarios(b: str, prefix: str, kip848: bool) -> tuple[list[str], list]:
    """Every scenario of the broker tests on one broker; returns the group ids and the clients
    still open (members that keep their groups Stable, the open transaction's producer)."""
    topic, small = f"{prefix}-orders", f"{prefix}-events"
    create_topic(b, topic, 6)
    create_topic(b, small, 3)
    keep = []
    groups = []
    g = f"{prefix}-classic"
    keep += classic_group_with_rebalances(b, g, topic)
    groups.append(g)
    g = f"{prefix}-static"
    keep += static_members_auto_commit(b, g, small)
    groups.append(g)
    g = f"{prefix}-standalone"
    standalone_commit(b, g, topic, {0: 7, 3: 9}, metadata="by-hand")
    groups.append(g)
    g = f"{prefix}-emptied"
    group_then_leave(b, g, small, 3)
    groups.append(g)
    g = f"{prefix}-deleted"
    group_then_leave(b, g, small, 3)
    delete_groups(b, [g])
    groups.append(g)
    g = f"{prefix}-offset-delete"
    standalone_commit(b, g, topic, {0: 1, 1: 2, 2: 3})
    delete_offsets(b, g, topic, [1])
    groups.append(g)
    g = f"{prefix}-txn"
    producers, member = transactions(b, g, small)
    keep += [member]
    groups.append(g)
    g = f"{prefix}-grüße-😀"
    standalone_commit(b, g, small, {1: 42})
    groups.append(g)
    if kip848:
        g = f"{prefix}-kip848"
        keep += kip848_group(b, g, topic, 6)
        groups.append(g)
    wait_settled(b, groups, keep)
    return groups, keep + producers


def close_clients(clients) -> None:
    """Close consumers; producers (which have no close()) are left to the garbage collector."""
    for c in clients:
        if isinstance(c, Consumer):
            try:
                c.close()
            except KafkaException:
                pass
