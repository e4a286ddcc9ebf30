"""lib.assignors.fast_audit (the audit of a batch of classic generations, vectorised) against
lib.assignors.audit, the reference: every row equal, column for column, to the one
audit_records gives over the same records (what_if aside, which the batch leaves null), the
batch split at random points with the Previous carried from one part to the next.

The cases: every case of tests/test_assignment_audit.py; the GroupMetadata records of a
generated busy-cluster log (lib.testdata.busy), decoded by lib.decode as the replay reads them;
seeded random groups (1-20 members, 1-5 topics, owned partitions, static members, partitions
claimed twice, empty groups, other protocol types, unknown assignors, deleted groups) and
hypothesis-drawn ones aimed at the corners the kernels leave to Python."""

from __future__ import annotations

import inspect
import itertools
import pickle
import random
import struct
import warnings

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tests.test_assignment_audit as audit_cases
from lib.assignors import ASSIGNOR_NAMES, AssignorError, Subscription, assign, encode_sticky_user_data, fast_audit
from lib.assignors.audit import audit_generation, audit_records, classic_generation
from lib.assignors.fast import assign_batch
from lib.assignors.fast_audit import (
    GROUP_METADATA_TYPE,
    GenerationBatch,
    Previous,
    audit_classic_batch,
    audit_rows_table,
)
from lib.testdata import busy
from lib.testdata.generations import batch_of, floors_of, group_metadata_records, partition_batch, tracker_events
from schemas.records import RecordType as R


def reference_audit(
    events: list[tuple[dict, bool]], floors: dict, previous: dict | None = None
) -> tuple[pa.Table, dict, dict]:
    """audit_generation over the events as AssignmentTracker._audit calls it: -> the rows
    (what_if dropped), the groups' previous generations and the partitions known after."""
    known = dict(floors)
    previous = dict(previous or {})
    rows = []
    for rec, deleted in events:
        group_id = rec["group_id"]
        if deleted:
            previous.pop(group_id, None)
            continue
        gen = classic_generation(
            group_id, rec["group_metadata"], rec.get("log_timestamp_ms"), rec["offsets_partition"], rec["log_offset"]
        )
        if gen is None:
            continue
        for m in gen.members:
            for topic, partition in m.assignment:
                known[topic] = max(known.get(topic, 0), partition + 1)
        row = audit_generation(gen, previous.get(group_id), known)
        row["what_if"] = None
        rows.append(row)
        previous[group_id] = gen
    return audit_rows_table(rows), previous, known


def audit_in_parts(
    batch: GenerationBatch, floors: dict, cuts: list[int], previous: Previous | None = None
) -> tuple[pa.Table, Previous, dict]:
    """The batch audited in parts (split at `cuts`), Previous carried through a pickle."""
    known = dict(floors)
    previous = previous or Previous.empty()
    tables = []
    bounds = [0, *sorted(cuts), len(batch)]
    for start, stop in zip(bounds, bounds[1:]):
        table, previous = audit_classic_batch(batch.slice(start, stop), previous, known)
        tables.append(table)
        previous = pickle.loads(pickle.dumps(previous))
    return pa.concat_tables(tables), previous, known


def assert_same_rows(got: pa.Table, want: pa.Table) -> None:
    assert got.schema == want.schema
    assert got.num_rows == want.num_rows, (got.num_rows, want.num_rows)
    for name in want.column_names:
        a, b = got.column(name).combine_chunks(), want.column(name).combine_chunks()
        if not a.equals(b):
            for i, (x, y) in enumerate(zip(a.to_pylist(), b.to_pylist())):
                where = f"{want.column('group_id')[i]} at offset {want.column('log_offset')[i]}"
                assert x == y, f"row {i} ({where}), column {name}"
            raise AssertionError(f"column {name}: equal values, different arrays")


