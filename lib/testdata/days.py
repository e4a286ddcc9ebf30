"""The ten-day simulator behind samples/days (samples/make_days_sample.py writes the sample
with it): topics with producers of a daily rhythm, bulk loads, spikes and transactions
(lib.testdata.topicbuilder), and consumer groups of different shapes whose coordinators'
records (lib.testdata.logbuilder) follow their members: joins and leaves assigned by Kafka's
own assignors (lib.assignors), commits from positions that track the partitions' end offsets,
KIP-848 groups, an exactly-once group, simple groups. Deterministic: a fixed seed, every time
relative to NOW."""

from __future__ import annotations

import base64
import bisect
import datetime as dt
import itertools
import math
import os
import random
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kafka.partitioner.default import murmur2

from lib.assignors import Subscription
from lib.assignors import assign as kafka_assign
from lib.codec.serde import CoordinatorKey, encode_key, encode_value
from lib.replay.partitioning import partition_for
from lib.testdata.logbuilder import (
    PartitionLogBuilder,
    consumer_member,
    group_key,
    group_metadata_value,
    offset_commit_key,
    offset_commit_value,
)
from lib.testdata.topicbuilder import (
    CODEC_IDS,
    DEFAULT_SEGMENT_MS,
    Producer,
    TopicPartitionBuilder,
    assign_epoch,
    topic_id_for,
    write_partition_files,
)

SEED = 20261120
OFFSETS_PARTITIONS = 50
OFFSETS_TOPIC = "__consumer_offsets"
DEFAULT_NOW_MS = 1_795_176_000_000  # 2026-11-20T12:00:00Z
SPAN_DAYS = 10
SEC, MIN, HOUR, DAY = 1000, 60_000, 3_600_000, 86_400_000
NONE, GZIP, SNAPPY, LZ4, ZSTD = (CODEC_IDS[n] for n in ("none", "gzip", "snappy", "lz4", "zstd"))
UPGRADED_EPOCH = 2  # a single-broker restart moves each leader twice (fenced, then back)


# --- the clock -----------------------------------------------------------------------------------


@dataclass
class Clock:
    now: int  # NOW: the capture instant
    end: int  # the generated history ends here (before a real capture's start)

    @property
    def start(self) -> int:
        return self.now - SPAN_DAYS * DAY

    def at(self, day: int, hour: float, minute: float = 0) -> int:
        """hh:mm UTC on the day-th calendar day after START's."""
        midnight = self.start - self.start % DAY
        return int(midnight + day * DAY + hour * HOUR + minute * MIN)

    def ago(self, days: float = 0, hours: float = 0, minutes: float = 0) -> int:
        return int(self.now - days * DAY - hours * HOUR - minutes * MIN)

    @property
    def upgrade(self) -> int:
        """The broker's rolling upgrade (3.9 -> 4.x), 03:00 UTC on day 4: commit values
        are v3 before it and v4 after; partition leader epochs move from 0 to 2."""
        return self.at(4, 3)


def iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def diurnal(t: int) -> float:
    """Business-hours traffic: 0.15 at night, 1.0 mid-afternoon UTC, half on weekends."""
    h = (t % DAY) / HOUR
    w = 0.15 + 0.85 * max(0.0, math.sin(math.pi * (h - 6) / 16)) if 6 <= h <= 22 else 0.15
    weekday = dt.datetime.fromtimestamp(t / 1000, dt.UTC).weekday()
    return w * (0.5 if weekday >= 5 else 1.0)


def poisson(rng: random.Random, lam: float) -> int:
    if lam <= 0:
        return 0
    if lam > 30:
        return max(0, round(rng.gauss(lam, math.sqrt(lam))))
    n, p, limit = 0, rng.random(), math.exp(-lam)
    while p > limit:
        n += 1
        p *= rng.random()
    return n


# --- topics ---------------------------------------------------------------------------------------


@dataclass
class ProducerDef:
    name: str
    codec: int
    kind: str = "idempotent"  # plain | idempotent | transactional
    producer_id: int = -1
    linger_ms: int = 5
    max_batch: int = 500
    rate: Callable[[int], float] | None = None  # t -> records/s per partition
    bulk: Callable[[Any], list[tuple[int, int]]] | None = (
        None  # clock -> [(start ms, records per partition)]: loads at full speed
    )
    bulk_rate: float = 20000.0  # records/s per partition during a bulk load
    start: int | None = None
    stop: int | None = None
    abort_ratio: float = 0.0


@dataclass
class TopicDef:
    name: str
    partitions: int
    producers: list
    value: Callable[[random.Random], bytes]  # rng -> bytes
    keys: int = 0  # keyed records: a pool of this many keys, each on its murmur2 partition
    key_prefix: str = "k"
    segment_ms: int = DEFAULT_SEGMENT_MS
    segment_bytes: int = 1 << 30
    retention_ms: int | None = None
    delete_records: dict = field(default_factory=dict)  # partition -> fraction of the log (DeleteRecords)


