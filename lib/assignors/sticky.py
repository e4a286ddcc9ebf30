"""StickyAssignor ("sticky") and CooperativeStickyAssignor ("cooperative-sticky").

A line-by-line port of org.apache.kafka.clients.consumer.internals.AbstractStickyAssignor
(kafka-clients 4.3.1) and its two subclasses, for the case the group leader is always in here:
no partition has replica racks (``__consumer_offsets`` does not carry them), so RackInfo has no
consumer racks and every rack-aware step is a no-op; the consumers' rack ids are ignored as Java
ignores them then.

Where Java iterates a HashMap/HashSet and the outcome depends on that order, this code iterates
a ``JavaHashMap``/``JavaHashSet`` (same order); where the order provably does not matter it uses
plain dicts and sets (commented). Java's ``map.get(k).size()`` on a missing key throws
NullPointerException; ``_nn`` reproduces that so inputs that crash the Java assignor (only ever
odd ones: duplicate or out-of-range owned partitions) raise ``AssignorError`` here too.

A fresh assignor per call: Java's instance keeps ``maxGeneration`` across rebalances of the
same leader, which only matters if a later group reports lower generations than an earlier one.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from lib.assignors.javautil import (
    AssignorError,
    JavaHashMap,
    JavaHashSet,
    JavaLinkedList,
    TopicPartition,
    java_str_key,
    string_hash,
    topic_partition_hash,
    tp_key,
)
from lib.assignors.model import Subscription, subscription_generation
from lib.assignors.userdata import decode_cooperative_generation, decode_sticky_user_data

DEFAULT_GENERATION = -1

T = TypeVar("T")
Assignment = list[tuple[str, list[TopicPartition]]]  # a map's entries, in its iteration order


def _nn(value: T | None) -> T:
    """Dereferencing what a Java Map.get returned: null throws."""
    if value is None:
        raise AssignorError("NullPointerException")
    return value


def _remove_first(items: list[TopicPartition], tp: TopicPartition) -> None:
    """List.remove(Object): the first occurrence, if any."""
    try:
        items.remove(tp)
    except ValueError:
        pass


@dataclass
class MemberData:
    """AbstractStickyAssignor.MemberData: previously owned partitions and their generation
    (None: Optional.empty())."""

    partitions: list[TopicPartition]
    generation: int | None


class AbstractStickyAssignor:
    """AbstractStickyAssignor: picks the constrained (all subscriptions equal) or the general
    assignment builder."""

    def __init__(self) -> None:
        self.max_generation = DEFAULT_GENERATION
        # set when an order-deciding HashMap/HashSet grew a tree bin (not modelled, see javautil)
        self.saw_tree_bin = False
        # null (None) after the general builder: the cooperative assignor then computes it
        self.partitions_transferring_ownership: dict[TopicPartition, str] | None = {}

    def member_data(self, subscription: Subscription) -> MemberData:
        raise NotImplementedError

    def assign_partitions(
        self, partitions_per_topic: dict[str, int], subscriptions: JavaHashMap[str, Subscription]
    ) -> Assignment:
        """AbstractStickyAssignor.assignPartitions. ``partitions_per_topic``: the subscribed
        topics the metadata has, with their (non-zero) partition counts."""
        consumer_to_owned: JavaHashMap[str, list[TopicPartition]] = JavaHashMap(string_hash)
        # only membership tests and an order-free List.remove loop read this set
        multiple_owners: set[TopicPartition] = set()
        all_equal = self._all_subscriptions_equal(
            set(partitions_per_topic), subscriptions, consumer_to_owned, multiple_owners
        )
        self.saw_tree_bin |= subscriptions.treeified or consumer_to_owned.treeified
        if all_equal:
            self.partitions_transferring_ownership = {}
            return _ConstrainedAssignmentBuilder(self, partitions_per_topic, consumer_to_owned, multiple_owners).build()
        self.partitions_transferring_ownership = None
        return _GeneralAssignmentBuilder(self, partitions_per_topic, consumer_to_owned, subscriptions).build()

    def _all_subscriptions_equal(
        self,
        all_topics: set[str],
        subscriptions: JavaHashMap[str, Subscription],
        consumer_to_owned: JavaHashMap[str, list[TopicPartition]],
        multiple_owners: set[TopicPartition],
    ) -> bool:
        """AbstractStickyAssignor.allSubscriptionsEqual: also collects each member's still-valid
        owned partitions, resolving claims by several members in subscription-map order."""
        all_equal = True
        subscribed_topics: set[str] = set()
        previous_owner: dict[TopicPartition, str] = {}
        for consumer, subscription in subscriptions.items():
            topics = subscription.topics
            # the reference set is (re)initialised while empty, so members with no topics ahead
            # of the others do not count as different
            if not subscribed_topics:
                subscribed_topics.update(topics)
            elif all_equal and not (len(topics) == len(subscribed_topics) and subscribed_topics.issuperset(topics)):
                all_equal = False

            member_data = self.member_data(subscription)
            member_generation = member_data.generation if member_data.generation is not None else DEFAULT_GENERATION
            self.max_generation = max(self.max_generation, member_generation)

            owned: list[TopicPartition] = []
            consumer_to_owned.put(consumer, owned)
            for tp in member_data.partitions:
                if tp[0] not in all_topics:
                    continue
                other = previous_owner.get(tp)
                if other is None:
                    owned.append(tp)
                    previous_owner[tp] = consumer
                    continue
                # Java reads the other claimant's generation from its Subscription (protocol
                # v2+ field), not from its member data as it does for this member
                other_generation = subscription_generation(_nn(subscriptions.get(other)))
                if member_generation == other_generation:
                    # same generation: nobody keeps it
                    multiple_owners.add(tp)
                    _remove_first(_nn(consumer_to_owned.get(other)), tp)
                    previous_owner[tp] = consumer
                elif member_generation > other_generation:
                    owned.append(tp)
                    _remove_first(_nn(consumer_to_owned.get(other)), tp)
                    previous_owner[tp] = consumer
        return all_equal


class StickyAssignor(AbstractStickyAssignor):
    """StickyAssignor: eager; the previous assignment travels in the user data."""

    def member_data(self, subscription: Subscription) -> MemberData:
        """StickyAssignor.memberData: always from the user data, never ownedPartitions."""
        partitions, generation = decode_sticky_user_data(subscription.user_data)
        return MemberData(partitions, generation)


class CooperativeStickyAssignor(AbstractStickyAssignor):
    """CooperativeStickyAssignor: owned partitions come from the subscription; a partition that
    changes owner is left out until its owner has revoked it (the follow-up rebalance)."""

    def member_data(self, subscription: Subscription) -> MemberData:
        """CooperativeStickyAssignor.memberData: subscription v2+ carries the generation;
        before that it is in the assignor's user data."""
        owned = list(subscription.owned_partitions)
        if subscription.generation_id is not None and subscription.generation_id >= 0:
            return MemberData(owned, subscription.generation_id)
        return MemberData(owned, decode_cooperative_generation(subscription.user_data))

    def assign_partitions(
        self, partitions_per_topic: dict[str, int], subscriptions: JavaHashMap[str, Subscription]
    ) -> Assignment:
        """CooperativeStickyAssignor.assignPartitions."""
        assignments = super().assign_partitions(partitions_per_topic, subscriptions)
        transferring = self.partitions_transferring_ownership
        if transferring is None:
            transferring = _compute_partitions_transferring_ownership(subscriptions, assignments)
        # adjustAssignment: each such partition leaves its new owner's list (first occurrence)
        by_consumer = dict(assignments)
        for tp, consumer in transferring.items():
            _remove_first(_nn(by_consumer.get(consumer)), tp)
        return assignments


