"""Replays the group records of ONE group id, in log order, into that group's final state
(GroupMetadataManager.replay in Kafka 4.x; spec 4.3). Offset commits enter only as the
"create a simple classic group if none exists" event they trigger."""

from __future__ import annotations

import base64
import datetime as _dt
import json
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson

from lib.codec.serde import decode_key
from schemas.records import OFFSET_COMMIT_TYPES, RecordType

CLASSIC, CONSUMER, SHARE, STREAMS = "classic", "consumer", "share", "streams"
T = RecordType
FAMILY_OF_TYPE = {
    T.GROUP_METADATA: CLASSIC,
    **dict.fromkeys(
        (
            T.CONSUMER_GROUP_METADATA,
            T.CONSUMER_GROUP_PARTITION_METADATA,
            T.CONSUMER_GROUP_MEMBER_METADATA,
            T.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
            T.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
            T.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
            T.CONSUMER_GROUP_REGULAR_EXPRESSION,
        ),
        CONSUMER,
    ),
    **dict.fromkeys(
        (
            T.SHARE_GROUP_MEMBER_METADATA,
            T.SHARE_GROUP_METADATA,
            T.SHARE_GROUP_TARGET_ASSIGNMENT_METADATA,
            T.SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER,
            T.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT,
            T.SHARE_GROUP_STATE_PARTITION_METADATA,
        ),
        SHARE,
    ),
    **dict.fromkeys(
        (
            T.STREAMS_GROUP_METADATA,
            T.STREAMS_GROUP_MEMBER_METADATA,
            T.STREAMS_GROUP_TARGET_ASSIGNMENT_METADATA,
            T.STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER,
            T.STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT,
            T.STREAMS_GROUP_TOPOLOGY,
        ),
        STREAMS,
    ),
}
# The same role in each modern family (consumer, share, streams).
GROUP_METADATA_TYPES = (T.CONSUMER_GROUP_METADATA, T.SHARE_GROUP_METADATA, T.STREAMS_GROUP_METADATA)
MEMBER_METADATA_TYPES = (
    T.CONSUMER_GROUP_MEMBER_METADATA,
    T.SHARE_GROUP_MEMBER_METADATA,
    T.STREAMS_GROUP_MEMBER_METADATA,
)
CURRENT_ASSIGNMENT_TYPES = (
    T.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
    T.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT,
    T.STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT,
)
TARGET_MEMBER_TYPES = (
    T.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
    T.SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER,
    T.STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER,
)
TARGET_METADATA_TYPES = (
    T.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
    T.SHARE_GROUP_TARGET_ASSIGNMENT_METADATA,
    T.STREAMS_GROUP_TARGET_ASSIGNMENT_METADATA,
)
# Types whose tombstone removes the whole group.
GROUP_TOMBSTONE_TYPES = {T.GROUP_METADATA, *GROUP_METADATA_TYPES}
STREAMS_STABLE = 1
DEFAULT_CONSUMER_ASSIGNOR = "uniform"
MODERN_STABLE = 0


class GroupReplayError(Exception):
    """A record sequence Kafka's loader rejects (it fails the partition load). The engine
    sets where: `partition` and `offset`."""

    partition: int | None = None
    offset: int | None = None


# Epochs of a modern group created without its type-3/6 (11/12, 17/20) record: 1/1 since
# Kafka 4.3 (0/0 before). Only incomplete record sets see them.
INITIAL_EPOCH = 1


@dataclass
class ModernGroup:
    group_type: str
    epoch: int = INITIAL_EPOCH
    metadata_hash: int = 0
    assignment_epoch: int = INITIAL_EPOCH
    validated_topology_epoch: int = -1
    members: dict = field(default_factory=dict)  # member id -> metadata dict (JsonConverter form)
    current: dict = field(default_factory=dict)  # member id -> current assignment dict
    target: dict = field(default_factory=dict)  # member id -> target assignment dict
    regexes: dict = field(default_factory=dict)  # regex -> resolved topics
    topology: dict | None = None
    topic_names: dict = field(default_factory=dict)  # topic id -> name seen in type 4 records


