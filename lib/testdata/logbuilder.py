"""Builds __consumer_offsets logs: the records a group coordinator writes, framed into
batches and segment files. Used for test fixtures, the benchmark's generated logs and
hand-made scenarios; every byte layout is the one the reader checks against spec vectors."""

from __future__ import annotations

import os
from collections.abc import Sequence

from lib.codec.serde import CoordinatorKey, encode_assignment, encode_key, encode_subscription, encode_value
from lib.codec.writer import encode_batch, encode_control_batch, encode_legacy_message

T0 = 1_700_000_000_000


def offset_commit_key(group: str, topic: str, partition: int, record_type: int = 1) -> bytes:
    return encode_key(CoordinatorKey(record_type, group, topic, partition))


def offset_commit_value(
    offset: int,
    commit_ts: int,
    *,
    version: int = 3,
    leader_epoch: int = -1,
    metadata: str = "",
    expire_ts: int = -1,
    topic_id: str | None = None,
) -> bytes:
    data = {
        "offset": offset,
        "leaderEpoch": leader_epoch,
        "metadata": metadata,
        "commitTimestamp": commit_ts,
        "expireTimestamp": expire_ts,
    }
    if topic_id:
        data["topicId"] = topic_id
    return encode_value(0 if version == "legacy" else 1, 0 if version == "legacy" else version, data)


def group_key(group: str) -> bytes:
    return encode_key(CoordinatorKey(2, group))


def consumer_member(
    member_id: str,
    topics: list[str],
    assignment: dict[str, list[int]],
    *,
    client_id: str = "client",
    client_host: str = "/127.0.0.1",
    instance_id: str | None = None,
    session_timeout: int = 45000,
    rebalance_timeout: int = 300000,
    protocol_version: int = 3,
    owned_partitions: dict[str, list[int]] | None = None,
    generation_id: int = -1,
    user_data: bytes | None = None,
    assignment_user_data: bytes | None = None,
    rack_id: str | None = None,
) -> dict:
    owned = [{"topic": t, "partitions": p} for t, p in (owned_partitions or {}).items()]
    sub = encode_subscription(
        protocol_version,
        {
            "topics": topics,
            "userData": user_data,
            "ownedPartitions": owned,
            "generationId": generation_id,
            "rackId": rack_id,
        },
    )
    asg = encode_assignment(
        protocol_version,
        {
            "assignedPartitions": [{"topic": t, "partitions": p} for t, p in assignment.items()],
            "userData": assignment_user_data,
        },
    )
    return {
        "memberId": member_id,
        "groupInstanceId": instance_id,
        "clientId": client_id,
        "clientHost": client_host,
        "rebalanceTimeout": rebalance_timeout,
        "sessionTimeout": session_timeout,
        "subscription": sub,
        "assignment": asg,
    }


def group_metadata_value(
    *,
    protocol_type: str = "consumer",
    generation: int = 1,
    protocol: str | None = "range",
    leader: str | None = None,
    state_ts: int = -1,
    members: Sequence[dict] = (),
    version: int = 3,
) -> bytes:
    members = list(members)
    if leader is None and members:
        leader = members[0]["memberId"]
    return encode_value(
        2,
        version,
        {
            "protocolType": protocol_type,
            "generation": generation,
            "protocol": protocol,
            "leader": leader,
            "currentStateTimestamp": state_ts,
            "members": members,
        },
    )


