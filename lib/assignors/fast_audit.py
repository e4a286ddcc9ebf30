"""The assignment audit of a batch of classic consumer group generations, vectorised: the
assignment_audit rows ``lib.assignors.audit.audit_generation`` gives, but for ``what_if``
(left null), from the GroupMetadata column as Arrow, without a Python loop per generation or
member. ``audit_generation`` stays the reference, and the path of the generations the kernels
leave to it.

``audit_classic_batch(batch, previous, known)`` audits a ``GenerationBatch`` (generations in
the order ``lib.replay.assignment.AssignmentTracker`` audits them, each its last GroupMetadata
value) against ``Previous`` (per group, the owners of its previous audited generation's
partitions) and ``known`` (partitions per topic known before the batch; raised in log order, as
the tracker raises it), and returns the rows as an Arrow table (ASSIGNMENT_AUDIT) and the
Previous after the batch. A KIP-848 target assignment epoch goes the same way as a row whose
value ``epoch_value`` makes of it (``epochs``): its row is audit_generation's for the epoch (no
assignor recomputed, verdict not_recomputed).

How: Arrow flattens the members, their subscribed topics, owned and assigned partitions to CSR
arrays, topics, owners (instance id, else member id) and groups become integer ids by one
dictionary encoding each; a first numba pass walks the generations in log order (``known`` and
the groups' previous owners are sequential) and works out each generation's universe, spread,
moves, fewest moves, unassigned and assigned-twice partitions, and the partition counts its
leader knew; ``lib.assignors.fast`` recomputes every generation's own assignor in one batch; a
second pass compares its result with the leader's (verdict, differing members, reference);
Arrow builds the nested columns from the CSR arrays.

To the Python path (``audit_generation`` for that generation, with the previous owners and the
partition counts the kernels worked out; ``what_if`` dropped): a partition assigned of a topic
nobody in the generation subscribes to, or a negative one; two members with one owner identity
or one member id; a universe over ``MAX_UNIVERSE`` partitions; an assignor problem the kernels
FALLBACK on (lib.assignors.fast says which); a reference assignment holding a partition beyond
its topic's count (inconsistent owned partitions). A generation whose value breaks Kafka's
schema (a null member, member id, topic or partition) is audited record by record in Python,
state and all, the batch split around it.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numba import njit

from lib.assignors import ASSIGNOR_NAMES
from lib.assignors.audit import CLASSIC, CONSUMER, AuditMember, Generation, audit_generation, classic_generation
from lib.assignors.fast import (
    ERROR,
    FALLBACK,
    RANGE,
    ProblemBatch,
    assign_arrays,
    njit_inline_kernel,
    njit_kernel,
)
from lib.numba_cache import use_stable_zip_cache
from schemas.tables import ASSIGNMENT_AUDIT, GROUP_METADATA
from schemas.types import arrow_type

use_stable_zip_cache(__file__)  # before the first @njit(cache=True): see lib.numba_cache

GROUP_METADATA_TYPE = arrow_type(GROUP_METADATA)
# What the audit reads of a GroupMetadata value (audit_view): a GenerationBatch holds only these,
# so taking the generations' values into one copies a third less (the raw subscription and
# assignment bytes, hosts and timeouts stay behind). `assignment_bytes` is only asked whether it
# is empty (no assignment yet): the view holds b"\x01" for a non-empty one.
AUDIT_VALUE_FIELDS = ("protocol_type", "generation", "protocol", "leader", "members")
AUDIT_MEMBER_FIELDS = (
    "member_id",
    "group_instance_id",
    "client_id",
    "rack_id",
    "subscribed_topics",
    "owned_partitions",
    "subscription_user_data",
    "generation_id",
    "assignment",
    "assignment_bytes",
)
_MEMBER_TYPE = GROUP_METADATA_TYPE.field("members").type.value_type
AUDIT_MEMBER_TYPE = pa.struct([_MEMBER_TYPE.field(f) for f in AUDIT_MEMBER_FIELDS])
AUDIT_VALUE_TYPE = pa.struct(
    [
        pa.field("members", pa.list_(AUDIT_MEMBER_TYPE), GROUP_METADATA_TYPE.field("members").nullable)
        if f == "members"
        else GROUP_METADATA_TYPE.field(f)
        for f in AUDIT_VALUE_FIELDS
    ]
)
AUDIT_SCHEMA = ASSIGNMENT_AUDIT.arrow_schema
MAX_UNIVERSE = 1 << 22  # partitions of one generation's subscribed topics the kernels take on

# _Rows.state: what a row of the batch is
SKIP, AUDIT, DELETE = 0, 1, 2
# what the passes made of an audited row
FAST, PYTHON = 1, 2
# verdicts, in VERDICTS order
MATCHES, EQUIVALENT, DIFFERS, CUSTOM, NOT_RECOMPUTED = range(5)
VERDICTS = ("matches", "equivalent", "differs", "custom", "not_recomputed")


# --- the batch and the previous owners -----------------------------------------------------------


def _arrow(values, type_: pa.DataType) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    array = values if isinstance(values, pa.Array) else pa.array(values, type_)
    return array if array.type == type_ else array.cast(type_)


def _mask(array: pa.Array) -> pa.Array | None:
    return array.is_null() if array.null_count else None


def audit_view(values: pa.Array) -> pa.StructArray:
    """GroupMetadata values (GROUP_METADATA_TYPE) as the audit reads them (AUDIT_VALUE_TYPE):
    their columns, but for `assignment_bytes`, shared, not copied."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if values.type == AUDIT_VALUE_TYPE:
        return values
    if values.type != GROUP_METADATA_TYPE:
        raise ValueError(f"not GroupMetadata values: {values.type}")
    lists = values.field("members")
    members = lists.values
    flag = members.field("assignment_bytes")
    nonempty = pc.greater(pc.binary_length(flag), 0)
    children = [
        pc.if_else(nonempty, pa.scalar(b"\x01"), pa.scalar(b"")) if f == "assignment_bytes" else members.field(f)
        for f in AUDIT_MEMBER_FIELDS
    ]
    member_view = pa.StructArray.from_arrays(children, fields=list(AUDIT_MEMBER_TYPE), mask=_mask(members))
    offsets = pa.array(lists.offsets.to_numpy())  # (a slice's offsets and a mask: Arrow takes them unsliced)
    list_view = pa.ListArray.from_arrays(offsets, member_view, type=pa.list_(AUDIT_MEMBER_TYPE), mask=_mask(lists))
    return pa.StructArray.from_arrays(
        [list_view if f == "members" else values.field(f) for f in AUDIT_VALUE_FIELDS],
        fields=list(AUDIT_VALUE_TYPE),
        mask=_mask(values),
    )


@dataclass(frozen=True)
class GenerationBatch:
    """Classic generations in the order they are audited (AssignmentTracker's: a generation
    when its group's next record shows it over), each as its last GroupMetadata record: the
    value (GROUP_METADATA, as lib.decode gives it, in audit_view), group id, offsets partition, log offset
    and time (ms, null where the record has none). A row with ``deleted`` is a group tombstone
    instead (its value is not read): the group's previous generation is forgotten, its next
    one is a new group's first. A row audit_generation would skip (no member has an
    assignment yet, no members, protocol type not "consumer") gives no row and changes nothing.
    """

    group_metadata: pa.StructArray
    group_id: pa.StringArray
    offsets_partition: pa.Int32Array
    log_offset: pa.Int64Array
    at_ms: pa.Int64Array
    deleted: pa.BooleanArray

    @classmethod
    def of(
        cls,
        group_metadata: pa.Array | Sequence[dict | None],
        group_id: pa.Array | Sequence[str],
        offsets_partition: pa.Array | Sequence[int] | np.ndarray,
        log_offset: pa.Array | Sequence[int] | np.ndarray,
        at_ms: pa.Array | Sequence[int | None] | np.ndarray,
        deleted: pa.Array | Sequence[bool] | np.ndarray | None = None,
    ) -> GenerationBatch:
        """From Arrow arrays or Python sequences (values as dicts, e.g. the tracker's)."""
        n = len(group_id)
        return cls(
            audit_view(
                group_metadata
                if isinstance(group_metadata, pa.Array | pa.ChunkedArray)
                else _arrow(group_metadata, GROUP_METADATA_TYPE)
            ),
            _arrow(group_id, pa.string()),
            _arrow(offsets_partition, pa.int32()),
            _arrow(log_offset, pa.int64()),
            _arrow(at_ms, pa.int64()),
            _arrow(np.zeros(n, np.bool_) if deleted is None else deleted, pa.bool_()),
        )

    def __post_init__(self):
        lengths = {len(getattr(self, f)) for f in self.__dataclass_fields__}
        if len(lengths) != 1:
            raise ValueError(f"GenerationBatch: columns of different lengths {sorted(lengths)}")
        if self.group_metadata.type != AUDIT_VALUE_TYPE:
            raise ValueError("GenerationBatch: group_metadata is not in audit_view")
        if self.group_id.null_count or self.deleted.null_count:
            raise ValueError("GenerationBatch: a null group id or deleted flag")

    def __len__(self) -> int:
        return len(self.group_id)

    def slice(self, start: int, stop: int) -> GenerationBatch:
        return GenerationBatch(*(getattr(self, f).slice(start, stop - start) for f in self.__dataclass_fields__))

    @classmethod
    def concat(cls, batches: Sequence[GenerationBatch]) -> GenerationBatch:
        return cls(*(pa.concat_arrays([getattr(b, f) for b in batches]) for f in cls.__dataclass_fields__))


OWNER_TYPE = pa.struct([("topic", pa.string()), ("partition", pa.int32()), ("owner", pa.string())])
PREVIOUS_SCHEMA = pa.schema([("group_id", pa.string()), ("owners", pa.list_(OWNER_TYPE))])


