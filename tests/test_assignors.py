"""lib.assignors against Kafka's own assignors (kafka-clients 4.3.1).

Three kinds of evidence: the assignors' documented examples and a hand-computed range skew;
cases from Kafka's unit tests (AbstractStickyAssignorTest, StickyAssignorTest,
CooperativeStickyAssignorTest) with their expected lists; and a differential test that runs
~300 seeded random groups through tests/java/AssignorOracle.java (the real Java classes, one JVM
for the whole module) and requires the same member -> partitions for all four assignors.
No Spark, no broker."""

from __future__ import annotations

import itertools
import os
import random
import struct
import subprocess
import warnings
from urllib.parse import quote, unquote

import pytest

from lib.assignors import (
    ASSIGNOR_NAMES,
    AssignorError,
    Subscription,
    TopicPartition,
    UnknownAssignorError,
    assign,
    encode_sticky_user_data,
    sticky,
)
from lib.assignors.javautil import JavaHashMap, java_str_key, string_hash, topic_partition_hash

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KAFKA_JARS = os.path.join(REPO, ".jars", "kafka4")
CLIENTS_JAR = os.path.join(KAFKA_JARS, "kafka-clients-4.3.1.jar")
ORACLE = os.path.join(REPO, "tests", "java", "AssignorOracle.java")

S = Subscription
STICKY = ("sticky", "cooperative-sticky")


def tps(topic: str, *partitions: int) -> list[TopicPartition]:
    return [(topic, p) for p in partitions]


def result(**members: list[TopicPartition]) -> dict[str, list[TopicPartition]]:
    return {m: sorted(parts) for m, parts in members.items()}


# --- Kafka's test-subscription builders ------------------------------------------------------


def plain(member: str, topics: list[str]) -> Subscription:
    """AbstractStickyAssignorTest.subscription: topics only (no user data, no generation)."""
    return S(member, tuple(topics))


def v2(assignor: str, member: str, topics: list[str], owned: list[TopicPartition], generation: int) -> Subscription:
    """buildSubscriptionV2Above of StickyAssignorTest / CooperativeStickyAssignorTest: owned
    partitions and generation in the subscription; the sticky user data carries them too, the
    cooperative one the assignor's own generation (-1 before any onAssignment)."""
    if assignor == "sticky":
        user_data = encode_sticky_user_data(owned, generation)
    else:
        user_data = struct.pack(">i", -1)
    return S(member, tuple(topics), owned_partitions=tuple(owned), generation_id=generation, user_data=user_data)


def owned_now(assignor: str, subscriptions: list[Subscription], assignment: dict, generation: int = 1) -> list:
    """The follow-up rebalance CooperativeStickyAssignorTest.verifyValidityAndBalance runs: every
    member now owns what it was given."""
    return [v2(assignor, s.member_id, list(s.topics), assignment[s.member_id], generation) for s in subscriptions]


# --- documented examples -----------------------------------------------------------------------


def test_range_javadoc_example():
    subs = [S("C0", ("t0", "t1")), S("C1", ("t0", "t1"))]
    assert assign("range", {"t0": 3, "t1": 3}, subs) == result(
        C0=tps("t0", 0, 1) + tps("t1", 0, 1), C1=tps("t0", 2) + tps("t1", 2)
    )


def test_range_javadoc_static_members_keep_their_ranges_across_new_member_ids():
    # after a rolling bounce C0 -> C3 and C1 -> C2: by member id the ranges would swap, but
    # the group.instance.ids I0 < I1 decide
    subs = [S("C3", ("t0", "t1"), group_instance_id="I0"), S("C2", ("t0", "t1"), group_instance_id="I1")]
    assert assign("range", {"t0": 3, "t1": 3}, subs) == result(
        C3=tps("t0", 0, 1) + tps("t1", 0, 1), C2=tps("t0", 2) + tps("t1", 2)
    )
    dynamic = [S("C3", ("t0", "t1")), S("C2", ("t0", "t1"))]
    assert assign("range", {"t0": 3, "t1": 3}, dynamic) == result(
        C2=tps("t0", 0, 1) + tps("t1", 0, 1), C3=tps("t0", 2) + tps("t1", 2)
    )


def test_range_skew_two_topics_of_ten_over_three_members():
    subs = [S(c, ("t0", "t1")) for c in ("C0", "C1", "C2")]
    got = assign("range", {"t0": 10, "t1": 10}, subs)
    assert got == result(
        C0=tps("t0", 0, 1, 2, 3) + tps("t1", 0, 1, 2, 3),
        C1=tps("t0", 4, 5, 6) + tps("t1", 4, 5, 6),
        C2=tps("t0", 7, 8, 9) + tps("t1", 7, 8, 9),
    )
    assert [len(got[c]) for c in ("C0", "C1", "C2")] == [8, 6, 6]


def test_range_static_members_sort_before_dynamic_ones():
    # listed dynamic, static, dynamic; MemberInfo puts the static member first although its
    # member id sorts last
    subs = [S("a-dynamic", ("t",)), S("z-static", ("t",), group_instance_id="instance-1"), S("b-dynamic", ("t",))]
    assert assign("range", {"t": 6}, subs) == result(
        **{"z-static": tps("t", 0, 1), "a-dynamic": tps("t", 2, 3), "b-dynamic": tps("t", 4, 5)}
    )


def test_roundrobin_javadoc_examples():
    both = [S("C0", ("t0", "t1")), S("C1", ("t0", "t1"))]
    assert assign("roundrobin", {"t0": 3, "t1": 3}, both) == result(
        C0=tps("t0", 0, 2) + tps("t1", 1), C1=tps("t0", 1) + tps("t1", 0, 2)
    )
    # unequal subscriptions: a member is skipped for topics it does not subscribe to
    unequal = [S("C0", ("t0",)), S("C1", ("t0", "t1")), S("C2", ("t0", "t1", "t2"))]
    assert assign("roundrobin", {"t0": 1, "t1": 2, "t2": 3}, unequal) == result(
        C0=tps("t0", 0), C1=tps("t1", 0), C2=tps("t1", 1) + tps("t2", 0, 1, 2)
    )


