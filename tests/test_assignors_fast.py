"""lib.assignors.fast (the batched numba kernels) against lib.assignors.assign, the reference.

Differential throughout: every problem's result must equal what ``assign`` returns (the same
partitions per member, the same Java exception) or be a FALLBACK (None). The cases: every
``assign`` call the tests of tests/test_assignors.py make (their documented examples and Kafka's
unit-test cases, run again with ``assign`` checked against the kernels), its seeded random
cases (the ones its Java oracle runs, also compared with Java's own answers), a seeded corpus of
busy-shaped groups (lib.testdata.assignments) whose FALLBACK rate must stay under 0.1%, and
hypothesis-drawn groups aimed at the string and HashMap corners (non-ASCII and colliding ids,
equal instance ids, duplicated topics, garbage user data)."""

from __future__ import annotations

import inspect
import itertools
import random
import struct
import warnings

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tests.test_assignors as reference_tests
from lib.assignors import ASSIGNOR_NAMES, AssignorError, Subscription, assign, encode_sticky_user_data
from lib.assignors.fast import (
    ASSIGNOR_CODES,
    ERROR,
    FALLBACK,
    OK,
    ProblemBatch,
    assign_arrays,
    assign_batch,
    build_batch,
    same_result,
)
from lib.assignors.javautil import string_hash
from lib.testdata.assignments import busy_problems
from schemas.tables import CLASSIC_MEMBER
from schemas.types import arrow_type
from tests.test_assignors import _generate_cases, _random_group, kafka_oracle  # noqa: F401 (a fixture, shared)

S = Subscription


def _reference(assignor, counts, subscriptions):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tree bins: the kernels fall back there
            return assign(assignor, counts, subscriptions)
    except AssignorError as e:
        return e


def _compare(problems) -> tuple[int, int]:
    """-> (problems compared, FALLBACKs); fails on the first difference."""
    results = assign_batch(problems)
    fallbacks = 0
    for (assignor, counts, subscriptions), fast in zip(problems, results):
        if fast is None:
            fallbacks += 1
            continue
        expected = _reference(assignor, counts, subscriptions)
        assert same_result(fast, expected), (
            f"{assignor} {counts!r}\n{subscriptions!r}\nfast      = {fast!r}\nreference = {expected!r}"
        )
    return len(problems), fallbacks


# --- every case of tests/test_assignors.py ---------------------------------------------------------


# where the reference test builds ids with one hash code on purpose: the kernels fall back
FALLS_BACK = {"test_warns_where_java_would_iterate_a_tree_bin"}


def _reference_test_calls():
    """Each test function of tests/test_assignors.py that calls assign and needs no fixture,
    with each of its parametrized assignors."""
    for name, function in inspect.getmembers(reference_tests, inspect.isfunction):
        if not name.startswith("test_") or "assign(" not in inspect.getsource(function):
            continue
        params = list(inspect.signature(function).parameters)
        if not params:
            yield pytest.param(function, {}, id=name)
        elif params == ["assignor"]:
            (mark,) = [m for m in function.pytestmark if m.name == "parametrize"]
            for assignor in mark.args[1]:
                yield pytest.param(function, {"assignor": assignor}, id=f"{name}[{assignor}]")


@pytest.mark.parametrize(("test_function", "kwargs"), list(_reference_test_calls()))
def test_every_assign_call_of_the_reference_tests(test_function, kwargs, monkeypatch):
    """The reference tests run as they are, each ``assign`` call also going through the kernels."""
    checked = []

    def assign_and_check(assignor, counts, subscriptions):
        if assignor not in ASSIGNOR_NAMES:
            return assign(assignor, counts, subscriptions)  # UnknownAssignorError, as expected
        expected = _reference(assignor, counts, subscriptions)
        (fast,) = assign_batch([(assignor, counts, subscriptions)])
        assert fast is None or same_result(fast, expected), f"{assignor} {counts!r} {subscriptions!r}: {fast!r}"
        checked.append(fast is not None)
        if isinstance(expected, AssignorError):
            raise expected
        return assign(assignor, counts, subscriptions)  # again, for the test's own warning checks

    monkeypatch.setattr(reference_tests, "assign", assign_and_check)
    test_function(**kwargs)
    assert checked
    if test_function.__name__ not in FALLS_BACK:
        assert all(checked), "a documented or Kafka unit-test case fell back"