def check(records: list[dict], floors: dict, rng: random.Random, parts: int = 3, values=None) -> pa.Table:
    """One offsets partition's records: the batch of its generations, whole and split at
    random points, against the reference (rows, the Previous after, `known`); the reference
    against audit_records. -> the rows."""
    events = tracker_events(records)
    want, previous, known = reference_audit(events, floors)
    reference_rows = audit_records([r for r in records if r["record_type"] == R.GROUP_METADATA], floors)
    assert want.to_pylist() == audit_rows_table([{**r, "what_if": None} for r in reference_rows]).to_pylist()
    batch = batch_of(events, values)
    for cuts in ([], [rng.randrange(len(batch) + 1) for _ in range(parts)]):
        got, got_previous, got_known = audit_in_parts(batch, floors, cuts)
        assert_same_rows(got, want)
        assert got_known == known
        assert got_previous.states() == Previous.from_generations(previous).states()
    return want


# --- the cases of tests/test_assignment_audit.py ---------------------------------------------------


def _audit_case_tests():
    for name, function in inspect.getmembers(audit_cases, inspect.isfunction):
        if name.startswith("test_"):
            yield pytest.param(function, id=name)


@pytest.mark.parametrize("test_function", list(_audit_case_tests()))
def test_every_case_of_the_audit_tests(test_function, monkeypatch):
    """Each test runs as it is; every audit_records call it makes is also checked batched."""
    calls = []

    def audit_and_check(records, floors, *args):
        records = list(records)
        calls.append(check(records, dict(floors), random.Random(len(records))).num_rows)
        return audit_records(records, floors, *args)

    monkeypatch.setattr(audit_cases, "audit_records", audit_and_check)
    test_function()
    assert calls
    if "consumer_group" not in test_function.__name__:  # KIP-848 generations are not batched
        assert all(calls)


# --- generated group histories -----------------------------------------------------------------


TOPICS = ["t0", "t1", "orders", "payments", "topic-é", "t\uff01", "t\U0001f600", "Aa", "BB"]
SHORT_IDS = ["C0", "C1", "A", "Q", "B", "z", "é", "日本", "Aa", "BB", ""]
ODD_ASSIGNORS = ["mine", None]


def _grouped(tps) -> list[dict]:
    """(topic, partition) pairs as the record lists them: by topic, in order of appearance."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in tps:
        by_topic.setdefault(topic, []).append(partition)
    return [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]


def _member_value(s: Subscription, assignment, rng: random.Random) -> dict:
    return {
        "member_id": s.member_id,
        "group_instance_id": s.group_instance_id if s.group_instance_id is not None or rng.random() < 0.9 else "",
        "client_id": s.member_id.split("-")[0],
        "client_host": "/10.0.0.1",
        "rebalance_timeout_ms": 300_000,
        "session_timeout_ms": 45_000,
        "subscription_version": 3,
        "subscribed_topics": list(s.topics),
        "owned_partitions": _grouped(s.owned_partitions),
        "subscription_user_data": s.user_data,
        "generation_id": -1 if s.generation_id is None else s.generation_id,
        "rack_id": s.rack_id,
        "assignment_version": 3,
        "assignment": _grouped(assignment or ()),
        "assignment_user_data": None,
        "subscription_bytes": b"\x00\x03",
        "assignment_bytes": b"\x00\x03" if assignment is not None else rng.choice([b"", None]),
    }


def _value(protocol_type, generation: int, protocol, leader, members: list[dict]) -> dict:
    return {
        "protocol_type": protocol_type,
        "generation": generation,
        "protocol": protocol,
        "leader": leader,
        "current_state_timestamp": None,
        "members": members,
    }


def _perturbed(rng: random.Random, given: dict[str, list], counts: dict[str, int]) -> dict[str, list]:
    """What another client's leader (or a buggy one) might have assigned instead."""
    out = {m: list(tps) for m, tps in given.items()}
    ids = list(out)
    kind = rng.choice(["swap", "move", "twice", "drop", "repeat", "foreign", "negative", "beyond"])
    if kind == "swap" and len(ids) > 1:
        a, b = rng.sample(ids, 2)
        out[a], out[b] = out[b], out[a]
    elif kind == "move" and len(ids) > 1:
        a, b = rng.sample(ids, 2)
        if out[a]:
            out[b].append(out[a].pop(rng.randrange(len(out[a]))))
    elif kind in ("twice", "repeat") and any(out.values()):
        a = rng.choice([m for m in ids if out[m]])
        out[rng.choice(ids) if kind == "twice" else a].append(rng.choice(out[a]))
    elif kind == "drop" and any(out.values()):
        a = rng.choice([m for m in ids if out[m]])
        out[a].pop()
    elif kind == "foreign":  # a topic nobody in the group subscribes to
        out[rng.choice(ids)].append(("not-subscribed", rng.randrange(3)))
    elif kind == "negative":
        out[rng.choice(ids)].append((rng.choice(list(counts) or ["t0"]), -1))
    elif kind == "beyond" and counts:  # a partition the metadata did not know yet
        topic = rng.choice(list(counts))
        out[rng.choice(ids)].append((topic, counts[topic] + rng.randrange(3)))
    return out