@dataclass(frozen=True)
class Previous:
    """Per group, its previous audited generation as the next audit uses it: the owner of each
    partition it assigned (identity: group instance id, else member id; where two members were
    assigned one partition, the first in the record's member order, as audit_generation's
    ``previous`` counts it). A group without a row has no previous generation (its next one is
    its incarnation's first); one with an empty list had one that assigned nothing.

    ``table``: PREVIOUS_SCHEMA, one row per group. Picklable; ``states()`` / ``from_states``
    give and take the tracker's JSON form of a previous generation ({"members": [{"member_id",
    "instance", "assignment": [[topic, partition], ...]}]}), ``from_generations`` the tracker's
    Generation objects, ``generation`` one back as a Generation (for audit_generation)."""

    table: pa.Table

    def __post_init__(self):
        if self.table.schema != PREVIOUS_SCHEMA:
            raise ValueError("Previous: the table is not of PREVIOUS_SCHEMA")

    @classmethod
    def empty(cls) -> Previous:
        return cls(pa.Table.from_batches([], schema=PREVIOUS_SCHEMA))

    @classmethod
    def _of(cls, owners: Mapping[str, Iterable[tuple[str, Iterable[tuple[str, int]]]]]) -> Previous:
        """group -> its members in order as (identity, assigned partitions). Built as columns:
        a dict per owner (from_pylist) cost three times as much."""
        topics: list[str] = []
        numbers: list[int] = []
        identities: list[str] = []
        offsets = [0]
        for members in owners.values():
            first: dict[tuple[str, int], str] = {}
            for identity, partitions in members:
                for topic, partition in partitions:
                    first.setdefault((topic, int(partition)), identity)
            for (topic, partition), identity in first.items():
                topics.append(topic)
                numbers.append(partition)
                identities.append(identity)
            offsets.append(len(topics))
        entries = pa.StructArray.from_arrays(
            [pa.array(topics, pa.string()), pa.array(numbers, pa.int32()), pa.array(identities, pa.string())],
            fields=list(OWNER_TYPE),
        )
        lists = pa.ListArray.from_arrays(
            pa.array(offsets, pa.int32()), entries, type=PREVIOUS_SCHEMA.field("owners").type
        )
        return cls(pa.Table.from_arrays([pa.array(list(owners), pa.string()), lists], schema=PREVIOUS_SCHEMA))

    @classmethod
    def from_generations(cls, generations: Mapping[str, Generation]) -> Previous:
        """From the tracker's previous generations (group -> Generation)."""
        return cls._of({g: [(m.identity, m.assignment) for m in gen.members] for g, gen in generations.items()})

    @classmethod
    def from_states(cls, states: Mapping[str, dict]) -> Previous:
        """From the tracker's JSON form (group -> its state's "previous")."""
        return cls._of(
            {
                g: [(m.get("instance") or m["member_id"], [(t, p) for t, p in m["assignment"]]) for m in s["members"]]
                for g, s in states.items()
            }
        )

    def states(self) -> dict[str, dict]:
        """group -> the tracker's JSON form of its previous generation (one member per owner).
        Read column by column: the rows as Python dicts (a dict per owner) cost four times as
        much, and an incremental run's finish asks for thousands of groups."""
        out: dict[str, dict] = {}
        if not self.table.num_rows:
            return out
        owners = self.table.column("owners").combine_chunks()
        counts = pc.list_value_length(owners).fill_null(0).to_numpy(zero_copy_only=False).tolist()
        topic, partition, owner = (a.to_pylist() for a in pc.list_flatten(owners).flatten())
        k = 0
        for group_id, n in zip(self.table.column("group_id").to_pylist(), counts):
            members: dict[str, list] = {}
            for i in range(k, k + n):
                members.setdefault(owner[i], []).append([topic[i], partition[i]])
            k += n
            out[group_id] = {
                "members": [{"member_id": who, "instance": None, "assignment": tps} for who, tps in members.items()]
            }
        return out

    def generation(self, group_id: str) -> Generation | None:
        """The group's previous generation as audit_generation's ``previous`` (owners only)."""
        rows = self.table.filter(pc.equal(self.table.column("group_id"), group_id)).column("owners").to_pylist()
        return None if not rows else _owners_generation(group_id, rows[0])

    def without(self, group_ids: Iterable[str]) -> Previous:
        """Less these groups (deleted: their next generation is a new group's first)."""
        drop = pa.array(list(group_ids), pa.string())
        return Previous(self.table.filter(pc.invert(pc.is_in(self.table.column("group_id"), drop))))

    def updated(self, newer: Previous) -> Previous:
        """With newer's groups in place of these groups' own."""
        return Previous(pa.concat_tables([self.without(newer.groups()).table, newer.table]))

    def groups(self) -> list[str]:
        return self.table.column("group_id").to_pylist()

    def __len__(self) -> int:
        return self.table.num_rows


def _owners_generation(group_id: str, owners: Iterable[dict]) -> Generation:
    """A previous generation as audit_generation reads it: one member per owner identity."""
    members: dict[str, list[tuple[str, int]]] = {}
    for o in owners:
        members.setdefault(o["owner"], []).append((o["topic"], o["partition"]))
    return Generation(
        group_id,
        CLASSIC,
        0,
        None,
        None,
        tuple(AuditMember(who, (), tuple(tps)) for who, tps in members.items()),
        -1,
        -1,
    )


# --- the kernels' inputs -------------------------------------------------------------------------

# per row: SKIP/AUDIT/DELETE, group id, members (CSR over _Members)
_Rows = namedtuple("_Rows", "state group member_offsets")
# per member (the batch's, in order): owner identity id, member id (UTF-8 CSR), subscribed
# topics as listed (topic ids), assigned and owned partitions in the record's order
_Members = namedtuple(
    "_Members",
    "identity id_offsets id_bytes topic_offsets topic assigned_offsets assigned_topic assigned_partition "
    "owned_offsets owned_topic",
)
# owner maps (a previous generation's partition -> identity), CSR per map
_Owners = namedtuple("_Owners", "offsets topic partition identity")
# scratch of the passes, sized for the batch's largest generation. A row's universe: its
# subscribed topics k = 0..nk-1 in String order (sub_topic, sub_n, base), each partition a
# slot base[k] + partition (slot_k: its k)
_Work = namedtuple(
    "_Work",
    "topic_stamp topic_k seen_stamp identity_stamp identity_member sub_topic sub_n base "
    "slot_k slot_occ slot_mark order kept sizes lists_offsets lists "
    "subscribes hash_topic hash_partition hash_token",
)


@njit(cache=True, nogil=True)
def _workspace(n_topics, n_identities, max_m, max_assigned, max_total, max_nk, max_other):
    cap = 16
    while cap < 2 * max_assigned:
        cap *= 2
    m1 = max_m + 1
    return _Work(
        topic_stamp=np.full(n_topics, -1, np.int64),
        topic_k=np.empty(n_topics, np.int64),
        seen_stamp=np.full(n_topics, -1, np.int64),
        identity_stamp=np.full(n_identities, -1, np.int64),
        identity_member=np.empty(n_identities, np.int64),
        sub_topic=np.empty(max_nk, np.int64),
        sub_n=np.empty(max_nk, np.int64),
        base=np.empty(max_nk, np.int64),
        slot_k=np.empty(max_total, np.int64),
        slot_occ=np.empty(max_total, np.int64),
        slot_mark=np.full(max_total, -1, np.int64),
        order=np.empty(m1, np.int64),
        kept=np.empty(m1, np.int64),
        sizes=np.empty(2 * m1, np.int64),
        lists_offsets=np.empty(m1, np.int64),
        lists=np.empty(max(max_assigned, max_other) + 1, np.int64),
        subscribes=np.empty(m1 * max(max_nk, 1), np.bool_),
        hash_topic=np.empty(cap, np.int64),
        hash_partition=np.empty(cap, np.int64),
        hash_token=np.full(cap, -1, np.int64),
    )


# --- one generation's pieces ---------------------------------------------------------------------


@njit_kernel
def _raise_known(first, last, mem, known_value, known_has):
    """AssignmentTracker._audit: each assigned partition raises its topic's known count."""
    for e in range(mem.assigned_offsets[first], mem.assigned_offsets[last]):
        t = mem.assigned_topic[e]
        value = mem.assigned_partition[e] + np.int64(1)
        if not known_has[t]:
            known_value[t] = max(value, 0)
            known_has[t] = True
        elif value > known_value[t]:
            known_value[t] = value


@njit_inline_kernel
def _bytes_compare(data, offsets, a, b):
    """The sign of comparing strings a and b by their UTF-8 bytes (Python's str order)."""
    sa, ea, sb, eb = offsets[a], offsets[a + 1], offsets[b], offsets[b + 1]
    for k in range(min(ea - sa, eb - sb)):
        if data[sa + k] != data[sb + k]:
            return -1 if data[sa + k] < data[sb + k] else 1
    la, lb = ea - sa, eb - sb
    return -1 if la < lb else (1 if la > lb else 0)


@njit_kernel
def _order_by_id(first, m, mem, order):
    """order[:m]: the members by member id (stable); -> False where two ids are equal."""
    for i in range(m):
        v = i
        k = i
        while k > 0 and _bytes_compare(mem.id_bytes, mem.id_offsets, first + v, first + order[k - 1]) < 0:
            order[k] = order[k - 1]
            k -= 1
        order[k] = v
    for k in range(1, m):
        if _bytes_compare(mem.id_bytes, mem.id_offsets, first + order[k - 1], first + order[k]) == 0:
            return False
    return True