def test_roundrobin_javadoc_rolling_bounce_with_and_without_static_members():
    counts = {"t0": 3, "t1": 3}
    before = assign("roundrobin", counts, [S(c, ("t0", "t1")) for c in ("C0", "C1", "C2")])
    assert before == result(
        C0=tps("t0", 0) + tps("t1", 0), C1=tps("t0", 1) + tps("t1", 1), C2=tps("t0", 2) + tps("t1", 2)
    )
    # C0 -> C5, C1 -> C3, C2 -> C4: the assignment follows the new member-id order
    bounced = [S("C5", ("t0", "t1")), S("C3", ("t0", "t1")), S("C4", ("t0", "t1"))]
    assert assign("roundrobin", counts, bounced) == result(
        C3=tps("t0", 0) + tps("t1", 0), C4=tps("t0", 1) + tps("t1", 1), C5=tps("t0", 2) + tps("t1", 2)
    )
    static = [S(m, ("t0", "t1"), group_instance_id=i) for m, i in (("C5", "I0"), ("C3", "I1"), ("C4", "I2"))]
    assert assign("roundrobin", counts, static) == result(
        C5=tps("t0", 0) + tps("t1", 0), C3=tps("t0", 1) + tps("t1", 1), C4=tps("t0", 2) + tps("t1", 2)
    )


@pytest.mark.parametrize("assignor", STICKY)
def test_sticky_javadoc_example_1(assignor):
    topics = ("t0", "t1", "t2", "t3")
    counts = dict.fromkeys(topics, 2)
    first = assign(assignor, counts, [S(c, topics) for c in ("C0", "C1", "C2")])
    # as the javadoc says (and round robin gives the same)
    assert first == result(
        C0=[("t0", 0), ("t1", 1), ("t3", 0)], C1=[("t0", 1), ("t2", 0), ("t3", 1)], C2=[("t1", 0), ("t2", 1)]
    )
    assert first == assign("roundrobin", counts, [S(c, topics) for c in ("C0", "C1", "C2")])
    # C1 leaves. The javadoc's C0 [t0p0, t1p1, t3p0, t2p0], C2 [t1p0, t2p1, t0p1, t3p1] is the
    # pre-2.3 algorithm's; 4.3.1 also keeps every previous partition, but deals C1's three
    # (in topic order) round-robin from C0: C0 gets t0p1
    after = [v2(assignor, c, list(topics), first[c], 1) for c in ("C0", "C2")]
    assert assign(assignor, counts, after) == result(
        C0=[("t0", 0), ("t1", 1), ("t3", 0), ("t0", 1)], C2=[("t1", 0), ("t2", 1), ("t2", 0), ("t3", 1)]
    )


@pytest.mark.parametrize("assignor", STICKY)
def test_sticky_javadoc_example_2(assignor):
    counts = {"t0": 1, "t1": 2, "t2": 3}
    subs = [S("C0", ("t0",)), S("C1", ("t0", "t1")), S("C2", ("t0", "t1", "t2"))]
    first = assign(assignor, counts, subs)
    assert first == result(C0=tps("t0", 0), C1=tps("t1", 0, 1), C2=tps("t2", 0, 1, 2))
    # C0 leaves: sticky keeps all five other assignments
    after = [v2(assignor, s.member_id, list(s.topics), first[s.member_id], 1) for s in subs[1:]]
    assert assign(assignor, counts, after) == result(C1=tps("t0", 0) + tps("t1", 0, 1), C2=tps("t2", 0, 1, 2))


# --- Kafka's unit tests ------------------------------------------------------------------------


@pytest.mark.parametrize("assignor", ASSIGNOR_NAMES)
def test_kafka_one_consumer_multiple_topics(assignor):
    # testOneConsumerMultipleTopics
    got = assign(assignor, {"topic1": 1, "topic2": 2}, [plain("consumer", ["topic1", "topic2"])])
    assert got == result(consumer=tps("topic1", 0) + tps("topic2", 0, 1))


@pytest.mark.parametrize("assignor", ASSIGNOR_NAMES)
def test_kafka_one_consumer_no_topic_and_nonexistent_topic(assignor):
    # testOneConsumerNoTopic, testOneConsumerNonexistentTopic
    assert assign(assignor, {}, [plain("consumer", [])]) == {"consumer": []}
    assert assign(assignor, {"other": 3}, [plain("consumer", ["topic"])]) == {"consumer": []}
    assert assign(assignor, {"topic": 0}, [plain("consumer", ["topic"])]) == {"consumer": []}


@pytest.mark.parametrize("assignor", ASSIGNOR_NAMES)
def test_kafka_two_consumers_one_topic_two_partitions(assignor):
    # testTwoConsumersOneTopicTwoPartitions
    got = assign(assignor, {"topic": 2}, [plain("consumer1", ["topic"]), plain("consumer2", ["topic"])])
    assert got == result(consumer1=tps("topic", 0), consumer2=tps("topic", 1))


@pytest.mark.parametrize("assignor", STICKY)
def test_kafka_sticky_mixed_subscriptions_and_two_topics(assignor):
    # testMultipleConsumersMixedTopicSubscriptions
    subs = [plain("consumer1", ["topic1"]), plain("consumer2", ["topic1", "topic2"]), plain("consumer3", ["topic1"])]
    assert assign(assignor, {"topic1": 3, "topic2": 2}, subs) == result(
        consumer1=tps("topic1", 0, 2), consumer2=tps("topic2", 0, 1), consumer3=tps("topic1", 1)
    )
    # testTwoConsumersTwoTopicsSixPartitions
    subs = [plain("consumer1", ["topic1", "topic2"]), plain("consumer2", ["topic1", "topic2"])]
    assert assign(assignor, {"topic1": 3, "topic2": 3}, subs) == result(
        consumer1=tps("topic1", 0, 2) + tps("topic2", 1), consumer2=tps("topic1", 1) + tps("topic2", 0, 2)
    )