def topic_defs(c: Clock) -> list[TopicDef]:
    def day_rate(base):
        return lambda t: base * diurnal(t)

    def spikes(base, windows):
        def rate(t):
            r = base * diurnal(t)
            for a, b, extra in windows:
                if a <= t < b:
                    r += extra
            return r

        return rate

    def nightly(hour, minute, n):  # a bulk load at hh:mm every day
        return lambda c: [(c.at(d, hour, minute), n) for d in range(1, SPAN_DAYS + 1)]

    def every(hours, n, offset=0):  # a bulk load every few hours
        return lambda c: [(t, n) for t in range(c.start - c.start % HOUR + offset + HOUR, c.end, hours * HOUR)]

    def sku(r):
        return b"%d" % r.randrange(0, 500)

    return [
        TopicDef(
            "orders",
            6,
            [
                ProducerDef("order-service", LZ4, producer_id=1001, linger_ms=400, rate=day_rate(0.0008)),
                ProducerDef("legacy-importer", NONE, kind="plain", max_batch=100, bulk=nightly(1, 30, 150)),
            ],
            value=lambda r: b"%d,%s" % (r.randrange(100, 99999), r.choice((b"N", b"N", b"N", b"P", b"C"))),
            keys=3000,
            key_prefix="c",
        ),
        TopicDef(
            "payments",
            3,
            [
                ProducerDef(
                    "payments-gateway",
                    ZSTD,
                    kind="transactional",
                    producer_id=2001,
                    linger_ms=300,
                    rate=day_rate(0.0008),
                    abort_ratio=0.04,
                )
            ],
            value=lambda r: b"auth:%d" % r.randrange(100, 99999),
            keys=2000,
            key_prefix="o",
        ),
        TopicDef("payments-ledger", 3, [], value=lambda r: b"", keys=0),  # written by payments-eos
        TopicDef(
            "clickstream",
            4,
            [
                ProducerDef(
                    "web-collector",
                    SNAPPY,
                    linger_ms=5000,
                    max_batch=800,
                    rate=spikes(0.0006, [(c.at(3, 14), c.at(3, 14, 15), 1.5), (c.at(7, 19), c.at(7, 19, 12), 2.0)]),
                )
            ],
            value=lambda r: b"/p/%d" % r.randrange(0, 800),
        ),
        TopicDef(
            "inventory-updates",
            3,
            [
                ProducerDef("stock-sync", GZIP, linger_ms=50, max_batch=400, bulk=every(6, 80, 15 * MIN)),
                ProducerDef("warehouse-scanner", LZ4, linger_ms=200, rate=day_rate(0.0008)),
            ],
            value=sku,
            keys=1500,
            key_prefix="s",
        ),
        TopicDef(
            "catalog-changes",
            3,
            [
                ProducerDef("catalog-admin", ZSTD, linger_ms=100, rate=day_rate(0.0007)),
                ProducerDef("price-engine", ZSTD, linger_ms=100, max_batch=400, bulk=nightly(2, 0, 300)),
            ],
            value=lambda r: b"price=%d" % r.randrange(100, 9999),
            keys=1500,
            key_prefix="s",
        ),
        TopicDef(
            "audit-log",
            3,
            [ProducerDef("auth-service", NONE, kind="plain", linger_ms=1000, rate=day_rate(0.0012))],
            value=lambda r: b"u%d:%s" % (r.randrange(0, 900), r.choice((b"login", b"logout", b"mfa"))),
            segment_ms=DAY,
            retention_ms=4 * DAY,
        ),
        TopicDef(
            "notifications",
            2,
            [ProducerDef("notify-api", ZSTD, linger_ms=250, rate=day_rate(0.001))],
            value=lambda r: r.choice((b"email", b"push", b"push", b"sms")),
            keys=800,
            key_prefix="u",
        ),
        TopicDef(
            "user-profile-changes",
            1,
            [ProducerDef("profile-service", NONE, kind="plain", rate=day_rate(0.0015))],
            value=lambda r: b"v%d" % r.randrange(1, 40),
            keys=900,
            key_prefix="u",
        ),
        TopicDef(
            "shipments",
            2,
            [ProducerDef("logistics", GZIP, linger_ms=1000, rate=day_rate(0.001))],
            value=lambda r: r.choice((b"PICKED", b"SHIPPED", b"OUT", b"DELIVERED")),
            keys=2000,
            key_prefix="o",
        ),
        TopicDef(
            "metrics-raw",
            2,
            [ProducerDef("metrics-agent", LZ4, linger_ms=10, max_batch=400, bulk=every(1, 60))],
            value=lambda r: b"cpu=%d" % r.randrange(0, 100),
        ),
        TopicDef(
            "search-queries",
            2,
            [ProducerDef("search-api", SNAPPY, linger_ms=2000, rate=day_rate(0.0012))],
            value=lambda r: b"q%d" % int(r.paretovariate(1.2)),
        ),
        TopicDef(
            "dead-letters",
            1,
            [ProducerDef("orders-dlq", NONE, kind="plain", rate=lambda t: 0.0002)],
            value=lambda r: b"err:%d" % r.randrange(400, 600),
            keys=50,
            key_prefix="o",
            delete_records={0: 0.6},
        ),
    ]


def key_pools(topic: TopicDef) -> list[list[bytes]]:
    """Keys of a keyed topic, each in the partition Kafka's default partitioner puts it:
    murmur2(key) & 0x7fffffff % partitions."""
    pools: list[list[bytes]] = [[] for _ in range(topic.partitions)]
    for i in range(topic.keys):
        k = f"{topic.key_prefix}{i:05d}".encode()
        pools[(murmur2(k) & 0x7FFFFFFF) % topic.partitions].append(k)
    return pools


def arrivals(rng: random.Random, p: ProducerDef, c: Clock, partition: int) -> list[int]:
    """Record send times of one producer on one partition."""
    start = max(c.start + 5 * MIN, p.start or 0)
    stop = min(c.end - 5 * SEC, p.stop or c.end)
    times: list[int] = []
    if p.rate is not None:
        for m in range(start, stop - MIN, MIN):
            n = poisson(rng, p.rate(m) * 60)
            times.extend(m + rng.randrange(MIN) for _ in range(n))
    if p.bulk is not None:
        for t0, n in p.bulk(c):
            if not start <= t0 < stop - 10 * MIN:
                continue
            n = max(1, round(n * rng.uniform(0.7, 1.3)))
            t = t0 + rng.randrange(0, 20 * SEC)
            for _ in range(n):
                times.append(t)
                t += round(rng.expovariate(p.bulk_rate / SEC))
    times.sort()
    return times


def batch_times(times: list[int], linger_ms: int, max_batch: int) -> list[list[int]]:
    """Groups send times into batches as the producer's accumulator does: a batch opens with a
    record and is sent linger.ms later, or when full."""
    out: list[list[int]] = []
    i = 0
    while i < len(times):
        close = times[i] + linger_ms
        j = i + 1
        while j < len(times) and times[j] < close and j - i < max_batch:
            j += 1
        out.append(times[i:j])
        i = j
    return out


@dataclass
class Pending:
    """A batch or marker waiting to be appended: sorted by the time the broker appends it."""

    ts: int
    order: int
    records: list | None  # (ts, key, value); None for a marker
    producer: Producer
    codec: int = 0
    commit: bool = True