def _assignment(rng: random.Random, protocol, counts: dict[str, int], subs: list[Subscription]) -> dict[str, list]:
    given = None
    if protocol in ASSIGNOR_NAMES:
        leader_counts = {t: n for t, n in counts.items() if rng.random() < 0.95}  # a topic new to the leader
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                given = assign(protocol, leader_counts, subs)
        except AssignorError:
            given = None
    if given is None:  # a custom assignor: the subscribed partitions round robin in the record's order
        given = {s.member_id: [] for s in subs}
        subscribed = sorted({t for s in subs for t in s.topics} & set(counts))
        for i, tp in enumerate((t, p) for t in subscribed for p in range(counts[t])):
            given[subs[i % len(subs)].member_id].append(tp)
    return _perturbed(rng, given, counts) if rng.random() < 0.2 else given


def _joiner(rng: random.Random, topics: list[str], existing: set[str]) -> Subscription:
    while True:
        member_id = (
            rng.choice(SHORT_IDS) if rng.random() < 0.2 else f"consumer-{rng.randint(1, 9)}-{rng.getrandbits(64):016x}"
        )
        if member_id not in existing or rng.random() < 0.02:  # now and then an id twice
            break
    instance = None
    if rng.random() < 0.25:  # a static member; now and then two claim one instance id
        instance = f"instance-{rng.randrange(4) if rng.random() < 0.03 else rng.getrandbits(32)}"
    rack = rng.choice([None, None, None, "rack-a", ""])
    return Subscription(member_id, tuple(topics), instance, rack_id=rack)


def _next_round(rng: random.Random, protocol, subs: list[Subscription], given: dict, generation: int):
    """The members report what they were given (as their assignor's clients do); then one
    leaves, one joins, or a static member comes back with a new member id."""
    out = []
    for s in subs:
        held = tuple(given.get(s.member_id, ()))
        claimed = held + (tuple(rng.sample(held, 1)) if held and rng.random() < 0.05 else ())
        gen = generation if rng.random() < 0.9 else generation - 1
        owned, user_data, gen_field = (), None, None
        if protocol == "cooperative-sticky":
            owned, gen_field = claimed, gen
            user_data = struct.pack(">i", gen) if rng.random() < 0.5 else None
        elif protocol == "sticky":
            user_data = encode_sticky_user_data(claimed, gen if rng.random() < 0.9 else None)
        elif rng.random() < 0.1:
            user_data = rng.randbytes(rng.randrange(6))
        out.append(Subscription(s.member_id, s.topics, s.group_instance_id, owned, gen_field, s.rack_id, user_data))
    event = rng.random()
    topics = list(subs[0].topics) if subs else []
    if event < 0.3 and len(out) > 1:
        out.pop(rng.randrange(len(out)))
    elif event < 0.6 and len(out) < 20:
        out.insert(rng.randrange(len(out) + 1), _joiner(rng, topics, {s.member_id for s in out}))
    elif event < 0.7 and out:
        i = rng.randrange(len(out))
        old = out[i]
        out[i] = Subscription(
            f"{old.member_id}-restarted",
            old.topics,
            old.group_instance_id or f"instance-{rng.getrandbits(32)}",
            rack_id=old.rack_id,
        )
    return out