@pytest.mark.parametrize("assignor", STICKY)
def test_kafka_sticky_quota_cases(assignor):
    both = ["topic1", "topic2"]
    # testConsumerOwningMinQuotaExpectedMaxQuota
    subs = [
        v2(assignor, "consumer1", both, tps("topic1", 0) + tps("topic2", 1), 1),
        v2(assignor, "consumer2", both, tps("topic1", 1) + tps("topic2", 2), 1),
    ]
    assert assign(assignor, {"topic1": 2, "topic2": 3}, subs) == result(
        consumer1=tps("topic1", 0) + tps("topic2", 1, 0), consumer2=tps("topic1", 1) + tps("topic2", 2)
    )
    # testAllConsumersAreUnderMinQuota
    subs = [
        v2(assignor, "consumer1", both, tps("topic1", 0), 1),
        v2(assignor, "consumer2", both, tps("topic1", 1), 1),
        v2(assignor, "consumer3", both, [], 1),
    ]
    assert assign(assignor, {"topic1": 2, "topic2": 3}, subs) == result(
        consumer1=tps("topic1", 0) + tps("topic2", 1),
        consumer2=tps("topic1", 1) + tps("topic2", 2),
        consumer3=tps("topic2", 0),
    )
    # testAllConsumersReachExpectedQuotaAndAreConsideredFilled
    subs = [
        v2(assignor, "consumer1", ["topic"], tps("topic", 0, 1), 1),
        v2(assignor, "consumer2", ["topic"], tps("topic", 2), 1),
        v2(assignor, "consumer3", ["topic"], [], 1),
    ]
    assert assign(assignor, {"topic": 4}, subs) == result(
        consumer1=tps("topic", 0, 1), consumer2=tps("topic", 2), consumer3=tps("topic", 3)
    )


@pytest.mark.parametrize("assignor", STICKY)
def test_kafka_max_quota_consumers_more_than_expected(assignor):
    # testMaxQuotaConsumerMoreThanNumExpectedMaxCapacityMembers: topic2-0 goes to consumer3,
    # which for the cooperative assignor means: first revoked, given in the next rebalance
    both = ["topic1", "topic2"]
    subs = [
        v2(assignor, "consumer1", both, tps("topic1", 0) + tps("topic2", 0), 1),
        v2(assignor, "consumer2", both, tps("topic1", 1) + tps("topic2", 1), 1),
        v2(assignor, "consumer3", both, [], 1),
    ]
    got = assign(assignor, {"topic1": 2, "topic2": 2}, subs)
    final = result(
        consumer1=tps("topic1", 0), consumer2=tps("topic1", 1) + tps("topic2", 1), consumer3=tps("topic2", 0)
    )
    if assignor == "sticky":
        assert got == final
    else:
        assert got == {**final, "consumer3": []}
        assert assign(assignor, {"topic1": 2, "topic2": 2}, owned_now(assignor, subs, got)) == final


@pytest.mark.parametrize("assignor", STICKY)
def test_kafka_add_remove_consumer_one_topic(assignor):
    # testAddRemoveConsumerOneTopic
    counts = {"topic": 3}
    first = assign(assignor, counts, [plain("consumer1", ["topic"])])
    assert first == result(consumer1=tps("topic", 0, 1, 2))

    subs = [v2(assignor, "consumer1", ["topic"], first["consumer1"], 1), v2(assignor, "consumer2", ["topic"], [], 1)]
    second = assign(assignor, counts, subs)
    if assignor == "sticky":
        assert second == result(consumer1=tps("topic", 0, 1), consumer2=tps("topic", 2))
    else:  # topic-2 transfers ownership: left out until consumer1 has revoked it
        assert second == result(consumer1=tps("topic", 0, 1), consumer2=[])
        second = assign(assignor, counts, owned_now(assignor, subs, second))
        assert second == result(consumer1=tps("topic", 0, 1), consumer2=tps("topic", 2))

    third = assign(assignor, counts, [v2(assignor, "consumer2", ["topic"], second["consumer2"], 1)])
    assert third == result(consumer2=tps("topic", 0, 1, 2))


@pytest.mark.parametrize("assignor", STICKY)
def test_kafka_add_remove_two_consumers_two_topics(assignor):
    # testAddRemoveTwoConsumersTwoTopics
    both = ["topic1", "topic2"]
    counts = {"topic1": 3, "topic2": 4}
    first = assign(assignor, counts, [plain("consumer1", both), plain("consumer2", both)])
    assert first == result(
        consumer1=tps("topic1", 0, 2) + tps("topic2", 1, 3), consumer2=tps("topic1", 1) + tps("topic2", 0, 2)
    )

    subs = [
        v2(assignor, "consumer1", both, first["consumer1"], 1),
        v2(assignor, "consumer2", both, first["consumer2"], 1),
        v2(assignor, "consumer3", both, [], 1),
        v2(assignor, "consumer4", both, [], 1),
    ]
    second = assign(assignor, counts, subs)
    expected = result(
        consumer1=tps("topic1", 0) + tps("topic2", 1),
        consumer2=tps("topic2", 0) + tps("topic1", 1),
        consumer3=tps("topic1", 2) + tps("topic2", 3),
        consumer4=tps("topic2", 2),
    )
    if assignor == "sticky":
        assert second == expected
    else:  # partitionsTransferringOwnership {topic1-2: consumer3, topic2-3: consumer3, topic2-2: consumer4}
        assert second == {**expected, "consumer3": [], "consumer4": []}
        assert assign(assignor, counts, owned_now(assignor, subs, second)) == expected
        return

    subs = [v2(assignor, c, both, second[c], 1) for c in ("consumer3", "consumer4")]
    assert assign(assignor, counts, subs) == result(
        consumer3=tps("topic1", 2) + tps("topic2", 3) + tps("topic1", 0) + tps("topic2", 1),
        consumer4=tps("topic2", 2) + tps("topic1", 1) + tps("topic2", 0),
    )