def build_topic(topic: TopicDef, c: Clock, rng: random.Random, pending_extra=None) -> list[TopicPartitionBuilder]:
    tid = topic_id_for(topic.name, SEED)
    logs = [
        TopicPartitionBuilder(
            topic.name, p, topic_id=tid, segment_bytes=topic.segment_bytes, segment_ms=topic.segment_ms
        )
        for p in range(topic.partitions)
    ]
    pools = key_pools(topic) if topic.keys else None
    queues: list[list[Pending]] = [[] for _ in logs]
    order = 0
    for pdef in topic.producers:
        producer = Producer(pdef.producer_id, 0 if pdef.producer_id >= 0 else -1, pdef.kind == "transactional")
        per_partition = [
            batch_times(arrivals(rng, pdef, c, p), pdef.linger_ms, pdef.max_batch) for p in range(len(logs))
        ]
        if pdef.kind != "transactional":
            for p, batches in enumerate(per_partition):
                for times in batches:
                    recs = [(t, rng.choice(pools[p]) if pools else None, topic.value(rng)) for t in times]
                    queues[p].append(Pending(times[-1] + 3, order, recs, producer, pdef.codec))
                    order += 1
            continue
        # transactional: the batches of all partitions that close within one window form one
        # transaction; its markers follow on every partition it wrote to
        flat = sorted((times[-1], p, times) for p, batches in enumerate(per_partition) for times in batches)
        i = 0
        while i < len(flat):
            window_end = flat[i][0] + 200
            txn = []
            while i < len(flat) and flat[i][0] < window_end:
                txn.append(flat[i])
                i += 1
            commit = rng.random() >= pdef.abort_ratio
            end_ts = max(x[0] for x in txn) + rng.randrange(15, 120)
            for close, p, times in txn:
                recs = [(t, rng.choice(pools[p]) if pools else None, topic.value(rng)) for t in times]
                queues[p].append(Pending(close + 3, order, recs, producer, pdef.codec))
                order += 1
            for p in sorted({x[1] for x in txn}):
                queues[p].append(Pending(end_ts, order, None, producer, commit=commit))
                order += 1
    if pending_extra:
        for p, items in pending_extra.items():
            queues[p].extend(items)
    for log, queue in zip(logs, queues):
        queue.sort(key=lambda x: (x.ts, x.order))
        for item in queue:
            if item.ts >= c.upgrade and log.leader_epoch != UPGRADED_EPOCH:
                log.set_leader_epoch(UPGRADED_EPOCH)
            if item.records is None:
                log.end_txn(item.producer, item.commit, item.ts)
            else:
                log.append(item.records, compression=item.codec, producer=item.producer)
        if log.leader_epoch != UPGRADED_EPOCH:
            log.set_leader_epoch(UPGRADED_EPOCH)
    return logs


class View:
    """A partition's end offsets over time: after batch i, the end offset is ends[i], visible
    from times[i] (its max timestamp, or an earlier batch's if that is later: CreateTime need
    not grow with the offsets). The `stable` lists keep only the points a read_committed
    consumer can reach (no transaction open after them)."""

    def __init__(self, log: TopicPartitionBuilder):
        self.log = log
        self.times = list(itertools.accumulate((b.max_ts for b in log.batches), max))
        self.ends = [b.end_offset for b in log.batches]
        self.stable_times: list[int] = []
        self.stable_ends: list[int] = []
        open_txn = set()
        for b in log.batches:
            if b.control:
                open_txn.discard(b.producer_id)
            elif b.transactional:
                open_txn.add(b.producer_id)
            if not open_txn:
                self.stable_times.append(max(b.max_ts, self.stable_times[-1] if self.stable_times else b.max_ts))
                self.stable_ends.append(b.end_offset)
        # the first offset written under the upgraded leader epoch
        self.upgrade_offset = next((o for e, o in log.epochs if e == UPGRADED_EPOCH), log.end_offset)

    def end_at(self, t: int, committed: bool = False) -> int:
        times, ends = (self.stable_times, self.stable_ends) if committed else (self.times, self.ends)
        i = bisect.bisect_right(times, t) - 1
        return ends[i] if i >= 0 else 0

    def data_records(self, a: int, b: int) -> int:
        """Data records (not markers) at offsets a..b-1."""
        n = 0
        i = max(0, bisect.bisect_right(self.ends, a) - 1)
        for batch in self.log.batches[i:]:
            if batch.base_offset >= b:
                break
            if batch.end_offset > a and not batch.control:
                n += min(b, batch.end_offset) - max(a, batch.base_offset)
        return n


# --- groups ------------------------------------------------------------------------------------


@dataclass
class GroupDef:
    name: str
    topics: list
    shape: str
    kind: str = "classic"  # classic | simple | consumer (KIP-848)
    client: str = "java"  # java (leader epochs in commits) | librdkafka
    protocol: str = "range"
    interval: int = 5 * MIN
    delay: tuple = (300, 4000)
    capacity: float | None = None  # records/s per member
    slow: tuple = ()  # (start, end, capacity factor)
    start: int = 0
    stop: int | None = None  # members leave; no commit after
    membership: tuple = ((0, 1),)  # (time, op): op = n members | "restart" | ("crash", i)
    runs: Callable[[Any], list[tuple[int, int]]] | None = None  # batch job: clock -> [(start, end)]
    commit_all: bool = False  # commitSync(): every assigned partition, changed or not
    static: bool = False
    isolation: str = "read_uncommitted"
    partitions: tuple | None = None  # simple group: its (topic, partition)s
    topic_ids: bool = True  # after the upgrade: OffsetCommit v10 carries topic ids
    metadata: str = ""


