"""Builds samples/days: a Kafka broker log dir spanning ten days, for the consumer-lag work.

It holds what a broker's log.dirs holds for these: the 50 `__consumer_offsets-<P>` partitions
AND the consumed topics' own partitions (`<topic>-<partition>/`, their record batches), with
replication-offset-checkpoint and log-start-offset-checkpoint. The ten days are generated
(deterministically: fixed seed, times fixed relative to NOW) by the simulator in
lib.testdata.days, with the project's builders (lib.testdata.logbuilder for the coordinator's
records, lib.testdata.topicbuilder for the topics) and Kafka's assignors (lib.assignors):
13 topics, 28 groups of different shapes (steady, bursty, falling behind and catching up,
stopped, rebalancing, expiring, exactly-once, KIP-848, simple).
`--with-broker` adds a short capture from a real Kafka broker driven by real kafka-python
clients (samples/days/capture/), merged into the generated history, which ends before it.

    PYTHONPATH=. .venv/bin/python samples/make_days_sample.py                # regenerate
    PYTHONPATH=. .venv/bin/python samples/make_days_sample.py --with-broker  # capture anew
    PYTHONPATH=. .venv/bin/python samples/make_days_sample.py --summary      # the groups' table

Without --with-broker an existing capture (samples/days/capture/) is merged again, so the
output is the same bytes every time; `--no-capture` leaves it out (and NOW is then the fixed
2026-11-20T12:00:00Z).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from lib.replay.partitioning import partition_for  # noqa: E402
from lib.testdata.days import (  # noqa: E402
    DAY,
    DEFAULT_NOW_MS,
    MIN,
    OFFSETS_PARTITIONS,
    OFFSETS_TOPIC,
    SEC,
    SEED,
    SPAN_DAYS,
    Clock,
    build,
    group_defs,
    iso,
    topic_defs,
)
from lib.testdata.topicbuilder import topic_id_for, write_checkpoints  # noqa: E402

OUT = os.path.join(HERE, "days")
CAPTURE = os.path.join(OUT, "capture")


# --- a real broker's capture ------------------------------------------------------------------------

CAPTURE_TOPICS = {"live-orders": 3, "live-clicks": 2}
CAPTURE_SECONDS = 40


def pick_group_name(base: str, avoid: set[int]) -> str:
    """The first of base, base-2, base-3 ... whose __consumer_offsets partition is not in avoid."""
    n = 1
    while True:
        name = base if n == 1 else f"{base}-{n}"
        if partition_for(name, OFFSETS_PARTITIONS) not in avoid:
            return name
        n += 1


def capture(capture_dir: str = CAPTURE, seconds: int = CAPTURE_SECONDS) -> dict:
    """Starts a real Kafka 4.x broker (jars from `make setup`) with 50 __consumer_offsets
    partitions, produces to two topics of its own and consumes them with real kafka-python
    groups (auto commit, manual commits with a slow consumer, a member joining, a group that
    leaves) for `seconds`, then copies the partitions holding records into capture_dir/logdir
    and writes capture_dir/capture.json (its NOW and where the generated history must end)."""
    import tempfile
    import threading
    import time

    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import NewTopic

    from tests.broker.kafka_broker import KafkaBroker, snapshot_offsets_log_dir

    clock = Clock(DEFAULT_NOW_MS, DEFAULT_NOW_MS)
    used = {partition_for(g.name, OFFSETS_PARTITIONS) for g in group_defs(clock)}
    taken = {t.name for t in topic_defs(clock)}
    assert not taken & set(CAPTURE_TOPICS), "captured topics must not be generated ones"
    groups = {}
    for base, topic, shape in (
        ("live-orders-processor", "live-orders", "real: 2 members, auto commit every second; a 3rd joins"),
        ("live-clicks-counter", "live-clicks", "real: slow consumer, manual commitSync every 3 s (lag builds)"),
        ("live-orders-auditor", "live-orders", "real: joins, commits, leaves after 15 s (Empty, lag grows)"),
    ):
        name = pick_group_name(base, used)
        used.add(partition_for(name, OFFSETS_PARTITIONS))
        groups[name] = {"offsets_partition": partition_for(name, OFFSETS_PARTITIONS), "topics": [topic], "shape": shape}
    names = list(groups)
    work = tempfile.mkdtemp(prefix="days-capture-")
    broker = KafkaBroker(os.path.join(REPO, ".jars", "kafka4"), work, offsets_partitions=OFFSETS_PARTITIONS)
    broker.start()
    stop = threading.Event()
    consumers: list = []
    errors: list = []
    try:
        admin = broker.admin()
        admin.create_topics([NewTopic(t, n, 1) for t, n in CAPTURE_TOPICS.items()])
        admin.close()
        started_ms = int(time.time() * 1000)

        def produce(topic, compression, rate, linger):
            p = KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type=compression, linger_ms=linger)
            rng = random.Random(topic)
            t_end = time.monotonic() + seconds
            while time.monotonic() < t_end and not stop.is_set():
                burst = 4 if topic == "live-clicks" and 15 < seconds - (t_end - time.monotonic()) < 22 else 1
                for _ in range(burst):
                    if topic == "live-orders":  # an order: keyed by customer, lz4 pays off on a few of them
                        key = b"c%04d" % rng.randrange(500)
                        value = b'{"order":%d,"customer":"%s","amount":%d,"status":"NEW"}' % (
                            rng.randrange(10**6),
                            key,
                            rng.randrange(100, 99999),
                        )
                    else:
                        key, value = None, b"/p/%d" % rng.randrange(800)
                    p.send(topic, key=key, value=value)
                time.sleep(rng.expovariate(rate))
            p.flush(30)
            p.close()

        def consume(group, topic, *, auto, delay=0.0, leave_after=None, join_after=0.0):
            time.sleep(join_after)
            c = KafkaConsumer(
                topic,
                bootstrap_servers=broker.bootstrap,
                group_id=group,
                enable_auto_commit=auto,
                auto_commit_interval_ms=1000,
                auto_offset_reset="earliest",
                client_id=f"{group}-{len(consumers)}",
            )
            consumers.append(c)
            t0 = time.monotonic()
            last_commit = time.monotonic()
            try:
                while not stop.is_set():
                    for records in c.poll(timeout_ms=200, max_records=20).values():
                        time.sleep(delay * len(records))
                    if not auto and time.monotonic() - last_commit >= 3:
                        c.commit()
                        last_commit = time.monotonic()
                    if leave_after is not None and time.monotonic() - t0 > leave_after:
                        if not auto:
                            c.commit()
                        c.close()
                        return
            except Exception as e:  # pragma: no cover - reported below
                errors.append(e)

        threads = [
            threading.Thread(target=produce, args=("live-orders", "lz4", 40.0, 250)),
            threading.Thread(target=produce, args=("live-clicks", "zstd", 25.0, 200)),
            threading.Thread(target=consume, args=(names[0], "live-orders"), kwargs={"auto": True}),
            threading.Thread(target=consume, args=(names[0], "live-orders"), kwargs={"auto": True, "join_after": 1}),
            threading.Thread(target=consume, args=(names[0], "live-orders"), kwargs={"auto": True, "join_after": 20}),
            threading.Thread(target=consume, args=(names[1], "live-clicks"), kwargs={"auto": False, "delay": 0.06}),
            threading.Thread(
                target=consume,
                args=(names[2], "live-orders"),
                kwargs={"auto": False, "join_after": 8, "leave_after": 15},
            ),
        ]
        for t in threads:
            t.start()
        for t in threads[:2]:
            t.join()
        time.sleep(4)  # the consumers catch up what they can; the groups settle
        if errors:
            raise RuntimeError(f"client errors: {errors}")
        out = os.path.join(capture_dir, "logdir")
        shutil.rmtree(capture_dir, ignore_errors=True)
        snap = os.path.join(work, "snapshot")
        snapshot_offsets_log_dir(broker, snap)
        for topic, n in CAPTURE_TOPICS.items():
            for p in range(n):
                src = os.path.join(broker.log_dir, f"{topic}-{p}")
                shutil.copytree(
                    src,
                    os.path.join(snap, f"{topic}-{p}"),
                    ignore=shutil.ignore_patterns("*.index", "*.timeindex", "*.txnindex", "*.snapshot"),
                )
        now_ms = int(time.time() * 1000)
        offsets_topic_id = None
        for name in sorted(os.listdir(snap)):
            folder = os.path.join(snap, name)
            if not os.path.isdir(folder):
                continue
            if name.startswith(OFFSETS_TOPIC + "-"):
                with open(os.path.join(folder, "partition.metadata")) as f:
                    offsets_topic_id = f.read().split("topic_id:")[1].strip()
                if not any(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder) if f.endswith(".log")):
                    continue
                p = int(name.rsplit("-", 1)[1])
                if p in {partition_for(g.name, OFFSETS_PARTITIONS) for g in group_defs(clock)}:
                    raise RuntimeError(f"the capture wrote to {name}, a partition of the generated groups")
            shutil.copytree(folder, os.path.join(out, name))
        info = {
            "kafka_version": broker.version,
            "started_ms": started_ms,
            "now_ms": now_ms,
            "history_end_ms": started_ms - 5 * SEC,
            "offsets_topic_id": offsets_topic_id,
            "topics": CAPTURE_TOPICS,
            "groups": groups,
        }
        with open(os.path.join(capture_dir, "capture.json"), "w") as f:
            json.dump(info, f, indent=2, sort_keys=True)
            f.write("\n")
        return info
    finally:
        stop.set()
        for c in consumers:
            try:
                c.close()
            except Exception:
                pass
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)


def read_capture(capture_dir: str = CAPTURE) -> dict | None:
    path = os.path.join(capture_dir, "capture.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def merge_capture(log_dir: str, capture_dir: str = CAPTURE) -> None:
    """Copies the captured broker's partitions into the generated log dir: its
    __consumer_offsets partitions holding records (which no generated group uses) and its
    topics (which no generated group reads)."""
    src = os.path.join(capture_dir, "logdir")
    for name in sorted(os.listdir(src)):
        folder = os.path.join(src, name)
        target = os.path.join(log_dir, name)
        if name.startswith(OFFSETS_TOPIC + "-"):
            if any(os.path.getsize(os.path.join(target, f)) for f in os.listdir(target) if f.endswith(".log")):
                raise RuntimeError(f"{name} holds generated records: the captured groups must use other partitions")
        elif os.path.exists(target):
            raise RuntimeError(f"captured topic partition {name} is also generated")
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(folder, target)


def make(out_dir: str, capture_dir: str | None = CAPTURE) -> dict:
    """The whole sample into out_dir (logdir/ and NOW): generated, plus the capture in
    capture_dir when there is one (its NOW, the generated history ending before it)."""
    cap = read_capture(capture_dir) if capture_dir else None
    if cap:
        now_ms, end_ms, offsets_topic_id = cap["now_ms"], cap["history_end_ms"], cap["offsets_topic_id"]
    else:
        now_ms, end_ms, offsets_topic_id = DEFAULT_NOW_MS, DEFAULT_NOW_MS - MIN, topic_id_for(OFFSETS_TOPIC, SEED)
    log_dir = os.path.join(out_dir, "logdir")
    facts = build(log_dir, now_ms, end_ms, offsets_topic_id)
    if cap and capture_dir:
        merge_capture(log_dir, capture_dir)
        facts["capture"] = cap
    ends = write_checkpoints(log_dir, facts["log_starts"])
    if cap:
        facts["groups"].update(captured_groups(log_dir, cap, ends))
    with open(os.path.join(out_dir, "NOW"), "w") as f:
        f.write(f"{now_ms}\n")
    return facts


def captured_groups(log_dir: str, cap: dict, ends: dict) -> dict:
    """The captured groups' facts, read from their records (no transactions there)."""
    from lib.codec.segments import SegmentReader
    from lib.codec.serde import decode_key, decode_offset_commit_value

    out = {}
    for name, info in sorted(cap["groups"].items()):
        folder = os.path.join(log_dir, f"{OFFSETS_TOPIC}-{info['offsets_partition']}")
        last, last_ts = {}, None
        for seg in sorted(f for f in os.listdir(folder) if f.endswith(".log")):
            with open(os.path.join(folder, seg), "rb") as f:
                for batch in SegmentReader(f.read()):
                    for _, ts, k, v in [] if batch.is_control else batch.records:
                        key = decode_key(k)
                        if key.group_id == name and key.record_type == 1 and v is not None:
                            last[(key.topic, key.partition)] = decode_offset_commit_value(1, v).offset
                            last_ts = ts
        out[name] = {
            "offsets_partition": info["offsets_partition"],
            "topics": info["topics"],
            "kind": "classic",
            "shape": info["shape"],
            "last_commit": last_ts,
            "committed": {f"{t}-{p}": o for (t, p), o in sorted(last.items())},
            "lag": {f"{t}-{p}": ends[(t, p)][1] - o for (t, p), o in sorted(last.items())},
        }
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--with-broker", action="store_true", help="capture anew from a real broker (needs make setup)")
    ap.add_argument("--no-capture", action="store_true", help="leave an existing capture out")
    ap.add_argument("--out", default=OUT, help="where to write logdir/ and NOW (default samples/days)")
    ap.add_argument("--summary", action="store_true", help="print the groups' table")
    args = ap.parse_args(argv)
    if args.with_broker:
        info = capture(CAPTURE)
        print(f"captured Kafka {info['kafka_version']} into {CAPTURE}: groups {', '.join(info['groups'])}")
    facts = make(args.out, None if args.no_capture else CAPTURE)
    log_dir = os.path.join(args.out, "logdir")
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(log_dir) for f in fs)
    cap = facts.get("capture")
    print(
        f"wrote {log_dir}: {size / 1e6:.2f} MB, history {iso(facts['now'] - SPAN_DAYS * DAY)} .. {iso(facts['end'])}, "
        f"NOW {iso(facts['now'])} ({facts['now']})"
        + (f", with a capture of Kafka {cap['kafka_version']}" if cap else "")
    )
    if args.summary:
        print_summary(facts)
    return 0


def print_summary(facts: dict) -> None:
    """The groups as a Markdown table (samples/README.md holds it)."""
    now = facts["now"]
    print("\n| group | P | topics | shape | last commit (before NOW) | lag at NOW, records per partition |")
    print("|---|---:|---|---|---|---|")
    for name, g in facts["groups"].items():
        when = "-"
        if g["last_commit"]:
            ago = (now - g["last_commit"]) / MIN
            when = (
                f"{iso(g['last_commit'])} ({ago / 60:.1f} h)"
                if ago >= 90
                else f"{iso(g['last_commit'])} ({ago:.0f} min)"
            )
        lag = ", ".join(f"{tp.rsplit('-', 1)[1]}: {n}" for tp, n in g["lag"].items())
        if len(g["topics"]) > 1:
            lag = ", ".join(f"{tp}: {n}" for tp, n in g["lag"].items())
        topics = ", ".join(g["topics"]) + (f" ({g['kind']})" if g["kind"] != "classic" else "")
        print(f"| {name} | {g['offsets_partition']} | {topics} | {g['shape']} | {when} | {lag} |")


if __name__ == "__main__":
    sys.exit(main())