def test_the_reference_tests_random_cases():
    cases = _generate_cases()
    problems = [(a, counts, subs) for _, counts, subs in cases for a in ASSIGNOR_NAMES]
    compared, fallbacks = _compare(problems)
    assert compared == len(cases) * 4
    # FALLBACK here: the general builder with an owned partition beyond its topic (these cases
    # make one in 5% of the topics), ids with one hash code
    assert fallbacks < 0.04 * compared


def test_java_oracle_cases(kafka_oracle):  # noqa: F811 (the fixture imported above)
    """Straight against Kafka's own classes: the oracle's answers for the same cases."""
    cases, java_cases, _ = kafka_oracle
    labelled = [(label, a, counts, subs) for label, counts, subs in cases for a in ASSIGNOR_NAMES]
    results = assign_batch([(a, counts, subs) for _, a, counts, subs in labelled])
    compared = 0
    for (label, assignor, _, _), fast in zip(labelled, results):
        if fast is None:
            continue
        java = java_cases[label][assignor]
        if java[0] == "error":
            assert isinstance(fast, AssignorError) and fast.java_exception == java[1], (label, assignor)
        else:
            assert fast == java[1], (label, assignor)
        compared += 1
    assert compared > 0.96 * len(labelled)


def test_more_seeded_random_groups():
    rng = random.Random(20260612)
    problems = []
    for _ in range(600):
        counts, subscriptions = _random_group(rng, max_members=12, max_topics=5, max_partitions=40)
        problems += [(a, counts, subscriptions) for a in ASSIGNOR_NAMES]
    compared, fallbacks = _compare(problems)
    assert fallbacks < 0.04 * compared


# --- busy-shaped groups ----------------------------------------------------------------------------


def test_busy_shaped_corpus():
    problems = busy_problems(4000, seed=11)
    compared, fallbacks = _compare(problems)
    assert {a for a, _, _ in problems} == set(ASSIGNOR_NAMES)
    assert fallbacks <= compared // 1000, f"FALLBACK rate {fallbacks / compared:.2%}"


def test_busy_shaped_follow_up_rounds():
    """The members report what the assignor just gave them (owned partitions, generations,
    user data), then one leaves or another joins: the rebalances a busy log is made of."""
    rng = random.Random(5)
    problems = []
    for assignor, counts, subscriptions in busy_problems(300, seed=12):
        if assignor in ("sticky", "cooperative-sticky") and subscriptions:
            problems.append((assignor, counts, reference_tests._next_round(rng, counts, subscriptions, assignor)))
    compared, fallbacks = _compare(problems)
    assert compared > 100 and fallbacks == 0


# --- corners ---------------------------------------------------------------------------------------

COLLIDING = ["".join(blocks) for blocks in itertools.product(("Aa", "BB"), repeat=4)]  # one hash code
ID_POOL = ["C0", "C1", "A", "Q", "B", "z", "", "é", "t\uff01", "t\U0001f600", "日本", "Aa", "BB", *COLLIDING[:6]]
TOPIC_POOL = ["t0", "t1", "orders", "topic-é", "t\uff01", "t\U0001f600", "Aa", "BB"]


@st.composite
def corner_problem(draw):
    assignor = draw(st.sampled_from(ASSIGNOR_NAMES))
    topics = draw(st.lists(st.sampled_from(TOPIC_POOL), min_size=1, max_size=4, unique=True))
    counts = {t: draw(st.integers(0, 9)) for t in topics}
    ids = draw(st.lists(st.one_of(st.sampled_from(ID_POOL), st.text(max_size=6)), max_size=9, unique=True))
    same = draw(st.booleans())
    common = draw(st.lists(st.sampled_from([*topics, "ghost"]), max_size=4))
    generation = draw(st.integers(1, 5))
    subscriptions = []
    for member in ids:
        member_topics = common if same else draw(st.lists(st.sampled_from([*topics, "ghost"]), max_size=4))
        owned = draw(st.lists(st.tuples(st.sampled_from(topics), st.integers(0, 9)), max_size=6))
        gen = draw(st.sampled_from([generation, generation, generation - 1, None]))
        kind = draw(st.sampled_from(["v2", "sticky-v0", "coop-v1", "garbage", "none"]))
        user_data = {
            "v2": encode_sticky_user_data(owned, gen),
            "sticky-v0": encode_sticky_user_data(owned, None),
            "coop-v1": struct.pack(">i", gen if gen is not None else -1),
            "garbage": draw(st.binary(max_size=10)),
            "none": None,
        }[kind]
        instance = draw(st.one_of(st.none(), st.sampled_from(["i0", "i1", "é"])))
        subscriptions.append(S(member, tuple(member_topics), instance, tuple(owned), gen, None, user_data))
    return assignor, counts, subscriptions


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(corner_problem(), min_size=1, max_size=8))
def test_corner_groups(problems):
    _compare(problems)