@pytest.mark.parametrize("assignor", STICKY)
def test_kafka_partition_claimed_by_two_members_of_one_generation(assignor):
    # testPartitionsTransferringOwnershipIncludeThePartitionClaimedByMultipleConsumersInSameGeneration
    # and testAllConsumersHaveOwnedPartitionInvalidatedWhenClaimedByMultipleConsumersInSameGeneration*
    for partitions, consumer1 in ((3, tps("topic", 1)), (4, tps("topic", 1, 3))):
        subs = [
            v2(assignor, "consumer1", ["topic"], tps("topic", 0, 1), 1),
            v2(assignor, "consumer2", ["topic"], tps("topic", 0, 2), 1),
            v2(assignor, "consumer3", ["topic"], [], 1),
        ]
        # topic-0 counts as owned: the cooperative assignor holds it back until both revoked it
        consumer3 = tps("topic", 0) if assignor == "sticky" else []
        assert assign(assignor, {"topic": partitions}, subs) == result(
            consumer1=consumer1, consumer2=tps("topic", 2), consumer3=consumer3
        )


@pytest.mark.parametrize("assignor", STICKY)
def test_kafka_generations_decide_between_claims(assignor):
    both = ["topic", "topic2"]
    claimed = tps("topic", 0, 2) + tps("topic2", 1)
    # testOwnedPartitionsAreInvalidatedForConsumerWithStaleGeneration / ...WithNoGeneration
    for stale in (9, -1):
        subs = [v2(assignor, "consumer1", both, claimed, 10), v2(assignor, "consumer2", both, claimed, stale)]
        assert assign(assignor, {"topic": 3, "topic2": 3}, subs) == result(
            consumer1=claimed, consumer2=tps("topic", 1) + tps("topic2", 0, 2)
        )
    # testOwnedPartitionsAreInvalidatedForConsumerWithMultipleGeneration
    subs = [
        v2(assignor, "consumer1", both, tps("topic", 0) + tps("topic2", 1) + tps("topic", 1), 10),
        v2(assignor, "consumer2", both, tps("topic", 0) + tps("topic2", 1, 2), 8),
    ]
    assert assign(assignor, {"topic": 3, "topic2": 3}, subs) == result(
        consumer1=tps("topic", 0, 1) + tps("topic2", 1), consumer2=tps("topic", 2) + tps("topic2", 2, 0)
    )
    # testEnsurePartitionsAssignedToHighestGeneration
    three = ["topic", "topic2", "topic3"]
    subs = [
        v2(assignor, "consumer1", three, [("topic", 0), ("topic2", 0), ("topic3", 0)], 10),
        v2(assignor, "consumer2", three, [("topic", 1), ("topic2", 1), ("topic3", 1)], 9),
        v2(assignor, "consumer3", three, [("topic2", 1), ("topic3", 0), ("topic3", 2)], 8),
    ]
    assert assign(assignor, {"topic": 3, "topic2": 3, "topic3": 3}, subs) == result(
        consumer1=[("topic", 0), ("topic2", 0), ("topic3", 0)],
        consumer2=[("topic", 1), ("topic2", 1), ("topic3", 1)],
        consumer3=[("topic", 2), ("topic2", 2), ("topic3", 2)],
    )
    # testNoReassignmentOnCurrentMembers
    four = ["topic", "topic2", "topic3", "topic1"]
    subs = [
        v2(assignor, "consumer1", four, [], -1),
        v2(assignor, "consumer2", four, [("topic", 0), ("topic2", 0), ("topic1", 0)], 9),
        v2(assignor, "consumer3", four, [("topic3", 2), ("topic2", 2), ("topic1", 1)], 8),
        v2(assignor, "consumer4", four, [("topic3", 1), ("topic", 1), ("topic", 2)], 7),
    ]
    got = assign(assignor, dict.fromkeys(four, 3), subs)
    assert got["consumer1"] == sorted([("topic1", 2), ("topic2", 1), ("topic3", 0)])


def test_kafka_old_subscription_versions():
    # StickyAssignorTest.testAssignorWithOldVersionSubscriptions: v0 (previous assignment only
    # in the user data), v1 (plus ownedPartitions), v2
    t = ["topic1"]
    subs = [
        S("consumer1", ("topic1",), user_data=encode_sticky_user_data(tps("topic1", 0), 1)),
        S(
            "consumer2",
            ("topic1",),
            owned_partitions=tuple(tps("topic1", 1)),
            user_data=encode_sticky_user_data(tps("topic1", 1), 1),
        ),
        v2("sticky", "consumer3", t, [], 1),
    ]
    expected = result(consumer1=tps("topic1", 0), consumer2=tps("topic1", 1), consumer3=tps("topic1", 2))
    assert assign("sticky", {"topic1": 3}, subs) == expected
    # CooperativeStickyAssignorTest.testAssignorWithOldVersionSubscriptions: v1 subscriptions
    # carry the generation in the assignor's user data
    subs = [
        S("consumer1", ("topic1",), owned_partitions=tuple(tps("topic1", 0)), user_data=struct.pack(">i", 1)),
        S("consumer2", ("topic1",), owned_partitions=tuple(tps("topic1", 1)), user_data=struct.pack(">i", 1)),
        v2("cooperative-sticky", "consumer3", t, [], 1),
    ]
    assert assign("cooperative-sticky", {"topic1": 3}, subs) == expected


