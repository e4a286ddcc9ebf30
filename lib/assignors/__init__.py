"""Kafka's consumer partition assignors (kafka-clients 4.3.1), ported to pure Python.

``assign`` returns what the group leader's Java assignor returns for the same subscriptions:
RangeAssignor, RoundRobinAssignor, StickyAssignor and CooperativeStickyAssignor, called the way
ConsumerCoordinator.onLeaderElected calls them (``assign(Cluster, GroupSubscription)``, the
subscriptions in a HashMap keyed by member id). Stdlib only; lib.assignors.fast, imported on its
own, runs the same assignors as batched numba kernels over many problems at once (this port is
their reference, and the fallback for the few cases they leave to it).

Where Java's result depends on HashMap iteration order (the sticky assignors visit members in
the order of that map), the port iterates a model of the same HashMap (``javautil``). That order
is not a function of the member ids alone: members whose ids land in the same bin of the table
iterate in insertion order, which for the leader is the JoinGroup response's member order. So
``subscriptions`` is inserted in the order given: pass the members in the group's own order (the
GroupMetadata record lists them in the order the coordinator's member map iterates, as the
JoinGroup response does); any other order gives the same result unless two members share a bin
and the assignment depends on which of them comes first (tests/test_assignors.py shows one).

Partition replica racks are not in ``__consumer_offsets``, so assignment is what Java does when
partitions have no racks: the non-rack-aware path, whatever the members' ``rack_id``.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping, Sequence

from lib.assignors.javautil import AssignorError, JavaHashMap, string_hash
from lib.assignors.model import Subscription, TopicPartition
from lib.assignors.range import assign_range
from lib.assignors.roundrobin import assign_roundrobin
from lib.assignors.sticky import CooperativeStickyAssignor, StickyAssignor
from lib.assignors.userdata import encode_sticky_user_data as _encode_sticky_user_data

__all__ = [
    "ASSIGNOR_NAMES",
    "AssignorError",
    "Subscription",
    "TopicPartition",
    "UnknownAssignorError",
    "assign",
    "encode_sticky_user_data",
]

ASSIGNOR_NAMES = ("range", "roundrobin", "sticky", "cooperative-sticky")


class UnknownAssignorError(ValueError):
    """Not one of ASSIGNOR_NAMES (the protocol names of Kafka's built-in assignors)."""


def _run(
    assignor: str, counts: dict[str, int], group: JavaHashMap[str, Subscription]
) -> tuple[Iterable[tuple[str, list[TopicPartition]]], bool]:
    """The assignor's entries, and whether HashMap order was followed exactly throughout."""
    if assignor == "range":
        return assign_range(counts, group).items(), not group.treeified
    if assignor == "roundrobin":
        return assign_roundrobin(counts, group).items(), not group.treeified
    sticky = StickyAssignor() if assignor == "sticky" else CooperativeStickyAssignor()
    entries = sticky.assign_partitions(counts, group)
    return entries, not sticky.saw_tree_bin


def assign(
    assignor: str, partitions_per_topic: Mapping[str, int], subscriptions: Sequence[Subscription]
) -> dict[str, list[TopicPartition]]:
    """member_id -> its partitions (sorted by topic, partition), as Kafka's Java assignor of that protocol name returns for these subscriptions; every member is a key (possibly with []). Topics a member subscribes to that are not in partitions_per_topic are ignored as Java does when metadata lacks them.

    Raises UnknownAssignorError for another name, and AssignorError where the Java assignor
    throws (e.g. an empty group for all but "range"; inconsistent owned partitions)."""
    if assignor not in ASSIGNOR_NAMES:
        raise UnknownAssignorError(f"unknown assignor {assignor!r}; expected one of {', '.join(ASSIGNOR_NAMES)}")

    # ConsumerCoordinator.onLeaderElected: a HashMap filled in the JoinGroup members' order
    group: JavaHashMap[str, Subscription] = JavaHashMap(string_hash)
    for subscription in subscriptions:
        group.put(subscription.member_id, subscription)

    # AbstractPartitionAssignor.assign(Cluster, ...): the subscribed topics the metadata knows,
    # with at least one partition (numbered 0..n-1)
    subscribed = {topic for subscription in group.values() for topic in subscription.topics}
    counts = {topic: partitions_per_topic[topic] for topic in subscribed if partitions_per_topic.get(topic, 0) > 0}

    entries, exact = _run(assignor, counts, group)
    if not exact:
        warnings.warn(
            "a HashMap bin the result may depend on held 9+ colliding keys; Java iterates such a bin "
            "in red-black-tree order, which lib.assignors does not model: the result may differ from Java's",
            RuntimeWarning,
            stacklevel=2,
        )
    return {member_id: sorted(partitions) for member_id, partitions in entries}


def encode_sticky_user_data(partitions: Iterable[TopicPartition], generation: int | None) -> bytes:
    """StickyAssignor's subscription user data (its serializeTopicPartitionAssignment, the v1 layout with generation): what a StickyAssignor member sends to carry its previous assignment.

    The bytes are Java's (topics in its HashMap's order). With generation None: the v0 layout,
    without a generation, as members before Kafka 2.3 sent it."""
    return _encode_sticky_user_data(partitions, generation)