@njit_kernel
def _subscribed(r, first, last, mem, topic_rank, w):
    """Row r's subscribed topics (each once) in String order into w.sub_topic; -> how many."""
    nk = 0
    for j in range(mem.topic_offsets[first], mem.topic_offsets[last]):
        t = mem.topic[j]
        if w.topic_stamp[t] != r:
            w.topic_stamp[t] = r
            k = nk
            while k > 0 and topic_rank[w.sub_topic[k - 1]] > topic_rank[t]:
                w.sub_topic[k] = w.sub_topic[k - 1]
                k -= 1
            w.sub_topic[k] = t
            nk += 1
    return nk


@njit_kernel
def _layout(r, topic, count, lo, hi, w):
    """Row r's universe from its topics topic[lo:hi] (String order) and partition counts:
    marks them subscribed; -> its partitions (slot_k is filled where they fit)."""
    total = 0
    for j in range(lo, hi):
        k = j - lo
        t = topic[j]
        w.topic_stamp[t] = r
        w.topic_k[t] = k
        w.sub_topic[k] = t
        w.sub_n[k] = max(count[j], 0)
        w.base[k] = total
        total += w.sub_n[k]
    if total <= len(w.slot_k):
        for k in range(hi - lo):
            for q in range(w.sub_n[k]):
                w.slot_k[w.base[k] + q] = k
    return total


@njit_inline_kernel
def _slot(r, t, p, w):
    """The slot of partition p of topic t in row r's universe, -1 outside it."""
    if t < 0 or w.topic_stamp[t] != r:
        return -1
    k = w.topic_k[t]
    return w.base[k] + p if 0 <= p < w.sub_n[k] else -1


@njit_kernel
def _slot_lists(r, first, m, offsets, topic, partition, w, lists_offsets, lists, tick):
    """Each member's partitions (offsets/topic/partition, CSR over the batch's members
    first..first+m-1) as its distinct slots in order: lists[lists_offsets[i]:lists_offsets[i+1]]
    (an insertion sort: a member's partitions come sorted, or in a few sorted runs). -> (slots
    anyone holds, -1 where a partition is outside the universe; the next tick)."""
    at = 0
    held = 0
    for i in range(m):
        g = first + i
        lists_offsets[i] = start = at
        for e in range(offsets[g], offsets[g + 1]):
            s = _slot(r, topic[e], partition[e], w)
            if s < 0:
                return -1, tick + 1
            k = at
            while k > start and lists[k - 1] > s:
                k -= 1
            if k > start and lists[k - 1] == s:
                continue  # listed twice
            for q in range(at, k, -1):
                lists[q] = lists[q - 1]
            lists[k] = s
            at += 1
            if w.slot_mark[s] != tick:
                w.slot_mark[s] = tick
                held += 1
    lists_offsets[m] = at
    return held, tick + 1


@njit_inline_kernel
def _holds(lists_offsets, lists, i, s):
    """Does member i's sorted list hold slot s?"""
    lo, hi = lists_offsets[i], lists_offsets[i + 1]
    while lo < hi:
        mid = (lo + hi) // 2
        if lists[mid] < s:
            lo = mid + 1
        else:
            hi = mid
    return lo < lists_offsets[i + 1] and lists[lo] == s


@njit_inline_kernel
def _member_of(r, identity, w):
    """The row's member with this identity, -1: none (identities are marked for the row)."""
    return w.identity_member[identity] if w.identity_stamp[identity] == r else -1


@njit_kernel
def _moves(r, owners, lo, hi, w, lists_offsets, lists):
    """audit.moves: previous owners owners[lo:hi] whose partition (in the universe) their
    owner does not hold now (each member's slots in lists)."""
    moved = 0
    for e in range(lo, hi):
        s = _slot(r, owners.topic[e], owners.partition[e], w)
        if s >= 0:
            i = _member_of(r, owners.identity[e], w)
            if i < 0 or not _holds(lists_offsets, lists, i, s):
                moved += 1
    return moved


@njit_kernel
def _same_topics(first, m, mem):
    """Do all members list the same subscribed topics (as audit.min_moves compares them)?"""
    lo, hi = mem.topic_offsets[first], mem.topic_offsets[first + 1]
    for g in range(first + 1, first + m):
        a, b = mem.topic_offsets[g], mem.topic_offsets[g + 1]
        if b - a != hi - lo:
            return False
        for q in range(b - a):
            if mem.topic[a + q] != mem.topic[lo + q]:
                return False
    return True


@njit_kernel
def _insertion_sort(a, n):
    for i in range(1, n):
        v = a[i]
        k = i
        while k > 0 and a[k - 1] > v:
            a[k] = a[k - 1]
            k -= 1
        a[k] = v


@njit_kernel
def _min_moves(r, owners, lo, hi, first, m, mem, nk, total, w):
    """audit.min_moves against the previous owners owners[lo:hi]."""
    held = 0
    kept = w.kept
    kept[:m] = 0
    for e in range(lo, hi):
        s = _slot(r, owners.topic[e], owners.partition[e], w)
        if s >= 0:
            held += 1
            i = _member_of(r, owners.identity[e], w)
            if i >= 0:
                kept[i] += 1
    if _same_topics(first, m, mem):
        _insertion_sort(kept, m)
        share, extra = total // m, total % m
        retained = 0
        for i in range(m):  # the larger shares to those that kept most
            retained += min(kept[m - 1 - i], share + 1 if i < extra else share)
        return held - retained
    w.subscribes[: m * nk] = False
    for i in range(m):
        g = first + i
        for j in range(mem.topic_offsets[g], mem.topic_offsets[g + 1]):
            t = mem.topic[j]
            w.subscribes[i * nk + w.topic_k[t]] = True
    gone = 0
    for e in range(lo, hi):
        s = _slot(r, owners.topic[e], owners.partition[e], w)
        if s >= 0:
            i = _member_of(r, owners.identity[e], w)
            if i < 0 or not w.subscribes[i * nk + w.slot_k[s]]:
                gone += 1
    return gone


@njit_kernel
def _owner_map(r, first, last, mem, w, maps, at):
    """The row's owner map (audit_generation's prev_owner for the next generation): each
    partition assigned, first owner in member order, appended to maps from `at`. -> the end."""
    n = mem.assigned_offsets[last] - mem.assigned_offsets[first]
    cap = 16
    while cap < 2 * n:
        cap *= 2
    mask = cap - 1
    for g in range(first, last):
        for e in range(mem.assigned_offsets[g], mem.assigned_offsets[g + 1]):
            t = np.int64(mem.assigned_topic[e])
            p = np.int64(mem.assigned_partition[e])
            h = ((t * 0x9E3779B1) ^ (p * 0x85EBCA77)) & mask
            while w.hash_token[h] == r and (w.hash_topic[h] != t or w.hash_partition[h] != p):
                h = (h + 1) & mask
            if w.hash_token[h] != r:
                w.hash_token[h] = r
                w.hash_topic[h] = t
                w.hash_partition[h] = p
                maps.topic[at] = t
                maps.partition[at] = p
                maps.identity[at] = mem.identity[g]
                at += 1
    return at


@njit_kernel
def _mark_identities(r, first, m, mem, w):
    """identity -> member for the row; -> False where two members share an identity."""
    for i in range(m):
        identity = mem.identity[first + i]
        if w.identity_stamp[identity] == r:
            return False
        w.identity_stamp[identity] = r
        w.identity_member[identity] = i
    return True


@njit_inline_kernel
def _owners_range(ref, maps0, maps):
    """The owner map a previous-generation reference names: (which, lo, hi); which 0: the
    Previous given, 1: a row of the batch."""
    if ref >= 0:
        return 1, maps.offsets[ref], maps.offsets[ref + 1]
    k = -2 - ref
    return 0, maps0.offsets[k], maps0.offsets[k + 1]


@njit_kernel
def _fill_offsets(offsets):
    """CSR offsets written only for some items (-1 elsewhere): the others get empty ranges."""
    for i in range(1, len(offsets)):
        if offsets[i] < 0:
            offsets[i] = offsets[i - 1]


# --- the first pass: everything but the assignor ---------------------------------------------------


@njit(cache=True, nogil=True)
def _sizes(rows, mem, known_value, known_has):
    """The batch's largest generation (members, assigned partitions, universe, subscribed
    topics), for the scratch, and the sum of its universes (room for the unassigned ones).
    A universe's bound: its topics' counts once every partition of the batch is known."""
    value, has = known_value.copy(), known_has.copy()
    for r in range(len(rows.state)):
        if rows.state[r] == AUDIT:
            _raise_known(rows.member_offsets[r], rows.member_offsets[r + 1], mem, value, has)
    stamp = np.full(len(value), -1, np.int64)
    max_m = max_assigned = max_total = max_nk = 1
    sum_total = 0
    for r in range(len(rows.state)):
        if rows.state[r] != AUDIT:
            continue
        first, last = rows.member_offsets[r], rows.member_offsets[r + 1]
        nk = total = 0
        for j in range(mem.topic_offsets[first], mem.topic_offsets[last]):
            t = mem.topic[j]
            if stamp[t] != r:
                stamp[t] = r
                nk += 1
                total += max(value[t], 0) if has[t] else 0
        max_m = max(max_m, last - first)
        max_assigned = max(max_assigned, mem.assigned_offsets[last] - mem.assigned_offsets[first])
        max_total = max(max_total, min(total, MAX_UNIVERSE))
        max_nk = max(max_nk, nk)
        sum_total += min(total, MAX_UNIVERSE)
    return max_m, max_assigned, max_total, max_nk, sum_total


_First = namedtuple(
    "_First",
    "kind prev_ref topics_offsets topics_topic topics_n counts_offsets counts_topic counts_n maps "
    "partitions assigned min_per_member max_per_member moved min_moves "
    "unassigned_offsets unassigned_topic unassigned_partition twice_offsets twice_topic twice_partition "
    "member_order member_count list_offsets list_topic list_partition",
)
# how far _first_row has written: _First's flat arrays, and the scratch's mark counter
TOPICS, COUNTS, MAPS, UNASSIGNED, TWICE, LISTS, TICK = range(7)