def test_kafka_sticky_user_data_is_what_the_sticky_assignor_reads():
    # StickyAssignorTest.testMemberDataWillHonorUserData / testMemberDataWithInconsistentData:
    # the eager sticky assignor trusts the user data over ownedPartitions and the generation field
    subs = [
        S(
            "c1",
            ("t",),
            owned_partitions=tuple(tps("t", 0)),
            generation_id=5,
            user_data=encode_sticky_user_data(tps("t", 1), 4),
        ),
        S("c2", ("t",)),
    ]
    assert assign("sticky", {"t": 2}, subs)["c1"] == tps("t", 1)
    assert assign("cooperative-sticky", {"t": 2}, subs)["c1"] == tps("t", 0)


# --- properties ----------------------------------------------------------------------------------


def test_unknown_assignor_and_empty_group():
    with pytest.raises(UnknownAssignorError):
        assign("uniform", {"t": 1}, [S("c", ("t",))])
    assert assign("range", {"t": 1}, []) == {}
    # Java: CircularIterator of no members; 0 % 0 in the constrained sticky builder
    with pytest.raises(AssignorError, match="IllegalArgumentException"):
        assign("roundrobin", {"t": 1}, [])
    for assignor in STICKY:
        with pytest.raises(AssignorError, match="ArithmeticException"):
            assign(assignor, {"t": 1}, [])


def test_java_string_semantics():
    assert string_hash("") == 0
    assert string_hash("Aa") == string_hash("BB") == 2112
    assert string_hash("consumer-1") == -166239206  # "consumer-1".hashCode() in Java (jshell)
    assert topic_partition_hash(("topic", 3)) == 31 * (31 + 3) + string_hash("topic")
    # compareTo works on UTF-16 units: a supplementary character (a surrogate pair) sorts
    # before U+FF01, although its code point is larger
    assert sorted(["t\uff01", "t\U0001f600"], key=java_str_key) == ["t\U0001f600", "t\uff01"]


def test_member_order_only_matters_within_a_hashmap_bin():
    """The leader's subscription map iterates members bin by bin and, within a bin, in the
    JoinGroup order. Here A and Q share a bin (hash 65 and 81, table of 16) and both own more
    than the quota lets them keep: whoever the map yields first keeps three. Java agrees
    (test_differential_against_kafka runs both orders)."""
    counts = {"t": 7}
    a = v2("sticky", "A", ["t"], tps("t", 0, 1, 2), 1)
    q = v2("sticky", "Q", ["t"], tps("t", 3, 4, 5), 1)
    c = v2("sticky", "C", ["t"], tps("t", 6), 1)
    assert assign("sticky", counts, [a, q, c]) == result(A=tps("t", 0, 1, 2), Q=tps("t", 3, 4), C=tps("t", 5, 6))
    assert assign("sticky", counts, [q, a, c]) == result(A=tps("t", 0, 1), Q=tps("t", 3, 4, 5), C=tps("t", 2, 6))
    # members in different bins: any order gives the same
    b = v2("sticky", "B", ["t"], tps("t", 3, 4, 5), 1)
    for assignor in ASSIGNOR_NAMES:
        runs = {str(assign(assignor, counts, order)) for order in ([a, b, c], [c, b, a], [b, c, a])}
        assert len(runs) == 1, assignor


def test_warns_where_java_would_iterate_a_tree_bin():
    """Member ids with one hash code share a bin whatever the table size: the 9th and 10th
    grow the table (16 -> 32 -> 64), the 11th turns the bin into a red-black tree, which Java
    iterates in tree order; that order is not modelled."""
    same_hash = ["".join(blocks) for blocks in itertools.product(("Aa", "BB"), repeat=4)]  # all hash alike
    assert len({string_hash(s) for s in same_hash}) == 1
    subscriptions = [S(m, ("t",)) for m in same_hash[:11]]
    with pytest.warns(RuntimeWarning, match="red-black"):
        assign("sticky", {"t": 20}, subscriptions)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assign("sticky", {"t": 20}, subscriptions[:10])  # still a list


def test_encode_sticky_user_data_layout():
    data = encode_sticky_user_data([("t0", 1), ("t1", 2), ("t0", 0)], 5)
    assert data.hex() == "000000020002743000000002000000010000000000027431000000010000000200000005"
    assert encode_sticky_user_data([("t0", 1)], None).hex() == "00000001000274300000000100000001"


# --- the differential test -------------------------------------------------------------------

TOPIC_POOL = ["t0", "t1", "t2", "orders", "payments", "topic-é", "t\uff01", "t\U0001f600", "Aa", "BB"]
SHORT_IDS = ["C0", "C1", "C2", "C3", "A", "Q", "B", "Aa", "BB", "consumer1", "consumer2", "z", ""]


def _member_id(rng: random.Random) -> str:
    if rng.random() < 0.5:
        return rng.choice(SHORT_IDS)
    return f"consumer-{rng.choice(['app', 'grp'])}-{rng.randint(1, 9)}-{rng.getrandbits(64):016x}"