def test_java_string_order_and_hashes_of_non_ascii_ids():
    # a surrogate pair sorts before U+FF01 in Java (UTF-16 units), after it by code point
    subs = [S("t\uff01", ("t",)), S("t\U0001f600", ("t",)), S("é", ("t",))]
    for assignor in ASSIGNOR_NAMES:
        (fast,) = assign_batch([(assignor, {"t": 5}, subs)])
        assert fast == assign(assignor, {"t": 5}, subs)
    assert assign_batch([("range", {"t": 2}, subs[:2])])[0] == {"t\U0001f600": [("t", 0)], "t\uff01": [("t", 1)]}


def test_falls_back_where_the_hashmap_is_not_modelled():
    """Nine ids in one bin (Java grows the table, then makes a tree of it), an id put twice."""
    assert len({string_hash(s) for s in COLLIDING}) == 1
    for n in (9, 11):
        subs = [S(m, ("t",)) for m in COLLIDING[:n]]
        assert assign_batch([(a, {"t": 20}, subs) for a in ASSIGNOR_NAMES]) == [None] * 4
    assert assign_batch([("sticky", {"t": 20}, [S(m, ("t",)) for m in COLLIDING[:8]])])[0] is not None
    twice = [S("a", ("t",)), S("a", ("t",), generation_id=3)]
    assert assign_batch([("range", {"t": 2}, twice)]) == [None]


def test_malformed_topic_names_in_user_data():
    """A malformed name decodes (in Java) to one with U+FFFD: it can only be a topic that holds
    one, which the kernels leave to the Python port."""

    def user_data(raw_topic: bytes) -> bytes:
        return struct.pack(">ih", 1, len(raw_topic)) + raw_topic + struct.pack(">iii", 1, 0, 4)

    subs = [S("m0", ("t",), user_data=user_data(b"t\xff")), S("m1", ("t",), user_data=user_data(b"t"))]
    (fast,) = assign_batch([("sticky", {"t": 3}, subs)])
    assert fast == assign("sticky", {"t": 3}, subs) == {"m0": [("t", 1)], "m1": [("t", 0), ("t", 2)]}
    replaced = [S(s.member_id, ("t\ufffd",), user_data=s.user_data) for s in subs]
    assert assign_batch([("sticky", {"t\ufffd": 3}, replaced)]) == [None]


def test_statuses_errors_and_an_empty_batch():
    answer = assign_arrays(build_batch([])[0])
    assert len(answer.status) == 0 and list(answer.assigned_offsets) == [0]
    problems = [("roundrobin", {"t": 1}, []), ("sticky", {"t": 1}, []), ("range", {"t": 1}, [])]
    batch, _ = build_batch(problems)
    answer = assign_arrays(batch)
    assert list(answer.status) == [ERROR, ERROR, OK]
    results = assign_batch(problems)
    assert [r.java_exception for r in results[:2]] == ["IllegalArgumentException", "ArithmeticException"]
    assert results[2] == {}
    # lone surrogates cannot be UTF-8: such a problem never reaches the kernels
    assert assign_batch([("range", {"t": 1}, [S("\ud800", ("t",))])]) == [None]
    assert FALLBACK not in answer.status


def test_inconsistent_arrays_are_refused():
    batch, _ = build_batch(busy_problems(3, seed=1))
    bad_offsets = batch.owned_offsets.copy()
    bad_offsets[-1] += 1
    with pytest.raises(ValueError, match="owned_offsets"):
        assign_arrays(ProblemBatch(**{**batch.__dict__, "owned_offsets": bad_offsets}))
    with pytest.raises(ValueError, match="topic table"):
        assign_arrays(ProblemBatch(**{**batch.__dict__, "topic_list": batch.topic_list + 1000}))


# --- the layout, straight from Arrow ---------------------------------------------------------------