@njit_kernel
def _first_row(r, rows, mem, topic_rank, known_value, known_has, maps0, group_ref, w, out, at):
    """Audited row r: `known` raised, its topics (with the counts known now) and owner map,
    and where the kernels audit it (kind FAST) all but the assignor's verdict."""
    g = rows.group[r]
    first, last = rows.member_offsets[r], rows.member_offsets[r + 1]
    m = last - first
    _raise_known(first, last, mem, known_value, known_has)
    nk = _subscribed(r, first, last, mem, topic_rank, w)
    lo = at[TOPICS]
    for k in range(nk):
        t = w.sub_topic[k]
        out.topics_topic[lo + k] = t
        out.topics_n[lo + k] = known_value[t] if known_has[t] else 0
    total = _layout(r, out.topics_topic, out.topics_n, lo, lo + nk, w)
    at[TOPICS] = lo + nk
    out.topics_offsets[r + 1] = lo + nk

    fast = total <= MAX_UNIVERSE and _mark_identities(r, first, m, mem, w) and _order_by_id(first, m, mem, w.order)
    for e in range(mem.assigned_offsets[first], mem.assigned_offsets[last]):
        if _slot(r, mem.assigned_topic[e], mem.assigned_partition[e], w) < 0:
            fast = False
    ref = group_ref[g]
    out.prev_ref[r] = ref
    out.kind[r] = FAST if fast else PYTHON
    if fast:
        _first_row_stats(r, first, m, nk, total, ref, mem, maps0, w, out, at)
    out.maps.offsets[r] = at[MAPS]  # read by later rows before the offsets are filled in
    at[MAPS] = _owner_map(r, first, last, mem, w, out.maps, at[MAPS])
    out.maps.offsets[r + 1] = at[MAPS]
    group_ref[g] = r


@njit_kernel
def _first_row_stats(r, first, m, nk, total, ref, mem, maps0, w, out, at):
    """Row r's spread, moves, unassigned and assigned-twice partitions, members (by member
    id, each its partitions) and the partition counts its leader knew."""
    held, at[TICK] = _slot_lists(
        r,
        first,
        m,
        mem.assigned_offsets,
        mem.assigned_topic,
        mem.assigned_partition,
        w,
        w.lists_offsets,
        w.lists,
        at[TICK],
    )
    out.assigned[r] = held
    out.partitions[r] = total
    w.slot_occ[:total] = 0  # how often each partition is assigned, in all
    for e in range(mem.assigned_offsets[first], mem.assigned_offsets[first + m]):
        w.slot_occ[_slot(r, mem.assigned_topic[e], mem.assigned_partition[e], w)] += 1
    for s in range(total):
        k = w.slot_k[s]
        if w.slot_occ[s] == 0:
            out.unassigned_topic[at[UNASSIGNED]] = w.sub_topic[k]
            out.unassigned_partition[at[UNASSIGNED]] = s - w.base[k]
            at[UNASSIGNED] += 1
        elif w.slot_occ[s] > 1:
            out.twice_topic[at[TWICE]] = w.sub_topic[k]
            out.twice_partition[at[TWICE]] = s - w.base[k]
            at[TWICE] += 1
    out.unassigned_offsets[r + 1] = at[UNASSIGNED]
    out.twice_offsets[r + 1] = at[TWICE]
    smallest, largest = total + len(mem.assigned_topic) + 1, 0
    for rank in range(m):
        i = w.order[rank]
        lo, hi = w.lists_offsets[i], w.lists_offsets[i + 1]
        smallest = min(smallest, hi - lo)
        largest = max(largest, hi - lo)
        out.member_order[first + rank] = first + i
        out.member_count[first + rank] = hi - lo
        for q in range(lo, hi):
            s = w.lists[q]
            k = w.slot_k[s]
            out.list_topic[at[LISTS]] = w.sub_topic[k]
            out.list_partition[at[LISTS]] = s - w.base[k]
            at[LISTS] += 1
        out.list_offsets[first + rank + 1] = at[LISTS]
    out.min_per_member[r] = smallest
    out.max_per_member[r] = largest
    if ref != -1:
        which, lo, hi = _owners_range(ref, maps0, out.maps)
        if which == 1:
            out.moved[r] = _moves(r, out.maps, lo, hi, w, w.lists_offsets, w.lists)
            out.min_moves[r] = _min_moves(r, out.maps, lo, hi, first, m, mem, nk, total, w)
        else:
            out.moved[r] = _moves(r, maps0, lo, hi, w, w.lists_offsets, w.lists)
            out.min_moves[r] = _min_moves(r, maps0, lo, hi, first, m, mem, nk, total, w)
    # the partition counts the leader's metadata had: topics it assigned or someone owned
    for e in range(mem.assigned_offsets[first], mem.assigned_offsets[first + m]):
        w.seen_stamp[mem.assigned_topic[e]] = r
    for e in range(mem.owned_offsets[first], mem.owned_offsets[first + m]):
        w.seen_stamp[mem.owned_topic[e]] = r
    for k in range(nk):
        t = w.sub_topic[k]
        if w.sub_n[k] > 0 and w.seen_stamp[t] == r:
            out.counts_topic[at[COUNTS]] = t
            out.counts_n[at[COUNTS]] = w.sub_n[k]
            at[COUNTS] += 1
    out.counts_offsets[r + 1] = at[COUNTS]


@njit(cache=True, nogil=True)
def _csr_offsets(n):
    """CSR offsets to be written item by item (-1: not written, _fill_offsets fills them)."""
    offsets = np.full(n + 1, -1, np.int64)
    offsets[0] = 0
    return offsets


@njit(cache=True, nogil=True)
def _first_pass(rows, mem, topic_rank, known_value, known_has, maps0, group_ref, n_identities):
    """The rows in log order (the work of a row in _first_row, compiled without reference
    counting). known_value/known_has and group_ref (group -> its previous generation: -1
    none, -2 - k the Previous given's k-th, r >= 0 row r's) are updated in place."""
    n = len(rows.state)
    n_members = len(mem.identity)
    n_listed = len(mem.topic)
    n_assigned = len(mem.assigned_topic)
    max_m, max_assigned, max_total, max_nk, sum_total = _sizes(rows, mem, known_value, known_has)
    w = _workspace(len(topic_rank), n_identities, max_m, max_assigned, max_total, max_nk, 0)
    out = _First(
        kind=np.zeros(n, np.int8),
        prev_ref=np.full(n, -1, np.int64),
        topics_offsets=_csr_offsets(n),
        topics_topic=np.empty(n_listed, np.int32),
        topics_n=np.empty(n_listed, np.int64),
        counts_offsets=_csr_offsets(n),
        counts_topic=np.empty(n_listed, np.int32),
        counts_n=np.empty(n_listed, np.int64),
        maps=_Owners(
            _csr_offsets(n),
            np.empty(n_assigned, np.int32),
            np.empty(n_assigned, np.int32),
            np.empty(n_assigned, np.int64),
        ),
        partitions=np.zeros(n, np.int64),
        assigned=np.zeros(n, np.int64),
        min_per_member=np.zeros(n, np.int64),
        max_per_member=np.zeros(n, np.int64),
        moved=np.full(n, -1, np.int64),
        min_moves=np.full(n, -1, np.int64),
        unassigned_offsets=_csr_offsets(n),
        unassigned_topic=np.empty(sum_total, np.int32),
        unassigned_partition=np.empty(sum_total, np.int32),
        twice_offsets=_csr_offsets(n),
        twice_topic=np.empty(n_assigned, np.int32),
        twice_partition=np.empty(n_assigned, np.int32),
        member_order=np.full(n_members, -1, np.int64),  # per row, its members by member id
        member_count=np.zeros(n_members, np.int64),
        list_offsets=_csr_offsets(n_members),
        list_topic=np.empty(n_assigned, np.int32),
        list_partition=np.empty(n_assigned, np.int32),
    )
    at = np.zeros(7, np.int64)
    for r in range(n):
        if rows.state[r] == DELETE:
            group_ref[rows.group[r]] = -1
        elif rows.state[r] == AUDIT:
            _first_row(r, rows, mem, topic_rank, known_value, known_has, maps0, group_ref, w, out, at)
    for offsets in (
        out.topics_offsets,
        out.counts_offsets,
        out.maps.offsets,
        out.unassigned_offsets,
        out.twice_offsets,
        out.list_offsets,
    ):
        _fill_offsets(offsets)
    return _First(
        out.kind,
        out.prev_ref,
        out.topics_offsets,
        out.topics_topic[: at[TOPICS]],
        out.topics_n[: at[TOPICS]],
        out.counts_offsets,
        out.counts_topic[: at[COUNTS]],
        out.counts_n[: at[COUNTS]],
        _Owners(
            out.maps.offsets, out.maps.topic[: at[MAPS]], out.maps.partition[: at[MAPS]], out.maps.identity[: at[MAPS]]
        ),
        out.partitions,
        out.assigned,
        out.min_per_member,
        out.max_per_member,
        out.moved,
        out.min_moves,
        out.unassigned_offsets,
        out.unassigned_topic[: at[UNASSIGNED]],
        out.unassigned_partition[: at[UNASSIGNED]],
        out.twice_offsets,
        out.twice_topic[: at[TWICE]],
        out.twice_partition[: at[TWICE]],
        out.member_order,
        out.member_count,
        out.list_offsets,
        out.list_topic[: at[LISTS]],
        out.list_partition[: at[LISTS]],
    )


# --- the second pass: the group's own assignor ------------------------------------------------------

_Second = namedtuple(
    "_Second",
    "kind verdict recomputed differing_offsets differing reference_offsets reference_topic reference_partition",
)
# how far _second_row has written
DIFFERING, REFERENCE = 0, 1