def group_history(rng: random.Random, group_id: str, counts: dict[str, int]) -> list[dict | None]:
    """One group's GroupMetadata values in log order (None: a tombstone): rebalances (a join
    record without assignments, then the leader's), a static member's rejoin in the same
    generation, the group going empty, deletion, another protocol type."""
    values: list[dict | None] = []
    topics = list(counts)
    generation = 0
    protocol = None
    subs: list[Subscription] = []
    for _ in range(rng.randint(1, 12)):
        event = rng.random()
        if event < 0.06:
            values.append(None)
            subs, generation = [], 0
            continue
        if event < 0.12 or not subs:
            protocol = rng.choice([*ASSIGNOR_NAMES, *ASSIGNOR_NAMES, *ODD_ASSIGNORS])
            mine = rng.sample(topics, rng.randint(1, min(5, len(topics))))
            same = rng.random() < 0.7
            subs = []
            for _ in range(min(20, max(1, int(rng.expovariate(1 / 5))))):
                member_topics = mine if same else rng.sample(topics, rng.randint(1, len(topics)))
                subs.append(_joiner(rng, member_topics + (["ghost"] if rng.random() < 0.03 else []), set()))
        generation += 1
        protocol_type = "consumer" if rng.random() < 0.93 else rng.choice(["connect", "", None])
        if event > 0.95:  # everyone left
            values.append(_value(protocol_type, generation, None, None, []))
            subs = []
            continue
        if rng.random() < 0.5:  # JoinGroup done, SyncGroup to come
            values.append(_value(protocol_type, generation, protocol, subs[0].member_id, [
                _member_value(s, None, rng) for s in subs
            ]))  # fmt: skip
        if rng.random() < 0.1:
            continue  # the generation never synced
        given = _assignment(rng, protocol, counts, subs)
        members = [_member_value(s, given.get(s.member_id, []), rng) for s in subs]
        values.append(_value(protocol_type, generation, protocol, subs[0].member_id, members))
        if rng.random() < 0.05 and members:  # a static member rejoins within the generation
            values.append(_value(protocol_type, generation, protocol, subs[0].member_id, members[::-1]))
        subs = _next_round(rng, protocol, subs, given, generation)
    return values


def random_partition(rng: random.Random, groups: int) -> tuple[list[dict], dict]:
    """An offsets partition's GroupMetadata records (groups' histories interleaved), and floors."""
    counts = {t: rng.randint(1, 12) for t in rng.sample(TOPICS, rng.randint(1, len(TOPICS)))}
    histories = {f"group-{g}": group_history(rng, f"group-{g}", counts) for g in range(groups)}
    histories = {g: values for g, values in histories.items() if values}
    records = []
    while histories:
        group_id = rng.choice(list(histories))
        value = histories[group_id].pop(0)
        if not histories[group_id]:
            del histories[group_id]
        offset = len(records)
        records.append(
            {
                "offsets_partition": 7,
                "log_offset": offset,
                "log_timestamp_ms": None if rng.random() < 0.02 else 1_700_000_000_000 + offset,
                "record_type": R.GROUP_METADATA,
                "group_id": group_id,
                "member_id": None,
                "is_tombstone": value is None,
                "group_metadata": value,
                "value_json": None,
            }
        )
    floors = {t: rng.randint(0, n) for t, n in counts.items() if rng.random() < 0.7}
    return records, floors


def test_seeded_random_groups():
    rng = random.Random(20260612)
    rows = 0
    for _ in range(60):
        records, floors = random_partition(rng, rng.randint(1, 12))
        rows += check(records, floors, rng).num_rows
    assert rows > 1000


class _Counted:
    """audit_generation, counted (the Python path's calls), each with why it got there."""

    def __init__(self):
        self.calls = 0
        self.why: list[str | None] = []

    def __call__(self, gen, previous, known):
        self.calls += 1
        self.why.append(_why_python(gen, known))
        return audit_generation(gen, previous, known)