def _binary_csr(array: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A string/binary array's offsets and values buffers as they are, and its validity."""
    _, offsets, data = array.buffers()
    o = np.frombuffer(offsets, np.int32)[array.offset : array.offset + len(array) + 1]
    values = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
    return o, values, array.is_valid().to_numpy(zero_copy_only=False)


def _batch_from_arrow(
    members: pa.ListArray, assignors: list[str], counts: list[dict[str, int]]
) -> tuple[ProblemBatch, list[str]]:
    """ProblemBatch (and its topic names) from the GroupMetadata members column
    (list<CLASSIC_MEMBER> per problem) with Arrow and numpy operations only: no Python loop over
    members, topics or partitions (the partition counts come from the caller)."""
    flat = members.values
    subscribed = flat.field("subscribed_topics")
    owned = flat.field("owned_partitions")
    entries = owned.values
    partitions = entries.field("partitions")
    count_topics = pa.array([t for c in counts for t in c], pa.string())
    topic_table = pc.unique(pa.concat_arrays([subscribed.values, entries.field("topic"), count_topics]))
    topic_offsets, topic_bytes, _ = _binary_csr(topic_table)
    member_ids = _binary_csr(flat.field("member_id"))
    instances = _binary_csr(flat.field("group_instance_id"))
    user_data = _binary_csr(flat.field("subscription_user_data"))
    entry_offsets = owned.offsets.to_numpy()
    partition_offsets = partitions.offsets.to_numpy()
    entry_topics = pc.index_in(entries.field("topic"), value_set=topic_table).to_numpy()
    batch = ProblemBatch(
        topic_offsets=topic_offsets,
        topic_bytes=topic_bytes,
        assignor=np.array([ASSIGNOR_CODES[a] for a in assignors]),
        member_offsets=members.offsets.to_numpy(),
        count_offsets=np.cumsum([0] + [len(c) for c in counts]),
        count_topic=pc.index_in(count_topics, value_set=topic_table).to_numpy(),
        count_partitions=np.array([n for c in counts for n in c.values()], np.int32),
        member_id_offsets=member_ids[0],
        member_id_bytes=member_ids[1],
        instance_id_offsets=instances[0],
        instance_id_bytes=instances[1],
        has_instance_id=instances[2],
        topic_list_offsets=subscribed.offsets.to_numpy(),
        topic_list=pc.index_in(subscribed.values, value_set=topic_table).to_numpy(),
        owned_offsets=partition_offsets[entry_offsets],
        owned_topic=np.repeat(entry_topics, np.diff(partition_offsets)),
        owned_partition=partitions.values.to_numpy(),
        generation=pc.fill_null(flat.field("generation_id"), -1).to_numpy(),
        user_data_offsets=user_data[0],
        user_data_bytes=user_data[1],
        has_user_data=user_data[2],
    )
    return batch, topic_table.to_pylist()


def _member_record(s: Subscription) -> dict:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in s.owned_partitions:
        by_topic.setdefault(topic, []).append(partition)
    return {
        "member_id": s.member_id,
        "group_instance_id": s.group_instance_id,
        "subscribed_topics": list(s.topics),
        "owned_partitions": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
        "subscription_user_data": s.user_data,
        "generation_id": s.generation_id,
    }


def test_the_layout_comes_straight_from_the_group_metadata_column():
    problems = busy_problems(300, seed=13)
    members = pa.array(
        [[_member_record(s) for s in subs] for _, _, subs in problems], pa.list_(arrow_type(CLASSIC_MEMBER))
    )
    batch, names = _batch_from_arrow(members, [a for a, _, _ in problems], [c for _, c, _ in problems])
    answer = assign_arrays(batch)
    assert list(answer.status) == [OK] * len(problems)
    g = 0
    for assignor, counts, subscriptions in problems:
        # the record groups a member's owned partitions by topic: the reference takes them so too
        regrouped = [
            S(
                s.member_id,
                s.topics,
                s.group_instance_id,
                tuple((r["topic"], p) for r in _member_record(s)["owned_partitions"] for p in r["partitions"]),
                s.generation_id,
                None,
                s.user_data,
            )
            for s in subscriptions
        ]
        expected = _reference(assignor, counts, regrouped)
        got = {}
        for s in subscriptions:
            lo, hi = answer.assigned_offsets[g], answer.assigned_offsets[g + 1]
            got[s.member_id] = sorted(
                (names[t], int(p)) for t, p in zip(answer.assigned_topic[lo:hi], answer.assigned_partition[lo:hi])
            )
            g += 1
        assert got == expected