@njit_kernel
def _second_row(r, rows, mem, fp, status, result, maps0, w, out, at):
    """Row r's verdict against its assignor's result (status[r], `result`)."""
    first, last = rows.member_offsets[r], rows.member_offsets[r + 1]
    m = last - first
    if status[r] == FALLBACK:
        out.kind[r] = PYTHON
        return
    if status[r] == ERROR:  # Kafka's assignor throws: no leader running it made this
        out.verdict[r] = DIFFERS
        for rank in range(m):
            out.differing[at[DIFFERING]] = fp.member_order[first + rank]
            at[DIFFERING] += 1
        out.differing_offsets[r + 1] = at[DIFFERING]
        return
    _layout(r, fp.topics_topic, fp.topics_n, fp.topics_offsets[r], fp.topics_offsets[r + 1], w)
    _mark_identities(r, first, m, mem, w)
    their_held, at[TICK] = _slot_lists(
        r, first, m, result.offsets, result.topic, result.partition, w, w.lists_offsets, w.lists, at[TICK]
    )
    if their_held < 0:  # a partition beyond its topic's count (kept from owned partitions)
        out.kind[r] = PYTHON
        return
    out.recomputed[r] = True
    differing = 0
    for rank in range(m):  # the leader's partitions (the first pass's lists) against the reference's
        position = first + rank
        i = fp.member_order[position] - first
        a_lo, a_hi = fp.list_offsets[position], fp.list_offsets[position + 1]
        b_lo, b_hi = w.lists_offsets[i], w.lists_offsets[i + 1]
        same = a_hi - a_lo == b_hi - b_lo
        for q in range(b_hi - b_lo):
            if not same:
                break
            same = _slot(r, fp.list_topic[a_lo + q], fp.list_partition[a_lo + q], w) == w.lists[b_lo + q]
        if not same:
            out.differing[at[DIFFERING]] = first + i
            at[DIFFERING] += 1
            differing += 1
        for q in range(b_lo, b_hi):
            s = w.lists[q]
            k = w.slot_k[s]
            out.reference_topic[at[REFERENCE]] = w.sub_topic[k]
            out.reference_partition[at[REFERENCE]] = s - w.base[k]
            at[REFERENCE] += 1
        out.reference_offsets[position + 1] = at[REFERENCE]
    out.differing_offsets[r + 1] = at[DIFFERING]
    if differing == 0:
        out.verdict[r] = MATCHES
        return
    # as good by every measure: the members' counts (Java's lists as they are), how many are
    # assigned, how many moved
    ours, theirs = w.sizes[:m], w.sizes[m : 2 * m]
    for i in range(m):
        ours[i] = fp.member_count[first + i]
        theirs[i] = result.offsets[first + i + 1] - result.offsets[first + i]
    _insertion_sort(ours, m)
    _insertion_sort(theirs, m)
    same_counts = True
    for i in range(m):
        same_counts = same_counts and ours[i] == theirs[i]
    ref = fp.prev_ref[r]
    their_moves = 0
    if ref != -1:
        which, lo, hi = _owners_range(ref, maps0, fp.maps)
        if which == 1:
            their_moves = _moves(r, fp.maps, lo, hi, w, w.lists_offsets, w.lists)
        else:
            their_moves = _moves(r, maps0, lo, hi, w, w.lists_offsets, w.lists)
    same_moves = max(fp.moved[r], 0) == their_moves
    equivalent = same_counts and same_moves and fp.assigned[r] == their_held
    out.verdict[r] = EQUIVALENT if equivalent else DIFFERS


@njit(cache=True, nogil=True)
def _second_pass(rows, mem, fp, solved, status, result, maps0, n_topics, n_identities):
    """The verdict of each FAST row whose assignor was recomputed (`solved`; its result:
    status per row and `result`, per member its partitions): matches, equivalent or differs,
    the differing members and the reference (each in member id order, as fp.member_order has
    them). A row whose result is FALLBACK or holds a partition outside the universe turns
    PYTHON."""
    n = len(rows.state)
    n_members = len(mem.identity)
    max_m = max_assigned = max_total = max_nk = max_other = 1
    for r in range(n):
        if solved[r]:
            first, last = rows.member_offsets[r], rows.member_offsets[r + 1]
            max_m = max(max_m, last - first)
            max_assigned = max(max_assigned, mem.assigned_offsets[last] - mem.assigned_offsets[first])
            max_other = max(max_other, result.offsets[last] - result.offsets[first])
            max_total = max(max_total, fp.partitions[r])
            max_nk = max(max_nk, fp.topics_offsets[r + 1] - fp.topics_offsets[r])
    w = _workspace(n_topics, n_identities, max_m, max_assigned, max_total, max_nk, max_other)
    out = _Second(
        kind=fp.kind.copy(),
        verdict=np.full(n, CUSTOM, np.int8),
        recomputed=np.zeros(n, np.bool_),  # the reference is there
        differing_offsets=_csr_offsets(n),
        differing=np.empty(n_members, np.int64),
        reference_offsets=_csr_offsets(n_members),
        reference_topic=np.empty(len(result.topic), np.int32),
        reference_partition=np.empty(len(result.topic), np.int32),
    )
    at = np.zeros(7, np.int64)
    for r in range(n):
        if solved[r]:
            _second_row(r, rows, mem, fp, status, result, maps0, w, out, at)
    _fill_offsets(out.differing_offsets)
    _fill_offsets(out.reference_offsets)
    return _Second(
        out.kind,
        out.verdict,
        out.recomputed,
        out.differing_offsets,
        out.differing[: at[DIFFERING]],
        out.reference_offsets,
        out.reference_topic[: at[REFERENCE]],
        out.reference_partition[: at[REFERENCE]],
    )


# --- from Arrow ---------------------------------------------------------------------------------------


def _numbers(array: pa.Array, fill: int, dtype) -> np.ndarray:
    """As a numpy array of its own (writable: the kernels take one type of array)."""
    if array.null_count:
        array = pc.fill_null(array, fill)
    return np.array(array.to_numpy(zero_copy_only=False), dtype)


def _valid(array: pa.Array) -> np.ndarray:
    if not array.null_count:
        return np.ones(len(array), np.bool_)
    return array.is_valid().to_numpy(zero_copy_only=False)