@dataclass
class ClassicGroup:
    protocol_type: str | None
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp_us: int | None
    members: list
    simple: bool = False


class GroupFold:
    """Folds one group's records. `apply` takes offsets_log rows (dicts) in log order."""

    def __init__(self, group_id: str):
        self.group_id = group_id
        self._group: ClassicGroup | ModernGroup | None = None
        self._state: str | None = None  # a state not parsed yet (see from_state)
        self._row: dict | None = None  # and its consumer_groups row
        self._classic_value: Callable[[], dict] | None = None  # a GroupMetadata value not read yet
        self._audit: dict | None = None  # the assignment audit's state (lib.replay.assignment)
        self._audit_read = True  # False while it is inside an unparsed _state
        self.offsets_partition: int | None = None
        self.log_offset: int | None = None

    @property
    def group(self) -> ClassicGroup | ModernGroup | None:
        if self._state is not None:
            data = json.loads(self._state, object_hook=_decode_bytes)
            self._group = (ClassicGroup if data["kind"] == "classic" else ModernGroup)(**data["group"])
            if not self._audit_read:
                self._audit, self._audit_read = data.get("audit"), True
            self._state = self._row = None
        if self._classic_value is not None:
            value, self._classic_value = self._classic_value, None
            self._group = _classic_group(value())
        return self._group

    @group.setter
    def group(self, value) -> None:
        self.audit_state  # noqa: B018 - read before the state it is in goes
        self._state = self._row = None
        self._classic_value = None
        self._group = value

    @property
    def audit_state(self) -> dict | None:
        """The assignment audit's state of the group (kept with its fold state)."""
        if not self._audit_read:
            assert self._state is not None
            # its value only (right after "kind", as to_state writes it): the group's, most of
            # the state, is parsed when something looks into the group (most never are)
            at = _audit_at(self._state)
            self._audit = _STATE_DECODER.raw_decode(self._state, at + len(_AUDIT_KEY))[0] if at >= 0 else None
            self._audit_read = True
        return self._audit

    @audit_state.setter
    def audit_state(self, value: dict | None) -> None:
        if self._state is not None:
            self.group  # noqa: B018 - parsed: its state is written anew
        self._audit, self._audit_read = value, True

    def set_classic(self, value: Callable[[], dict], offsets_partition: int, log_offset: int) -> None:
        """A GroupMetadata record (not a tombstone) replaces the group: it is classic and not
        simple, its state the record's value, read from `value()` only when something looks
        into the group (most values of a busy log are replaced before anything does)."""
        self.group = None
        self._classic_value = value
        self.offsets_partition, self.log_offset = offsets_partition, log_offset

    def delete_classic(self, offsets_partition: int, log_offset: int) -> None:
        """A GroupMetadata tombstone (apply's, without the row): the group is gone."""
        self.offsets_partition, self.log_offset = offsets_partition, log_offset
        self.group = None

    def keep_classic(self, value: Callable[[], dict]) -> None:
        """Where the GroupMetadata value set by set_classic and not read yet is read from now."""
        if self._classic_value is not None:
            self._classic_value = value

    @property
    def classic_pending(self) -> bool:
        """A GroupMetadata value set by set_classic and not read yet: a classic, non-simple group."""
        return self._classic_value is not None

    @property
    def untouched(self) -> bool:
        """Loaded with its row and not looked into since: to_state and result answer as loaded."""
        return self._state is not None

    # --- carrying the state across runs ------------------------------------------------------
    def to_state(self) -> str | None:
        """The whole fold state as JSON (None when the group does not exist), so an incremental
        run resumes here instead of replaying the group's history."""
        if self._state is not None:
            return self._state
        if self.group is None:
            return None
        kind = "classic" if isinstance(self.group, ClassicGroup) else "modern"
        # the groups' fields are plain containers (no nested dataclasses): vars() gives what
        # dataclasses.asdict does, without its deep copy (most of a run's time in the fold)
        state: dict = {"kind": kind}
        if self.audit_state is not None:
            state["audit"] = self.audit_state  # before "group": is_simple_state reads the end
        state["group"] = vars(self.group)
        return state_json(state)

    @classmethod
    def from_state(
        cls, group_id: str, state: str | None, offsets_partition: int, log_offset: int, row: dict | None = None
    ) -> GroupFold:
        """A fold resumed from its state. With `row` (the consumer_groups row the same run wrote
        from this state) a classic group's state is parsed only when something looks into the
        group: an incremental run touches a few of a partition's groups, and parsing and
        writing back every state cost more than the rest of its work."""
        fold = cls(group_id)
        fold.offsets_partition = offsets_partition
        fold.log_offset = log_offset
        if row is not None and state and state.startswith('{"kind":"classic"') and not cls.is_simple_state(state):
            fold._state, fold._row = state, row
            fold._audit_read = _audit_at(state) < 0
        elif state:
            fold._state = state
            fold._audit_read = False
            fold.group  # noqa: B018 - parsed now
        return fold

    @staticmethod
    def is_simple_state(state: str | None) -> bool:
        """Whether a state is a simple classic group's (the last field of ClassicGroup, `simple`)."""
        return state is not None and state.startswith('{"kind":"classic"') and state.endswith('"simple":true}}')

    # --- helpers -------------------------------------------------------------------------
    def _modern(self, group_type: str, create: bool) -> ModernGroup | None:
        g = self.group
        if g is None:
            if not create:
                return None
            self.group = ModernGroup(group_type)
            return self.group
        if isinstance(g, ModernGroup) and g.group_type == group_type:
            return g
        if isinstance(g, ClassicGroup) and g.simple and group_type != SHARE:
            # Simple groups only hold offsets and are not backed by records: replaced silently.
            self.group = ModernGroup(group_type)
            return self.group
        raise GroupReplayError(f"group {self.group_id!r} is a {self._type_name()} group, not a {group_type} group")

    def _type_name(self) -> str:
        g = self.group
        assert g is not None, "only asked of an existing group"
        return CLASSIC if isinstance(g, ClassicGroup) else g.group_type

    # --- replay ------------------------------------------------------------------------------
    def apply(self, row: dict) -> None:
        rtype = row["record_type"]
        tomb = row["is_tombstone"]
        if rtype in OFFSET_COMMIT_TYPES:
            if not tomb and self.group is None:
                self.group = ClassicGroup(None, 0, None, None, None, [], simple=True)
                self._touch(row)
            return
        family = FAMILY_OF_TYPE.get(rtype)
        if family is None:
            return  # unknown types are skipped, as Kafka does
        self._touch(row)
        if rtype == T.GROUP_METADATA:
            self.group = None if tomb else _classic_group(row["group_metadata"])
            return
        value = _parse_value(row["value_json"]) if not tomb and row.get("value_json") else None
        if (
            family == SHARE
            and self.group is not None
            and not (isinstance(self.group, ModernGroup) and self.group.group_type == SHARE)
        ):
            if not tomb:
                raise GroupReplayError(
                    f"share record for group {self.group_id!r}, which is a {self._type_name()} group"
                )
            return
        if tomb:
            g = self._modern(family, create=False) if isinstance(self.group, ModernGroup) else None
            if g is not None:
                self._delete(g, rtype, row)
            return
        g = self._modern(family, create=True)
        assert g is not None, "create=True makes the group"
        if value is None:
            raise GroupReplayError(
                f"{family} record of group {self.group_id!r} at offset {row['log_offset']} has no decoded value"
            )
        self._set(g, rtype, row, value)

    def _delete(self, g: ModernGroup, rtype: int, row: dict) -> None:
        """A tombstone of a KIP-848, share or streams group record."""
        member = row.get("member_id")
        if rtype in GROUP_TOMBSTONE_TYPES:
            self.group = None
        elif rtype in MEMBER_METADATA_TYPES:
            g.members.pop(member, None)
            g.current.pop(member, None)
        elif rtype in CURRENT_ASSIGNMENT_TYPES:
            g.current.pop(member, None)
        elif rtype in TARGET_MEMBER_TYPES:
            g.target.pop(member, None)
        elif rtype in TARGET_METADATA_TYPES:
            g.assignment_epoch = -1
        elif rtype == T.CONSUMER_GROUP_REGULAR_EXPRESSION:
            g.regexes.pop(_regex_of(row), None)
        elif rtype == T.STREAMS_GROUP_TOPOLOGY:
            g.topology = None

    @staticmethod
    def _set(g: ModernGroup, rtype: int, row: dict, value: dict) -> None:
        """A value of a KIP-848, share or streams group record."""
        member = row.get("member_id")
        if rtype in GROUP_METADATA_TYPES:
            g.epoch = value.get("epoch", 0)
            g.metadata_hash = value.get("metadataHash", 0)
            if rtype == T.STREAMS_GROUP_METADATA:
                g.validated_topology_epoch = value.get("validatedTopologyEpoch", -1)
        elif rtype in MEMBER_METADATA_TYPES:
            g.members[member] = value
        elif rtype in CURRENT_ASSIGNMENT_TYPES:
            g.current[member] = value
            g.members.setdefault(member, {})
        elif rtype in TARGET_MEMBER_TYPES:
            g.target[member] = value
        elif rtype in TARGET_METADATA_TYPES:
            g.assignment_epoch = value.get("assignmentEpoch", -1)
        elif rtype == T.CONSUMER_GROUP_REGULAR_EXPRESSION:
            g.regexes[_regex_of(row)] = value.get("topics") or []
        elif rtype == T.STREAMS_GROUP_TOPOLOGY:
            g.topology = value
        elif rtype == T.CONSUMER_GROUP_PARTITION_METADATA:
            for t in value.get("topics") or []:
                g.topic_names[t["topicId"]] = t["topicName"]

    def _touch(self, row: dict) -> None:
        self.offsets_partition = row["offsets_partition"]
        self.log_offset = row["log_offset"]

    # --- result ------------------------------------------------------------------------------
    def result(self, topic_names: dict | None = None) -> dict | None:
        """The consumer_groups row, or None when the group does not exist."""
        if self._state is not None:
            assert self._row is not None, "set with _state"
            return dict(self._row)
        g = self.group
        if g is None:
            return None
        base = {"group_id": self.group_id, "offsets_partition": self.offsets_partition, "log_offset": self.log_offset}
        if isinstance(g, ClassicGroup):
            return {**base, **_classic_row(g)}
        # names learnt now are kept in the state, so later runs still resolve these topic ids
        if topic_names:
            ids = topic_ids_of(g)
            # (in topic_names' order, as they are kept; most groups' records named theirs: a
            # partition names hundreds of topics, a group a few)
            if any(tid in topic_names and tid not in g.topic_names for tid in ids):
                for tid, name in topic_names.items():
                    if tid in ids and tid not in g.topic_names:  # the group's own records win
                        g.topic_names[tid] = name
        return {**base, **_modern_row(g, dict(g.topic_names))}


