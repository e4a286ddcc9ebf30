"""A benchmark log dir that looks like a busy cluster's: the 50 `__consumer_offsets-<P>`
partitions and, beside them, the consumed topics' own partitions (`<topic>-<partition>/`), on one
clock. Deterministic for a seed.

The offsets partitions hold today's mix (lib.testdata.generate: offset commits v3/v4 batched per
request, ~2% transactional with COMMIT and ABORT markers, ~1% tombstones, ~10% of batches
compressed) plus what a busy cluster's group coordinators write when groups rebalance:

- classic consumer groups (~5% of the records are GroupMetadata): 1-20 members subscribing to
  1-5 topics (up to 64 partitions), consumer-protocol subscriptions v0-v3, every generation's
  assignment computed by the group's own assignor with `lib.assignors.assign` (range,
  roundrobin, sticky with its user data, cooperative-sticky with owned partitions and its
  two-step rebalance), members listed in the coordinator's HashMap order, joins, leaves,
  rolling restarts, static members rejoining in the same generation, groups going Empty and
  being deleted; GroupMetadataValue v3, v2 on a few partitions led by an old broker early on;
- KIP-848 consumer groups: member metadata, group epoch, partition metadata (before the 4.1
  upgrade) or the metadata hash (after), target assignment, each member's reconciliation
  (revoking, unreleased, stable) in its own batch, epochs increasing;
- commits by the members of the partitions they own, of offsets the partition held at that
  moment (the consumer's processing delay behind its end); some groups fall ever further
  behind, some stop.

The consumed topics (thousands of partitions at 10M records, 3 records per offsets record by
default) are written from template batches (topicbuilder.write_bulk_partition) whose
timestamps follow the same clock, so no commit is beyond its partition's end offset then.

    python -m lib.testdata.busy --records 10000000 --out bench-data/busy --json busy.json

Offsets partitions and topic chunks are independent tasks (`workers` processes); the bytes do
not depend on how many.
"""

from __future__ import annotations

import argparse
import base64
import bisect
import functools
import heapq
import itertools
import json
import multiprocessing
import os
import random
import struct
import sys
import time
import uuid
import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from lib.assignors import Subscription, assign, encode_sticky_user_data
from lib.assignors.javautil import JavaHashMap, string_hash
from lib.codec.compression import CODEC_NAMES
from lib.codec.serde import CoordinatorKey, encode_key, encode_value
from lib.codec.writer import encode_control_batch
from lib.replay.partitioning import partition_for
from lib.testdata import fastbytes
from lib.testdata.logbuilder import PartitionLogBuilder, group_key, offset_commit_key
from lib.testdata.topicbuilder import (
    BULK_SIZES,
    BULK_SPREAD_MS,
    BULK_WEIGHTS,
    CODEC_IDS,
    assign_epoch,
    bulk_payloads,
    compress_payload,
    frame_batch,
    topic_id_for,
    write_bulk_partition,
    write_checkpoints,
    write_partition_files,
)
from schemas.records import RecordType

T0 = 1_760_000_000_000
# Bumped whenever the bytes written change, so cached benchmark logs are made anew.
BUSY_GENERATOR_VERSION = 1
SEC, MIN, HOUR = 1000, 60_000, 3_600_000
OFFSETS_TOPIC = "__consumer_offsets"
DEFAULT_SPAN_MS = 6 * HOUR
CONSUMED_PARTITIONS_PER_RECORD = 7_680 / 10_000_000  # >= 7,500 consumed partitions at 10M records
TOPIC_RECORDS_PER_RECORD = 3
TOPIC_LEAD_MS = HOUR  # the topics hold data from before the offsets log's first record
# shares of the offsets records; offset commits are the rest
GROUP_METADATA_SHARE = 0.05
CONSUMER_GROUP_SHARE = 0.015
TRANSACTIONAL_SHARE = 0.02  # TxnOffsetCommit records and their markers
TOMBSTONE_SHARE = 0.01
COMPRESSED_SHARE = 0.1  # of the coordinator's data batches
ABORT_SHARE = 0.15  # of the transactions
MAX_GROUP_PARTITIONS = 64
MAX_MEMBERS = 20
MEMBER_COUNT_WEIGHTS = [k**-1.2 for k in range(1, MAX_MEMBERS + 1)]  # most groups small, a few of 20
ASSIGNORS = {"range": 0.4, "cooperative-sticky": 0.3, "sticky": 0.15, "roundrobin": 0.15}
# the consumer-protocol version a client writes: v0 up to 2.3, v1 2.4-3.3, v3 from 3.4 (Java);
# v2 here stands for another client (librdkafka-like: no leader epochs in commits)
CLIENT_VERSIONS = {0: 0.04, 1: 0.2, 2: 0.06, 3: 0.7}
PARTITION_COUNTS = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 30, 32, 40, 48, 50, 60, 64)
PARTITION_COUNT_WEIGHTS = (6, 6, 8, 6, 3, 8, 7, 5, 9, 6, 4, 5, 3, 4, 2, 2, 2, 1, 1)
TOPIC_CODECS = {"none": 0.45, "lz4": 0.2, "zstd": 0.15, "snappy": 0.12, "gzip": 0.08}
RACKS = ("use1-az1", "use1-az2", "use1-az4")
DOMAINS = (
    "orders payments inventory users clicks search billing shipping fraud ads catalog notifications "
    "metrics audit sessions reviews pricing ledger recs iot"
).split()
ENTITIES = "events updates commands snapshots changelog raw enriched dlq retry audit".split()
ROLES = "indexer sink processor aggregator enricher router archiver monitor loader exporter".split()
# KIP-848 member states (ConsumerGroupCurrentMemberAssignmentValue.State)
STABLE, UNREVOKED_PARTITIONS, UNRELEASED_PARTITIONS = 0, 1, 2
# the KIP-848 records written here
CG_METADATA = RecordType.CONSUMER_GROUP_METADATA
CG_PARTITION_METADATA = RecordType.CONSUMER_GROUP_PARTITION_METADATA
CG_MEMBER = RecordType.CONSUMER_GROUP_MEMBER_METADATA
CG_TARGET = RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA
CG_TARGET_MEMBER = RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER
CG_CURRENT = RecordType.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT

SHARES = {
    "group_metadata": GROUP_METADATA_SHARE,
    "consumer_group": CONSUMER_GROUP_SHARE,
    "transactional": TRANSACTIONAL_SHARE,
    "tombstone": TOMBSTONE_SHARE,
}
SHARE_NAMES = ("commit", *SHARES)
# what a record with a null value counts as, by the share of its batch
TOMBSTONE_KINDS = {
    "tombstone": "offset_tombstone",
    "group_metadata": "group_metadata_tombstone",
    "consumer_group": "consumer_group_tombstone",
}

TopicPartition = tuple[str, int]
_INT32 = struct.Struct(">i")


# --- the plan: topics, their timelines, groups ---------------------------------------------------


@dataclass(slots=True)
class Topic:
    name: str
    partitions: int
    topic_id: str
    codec: int
    weight: float  # its share of the topic records, relative
    id_bytes: bytes = b""


@dataclass(slots=True)
class Timeline:
    """One consumed partition's batches (records, template variant, base timestamp) and its end
    offset over time: `ends[i]` from `visible[i]` (batch i's max timestamp) on."""

    batches: list[tuple[int, int, int]]
    visible: list[int]
    ends: list[int]

    def end_at(self, t: int) -> int:
        i = bisect.bisect_right(self.visible, t) - 1
        return self.ends[i] if i >= 0 else 0


@dataclass(slots=True)
class GroupPlan:
    name: str
    kind: str  # classic | consumer (KIP-848) | simple (assign() and commits, no membership)
    offsets_partition: int
    topics: tuple[str, ...] = ()
    canary_topic: str | None = None  # some members subscribe to it too (a rollout)
    assignor: str | None = None  # classic: the protocol; consumer: the server assignor
    max_members: int = 1
    client_version: int = 3
    static: bool = False
    eos: bool = False  # commits with TxnOffsetCommit
    delay_ms: int = 1000  # processing delay behind the partitions' end
    slow_since: int | None = None  # from then on it consumes at `slow_factor` of real time
    slow_factor: float = 1.0
    start_at: int = 0
    stop_at: int | None = None
    delete_after_stop: bool = False
    from_latest: bool = False
    commit_weight: float = 1.0
    churn: float = 1.0
    commit_all: bool = True  # Java's auto commit: every owned partition, changed or not
    metadata: bytes = b""
    topic_ids_in_commits: bool = False  # an OffsetCommit v10 client (4.1+ brokers store them)
    simple_partitions: tuple[TopicPartition, ...] = ()