def _random_group(rng: random.Random, max_members: int = 7, max_topics: int = 4, max_partitions: int = 12):
    topics = rng.sample(TOPIC_POOL, rng.randint(1, max_topics))
    counts = {t: rng.randint(1, max_partitions) for t in topics}
    if rng.random() < 0.1:
        counts[rng.choice(topics)] = 0  # in metadata without partitions
    subscribable = topics + (["ghost"] if rng.random() < 0.15 else [])  # "ghost": not in metadata

    ids: list[str] = []
    size = rng.randint(1, max_members)
    while len(ids) < size:
        member = _member_id(rng)
        if member not in ids:
            ids.append(member)

    same = rng.random() < 0.5
    common = rng.sample(subscribable, rng.randint(1, len(subscribable)))
    partitions = [(t, p) for t in topics for p in range(counts[t] + (1 if rng.random() < 0.05 else 0))]

    # a previous assignment, with some partitions claimed twice
    previous: dict[str, list[TopicPartition]] = {m: [] for m in ids}
    for tp in partitions:
        if rng.random() < 0.75:
            previous[rng.choice(ids)].append(tp)
        if rng.random() < 0.08:
            previous[rng.choice(ids)].append(tp)
    base_generation = rng.randint(1, 6)

    subscriptions = []
    for member in ids:
        member_topics = list(common) if same else rng.sample(subscribable, rng.randint(0, len(subscribable)))
        if member_topics and rng.random() < 0.05:
            member_topics.append(member_topics[0])  # a topic listed twice
        owned = previous[member]
        rng.shuffle(owned)
        generation = rng.choice([base_generation, base_generation, base_generation - 1, base_generation - 2, None])
        instance = rng.choice([None, None, None, f"instance-{rng.randint(0, 9)}"])
        rack = rng.choice([None, None, "rack-a", "rack-b", ""])
        kind = rng.choice(["none", "sticky-v0", "sticky-v1", "v2", "v2", "v2-mixed", "coop-v1", "coop-v2", "garbage"])
        owned_field: list[TopicPartition] = []
        generation_field = None
        user_data = None
        if kind == "sticky-v0":  # previous assignment in the user data, pre-2.3 layout
            user_data = encode_sticky_user_data(owned, None)
        elif kind == "sticky-v1":
            user_data, owned_field = encode_sticky_user_data(owned, generation), owned
        elif kind == "v2":
            user_data, owned_field, generation_field = encode_sticky_user_data(owned, generation), owned, generation
        elif kind == "v2-mixed":  # user data and subscription disagree
            stale = owned[: len(owned) // 2]
            user_data = encode_sticky_user_data(stale, rng.choice([None, base_generation - 1, base_generation + 1]))
            owned_field, generation_field = owned, rng.choice([generation, -1, base_generation + 1])
        elif kind == "coop-v1":  # CooperativeStickyAssignor's own user data: the generation
            user_data, owned_field = struct.pack(">i", generation if generation is not None else -1), owned
        elif kind == "coop-v2":
            user_data, owned_field, generation_field = struct.pack(">i", -1), owned, generation
        elif kind == "garbage":
            user_data = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 9)))
            owned_field = owned if rng.random() < 0.5 else []
        subscriptions.append(
            S(
                member,
                tuple(member_topics),
                group_instance_id=instance,
                owned_partitions=tuple(owned_field),
                generation_id=generation_field,
                rack_id=rack,
                user_data=user_data,
            )
        )
    return counts, subscriptions


def _next_round(rng: random.Random, counts: dict[str, int], subscriptions: list[Subscription], assignor: str):
    """A realistic follow-up: the members report what they were just given (as the assignor's
    members do), then one leaves or a new one joins."""
    given = assign(assignor, counts, subscriptions)
    generation = rng.randint(2, 9)
    members = [
        v2(assignor, s.member_id, list(s.topics), given[s.member_id], generation)
        if rng.random() < 0.9
        else v2(assignor, s.member_id, list(s.topics), given[s.member_id], generation - 1)
        for s in subscriptions
    ]
    if len(members) > 1 and rng.random() < 0.5:
        members.pop(rng.randrange(len(members)))
    else:
        topics = list(subscriptions[0].topics) if rng.random() < 0.6 else rng.sample(list(counts), 1)
        members.insert(rng.randrange(len(members) + 1), S(f"joiner-{rng.getrandbits(32):08x}", tuple(topics)))
    return members


def _raw_sticky_user_data(topics: list[tuple[bytes, list[int]]], generation: int) -> bytes:
    """StickyAssignor v1 user data with the topic names given as raw bytes."""
    out = [struct.pack(">i", len(topics))]
    for name, partitions in topics:
        out.append(
            struct.pack(">h", len(name)) + name + struct.pack(f">i{len(partitions)}i", len(partitions), *partitions)
        )
    return b"".join(out) + struct.pack(">i", generation)