def _compute_partitions_transferring_ownership(
    subscriptions: JavaHashMap[str, Subscription], assignments: Assignment
) -> dict[TopicPartition, str]:
    """CooperativeStickyAssignor.computePartitionsTransferringOwnership: partitions assigned to
    a member that did not own them while some member that owned them loses them."""
    added: dict[TopicPartition, str] = {}
    revoked: set[TopicPartition] = set()
    for consumer, assigned in assignments:
        owned = _nn(subscriptions.get(consumer)).owned_partitions
        owned_set = set(owned)
        for tp in assigned:
            if tp not in owned_set:
                added[tp] = consumer
        assigned_set = set(assigned)
        revoked.update(tp for tp in owned if tp not in assigned_set)
    return {tp: consumer for tp, consumer in added.items() if tp in revoked}


class _ConstrainedAssignmentBuilder:
    """AbstractStickyAssignor.ConstrainedAssignmentBuilder (all members subscribe to the same
    topics): keep owned partitions up to the quota, then deal the rest round-robin."""

    def __init__(
        self,
        owner: AbstractStickyAssignor,
        partitions_per_topic: dict[str, int],
        current_assignment: JavaHashMap[str, list[TopicPartition]],
        multiple_owners: set[TopicPartition],
    ) -> None:
        self.owner = owner
        self.partitions_per_topic = partitions_per_topic
        self.current_assignment = current_assignment
        self.multiple_owners = multiple_owners
        self.maybe_revoked: dict[TopicPartition, str] = {}
        self.under_min_quota: JavaLinkedList[str] = JavaLinkedList()
        self.exactly_min_quota: JavaLinkedList[str] = JavaLinkedList()
        total = sum(partitions_per_topic.values())
        members = len(current_assignment)
        if members == 0:
            # minQuota/maxQuota divide in double (NaN, no error); the int `%` throws
            raise AssignorError("ArithmeticException", "/ by zero")
        self.min_quota = total // members
        self.max_quota = -(-total // members)
        self.expected_over_min = total % members
        self.current_over_min = 0
        # the result; iterated by nobody whose outcome depends on its order
        self.assignment: dict[str, list[TopicPartition]] = {c: [] for c in current_assignment.keys()}
        self.assigned_partitions: list[TopicPartition] = []

    def build(self) -> Assignment:
        """ConstrainedAssignmentBuilder.build; the rack-aware round robin is a no-op here."""
        self._assign_owned_partitions()
        unassigned = self._unassigned_partitions(self.assigned_partitions)
        self.under_min_quota.sort(key=java_str_key)
        self.exactly_min_quota.sort(key=java_str_key)
        self._assign_round_robin(unassigned)
        self._verify_unfilled_members()
        return list(self.assignment.items())

    def _assign_owned_partitions(self) -> None:
        """ConstrainedAssignmentBuilder.assignOwnedPartitions: members are visited in the
        HashMap's order, which decides who may keep maxQuota partitions."""
        for consumer, owned_partitions in self.current_assignment.items():
            owned = sorted(owned_partitions, key=lambda tp: (tp[1], java_str_key(tp[0])))
            consumer_assignment = self.assignment[consumer]
            for doubly_claimed in self.multiple_owners:
                _remove_first(owned, doubly_claimed)

            if len(owned) < self.min_quota:
                consumer_assignment.extend(owned)
                self.assigned_partitions.extend(owned)
                self.under_min_quota.add(consumer)
            elif len(owned) >= self.max_quota and self.current_over_min < self.expected_over_min:
                self.current_over_min += 1
                if self.current_over_min == self.expected_over_min:
                    self.exactly_min_quota.clear()
                consumer_assignment.extend(owned[: self.max_quota])
                self.assigned_partitions.extend(owned[: self.max_quota])
                for tp in owned[self.max_quota :]:
                    self.maybe_revoked[tp] = consumer
            else:
                consumer_assignment.extend(owned[: self.min_quota])
                self.assigned_partitions.extend(owned[: self.min_quota])
                for tp in owned[self.min_quota :]:
                    self.maybe_revoked[tp] = consumer
                if self.current_over_min < self.expected_over_min:
                    self.exactly_min_quota.add(consumer)

    def _assign_round_robin(self, unassigned: list[TopicPartition]) -> None:
        """ConstrainedAssignmentBuilder.assignRoundRobin, with its LinkedList iterator."""
        consumers = self.under_min_quota.iterator()
        for tp in unassigned:
            if consumers.has_next():
                consumer = consumers.next()
            elif self.under_min_quota.is_empty() and self.exactly_min_quota.is_empty():
                raise AssignorError("IllegalStateException", "No more unfilled consumers to be assigned.")
            elif self.under_min_quota.is_empty():
                consumer = _nn(self.exactly_min_quota.poll())
            else:
                consumers = self.under_min_quota.iterator()
                consumer = consumers.next()

            assigned_count = self._assign_new_partition(tp, consumer)
            if assigned_count == self.min_quota:
                consumers.remove()
                self.exactly_min_quota.add(consumer)
            elif assigned_count == self.max_quota:
                self.current_over_min += 1

    def _assign_new_partition(self, tp: TopicPartition, consumer: str) -> int:
        """ConstrainedAssignmentBuilder.assignNewPartition."""
        consumer_assignment = self.assignment[consumer]
        consumer_assignment.append(tp)
        previous = self.maybe_revoked.get(tp)
        if (previous is not None and previous != consumer) or tp in self.multiple_owners:
            transferring = self.owner.partitions_transferring_ownership
            assert transferring is not None  # the constrained path set it to a map
            transferring[tp] = consumer
        return len(consumer_assignment)

    def _verify_unfilled_members(self) -> None:
        """ConstrainedAssignmentBuilder.verifyUnfilledMembers."""
        if self.under_min_quota.is_empty():
            return
        if self.current_over_min != self.expected_over_min:
            raise AssignorError(
                "IllegalStateException",
                "We haven't reached the expected number of members with more than the minQuota partitions, "
                "but no more partitions to be assigned",
            )
        for member in self.under_min_quota.items:
            if len(self.assignment[member]) != self.min_quota:
                raise AssignorError(
                    "IllegalStateException",
                    f"Consumer: [{member}] doesn't reach minQuota partitions, and no more partitions to be assigned",
                )

    def _unassigned_partitions(self, sorted_assigned: list[TopicPartition]) -> list[TopicPartition]:
        """ConstrainedAssignmentBuilder.getUnassignedPartitions: a two-pointer walk that assumes
        every assigned partition exists (an owned partition beyond the topic's count stalls the
        pointer, as in Java)."""
        sorted_topics = sorted(self.partitions_per_topic, key=java_str_key)
        if not sorted_assigned:
            return [(topic, p) for topic in sorted_topics for p in range(self.partitions_per_topic[topic])]
        sorted_assigned.sort(key=tp_key)
        every = ((topic, p) for topic in sorted_topics for p in range(self.partitions_per_topic[topic]))
        return _walk_unassigned(every, sorted_assigned)


def _walk_unassigned(every: Iterable[TopicPartition], sorted_assigned: list[TopicPartition]) -> list[TopicPartition]:
    """The two builders' getUnassignedPartitions walk: `every` partition in order, skipping the
    next of `sorted_assigned` (non-empty, in the same order) whenever it comes up. It assumes
    every assigned partition exists: one that does not stalls the pointer, as in Java."""
    unassigned: list[TopicPartition] = []
    add_directly = False
    assigned_iter = iter(sorted_assigned)
    next_assigned = next(assigned_iter)
    for tp in every:
        if add_directly or next_assigned != tp:
            unassigned.append(tp)
        else:
            following = next(assigned_iter, None)
            if following is None:
                add_directly = True
            else:
                next_assigned = following
    return unassigned


class _SortedConsumers:
    """GeneralAssignmentBuilder.sortedCurrentSubscriptions: a TreeSet<String> ordered by
    (number of partitions in currentAssignment, member id), whose comparator reads the live
    assignment. Java removes a member before changing its list and re-adds it after, so the
    order stays consistent and a sorted list searched by the current keys behaves the same."""

    def __init__(self, assignment: JavaHashMap[str, list[TopicPartition]]) -> None:
        self._assignment = assignment
        self._members: list[str] = []

    def _key(self, member: str | None) -> tuple[int, bytes]:
        # the comparator: currentAssignment.get(member).size(), then String.compareTo
        return (len(_nn(self._assignment.get(member))), java_str_key(_nn(member)))

    def add(self, member: str | None) -> None:
        key = self._key(member)  # TreeMap.put compares even the first key (its null check)
        index = bisect.bisect_left(self._members, key, key=self._key)
        if index < len(self._members) and self._members[index] == member:
            return
        self._members.insert(index, _nn(member))

    def remove(self, member: str | None) -> None:
        if not self._members:
            return
        key = self._key(member)
        index = bisect.bisect_left(self._members, key, key=self._key)
        if index < len(self._members) and self._members[index] == member:
            del self._members[index]

    def first(self) -> str:
        if not self._members:
            raise AssignorError("NoSuchElementException")
        return self._members[0]

    def last(self) -> str:
        if not self._members:
            raise AssignorError("NoSuchElementException")
        return self._members[-1]

    def snapshot(self) -> list[str]:
        return list(self._members)


class _PartitionMovements:
    """AbstractStickyAssignor.PartitionMovements: where each moved partition came from, so a
    later move can send one back instead of shuffling further. The per-(topic, member pair) set
    is a HashSet whose *first* element is the one moved back, hence JavaHashSet."""

    def __init__(self) -> None:
        self.saw_tree_bin = False
        # neither map is iterated during assign (only isSticky(), a test hook, does)
        self.by_topic: dict[str, dict[tuple[str | None, str | None], JavaHashSet[TopicPartition]]] = {}
        self.movements: dict[TopicPartition, tuple[str | None, str | None]] = {}

    def _remove_movement_record(self, tp: TopicPartition) -> tuple[str | None, str | None]:
        pair = self.movements.pop(tp)
        for_topic = self.by_topic[tp[0]]
        for_topic[pair].remove(tp)
        if len(for_topic[pair]) == 0:
            del for_topic[pair]
        if not for_topic:
            del self.by_topic[tp[0]]
        return pair

    def _add_movement_record(self, tp: TopicPartition, pair: tuple[str | None, str | None]) -> None:
        self.movements[tp] = pair
        for_topic = self.by_topic.setdefault(tp[0], {})
        if pair not in for_topic:
            for_topic[pair] = JavaHashSet(topic_partition_hash)
        for_topic[pair].add(tp)

    def move_partition(self, tp: TopicPartition, old_consumer: str | None, new_consumer: str | None) -> None:
        if tp in self.movements:
            existing = self._remove_movement_record(tp)
            if existing[0] != new_consumer:  # not moving back to where it came from
                self._add_movement_record(tp, (existing[0], new_consumer))
        else:
            self._add_movement_record(tp, (old_consumer, new_consumer))

    def partition_to_be_moved(
        self, tp: TopicPartition, old_consumer: str | None, new_consumer: str | None
    ) -> TopicPartition:
        """getTheActualPartitionToBeMoved: if some partition of the topic moved the opposite way
        (new -> old), move that one back instead."""
        for_topic = self.by_topic.get(tp[0])
        if for_topic is None:
            return tp
        if tp in self.movements:
            old_consumer = self.movements[tp][0]
        reverse = for_topic.get((new_consumer, old_consumer))
        if reverse is None:
            return tp
        self.saw_tree_bin |= reverse.treeified
        return reverse.first()


class _GeneralAssignmentBuilder:
    """AbstractStickyAssignor.GeneralAssignmentBuilder (members subscribe to different topics)."""

    def __init__(
        self,
        owner: AbstractStickyAssignor,
        partitions_per_topic: dict[str, int],
        current_assignment: JavaHashMap[str, list[TopicPartition]],
        subscriptions: JavaHashMap[str, Subscription],
    ) -> None:
        self.owner = owner
        self.partitions_per_topic = partitions_per_topic
        self.total_partitions = sum(partitions_per_topic.values())
        self.current_assignment = current_assignment
        self.subscriptions = subscriptions
        self.revocation_required = False
        self.movements = _PartitionMovements()

        # read by key; its key set is iterated only to collect a set (order-free)
        self.topic_consumers: dict[str, list[str]] = {topic: [] for topic in partitions_per_topic}
        # iterated to pick out the fixed members; kept in Java's order anyway
        self.consumer_topics: JavaHashMap[str, list[str]] = JavaHashMap(string_hash, len(subscriptions))
        for consumer, subscription in subscriptions.items():
            topics: list[str] = []
            self.consumer_topics.put(consumer, topics)
            for topic in subscription.topics:
                if topic in partitions_per_topic:
                    topics.append(topic)
                    self.topic_consumers[topic].append(consumer)
            if consumer not in current_assignment:
                current_assignment.put(consumer, [])

        self.current_partition_consumer: dict[TopicPartition, str] = {}
        for consumer, partitions in current_assignment.items():
            for tp in partitions:
                self.current_partition_consumer[tp] = consumer

        # TopicComparator: fewest potential consumers first, then by name
        sorted_topics = sorted(self.topic_consumers, key=lambda t: (len(self.topic_consumers[t]), java_str_key(t)))
        self.sorted_all_partitions = [(topic, p) for topic in sorted_topics for p in range(partitions_per_topic[topic])]
        self.sorted_consumers = _SortedConsumers(current_assignment)

    def build(self) -> Assignment:
        """GeneralAssignmentBuilder.build."""
        prev_assignment: dict[TopicPartition, tuple[str, int]] = {}
        self._prepopulate_current_assignments(prev_assignment)
        assigned = self._assign_owned_partitions()
        unassigned = self._unassigned_partitions(assigned)
        for consumer in self.current_assignment.keys():
            self.sorted_consumers.add(consumer)
        self._balance(prev_assignment, unassigned)
        self.owner.saw_tree_bin |= self.movements.saw_tree_bin
        return self.current_assignment.items()

    def _assign_owned_partitions(self) -> list[TopicPartition]:
        """GeneralAssignmentBuilder.assignOwnedPartitions: keep owned partitions of topics the
        member still subscribes to."""
        assigned: list[TopicPartition] = []
        for consumer in self.current_assignment.keys():
            partitions = _nn(self.current_assignment.get(consumer))
            subscription = self.subscriptions.get(consumer)
            if subscription is None:
                for tp in partitions:
                    self.current_partition_consumer.pop(tp, None)
                self.current_assignment.remove(consumer)
                continue
            kept: list[TopicPartition] = []
            for tp in partitions:
                if tp[0] not in self.topic_consumers:
                    self.current_partition_consumer.pop(tp, None)
                elif tp[0] not in subscription.topics:
                    # dropped from the list but (as in Java) not from currentPartitionConsumer
                    self.revocation_required = True
                else:
                    kept.append(tp)
                    assigned.append(tp)
            partitions[:] = kept
        return assigned

    def _unassigned_partitions(self, sorted_assigned: list[TopicPartition]) -> list[TopicPartition]:
        """GeneralAssignmentBuilder.getUnassignedPartitions (the same two-pointer walk); with
        nothing assigned it returns sortedAllPartitions itself, as Java does."""
        if not sorted_assigned:
            return self.sorted_all_partitions
        # PartitionComparator: topic's potential consumers, topic, partition
        sorted_assigned.sort(key=lambda tp: (len(self.topic_consumers[tp[0]]), java_str_key(tp[0]), tp[1]))
        return _walk_unassigned(self.sorted_all_partitions, sorted_assigned)

    def _prepopulate_current_assignments(self, prev_assignment: dict[TopicPartition, tuple[str, int]]) -> None:
        """GeneralAssignmentBuilder.prepopulateCurrentAssignments: partitions members held in
        generations before the newest, for moving partitions back to their previous owner."""
        max_generation = self.owner.max_generation
        for consumer, subscription in self.subscriptions.items():
            member_data = self.owner.member_data(subscription)
            if member_data.generation is not None and member_data.generation < max_generation:
                self._update_prev_assignment(prev_assignment, member_data.partitions, consumer, member_data.generation)
            elif member_data.generation is None and max_generation > DEFAULT_GENERATION:
                self._update_prev_assignment(prev_assignment, member_data.partitions, consumer, DEFAULT_GENERATION)

    @staticmethod
    def _update_prev_assignment(
        prev_assignment: dict[TopicPartition, tuple[str, int]],
        partitions: Iterable[TopicPartition],
        consumer: str,
        generation: int,
    ) -> None:
        """updatePrevAssignment: the latest earlier generation wins; on a tie, the first member."""
        for tp in partitions:
            previous = prev_assignment.get(tp)
            if previous is None or generation > previous[1]:
                prev_assignment[tp] = (consumer, generation)

    def _max_assignment_size(self, topics: Sequence[str]) -> int:
        """getMaxAssignmentSize (a list as long as the topic map counts as all topics)."""
        if len(topics) == len(self.partitions_per_topic):
            return self.total_partitions
        return sum(self.partitions_per_topic[topic] for topic in topics)

    def _is_balanced(self) -> bool:
        """GeneralAssignmentBuilder.isBalanced."""
        sizes = self.current_assignment
        smallest = len(_nn(sizes.get(self.sorted_consumers.first())))
        largest = len(_nn(sizes.get(self.sorted_consumers.last())))
        if smallest >= largest - 1:
            return True
        all_partitions: dict[TopicPartition, str] = {}
        for consumer, partitions in self.current_assignment.items():
            for tp in partitions:
                all_partitions[tp] = consumer
        for consumer in self.sorted_consumers.snapshot():
            partitions = _nn(sizes.get(consumer))
            count = len(partitions)
            topics = _nn(self.consumer_topics.get(consumer))
            if count == self._max_assignment_size(topics):
                continue
            owned = set(partitions)
            for topic in topics:
                for p in range(self.partitions_per_topic[topic]):
                    if (topic, p) not in owned:
                        other = all_partitions.get((topic, p))
                        if count + 1 < len(_nn(sizes.get(other))):
                            return False
        return True

    def _maybe_assign_partition(self, tp: TopicPartition) -> bool:
        """maybeAssignPartition: to the member with fewest partitions that can take it."""
        for consumer in self.sorted_consumers.snapshot():
            if tp[0] in _nn(self.consumer_topics.get(consumer)):
                self.sorted_consumers.remove(consumer)
                _nn(self.current_assignment.get(consumer)).append(tp)
                self.current_partition_consumer[tp] = consumer
                self.sorted_consumers.add(consumer)
                return True
        return False

    def _can_topic_participate(self, topic: str) -> bool:
        return len(_nn(self.topic_consumers.get(topic))) >= 2

    def _can_consumer_participate(self, consumer: str) -> bool:
        """canConsumerParticipateInReassignment."""
        partitions = _nn(self.current_assignment.get(consumer))
        if len(partitions) < self._max_assignment_size(_nn(self.consumer_topics.get(consumer))):
            return True
        return any(self._can_topic_participate(tp[0]) for tp in partitions)

    def _balance(
        self, prev_assignment: dict[TopicPartition, tuple[str, int]], unassigned: list[TopicPartition]
    ) -> None:
        """GeneralAssignmentBuilder.balance (without the rack-matching first pass)."""
        initializing = len(_nn(self.current_assignment.get(self.sorted_consumers.last()))) == 0

        # maybeAssign(partitions, null, false)
        for tp in unassigned:
            if not self.topic_consumers[tp[0]]:
                continue
            self._maybe_assign_partition(tp)

        fixed_partitions = {
            (topic, p)
            for topic in self.topic_consumers
            if not self._can_topic_participate(topic)
            for p in range(self.partitions_per_topic[topic])
        }
        # ArrayList.removeAll, in place (unassigned may be sortedAllPartitions itself)
        self.sorted_all_partitions[:] = [tp for tp in self.sorted_all_partitions if tp not in fixed_partitions]
        unassigned[:] = [tp for tp in unassigned if tp not in fixed_partitions]

        fixed_assignments: JavaHashMap[str, list[TopicPartition]] = JavaHashMap(string_hash)
        for consumer in self.consumer_topics.keys():
            if not self._can_consumer_participate(consumer):
                self.sorted_consumers.remove(consumer)
                fixed_assignments.put(consumer, _nn(self.current_assignment.remove(consumer)))

        pre_balance = self._deep_copy(self.current_assignment)
        pre_balance_partition_consumers = dict(self.current_partition_consumer)

        if not self.revocation_required:
            self._perform_reassignments(unassigned, prev_assignment)
        reassigned = self._perform_reassignments(self.sorted_all_partitions, prev_assignment)

        # keep the moves only if they made the assignment more balanced
        if not initializing and reassigned and _balance_score(self.current_assignment) >= _balance_score(pre_balance):
            self._deep_copy_into(pre_balance, self.current_assignment)
            self.current_partition_consumer.clear()
            self.current_partition_consumer.update(pre_balance_partition_consumers)

        for consumer, partitions in fixed_assignments.items():
            self.current_assignment.put(consumer, partitions)
            self.sorted_consumers.add(consumer)

    def _perform_reassignments(
        self, reassignable: list[TopicPartition], prev_assignment: dict[TopicPartition, tuple[str, int]]
    ) -> bool:
        """performReassignments: move partitions from crowded members until balanced."""
        sizes = self.current_assignment
        performed = False
        while True:
            modified = False
            for tp in reassignable:
                if self._is_balanced():
                    break
                consumer = self.current_partition_consumer.get(tp)
                previous = prev_assignment.get(tp)
                if previous is not None and len(_nn(sizes.get(consumer))) > len(_nn(sizes.get(previous[0]))) + 1:
                    self._reassign_partition_to(tp, previous[0])
                    performed = modified = True
                    continue
                # (the rack-aware choice needs consumer racks: skipped)
                for other in _nn(self.topic_consumers.get(tp[0])):
                    if len(_nn(sizes.get(consumer))) > len(_nn(sizes.get(other))) + 1:
                        self._reassign_partition(tp)
                        performed = modified = True
                        break
            if not modified:
                return performed

    def _reassign_partition(self, tp: TopicPartition) -> None:
        """reassignPartition(partition): to the least loaded member that can take it."""
        new_consumer = None
        for candidate in self.sorted_consumers.snapshot():
            if tp[0] in _nn(self.consumer_topics.get(candidate)):
                new_consumer = candidate
                break
        self._reassign_partition_to(tp, new_consumer)

    def _reassign_partition_to(self, tp: TopicPartition, new_consumer: str | None) -> None:
        consumer = self.current_partition_consumer.get(tp)
        to_move = self.movements.partition_to_be_moved(tp, consumer, new_consumer)
        self._process_partition_movement(to_move, new_consumer)

    def _process_partition_movement(self, tp: TopicPartition, new_consumer: str | None) -> None:
        old_consumer = self.current_partition_consumer.get(tp)
        self.sorted_consumers.remove(old_consumer)
        self.sorted_consumers.remove(new_consumer)
        self.movements.move_partition(tp, old_consumer, new_consumer)
        _remove_first(_nn(self.current_assignment.get(old_consumer)), tp)
        _nn(self.current_assignment.get(new_consumer)).append(tp)
        self.current_partition_consumer[tp] = _nn(new_consumer)  # (the line above threw if None)
        self.sorted_consumers.add(new_consumer)
        self.sorted_consumers.add(old_consumer)

    @staticmethod
    def _deep_copy_into(
        source: JavaHashMap[str, list[TopicPartition]], dest: JavaHashMap[str, list[TopicPartition]]
    ) -> None:
        dest.clear()
        for consumer, partitions in source.items():
            dest.put(consumer, list(partitions))

    @classmethod
    def _deep_copy(cls, source: JavaHashMap[str, list[TopicPartition]]) -> JavaHashMap[str, list[TopicPartition]]:
        copy: JavaHashMap[str, list[TopicPartition]] = JavaHashMap(string_hash)
        cls._deep_copy_into(source, copy)
        return copy


def _balance_score(assignment: JavaHashMap[str, list[TopicPartition]]) -> int:
    """getBalanceScore: the sum over member pairs of their size difference."""
    sizes = sorted(len(partitions) for partitions in assignment.values())
    n = len(sizes)
    return sum(size * (2 * i - n + 1) for i, size in enumerate(sizes))
