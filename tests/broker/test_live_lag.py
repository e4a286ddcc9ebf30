"""Consumer lag from a live cluster: each run samples ListOffsets (LATEST, and MAX_TIMESTAMP,
KIP-734) for the topic partitions groups commit on into partition_end_offsets (source
list_offsets), and group_lag is computed from those samples. The samples equal what the broker
answers to ListOffsets right after the run (asked independently, with librdkafka's admin client);
the lag in records at the run equals the broker's end offset minus the committed offset (as
`kafka-consumer-groups --describe` shows it); the lag in time is interpolated between two runs'
samples, as kafka-lag-exporter does, and equals the value worked out by hand from the sample
rows."""

from __future__ import annotations

import math
import os
import time

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import OffsetSpec

from tests.broker import scenarios as S
from tests.broker.compare import committed_offsets
from tests.helpers import lag_answers

pytestmark = [pytest.mark.broker, pytest.mark.spark]

TOPIC, GONE = "livelag-orders", "livelag-gone"
BEHIND, FOLLOWER, IDLE = "livelag-behind", "livelag-follower", "livelag-idle"


def _now_ms() -> int:
    return int(time.time() * 1000)


def _ms(ts) -> int:
    return round(ts.timestamp() * 1000)


def _produce(bootstrap: str, topic: str, counts: dict[int, int]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for partition, n in counts.items():
        for i in range(n):
            p.produce(topic, value=b"v%d" % i, partition=partition)
    assert p.flush(30) == 0


def _broker_list_offsets(bootstrap: str, tps: list[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, int | None]]:
    """ListOffsets asked by librdkafka's admin client: (latest end offset, timestamp of the
    newest record or None where the partition holds none)."""
    a = S.admin(bootstrap)
    asked = [TopicPartition(t, p) for t, p in tps]
    latest = a.list_offsets({tp: OffsetSpec.latest() for tp in asked})
    latest_got = {(tp.topic, tp.partition): f.result(30).offset for tp, f in latest.items()}
    newest = a.list_offsets({tp: OffsetSpec.max_timestamp() for tp in asked})
    newest_got = {(tp.topic, tp.partition): f.result(30) for tp, f in newest.items()}
    return {
        k: (latest_got[k], newest_got[k].timestamp if newest_got[k].offset >= 0 else None) for k in sorted(latest_got)
    }


def _topic_id(broker, topic: str, partition: int) -> str:
    with open(os.path.join(broker.log_dir, f"{topic}-{partition}", "partition.metadata")) as f:
        return dict(line.split(": ", 1) for line in f.read().splitlines())["topic_id"]


def _samples(spark, wh, run_id: str) -> dict[tuple[str, int], dict]:
    rows = spark.read.format("delta").load(str(wh / "partition_end_offsets")).where(f"run_id = '{run_id}'").collect()
    assert {r["source"] for r in rows} == {"list_offsets"}
    return {(r["topic"], r["partition"]): r.asDict() for r in rows}


def _now_rows(spark, wh, now_ms: int) -> dict[tuple[str, str, int], dict]:
    rows = spark.read.format("delta").load(str(wh / "group_lag")).where("kind = 'now'").collect()
    return {(r["group_id"], r["topic"], r["partition"]): r.asDict() for r in rows if _ms(r["at"]) == now_ms}


def _run(spark, bootstrap: str, wh, now_ms: int):
    from lib.source.logdir import live_partitions
    from lib.spark.pipeline import run_replay

    result = run_replay(spark, live_partitions(bootstrap), str(wh), now_ms)
    assert result.lag is not None and result.lag.skipped is None
    return result


def _check_run(spark, bootstrap, wh, result, before_ms: int, after_ms: int, kafka4) -> dict:
    """The run's samples against ListOffsets asked right after it; returns them by partition."""
    samples = _samples(spark, wh, result.run_id)
    broker = _broker_list_offsets(bootstrap, sorted(samples))
    assert {
        k: (r["end_offset"], None if r["max_timestamp"] is None else _ms(r["max_timestamp"]))
        for k, r in samples.items()
    } == broker
    for (topic, partition), r in samples.items():
        assert before_ms <= _ms(r["at"]) <= after_ms  # this machine's clock at the sample
        assert r["topic_id"] == _topic_id(kafka4, topic, partition)
        assert [r[c] for c in ("first_offset", "first_timestamp", "segment_file", "byte_position")] == [None] * 4
    assert {(TOPIC, p) for p in range(3)} <= set(samples)
    assert not any(t == GONE for t, _ in samples)  # deleted: skipped, no error
    return samples


def test_sampled_end_offsets_and_lag_from_the_live_cluster(spark, tmp_path, kafka4):
    b = kafka4.bootstrap
    S.create_topic(b, TOPIC, 3, messages=0)
    S.create_topic(b, GONE, 1, messages=0)
    # partition 0: offsets 0..9; partition 1: 0..5; partition 2 stays empty
    _produce(b, TOPIC, {0: 10, 1: 6})
    _produce(b, GONE, {0: 3})
    S.standalone_commit(b, BEHIND, TOPIC, {0: 4, 1: 6})  # 6 behind on 0, caught up on 1
    S.standalone_commit(b, FOLLOWER, TOPIC, {0: 10})  # caught up, then stops
    S.standalone_commit(b, IDLE, TOPIC, {2: 0})  # an empty partition: nothing to read
    S.standalone_commit(b, IDLE, GONE, {0: 1})
    a = S.admin(b)
    for f in a.delete_topics([GONE]).values():
        f.result(30)
    deadline = time.monotonic() + 30
    while GONE in a.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, f"{GONE} still listed"
        time.sleep(0.2)
    # the coordinator drops the group's offsets on the deleted topic (writes their tombstones)
    # once the deletion reaches it, which can come after the topic is gone from the listing
    while any(t == GONE for t, _ in committed_offsets(b, IDLE)):
        assert time.monotonic() < deadline, f"{IDLE} still has offsets on {GONE}"
        time.sleep(0.2)
    wh = tmp_path / "wh"

    # run 1: one sample
    now1 = _now_ms()
    first = _run(spark, b, wh, now1)
    after1 = _now_ms()
    samples1 = _check_run(spark, b, wh, first, now1, after1, kafka4)
    assert {p: samples1[(TOPIC, p)]["end_offset"] for p in range(3)} == {0: 10, 1: 6, 2: 0}
    assert samples1[(TOPIC, 2)]["max_timestamp"] is None  # MAX_TIMESTAMP of an empty partition: -1
    committed = {g: committed_offsets(b, g) for g in (BEHIND, FOLLOWER, IDLE)}
    rows1 = _now_rows(spark, wh, now1)
    expected = {}
    for g, offsets in committed.items():
        for (t, p), (offset, _, _) in offsets.items():
            if t == TOPIC:
                end = samples1[(t, p)]["end_offset"]
                expected[(g, t, p)] = (offset, end, end - offset, samples1[(t, p)]["at"])
    assert {
        k: (r["committed_offset"], r["end_offset"], r["lag_records"], r["end_offset_at"])
        for k, r in rows1.items()
        if k[1] == TOPIC
    } == expected
    assert expected[(BEHIND, TOPIC, 0)][2] == 6
    # one sample: no time lag for who is behind (nothing to interpolate between), 0 for the rest
    assert {k: (r["lag_ms"], r["lag_ms_method"]) for k, r in rows1.items() if k[1] == TOPIC} == {
        (BEHIND, TOPIC, 0): (None, None),
        (BEHIND, TOPIC, 1): (0, "caught_up"),
        (FOLLOWER, TOPIC, 0): (0, "caught_up"),
        (IDLE, TOPIC, 2): (0, "caught_up"),
    }
    # the deleted topic: its partition was asked for (a group committed on it: the commit has its
    # lag row, with no end offset) and skipped; the broker dropped the group's offset with the
    # topic (a tombstone), so it has no now row
    gone = spark.read.format("delta").load(str(wh / "group_lag")).where(f"topic = '{GONE}'").collect()
    assert [(r["group_id"], r["kind"], r["committed_offset"], r["end_offset"]) for r in gone] == [
        (IDLE, "commit", 1, None)
    ]
    assert (GONE, 0) not in committed[IDLE] and (IDLE, GONE, 0) not in rows1
    # the stage stopped at each partition's sample (and each offsets partition's watermark)
    checkpoints = spark.read.format("delta").load(str(wh / "lag_checkpoints")).collect()
    assert {
        (r["topic"], r["partition"]): (r["next_offset"], r["at_ms"]) for r in checkpoints if r["topic"] == TOPIC
    } == {(TOPIC, p): (samples1[(TOPIC, p)]["end_offset"], _ms(samples1[(TOPIC, p)]["at"])) for p in range(3)}
    # (every sampled partition has its checkpoint: those of other tests' groups on this broker too;
    # the deleted topic's partition, asked for and skipped, has none)
    assert {TOPIC, "__consumer_offsets"} <= {r["topic"] for r in checkpoints}
    assert GONE not in {r["topic"] for r in checkpoints}

    # run 2: partition 0 grows by 10 (offsets 10..19); BEHIND reads up to 12; FOLLOWER stays
    time.sleep(1)
    _produce(b, TOPIC, {0: 10})
    S.standalone_commit(b, BEHIND, TOPIC, {0: 12})
    time.sleep(1)
    now2 = _now_ms()
    second = _run(spark, b, wh, now2)
    after2 = _now_ms()
    samples2 = _check_run(spark, b, wh, second, now2, after2, kafka4)
    assert {p: samples2[(TOPIC, p)]["end_offset"] for p in range(3)} == {0: 20, 1: 6, 2: 0}
    ends = spark.read.format("delta").load(str(wh / "partition_end_offsets")).where(f"topic = '{TOPIC}'")
    assert sorted((r["partition"], r["end_offset"]) for r in ends.collect()) == [
        (0, 10),
        (0, 20),
        (1, 6),
        (1, 6),
        (2, 0),
        (2, 0),
    ]
    rows2 = _now_rows(spark, wh, now2)
    committed2 = {g: committed_offsets(b, g) for g in (BEHIND, FOLLOWER)}
    e1, t1 = samples1[(TOPIC, 0)]["end_offset"], _ms(samples1[(TOPIC, 0)]["at"])
    e2, t2 = samples2[(TOPIC, 0)]["end_offset"], _ms(samples2[(TOPIC, 0)]["at"])

    def interpolated_lag_ms(committed_offset: int) -> int:
        # kafka-lag-exporter's estimate of when the first unconsumed record (committed_offset)
        # was written: linear interpolation, between the samples around it, of the time at
        # which the partition's end offset passed committed_offset + 1,
        #     t = t1 + (committed_offset + 1 - e1) * (t2 - t1) / (e2 - e1)   (e1 <= committed_offset < e2),
        # floored to the millisecond; the lag in time at now is now - t (at least 0)
        t = t1 + (committed_offset + 1 - e1) * (t2 - t1) / (e2 - e1)
        return max(0, now2 - math.floor(t))

    for g, c in ((BEHIND, 12), (FOLLOWER, 10)):
        assert committed2[g][(TOPIC, 0)][0] == c
        r = rows2[(g, TOPIC, 0)]
        assert (r["committed_offset"], r["end_offset"], r["lag_records"], r["end_offset_at"]) == (
            c,
            e2,
            e2 - c,
            samples2[(TOPIC, 0)]["at"],
        )
        assert (r["lag_ms"], r["lag_ms_method"]) == (interpolated_lag_ms(c), "interpolated")
        assert r["lag_ms"] > 0
    # the commit to 12 in between: as of its time the end offset known is the first sample's
    # (10), below what the group had read, so it counts as caught up then
    commit = [
        r
        for r in spark.read.format("delta").load(str(wh / "group_lag")).where("kind = 'commit'").collect()
        if (r["group_id"], r["topic"], r["partition"], r["committed_offset"]) == (BEHIND, TOPIC, 0, 12)
    ]
    assert [(r["end_offset"], r["lag_records"], r["run_id"]) for r in commit] == [(12, 0, second.run_id)]

    # the same lag in every answer (lag_at, lag_history, groups_falling_behind, the report's
    # form), from before the first sample (the commits came before it: no end offset known,
    # NULL) to the second run
    first_commit = min(
        _ms(r["at"])
        for r in spark.read.format("delta").load(str(wh / "group_lag")).where("kind = 'commit'").collect()
        if r["group_id"] == BEHIND
    )
    # (the now rows of a live run take the sample made during the run, a moment after its --now:
    # the last instant here is after the second run, where every answer sees that sample)
    step = (after2 - first_commit) // 4
    instants = [first_commit + i * step for i in range(5)]
    answers = lag_answers(spark, str(wh), [BEHIND, FOLLOWER], instants)
    before_sample = {k: v for k, v in answers.items() if k[1] < _ms(samples1[(TOPIC, 0)]["at"]) and k[2] == TOPIC}
    assert before_sample and all(v[1:] == (None, None, None) for v in before_sample.values())
    assert answers[(BEHIND, instants[-1], TOPIC, 0)][:3] == (12, e2, e2 - 12)