def _generate_cases(seed: int = 20260611) -> list[tuple[str, dict[str, int], list[Subscription]]]:
    rng = random.Random(seed)
    cases = []
    for i in range(300):
        counts, subscriptions = _random_group(rng)
        cases.append((f"random-{i}", counts, subscriptions))
    for i in range(40):  # rebalances after a sticky assignment
        counts, subscriptions = _random_group(rng, max_members=8)
        subscriptions = [S(s.member_id, s.topics, group_instance_id=s.group_instance_id) for s in subscriptions]
        assignor = rng.choice(STICKY)
        cases.append((f"round2-{i}", counts, _next_round(rng, counts, subscriptions, assignor)))
    # more partitions: longer reassignment loops; this seed's cases move partitions back
    # (test_differential_against_kafka checks that they still do)
    wide = random.Random(3)
    for i in range(200):
        counts, subscriptions = _random_group(wide, max_topics=8, max_partitions=30)
        cases.append((f"wide-{i}", counts, subscriptions))
    for i in range(15):  # larger groups: HashMap resizes
        counts, subscriptions = _random_group(rng, max_members=40, max_topics=8, max_partitions=30)
        cases.append((f"large-{i}", counts, subscriptions))

    for n in (12, 13, 24, 25, 48, 49, 96, 97):  # either side of the HashMap's resize thresholds
        ids = [f"member-{rng.getrandbits(40):010x}" for _ in range(n)]
        counts = {"t": n + n // 3, "u": 3}
        owned: dict[str, list[TopicPartition]] = {m: [] for m in ids}
        for tp in [("t", p) for p in range(counts["t"])] + [("u", p) for p in range(3)]:
            owned[rng.choice(ids)].append(tp)
        subscriptions = [v2("sticky", m, ["t", "u"], owned[m], rng.choice([3, 3, 2])) for m in ids]
        cases.append((f"size-{n}", counts, subscriptions))

    # the examples whose Java result the tests above also pin
    topics = ["t"]
    a, q, b, c = (
        v2("sticky", m, topics, tps("t", *p), 1)
        for m, p in (("A", (0, 1, 2)), ("Q", (3, 4, 5)), ("B", (3, 4, 5)), ("C", (6,)))
    )
    cases += [("bin-aqc", {"t": 7}, [a, q, c]), ("bin-qac", {"t": 7}, [q, a, c]), ("bin-abc", {"t": 7}, [a, b, c])]
    cases.append(("range-skew", {"t0": 10, "t1": 10}, [S(m, ("t0", "t1")) for m in ("C0", "C1", "C2")]))
    cases.append(
        (
            "range-static",
            {"t": 6},
            [S("a-dynamic", ("t",)), S("z-static", ("t",), group_instance_id="i"), S("b-dynamic", ("t",))],
        )
    )
    four = ("t0", "t1", "t2", "t3")  # StickyAssignor's javadoc, example 1 after C1 left
    before = {"C0": [("t0", 0), ("t1", 1), ("t3", 0)], "C2": [("t1", 0), ("t2", 1)]}
    cases.append(
        ("sticky-javadoc-1", dict.fromkeys(four, 2), [v2("sticky", c, list(four), before[c], 1) for c in before])
    )
    before = {"C1": tps("t1", 0, 1), "C2": tps("t2", 0, 1, 2)}  # example 2 after C0 left
    subs = [v2("sticky", "C1", ["t0", "t1"], before["C1"], 1), v2("sticky", "C2", ["t0", "t1", "t2"], before["C2"], 1)]
    cases.append(("sticky-javadoc-2", {"t0": 1, "t1": 2, "t2": 3}, subs))
    cases.append(("empty-group", {"t": 3}, []))
    # ten ids with one hash code: one bin, whose 9th and 10th entries grow the table to 64
    same_hash = ["".join(blocks) for blocks in itertools.product(("Aa", "BB"), repeat=4)][:10]
    cases.append(
        ("same-hash", {"t": 25}, [v2("sticky", m, ["t"], tps("t", i, i + 10), 1) for i, m in enumerate(same_hash)])
    )
    # user data naming topics in malformed UTF-8: what they decode to decides what is kept
    malformed = [b"t\xff", b"t\xe2\x82", b"t\xed\xa0\x80", b"t\xf0\x9f\x98", b"t\xc0\xaf", b"t\xf8\x88\x80\x80\x80"]
    replaced = ["t" + "\ufffd" * k for k in range(1, 6)]
    topics = ["t\ufffd", *replaced[1:]]
    subs = [
        S(f"m{i}", tuple(topics), user_data=_raw_sticky_user_data([(raw, [0, 1])], 2))
        for i, raw in enumerate(malformed)
    ]
    cases.append(("malformed-utf8", dict.fromkeys(topics, 3), subs))
    # AbstractStickyAssignorTest.testReassignmentAfterOneConsumerLeaves (its asserts are
    # properties only; here Java's own result is the expectation)
    counts = {f"t{i:02d}": i for i in range(1, 20)}
    leaves = [plain(f"c{i:02d}", [f"t{j:02d}" for j in range(1, i + 1)]) for i in range(1, 20)]
    for assignor in STICKY:
        first = assign(assignor, counts, leaves)
        second = [
            v2(assignor, s.member_id, list(s.topics), first[s.member_id], 1) for s in leaves if s.member_id != "c10"
        ]
        cases.append((f"one-leaves-{assignor}", counts, second))
    # StickyAssignorTest.testSchemaBackwardCompatibility: consumer2 sends the v0 layout
    subs = [
        v2("sticky", "consumer1", ["topic"], tps("topic", 0, 2), 1),
        S("consumer2", ("topic",), user_data=encode_sticky_user_data(tps("topic", 1), None)),
        plain("consumer3", ["topic"]),
    ]
    cases.append(("schema-v0", {"topic": 3}, subs))
    return cases


ENCODE_CASES = [
    ("enc-simple", [("t0", 1), ("t1", 2), ("t0", 0)], 5),
    ("enc-v0", [("t0", 1)], None),
    ("enc-empty", [], 3),
    ("enc-colliding", [("Aa", 0), ("BB", 1), ("Aa", 2), ("C", 0)], -1),  # same bin: computeIfAbsent prepends
    ("enc-12-topics", [(f"topic-{i}", i) for i in range(12)], 7),
    ("enc-13-topics", [(f"topic-{i}", i) for i in range(13)], 7),  # over the threshold, not yet resized
    ("enc-14-topics", [(f"topic-{i}", i) for i in range(14)] + [("topic-0", 99)], 7),
    ("enc-40-topics", [(f"t{i}-{j}", j) for i in range(40) for j in range(2)], 123456),
]


def _token(s: str | None) -> str:
    return "-" if s is None else "=" + quote(s, safe="")


def _oracle_input(cases, encodes) -> str:
    lines = []
    for label, counts, subscriptions in cases:
        lines.append(f"case {label}")
        lines += [f"topic {_token(t)} {n}" for t, n in counts.items() if n > 0]
        for s in subscriptions:
            fields = [
                "member",
                _token(s.member_id),
                _token(s.group_instance_id),
                str(s.generation_id if s.generation_id is not None else -1),
                _token(s.rack_id),
                "-" if s.user_data is None else "x" + s.user_data.hex(),
                str(len(s.topics)),
                *(_token(t) for t in s.topics),
                str(len(s.owned_partitions)),
                *(f"{_token(t)} {p}" for t, p in s.owned_partitions),
            ]
            lines.append(" ".join(fields))
        lines.append("end")
    for label, partitions, generation in encodes:
        parts = " ".join(f"{_token(t)} {p}" for t, p in partitions)
        gen = "-" if generation is None else str(generation)
        lines.append(f"encode {label} {gen} {len(partitions)} {parts}".rstrip())
    return "\n".join(lines) + "\n"


def _parse_oracle(text: str):
    """-> ({label: {assignor: ("ok", {member: sorted partitions}, member order) | ("error", name)}},
    {label: hex})"""
    cases: dict[str, dict] = {}
    encoded: dict[str, str] = {}
    current: dict = {}
    members: dict[str, list[TopicPartition]] = {}
    order: list[str] = []
    for line in text.splitlines():
        tok = line.split(" ")
        if tok[0] == "case":
            current = cases.setdefault(tok[1], {})
        elif tok[0] == "encoded":
            encoded[tok[1]] = tok[2]
        elif tok[0] == "m":
            member = unquote(tok[1][1:])
            count = int(tok[2])
            members[member] = sorted((unquote(tok[3 + 2 * k][1:]), int(tok[4 + 2 * k])) for k in range(count))
            order.append(member)
        elif tok[0] in ASSIGNOR_NAMES:
            if tok[1] == "ok":
                members, order = {}, []
                current[tok[0]] = ("ok", members, order)
            else:
                current[tok[0]] = ("error", tok[2])
    return cases, encoded


def _python_outcome(assignor: str, counts: dict[str, int], subscriptions: list[Subscription]):
    try:
        return ("ok", assign(assignor, counts, subscriptions))
    except AssignorError as e:
        return ("error", e.java_exception)


def _java_map_order(member_ids: list[str], copies: int) -> list[str]:
    """Iteration order after re-putting the keys into `copies` fresh HashMaps, each in the
    previous one's order (the leader's subscription map, then the assignor's result map,
    then GroupAssignment's)."""
    keys = member_ids
    for _ in range(copies):
        m: JavaHashMap[str, None] = JavaHashMap(string_hash)
        for k in keys:
            m.put(k, None)
        keys = m.keys()
    return keys


@pytest.fixture(scope="module")
def kafka_oracle():
    """Every case of this module through one JVM: (cases, java results, java encodings)."""
    if not os.path.exists(CLIENTS_JAR):
        pytest.skip(f"{os.path.relpath(CLIENTS_JAR, REPO)} is missing (`make test` fetches it)")
    cases = _generate_cases()
    out = subprocess.run(
        ["java", "-cp", os.path.join(KAFKA_JARS, "*"), ORACLE],
        input=_oracle_input(cases, ENCODE_CASES),
        capture_output=True,
        text=True,
        encoding="utf-8",
        cwd=REPO,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    java_cases, encoded = _parse_oracle(out.stdout)
    assert len(java_cases) == len(cases), out.stderr[-4000:]
    return cases, java_cases, encoded


def _describe(label, counts, subscriptions, assignor, java, python) -> str:
    lines = [f"first difference: case {label!r}, assignor {assignor!r}", f"partitions_per_topic = {counts!r}"]
    lines.append("subscriptions = [")
    lines += [f"    {s!r}," for s in subscriptions]
    lines.append("]")
    lines.append(f"java   = {java!r}")
    lines.append(f"python = {python!r}")
    return "\n".join(lines)


def test_differential_against_kafka(kafka_oracle, monkeypatch):
    cases, java_cases, _ = kafka_oracle
    # count the moves that pick, among partitions that moved the opposite way, the first of a
    # HashSet: the one place the assignment depends on HashSet order
    moved_back_from = []
    pick = sticky._PartitionMovements.partition_to_be_moved

    def counting_pick(self, tp, old_consumer, new_consumer):
        for_topic = self.by_topic.get(tp[0], {})
        source = self.movements[tp][0] if tp in self.movements else old_consumer
        moved_back_from.append(len(for_topic.get((new_consumer, source), ())))
        return pick(self, tp, old_consumer, new_consumer)

    monkeypatch.setattr(sticky._PartitionMovements, "partition_to_be_moved", counting_pick)
    compared = 0
    for label, counts, subscriptions in cases:
        for assignor in ASSIGNOR_NAMES:
            java = java_cases[label][assignor]
            python = _python_outcome(assignor, counts, subscriptions)
            java_comparable = java if java[0] == "error" else ("ok", java[1])
            if python != java_comparable:
                pytest.fail(_describe(label, counts, subscriptions, assignor, java_comparable, python))
            compared += 1
            if assignor in ("range", "roundrobin") and java[0] == "ok":
                # the result map's iteration order checks the HashMap model against Java's own
                member_ids = list(dict.fromkeys(s.member_id for s in subscriptions))
                assert java[2] == _java_map_order(member_ids, 3), label
    assert compared == len(cases) * 4
    # the cases exercise what they are meant to: errors, both member orders, every assignor path
    outcomes = [java_cases[label][a] for label, _, _ in cases for a in ASSIGNOR_NAMES]
    assert {o[1] for o in outcomes if o[0] == "error"} >= {"IllegalStateException", "NullPointerException"}
    assert sum(n >= 2 for n in moved_back_from) >= 2
    assert java_cases["bin-aqc"]["sticky"][1] != java_cases["bin-qac"]["sticky"][1]
    # the documented examples' second steps, as test_sticky_javadoc_example_* expect them
    assert java_cases["sticky-javadoc-1"]["sticky"][1] == result(
        C0=[("t0", 0), ("t1", 1), ("t3", 0), ("t0", 1)], C2=[("t1", 0), ("t2", 1), ("t2", 0), ("t3", 1)]
    )
    assert java_cases["sticky-javadoc-2"]["cooperative-sticky"][1] == result(
        C1=tps("t0", 0) + tps("t1", 0, 1), C2=tps("t2", 0, 1, 2)
    )


def test_encoding_matches_kafka(kafka_oracle):
    _, _, encoded = kafka_oracle
    for label, partitions, generation in ENCODE_CASES:
        python = encode_sticky_user_data(partitions, generation).hex()
        if generation is None:
            # Java's serializer needs a generation; the v0 layout is the v1 one without it
            assert encoded[label] == "error:SchemaException"
            assert python == encode_sticky_user_data(partitions, 0).hex()[:-8]
        else:
            assert python == encoded[label], label
