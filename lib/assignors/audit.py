"""The assignment audit of consumer groups (pure Python; lib.spark.assignment runs it, one Spark task
per offsets partition, over that partition's group records in log order).

Each generation of a classic consumer group (its last GroupMetadata record, the one the leader's
SyncGroup stored with the assignment) and each target assignment epoch of a KIP-848 group becomes
one row of the assignment_audit table: how the partitions were spread, what moved since the
previous generation and the fewest moves a balanced assignment could have made, and what each of
Kafka's assignors (lib.assignors, ports of the Java client's) would have assigned from the same
subscriptions. For a classic group the assignor it named is recomputed from the subscriptions as
recorded (owned partitions, generation and user data included): an assignment that differs is a
client bug or a custom assignor under a standard name."""

from __future__ import annotations

import functools
import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from lib.assignors import ASSIGNOR_NAMES, AssignorError, Subscription, TopicPartition, assign, encode_sticky_user_data
from schemas.records import RecordType as R

CLASSIC = "classic"
CONSUMER = "consumer"


@dataclass(frozen=True)
class AuditMember:
    member_id: str
    topics: tuple[str, ...]
    assignment: tuple[TopicPartition, ...]
    group_instance_id: str | None = None
    client_id: str | None = None
    rack_id: str | None = None
    subscription: Subscription | None = None  # classic: as the member sent it to the leader

    @property
    def identity(self) -> str:
        """Who owns a partition across generations: a static member keeps its instance id when it
        restarts with a new member id."""
        return self.group_instance_id or self.member_id


@dataclass(frozen=True)
class Generation:
    group_id: str
    group_type: str
    generation: int
    at_ms: int | None
    assignor: str | None
    members: tuple[AuditMember, ...]
    offsets_partition: int
    log_offset: int
    protocol_type: str | None = CONSUMER
    leader: str | None = None


# --- one generation --------------------------------------------------------------------------


def _owners(members: Iterable[tuple[str, Iterable[TopicPartition]]]) -> dict[TopicPartition, list[str]]:
    owners: dict[TopicPartition, list[str]] = {}
    for who, partitions in members:
        for tp in partitions:
            owners.setdefault(tp, []).append(who)
    return owners


def moves(previous: Mapping[TopicPartition, str], current: Mapping[TopicPartition, list[str]], universe) -> int:
    """Partitions (still subscribed) whose previous owner does not hold them now: given to another
    member, or revoked (a cooperative rebalance revokes first and assigns in the next generation,
    so a partition moved that way counts once)."""
    return sum(1 for tp, who in previous.items() if tp in universe and who not in current.get(tp, ()))


def min_moves(previous: Mapping[TopicPartition, str], members: Sequence[AuditMember], universe: set) -> int:
    """The fewest partitions a balanced assignment (member counts within one of each other, as the
    sticky assignors reach) could have moved. Same subscriptions everywhere: exact (members keep
    what they held up to their share, the larger shares going to those that held most). Otherwise
    a lower bound: the partitions whose owner left or no longer subscribes to their topic."""
    held = {tp: who for tp, who in previous.items() if tp in universe}
    if not members:
        return len(held)
    topics = {m.topics for m in members}
    if len(topics) == 1:
        held_by = Counter(held.values())
        kept = sorted((held_by.get(m.identity, 0) for m in members), reverse=True)
        share, extra = divmod(len(universe), len(members))
        retained = sum(min(k, share + 1 if i < extra else share) for i, k in enumerate(kept))
        return len(held) - retained
    subscribed = {m.identity: set(m.topics) for m in members}
    return sum(1 for (topic, _), who in held.items() if topic not in subscribed.get(who, ()))


def _sorted_tps(tps: Iterable[TopicPartition]) -> list[dict]:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(set(tps)):
        by_topic.setdefault(topic, []).append(partition)
    return [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]


def _what_if_subscriptions(
    name: str, gen: Generation, previous: Generation | None, prev_by_identity: Mapping[str, list[TopicPartition]]
) -> list[Subscription]:
    """The members' subscriptions as a group using `name` would have sent them: the sticky
    assignors carry the previous generation's actual assignment (StickyAssignor in its user data,
    cooperative-sticky as owned partitions with the generation)."""
    subs = []
    # Every member that held partitions held them in the same (previous) generation; the sticky
    # assignors only compare generations with each other, so its number is immaterial, and one
    # constant lets the remembered results serve every generation with the same assignment.
    prev_generation = 1 if previous is not None else None
    for m in gen.members:
        held = tuple(sorted(prev_by_identity.get(m.identity, ())))
        owned: tuple[TopicPartition, ...] = ()
        generation = user_data = None
        if held and name == "sticky":
            user_data = _sticky_user_data(held, prev_generation)
        elif held and name == "cooperative-sticky":
            owned, generation = held, prev_generation
        subs.append(Subscription(m.member_id, m.topics, m.group_instance_id, owned, generation, m.rack_id, user_data))
    return subs