@dataclass
class BusyPlan:
    seed: int
    start_ts: int
    span_ms: int
    offsets_partitions: int
    budget: int  # records per offsets partition that holds groups
    upgrades: tuple[int, int]  # IBP 2.2 partitions move to GroupMetadataValue v3; 4.0 -> 4.1
    old_era_partitions: frozenset[int]
    topics: dict[str, Topic]
    timelines: dict[TopicPartition, Timeline]
    groups: list[GroupPlan]
    segment_bytes: int
    topic_segment_bytes: int

    @property
    def end_ts(self) -> int:
        return self.start_ts + self.span_ms


def _seeded(seed: int, *what) -> random.Random:
    return random.Random(":".join(map(str, ("busy", seed, *what))))


def _weighted(rng: random.Random, weights: dict):
    return rng.choices(list(weights), list(weights.values()))[0]


def plan_topics(rng: random.Random, consumed_partitions: int, seed: int) -> dict[str, Topic]:
    """Topics of 1-64 partitions until they hold `consumed_partitions` in all."""
    topics: dict[str, Topic] = {}
    total = 0
    while total < consumed_partitions:
        base = f"{rng.choice(DOMAINS)}.{rng.choice(ENTITIES)}"
        name, n = base, 1
        while name in topics:
            n += 1
            name = f"{base}.{n}"
        count = rng.choices(PARTITION_COUNTS, PARTITION_COUNT_WEIGHTS)[0]
        topic_id = topic_id_for(name, seed)
        topics[name] = Topic(
            name,
            count,
            topic_id,
            CODEC_IDS[_weighted(rng, TOPIC_CODECS)],
            rng.lognormvariate(0, 1.3),
            fastbytes.topic_id_bytes(topic_id),
        )
        total += count
    return topics


