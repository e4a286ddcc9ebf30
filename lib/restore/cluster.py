"""A consumer group and its partitions on a live cluster, asked and changed with Kafka's admin
requests (kafka-python's KafkaAdminClient): DescribeGroups, OffsetFetch, ListOffsets, Metadata,
and OffsetCommit as `kafka-consumer-groups --reset-offsets --execute` sends it (generation -1,
no member id: accepted only while the group has no members). The restore job's view of the
cluster; nothing of the warehouse here."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from lib.restore.plan import Committed, PartitionNow

TopicPartition = tuple[str, int]

# group states in which Kafka accepts an offset commit from outside the group
RESTORABLE_STATES = ("Empty", "Dead")


class ClusterError(Exception):
    """The cluster could not be reached or refused a request; the message says which."""


@dataclass(frozen=True)
class Member:
    member_id: str
    client_id: str
    client_host: str
    group_instance_id: str | None = None


@dataclass(frozen=True)
class GroupNow:
    """The group as DescribeGroups answers: state (Dead: the cluster does not know it),
    protocol type and members."""

    group_id: str
    state: str
    protocol_type: str
    members: tuple[Member, ...]

    @property
    def restorable(self) -> bool:
        return self.state in RESTORABLE_STATES and not self.members


class ClusterGroups:
    """One admin connection to a cluster (close it, or use it as a context manager)."""

    def __init__(self, bootstrap_servers: str, timeout_ms: int = 30_000):
        from kafka import KafkaAdminClient
        from kafka.errors import KafkaError

        try:
            self._admin = KafkaAdminClient(
                bootstrap_servers=bootstrap_servers,
                client_id="offsets-lake-restore",
                request_timeout_ms=timeout_ms,
                bootstrap_timeout_ms=timeout_ms,
            )
        except KafkaError as e:
            raise ClusterError(f"cannot reach the cluster at {bootstrap_servers}: {e}") from None
        self.bootstrap_servers = bootstrap_servers

    def close(self) -> None:
        self._admin.close()

    def __enter__(self) -> ClusterGroups:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def describe(self, group_id: str) -> GroupNow:
        described = self._admin.describe_groups([group_id])[group_id]
        if "GroupIdNotFoundError" in (described.get("error") or ""):
            # Kafka 4's coordinator answers GROUP_ID_NOT_FOUND where 3.x said state Dead
            return GroupNow(group_id, "Dead", "", ())
        if described.get("error"):
            raise ClusterError(f"DescribeGroups for group {group_id!r} failed: {described['error']}")
        members = tuple(
            Member(m["member_id"], m["client_id"], m["client_host"], m.get("group_instance_id"))
            for m in described.get("members") or ()
        )
        return GroupNow(group_id, described["group_state"], described.get("protocol_type") or "", members)

    def committed(self, group_id: str) -> dict[TopicPartition, Committed]:
        """The group's committed offsets (OffsetFetch of all its partitions)."""
        fetched = self._admin.list_group_offsets({group_id: None}).get(group_id, {})
        return {
            (tp.topic, tp.partition): Committed(
                om.offset, None if om.leader_epoch is None or om.leader_epoch < 0 else om.leader_epoch, om.metadata
            )
            for tp, om in fetched.items()
            if om.offset >= 0
        }

    def partitions_now(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, PartitionNow | None]:
        """Each partition's log start and end (ListOffsets EARLIEST and LATEST); None for a
        partition the cluster does not have."""
        from kafka import TopicPartition as KafkaTopicPartition
        from kafka.admin import OffsetSpec

        wanted = sorted(set(tps))
        counts = self._partition_counts({t for t, _ in wanted})
        present = [KafkaTopicPartition(t, p) for t, p in wanted if p < counts.get(t, 0)]
        out: dict[TopicPartition, PartitionNow | None] = dict.fromkeys(wanted)
        if present:
            earliest = self._admin.list_partition_offsets(dict.fromkeys(present, OffsetSpec.EARLIEST))
            latest = self._admin.list_partition_offsets(dict.fromkeys(present, OffsetSpec.LATEST))
            for tp in present:
                out[(tp.topic, tp.partition)] = PartitionNow(earliest[tp].offset, latest[tp].offset)
        return out

    def _partition_counts(self, topics: set[str]) -> dict[str, int]:
        if not topics:
            return {}
        known = set(self._admin.list_topics())
        described = self._admin.describe_topics(sorted(topics & known)) if topics & known else []
        return {t["name"]: len(t["partitions"]) for t in described if not t.get("error_code")}

    def commit(self, group_id: str, offsets: Mapping[TopicPartition, Committed]) -> dict[TopicPartition, str | None]:
        """OffsetCommit of `offsets` for the group from outside it (generation -1, as
        kafka-consumer-groups does). Returns each partition's error name (None: committed)."""
        from kafka import TopicPartition as KafkaTopicPartition
        from kafka.structs import OffsetAndMetadata

        request = {
            KafkaTopicPartition(t, p): OffsetAndMetadata(c.offset, c.metadata or "", c.leader_epoch)
            for (t, p), c in offsets.items()
        }
        answered = self._admin.alter_group_offsets(group_id, request)
        return {
            (tp.topic, tp.partition): (None if error.__name__ == "NoError" else error.__name__)
            for tp, error in answered.items()
        }
