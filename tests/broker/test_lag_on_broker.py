"""Consumer lag on a real broker: known records produced to a plain and a zstd topic, consumers
that read and commit at known positions (one stops), the log dir copied, replayed. The lag at
the copy equals what the broker itself reports (ListOffsets latest minus the committed offset,
as `kafka-consumer-groups --describe` shows it), and the lag at earlier instants equals values
worked out from the delivery reports (each record's offset and timestamp, as the broker
acknowledged them) and the local clock between phases."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import OffsetSpec

from tests.broker import scenarios as S
from tests.broker.compare import committed_offsets
from tests.broker.kafka_broker import snapshot_offsets_log_dir

pytestmark = [pytest.mark.broker, pytest.mark.spark]

PLAIN, ZSTD = "lag-plain", "lag-zstd"


def _now_ms() -> int:
    return int(time.time() * 1000)


def _pause() -> None:
    time.sleep(0.2)  # phases apart by more than the clocks' millisecond


class Log:
    """Produce records and keep what the broker acknowledged: (topic, partition, offset) -> ts."""

    def __init__(self, bootstrap: str):
        self.bootstrap = bootstrap
        self.timestamps: dict[tuple[str, int, int], int] = {}

    def produce(self, topic: str, per_partition: int, compression: str) -> None:
        p = Producer({"bootstrap.servers": self.bootstrap, "compression.type": compression, "linger.ms": 50})

        def delivered(err, msg):
            assert err is None, err
            self.timestamps[(msg.topic(), msg.partition(), msg.offset())] = msg.timestamp()[1]

        for i in range(per_partition):
            for part in (0, 1):
                p.produce(topic, value=b"v%d" % i, partition=part, on_delivery=delivered)
        assert p.flush(30) == 0

    def ts(self, topic: str, partition: int, offset: int) -> int:
        return self.timestamps[(topic, partition, offset)]


def _consume_to(c, topic: str, partition: int, start: int, position: int) -> None:
    """Read the partition's records from `start` up to `position` (exclusive) and commit it, as
    a consumer does."""
    deadline = time.monotonic() + 60
    last = start - 1
    while last + 1 < position:
        assert time.monotonic() < deadline, f"could not read {topic}-{partition} up to {position}"
        for m in c.consume(num_messages=position - last - 1, timeout=1.0):
            assert m.error() is None, m.error()
            last = m.offset()
    assert last + 1 == position
    c.commit(offsets=[TopicPartition(topic, partition, position)], asynchronous=False)


def _latest(bootstrap: str, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    a = S.admin(bootstrap)
    futures = a.list_offsets({TopicPartition(t, p): OffsetSpec.latest() for t, p in tps})
    return {(tp.topic, tp.partition): f.result(30).offset for tp, f in futures.items()}


def test_lag_equals_the_brokers_and_the_hand_values(spark, replay_logdir, tmp_path, kafka4):
    from lib.reporting.audit_queries import bind, collect, load_queries, open_catalog, run_query

    b = kafka4.bootstrap
    for topic in (PLAIN, ZSTD):
        S.create_topic(b, topic, 2, messages=0)
    log = Log(b)
    # phase A: offsets 0..9 of each partition
    log.produce(PLAIN, 10, "none")
    log.produce(ZSTD, 10, "zstd")
    _pause()
    reader = S.consumer(b, "lag-reader")
    reader.assign([TopicPartition(ZSTD, 0, 0)])
    before_c1 = _now_ms()
    _consume_to(reader, ZSTD, 0, 0, 6)
    after_c1 = _now_ms()
    S.standalone_commit(b, "lag-stopper", PLAIN, {0: 10, 1: 10})  # caught up, then stops
    _pause()
    # phase B: offsets 10..14
    log.produce(PLAIN, 5, "none")
    log.produce(ZSTD, 5, "zstd")
    _pause()
    mid_b = _now_ms()
    _pause()
    _consume_to(reader, ZSTD, 0, 6, 13)
    reader.close()
    _pause()
    # phase C: offsets 15..19
    log.produce(PLAIN, 5, "none")
    log.produce(ZSTD, 5, "zstd")
    _pause()
    latest = _latest(b, [(t, p) for t in (PLAIN, ZSTD) for p in (0, 1)])
    committed = {**committed_offsets(b, "lag-reader"), **committed_offsets(b, "lag-stopper")}
    now = _now_ms()
    copy = snapshot_offsets_log_dir(kafka4, str(tmp_path / "copy"), topics=(PLAIN, ZSTD))
    wh = tmp_path / "wh"
    replay_logdir(copy, wh, now)

    rows = [r.asDict() for r in spark.read.format("delta").load(str(wh / "group_lag")).collect()]
    mine = [r for r in rows if r["group_id"] in ("lag-reader", "lag-stopper")]
    at = {(r["group_id"], r["topic"], r["partition"], r["kind"], r["committed_offset"]): r for r in mine}

    # one batch per phase (linger): records 6 and 13 sit inside zstd batches, whose timestamps
    # come from decoding them; partition 1, on which no group commits, is not read
    ends = spark.read.format("delta").load(str(wh / "partition_end_offsets")).where(f"topic = '{ZSTD}'")
    assert sorted((r["partition"], r["end_offset"]) for r in ends.collect()) == [
        (0, 10),
        (0, 15),
        (0, 20),
    ]
    # at the copy: what the broker reports
    assert latest == {(PLAIN, 0): 20, (PLAIN, 1): 20, (ZSTD, 0): 20, (ZSTD, 1): 20}
    now_rows = {(r["group_id"], r["topic"], r["partition"]): r for r in mine if r["kind"] == "now"}
    assert {k: (r["committed_offset"], r["end_offset"], r["lag_records"]) for k, r in now_rows.items()} == {
        (g, t, p): (committed[(t, p)][0], latest[(t, p)], latest[(t, p)] - committed[(t, p)][0])
        for g, t, p in [("lag-reader", ZSTD, 0), ("lag-stopper", PLAIN, 0), ("lag-stopper", PLAIN, 1)]
    }
    # in time: the first unread record's age at the copy (its timestamp from the delivery report)
    assert now_rows[("lag-reader", ZSTD, 0)]["lag_ms"] == now - log.ts(ZSTD, 0, 13)
    assert now_rows[("lag-stopper", PLAIN, 1)]["lag_ms"] == now - log.ts(PLAIN, 1, 10)
    assert {r["lag_ms_method"] for r in now_rows.values()} == {"record"}

    # at each commit: the first (6, after phase A) and the second (13, after phase B)
    c1 = at[("lag-reader", ZSTD, 0, "commit", 6)]
    c1_ms = int(c1["at"].timestamp() * 1000)
    assert before_c1 <= c1_ms <= after_c1
    assert (c1["end_offset"], c1["lag_records"], c1["lag_ms"]) == (10, 4, c1_ms - log.ts(ZSTD, 0, 6))
    c2 = at[("lag-reader", ZSTD, 0, "commit", 13)]
    c2_ms = int(c2["at"].timestamp() * 1000)
    assert (c2["end_offset"], c2["lag_records"], c2["lag_ms"]) == (15, 2, c2_ms - log.ts(ZSTD, 0, 13))
    stop = at[("lag-stopper", PLAIN, 0, "commit", 10)]
    assert (stop["end_offset"], stop["lag_records"], stop["lag_ms"], stop["lag_ms_method"]) == (10, 0, 0, "caught_up")

    # earlier instants: the stopped group's lag in the middle of phase B's aftermath and at the copy
    open_catalog(spark, str(wh))
    try:
        q = load_queries()["lag_history"]
        since, until = str(mid_b), str(now)  # epoch ms
        _, hist = collect(
            run_query(
                spark,
                q,
                bind(q, {"group": "lag-stopper", "since": since, "until": until, "bucket": f"{now - mid_b}ms"}),
            )
        )
    finally:
        spark.catalog.setCurrentDatabase("default")
    assert [(r["partition"], int(r["at"].timestamp() * 1000), r["lag_records"], r["lag_ms"]) for r in hist] == [
        (0, mid_b, 5, mid_b - log.ts(PLAIN, 0, 10)),
        (0, now, 10, now - log.ts(PLAIN, 0, 10)),
        (1, mid_b, 5, mid_b - log.ts(PLAIN, 1, 10)),
        (1, now, 10, now - log.ts(PLAIN, 1, 10)),
    ]