def group_defs(c: Clock) -> list[GroupDef]:
    return [
        GroupDef(
            "orders-billing",
            ["orders"],
            "steady: 2 members, commits every 2-3 min",
            interval=150 * SEC,
            membership=((c.start + 10 * MIN, 2),),
            start=c.start + 10 * MIN,
        ),
        GroupDef(
            "orders-analytics",
            ["orders"],
            "batch job every 6 h: joins, reads to the end, leaves (lag sawtooth)",
            runs=lambda c: [(t, t + 12 * MIN) for t in range(c.at(1, 0, 5), c.end - HOUR, 6 * HOUR)],
            capacity=20.0,
            interval=2 * MIN,
        ),
        GroupDef(
            "orders-warehouse-loader",
            ["orders"],
            "falls behind for 6 h (warehouse DB down), catches up throttled",
            capacity=1.0,
            slow=((c.at(7, 8), c.at(7, 14), 0.0), (c.at(7, 14), c.at(7, 18), 0.01)),
            interval=10 * MIN,
            membership=((c.start + 20 * MIN, 2),),
            start=c.start + 20 * MIN,
        ),
        GroupDef(
            "orders-fraud",
            ["orders"],
            "rebalances: 2 -> 4 members, a crash, a rolling restart, down to 2",
            protocol="cooperative-sticky",
            interval=7 * MIN,
            start=c.start + 30 * MIN,
            membership=(
                (c.start + 30 * MIN, 2),
                (c.at(3, 9, 12), 4),
                (c.at(5, 16, 40), ("crash", 1)),
                (c.at(6, 10), "restart"),
                (c.at(8, 11, 5), 2),
            ),
        ),
        GroupDef(
            "orders-audit-legacy",
            ["orders"],
            "expires: stopped 8.5 days before NOW, Empty since",
            interval=10 * MIN,
            start=c.start + 40 * MIN,
            stop=c.ago(days=8, hours=12),
            membership=((c.start + 40 * MIN, 1),),
        ),
        GroupDef(
            "payments-eos",
            ["payments"],
            "exactly-once: TxnOffsetCommit + markers, writes payments-ledger",
            isolation="read_committed",
            interval=90 * SEC,
            start=c.start + 15 * MIN,
            membership=((c.start + 15 * MIN, 2), (c.at(6, 13), "restart")),
        ),
        GroupDef(
            "payments-monitor",
            ["payments"],
            "steady, read_uncommitted",
            interval=12 * MIN,
            client="librdkafka",
            start=c.start + 25 * MIN,
            membership=((c.start + 25 * MIN, 1),),
        ),
        GroupDef(
            "ledger-reconciler",
            ["payments-ledger"],
            "steady, read_committed, commits every 10 min",
            isolation="read_committed",
            interval=10 * MIN,
            start=c.start + 30 * MIN,
            membership=((c.start + 30 * MIN, 1),),
        ),
        GroupDef(
            "clickstream-sessionizer",
            ["clickstream"],
            "bursty producer: lag jumps at each spike, drains",
            capacity=0.55,
            interval=6 * MIN,
            start=c.start + 10 * MIN,
            membership=((c.start + 10 * MIN, 2),),
        ),
        GroupDef(
            "clickstream-archiver",
            ["clickstream"],
            "KIP-848 group (after the upgrade), a member replaced",
            kind="consumer",
            interval=10 * MIN,
            start=c.at(5, 10),
            membership=((c.at(5, 10), 2), (c.at(8, 15, 20), "restart")),
        ),
        GroupDef(
            "inventory-sync",
            ["inventory-updates"],
            "steady",
            interval=10 * MIN,
            start=c.start + 10 * MIN,
            membership=((c.start + 10 * MIN, 1),),
        ),
        GroupDef(
            "inventory-search-indexer",
            ["inventory-updates", "catalog-changes"],
            "range-assignor skew over two topics (4 vs 2 partitions), a 3rd member evens it on day 6",
            capacity=0.05,
            interval=8 * MIN,
            start=c.start + 20 * MIN,
            membership=((c.start + 20 * MIN, 2), (c.at(6, 9, 30), 3)),
        ),
        GroupDef(
            "catalog-cache",
            ["catalog-changes"],
            "steady, commitSync of every partition",
            interval=15 * MIN,
            commit_all=True,
            start=c.start + 10 * MIN,
            membership=((c.start + 10 * MIN, 1),),
        ),
        GroupDef(
            "audit-shipper",
            ["audit-log"],
            "steady (topic with a head deleted by retention)",
            interval=10 * MIN,
            start=c.start + 10 * MIN,
            membership=((c.start + 10 * MIN, 1),),
        ),
        GroupDef(
            "audit-compliance-export",
            ["audit-log"],
            "daily job, stopped 6 days before NOW: its offsets point below the log start (retention)",
            runs=lambda c: [(c.at(d, 2), c.at(d, 2, 8)) for d in range(1, 5)],
            capacity=50.0,
            interval=2 * MIN,
        ),
        GroupDef(
            "email-notifier",
            ["notifications"],
            "stops 4 days before NOW (Empty): lag grows until NOW",
            interval=8 * MIN,
            start=c.start + 10 * MIN,
            stop=c.ago(days=4, hours=2),
            membership=((c.start + 10 * MIN, 2),),
        ),
        GroupDef(
            "push-notifier",
            ["notifications"],
            "steady, static members (restart keeps the generation)",
            static=True,
            interval=12 * MIN,
            start=c.start + 10 * MIN,
            membership=((c.start + 10 * MIN, 2), (c.at(5, 11), "restart")),
        ),
        GroupDef(
            "sms-notifier",
            ["notifications"],
            "simple group: assign() + commitSync, no membership",
            kind="simple",
            client="librdkafka",
            interval=15 * MIN,
            start=c.start + 15 * MIN,
            partitions=(("notifications", 0), ("notifications", 1)),
        ),
        GroupDef(
            "profile-cache-warmer",
            ["user-profile-changes"],
            "steady",
            interval=10 * MIN,
            start=c.start + 10 * MIN,
            membership=((c.start + 10 * MIN, 1),),
        ),
        GroupDef(
            "crm-sync",
            ["user-profile-changes"],
            "commits every 30 min (lag up to half an hour)",
            interval=30 * MIN,
            start=c.start + 60 * MIN,
            membership=((c.start + 60 * MIN, 1),),
            client="librdkafka",
            metadata="crm-batch",
        ),
        GroupDef(
            "shipment-tracker",
            ["shipments"],
            "rolling deploys every 2 days (generations climb)",
            interval=10 * MIN,
            start=c.start + 10 * MIN,
            membership=((c.start + 10 * MIN, 2),) + tuple((c.at(d, 14), "restart") for d in (2, 4, 6, 8)),
        ),
        GroupDef(
            "shipments-eta",
            ["shipments"],
            "new service on day 7: Kafka 4 writes its group Empty first",
            interval=5 * MIN,
            start=c.at(7, 11),
            membership=((c.at(7, 11), 1),),
        ),
        GroupDef(
            "customer-notify-bridge",
            ["shipments", "notifications"],
            "steady over two topics",
            protocol="roundrobin",
            interval=10 * MIN,
            start=c.start + 10 * MIN,
            membership=((c.start + 10 * MIN, 2),),
        ),
        GroupDef(
            "metrics-rollup",
            ["metrics-raw"],
            "steady, hourly bulk input (lag spikes for a minute)",
            capacity=20.0,
            interval=MIN,
            start=c.start + 10 * MIN,
            membership=((c.start + 10 * MIN, 1),),
        ),
        GroupDef(
            "metrics-alerting",
            ["metrics-raw"],
            "old Java client (no topic ids after the upgrade)",
            interval=10 * MIN,
            topic_ids=False,
            start=c.start + 10 * MIN,
            membership=((c.start + 10 * MIN, 1),),
        ),
        GroupDef(
            "search-trends",
            ["search-queries"],
            "capacity-limited: lag builds every afternoon",
            capacity=0.0016,
            interval=10 * MIN,
            start=c.start + 10 * MIN,
            membership=((c.start + 10 * MIN, 1),),
        ),
        GroupDef(
            "dlq-inspector",
            ["dead-letters"],
            "simple group, daily manual commit (DeleteRecords on its topic)",
            kind="simple",
            runs=lambda c: [(c.at(d, 9, 30), c.at(d, 9, 31)) for d in range(1, SPAN_DAYS)],
            interval=MIN,
            partitions=(("dead-letters", 0),),
            metadata="inspected",
        ),
        GroupDef(
            "reporting-nightly",
            ["orders", "shipments"],
            "nightly job (Empty by day, lag grows until 01:00)",
            runs=lambda c: [(c.at(d, 1), c.at(d, 1, 10)) for d in range(1, SPAN_DAYS + 1)],
            capacity=30.0,
            interval=2 * MIN,
        ),
    ]