class PartitionLogBuilder:
    """Appends batches to one partition's log; `write(log_dir)` lays out the segment files."""

    def __init__(self, partition: int, *, start_offset: int = 0, leader_epoch: int = 0):
        self.partition = partition
        self.next_offset = start_offset
        self.leader_epoch = leader_epoch
        self.segments: list[tuple[int, bytearray]] = [(start_offset, bytearray())]

    @property
    def _current(self) -> bytearray:
        return self.segments[-1][1]

    def roll(self) -> PartitionLogBuilder:
        """Start a new segment at the next offset."""
        self.segments.append((self.next_offset, bytearray()))
        return self

    def raw(self, data: bytes, records: int) -> PartitionLogBuilder:
        self._current.extend(data)
        self.next_offset += records
        return self

    def batch(
        self,
        records: list[tuple[bytes | None, bytes | None, int]],
        *,
        producer_id: int = -1,
        producer_epoch: int = -1,
        transactional: bool = False,
        compression: int = 0,
        gaps: list[int] | None = None,
    ) -> PartitionLogBuilder:
        """records: (key, value, timestamp). gaps: offsets deltas to use instead of 0..n-1
        (a compacted batch), the batch then spans up to the last delta."""
        base = self.next_offset
        deltas = gaps if gaps is not None else list(range(len(records)))
        recs = [(base + d, ts, k, v) for d, (k, v, ts) in zip(deltas, records)]
        span = (deltas[-1] + 1) if deltas else 1
        self._current.extend(
            encode_batch(
                base,
                recs,
                partition_leader_epoch=self.leader_epoch,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                base_sequence=0,
                transactional=transactional,
                compression=compression,
                last_offset_delta=span - 1,
            )
        )
        self.next_offset = base + span
        return self

    def commit(self, group: str, topic: str, partition: int, offset: int, ts: int, **kw) -> PartitionLogBuilder:
        record_type = kw.pop("record_type", 1)
        producer_id = kw.pop("producer_id", -1)
        value = offset_commit_value(offset, ts, **kw)
        return self.batch(
            [(offset_commit_key(group, topic, partition, record_type), value, ts)],
            producer_id=producer_id,
            producer_epoch=0 if producer_id != -1 else -1,
            transactional=producer_id != -1,
        )

    def offset_tombstone(
        self, group: str, topic: str, partition: int, ts: int, record_type: int = 1, producer_id: int = -1
    ) -> PartitionLogBuilder:
        return self.batch(
            [(offset_commit_key(group, topic, partition, record_type), None, ts)],
            producer_id=producer_id,
            producer_epoch=0 if producer_id != -1 else -1,
            transactional=producer_id != -1,
        )

    def group(self, group: str, ts: int, **kw) -> PartitionLogBuilder:
        return self.batch([(group_key(group), group_metadata_value(**kw), ts)])

    def group_tombstone(self, group: str, ts: int) -> PartitionLogBuilder:
        return self.batch([(group_key(group), None, ts)])

    def record(
        self, record_type: int, key_fields: dict, value: dict | None, ts: int, version: int = 0
    ) -> PartitionLogBuilder:
        key = encode_key(
            CoordinatorKey(
                record_type,
                key_fields["group_id"],
                member_id=key_fields.get("member_id"),
                regular_expression=key_fields.get("regular_expression"),
            )
        )
        raw_value = None if value is None else encode_value(record_type, version, value)
        return self.batch([(key, raw_value, ts)])

    def marker(
        self, producer_id: int, commit: bool, ts: int, producer_epoch: int = 0, coordinator_epoch: int = 0
    ) -> PartitionLogBuilder:
        self._current.extend(
            encode_control_batch(
                self.next_offset, producer_id, producer_epoch, commit, ts, coordinator_epoch, self.leader_epoch
            )
        )
        self.next_offset += 1
        return self

    def legacy(self, key: bytes, value: bytes | None, ts: int, magic: int = 1) -> PartitionLogBuilder:
        self._current.extend(encode_legacy_message(self.next_offset, magic, key, value, ts))
        self.next_offset += 1
        return self

    def write(self, log_dir: str) -> str:
        folder = os.path.join(log_dir, f"__consumer_offsets-{self.partition}")
        os.makedirs(folder, exist_ok=True)
        for base, data in self.segments:
            with open(os.path.join(folder, f"{base:020d}.log"), "wb") as f:
                f.write(data)
        return folder