def _bytes_csr(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """A string or binary array's offsets (its slice's, int64) and its values buffer, read-only
    always: a view of an Arrow buffer is writable or not as the buffer was made (a batch's
    values built from Python, an epoch's, gave read-only ones), and numba compiles a kernel
    once for each, so every pool process loaded both (a second specialization of _first_pass,
    _second_pass and lib.assignors.fast._assign_batch before its first task)."""
    if len(array) == 0:
        return np.zeros(1, np.int64), np.frombuffer(b"", np.uint8)
    _, offsets, data = array.buffers()[:3]
    o = np.frombuffer(offsets, np.int32, count=len(array) + 1, offset=array.offset * 4).astype(np.int64)
    values = np.frombuffer(data, np.uint8) if data is not None else np.frombuffer(b"", np.uint8)
    values.flags.writeable = False
    return o, values


def _list_csr(lists: pa.Array) -> tuple[np.ndarray, pa.Array, np.ndarray]:
    """A list array's offsets from 0 (int64), the values they cover, and the items that are
    null but cover values (Kafka's schema has no null list there: the row is malformed)."""
    offsets = lists.offsets.to_numpy().astype(np.int64)
    start = offsets[0]
    values = lists.values.slice(start, offsets[-1] - start)
    offsets -= start
    odd = ~_valid(lists) & (np.diff(offsets) > 0)
    return offsets, values, odd


def _any_in(offsets: np.ndarray, flags: np.ndarray) -> np.ndarray:
    """Per item of a CSR: is any of its values flagged?"""
    if not flags.any():
        return np.zeros(len(offsets) - 1, np.bool_)
    running = np.zeros(len(flags) + 1, np.int64)
    np.cumsum(flags, out=running[1:])
    return running[offsets[1:]] > running[offsets[:-1]]


@dataclass
class _Partitions:
    """A list<struct<topic, partitions: list<int>>> column of the members, flat: per member
    its (topic, partition) pairs in order (topic: index into the entries' topic strings)."""

    offsets: np.ndarray
    entry_topic: pa.Array  # the entries' topics (strings), one per entry
    entry_of: np.ndarray  # per pair, its entry
    partition: np.ndarray
    odd: np.ndarray  # per member: null where Kafka's schema has none


def _partitions(column: pa.Array) -> _Partitions:
    entry_offsets, entries, odd_lists = _list_csr(column)
    part_offsets, parts, odd_parts = _list_csr(entries.field("partitions"))
    topics = entries.field("topic")
    odd_entries = ~_valid(entries) | ~_valid(topics) | odd_parts | _any_in(part_offsets, ~_valid(parts))
    return _Partitions(
        offsets=part_offsets[entry_offsets],
        entry_topic=topics,
        entry_of=np.repeat(np.arange(len(entries), dtype=np.int64), np.diff(part_offsets)),
        partition=_numbers(parts, 0, np.int32),
        odd=odd_lists | _any_in(entry_offsets, odd_entries),
    )


@dataclass
class _Flat:
    """The batch, flattened for the kernels (members: the rows' members, in order)."""

    rows: _Rows
    members: _Members
    malformed: np.ndarray  # per row
    member_struct: pa.StructArray  # the members as Arrow
    identity_names: pa.Array
    topic_names: pa.Array
    topic_rank: np.ndarray
    group_names: pa.Array
    owners0: _Owners  # the Previous given, by group row
    group_ref: np.ndarray
    owned: _Partitions
    owned_topic: np.ndarray


def _dictionary(*arrays: pa.Array) -> tuple[pa.Array, list[np.ndarray]]:
    """One dictionary encoding of several string arrays: the distinct strings, and each
    array's as indices into them (-1 for null)."""
    encoded = pa.concat_arrays([a.cast(pa.string()) for a in arrays]).dictionary_encode()
    ids = _numbers(encoded.indices, -1, np.int64)
    bounds = np.cumsum([0] + [len(a) for a in arrays])
    return encoded.dictionary, [ids[bounds[i] : bounds[i + 1]] for i in range(len(arrays))]


def _flatten(batch: GenerationBatch, previous: Previous) -> _Flat:
    gm = batch.group_metadata
    deleted = _numbers(batch.deleted, False, np.bool_)
    row_valid = _valid(gm) & ~deleted
    member_lists = gm.field("members")
    row_offsets, members, _ = _list_csr(member_lists)
    has_members = _valid(member_lists) & (np.diff(row_offsets) > 0)

    member_id = members.field("member_id")
    instance = members.field("group_instance_id")
    sub_offsets, sub_values, odd_sub = _list_csr(members.field("subscribed_topics"))
    owned = _partitions(members.field("owned_partitions"))
    assigned = _partitions(members.field("assignment"))
    odd_member = (
        ~_valid(members)
        | ~_valid(member_id)
        | odd_sub
        | _any_in(sub_offsets, ~_valid(sub_values))
        | owned.odd
        | assigned.odd
    )
    malformed = row_valid & _valid(member_lists) & _any_in(row_offsets, odd_member)

    assignment_bytes = members.field("assignment_bytes")
    has_assignment = _valid(assignment_bytes) & (pc.binary_length(assignment_bytes).fill_null(0).to_numpy() > 0)
    consumer = _numbers(pc.equal(gm.field("protocol_type"), "consumer"), False, np.bool_)
    audited = row_valid & has_members & consumer & _any_in(row_offsets, has_assignment) & ~malformed
    state = np.where(deleted, DELETE, np.where(audited, AUDIT, SKIP)).astype(np.int8)

    has_instance = _valid(instance) & (pc.binary_length(instance).fill_null(0).to_numpy() > 0)
    identity = pc.if_else(pa.array(has_instance), instance, member_id)
    owners = previous.table.column("owners").combine_chunks()
    owner_offsets, owner_values, _ = _list_csr(owners)
    identity_names, (identity_ids, owner_identity) = _dictionary(identity, owner_values.field("owner"))
    topic_names, (sub_topic, owned_entry_topic, assigned_entry_topic, owner_topic) = _dictionary(
        sub_values, owned.entry_topic, assigned.entry_topic, owner_values.field("topic")
    )
    topic_rank = np.empty(len(topic_names), np.int64)
    topic_rank[pc.array_sort_indices(topic_names).to_numpy()] = np.arange(len(topic_names))
    group_names, (row_group, previous_group) = _dictionary(
        batch.group_id, previous.table.column("group_id").combine_chunks()
    )
    group_ref = np.full(len(group_names), -1, np.int64)
    group_ref[previous_group] = -2 - np.arange(len(previous_group))

    id_offsets, id_bytes = _bytes_csr(member_id)
    owned_topic = owned_entry_topic[owned.entry_of].astype(np.int32)
    return _Flat(
        rows=_Rows(state, row_group, row_offsets),
        members=_Members(
            identity=identity_ids,
            id_offsets=id_offsets,
            id_bytes=id_bytes,
            topic_offsets=sub_offsets,
            topic=sub_topic.astype(np.int32),
            assigned_offsets=assigned.offsets,
            assigned_topic=assigned_entry_topic[assigned.entry_of].astype(np.int32),
            assigned_partition=assigned.partition,
            owned_offsets=owned.offsets,
            owned_topic=owned_topic,
        ),
        malformed=malformed,
        member_struct=members,
        identity_names=identity_names,
        topic_names=topic_names,
        topic_rank=topic_rank,
        group_names=group_names,
        owners0=_Owners(
            owner_offsets,
            owner_topic.astype(np.int32),
            _numbers(owner_values.field("partition"), 0, np.int32),
            owner_identity,
        ),
        group_ref=group_ref,
        owned=owned,
        owned_topic=owned_topic,
    )


def _problems(flat: _Flat, first: _First, solved: np.ndarray, assignor: np.ndarray) -> ProblemBatch:
    """Every row a problem (those not `solved` with no topics), as lib.assignors.fast takes
    them: the members as the record lists them, the partition counts the leader knew."""
    members = flat.member_struct
    lengths = np.where(solved, np.diff(first.counts_offsets), 0)
    count_offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=count_offsets[1:])
    _, at = _gather(first.counts_offsets, np.flatnonzero(solved))
    topic_offsets, topic_bytes = _bytes_csr(flat.topic_names)
    id_offsets, id_bytes = _bytes_csr(members.field("member_id"))
    instance = members.field("group_instance_id")
    instance_offsets, instance_bytes = _bytes_csr(instance)
    user_data = members.field("subscription_user_data")
    user_data_offsets, user_data_bytes = _bytes_csr(user_data)
    return ProblemBatch(
        topic_offsets=topic_offsets,
        topic_bytes=topic_bytes,
        assignor=np.where(solved, assignor, RANGE),
        member_offsets=flat.rows.member_offsets,
        count_offsets=count_offsets,
        count_topic=first.counts_topic[at],
        count_partitions=first.counts_n[at],
        member_id_offsets=id_offsets,
        member_id_bytes=id_bytes,
        instance_id_offsets=instance_offsets,
        instance_id_bytes=instance_bytes,
        has_instance_id=_valid(instance) & (np.diff(instance_offsets) > 0),
        topic_list_offsets=flat.members.topic_offsets,
        topic_list=flat.members.topic,
        owned_offsets=flat.owned.offsets,
        owned_topic=flat.owned_topic,
        owned_partition=flat.owned.partition,
        generation=_numbers(members.field("generation_id"), -1, np.int32),
        user_data_offsets=user_data_offsets,
        user_data_bytes=user_data_bytes,
        has_user_data=_valid(user_data),
    )


# --- to Arrow ------------------------------------------------------------------------------------------