def plan_timelines(
    topics: dict[str, Topic], topic_records: int, start: int, end: int, seed: int
) -> dict[TopicPartition, Timeline]:
    """Each partition's batches spread over [start, end): its share of `topic_records` by its
    topic's weight, in template batches no larger than an eighth of it (a quiet partition
    writes small batches), none overlapping in time (offsets and timestamps grow together)."""
    total_weight = sum(t.weight * t.partitions for t in topics.values())
    out: dict[TopicPartition, Timeline] = {}
    for t in topics.values():
        rng = _seeded(seed, "timeline", t.name)
        for p in range(t.partitions):
            wanted = max(1, round(topic_records * t.weight / total_weight * rng.uniform(0.7, 1.3)))
            sizes_allowed = [s for s in BULK_SIZES if s <= max(1, wanted // 8)]
            weights = BULK_WEIGHTS[: len(sizes_allowed)]
            sizes: list[int] = []
            written = 0
            while written < wanted:
                size = rng.choices(sizes_allowed, weights)[0]
                sizes.append(size)
                written += size
            starts = sorted(rng.randrange(start, end) for _ in sizes)
            batches, visible, ends = [], [], []
            last_max, offset = start - 1, 0
            for size, ts in zip(sizes, starts):
                ts = max(ts, last_max + 1)
                last_max = ts + (size - 1) * BULK_SPREAD_MS
                offset += size
                batches.append((size, rng.randrange(4), ts))
                visible.append(last_max)
                ends.append(offset)
            out[(t.name, p)] = Timeline(batches, visible, ends)
    return out


def _group_names(rng: random.Random, count: int) -> list[str]:
    return [f"{rng.choice(DOMAINS)}-{rng.choice(ROLES)}-{i:05d}" for i in range(count)]


def plan_groups(
    rng: random.Random,
    count: int,
    offsets_partitions: int,
    topics: dict[str, Topic],
    start_ts: int,
    span_ms: int,
    upgrades: tuple[int, int],
    old_era: frozenset[int],
) -> list[GroupPlan]:
    """The groups: kinds by quota in each offsets partition (about 10% KIP-848, 5% simple, 5% of
    the classic ones exactly-once), their topics (every topic consumed by some group), and how
    each behaves over the span."""
    groups = [GroupPlan(n, "classic", partition_for(n, offsets_partitions)) for n in _group_names(rng, count)]
    by_partition: dict[int, list[GroupPlan]] = {}
    for g in groups:
        by_partition.setdefault(g.offsets_partition, []).append(g)
    for _, members in sorted(by_partition.items()):
        order = list(members)
        rng.shuffle(order)
        n = len(order)
        quotas = [
            ("consumer", max(1 if n >= 3 else 0, round(0.1 * n))),
            ("simple", max(1 if n >= 4 else 0, round(0.05 * n))),
            ("eos", max(1 if n >= 5 else 0, round(0.05 * n))),
        ]
        i = 0
        for kind, quota in quotas:
            for g in order[i : i + quota]:
                g.kind = "classic" if kind == "eos" else kind
                g.eos = kind == "eos"
            i += quota
    _plan_subscriptions(rng, groups, topics)
    end = start_ts + span_ms
    for g in groups:
        g.start_at = start_ts + rng.randrange(5 * MIN) if rng.random() < 0.85 else rng.randrange(start_ts, end)
        if g.kind == "consumer" and g.offsets_partition in old_era:
            g.start_at = max(g.start_at, upgrades[0] + rng.randrange(10 * MIN))  # KIP-848 needs a 4.x broker
        earliest_stop = max(g.start_at + 10 * MIN, start_ts + span_ms // 7)
        if rng.random() < 0.12 and earliest_stop < end and g.kind != "simple":
            g.stop_at = rng.randrange(earliest_stop, end)
            g.delete_after_stop = rng.random() < 0.4
        g.max_members = rng.choices(range(1, MAX_MEMBERS + 1), MEMBER_COUNT_WEIGHTS)[0]
        g.client_version = _weighted(rng, CLIENT_VERSIONS)
        g.delay_ms = rng.randrange(200, 5000)
        if rng.random() < 0.1:  # falls behind: consumes at a fraction of the rate from then on
            g.slow_since = rng.randrange(g.start_at, end)
            g.slow_factor = rng.uniform(0.2, 0.8)
        g.from_latest = rng.random() < 0.3
        g.commit_weight = rng.lognormvariate(0, 0.8)
        g.churn = rng.lognormvariate(0, 1)
        g.commit_all = rng.random() < 0.7
        g.metadata = b"" if rng.random() < 0.9 else f"{g.name}@host-{rng.randrange(100)}".encode()
        g.topic_ids_in_commits = rng.random() < 0.6
        if g.kind == "classic":
            g.assignor = (
                _weighted(rng, {"range": 0.5, "cooperative-sticky": 0.5}) if g.eos else _weighted(rng, ASSIGNORS)
            )
            if g.assignor == "cooperative-sticky" and g.client_version == 0:
                g.client_version = 1  # cooperative rebalancing came with subscription v1 (2.4)
            g.static = not g.eos and g.offsets_partition not in old_era and rng.random() < 0.15
        elif g.kind == "consumer":
            g.assignor = _weighted(rng, {None: 0.6, "uniform": 0.2, "range": 0.2})
    return groups


def _plan_subscriptions(rng: random.Random, groups: list[GroupPlan], topics: dict[str, Topic]) -> None:
    """1-5 topics of at most 64 partitions in all per group, every topic to some group first
    (topics no group has room for are dropped), then popular topics more often; simple groups
    commit a few partitions of theirs; some classic groups roll a canary topic out."""
    sizes = {name: t.partitions for name, t in topics.items()}
    wanted = {g.name: rng.choices((1, 2, 3, 4, 5), (35, 30, 17, 10, 8))[0] for g in groups}
    chosen: dict[str, list[str]] = {g.name: [] for g in groups}
    room = dict.fromkeys(chosen, MAX_GROUP_PARTITIONS)
    names = sorted(topics, key=lambda n: -sizes[n])
    order = [g.name for g in groups]
    rng.shuffle(order)
    k = 0
    for name in names:  # every topic to a group with room for it, wanted topics first
        for limit in (wanted, dict.fromkeys(chosen, 5)):
            fit = None
            for j in range(len(order)):
                candidate = order[(k + j) % len(order)]
                if len(chosen[candidate]) < limit[candidate] and room[candidate] >= sizes[name]:
                    fit = candidate
                    k = (k + j + 1) % len(order)
                    break
            if fit is not None:
                chosen[fit].append(name)
                room[fit] -= sizes[name]
                break
        else:
            del topics[name]
    popular = sorted(topics)
    weights = [(i + 1) ** -0.8 for i in range(len(popular))]
    rng.shuffle(popular)
    for group_name in order:
        for _ in range(20):
            if len(chosen[group_name]) >= wanted[group_name]:
                break
            name = rng.choices(popular, weights)[0]
            if name not in chosen[group_name] and sizes[name] <= room[group_name]:
                chosen[group_name].append(name)
                room[group_name] -= sizes[name]
        if not chosen[group_name]:
            name = min(popular, key=lambda n: (sizes[n], n))
            chosen[group_name].append(name)
            room[group_name] -= sizes[name]
    for g in groups:
        g.topics = tuple(sorted(chosen[g.name]))
        if g.kind == "simple":
            tps = [(t, p) for t in g.topics for p in range(sizes[t])]
            g.simple_partitions = tuple(sorted(rng.sample(tps, min(len(tps), rng.randrange(2, 13)))))
        elif g.kind == "classic" and rng.random() < 0.04:
            extra = [n for n in popular if n not in g.topics and sizes[n] <= room[g.name]]
            g.canary_topic = rng.choice(sorted(extra)) if extra else None


def build_plan(
    records: int,
    *,
    partitions: int,
    groups: int,
    seed: int,
    consumed_partitions: int | None,
    topic_records: int | None,
    span_ms: int,
    start_ts: int,
    segment_bytes: int,
    topic_segment_bytes: int,
) -> BusyPlan:
    rng = _seeded(seed, "plan")
    consumed = consumed_partitions or max(10, round(records * CONSUMED_PARTITIONS_PER_RECORD))
    topics = plan_topics(rng, consumed, seed)
    upgrades = (start_ts + span_ms // 5, start_ts + span_ms // 2)
    old_era = frozenset(range(partitions)[3::10])  # one partition in ten led by an old broker at first
    group_plans = plan_groups(rng, groups, partitions, topics, start_ts, span_ms, upgrades, old_era)
    timelines = plan_timelines(
        topics, topic_records or TOPIC_RECORDS_PER_RECORD * records, start_ts - TOPIC_LEAD_MS, start_ts + span_ms, seed
    )
    used = {g.offsets_partition for g in group_plans}
    return BusyPlan(
        seed,
        start_ts,
        span_ms,
        partitions,
        max(1, records // max(1, len(used))),
        upgrades,
        old_era,
        topics,
        timelines,
        group_plans,
        segment_bytes,
        topic_segment_bytes,
    )


# --- group state -----------------------------------------------------------------------------


@dataclass(slots=True, eq=False)
class Member:
    member_id: str
    client_id: str
    host: str
    version: int  # consumer-protocol version its client writes (classic); 0 for KIP-848
    instance_id: str | None = None
    rack: str | None = None
    session_timeout: int = 45000
    rebalance_timeout: int = 300000
    topics: tuple[str, ...] = ()
    generation: int = -1  # classic: the last generation it took part in; KIP-848: member epoch
    previous_epoch: int = 0
    assigned: tuple[TopicPartition, ...] = ()  # what it owns now (and commits)
    has_assignment: bool = False  # the sticky assignor's memberAssignment is set
    producer_id: int = -1  # exactly-once groups: its transactional producer
    producer_epoch: int = 0
    txn_open: bool = False
    heads: dict = field(default_factory=dict)  # GroupMetadataValue version -> its packed head

    @property
    def java(self) -> bool:
        return self.version != 2


@dataclass(eq=False)
class GroupState:
    plan: GroupPlan
    key: bytes
    members: JavaHashMap[str, Member] = field(default_factory=lambda: JavaHashMap(string_hash))
    order: list[Member] = field(default_factory=list)  # the members in that HashMap's order
    leader: str | None = None
    generation: int = 0  # classic generation / KIP-848 group epoch
    started: bool = False
    stopped: bool = False
    deleted: bool = False
    busy: bool = False  # a rebalance is still under way (deferred steps)
    position: dict = field(default_factory=dict)  # (group, topic, partition) -> the last offset in force
    commit_targets: dict = field(default_factory=dict)  # tp -> OffsetsPartition._targets' tuple
    record_keys: dict = field(default_factory=dict)  # KIP-848: (record type, member id) -> key
    member_count: int = 0  # members ever made (client ids, instance ids)
    open_generation: tuple[str, bool] | None = None  # classic: (assignor, assignment matches)
    target: dict = field(default_factory=dict)  # KIP-848: member id -> target partitions
    known_topics: tuple = ()  # KIP-848: the subscribed topics the partition metadata describes
    live: set = field(default_factory=set)  # its keys in OffsetsPartition.live

    @property
    def active(self) -> bool:
        return self.started and not self.stopped

    @property
    def assignor(self) -> str:
        """A classic group's protocol (its assignor's name)."""
        assert self.plan.assignor is not None
        return self.plan.assignor

    @property
    def committers(self) -> list[Member]:
        return [m for m in self.order if m.assigned and not m.txn_open]

    def put(self, member: Member) -> None:
        self.members.put(member.member_id, member)
        self.order = self.members.values()

    def reload(self) -> None:
        """A new coordinator loads the group from its record (ClassicGroup.fromRecord): the
        members go into a new HashMap in the record's order, which may iterate differently."""
        members, self.members = self.order, JavaHashMap(string_hash)
        for member in members:
            self.members.put(member.member_id, member)
        self.order = self.members.values()

    def remove(self, member_id: str) -> Member:
        member = self.members.remove(member_id)
        assert member is not None
        self.order = self.members.values()
        return member


@functools.lru_cache(maxsize=8192)
def _assign_cached(assignor: str, counts: tuple, subscriptions: tuple[Subscription, ...]) -> dict:
    """assign(), remembered: a generation with the same members and subscriptions as an earlier
    one (range and roundrobin read nothing else) gets the same result."""
    return assign(assignor, dict(counts), list(subscriptions))


def assignment_of(assignor: str, counts: dict[str, int], subscriptions: list[Subscription]) -> dict:
    if assignor in ("range", "roundrobin"):
        subscriptions = [
            Subscription(s.member_id, s.topics, s.group_instance_id, rack_id=s.rack_id) for s in subscriptions
        ]
    return _assign_cached(assignor, tuple(sorted(counts.items())), tuple(subscriptions))


def by_topic(tps) -> list[tuple[str, list[int]]]:
    out: dict[str, list[int]] = {}
    for t, p in sorted(tps):
        out.setdefault(t, []).append(p)
    return list(out.items())


# --- one offsets partition -----------------------------------------------------------------------


class OffsetsPartition:
    """One __consumer_offsets partition: its groups' lives on the partition's clock, written as
    the coordinator writes them, until the partition holds its share of the records. Every step
    writes one request's records; which kind comes next is drawn towards the target shares."""

    def __init__(self, plan: BusyPlan, partition: int):
        self.plan = plan
        self.p = partition
        self.rng = _seeded(plan.seed, "offsets", partition)
        self.log = PartitionLogBuilder(partition)
        self.epochs: list[tuple[int, int]] = [(0, 0)]
        self.upgrades = list(plan.upgrades)
        self.clock = plan.start_ts
        self.deferred: list = []  # heap of (due, sequence, what, callable)
        self.sequence = 0
        self.stats: dict[str, dict] = {}
        self.kinds: dict[str, int] = dict.fromkeys(SHARE_NAMES, 0)  # records written per share
        self.written = 0
        self.effective_commits = 0
        self._committing: tuple[list[GroupState], list[float]] | None = None
        self.live: dict[tuple, tuple[int, int]] = {}  # (group, topic, partition) -> (offset, log offset)
        self.pending: dict[int, dict[tuple, tuple[int, int]]] = {}  # producer id -> its open offsets
        self.next_producer_id = 1_000_000 + partition * 100_000
        self.coordinator_epoch = partition % 7
        self.groups = [GroupState(g, group_key(g.name)) for g in plan.groups if g.offsets_partition == partition]
        self.consumed = {name: (t.partitions, t.id_bytes) for name, t in plan.topics.items()}
        for g in self.groups:
            self._defer(g.plan.start_at, "start", functools.partial(self._start, g))
            if g.plan.stop_at is not None:
                self._defer(g.plan.stop_at, "stop", functools.partial(self._stop, g))

    # -- bookkeeping -------------------------------------------------------------------------
    def count(self, name: str, key, n: int = 1) -> None:
        counts = self.stats.get(name)
        if counts is None:
            counts = self.stats[name] = {}
        counts[key] = counts.get(key, 0) + n

    def _defer(self, due: int, what: str, action: Callable[[], None]) -> None:
        self.sequence += 1
        heapq.heappush(self.deferred, (due, self.sequence, what, action))

    def gm_version(self, ts: int) -> int:
        """GroupMetadataValue v2 from an IBP 2.2 broker on a few partitions early on, v3 after."""
        return 2 if self.p in self.plan.old_era_partitions and ts < self.plan.upgrades[0] else 3

    def commit_version(self, ts: int) -> int:
        """OffsetCommitValue v3 up to Kafka 4.0, v4 from the 4.1 upgrade on."""
        return 3 if ts < self.plan.upgrades[1] else 4

    # -- writing batches ----------------------------------------------------------------------
    def _roll_for(self, size: int) -> None:
        current = len(self.log.segments[-1][1])
        if current and current + size > self.plan.segment_bytes:
            self.log.roll()
        while self.upgrades and self.clock >= self.upgrades[0]:
            # a rolling upgrade moves the partition's leadership away and back
            self.upgrades.pop(0)
            self.log.leader_epoch += 2
            assign_epoch(self.epochs, self.log.leader_epoch, self.log.next_offset)
            for g in self.groups:
                g.reload()

    def append(
        self,
        records: Sequence[tuple[bytes, bytes | None]],
        ts: int,
        share: str | list[str],
        *,
        producer: Member | None = None,
    ) -> int:
        """One batch of (key, value) records at `ts`, as the coordinator writes one request's
        records (producer id -1 and base sequence 0 of its own, or the transactional producer's);
        returns its base offset. `share`: what the records count as (tombstones apart), or one
        such per record."""
        self.clock = max(self.clock, ts)
        base = self.log.next_offset
        codec = self.rng.randrange(1, 5) if self.rng.random() < COMPRESSED_SHARE else 0
        data = frame_batch(
            base,
            compress_payload(codec, fastbytes.records(records)),
            count=len(records),
            last_offset_delta=len(records) - 1,
            base_ts=ts,
            max_ts=ts,
            compression=codec,
            producer_id=producer.producer_id if producer else -1,
            producer_epoch=producer.producer_epoch if producer else -1,
            base_sequence=0,
            transactional=producer is not None,
            leader_epoch=self.log.leader_epoch,
        )
        self._roll_for(len(data))
        self.log.raw(data, len(records))
        if codec:
            self.count("compressed_batches", CODEC_NAMES[codec])
        self.count("batches", "data")
        if isinstance(share, str):
            tombstones = sum(1 for _, v in records if v is None)
            self.kinds[share] += len(records)
            if tombstones:
                self.count("record_kinds", TOMBSTONE_KINDS[share], tombstones)
            if tombstones < len(records):
                self.count("record_kinds", share, len(records) - tombstones)
        else:
            for (_, value), kind in zip(records, share):
                self.kinds[kind] += 1
                self.count("record_kinds", kind if value is not None else TOMBSTONE_KINDS[kind])
        self.written += len(records)
        return base

    def marker(self, member: Member, commit: bool, ts: int) -> None:
        self.clock = max(self.clock, ts)
        data = encode_control_batch(
            self.log.next_offset,
            member.producer_id,
            member.producer_epoch,
            commit,
            ts,
            self.coordinator_epoch,
            self.log.leader_epoch,
        )
        self._roll_for(len(data))
        self.log.raw(data, 1)
        self.count("batches", "control")
        self.count("markers", "commit" if commit else "abort")
        self.kinds["transactional"] += 1
        self.written += 1
        # the replay's rule (spec 4.4): a COMMIT keeps an offset newer than the committed one
        for key, (offset, log_offset) in sorted(self.pending.pop(member.producer_id, {}).items()):
            if commit and (key not in self.live or log_offset > self.live[key][1]):
                group = self._group(key[0])
                self._set_live(group, key, offset, log_offset)
                group.position[key] = offset
        member.txn_open = False

    def _group(self, name: str) -> GroupState:
        return next(g for g in self.groups if g.plan.name == name)

    def _set_live(self, g: GroupState, key: tuple, offset: int, log_offset: int) -> None:
        """An offset commit that took effect (what the replay's group_offsets will hold)."""
        self.live[key] = (offset, log_offset)
        g.live.add(key)
        self.effective_commits += 1

    # -- the loop ---------------------------------------------------------------------------
    def run(self, log_dir: str) -> dict:
        t0 = time.process_time()
        mean_gap = self.plan.span_ms / self.plan.budget  # ms of clock per record
        actions = {
            "group_metadata": self._classic_event,
            "consumer_group": self._consumer_group_event,
            "transactional": self._transactional_commit,
            "tombstone": self._tombstones,
        }
        while self.written < self.plan.budget:
            self._run_deferred(self.clock)
            before = self.written
            if self.rng.random() < 0.5:
                wanted = sorted(
                    ((share * (self.written + 4) - self.kinds[kind], kind) for kind, share in SHARES.items()),
                    reverse=True,
                )
                for deficit, kind in wanted:
                    if deficit > 0 and actions[kind](self.clock):
                        break
            if self.written == before and not self._commit(self.clock):
                if not self.deferred:
                    break  # nobody left to write anything
                self.clock = max(self.clock, self.deferred[0][0])
                continue
            step = self.written - before
            self.clock += max(1, round(self.rng.expovariate(1.0) * mean_gap * step))
        # what is under way completes; what was planned for later never happens
        while self.deferred:
            due, _, what, action = heapq.heappop(self.deferred)
            if what not in ("start", "stop"):
                self.clock = max(self.clock, due)
                action()
        for g in self.groups:
            self._close_generation(g)
        folder = self.log.write(log_dir)
        write_partition_files(folder, topic_id_for(OFFSETS_TOPIC, self.plan.seed), self.epochs)
        self.count("expected", "effective_commits", self.effective_commits)
        self.count("expected", "group_offsets", len(self.live))
        self.count("expected", "committed_offset_sum", sum(o for o, _ in self.live.values()))
        self.count("expected", "pending_transactional_offsets", sum(len(p) for p in self.pending.values()))
        self.count("totals", "records", self.written)
        self.count("totals", "bytes", sum(len(d) for _, d in self.log.segments))
        self.count("totals", "segments", len(self.log.segments))
        self.stats["seconds"] = {"offsets_cpu": time.process_time() - t0}
        return {name: dict(c) for name, c in self.stats.items()}

    def _run_deferred(self, now: int) -> None:
        while self.deferred and self.deferred[0][0] <= now:
            due, _, _, action = heapq.heappop(self.deferred)
            self.clock = max(self.clock, due)
            action()
        self.clock = max(self.clock, now)

    # -- members ------------------------------------------------------------------------------
    def _uuid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def _new_member(self, g: GroupState) -> Member:
        rng, plan = self.rng, g.plan
        g.member_count += 1
        host = f"/10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(2, 255)}"
        if plan.kind == "consumer":  # KIP-848: the client makes a Uuid for itself
            member_id = base64.urlsafe_b64encode(rng.randbytes(16)).decode().rstrip("=")
            return Member(
                member_id,
                f"consumer-{plan.name}-{g.member_count}",
                host,
                0,
                rack=rng.choice(RACKS) if rng.random() < 0.3 else None,
                topics=plan.topics,
            )
        version = plan.client_version
        if rng.random() < 0.2:  # a member on another client version
            version = _weighted(rng, CLIENT_VERSIONS)
            if plan.assignor == "cooperative-sticky":
                version = max(1, version)
        topics = plan.topics
        if plan.canary_topic and rng.random() < 0.3:
            topics = tuple(sorted((*plan.topics, plan.canary_topic)))
        instance_id = f"{plan.name}-{g.member_count}" if plan.static else None
        if version == 2:
            client_id = "rdkafka"
        else:
            client_id = f"consumer-{plan.name}-{g.member_count}"
        member = Member(
            f"{instance_id or client_id}-{self._uuid()}",
            client_id,
            host,
            version,
            instance_id=instance_id,
            rack=rng.choice(RACKS) if version >= 3 and rng.random() < 0.5 else None,
            session_timeout=10000 if version < 2 else 45000,
            rebalance_timeout=rng.choice((300000, 300000, 600000)),
            topics=topics,
        )
        if plan.eos:
            member.producer_id = self.next_producer_id
            self.next_producer_id += 1
        return member

    def _join(self, g: GroupState, member: Member) -> None:
        g.put(member)
        if g.leader is None:
            g.leader = member.member_id

    def _leave(self, g: GroupState, member_id: str) -> Member:
        member = g.remove(member_id)
        if g.leader == member_id:  # ClassicGroup.remove: the first member left leads
            g.leader = g.order[0].member_id if g.order else None
        return member

    # -- classic groups -----------------------------------------------------------------------
    def _subscription(self, g: GroupState, m: Member) -> tuple[Subscription, bytes]:
        """What the member sends in its JoinGroup for the group's protocol, as bytes and as the
        assignor reads them back (Subscription as the audit decodes them)."""
        assignor = g.plan.assignor
        owned: tuple[TopicPartition, ...] = ()
        user_data = None
        if assignor == "cooperative-sticky":
            owned = m.assigned if m.has_assignment else ()  # (sorted, as the assignors return them)
            user_data = _INT32.pack(m.generation)  # CooperativeStickyAssignor's user data: its generation
        elif assignor == "sticky" and m.has_assignment:
            # StickyAssignor's memberAssignment (eager: nothing owned, all revoked at the join)
            user_data = encode_sticky_user_data(sorted(m.assigned), m.generation if m.version >= 1 else None)
        version = m.version
        generation = m.generation
        raw = fastbytes.subscription(version, m.topics, user_data, owned, generation, m.rack)
        sub = Subscription(
            m.member_id,
            m.topics,
            m.instance_id if self.gm_version(self.clock) >= 3 else None,
            owned if version >= 1 else (),
            generation if version >= 2 and generation >= 0 else None,
            m.rack if version >= 3 else None,
            user_data,
        )
        self.count("subscription_versions", version)
        return sub, raw

    def _write_group(
        self, g: GroupState, ts: int, members: list[Member], raws: dict[str, bytes], *, same_generation: bool = False
    ) -> None:
        """The GroupMetadata record the coordinator stores after the leader's SyncGroup: every
        member with the subscription it joined with and the assignment the leader sent, which
        the leader serialized at its own protocol version."""
        version = self.gm_version(ts)
        leader = g.members[g.leader] if g.leader else None
        asg_version = leader.version if leader else 3
        packed = []
        for m in members:
            head = m.heads.get(version)
            if head is None:
                head = m.heads[version] = fastbytes.member_head(
                    version,
                    m.member_id,
                    m.instance_id,
                    m.client_id,
                    m.host,
                    m.rebalance_timeout,
                    m.session_timeout,
                )
            packed.append(fastbytes.member(head, raws[m.member_id], fastbytes.assignment(asg_version, m.assigned)))
        value = fastbytes.group_metadata_value(version, "consumer", g.generation, g.plan.assignor, g.leader, ts, packed)
        self.append([(g.key, value)], ts, "group_metadata")
        self.count("group_metadata_versions", version)
        self.count("group_metadata_records", g.plan.assignor)
        self.count("members_per_group_metadata", len(members))
        if not same_generation:
            self._close_generation(g)

    def _close_generation(self, g: GroupState) -> None:
        """The audit judges a generation by its last record: counted once it is over."""
        if g.open_generation is not None:
            assignor, matches = g.open_generation
            self.count("classic_generations", assignor)
            if matches:
                self.count("classic_generations_matching", assignor)
        g.open_generation = None

    def _rebalance(self, g: GroupState, ts: int) -> None:
        """A generation: the members' subscriptions, the assignor's result, the record; a
        cooperative assignment that took partitions away is followed by the members' rejoin."""
        assignor = g.assignor
        members = g.order
        subs, raws = [], {}
        for m in members:
            sub, raws[m.member_id] = self._subscription(g, m)
            subs.append(sub)
        counts = {t: self.consumed[t][0] for m in members for t in m.topics}
        result = assignment_of(assignor, counts, subs)
        revoked = any(set(m.assigned) - set(result[m.member_id]) for m in members)
        g.generation += 1
        for m in members:
            m.assigned = tuple(result[m.member_id])
        self._write_group(g, ts, members, raws)
        g.open_generation = (assignor, True)
        for m in members:
            m.generation = g.generation
            m.has_assignment = True
        if assignor == "cooperative-sticky" and revoked:
            g.busy = True
            self.count("rebalances", "cooperative_follow_up")

            def follow_up(g=g):
                g.busy = False
                if g.active and len(g.members):
                    self._rebalance(g, self.clock)

            self._defer(ts + self.rng.randrange(100, 800), "rebalance", follow_up)

    def _static_rejoin(self, g: GroupState, ts: int) -> None:
        """A static member restarted: a new member id under its group.instance.id, the same
        generation and assignment (the record now holds the new member's subscription)."""
        old = self.rng.choice(g.order)
        new = self._new_member(g)
        new.instance_id, new.topics = old.instance_id, old.topics
        new.member_id = f"{old.instance_id}-{self._uuid()}"
        new.assigned = old.assigned
        self._leave_keep_leader(g, old, new)
        members = g.order
        subs, raws = [], {}
        for m in members:
            sub, raws[m.member_id] = self._subscription(g, m)
            subs.append(sub)
        self._write_group(g, ts, members, raws, same_generation=True)
        counts = {t: self.consumed[t][0] for m in members for t in m.topics}
        result = assignment_of(g.assignor, counts, subs)
        matches = all(set(result[m.member_id]) == set(m.assigned) for m in members)
        g.open_generation = (g.assignor, matches)
        new.generation, new.has_assignment = g.generation, True  # its SyncGroup returns the assignment
        self.count("rebalances", "static_rejoin")

    def _leave_keep_leader(self, g: GroupState, old: Member, new: Member) -> None:
        was_leader = g.leader == old.member_id
        g.remove(old.member_id)
        g.put(new)
        if was_leader:
            g.leader = new.member_id

    def _start(self, g: GroupState) -> None:
        g.started = True
        self._committing = None
        plan, ts = g.plan, self.clock
        for tp in self._partitions_of(g):
            initial = self.plan.timelines[tp].end_at(plan.start_at - plan.delay_ms) if plan.from_latest else 0
            g.position[(plan.name, *tp)] = initial
        if plan.kind == "simple":
            return
        if plan.kind == "consumer":
            self._consumer_group_change(g, ts, joining=self._initial_members(g))
            return
        if self.gm_version(ts) >= 3:
            # Kafka 4's coordinator stores the group it creates on the first JoinGroup, Empty
            value = fastbytes.group_metadata_value(3, "", 0, None, None, ts, [])
            self.append([(g.key, value)], ts, "group_metadata")
            self.count("group_metadata_records", "new_empty")
        for m in self._initial_members(g):
            self._join(g, m)
        self._rebalance(g, ts + self.rng.randrange(3000, 6000))  # group.initial.rebalance.delay.ms

    def _initial_members(self, g: GroupState) -> list[Member]:
        n = max(1, round(g.plan.max_members * self.rng.uniform(0.5, 1.0)))
        return [self._new_member(g) for _ in range(n)]

    def _partitions_of(self, g: GroupState) -> list[TopicPartition]:
        if g.plan.simple_partitions:
            return list(g.plan.simple_partitions)
        topics = [*g.plan.topics, *([g.plan.canary_topic] if g.plan.canary_topic else [])]
        return [(t, p) for t in topics for p in range(self.consumed[t][0])]

    def _stop(self, g: GroupState) -> None:
        """Every member leaves: an Empty classic group (a new generation without members), or
        a KIP-848 group's members fenced; no commit after."""
        if not g.active:
            return
        g.stopped = True
        self._committing = None
        ts = self.clock
        if g.plan.kind == "consumer":
            self._consumer_group_change(g, ts, leaving=list(g.order))
        elif g.plan.kind == "classic" and len(g.members):  # (Empty already between two pods: nothing)
            for m in g.order:
                self._leave(g, m.member_id)
            self._write_empty(g, ts)
        self.count("groups", "stopped")

    def _write_empty(self, g: GroupState, ts: int) -> None:
        """The last member left: a new generation without members, protocol or leader (the
        state timestamp starts KIP-211's retention of its offsets)."""
        g.generation += 1
        value = fastbytes.group_metadata_value(self.gm_version(ts), "consumer", g.generation, None, None, ts, [])
        self.append([(g.key, value)], ts, "group_metadata")
        self.count("group_metadata_records", "empty")
        self._close_generation(g)

    def _classic_event(self, ts: int) -> bool:
        """A membership change of an active classic group, chosen by its churn."""
        candidates = [g for g in self.groups if g.plan.kind == "classic" and g.active and not g.busy]
        if not candidates:
            return False
        g = self.rng.choices(candidates, [c.plan.churn for c in candidates])[0]
        n = len(g.members)
        ops = {"replace": 0.3, "rejoin": 0.15}
        if n < g.plan.max_members:
            ops["join"] = 0.3
        if n > 1:
            ops["leave"] = 0.25
        op = _weighted(self.rng, ops)
        self.count("classic_changes", op)
        if op == "join":
            for _ in range(min(g.plan.max_members - n, 1 + (self.rng.random() < 0.3))):
                self._join(g, self._new_member(g))
            self._rebalance(g, ts)
        elif op == "leave":  # LeaveGroup, or a crash noticed at the session timeout
            self._leave(g, self.rng.choice(g.order).member_id)
            self._rebalance(g, ts)
        elif op == "rejoin":  # the same members rejoin (a metadata change, a poll timeout)
            self._rebalance(g, ts)
        elif g.plan.static:
            self._static_rejoin(g, ts)
        else:  # a rolling restart's step: the pod leaves, its replacement joins a minute later
            self._leave(g, self.rng.choice(g.order).member_id)
            if len(g.members):
                self._rebalance(g, ts)
            else:
                self._write_empty(g, ts)
            g.busy = True

            def replacement(g=g):
                g.busy = False
                if g.active:
                    self._join(g, self._new_member(g))
                    self._rebalance(g, self.clock)

            self._defer(ts + self.rng.randrange(20 * SEC, 90 * SEC), "rebalance", replacement)
        return True

    # -- KIP-848 consumer groups ---------------------------------------------------------------
    def _cg_key(self, record_type: int, g: GroupState, member_id: str | None = None) -> bytes:
        key = g.record_keys.get((record_type, member_id))
        if key is None:
            key = g.record_keys[(record_type, member_id)] = encode_key(
                CoordinatorKey(record_type, g.plan.name, member_id=member_id)
            )
        return key

    def _cg_record(self, record_type: int, g: GroupState, value: dict | None, member_id: str | None = None):
        raw = None if value is None else encode_value(record_type, 0, value)
        return (self._cg_key(record_type, g, member_id), raw)

    def _topic_partitions(self, tps) -> list[dict]:
        return [{"topicId": self.plan.topics[t].topic_id, "partitions": ps} for t, ps in by_topic(tps)]

    def _consumer_group_event(self, ts: int) -> bool:
        candidates = [g for g in self.groups if g.plan.kind == "consumer" and g.active and not g.busy]
        if not candidates:
            return False
        g = self.rng.choices(candidates, [c.plan.churn for c in candidates])[0]
        n = len(g.members)
        ops = {"replace": 0.4}
        if n < g.plan.max_members:
            ops["join"] = 0.35
        if n > 1:
            ops["leave"] = 0.25
        op = _weighted(self.rng, ops)
        self.count("consumer_group_changes", op)
        members = g.order
        if op == "join":
            self._consumer_group_change(g, ts, joining=[self._new_member(g)])
        elif op == "leave":
            self._consumer_group_change(g, ts, leaving=[self.rng.choice(members)])
        else:
            self._consumer_group_change(g, ts, joining=[self._new_member(g)], leaving=[self.rng.choice(members)])
        return True

    def _consumer_group_change(
        self, g: GroupState, ts: int, joining: Sequence[Member] = (), leaving: Sequence[Member] = ()
    ) -> None:
        """Members join or leave a KIP-848 group: one batch with the new members' metadata, the
        departed ones' tombstones (current assignment, target, metadata: the order Kafka's
        checks need), the group epoch, partition metadata before 4.1 (a metadata hash in the
        epoch record after), the changed targets and the target assignment epoch. Each member
        then reconciles at its next heartbeats (deferred)."""
        records = []
        for m in joining:
            g.put(m)
            value = {
                "instanceId": None,
                "rackId": m.rack,
                "clientId": m.client_id,
                "clientHost": m.host,
                "subscribedTopicNames": list(m.topics),
                "subscribedTopicRegex": None,
                "rebalanceTimeoutMs": m.rebalance_timeout,
                "serverAssignor": g.plan.assignor,
            }
            records.append(self._cg_record(CG_MEMBER, g, value, m.member_id))
        for m in leaving:
            g.remove(m.member_id)
            g.target.pop(m.member_id, None)
            for record_type in (CG_CURRENT, CG_TARGET_MEMBER, CG_MEMBER):
                records.append(self._cg_record(record_type, g, None, m.member_id))
        g.generation += 1
        epoch = g.generation
        modern = ts >= self.plan.upgrades[1]
        topics = g.plan.topics if len(g.members) else ()
        metadata_hash = 0
        if topics and modern:
            metadata_hash = zlib.crc32(repr([(t, self.consumed[t][0]) for t in topics]).encode()) + (1 << 40)
        elif topics != g.known_topics and topics:
            partition_metadata = [
                {
                    "topicId": self.plan.topics[t].topic_id,
                    "topicName": t,
                    "numPartitions": self.consumed[t][0],
                    "partitionMetadata": [],
                }
                for t in topics
            ]
            records.append(self._cg_record(CG_PARTITION_METADATA, g, {"topics": partition_metadata}))
        g.known_topics = topics
        records.append(self._cg_record(CG_METADATA, g, {"epoch": epoch, "metadataHash": metadata_hash}))
        if len(g.members):
            target = self._target_assignment(g)
            for m in g.order:
                if target[m.member_id] != g.target.get(m.member_id):
                    records.append(
                        self._cg_record(
                            CG_TARGET_MEMBER,
                            g,
                            {"topicPartitions": self._topic_partitions(target[m.member_id])},
                            m.member_id,
                        )
                    )
            g.target = target
            value = {"assignmentEpoch": epoch, "assignmentTimestamp": ts if modern else 0}
            records.append(self._cg_record(CG_TARGET, g, value))
            self.count("consumer_group_target_assignments", "records")
        self.append(records, ts, "consumer_group")
        if len(g.members):
            g.busy = True
            self._defer(ts + self.rng.randrange(100, 3000), "reconcile", functools.partial(self._reconcile, g, epoch))

    def _target_assignment(self, g: GroupState) -> dict[str, tuple[TopicPartition, ...]]:
        """The server-side assignor's target: "range" as lib.assignors' range, the default
        "uniform" as its sticky assignor fed the previous target (both keep what they can)."""
        members = g.order
        counts = {t: self.consumed[t][0] for t in g.plan.topics}
        if g.plan.assignor == "range":
            subs = [Subscription(m.member_id, m.topics) for m in members]
            result = assignment_of("range", counts, subs)
        else:
            subs = [
                Subscription(
                    m.member_id,
                    m.topics,
                    user_data=encode_sticky_user_data(sorted(g.target[m.member_id]), g.generation - 1)
                    if m.member_id in g.target
                    else None,
                )
                for m in members
            ]
            result = assignment_of("sticky", counts, subs)
        return {mid: tuple(tps) for mid, tps in result.items()}

    def _current(self, g: GroupState, m: Member, epoch: int, state: int, assigned, revoking=()) -> tuple:
        value = {
            "memberEpoch": epoch,
            "previousMemberEpoch": m.previous_epoch,
            "state": state,
            "assignedPartitions": self._topic_partitions(assigned),
            "partitionsPendingRevocation": self._topic_partitions(revoking),
        }
        return self._cg_record(CG_CURRENT, g, value, m.member_id)

    def _reconcile(self, g: GroupState, epoch: int) -> None:
        """Each member's heartbeat after a new target: a member that must give partitions up
        stays at its epoch revoking them; one that waits for partitions others still hold
        gets the rest (unreleased); the others are stable at the new epoch. Those waiting
        complete a moment later."""
        if g.generation != epoch:
            g.busy = False
            return
        ts = self.clock
        held = {tp for m in g.order for tp in m.assigned}
        waiting = []
        for m in g.order:
            target = set(g.target[m.member_id])
            kept = tuple(sorted(set(m.assigned) & target))
            revoking = tuple(sorted(set(m.assigned) - target))
            if revoking:
                self.append(
                    [self._current(g, m, m.generation, UNREVOKED_PARTITIONS, kept, revoking)], ts, "consumer_group"
                )
                m.assigned = kept
                waiting.append(m)
                continue
            free = tuple(sorted(tp for tp in target if tp not in held or tp in m.assigned))
            m.previous_epoch, m.generation = m.generation if m.generation >= 0 else 0, epoch
            state = STABLE if len(free) == len(target) else UNRELEASED_PARTITIONS
            self.append([self._current(g, m, epoch, state, free)], ts, "consumer_group")
            m.assigned = free
            if state != STABLE:
                waiting.append(m)
        if not waiting:
            g.busy = False
            return

        def settle(g=g, waiting=waiting, epoch=epoch):
            g.busy = False
            if g.generation != epoch:
                return
            for m in waiting:
                if m.member_id in g.members:
                    if m.generation != epoch:
                        m.previous_epoch, m.generation = m.generation if m.generation >= 0 else 0, epoch
                    m.assigned = tuple(sorted(g.target[m.member_id]))
                    self.append([self._current(g, m, epoch, STABLE, m.assigned)], self.clock, "consumer_group")

        g.busy = True
        self._defer(ts + self.rng.randrange(200, 2000), "reconcile", settle)

    # -- commits ------------------------------------------------------------------------------
    def _targets(self, g: GroupState, tps: list[TopicPartition]) -> list[tuple]:
        """What committing each partition takes, worked out once per group and partition: its
        key in `live`, its OffsetCommitKey, its timeline and its topic id."""
        out = []
        targets = g.commit_targets
        for tp in tps:
            target = targets.get(tp)
            if target is None:
                line = self.plan.timelines[tp]
                key = offset_commit_key(g.plan.name, tp[0], tp[1])
                target = targets[tp] = ((g.plan.name, *tp), key, line.visible, line.ends, self.consumed[tp[0]][1])
            out.append(target)
        return out

    def _offsets(self, g: GroupState, targets: list[tuple], ts: int) -> list[int]:
        """Where the group's consumers of these partitions are: each one's end offset the
        processing delay ago (a delay that grows for a group falling behind), never before the
        last offset the group committed."""
        plan = g.plan
        lag = plan.delay_ms
        if plan.slow_since is not None and ts > plan.slow_since:
            lag += round((ts - plan.slow_since) * (1 - plan.slow_factor))
        seen = ts - lag
        position = g.position
        out = []
        for live_key, _, visible, ends, _ in targets:
            i = bisect.bisect_right(visible, seen) - 1
            end = ends[i] if i >= 0 else 0
            last = position.get(live_key, 0)
            out.append(end if end > last else last)
        return out

    def _commit_records(
        self, g: GroupState, member: Member | None, targets: list[tuple], offsets: list[int], ts: int
    ) -> list[tuple[bytes, bytes]]:
        """OffsetCommitValue records: v3 before the 4.1 upgrade, v4 after (with the topic id
        when the client sent it); a Java client commits the leader epoch of the last record it
        read (the topics' epoch 0), others none."""
        version = self.commit_version(ts)
        java = member.java if member is not None else g.plan.client_version != 2
        with_ids = version == 4 and g.plan.topic_ids_in_commits
        values = fastbytes.offset_commit_values(
            version,
            ts,
            g.plan.metadata,
            [(o, 0 if java and o else -1, t[4] if with_ids else None) for t, o in zip(targets, offsets)],
        )
        self.count("commit_value_versions", version, len(values))
        return [(t[1], v) for t, v in zip(targets, values)]

    def _committing_groups(self) -> tuple[list[GroupState], list[float]]:
        """The active groups that commit with OffsetCommit and their cumulative commit weights
        (worked out again only when a group starts or stops)."""
        if self._committing is None:
            groups = [g for g in self.groups if g.active and not g.plan.eos]
            self._committing = (groups, list(itertools.accumulate(g.plan.commit_weight for g in groups)))
        return self._committing

    def _commit(self, ts: int) -> bool:
        """An OffsetCommit request of one member (a simple group: its one consumer): one batch,
        a record per partition, every owned partition or only those that moved."""
        groups, weights = self._committing_groups()
        for _ in range(4):
            if not groups:
                return False
            g = self.rng.choices(groups, cum_weights=weights)[0]
            if g.plan.kind == "simple":
                member, tps = None, list(g.plan.simple_partitions)
                break
            committers = g.committers
            if committers:
                member = self.rng.choice(committers)
                tps = list(member.assigned)  # sorted, as the assignors return them
                break
        else:
            return False
        targets = self._targets(g, tps)
        offsets = self._offsets(g, targets, ts)
        if not g.plan.commit_all:  # only what moved since the last commit (at least one)
            moved = [i for i, (t, o) in enumerate(zip(targets, offsets)) if o != g.position.get(t[0])] or [0]
            targets, offsets = [targets[i] for i in moved], [offsets[i] for i in moved]
        base = self.append(self._commit_records(g, member, targets, offsets, ts), ts, "commit")
        position, live, group_live = g.position, self.live, g.live
        for i, (target, offset) in enumerate(zip(targets, offsets)):
            live_key = target[0]
            live[live_key] = (offset, base + i)
            group_live.add(live_key)
            position[live_key] = offset
        self.effective_commits += len(targets)
        return True

    def _transactional_commit(self, ts: int) -> bool:
        """A TxnOffsetCommit of an exactly-once group's member, its marker a moment later."""
        groups = [g for g in self.groups if g.active and g.plan.eos and g.committers]
        if not groups:
            return False
        g = self.rng.choices(groups, [x.plan.commit_weight for x in groups])[0]
        member = self.rng.choice(g.committers)
        targets = self._targets(g, list(member.assigned))
        offsets = self._offsets(g, targets, ts)
        base = self.append(self._commit_records(g, member, targets, offsets, ts), ts, "transactional", producer=member)
        pending = self.pending.setdefault(member.producer_id, {})
        for i, (target, offset) in enumerate(zip(targets, offsets)):
            pending[target[0]] = (offset, base + i)
        member.txn_open = True
        commit = self.rng.random() >= ABORT_SHARE
        self._defer(ts + self.rng.randrange(20, 300), "marker", lambda: self.marker(member, commit, self.clock))
        return True

    # -- tombstones ----------------------------------------------------------------------------
    def _tombstones(self, ts: int) -> bool:
        """OffsetDelete of a simple group's partitions or of a stopped group's topic, or
        DeleteGroups of a stopped group: its offsets' tombstones, then the group's own."""
        deletable = [
            g
            for g in self.groups
            if g.stopped and not g.deleted and g.plan.delete_after_stop and not self._open_transactions(g)
        ]
        if deletable and self.rng.random() < 0.3:
            g = self.rng.choice(deletable)
            keys = sorted(g.live)
            records = [(g.commit_targets[(k[1], k[2])][1], None) for k in keys]
            shares = ["tombstone"] * len(records)
            if g.plan.kind == "consumer":
                records += [self._cg_record(t, g, None) for t in (CG_TARGET, CG_PARTITION_METADATA, CG_METADATA)]
                shares += ["consumer_group"] * 3
            else:
                records.append((g.key, None))
                shares.append("group_metadata")
            self.append(records, ts, shares)
            self._forget(g, keys)
            g.deleted = True
            self.count("groups", "deleted")
            return True
        candidates = [g for g in self.groups if (g.plan.kind == "simple" and g.active) or (g.stopped and not g.deleted)]
        candidates = [g for g in candidates if g.live and not self._open_transactions(g)]
        if not candidates:
            return False
        g = self.rng.choice(candidates)
        keys = sorted(g.live)
        if g.plan.kind == "simple":  # a few of its partitions
            keys = self.rng.sample(keys, min(len(keys), self.rng.randrange(1, 4)))
        else:  # one topic it consumed
            topic = self.rng.choice(sorted({k[1] for k in keys}))
            keys = [k for k in keys if k[1] == topic]
        self.append([(g.commit_targets[(k[1], k[2])][1], None) for k in keys], ts, "tombstone")
        self._forget(g, keys)
        return True

    def _open_transactions(self, g: GroupState) -> bool:
        return any(m.txn_open for m in g.order) or any(
            k[0] == g.plan.name for pending in self.pending.values() for k in pending
        )

    def _forget(self, g: GroupState, keys) -> None:
        """Offset tombstones: the offsets go, and so do pending transactional ones (4.x)."""
        for key in keys:
            self.live.pop(key, None)
            g.live.discard(key)
            for pending in self.pending.values():
                pending.pop(key, None)


# --- the consumed topics -------------------------------------------------------------------------


def write_topic_partitions(plan: BusyPlan, log_dir: str, tps: list[TopicPartition], payloads: dict) -> list[dict]:
    """The partition folders of `tps` from their timelines (topicbuilder's template batches, an
    idempotent producer per partition)."""
    out = []
    for topic, p in tps:
        t = plan.topics[topic]
        written = write_bulk_partition(
            os.path.join(log_dir, f"{topic}-{p}"),
            t.topic_id,
            plan.timelines[(topic, p)].batches,
            codec=t.codec,
            payloads=payloads,
            producer_id=zlib.crc32(f"{topic}-{p}".encode()) & 0x7FFFFFFF,
            segment_bytes=plan.topic_segment_bytes,
        )
        out.append({"codec": CODEC_NAMES[t.codec], **written})
    return out


# --- the whole log dir ---------------------------------------------------------------------------

# what forked workers read (set before the pool starts; plain globals: nothing is pickled)
_WORK: dict = {}


def _run_task(task: tuple) -> tuple:
    plan, log_dir = _WORK["plan"], _WORK["log_dir"]
    if task[0] == "offsets":
        return task, OffsetsPartition(plan, task[1]).run(log_dir)
    return task, write_topic_partitions(plan, log_dir, task[1], _WORK["payloads"])


def _merge(into: dict, stats: dict) -> None:
    for name, counts in stats.items():
        target = into.setdefault(name, {})
        for key, n in counts.items():
            target[key] = target.get(key, 0) + n


def generate_busy_log(
    log_dir: str,
    records: int,
    *,
    partitions: int = 50,
    groups: int = 2000,
    seed: int = 7,
    consumed_partitions: int | None = None,
    topic_records: int | None = None,
    span_ms: int = DEFAULT_SPAN_MS,
    start_ts: int = T0,
    segment_bytes: int = 100 * 1024 * 1024,
    topic_segment_bytes: int = 256 * 1024 * 1024,
    workers: int | None = None,
    stats_path: str | None = None,
) -> dict:
    """Writes about `records` offsets records (whole batches) into `partitions` offsets
    partitions, and the consumed topics: `consumed_partitions` partitions (default: 7,680 per
    10M records) holding about `topic_records` records (default: 3 per offsets record), their
    data from an hour before the offsets log's first record (`start_ts`) to its last
    (`start_ts + span_ms`); then the log dir's checkpoints. `workers` processes (default: the
    CPUs) share the partitions. Returns what it wrote (also as JSON to `stats_path`): the
    offsets records by kind, version and codec, the groups and their generations, the consumed
    partitions, and `expected`: what a replay of the log must find (the classic generations and
    how many of them hold their assignor's own assignment, the offsets in force at the end)."""
    started = time.monotonic()
    plan = build_plan(
        records,
        partitions=partitions,
        groups=groups,
        seed=seed,
        consumed_partitions=consumed_partitions,
        topic_records=topic_records,
        span_ms=span_ms,
        start_ts=start_ts,
        segment_bytes=segment_bytes,
        topic_segment_bytes=topic_segment_bytes,
    )
    planned = time.monotonic()
    os.makedirs(log_dir, exist_ok=True)
    tps = sorted(plan.timelines)
    chunk = max(1, len(tps) // 16)
    tasks: list[tuple] = [("offsets", p) for p in range(partitions)]
    tasks += [("topics", tps[i : i + chunk]) for i in range(0, len(tps), chunk)]
    _WORK.update(plan=plan, log_dir=log_dir, payloads=bulk_payloads({t.codec for t in plan.topics.values()}))
    workers = max(1, workers if workers is not None else os.cpu_count() or 1)
    try:
        if workers == 1:
            results = [_run_task(t) for t in tasks]
        else:
            with multiprocessing.get_context("fork").Pool(workers) as pool:
                results = list(pool.imap_unordered(_run_task, tasks))
    finally:
        _WORK.clear()
    written = time.monotonic()
    write_checkpoints(log_dir)
    offsets: dict = {}
    consumed: list[dict] = []
    for task, result in sorted(results, key=lambda r: (r[0][0], str(r[0][1]))):
        if task[0] == "offsets":
            _merge(offsets, result)
        else:
            consumed.extend(result)
    stats = _summary(plan, offsets, consumed, records)
    stats["seconds"] = {
        "plan": round(planned - started, 2),
        "write": round(written - planned, 2),
        "checkpoints": round(time.monotonic() - written, 2),
        "total": round(time.monotonic() - started, 2),
        "offsets_cpu": round(offsets.get("seconds", {}).get("offsets_cpu", 0), 2),
        "workers": workers,
    }
    if stats_path:
        with open(stats_path, "w") as f:
            json.dump(stats, f, indent=2, sort_keys=True)
            f.write("\n")
    return stats


def _summary(plan: BusyPlan, offsets: dict, consumed: list[dict], asked: int) -> dict:
    totals = offsets.get("totals", {})
    kinds = offsets.get("record_kinds", {})
    total = max(1, totals.get("records", 0))
    group_metadata = kinds.get("group_metadata", 0) + kinds.get("group_metadata_tombstone", 0)
    transactional = kinds.get("transactional", 0) + sum(offsets.get("markers", {}).values())
    tombstones = sum(n for k, n in kinds.items() if k.endswith("_tombstone") and k != "consumer_group_tombstone")
    batches = offsets.get("batches", {})
    data_batches = max(1, batches.get("data", 0))
    plans = plan.groups
    expected = dict(offsets.get("expected", {}))
    expected["classic_generations"] = sum(offsets.get("classic_generations", {}).values())
    expected["classic_generations_assignor_own"] = sum(offsets.get("classic_generations_matching", {}).values())
    expected["consumer_target_assignments"] = offsets.get("consumer_group_target_assignments", {}).get("records", 0)
    codec_bytes: dict[str, int] = {}
    for part in consumed:
        codec_bytes[part["codec"]] = codec_bytes.get(part["codec"], 0) + part["bytes"]
    return {
        "generator": "lib.testdata.busy",
        "version": BUSY_GENERATOR_VERSION,
        "seed": plan.seed,
        "records_asked": asked,
        "start_ts": plan.start_ts,
        "end_ts": plan.end_ts,
        "offsets": {
            "partitions": plan.offsets_partitions,
            "records": totals.get("records", 0),
            "batches": batches.get("data", 0) + batches.get("control", 0),
            "bytes": totals.get("bytes", 0),
            "segments": totals.get("segments", 0),
            "shares": {
                "group_metadata": round(group_metadata / total, 4),
                "transactional": round(transactional / total, 4),
                "tombstones": round(tombstones / total, 4),
                "consumer_group": round(
                    (kinds.get("consumer_group", 0) + kinds.get("consumer_group_tombstone", 0)) / total, 4
                ),
                "compressed_batches": round(sum(offsets.get("compressed_batches", {}).values()) / data_batches, 4),
            },
            **{
                name: offsets.get(name, {})
                for name in (
                    "record_kinds",
                    "markers",
                    "compressed_batches",
                    "commit_value_versions",
                    "group_metadata_versions",
                    "group_metadata_records",
                    "subscription_versions",
                    "members_per_group_metadata",
                    "classic_generations",
                    "classic_generations_matching",
                    "classic_changes",
                    "consumer_group_changes",
                    "rebalances",
                )
            },
        },
        "groups": {
            "total": len(plans),
            "kinds": dict(Counter(g.kind for g in plans)),
            "classic_assignors": dict(Counter(g.assignor for g in plans if g.kind == "classic")),
            "exactly_once": sum(g.eos for g in plans),
            "static": sum(g.static for g in plans),
            "canary_rollouts": sum(g.canary_topic is not None for g in plans),
            "falling_behind": sum(g.slow_since is not None for g in plans),
            "max_members": dict(sorted(Counter(g.max_members for g in plans if g.kind != "simple").items())),
            "topics_per_group": dict(sorted(Counter(len(g.topics) for g in plans).items())),
            **offsets.get("groups", {}),
        },
        "consumed": {
            "topics": len(plan.topics),
            "partitions": len(consumed),
            "records": sum(p["records"] for p in consumed),
            "batches": sum(p["batches"] for p in consumed),
            "bytes": sum(p["bytes"] for p in consumed),
            "segments": sum(p["segments"] for p in consumed),
            "bytes_by_codec": codec_bytes,
        },
        "expected": expected,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Write a log dir that looks like a busy Kafka cluster's.")
    ap.add_argument("--records", type=int, required=True, help="offsets records (about; whole batches)")
    ap.add_argument("--out", required=True, help="the log dir to write (created)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--partitions", type=int, default=50, help="__consumer_offsets partitions")
    ap.add_argument("--groups", type=int, default=2000)
    ap.add_argument(
        "--consumed-partitions", type=int, help="consumed topics' partitions (default: 7,680 per 10M records)"
    )
    ap.add_argument("--topic-records", type=int, help="records in the consumed topics (default: 3 per offsets record)")
    ap.add_argument("--span-hours", type=float, default=DEFAULT_SPAN_MS / HOUR, help="the offsets log's time span")
    ap.add_argument("--start-ts", type=int, default=T0, help="epoch ms of the offsets log's first record")
    ap.add_argument("--workers", type=int, help="processes (default: the CPUs)")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args(argv)
    stats = generate_busy_log(
        args.out,
        args.records,
        partitions=args.partitions,
        groups=args.groups,
        seed=args.seed,
        consumed_partitions=args.consumed_partitions,
        topic_records=args.topic_records,
        span_ms=round(args.span_hours * HOUR),
        start_ts=args.start_ts,
        workers=args.workers,
        stats_path=args.json,
    )
    o, c, e = stats["offsets"], stats["consumed"], stats["expected"]
    print(
        f"wrote {args.out} in {stats['seconds']['total']:.1f}s: {o['records']:,} offsets records "
        f"({o['bytes'] / 1e6:.0f} MB, GroupMetadata {o['shares']['group_metadata']:.1%}), "
        f"{c['partitions']:,} consumed partitions with {c['records']:,} records ({c['bytes'] / 1e6:.0f} MB); "
        f"{e['classic_generations']:,} classic generations, {e['group_offsets']:,} offsets in force at the end"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