@dataclass
class Member:
    member_id: str
    client_id: str
    host: str
    instance_id: str | None = None


class Events:
    """What the group coordinators write, per __consumer_offsets partition: (time, sequence,
    kind, group, payload), appended in time order later."""

    def __init__(self):
        self.by_partition: dict[int, list] = {}
        self.n = 0

    def add(self, group: str, ts: int, kind: str, payload) -> None:
        p = partition_for(group, OFFSETS_PARTITIONS)
        self.by_partition.setdefault(p, []).append((ts, self.n, kind, group, payload))
        self.n += 1


def uniform_assign(members: list[Member], tps: list, previous: dict | None) -> dict:
    """member id -> [(topic, partition)] as a stand-in for KIP-848's server-side uniform
    assignor (the broker's, not a client's: lib.assignors has the clients'): it is sticky, a
    live member keeps what it owned up to a balanced share; with nothing owned, round robin."""
    out: dict = {m.member_id: [] for m in members}
    if not members:
        return out
    ordered = sorted(members, key=lambda m: m.instance_id or m.member_id)
    if not previous:
        for k, tp in enumerate(sorted(tps)):
            out[ordered[k % len(ordered)].member_id].append(tp)
        return out
    low, extra = divmod(len(tps), len(ordered))
    free = []
    for tp in sorted(tps):
        owner = next((m for m, owned in previous.items() if tp in owned and m in out), None)
        if owner is not None and len(out[owner]) < low + (1 if extra else 0):
            out[owner].append(tp)
        else:
            free.append(tp)
    for tp in free:
        m = min(ordered, key=lambda x: (len(out[x.member_id]), x.member_id))
        out[m.member_id].append(tp)
    return out


def by_topic(tps) -> dict:
    return {t: sorted(p for tt, p in tps if tt == t) for t in sorted({t for t, _ in tps})}