@functools.lru_cache(maxsize=4096)
def _sticky_user_data(held: tuple[TopicPartition, ...], generation: int | None) -> bytes:
    return encode_sticky_user_data(held, generation)


@functools.lru_cache(maxsize=4096)
def _assign_cached(name: str, partitions: tuple[tuple[str, int], ...], subs: tuple[Subscription, ...]) -> dict:
    """assign(), remembered: a group's generations often repeat the same subscriptions (the same
    members rejoining), and every assignor is a pure function of them (the result is not changed
    by its users)."""
    return assign(name, dict(partitions), list(subs))


def _assign_remembered(name: str, partitions: Mapping[str, int], subs: Sequence[Subscription]) -> dict:
    """range and roundrobin read neither owned partitions, generation nor user data: left out,
    the generations of a group with the same members share one remembered result."""
    if name in ("range", "roundrobin"):
        subs = [Subscription(s.member_id, s.topics, s.group_instance_id, rack_id=s.rack_id) for s in subs]
    return _assign_cached(name, tuple(sorted(partitions.items())), tuple(subs))


def audit_generation(gen: Generation, previous: Generation | None, known_partitions: Mapping[str, int]) -> dict:
    """The assignment_audit row of one generation (`previous`: the group's previous generation
    with members, None for the first of the group's incarnation; `known_partitions`: partition
    counts per topic known from elsewhere)."""
    subscribed = sorted({t for m in gen.members for t in m.topics})
    per_topic = {t: known_partitions.get(t, 0) for t in subscribed}
    for m in gen.members:  # a partition the leader assigned exists
        for topic, partition in m.assignment:
            if topic in per_topic:
                per_topic[topic] = max(per_topic[topic], partition + 1)
    universe = {(t, p) for t, n in per_topic.items() for p in range(n)}
    owners = _owners((m.identity, m.assignment) for m in gen.members)
    sizes = [len(set(m.assignment)) for m in gen.members] or [0]

    prev_owner, prev_by_identity = _previous_owners(previous)

    moved = moves(prev_owner, owners, universe) if previous is not None else None
    row = {
        "group_id": gen.group_id,
        "group_type": gen.group_type,
        "generation": gen.generation,
        "at_ms": gen.at_ms,
        "protocol_type": gen.protocol_type,
        "assignor": gen.assignor,
        "leader": gen.leader,
        "member_count": len(gen.members),
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "rack_id": m.rack_id,
                "subscribed_topics": list(m.topics),
                "partition_count": len(set(m.assignment)),
                "assignment": _sorted_tps(m.assignment),
            }
            for m in sorted(gen.members, key=lambda m: m.member_id)
        ],
        "topics": [{"topic": t, "partitions": n} for t, n in per_topic.items()],
        "partitions": len(universe),
        "assigned": len(owners),
        "min_per_member": min(sizes),
        "max_per_member": max(sizes),
        "imbalance": max(sizes) - min(sizes),
        "moved": moved,
        "min_moves": min_moves(prev_owner, gen.members, universe) if previous is not None else None,
        "unassigned": _sorted_tps(universe - owners.keys()),
        "assigned_twice": _sorted_tps(tp for tp, who in owners.items() if len(who) > 1),
        "verdict": "not_recomputed",
        "differing_members": None,
        "reference": None,
        "what_if": None,
        "racks_recorded": any(m.rack_id for m in gen.members),
        "offsets_partition": gen.offsets_partition,
        "log_offset": gen.log_offset,
    }
    if gen.group_type != CLASSIC:
        return row

    ppt = {t: n for t, n in per_topic.items() if n > 0}
    # A topic of which the leader assigned nothing and nobody owned anything was not in its
    # metadata (as right after the topic is created; Kafka's assignors then skip it): the
    # reference leaves it out too, and its partitions show as unassigned.
    seen = {t for m in gen.members for t, _ in m.assignment}
    seen |= {t for m in gen.members if m.subscription is not None for t, _ in m.subscription.owned_partitions}
    known_to_leader = {t: n for t, n in ppt.items() if t in seen}
    what_if: list[dict] = []
    for name in ASSIGNOR_NAMES:
        if name == gen.assignor and all(m.subscription is not None for m in gen.members):
            subs = [m.subscription for m in gen.members if m.subscription is not None]
            counts = known_to_leader
        else:
            subs = _what_if_subscriptions(name, gen, previous, prev_by_identity)
            counts = ppt
        try:
            result = _assign_remembered(name, counts, subs)
        except AssignorError:
            # Kafka's Java assignor throws on these subscriptions (e.g. a partition owned twice in
            # one generation): no leader running it made this assignment
            what_if.append({"assignor": name, "imbalance": None, "moved": None, "unassigned": None})
            if name == gen.assignor:
                row["verdict"] = "differs"
                row["differing_members"] = sorted(m.member_id for m in gen.members)
            continue
        identity = {m.member_id: m.identity for m in gen.members}
        entry, their_owners = _what_if_entry(name, result, identity, prev_owner, universe, previous is not None)
        what_if.append(entry)
        if name == gen.assignor:
            row["reference"] = [
                {"member_id": mid, "assignment": _sorted_tps(tps)} for mid, tps in sorted(result.items())
            ]
            differing = sorted(
                m.member_id for m in gen.members if set(m.assignment) != set(result.get(m.member_id, ()))
            )
            row["verdict"] = "matches"
            if differing:
                # as good by every measure (the members' counts, how many are assigned, how many
                # moved), only other members or partitions: another implementation's tie-breaking,
                # e.g. librdkafka's cooperative-sticky
                same_counts = sorted(len(set(m.assignment)) for m in gen.members) == sorted(
                    len(result.get(m.member_id, ())) for m in gen.members
                )
                same_moves = (moved or 0) == moves(prev_owner, their_owners, universe)
                equivalent = same_counts and same_moves and len(owners) == len(their_owners)
                row["verdict"] = "equivalent" if equivalent else "differs"
            row["differing_members"] = differing
    row["what_if"] = what_if
    if gen.assignor not in ASSIGNOR_NAMES:
        row["verdict"] = "custom"
    return row


