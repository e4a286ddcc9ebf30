"""Busy-shaped assignment problems: what the assignment audit recomputes for a busy cluster's
classic groups, for the tests and the measurement of lib.assignors.fast.

A problem is (assignor, partitions per topic, subscriptions in the record's member order), as
lib.assignors.assign takes it. The assignors in a busy log's proportions (range 37%,
cooperative-sticky 35%, roundrobin 15%, sticky 13%); groups of 1-20 members, 1-5 topics of up to
64 partitions; each subscription as that assignor's Java client sends it: the previous
generation's partitions (owned partitions and generation, StickyAssignor's user data v1, a few
v0), after what makes a group rebalance: a member joining or leaving, a static member coming
back with a new member id, partitions added, a member of an older generation, a partition
claimed by two members, a rolling deploy that subscribes to one more topic. A few member ids
are not ASCII. Deterministic for a given seed.
"""

from __future__ import annotations

import random
import struct
import uuid

from lib.assignors import Subscription, TopicPartition, encode_sticky_user_data

ASSIGNOR_SHARES = {"range": 0.37, "cooperative-sticky": 0.35, "roundrobin": 0.15, "sticky": 0.13}
_PARTITION_COUNTS = (1, 2, 3, 4, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64)
_TOPIC_WORDS = ("orders", "payments", "clicks", "audit", "inventory", "users", "events", "metrics", "shipments")
_CLIENT_WORDS = ("consumer", "billing", "search-indexer", "fraud", "etl", "notifier")
_NON_ASCII_CLIENTS = ("zählwerk", "消费者", "app-😀", "ñandú", "κατανάλωση")
_EVENTS = ("steady", "joined", "left", "static-restart", "partitions-added", "stale-member", "claimed-twice", "deploy")
_EVENT_WEIGHTS = (40, 20, 15, 5, 5, 6, 4, 5)


def _member_id(rng: random.Random, client: str, n: int) -> str:
    return f"{client}-{n}-{uuid.UUID(int=rng.getrandbits(128), version=4)}"


def _deal(rng: random.Random, partitions: list[TopicPartition], holders: list[str]) -> dict[str, list]:
    """A balanced previous assignment, as a sticky assignor leaves one."""
    held: dict[str, list[TopicPartition]] = {h: [] for h in holders}
    shuffled = partitions[:]
    rng.shuffle(shuffled)
    for i, tp in enumerate(shuffled):
        held[holders[i % len(holders)]].append(tp)
    return held


def busy_problem(rng: random.Random) -> tuple[str, dict[str, int], list[Subscription]]:
    assignor = rng.choices(list(ASSIGNOR_SHARES), weights=list(ASSIGNOR_SHARES.values()))[0]
    group = f"{rng.choice(_TOPIC_WORDS)}-{rng.randrange(1000)}"
    topics = [f"{word}.{group}" for word in rng.sample(_TOPIC_WORDS, rng.choice((1, 1, 1, 2, 2, 3, 4, 5)))]
    counts = {t: rng.choice(_PARTITION_COUNTS) for t in topics}
    size = min(20, max(1, int(rng.expovariate(1 / 5)) + 1))
    client = rng.choice(_NON_ASCII_CLIENTS) if rng.random() < 0.03 else f"{rng.choice(_CLIENT_WORDS)}-{group}"
    static = rng.random() < 0.15
    members = [_member_id(rng, client, n) for n in range(size)]
    instances = {m: f"{group}-instance-{n}" if static else None for n, m in enumerate(members)}
    event = rng.choices(_EVENTS, weights=_EVENT_WEIGHTS)[0]
    generation = rng.randint(1, 5000)

    # the previous generation's members and what they held
    holders = list(members)
    if event == "joined" and size > 1:
        holders.remove(rng.choice(members))
    elif event == "left":
        holders.append(_member_id(rng, client, size))
    previous_counts = dict(counts)
    if event == "partitions-added":
        grown = rng.choice(topics)
        previous_counts[grown] = max(1, counts[grown] // 2)
    held = _deal(rng, [(t, p) for t, n in previous_counts.items() for p in range(n)], holders)
    member_generation = dict.fromkeys(members, generation - 1)
    if event == "joined":
        for m in members:
            if m not in holders:
                member_generation[m] = -1
    elif event == "static-restart":
        restarted = rng.choice(members)
        members[members.index(restarted)] = renamed = _member_id(rng, client, size + 1)
        instances[renamed] = instances.pop(restarted)
        held[renamed], member_generation[renamed] = [], -1  # a new process: it owns nothing yet
    elif event == "stale-member" and size > 1:
        stale = rng.choice(members)
        member_generation[stale] = generation - 2
        other = rng.choice([m for m in members if m != stale])
        held[stale] = held[stale] + held[other][: len(held[other]) // 2]
    elif event == "claimed-twice" and size > 1:
        a, b = rng.sample(members, 2)
        if held[a]:
            held[b] = held[b] + [rng.choice(held[a])]

    subscriptions = []
    extra_topic = f"new.{group}" if event == "deploy" else None
    if extra_topic is not None:
        counts[extra_topic] = rng.choice(_PARTITION_COUNTS)
    deployed = set(rng.sample(members, rng.randint(1, size))) if extra_topic else set()
    for m in members:
        subscribed = tuple(topics) + ((extra_topic,) if m in deployed and extra_topic else ())
        owned = tuple(held.get(m, ()))
        gen = member_generation[m]
        if assignor == "sticky":
            # eager: owned partitions were revoked before the join; the user data carries them
            v0 = rng.random() < 0.05
            user_data = encode_sticky_user_data(owned, None if v0 else gen) if owned or gen >= 0 else None
            sub = Subscription(m, subscribed, instances[m], (), gen if gen >= 0 else None, None, user_data)
        elif assignor == "cooperative-sticky":
            v1 = rng.random() < 0.1  # an older client: the generation only in the user data
            user_data = struct.pack(">i", gen if v1 else -1)
            sub = Subscription(m, subscribed, instances[m], owned, None if v1 or gen < 0 else gen, None, user_data)
        else:
            sub = Subscription(m, subscribed, instances[m], (), gen if gen >= 0 else None)
        subscriptions.append(sub)
    return assignor, counts, subscriptions


def busy_problems(count: int, seed: int = 1) -> list[tuple[str, dict[str, int], list[Subscription]]]:
    rng = random.Random(seed)
    return [busy_problem(rng) for _ in range(count)]