def _gather(offsets: np.ndarray, items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ranges offsets[i]:offsets[i + 1] of `items`, one after the other: their offsets
    from 0, and the positions of their values."""
    starts = offsets[items]
    lengths = offsets[items + 1] - starts
    new = np.zeros(len(items) + 1, np.int64)
    np.cumsum(lengths, out=new[1:])
    return new, np.arange(new[-1], dtype=np.int64) - np.repeat(new[:-1] - starts, lengths)


def _field_type(name: str) -> pa.DataType:
    return AUDIT_SCHEMA.field(name).type


TOPIC_PARTITIONS_TYPE = _field_type("unassigned")


def _topic_partitions(offsets: np.ndarray, topic: np.ndarray, partition: np.ndarray, names: pa.Array) -> pa.Array:
    """Per owner, its (topic id, partition) pairs (CSR, sorted by topic then partition) as
    audit._sorted_tps gives them: [{"topic", "partitions": [...]}, ...]."""
    n = len(topic)
    head = np.zeros(n, np.bool_)
    if n:
        head[1:] = topic[1:] != topic[:-1]
        owner_starts = offsets[:-1][offsets[:-1] < offsets[1:]]
        head[owner_starts] = True
    heads = np.flatnonzero(head)
    entry_offsets = np.append(heads, n).astype(np.int32)
    entries = pa.StructArray.from_arrays(
        [names.take(pa.array(topic[heads])), pa.ListArray.from_arrays(entry_offsets, pa.array(partition, pa.int32()))],
        fields=list(TOPIC_PARTITIONS_TYPE.value_type),
    )
    return pa.ListArray.from_arrays(
        np.searchsorted(heads, offsets).astype(np.int32), entries, type=TOPIC_PARTITIONS_TYPE
    )


def _lists(offsets: np.ndarray, values: pa.Array, type_: pa.DataType, null: np.ndarray | None = None) -> pa.Array:
    mask = None if null is None or not null.any() else pa.array(null)
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), values, type=type_, mask=mask)


def _null_if(values: np.ndarray, null: np.ndarray, type_: pa.DataType) -> pa.Array:
    return pa.array(values, type_, mask=null if null.any() else None)


GROUP_TYPES = pa.array([CLASSIC, CONSUMER], pa.string())  # a row's, by whether it is a KIP-848 epoch


def _string_or_null(array: pa.Array) -> pa.Array:
    """audit_generation's `x or None`: empty strings null (most batches have none)."""
    empty = pc.equal(pc.binary_length(array), 0)
    if not pc.any(empty).as_py():
        return array
    return pc.if_else(empty, pa.scalar(None, pa.string()), array)


def _fast_table(
    batch: GenerationBatch, flat: _Flat, first: _First, second: _Second, rows: np.ndarray, epoch: np.ndarray
) -> pa.Table:
    """The rows `rows` (all FAST) as assignment_audit rows (`epoch`: per row of the batch, a
    KIP-848 target assignment epoch's, as audit_generation gives those: no assignor recomputed)."""
    take = pa.array(rows)
    gm = batch.group_metadata
    members = flat.member_struct
    names = flat.topic_names
    member_offsets, member_at = _gather(flat.rows.member_offsets, rows)
    ordered = first.member_order[member_at]  # the rows' members by member id
    by_member = pa.array(ordered)

    def per_member(offsets, topic, partition):
        o, at = _gather(offsets, member_at)
        return _topic_partitions(o, topic[at], partition[at], names)

    def per_row(offsets, topic, partition):
        o, at = _gather(offsets, rows)
        return _topic_partitions(o, topic[at], partition[at], names)

    subscribed = members.field("subscribed_topics").take(by_member)
    if subscribed.null_count:  # audit_generation lists a null as no topics
        subscribed = pa.ListArray.from_arrays(subscribed.offsets, subscribed.values)
    member_ids = members.field("member_id").take(by_member)
    member_type = _field_type("members").value_type
    member_values = pa.StructArray.from_arrays(
        [
            member_ids,
            _string_or_null(members.field("group_instance_id").take(by_member)),
            members.field("client_id").take(by_member),
            _string_or_null(members.field("rack_id").take(by_member)),
            subscribed,
            pa.array(first.member_count[member_at], pa.int32()),
            per_member(first.list_offsets, first.list_topic, first.list_partition),
        ],
        fields=list(member_type),
    )
    topics_offsets, topics_at = _gather(first.topics_offsets, rows)
    topic_type = _field_type("topics").value_type
    topics = pa.StructArray.from_arrays(
        [names.take(pa.array(first.topics_topic[topics_at])), pa.array(first.topics_n[topics_at], pa.int32())],
        fields=list(topic_type),
    )
    is_epoch = epoch[rows]
    verdict = np.where(is_epoch, NOT_RECOMPUTED, second.verdict[rows]).astype(np.int8)
    custom = (verdict == CUSTOM) | is_epoch
    differing_offsets, differing_at = _gather(second.differing_offsets, rows)
    reference_null = ~second.recomputed[rows]
    reference_entry = pa.StructArray.from_arrays(
        [
            member_ids,
            per_member(second.reference_offsets, second.reference_topic, second.reference_partition),
        ],
        fields=list(_field_type("reference").value_type),
    )
    rack = members.field("rack_id")
    racks = _any_in(flat.rows.member_offsets, _valid(rack) & (pc.binary_length(rack).fill_null(0).to_numpy() > 0))
    moved, min_moves = first.moved[rows], first.min_moves[rows]
    smallest, largest = first.min_per_member[rows], first.max_per_member[rows]
    columns = {
        "group_id": batch.group_id.take(take),
        "group_type": GROUP_TYPES.take(pa.array(is_epoch.astype(np.int8))),
        "generation": gm.field("generation").take(take).fill_null(0),
        "at": pc.multiply(batch.at_ms.take(take), 1000).cast(pa.timestamp("us", tz="UTC")),
        "protocol_type": gm.field("protocol_type").take(take),
        "assignor": gm.field("protocol").take(take),
        "leader": gm.field("leader").take(take),
        "member_count": pa.array(np.diff(member_offsets), pa.int32()),
        "members": _lists(member_offsets, member_values, _field_type("members")),
        "topics": _lists(topics_offsets, topics, _field_type("topics")),
        "partitions": pa.array(first.partitions[rows], pa.int32()),
        "assigned": pa.array(first.assigned[rows], pa.int32()),
        "min_per_member": pa.array(smallest, pa.int32()),
        "max_per_member": pa.array(largest, pa.int32()),
        "imbalance": pa.array(largest - smallest, pa.int32()),
        "moved": _null_if(moved, moved < 0, pa.int32()),
        "min_moves": _null_if(min_moves, moved < 0, pa.int32()),
        "unassigned": per_row(first.unassigned_offsets, first.unassigned_topic, first.unassigned_partition),
        "assigned_twice": per_row(first.twice_offsets, first.twice_topic, first.twice_partition),
        "verdict": pa.array(VERDICTS).take(pa.array(verdict)),
        "differing_members": _lists(
            differing_offsets,
            members.field("member_id").take(pa.array(second.differing[differing_at])),
            _field_type("differing_members"),
            custom,
        ),
        "reference": _lists(member_offsets, reference_entry, _field_type("reference"), reference_null),
        "what_if": pa.nulls(len(rows), _field_type("what_if")),
        "racks_recorded": pa.array(racks[rows]),
        "offsets_partition": batch.offsets_partition.take(take),
        "log_offset": batch.log_offset.take(take),
    }
    return pa.Table.from_arrays(
        [c if c.type == f.type else c.cast(f.type) for f, c in ((f, columns[f.name]) for f in AUDIT_SCHEMA)],
        schema=AUDIT_SCHEMA,
    )


def epoch_value(gen: Generation) -> dict | None:
    """A KIP-848 target assignment epoch (a CONSUMER Generation) as a GROUP_METADATA value the
    kernels audit as audit_generation audits the epoch (audit_classic_batch's `epochs`); None
    where they would not give its row exactly: no members (audit_generation gives a row, the
    kernels none), an empty instance or rack id (a row keeps it as it is, the kernels' null)."""
    if not gen.members or any(m.group_instance_id == "" or m.rack_id == "" for m in gen.members):
        return None
    return {
        "protocol_type": CONSUMER,
        "generation": gen.generation,
        "protocol": gen.assignor,
        "leader": None,
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "rack_id": m.rack_id,
                "subscribed_topics": list(m.topics),
                "assignment": _entries(m.assignment),
                "assignment_bytes": b"\x01",  # (the kernels audit a generation whose members have one)
            }
            for m in gen.members
        ],
    }


def epoch_values(gens: Sequence[Generation]) -> pa.StructArray | None:
    """The epochs' values (epoch_value's, in audit_view) built as columns: made as dicts, then
    Arrow, they cost some 30 µs an epoch (a busy log's 14,000). None where one has no value
    there (epoch_value's None), or there are none."""
    if not gens:
        return None
    member_offsets, entry_offsets, part_offsets, topic_offsets = [0], [0], [0], [0]
    member_id: list[str] = []
    instance: list[str | None] = []
    client: list[str | None] = []
    rack: list[str | None] = []
    topics: list[str] = []
    entry_topic: list[str] = []
    partitions: list[int] = []
    for gen in gens:
        if not gen.members:
            return None
        for m in gen.members:
            if m.group_instance_id == "" or m.rack_id == "":
                return None
            member_id.append(m.member_id)
            instance.append(m.group_instance_id)
            client.append(m.client_id)
            rack.append(m.rack_id)
            topics.extend(m.topics)
            topic_offsets.append(len(topics))
            last = None
            for topic, partition in m.assignment:  # (_entries: a run of one topic an entry)
                if topic != last:
                    if last is not None:
                        part_offsets.append(len(partitions))
                    entry_topic.append(topic)
                    last = topic
                partitions.append(partition)
            if last is not None:
                part_offsets.append(len(partitions))
            entry_offsets.append(len(entry_topic))
        member_offsets.append(len(member_id))
    n = len(member_id)

    def field_type(name: str) -> pa.DataType:
        return AUDIT_MEMBER_TYPE.field(name).type

    assignment_type = field_type("assignment")
    entry_type = assignment_type.value_type
    entries = pa.StructArray.from_arrays(
        [
            pa.array(entry_topic, pa.string()),
            _lists(np.array(part_offsets), pa.array(partitions, pa.int32()), entry_type.field(1).type),
        ],
        fields=list(entry_type),
    )
    columns = {
        "member_id": pa.array(member_id, pa.string()),
        "group_instance_id": pa.array(instance, pa.string()),
        "client_id": pa.array(client, pa.string()),
        "rack_id": pa.array(rack, pa.string()),
        "subscribed_topics": _lists(
            np.array(topic_offsets), pa.array(topics, pa.string()), field_type("subscribed_topics")
        ),
        "assignment": _lists(np.array(entry_offsets), entries, assignment_type),
        "assignment_bytes": pa.array([b"\x01"] * n, pa.binary()),  # (a member with an assignment: epoch_value's)
    }
    members = pa.StructArray.from_arrays(
        [columns[f.name] if f.name in columns else pa.nulls(n, f.type) for f in AUDIT_MEMBER_TYPE],
        fields=list(AUDIT_MEMBER_TYPE),
    )
    values = {
        "protocol_type": pa.array([CONSUMER] * len(gens), pa.string()),
        "generation": pa.array([gen.generation for gen in gens], pa.int32()),
        "protocol": pa.array([gen.assignor for gen in gens], pa.string()),
        "leader": pa.nulls(len(gens), pa.string()),
        "members": _lists(np.array(member_offsets), members, AUDIT_VALUE_TYPE.field("members").type),
    }
    return pa.StructArray.from_arrays([values[f.name] for f in AUDIT_VALUE_TYPE], fields=list(AUDIT_VALUE_TYPE))


def _entries(pairs: Sequence[tuple[str, int]]) -> list[dict]:
    """(topic, partition) pairs, in their order, as topic-partitions entries: a run of one topic
    an entry."""
    entries: list[dict] = []
    last = None
    partitions: list[int] = []
    for topic, partition in pairs:
        if topic != last:
            partitions = []
            entries.append({"topic": topic, "partitions": partitions})
            last = topic
        partitions.append(partition)
    return entries


def audit_rows_table(rows: Sequence[dict]) -> pa.Table:
    """assignment_audit rows as audit_generation gives them (`at_ms` for `at`) as Arrow."""
    if not rows:
        return pa.Table.from_batches([], schema=AUDIT_SCHEMA)
    at = pa.array([r["at_ms"] for r in rows], pa.int64()).cast(pa.timestamp("ms", tz="UTC"))
    arrays = [at.cast(f.type) if f.name == "at" else pa.array([r[f.name] for r in rows], f.type) for f in AUDIT_SCHEMA]
    return pa.Table.from_arrays(arrays, schema=AUDIT_SCHEMA)


def _previous_after(previous: Previous, flat: _Flat, first: _First) -> Previous:
    """The Previous given with the batch's groups' last audited generations in place (and the
    groups deleted since out)."""
    ref = flat.group_ref  # as the first pass left it
    kept = -2 - ref[ref <= -2]
    newer = np.flatnonzero(ref >= 0)
    offsets, at = _gather(first.maps.offsets, ref[newer])
    owners = pa.StructArray.from_arrays(
        [
            flat.topic_names.take(pa.array(first.maps.topic[at])),
            pa.array(first.maps.partition[at], pa.int32()),
            flat.identity_names.take(pa.array(first.maps.identity[at])),
        ],
        fields=list(OWNER_TYPE),
    )
    table = pa.Table.from_arrays(
        [flat.group_names.take(pa.array(newer)), _lists(offsets, owners, PREVIOUS_SCHEMA.field("owners").type)],
        schema=PREVIOUS_SCHEMA,
    )
    return Previous(pa.concat_tables([previous.table.take(pa.array(kept)), table]).combine_chunks())