def _classic_group(gm: dict) -> ClassicGroup:
    """A GroupMetadata value (the group_metadata struct) as the classic group it sets."""
    return ClassicGroup(
        gm["protocol_type"] or None,
        gm["generation"],
        gm["protocol"],
        gm["leader"],
        _micros(gm["current_state_timestamp"]),
        gm["members"] or [],
    )


def topic_ids_of(g: ModernGroup) -> set:
    ids = set()
    for assignment in list(g.current.values()) + list(g.target.values()):
        for key in ("assignedPartitions", "partitionsPendingRevocation", "topicPartitions"):
            for tp in assignment.get(key) or []:
                ids.add(tp.get("topicId"))
    return ids


def _micros(value):
    """A timestamp as µs since the epoch: the decoder hands ints over, Arrow datetimes."""
    if isinstance(value, _dt.datetime):
        return (value - _EPOCH) // _dt.timedelta(microseconds=1)
    return value


_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)


def _encode_bytes(value):
    if isinstance(value, (bytes, bytearray)):
        return {"$b64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, _dt.datetime):  # Arrow hands timestamps over as datetimes
        return {"$us": int(value.timestamp() * 1_000_000)}
    raise TypeError(f"cannot serialize {type(value).__name__}")


def _parse_value(text: str):
    """A record's value_json as json.loads reads it: orjson, four times faster on a busy log's
    KIP-848 records (a fold's most frequent work), and json where orjson refuses what json
    accepts (NaN, a lone surrogate). The two differ on an integer past 64 bits only (orjson
    reads it as a float); the decoders write none: a coordinator record's integers are Kafka's
    int8 to int64 and uint16."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


# orjson where it writes what json.dumps(state, default=_encode_bytes, separators=(",", ":"))
# does, in a fifth of json's time (an incremental run writes back thousands of states): the
# states hold strings, integers, lists, dicts, None and booleans (no floats: Kafka's group
# records have none), and datetimes and bytes, which it hands to _encode_bytes as json does
_ORJSON_OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_PASSTHROUGH_DATACLASS


def state_json(state: dict) -> str:
    """A fold state as JSON: json.dumps' text (compact, ASCII) byte for byte."""
    try:
        text = orjson.dumps(state, default=_encode_bytes, option=_ORJSON_OPTIONS).decode()
    except (TypeError, orjson.JSONEncodeError):
        text = None  # (keys other than strings, integers past 64 bits: json's own way below)
    if text is None or not text.isascii() or "\x7f" in text:
        # json escapes what is not printable ASCII, orjson writes it as it is (UTF-8)
        return json.dumps(state, default=_encode_bytes, separators=(",", ":"))
    return text


def _decode_bytes(obj: dict):
    if len(obj) == 1 and "$b64" in obj:
        return base64.b64decode(obj["$b64"])
    if len(obj) == 1 and "$us" in obj:
        return obj["$us"]
    return obj


_STATE_DECODER = json.JSONDecoder(object_hook=_decode_bytes)
_AUDIT_KEY = '"audit":'


def _audit_at(state: str) -> int:
    """Where a fold state's audit key is (-1: none): right after "kind", as to_state writes it."""
    return state.find(_AUDIT_KEY, 0, 40)


def _regex_of(row: dict) -> str | None:
    return decode_key(row["raw_key"]).regular_expression


def _classic_row(g: ClassicGroup) -> dict:
    members = []
    # ClassicGroup.computeSubscribedTopics: known only for the consumer protocol with a
    # protocol name (an Empty consumer group subscribes to nothing)
    subscribed: set | None = None
    if g.protocol_type == "consumer" and (g.protocol is not None or not g.members):
        subscribed = set()
    for m in g.members:
        members.append(
            {
                "member_id": m["member_id"],
                "group_instance_id": m["group_instance_id"],
                "client_id": m["client_id"],
                "client_host": m["client_host"],
                # Kafka uses the session timeout when a v0 value has no rebalance timeout
                "rebalance_timeout_ms": m["rebalance_timeout_ms"]
                if m["rebalance_timeout_ms"] != -1
                else m["session_timeout_ms"],
                "session_timeout_ms": m["session_timeout_ms"],
                "subscribed_topics": m["subscribed_topics"],
                "assignment": m["assignment"],
            }
        )
        if subscribed is not None:
            if m["subscribed_topics"] is None:
                subscribed = None
            else:
                subscribed.update(m["subscribed_topics"])
    return {
        "group_type": CLASSIC,
        "protocol_type": g.protocol_type,
        "generation": g.generation,
        "protocol": g.protocol,
        "leader": g.leader,
        "state": "Stable" if g.members else "Empty",
        "current_state_timestamp": g.current_state_timestamp_us,
        "members": members,
        "subscribed_topics": sorted(subscribed) if subscribed is not None else None,
    }


def _assignment(parts: list | None, names: dict) -> list:
    out = []
    for tp in parts or []:
        tid = tp.get("topicId")
        out.append({"topic": names.get(tid, tid), "partitions": sorted(tp.get("partitions") or [])})
    return sorted(out, key=lambda x: x["topic"] or "")


def _modern_row(g: ModernGroup, names: dict) -> dict:
    """State and members as Kafka computes them after a load (ConsumerGroup / StreamsGroup /
    ShareGroup.maybeUpdateGroupState): a pure function of the final records."""
    members = []
    subscribed: set = set()
    stable_state = STREAMS_STABLE if g.group_type == STREAMS else MODERN_STABLE
    reconciled = True
    assignors: dict[str, int] = {}
    for member_id in sorted(g.members):
        meta = g.members[member_id]
        cur = g.current.get(member_id, {})
        topics = meta.get("subscribedTopicNames")
        if topics:
            subscribed.update(topics)
        if meta.get("serverAssignor"):
            assignors[meta["serverAssignor"]] = assignors.get(meta["serverAssignor"], 0) + 1
        assignment = None if g.group_type == STREAMS else _assignment(cur.get("assignedPartitions"), names)
        classic = meta.get("classicMemberMetadata")
        members.append(
            {
                "member_id": member_id,
                "group_instance_id": meta.get("instanceId"),
                "client_id": meta.get("clientId"),
                "client_host": meta.get("clientHost"),
                "rebalance_timeout_ms": meta.get("rebalanceTimeoutMs"),
                "session_timeout_ms": classic.get("sessionTimeoutMs") if classic else None,
                "subscribed_topics": sorted(topics) if topics is not None else None,
                "assignment": assignment,
            }
        )
        # a member known only from its metadata record: epoch 0, state STABLE
        if cur.get("state", stable_state) != stable_state or cur.get("memberEpoch", 0) != g.assignment_epoch:
            reconciled = False
    if g.group_type == CONSUMER:
        for topics in g.regexes.values():
            subscribed.update(topics)
    if g.group_type == STREAMS:
        # the persisted topology's source and repartition-source topics (Kafka 4.2+)
        subscribed = set()
        for sub in (g.topology or {}).get("subtopologies") or []:
            subscribed.update(sub.get("sourceTopics") or [])
            subscribed.update(t["name"] for t in sub.get("repartitionSourceTopics") or [])
    if not g.members:
        state = "Empty"
    elif g.group_type == SHARE:
        state = "Stable"
    elif g.group_type == STREAMS and (g.topology is None or g.topology.get("epoch") != g.validated_topology_epoch):
        state = "NotReady"
    elif g.epoch > g.assignment_epoch:
        state = "Assigning"
    elif not reconciled:
        state = "Reconciling"
    else:
        state = "Stable"
    # ConsumerGroup.preferredServerAssignor: the members' most used assignor, else the broker's
    # default (the first of group.consumer.assignors: "uniform")
    if g.group_type == CONSUMER:
        protocol = max(sorted(assignors), key=lambda a: assignors[a]) if assignors else DEFAULT_CONSUMER_ASSIGNOR
    else:
        protocol = None
    return {
        "group_type": g.group_type,
        "protocol_type": g.group_type if g.group_type != CONSUMER else "consumer",
        "generation": g.epoch,
        "protocol": protocol,
        "leader": None,
        "state": state,
        "current_state_timestamp": None,
        "members": members,
        "subscribed_topics": sorted(subscribed),
    }
