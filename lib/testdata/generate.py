"""Generates realistic __consumer_offsets logs of any size for benchmarks: mostly offset
commits (values v3 and v4, several partitions per commit request, as the coordinator batches
them), group metadata with consumer-protocol members, transactional commits with markers,
tombstones, and a share of compressed batches. Deterministic for a given seed."""

from __future__ import annotations

import os
import random
import struct
import zlib

from lib.codec.writer import encode_batch, encode_control_batch
from lib.replay.partitioning import partition_for
from lib.testdata.logbuilder import consumer_member, group_key, group_metadata_value, offset_commit_key

T0 = 1_760_000_000_000
# Bumped whenever the bytes written change, so cached benchmark logs are made anew
# (2: LZ4 frames with independent blocks, as Kafka writes them; stable topic names).
GENERATOR_VERSION = 2


def _topic_of(group: str) -> str:
    # a stable hash: str.__hash__ changes with every interpreter (PYTHONHASHSEED)
    return f"topic-{zlib.crc32(group.encode()) % 97}"


_V3 = struct.Struct(">hqih")  # version, offset, leaderEpoch, metadata length 0 ...
_TS = struct.Struct(">q")


def _value_v3(offset: int, ts: int, epoch: int) -> bytes:
    return _V3.pack(3, offset, epoch, 0) + _TS.pack(ts)


def _value_v4(offset: int, ts: int, epoch: int) -> bytes:
    # compact metadata "" (uvarint 1), no tagged fields
    return struct.pack(">hqi", 4, offset, epoch) + b"\x01" + _TS.pack(ts) + b"\x00"


def generate_log(
    log_dir: str,
    records: int,
    *,
    partitions: int = 50,
    groups: int = 2000,
    seed: int = 7,
    segment_bytes: int = 100 * 1024 * 1024,
    compressed_share: float = 0.1,
    topics_per_group: int = 4,
    partitions_per_topic: int = 12,
    start_ts: int = T0,
) -> dict:
    """Writes `records` records (approximately; whole batches) and returns what it wrote."""
    rng = random.Random(seed)
    group_ids = [f"group-{i:05d}" for i in range(groups)]
    by_partition: dict[int, list[str]] = {}
    for g in group_ids:
        by_partition.setdefault(partition_for(g, partitions), []).append(g)
    per_partition = max(1, records // max(1, len(by_partition)))
    written = 0
    stats = {"records": 0, "batches": 0, "partitions": len(by_partition), "segments": 0}
    for p, gs in sorted(by_partition.items()):
        folder = os.path.join(log_dir, f"__consumer_offsets-{p}")
        os.makedirs(folder, exist_ok=True)
        offset = 0
        seg_base = 0
        seg = open(os.path.join(folder, f"{seg_base:020d}.log"), "wb")
        seg_size = 0
        stats["segments"] += 1
        committed = dict.fromkeys(gs, 0)
        keys = {
            g: [
                (t, q, offset_commit_key(g, f"{_topic_of(g)}-{t}", q))
                for t in range(topics_per_group)
                for q in range(partitions_per_topic)
            ]
            for g in gs
        }
        ts = start_ts
        producer = 10_000 + p * 1000
        n = 0
        while n < per_partition:
            g = gs[rng.randrange(len(gs))]
            roll = rng.random()
            ts += rng.randrange(1, 50)
            if roll < 0.01:
                members = [
                    consumer_member(f"{g}-m{i}", [f"{_topic_of(g)}-0"], {f"{_topic_of(g)}-0": [i]}) for i in range(3)
                ]
                batch = encode_batch(
                    offset,
                    [
                        (
                            offset,
                            ts,
                            group_key(g),
                            group_metadata_value(generation=rng.randrange(1, 50), members=members, state_ts=ts),
                        )
                    ],
                    base_sequence=0,
                )
                count, span = 1, 1
            elif roll < 0.015:
                # a transactional commit of 4 offsets, then its marker
                chosen = rng.sample(keys[g], 4)
                committed[g] += 10
                recs = [(offset + i, ts, k, _value_v3(committed[g], ts, 0)) for i, (_, _, k) in enumerate(chosen)]
                batch = encode_batch(
                    offset, recs, producer_id=producer, producer_epoch=0, base_sequence=0, transactional=True
                )
                batch += encode_control_batch(offset + 4, producer, 0, rng.random() < 0.8, ts)
                producer += 1
                count, span = 5, 5
            elif roll < 0.02:
                _, _, k = keys[g][rng.randrange(len(keys[g]))]
                batch = encode_batch(offset, [(offset, ts, k, None)], base_sequence=0)
                count, span = 1, 1
            else:
                chosen = rng.sample(keys[g], rng.randrange(1, 9))
                committed[g] += rng.randrange(1, 1000)
                make = _value_v4 if roll < 0.5 else _value_v3
                recs = [(offset + i, ts, k, make(committed[g] + q, ts, 3)) for i, (_, q, k) in enumerate(chosen)]
                codec = rng.choice((1, 2, 3, 4)) if rng.random() < compressed_share else 0
                batch = encode_batch(offset, recs, base_sequence=0, compression=codec)
                count, span = len(recs), len(recs)
            if seg_size + len(batch) > segment_bytes and seg_size:
                seg.close()
                seg_base = offset
                seg = open(os.path.join(folder, f"{seg_base:020d}.log"), "wb")
                seg_size = 0
                stats["segments"] += 1
            seg.write(batch)
            seg_size += len(batch)
            offset += span
            n += count
            stats["batches"] += 1
        seg.close()
        written += n
    stats["records"] = written
    return stats