def _python_rows(
    batch: GenerationBatch, flat: _Flat, first: _First, rows: np.ndarray, epochs: Sequence[Generation | None]
) -> list[dict]:
    """audit_generation for these rows (what_if dropped), with the previous owners and the
    partition counts the first pass worked out."""
    if not len(rows):
        return []
    topic_names = flat.topic_names.to_pylist()
    identity_names = flat.identity_names.to_pylist()
    out = []
    for r in rows.tolist():
        group_id = batch.group_id[r].as_py()
        gen = epochs[r] or classic_generation(
            group_id,
            batch.group_metadata[r].as_py(),
            batch.at_ms[r].as_py(),
            batch.offsets_partition[r].as_py(),
            batch.log_offset[r].as_py(),
        )
        assert gen is not None, "the first pass audits what audit_generation audits"
        ref = int(first.prev_ref[r])
        previous = None
        if ref != -1:
            owners, k = (first.maps, ref) if ref >= 0 else (flat.owners0, -2 - ref)
            lo, hi = owners.offsets[k], owners.offsets[k + 1]
            previous = _owners_generation(
                group_id,
                (
                    {"topic": topic_names[t], "partition": int(p), "owner": identity_names[who]}
                    for t, p, who in zip(owners.topic[lo:hi], owners.partition[lo:hi], owners.identity[lo:hi])
                ),
            )
        lo, hi = first.topics_offsets[r], first.topics_offsets[r + 1]
        known = {topic_names[t]: int(n) for t, n in zip(first.topics_topic[lo:hi], first.topics_n[lo:hi])}
        row = audit_generation(gen, previous, known)
        row["what_if"] = None
        out.append(row)
    return out


def _own_assignor(flat: _Flat, first: _First, solved: np.ndarray, codes: np.ndarray) -> tuple[np.ndarray, _Owners]:
    """Each solved row's own assignor, recomputed by lib.assignors.fast: status per row and
    per member its partitions."""
    n_members = len(flat.members.identity)
    if not solved.any():
        empty = np.zeros(0, np.int32)
        return np.zeros(len(solved), np.int8), _Owners(
            np.zeros(n_members + 1, np.int64), empty, empty, np.zeros(0, np.int64)
        )
    answer = assign_arrays(_problems(flat, first, solved, codes))
    return answer.status, _Owners(
        answer.assigned_offsets, answer.assigned_topic, answer.assigned_partition, np.zeros(0, np.int64)
    )


def audit_classic_batch(
    batch: GenerationBatch,
    previous: Previous,
    known: dict[str, int],
    epochs: Sequence[Generation | None] | None = None,
) -> tuple[pa.Table, Previous]:
    """The assignment_audit rows of the batch's generations (one per audited generation, in
    the batch's order; what_if null) and the Previous after them. `known` (partitions per
    topic known before the batch) is raised in place as AssignmentTracker raises it.
    `epochs`: per row, the KIP-848 target assignment epoch (a CONSUMER Generation, its
    members in the row's value as epoch_value gives them) the row stands for, None for a
    classic generation: audited as audit_generation audits an epoch (no assignor recomputed)."""
    if not len(batch):
        return pa.Table.from_batches([], schema=AUDIT_SCHEMA), previous
    if epochs is None:
        epochs = [None] * len(batch)
    flat = _flatten(batch, previous)
    malformed = np.flatnonzero(flat.malformed)
    if len(malformed):
        return _around(batch, malformed, previous, known, epochs)
    table, first, _ = _audit_flat(batch, flat, known, epochs)
    return table, _previous_after(previous, flat, first)


def audit_closed_then_open(
    batch: GenerationBatch,
    previous: Previous,
    known: dict[str, int],
    open_from: int,
    epochs: Sequence[Generation | None] | None = None,
) -> tuple[pa.Table, pa.Table, Previous, Previous] | None:
    """Two audit_classic_batch calls in one: the rows before `open_from` (generations over), then
    those from it (generations still open, one per group, each its group's last row), audited
    against the owners the first part leaves, and those owners left in place. Returns the first
    part's rows, the second's, the Previous after the first part and the Previous after both
    (the open generations' owners); None, with nothing done, where a row breaks Kafka's schema
    (the two calls then). `known` is raised in place by both parts, as the two calls raise it;
    `epochs` as audit_classic_batch's (KIP-848 epochs, in the first part only). One batch of
    the kernels instead of two: an incremental run audits each of its partitions' generations
    so (a batch's fixed cost, some 2 ms, twice a partition)."""
    done = audit_closed_then_open_rows(batch, previous, known, open_from, epochs)
    if done is None:
        return None
    table, audited, after_closed, after_both = done
    split = int(np.searchsorted(audited, open_from))
    return table.slice(0, split), table.slice(split), after_closed, after_both


def audit_closed_then_open_rows(
    batch: GenerationBatch,
    previous: Previous,
    known: dict[str, int],
    open_from: int,
    epochs: Sequence[Generation | None] | None = None,
) -> tuple[pa.Table, np.ndarray, Previous, Previous] | None:
    """audit_closed_then_open's work with its rows whole: the table, the batch row each of its
    rows audits (ascending), the Previous after the first part and after both."""
    if not len(batch):
        return None
    flat = _flatten(batch, previous)
    if flat.malformed.any():
        return None
    table, first, audited = _audit_flat(batch, flat, known, epochs or [None] * len(batch))
    after_both = _previous_after(previous, flat, first)
    # each open generation's group back to its owners before it (-1: none; a skipped row
    # changed nothing)
    opened = np.arange(open_from, len(batch))
    opened = opened[flat.rows.state[opened] == AUDIT]
    flat.group_ref[flat.rows.group[opened]] = first.prev_ref[opened]
    return table, audited, _previous_after(previous, flat, first), after_both


def _audit_flat(
    batch: GenerationBatch, flat: _Flat, known: dict[str, int], epochs: Sequence[Generation | None]
) -> tuple[pa.Table, _First, np.ndarray]:
    """audit_classic_batch's work on a flattened batch without malformed rows: its rows, the
    first pass (flat.group_ref as it leaves it) and the batch rows audited, ascending (a row
    of the table each)."""
    epoch = np.array([e is not None for e in epochs], np.bool_)

    names = flat.topic_names.to_pylist()
    known_has = np.array([t in known for t in names], np.bool_)
    known_value = np.array([known.get(t, 0) for t in names], np.int64)
    had, before = known_has.copy(), known_value.copy()
    first = _first_pass(
        flat.rows,
        flat.members,
        flat.topic_rank,
        known_value,
        known_has,
        flat.owners0,
        flat.group_ref,
        len(flat.identity_names),
    )
    for t in np.flatnonzero(known_has & (~had | (known_value != before))):
        known[names[t]] = int(known_value[t])

    codes = _numbers(pc.index_in(batch.group_metadata.field("protocol"), pa.array(ASSIGNOR_NAMES)), -1, np.int8)
    solved = (first.kind == FAST) & (codes >= 0) & ~epoch
    status, result = _own_assignor(flat, first, solved, np.maximum(codes, 0))
    second = _second_pass(
        flat.rows,
        flat.members,
        first,
        solved,
        status,
        result,
        flat.owners0,
        len(flat.topic_names),
        len(flat.identity_names),
    )
    fast_rows = np.flatnonzero(second.kind == FAST)
    python_rows = np.flatnonzero(second.kind == PYTHON)
    table = _fast_table(batch, flat, first, second, fast_rows, epoch)
    if not len(python_rows):
        return table, first, fast_rows
    table = pa.concat_tables([table, audit_rows_table(_python_rows(batch, flat, first, python_rows, epochs))])
    rows = np.concatenate([fast_rows, python_rows])
    order = np.argsort(rows, kind="stable")
    return table.take(pa.array(order)), first, rows[order]


def _around(
    batch: GenerationBatch,
    malformed: np.ndarray,
    previous: Previous,
    known: dict[str, int],
    epochs: Sequence[Generation | None],
) -> tuple[pa.Table, Previous]:
    """The batch with rows whose value breaks Kafka's schema: those record by record as the
    tracker audits them (audit_generation may raise on them, as it does there), the rows
    between them as batches."""
    tables = []
    start = 0
    for r in [*malformed.tolist(), len(batch)]:
        if start < r:
            table, previous = audit_classic_batch(batch.slice(start, r), previous, known, epochs[start:r])
            tables.append(table)
        if r < len(batch):
            table, previous = _audit_one(batch, r, previous, known, epochs[r])
            tables.append(table)
        start = r + 1
    return pa.concat_tables(tables), previous


def _audit_one(
    batch: GenerationBatch, r: int, previous: Previous, known: dict[str, int], epoch: Generation | None = None
) -> tuple[pa.Table, Previous]:
    group_id = batch.group_id[r].as_py()
    gen = epoch or classic_generation(
        group_id,
        batch.group_metadata[r].as_py(),
        batch.at_ms[r].as_py(),
        batch.offsets_partition[r].as_py(),
        batch.log_offset[r].as_py(),
    )
    if gen is None:
        return pa.Table.from_batches([], schema=AUDIT_SCHEMA), previous
    for m in gen.members:
        for topic, partition in m.assignment:
            known[topic] = max(known.get(topic, 0), partition + 1)
    row = audit_generation(gen, previous.generation(group_id), known)
    row["what_if"] = None
    return audit_rows_table([row]), previous.updated(Previous.from_generations({group_id: gen}))