def what_if_of_row(row: Mapping, previous_members: Sequence[Mapping] | None) -> list[dict] | None:
    """An assignment_audit row's `what_if` (None for a KIP-848 epoch), as audit_generation gives
    it, from the row and its group's previous row's `members` (None for the first generation).

    The table leaves `what_if` null (the replay does not spend the four assignors on every
    generation; the report and sql/audits compute it for the rows they show). The assignor the
    group named is the row's `reference`, computed in the pass from the subscriptions as
    recorded; the other three run here on the members' subscribed topics, the sticky ones
    starting from the previous row's assignment. One difference from the pass: where the
    previous generation assigned a partition twice, its owner here is the first of its members
    by member id (the pass took the first in the record's order)."""
    if row["group_type"] != CLASSIC:
        return None
    members = tuple(
        AuditMember(
            m["member_id"],
            tuple(m["subscribed_topics"] or ()),
            _tps(m["assignment"]),
            group_instance_id=m["group_instance_id"],
            client_id=m["client_id"],
            rack_id=m["rack_id"],
        )
        for m in row["members"] or ()
    )
    gen = Generation(row["group_id"], CLASSIC, row["generation"], None, row["assignor"], members, -1, -1)
    previous = None
    if row["moved"] is not None and previous_members is not None:
        previous = Generation(
            row["group_id"],
            CLASSIC,
            0,
            None,
            None,
            tuple(
                AuditMember(
                    m["member_id"],
                    (),
                    _tps(m["assignment"]),
                    group_instance_id=m["group_instance_id"],
                )
                for m in previous_members
            ),
            -1,
            -1,
        )
    per_topic = {t["topic"]: t["partitions"] for t in row["topics"] or ()}
    universe = {(t, p) for t, n in per_topic.items() for p in range(n)}
    ppt = {t: n for t, n in per_topic.items() if n > 0}
    prev_owner, prev_by_identity = _previous_owners(previous)
    identity = {m.member_id: m.identity for m in members}
    out: list[dict] = []
    for name in ASSIGNOR_NAMES:
        result: Mapping[str, Sequence[TopicPartition]] | None
        if name == gen.assignor:
            result = (
                None if row["reference"] is None else {r["member_id"]: _tps(r["assignment"]) for r in row["reference"]}
            )
        else:
            try:
                result = _assign_remembered(name, ppt, _what_if_subscriptions(name, gen, previous, prev_by_identity))
            except AssignorError:
                result = None
        if result is None:
            out.append({"assignor": name, "imbalance": None, "moved": None, "unassigned": None})
            continue
        out.append(_what_if_entry(name, result, identity, prev_owner, universe, previous is not None)[0])
    return out