class GroupSim:
    """One group over the ten days: its membership records and its commits, from positions
    that follow the partitions' end offsets (minus a processing delay), limited by a capacity
    (records/s per member) where the group has one."""

    def __init__(self, g: GroupDef, c: Clock, views: dict, events: Events, rng: random.Random, topic_ids: dict):
        self.g, self.c, self.views, self.events, self.rng, self.topic_ids = g, c, views, events, rng, topic_ids
        parts = {t: sum(1 for k in views if k[0] == t) for t in g.topics}
        self.tps = sorted(g.partitions or [(t, p) for t in g.topics for p in range(parts[t])])
        self.positions = dict.fromkeys(self.tps, 0)
        self.progress = dict.fromkeys(self.tps, 0.0)
        self.committed: dict = {}
        self.history: list = []  # (ts, {tp: offset}) of the commits that took effect
        self.generation = 0
        self.members: list[Member] = []
        self.assignment: dict = {}
        self.assigned_in: dict = {}  # KIP-848: (member, partition) -> the epoch it was assigned in

    # -- identities ----------------------------------------------------------------------------
    def new_member(self, index: int) -> Member:
        raw = self.rng.randbytes(16)
        host = f"/10.42.{self.rng.randrange(1, 250)}.{self.rng.randrange(2, 250)}"
        if self.g.kind == "consumer":  # KIP-848: the client makes a Uuid
            return Member(base64.urlsafe_b64encode(raw).decode().rstrip("="), f"consumer-{self.g.name}-1", host)
        client_id = "rdkafka" if self.g.client == "librdkafka" else f"consumer-{self.g.name}-1"
        instance = f"{self.g.name}-{index}" if self.g.static else None
        return Member(f"{client_id}-{uuid.UUID(bytes=raw, version=4)}", client_id, host, instance)

    # -- classic groups ------------------------------------------------------------------------
    def write_generation(
        self, ts: int, members: list[Member], assignment: dict, same_generation=False, owned: dict | None = None
    ) -> None:
        """`owned`: what each member held when it joined (cooperative protocols send it, with the
        generation it was held in)."""
        owned_in = self.generation
        if not same_generation:
            self.generation += 1
        self.assignment = assignment
        if not members:  # Empty: the last member left
            value = group_metadata_value(generation=self.generation, protocol=None, state_ts=ts)
        else:
            value = group_metadata_value(
                generation=self.generation,
                protocol=self.g.protocol,
                leader=members[0].member_id,
                state_ts=ts,
                members=[
                    consumer_member(
                        m.member_id,
                        sorted(self.g.topics),
                        by_topic(assignment.get(m.member_id, [])),
                        client_id=m.client_id,
                        client_host=m.host,
                        instance_id=m.instance_id,
                        session_timeout=45000 if self.g.client == "java" else 10000,
                        owned_partitions=by_topic(owned[m.member_id]) if owned and m.member_id in owned else None,
                        generation_id=owned_in if owned and m.member_id in owned else -1,
                    )
                    for m in members
                ],
            )
        self.events.add(self.g.name, ts, "group", value)

    def set_members(self, ts: int, members: list[Member]) -> None:
        previous = dict(self.assignment)
        if self.generation == 0 and ts >= self.c.upgrade:
            # Kafka 4's coordinator stores the group it creates on the first JoinGroup, Empty
            empty = group_metadata_value(protocol_type="", generation=0, protocol=None, state_ts=ts - 6)
            self.events.add(self.g.name, ts - 4, "group", empty)
        if self.g.protocol == "cooperative-sticky" and members:
            # Kafka's CooperativeStickyAssignor (lib.assignors) from what each member owned: the
            # first rebalance leaves out what moves to another member, the members then rejoin
            # owning the rest and the second hands it out
            new = self.kafka_assign(members, previous)
            if previous and sum(len(tps) for tps in new.values()) < len(self.tps):
                self.write_generation(ts, members, new, owned=previous)
                ts += self.rng.randrange(80, 400)
                previous = dict(new)
                new = self.kafka_assign(members, previous)
            self.members = members
            self.write_generation(ts, members, new, owned=previous)
            return
        new = self.kafka_assign(members, {}) if members else {}
        self.members = members
        self.write_generation(ts, members, new)

    def kafka_assign(self, members: list[Member], owned: dict) -> dict:
        """What the group leader's assignor of the group's protocol (Kafka's, lib.assignors)
        gives these members, each owning what `owned` says (cooperative-sticky reads it)."""

        topics = tuple(sorted(self.g.topics))
        counts = {t: 1 + max(p for tt, p in self.tps if tt == t) for t in topics}
        subs = [
            Subscription(
                m.member_id,
                topics,
                group_instance_id=m.instance_id,
                owned_partitions=tuple(sorted(owned.get(m.member_id, ()))),
                generation_id=self.generation if m.member_id in owned else None,
            )
            for m in members
        ]
        return kafka_assign(self.g.protocol, counts, subs)

    # -- KIP-848 groups ---------------------------------------------------------------------------
    def set_members_848(self, ts: int, members: list[Member]) -> None:
        """Joins and leaves of a KIP-848 group as the coordinator writes them (one batch):
        new members' metadata, departed members' tombstones, the group epoch, the target
        assignment; then each member's reconciled assignment after its next heartbeat."""
        g, old = self.g.name, {m.member_id for m in self.members}
        self.generation += 1
        epoch = self.generation
        # the server-side uniform assignor is sticky: a member keeps what it owns
        target = uniform_assign(members, self.tps, self.assignment)

        def ids(tps):
            return [{"topicId": self.topic_ids[t], "partitions": ps} for t, ps in by_topic(tps).items()]

        recs: list[tuple[int, str | None, dict | None]] = []
        for m in members:
            if m.member_id not in old:
                meta = {
                    "instanceId": None,
                    "rackId": None,
                    "clientId": m.client_id,
                    "clientHost": m.host,
                    "subscribedTopicNames": sorted(self.g.topics),
                    "subscribedTopicRegex": "",
                    "rebalanceTimeoutMs": 300000,
                    "serverAssignor": None,
                }
                recs.append((5, m.member_id, meta))
        for mid in sorted(old - {m.member_id for m in members}):
            recs += [(8, mid, None), (7, mid, None), (5, mid, None)]
        recs.append((3, None, {"epoch": epoch, "metadataHash": self.metadata_hash()}))
        recs += [(7, m.member_id, {"topicPartitions": ids(target[m.member_id])}) for m in members]
        recs.append((6, None, {"assignmentEpoch": epoch, "assignmentTimestamp": ts - 2}))
        self.events.add(g, ts, "records", recs)
        for k, m in enumerate(members):
            for tp in target[m.member_id]:  # the epoch each partition was assigned to its member in
                self.assigned_in.setdefault((m.member_id, tp), epoch)
            assigned = [
                dict(x, assignmentEpochs=[self.assigned_in[(m.member_id, (t, q))] for q in x["partitions"]])
                for t, x in zip(sorted({t for t, _ in target[m.member_id]}), ids(target[m.member_id]))
            ]
            current = {
                "memberEpoch": epoch,
                "previousMemberEpoch": epoch - 1 if m.member_id in old else 0,
                "state": 0,
                "assignedPartitions": assigned,
                "partitionsPendingRevocation": [],
            }
            self.events.add(g, ts + 150 + 90 * k, "records", [(8, m.member_id, current)])
        self.members = members
        self.assignment = target

    def metadata_hash(self) -> int:
        h = 0
        for t in sorted(self.g.topics):
            h = (h * 1_000_003 + int.from_bytes(base64.urlsafe_b64decode(self.topic_ids[t] + "=="), "big")) % (1 << 63)
        return h

    # -- the membership timeline ------------------------------------------------------------------
    def change(self, ts: int, op) -> None:
        apply = self.set_members_848 if self.g.kind == "consumer" else self.set_members
        if isinstance(op, int):
            members = list(self.members)
            while len(members) < op:
                members.append(self.new_member(len(members)))
            apply(ts, members[:op])
        elif op == "restart":  # a rolling restart: one pod after the other
            for k in range(len(self.members)):
                members = list(self.members)
                replacement = self.new_member(k)
                if self.g.static:
                    # a static member back under its instance id: a new member id, same generation
                    self.assignment[replacement.member_id] = self.assignment.pop(members[k].member_id)
                    members[k] = replacement
                    self.members = members
                    self.write_generation(ts, members, self.assignment, same_generation=True)
                else:
                    if self.g.kind != "consumer":  # LeaveGroup: a generation without the pod
                        apply(ts, members[:k] + members[k + 1 :])
                    members[k] = replacement
                    apply(ts + 40 * SEC, members)
                ts += 3 * MIN
        elif isinstance(op, tuple) and op[0] == "crash":  # gone without LeaveGroup: session timeout
            apply(ts + 45 * SEC, [m for k, m in enumerate(self.members) if k != op[1]])

    # -- consumption ------------------------------------------------------------------------------
    def targets(self, t: int) -> dict:
        committed = self.g.isolation == "read_committed"
        return {tp: self.views[tp].end_at(t - self.rng.randrange(*self.g.delay), committed) for tp in self.tps}

    def advance(self, t: int, dt_ms: int) -> dict:
        target = self.targets(t)
        if self.g.capacity is None:  # a consumer's position never goes back
            return {tp: max(self.positions[tp], o) for tp, o in target.items()}
        factor = 1.0
        for a, b, f in self.g.slow:
            if a <= t < b:
                factor = f
        budget = self.g.capacity * factor * max(0, dt_ms) / SEC
        if self.g.kind == "simple":
            owners = dict.fromkeys(self.tps, "")
        else:
            owners = {tp: mid for mid, tps in self.assignment.items() for tp in tps}
        out = dict(self.positions)
        for mid in sorted(set(owners.values())):
            mine = [tp for tp, o in owners.items() if o == mid]
            backlog = {tp: max(0.0, target[tp] - self.progress[tp]) for tp in mine}
            total = sum(backlog.values())
            for tp in mine:
                # progress is fractional (a record takes several ticks); the position whole
                self.progress[tp] += backlog[tp] if total <= budget else budget * backlog[tp] / total
                out[tp] = max(self.positions[tp], int(self.progress[tp]))
        return out

    def leader_epoch(self, tp, offset: int) -> int:
        """A Java client commits the leader epoch of the last record it consumed."""
        if self.g.client != "java" or offset <= 0:
            return -1
        return UPGRADED_EPOCH if offset - 1 >= self.views[tp].upgrade_offset else 0

    def value_kw(self, t: int) -> dict:
        """OffsetCommitValue v3 from the 3.9 broker, v4 from 4.x (with the topic id when the
        client sent OffsetCommit v10)."""
        if t < self.c.upgrade:
            return {"version": 3, "metadata": self.g.metadata, "topic_ids": False}
        return {"version": 4, "metadata": self.g.metadata, "topic_ids": self.g.topic_ids}

    def commit(self, t: int, positions: dict) -> None:
        changed = {tp: o for tp, o in positions.items() if self.committed.get(tp) != o}
        if not changed:
            return
        if self.g.commit_all:
            changed = {tp: positions[tp] for tp in self.tps}
        entries = [(tp, off, self.leader_epoch(tp, off)) for tp, off in sorted(changed.items())]
        self.events.add(self.g.name, t, "commit", (entries, self.value_kw(t)))
        self.committed.update(changed)
        self.history.append((t, dict(changed)))

    def ticks(self, a: int, b: int):
        t = a + self.rng.randrange(5 * SEC, 60 * SEC)
        while t < b:
            yield t
            t += int(self.g.interval * self.rng.uniform(0.8, 1.2))

    def run(self) -> None:
        g, c = self.g, self.c
        if g.runs is not None:  # a batch job: joins, consumes, commits, leaves
            for a, b in g.runs(c):
                if b >= c.end - MIN:
                    continue
                if g.kind != "simple":
                    self.change(a, 1)
                last = a
                for t in [*self.ticks(a + 2 * SEC, b - 5 * SEC), b - 2 * SEC]:
                    self.positions = self.advance(t, t - last)
                    self.commit(t, self.positions)
                    last = t
                if g.kind != "simple":
                    self.change(b, 0)
            return
        changes = sorted(g.membership) if g.kind != "simple" else []
        stop = min(g.stop or c.end, c.end - 20 * SEC)
        k, last = 0, g.start
        for t in self.ticks(g.start, stop):
            while k < len(changes) and changes[k][0] <= t:
                self.change(*changes[k])
                k += 1
            if g.kind != "simple" and not self.members:
                continue
            self.positions = self.advance(t, t - last)
            self.commit(t, self.positions)
            last = t
        if g.stop is not None and g.kind != "simple":
            self.change(g.stop, 0)