def _why_python(gen, known) -> str | None:
    """The documented reason a generation is left to audit_generation, None for none."""
    identities = [m.identity for m in gen.members]
    if len(set(identities)) < len(identities):
        return "one owner identity twice"
    if len({m.member_id for m in gen.members}) < len(gen.members):
        return "one member id twice"
    subscribed = {t for m in gen.members for t in m.topics}
    if any(t not in subscribed or p < 0 for m in gen.members for t, p in m.assignment):
        return "an assigned partition outside the universe"
    if sum(known.get(t, 0) for t in subscribed) > fast_audit.MAX_UNIVERSE:
        return "a universe too large"
    seen = {t for m in gen.members for t, _ in [*m.assignment, *m.subscription.owned_partitions]}
    counts = {t: known[t] for t in subscribed if known.get(t, 0) > 0 and t in seen}
    subs = [m.subscription for m in gen.members]
    if gen.assignor in ASSIGNOR_NAMES:
        (result,) = assign_batch([(gen.assignor, counts, subs)])
        if result is None:
            return "the assignor's kernels FALLBACK"
        if isinstance(result, dict) and any(p >= counts[t] for tps in result.values() for t, p in tps):
            return "a reference partition beyond its topic's count"
    return None


def test_the_python_path_is_the_exception(monkeypatch):
    """Random groups with their share of oddities: the generations left to audit_generation
    are those the module's docstring lists, and only those."""
    counted = _Counted()
    monkeypatch.setattr(fast_audit, "audit_generation", counted)
    rng = random.Random(7)
    rows = 0
    for _ in range(20):
        records, floors = random_partition(rng, 8)
        rows += audit_classic_batch(batch_of(tracker_events(records)), Previous.empty(), floors)[0].num_rows
    assert 0 < counted.calls < rows / 5
    assert None not in counted.why


# --- corners, drawn ----------------------------------------------------------------------------------


def _colliding(n: int) -> list[str]:
    """Member ids with one String.hashCode (the kernels fall back at nine in one bin)."""
    return ["".join(blocks) for blocks in itertools.product(("Aa", "BB"), repeat=4)][:n]