def _previous_owners(
    previous: Generation | None,
) -> tuple[dict[TopicPartition, str], dict[str, list[TopicPartition]]]:
    """The previous generation's owner of each partition (the first member in its order holding
    it) and each owner identity's partitions; empty when there is none."""
    prev_owner: dict[TopicPartition, str] = {}
    prev_by_identity: dict[str, list[TopicPartition]] = {}
    if previous is not None:
        for pm in previous.members:
            prev_by_identity.setdefault(pm.identity, []).extend(pm.assignment)
            for tp in pm.assignment:
                prev_owner.setdefault(tp, pm.identity)
    return prev_owner, prev_by_identity


def _what_if_entry(
    name: str,
    result: Mapping[str, Sequence[TopicPartition]],
    identity: Mapping[str, str],
    prev_owner: Mapping[TopicPartition, str],
    universe: set,
    has_previous: bool,
) -> tuple[dict, dict[TopicPartition, list[str]]]:
    """One assignor's what_if entry from its result (member id -> partitions), and its owners."""
    their_owners = _owners((identity.get(mid, mid), tps) for mid, tps in result.items())
    their_sizes = [len(tps) for tps in result.values()] or [0]
    entry = {
        "assignor": name,
        "imbalance": max(their_sizes) - min(their_sizes),
        "moved": moves(prev_owner, their_owners, universe) if has_previous else None,
        "unassigned": len(universe - their_owners.keys()),
    }
    return entry, their_owners


# --- from offsets_log records ----------------------------------------------------------------


def _tps(items: Iterable[dict] | None, name_of: Callable[[str], str] = lambda t: t) -> tuple[TopicPartition, ...]:
    return tuple((name_of(a["topic"]), int(p)) for a in items or () for p in a.get("partitions") or ())


def classic_members(metadata: dict) -> tuple[AuditMember, ...] | None:
    """The members of a GroupMetadata value with the leader's assignment; None when no member has
    an assignment yet (the generation's first record, before SyncGroup) or the group is empty."""
    members = metadata.get("members") or []
    if not members or not any(m.get("assignment_bytes") for m in members):
        return None
    out = []
    for m in members:
        topics = tuple(m.get("subscribed_topics") or ())
        generation_id = m.get("generation_id")
        out.append(
            AuditMember(
                member_id=m["member_id"],
                topics=topics,
                assignment=_tps(m.get("assignment")),
                group_instance_id=m.get("group_instance_id") or None,
                client_id=m.get("client_id"),
                rack_id=m.get("rack_id") or None,
                subscription=Subscription(
                    member_id=m["member_id"],
                    topics=topics,
                    group_instance_id=m.get("group_instance_id") or None,
                    owned_partitions=_tps(m.get("owned_partitions")),
                    generation_id=generation_id if generation_id is not None and generation_id >= 0 else None,
                    rack_id=m.get("rack_id") or None,
                    user_data=m.get("subscription_user_data"),
                ),
            )
        )
    return tuple(out)


def classic_generation(
    group_id: str, metadata: dict, at_ms: int | None, offsets_partition: int, log_offset: int
) -> Generation | None:
    """The generation a classic group's GroupMetadata value (its generation's last) holds; None
    where there is nothing to audit: no member has an assignment yet, no members, or not a
    consumer-protocol group."""
    members = classic_members(metadata)
    if members is None or (metadata.get("protocol_type") or "") != CONSUMER:
        return None
    return Generation(
        group_id,
        CLASSIC,
        int(metadata.get("generation") or 0),
        at_ms,
        metadata.get("protocol"),
        members,
        offsets_partition,
        log_offset,
        protocol_type=metadata.get("protocol_type"),
        leader=metadata.get("leader"),
    )


@dataclass
class _ConsumerGroup:
    meta: dict[str, dict] = field(default_factory=dict)  # member id -> its ConsumerGroupMemberMetadataValue
    targets: dict[str, list[dict]] = field(default_factory=dict)  # member id -> its target topicPartitions