class EosSim(GroupSim):
    """payments-eos: each member has a transactional producer (a transactional.id per
    instance, KIP-447). A poll's output goes to payments-ledger, its offsets to the group by
    TxnOffsetCommit, then the coordinators write the markers; about 3% abort, and the next
    poll processes the same input again."""

    def __init__(self, *args, ledger: dict, **kw):
        super().__init__(*args, **kw)
        self.ledger = ledger  # ledger partition -> [Pending]
        self.producers = [Producer(3001 + slot, 0, True) for slot in range(2)]
        self.order = 1 << 40

    def change(self, ts: int, op) -> None:
        super().change(ts, op)
        if op == "restart":
            for p in self.producers:  # the new instances' InitProducerId: same id, next epoch
                p.bump_epoch()

    def run(self) -> None:
        g, c = self.g, self.c
        changes = sorted(g.membership)
        k = 0
        for t in self.ticks(g.start, c.end - 20 * SEC):
            while k < len(changes) and changes[k][0] <= t:
                self.change(*changes[k])
                k += 1
            target = self.targets(t)
            for slot, m in enumerate(sorted(self.members, key=lambda m: m.member_id)):
                mine = [tp for tp in self.assignment.get(m.member_id, []) if target[tp] > self.positions[tp]]
                if not mine:
                    continue
                prod = self.producers[slot]
                ts = t + 40 * slot
                n = 0
                for tp in mine:  # the output: one ledger record per payment record
                    count = self.views[tp].data_records(self.positions[tp], target[tp])
                    if count:
                        recs = [
                            (ts + n + i, b"o%05d" % self.rng.randrange(2000), b"+%d" % self.rng.randrange(100, 99999))
                            for i in range(count)
                        ]
                        self.ledger.setdefault(tp[1], []).append(
                            Pending(ts + n + count + 5, self.order, recs, prod, ZSTD)
                        )
                        self.order += 1
                        n += count
                offsets = {tp: target[tp] for tp in mine}
                sent = ts + n + 20
                entries = [(tp, off, self.leader_epoch(tp, off)) for tp, off in sorted(offsets.items())]
                self.events.add(
                    g.name, sent, "txn_commit", (entries, prod.producer_id, prod.epoch, self.value_kw(sent))
                )
                commit = self.rng.random() >= 0.03
                end = sent + self.rng.randrange(20, 90)
                for tp in mine:
                    self.ledger.setdefault(tp[1], []).append(Pending(end, self.order, None, prod, commit=commit))
                    self.order += 1
                self.events.add(g.name, end + 1, "marker", (prod.producer_id, prod.epoch, commit))
                if commit:
                    self.positions.update(offsets)
                    self.committed.update(offsets)
                    self.history.append((end + 1, dict(offsets)))