@st.composite
def corner_value(draw, topics: list[str]):
    ids = draw(
        st.lists(st.sampled_from(SHORT_IDS + _colliding(10) + ["m-1", "m-2"]), min_size=0, max_size=12, unique=False)
    )
    members = []
    for member_id in ids:
        tps = st.tuples(st.sampled_from([*topics, "x"]), st.integers(-1, 9))
        members.append(
            {
                "member_id": member_id,
                "group_instance_id": draw(st.sampled_from([None, None, "", "i0", "i1", "m-1"])),
                "client_id": draw(st.sampled_from([None, "c"])),
                "client_host": None,
                "rebalance_timeout_ms": None,
                "session_timeout_ms": None,
                "subscription_version": None,
                "subscribed_topics": draw(
                    st.one_of(st.none(), st.lists(st.sampled_from([*topics, "ghost"]), max_size=4))
                ),
                "owned_partitions": _grouped(draw(st.lists(tps, max_size=5))),
                "subscription_user_data": draw(st.one_of(st.none(), st.binary(max_size=12))),
                "generation_id": draw(st.integers(-1, 4)),
                "rack_id": draw(st.sampled_from([None, "", "r"])),
                "assignment_version": None,
                "assignment": draw(
                    st.one_of(st.none(), st.just([]).map(lambda _: []), st.lists(tps, max_size=8).map(_grouped))
                ),
                "assignment_user_data": None,
                "subscription_bytes": None,
                "assignment_bytes": draw(st.sampled_from([None, b"", b"\x01"])),
            }
        )
    return _value(
        draw(st.sampled_from(["consumer", "consumer", "consumer", "connect", "", None])),
        draw(st.integers(0, 3)),
        draw(st.sampled_from([*ASSIGNOR_NAMES, "mine", None])),
        draw(st.sampled_from([None, "m-1"])),
        members,
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_corner_groups(data):
    topics = data.draw(st.lists(st.sampled_from(TOPICS), min_size=1, max_size=4, unique=True))
    values = data.draw(st.lists(st.one_of(st.none(), corner_value(topics)), min_size=1, max_size=8))
    groups = data.draw(st.lists(st.sampled_from(["g0", "g1", "g2"]), min_size=len(values), max_size=len(values)))
    records = [
        {
            "offsets_partition": 0,
            "log_offset": i,
            "log_timestamp_ms": i,
            "record_type": R.GROUP_METADATA,
            "group_id": group_id,
            "member_id": None,
            "is_tombstone": value is None,
            "group_metadata": value,
            "value_json": None,
        }
        for i, (group_id, value) in enumerate(zip(groups, values))
    ]
    floors = data.draw(st.dictionaries(st.sampled_from(topics), st.integers(0, 6)))
    check(records, floors, random.Random(data.draw(st.integers(0, 99))))


def _outcome(audit):
    try:
        return audit()
    except Exception as e:
        return type(e)


@pytest.mark.parametrize(
    ("odd", "protocol"),
    [
        pytest.param({"member_id": None}, "mine", id="null-member-id"),
        pytest.param({"member_id": None}, "range", id="null-member-id-recomputed"),
        pytest.param({"assignment": [{"topic": "t0", "partitions": [None]}]}, "range", id="null-partition"),
        pytest.param({"subscribed_topics": ["t0", None]}, "mine", id="null-topic"),
        pytest.param({"owned_partitions": [{"topic": None, "partitions": [0]}]}, "mine", id="null-owned-topic"),
        pytest.param(  # null lists: no topics, no partitions (not odd: the batch reads them so too)
            {"owned_partitions": [{"topic": "t0", "partitions": None}], "subscribed_topics": None},
            "range",
            id="null-lists",
        ),
    ],
)
def test_a_value_that_breaks_kafkas_schema_is_audited_as_the_tracker_would(odd, protocol):
    """Nulls no decoder gives: that generation goes through audit_generation record by
    record, the rest batched around it; where the reference raises, so does the batch."""
    members = [{**audit_cases.member("x-1", [("t0", [0, 1])], topics=("t0",)), **odd}]
    records = [
        audit_cases.group_record(1, 1, audit_cases.GEN1, group="a"),
        audit_cases.group_record(2, 1, audit_cases.GEN1, group="b"),
        audit_cases.group_record(3, 4, members, protocol, group="odd"),
        audit_cases.group_record(4, 2, audit_cases.GEN2, group="a"),
    ]
    events = tracker_events(records)
    want = _outcome(lambda: reference_audit(events, audit_cases.FLOORS))
    got = _outcome(lambda: audit_in_parts(batch_of(events), audit_cases.FLOORS, [1]))
    if isinstance(want, type):
        assert got is want
    else:
        assert_same_rows(got[0], want[0])
        assert got[2] == want[2]
        assert got[1].states() == Previous.from_generations(want[1]).states()


# --- the busy log ----------------------------------------------------------------------------------

BUSY = {"records": 200_000, "seed": 5, "topic_records": 20_000, "workers": 1}


@pytest.fixture(scope="module")
def busy_partitions(tmp_path_factory) -> tuple[list[tuple[list[dict], pa.Array]], dict]:
    """A generated busy log's GroupMetadata records per offsets partition as lib.decode
    reads them (group_metadata as the decoder's column), and its floors."""
    log_dir = str(tmp_path_factory.mktemp("busy") / "logdir")
    busy.generate_busy_log(log_dir, **BUSY)
    return group_metadata_records(log_dir), floors_of(log_dir)


def test_the_busy_log(busy_partitions, monkeypatch):
    """Every offsets partition's generations from the decoder's column, whole and in parts;
    none left to the Python path."""
    counted = _Counted()
    monkeypatch.setattr(fast_audit, "audit_generation", counted)
    partitions, floors = busy_partitions
    rng = random.Random(11)
    rows = 0
    for records, values in partitions:
        _, batch = partition_batch(records, values)
        rows += check(records, floors, rng, parts=4, values=batch.group_metadata).num_rows
    assert rows > 5000
    assert counted.calls <= rows // 1000


def test_the_busy_log_in_one_batch_across_partitions(busy_partitions):
    """All partitions' generations in one batch (known shared, as one tracker would share it
    if they were one partition): the same rows as the reference fed the same way."""
    partitions, floors = busy_partitions
    events, batches = [], []
    for records, values in partitions:
        mine, batch = partition_batch(records, values)
        events += mine
        batches.append(batch)
    batch = GenerationBatch.concat(batches)
    want, previous, known = reference_audit(events, floors)
    got, got_previous, got_known = audit_in_parts(batch, floors, [len(batch) // 3])
    assert_same_rows(got, want)
    assert got_known == known
    assert got_previous.states() == Previous.from_generations(previous).states()


# --- the API -------------------------------------------------------------------------------------


def test_previous_in_the_trackers_json_form_and_back():
    from lib.replay.assignment import _generation_of

    def state_of(gen):
        # the JSON form a run stores a group's previous generation in (written out here, not
        # taken from the code under test)
        return {
            "members": [
                {
                    "member_id": m.member_id,
                    "instance": m.group_instance_id,
                    "assignment": [list(tp) for tp in m.assignment],
                }
                for m in gen.members
            ]
        }

    rng = random.Random(5)
    records, floors = random_partition(rng, 8)
    events = tracker_events(records)
    _, previous, _ = reference_audit(events, floors)
    assert previous
    ours = Previous.from_generations(previous)
    # the tracker's own state of each group reads back as the same owners
    tracker_states = {g: state_of(gen) for g, gen in previous.items()}
    assert Previous.from_states(tracker_states).states() == ours.states()
    # ours, stored as the tracker stores it, loads in the tracker as the same previous generation
    for group_id, state in ours.states().items():
        back = _generation_of(group_id, state)
        assert Previous.from_generations({group_id: back}).states() == {group_id: state}
        assert Previous.from_generations({group_id: ours.generation(group_id)}).states() == {group_id: state}
    assert pickle.loads(pickle.dumps(ours)).table.equals(ours.table)
    some = sorted(previous)[:2]
    assert set(ours.without(some).groups()) == set(previous) - set(some)
    assert ours.without(some).updated(ours).states() == ours.states()
    assert ours.generation("no such group") is None


def test_previous_owners_by_hand():
    """Previous built from members in order and read back, against owners written out by hand:
    a partition assigned twice belongs to its first member, a member left with nothing is gone,
    a group that assigned nothing keeps its row; the same from a table in chunks and sliced."""
    owners = {
        "g1": [
            ("i-a", [("t", 1), ("t", 0)]),
            ("m-b", [("t", 1), ("u", 2)]),
            ("m-c", [("t", 0)]),
        ],
        "g2": [],
        "g3": [("m-d", [("u", 0)]), ("m-e", [])],
    }
    previous = Previous._of(owners)
    assert previous.table.to_pylist() == [
        {
            "group_id": "g1",
            "owners": [
                {"topic": "t", "partition": 1, "owner": "i-a"},
                {"topic": "t", "partition": 0, "owner": "i-a"},
                {"topic": "u", "partition": 2, "owner": "m-b"},
            ],
        },
        {"group_id": "g2", "owners": []},
        {"group_id": "g3", "owners": [{"topic": "u", "partition": 0, "owner": "m-d"}]},
    ]

    def member(who, assignment):
        return {"member_id": who, "instance": None, "assignment": assignment}

    want = {
        "g1": {"members": [member("i-a", [["t", 1], ["t", 0]]), member("m-b", [["u", 2]])]},
        "g2": {"members": []},
        "g3": {"members": [member("m-d", [["u", 0]])]},
    }
    assert previous.states() == want
    chunked = Previous(pa.concat_tables([previous.table.slice(0, 1), previous.table.slice(1)]))
    assert chunked.states() == want
    assert Previous(previous.table.slice(1, 2)).states() == {"g2": want["g2"], "g3": want["g3"]}
    assert Previous.empty().states() == {} and len(Previous._of({})) == 0


def test_a_batch_carried_from_the_trackers_previous_generations():
    """A run that starts with the previous generations an earlier run left (the tracker's
    Generation objects, or their JSON form)."""
    rng = random.Random(9)
    records, floors = random_partition(rng, 10)
    events = tracker_events(records)
    half = len(events) // 2
    _, previous, known = reference_audit(events[:half], floors)
    want, _, _ = reference_audit(events[half:], known, previous)
    batch = batch_of(events[half:])
    for carried in (
        Previous.from_generations(previous),
        Previous.from_states(Previous.from_generations(previous).states()),
    ):
        got, _ = audit_classic_batch(batch, carried, dict(known))
        assert_same_rows(got, want)


def test_the_batch_from_arrow_or_python_values():
    rng = random.Random(4)
    records, _ = random_partition(rng, 3)
    events = tracker_events(records)
    from_dicts = batch_of(events)
    from_arrow = batch_of(
        events, pa.array([None if d else r["group_metadata"] for r, d in events], GROUP_METADATA_TYPE)
    )
    assert from_dicts == from_arrow
    assert GenerationBatch.concat([from_dicts.slice(0, 3), from_dicts.slice(3, len(from_dicts))]) == from_dicts
    table, previous = audit_classic_batch(from_dicts.slice(0, 0), Previous.empty(), {})
    assert table.num_rows == 0 and len(previous) == 0
    with pytest.raises(ValueError, match="lengths"):
        GenerationBatch(
            *(
                getattr(from_dicts, f) if f != "log_offset" else pa.array([1], pa.int64())
                for f in GenerationBatch.__dataclass_fields__
            )
        )


def test_a_batch_holds_the_values_as_the_audit_reads_them():
    """audit_view: every field the audit reads, as it is; `assignment_bytes` only as empty or
    not; the raw bytes, hosts and timeouts left behind; nulls and a slice's offset kept."""
    member = {
        "member_id": "m-1",
        "group_instance_id": "i-1",
        "client_id": "c",
        "client_host": "/10.0.0.1",
        "rebalance_timeout_ms": 300000,
        "session_timeout_ms": 45000,
        "subscription_version": 3,
        "subscribed_topics": ["a", "b"],
        "owned_partitions": [{"topic": "a", "partitions": [0]}],
        "subscription_user_data": b"\x00\x01",
        "generation_id": 4,
        "rack_id": "r1",
        "assignment_version": 3,
        "assignment": [{"topic": "a", "partitions": [0, 1]}],
        "assignment_user_data": b"\x07",
        "subscription_bytes": b"\x00\x03sub",
        "assignment_bytes": b"\x00\x03assignment",
    }
    first = {"protocol_type": "consumer", "generation": 5, "protocol": "range", "leader": "m-1",
             "current_state_timestamp": None, "members": [member, {**member, "member_id": "m-2", "assignment_bytes": b""},
                                                           {**member, "member_id": "m-3", "assignment_bytes": None}, None]}  # fmt: skip
    values = pa.array([None, first, None, {**first, "members": None}], GROUP_METADATA_TYPE).slice(1)
    view = fast_audit.audit_view(values)
    assert view.type == fast_audit.AUDIT_VALUE_TYPE
    kept = ("member_id", "group_instance_id", "client_id", "rack_id", "subscribed_topics", "owned_partitions",
            "subscription_user_data", "generation_id", "assignment")  # fmt: skip
    want_member = {k: member[k] for k in kept}
    assert view.to_pylist() == [
        {
            "protocol_type": "consumer",
            "generation": 5,
            "protocol": "range",
            "leader": "m-1",
            "members": [
                {**want_member, "assignment_bytes": b"\x01"},
                {**want_member, "member_id": "m-2", "assignment_bytes": b""},
                {**want_member, "member_id": "m-3", "assignment_bytes": None},
                None,
            ],
        },
        None,
        {"protocol_type": "consumer", "generation": 5, "protocol": "range", "leader": "m-1", "members": None},
    ]
    assert fast_audit.audit_view(view) is view
    batch = GenerationBatch.of(values, ["g", "g", "g"], [0, 0, 0], [1, 2, 3], [1, 2, 3])
    assert batch.group_metadata.equals(view)
    with pytest.raises(ValueError, match="not GroupMetadata values"):
        fast_audit.audit_view(pa.array([1]))