def generations_from_records(
    records: Iterable[dict], topic_names: Mapping[str, str] | None = None
) -> Iterator[Generation | tuple[str, None]]:
    """Generations from one offsets partition's records in log order (offsets_log rows: record_type,
    group_id, member_id, is_tombstone, log_offset, log_timestamp_ms, group_metadata, value_json).
    Classic: a generation is emitted at its last GroupMetadata record (where the assignment is),
    when the group's next record or the log's end shows it over. KIP-848: one per target
    assignment record (type 6), its members the type-7 records in force then. A group tombstone
    yields (group_id, None): its next generation starts a new incarnation."""
    names = dict(topic_names or {})
    pending: dict[str, tuple[dict, dict]] = {}  # classic group -> (its generation's last record, metadata)
    consumer: dict[str, _ConsumerGroup] = {}

    def flush(group_id: str) -> Iterator[Generation]:
        item = pending.pop(group_id, None)
        if item is None:
            return
        rec, md = item
        gen = classic_generation(group_id, md, rec.get("log_timestamp_ms"), rec["offsets_partition"], rec["log_offset"])
        if gen is not None:
            yield gen

    for rec in records:
        rtype, group_id = rec["record_type"], rec["group_id"]
        if rtype == R.GROUP_METADATA:
            md = rec.get("group_metadata")
            previous = pending.get(group_id)
            if rec["is_tombstone"] or md is None:
                yield from flush(group_id)
                yield (group_id, None)
                continue
            if previous is not None and previous[1].get("generation") != md.get("generation"):
                yield from flush(group_id)
            pending[group_id] = (rec, md)
            continue
        state = consumer.setdefault(group_id, _ConsumerGroup())
        value = None if rec["is_tombstone"] else json.loads(rec.get("value_json") or "null")
        if rtype == R.CONSUMER_GROUP_METADATA and value is None:
            consumer.pop(group_id, None)
            yield (group_id, None)
        elif rtype == R.CONSUMER_GROUP_PARTITION_METADATA and value is not None:
            names.update({t["topicId"]: t["topicName"] for t in value.get("topics") or ()})
        elif rtype == R.CONSUMER_GROUP_MEMBER_METADATA:
            _put(state.meta, rec["member_id"], value)
        elif rtype == R.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER:
            _put(state.targets, rec["member_id"], None if value is None else value.get("topicPartitions") or [])
        elif rtype == R.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA and value is not None:
            yield _consumer_generation(rec, value, state, names)
    for group_id in list(pending):
        yield from flush(group_id)


def _put(into: dict, key: str, value) -> None:
    if value is None:
        into.pop(key, None)
    else:
        into[key] = value


def _consumer_generation(rec: dict, value: dict, state: _ConsumerGroup, names: Mapping[str, str]) -> Generation:
    def name_of(topic_id: str) -> str:
        return names.get(topic_id, topic_id)

    members = []
    for member_id, target in sorted(state.targets.items()):
        meta = state.meta.get(member_id) or {}
        members.append(
            AuditMember(
                member_id=member_id,
                topics=tuple(sorted(meta.get("subscribedTopicNames") or ())),
                assignment=tuple((name_of(tp["topicId"]), int(p)) for tp in target for p in tp.get("partitions") or ()),
                group_instance_id=meta.get("instanceId"),
                client_id=meta.get("clientId"),
                rack_id=meta.get("rackId"),
            )
        )
    named = ((state.meta.get(m.member_id) or {}).get("serverAssignor") for m in members)
    assignors = {a for a in named if a is not None}
    return Generation(
        rec["group_id"],
        CONSUMER,
        int(value["assignmentEpoch"]),
        rec.get("log_timestamp_ms"),
        min(assignors) if len(assignors) == 1 else None,
        tuple(members),
        rec["offsets_partition"],
        rec["log_offset"],
        protocol_type=CONSUMER,
    )


def audit_records(
    records: Iterable[dict], floors: Mapping[str, int], topic_names: Mapping[str, str] | None = None
) -> Iterator[dict]:
    """assignment_audit rows of one offsets partition's group records, in log order. A topic has
    at least `floors` partitions (the log dir's folders, the committed offsets: the count of
    today, so a partition added later shows as unassigned in the generations before) and every
    partition assigned so far, by any group of the partition."""
    previous: dict[str, Generation] = {}
    known = dict(floors)
    for item in generations_from_records(records, topic_names):
        if isinstance(item, tuple):
            previous.pop(item[0], None)  # deleted: the next generation is a new group's first
            continue
        for m in item.members:
            for topic, partition in m.assignment:
                known[topic] = max(known.get(topic, 0), partition + 1)
        yield audit_generation(item, previous.get(item.group_id), known)
        previous[item.group_id] = item


def why_flagged(row) -> str | None:
    """Why a group's latest generation needs a look (as sql/audits/unbalanced_groups.sql says
    it), from its verdict, assignor, imbalance and `unassigned_n` / `twice` counts; None when fine."""
    if row["verdict"] == "differs":
        return f"the leader's assignment differs from Kafka's {row['assignor']} assignor"
    if row["twice"]:
        return f"{row['twice']} partitions assigned twice"
    if row["unassigned_n"]:
        return f"{row['unassigned_n']} partitions unassigned"
    if row["imbalance"] >= 2:
        return f"imbalance {row['imbalance']}"
    return None