# --- the __consumer_offsets partitions --------------------------------------------------------------


def commit_value(offset: int, ts: int, leader_epoch: int, kw: dict, topic_id: str | None) -> bytes:
    return offset_commit_value(
        offset,
        ts,
        version=kw["version"],
        leader_epoch=leader_epoch,
        metadata=kw["metadata"],
        topic_id=topic_id if kw["topic_ids"] else None,
    )


def coordinator_key(record_type: int, group: str, member_id: str | None) -> bytes:
    return encode_key(CoordinatorKey(record_type, group, member_id=member_id))


def write_offsets_partitions(log_dir: str, events: Events, c: Clock, offsets_topic_id: str, topic_ids: dict) -> dict:
    """The 50 partitions: each OffsetCommit request one uncompressed batch (a record per
    partition, timestamp = commit time), a transactional batch per TxnOffsetCommit and the
    marker after it, a batch per group record set; a segment rolled after segment.ms (7 days)."""
    ends = {}
    for p in range(OFFSETS_PARTITIONS):
        b = PartitionLogBuilder(p)
        epochs = [(0, 0)]
        seg_first = None
        for ts, _, kind, group, payload in sorted(events.by_partition.get(p, []), key=lambda e: (e[0], e[1])):
            if ts >= c.upgrade and b.leader_epoch != UPGRADED_EPOCH:
                b.leader_epoch = UPGRADED_EPOCH
                assign_epoch(epochs, UPGRADED_EPOCH, b.next_offset)
            if seg_first is not None and ts - seg_first > DEFAULT_SEGMENT_MS:
                b.roll()
                seg_first = None
            if seg_first is None:
                seg_first = ts
            if kind == "commit":
                entries, kw = payload
                b.batch(
                    [
                        (offset_commit_key(group, t, q), commit_value(o, ts, e, kw, topic_ids[t]), ts)
                        for (t, q), o, e in entries
                    ]
                )
            elif kind == "txn_commit":
                entries, pid, pepoch, kw = payload
                b.batch(
                    [
                        (offset_commit_key(group, t, q), commit_value(o, ts, e, kw, None), ts)
                        for (t, q), o, e in entries
                    ],
                    producer_id=pid,
                    producer_epoch=pepoch,
                    transactional=True,
                )
            elif kind == "marker":
                pid, pepoch, commit = payload
                b.marker(pid, commit, ts, producer_epoch=pepoch)
            elif kind == "group":
                b.batch([(group_key(group), payload, ts)])
            elif kind == "records":
                b.batch(
                    [
                        (coordinator_key(rt, group, mid), None if v is None else encode_value(rt, 0, v), ts)
                        for rt, mid, v in payload
                    ]
                )
        if b.leader_epoch != UPGRADED_EPOCH:
            assign_epoch(epochs, UPGRADED_EPOCH, b.next_offset)
        write_partition_files(b.write(log_dir), offsets_topic_id, epochs)
        ends[p] = b.next_offset
    return ends


# --- the whole sample ---------------------------------------------------------------------------


def build(log_dir: str, now_ms: int, end_ms: int, offsets_topic_id: str, seed: int = SEED) -> dict:
    """Writes the generated log dir and returns what it holds (topics, groups, their facts)."""
    c = Clock(now_ms, end_ms)
    shutil.rmtree(log_dir, ignore_errors=True)
    os.makedirs(log_dir)
    defs = {t.name: t for t in topic_defs(c)}
    topic_ids = {name: topic_id_for(name, SEED) for name in defs}
    logs: dict = {}
    for name, tdef in defs.items():
        if name != "payments-ledger":
            for log in build_topic(tdef, c, random.Random(f"{seed}:{name}")):
                logs[(name, log.partition)] = log
    views = {tp: View(log) for tp, log in logs.items()}
    events = Events()
    sims: dict[str, GroupSim | EosSim] = {}
    ledger: dict = {}
    gdefs = group_defs(c)
    for g in gdefs:  # the exactly-once group first: the ledger topic is its output
        if g.name == "payments-eos":
            sim = EosSim(g, c, views, events, random.Random(f"{seed}:{g.name}"), topic_ids, ledger=ledger)
            sim.run()
            sims[g.name] = sim
    for log in build_topic(defs["payments-ledger"], c, random.Random(f"{seed}:payments-ledger"), ledger):
        logs[("payments-ledger", log.partition)] = log
        views[("payments-ledger", log.partition)] = View(log)
    for g in gdefs:
        if g.name not in sims:
            group_sim = GroupSim(g, c, views, events, random.Random(f"{seed}:{g.name}"), topic_ids)
            group_sim.run()
            sims[g.name] = group_sim
    # what retention and DeleteRecords left at NOW
    log_starts = {}
    for (name, p), log in sorted(logs.items()):
        tdef = defs[name]
        if tdef.retention_ms:
            log.delete_by_retention(c.now, tdef.retention_ms)
        if p in tdef.delete_records:
            log.delete_records(int(log.end_offset * tdef.delete_records[p]))
        log_starts[(name, p)] = log.log_start_offset
        log.write(log_dir)
    write_offsets_partitions(log_dir, events, c, offsets_topic_id, topic_ids)
    groups = {}
    for g in gdefs:
        done = sims[g.name]
        last = {}
        for _, offsets in done.history:
            last.update(offsets)
        groups[g.name] = {
            "offsets_partition": partition_for(g.name, OFFSETS_PARTITIONS),
            "topics": g.topics,
            "kind": g.kind,
            "shape": g.shape,
            "last_commit": done.history[-1][0] if done.history else None,
            "committed": {f"{t}-{p}": o for (t, p), o in sorted(last.items())},
            "lag": {f"{t}-{p}": logs[(t, p)].end_offset - o for (t, p), o in sorted(last.items())},
        }
    return {
        "now": c.now,
        "end": c.end,
        "log_starts": log_starts,
        "upgrade": c.upgrade,
        "topics": {
            f"{t}-{p}": {
                "end_offset": log.end_offset,
                "log_start_offset": log.log_start_offset,
                "batches": len(log.batches),
                "bytes": log.size_bytes,
            }
            for (t, p), log in sorted(logs.items())
        },
        "groups": groups,
    }
