"""Which __consumer_offsets partition holds a group (spec 5): Kafka's
abs(groupId.hashCode()) % numPartitions, with Java's String.hashCode over UTF-16 code units
and Kafka's Utils.abs (Integer.MIN_VALUE -> 0)."""

from __future__ import annotations

INT_MIN = -(1 << 31)


def java_string_hash(s: str) -> int:
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def kafka_abs(n: int) -> int:
    return 0 if n == INT_MIN else abs(n)


def partition_for(group_id: str, partition_count: int) -> int:
    if partition_count <= 0:
        raise ValueError("partition_count must be positive")
    return kafka_abs(java_string_hash(group_id)) % partition_count
