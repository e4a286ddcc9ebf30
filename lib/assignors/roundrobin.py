"""RoundRobinAssignor ("roundrobin"), org.apache.kafka.clients.consumer.RoundRobinAssignor.

All partitions of all subscribed topics (topics in String order, partitions in number order)
dealt one at a time over the members sorted as MemberInfo compares them, a member that does
not subscribe to the partition's topic being skipped."""

from __future__ import annotations

from lib.assignors.javautil import AssignorError, JavaHashMap, TopicPartition, java_str_key
from lib.assignors.model import Subscription
from lib.assignors.range import member_info_key


def assign_roundrobin(
    partitions_per_topic: dict[str, int], subscriptions: JavaHashMap[str, Subscription]
) -> dict[str, list[TopicPartition]]:
    """RoundRobinAssignor.assign(Map<String, Integer>, Map<String, Subscription>)."""
    assignment: dict[str, list[TopicPartition]] = {}
    members: list[tuple[str, str | None]] = []
    for member_id, subscription in subscriptions.items():
        assignment[member_id] = []
        members.append((member_id, subscription.group_instance_id))
    # Utils.sorted: a stable sort, so equal group.instance.ids keep the map's order
    order = [member_id for member_id, _ in sorted(members, key=lambda m: member_info_key(*m))]
    if not order:
        raise AssignorError("IllegalArgumentException", "CircularIterator can only be used on non-empty lists")

    position = 0  # CircularIterator: peek() is order[position]
    for partition in _all_partitions_sorted(partitions_per_topic, subscriptions):
        topic = partition[0]
        while topic not in subscriptions[order[position]].topics:
            position = (position + 1) % len(order)
        assignment[order[position]].append(partition)
        position = (position + 1) % len(order)
    return assignment


def _all_partitions_sorted(
    partitions_per_topic: dict[str, int], subscriptions: JavaHashMap[str, Subscription]
) -> list[TopicPartition]:
    """RoundRobinAssignor.allPartitionsSorted: a TreeSet of the subscribed topics."""
    topics = sorted(
        {topic for subscription in subscriptions.values() for topic in subscription.topics}, key=java_str_key
    )
    return [(topic, p) for topic in topics if topic in partitions_per_topic for p in range(partitions_per_topic[topic])]
