"""RangeAssignor ("range"), org.apache.kafka.clients.consumer.RangeAssignor.

Per topic: the topic's members sorted as AbstractPartitionAssignor.MemberInfo compares them
(static members by group.instance.id first, then dynamic ones by member id), each taking a
contiguous range; the first ``partitions % members`` members take one extra. The rack-aware
steps are skipped: they run only when partitions have replica racks, which we never have."""

from __future__ import annotations

from lib.assignors.javautil import JavaHashMap, TopicPartition, java_str_key
from lib.assignors.model import Subscription


def member_info_key(member_id: str, group_instance_id: str | None) -> tuple[int, bytes]:
    """AbstractPartitionAssignor.MemberInfo.compareTo as a sort key: members with a
    group.instance.id first, ordered by it; the others by member id. Two members with the same
    group.instance.id compare equal and keep their order (Collections.sort is stable)."""
    if group_instance_id is not None:
        return (0, java_str_key(group_instance_id))
    return (1, java_str_key(member_id))


def assign_range(
    partitions_per_topic: dict[str, int], subscriptions: JavaHashMap[str, Subscription]
) -> dict[str, list[TopicPartition]]:
    """RangeAssignor.assignPartitions without rack matching."""
    # consumersPerTopic: members in the subscription map's iteration order, a member once per
    # occurrence of the topic in its list (put() appends)
    consumers_per_topic: dict[str, list[tuple[str, str | None]]] = {}
    for member_id, subscription in subscriptions.items():
        for topic in subscription.topics:
            consumers_per_topic.setdefault(topic, []).append((member_id, subscription.group_instance_id))

    assignment: dict[str, list[TopicPartition]] = {member_id: [] for member_id in subscriptions.keys()}
    for topic, num_partitions in partitions_per_topic.items():
        if num_partitions <= 0:
            continue
        members = sorted(consumers_per_topic.get(topic, []), key=lambda m: member_info_key(*m))
        # TopicAssignmentState.consumers: a LinkedHashMap, so a duplicate keeps its first place
        consumers = list(dict.fromkeys(member_id for member_id, _ in members))
        _assign_ranges(topic, num_partitions, consumers, assignment)
    return assignment


def _assign_ranges(
    topic: str, num_partitions: int, consumers: list[str], assignment: dict[str, list[TopicPartition]]
) -> None:
    """TopicAssignmentState + RangeAssignor.assignRanges with every partition assignable."""
    if not consumers:
        return
    per_consumer, with_extra = divmod(num_partitions, len(consumers))
    next_partition = 0  # unassignedPartitions is always a suffix of 0..n-1 here
    assigned = dict.fromkeys(consumers, 0)
    for consumer in consumers:
        if next_partition >= num_partitions:
            break
        # maxAssignable: the quota (plus one while extras remain) minus what it already has
        max_assignable = max(0, per_consumer + (1 if with_extra > 0 else 0) - assigned[consumer])
        count = min(max_assignable, num_partitions - next_partition)
        if count == 0:
            continue
        assignment[consumer].extend((topic, p) for p in range(next_partition, next_partition + count))
        next_partition += count
        assigned[consumer] += count  # onAssigned
        if assigned[consumer] > per_consumer:
            with_extra -= 1
