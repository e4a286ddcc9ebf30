"""Kafka's four assignors as numba kernels over many problems at once: the compiled path of
``lib.assignors.assign``, which stays the reference.

A batch of problems is a ``ProblemBatch`` of flat numpy arrays (CSR: an ``X_offsets`` array of
n + 1 positions into a flat array), laid out so that it can be filled from the Arrow buffers of
the GroupMetadata members column without a Python loop per member. ``assign_arrays`` returns per
member its partitions, and per problem a status: OK (what ``assign`` returns), ERROR (``assign``
raises AssignorError; ``error`` names the Java exception) or FALLBACK (a case the kernels do not
cover: run ``assign`` for it). ``assign_batch`` does the same for ``assign``'s own arguments.

Covered in numba: range and roundrobin; StickyAssignor and CooperativeStickyAssignor whole:
their member data (StickyAssignor's v0/v1 user data, owned partitions, generations from the
subscription or CooperativeStickyAssignor's user data), the resolution of partitions claimed
by several members, the constrained builder (every member subscribes to the same topics), the
general builder (balancing moves, moves back, prevAssignment, the balance score check), and the
cooperative assignor's holding back of partitions that change owner. Java's HashMap iteration
order of the members is reproduced (String.hashCode over UTF-16 units, the table's size and
resizes), and so is the HashSet order that decides which partition moves back; strings compare
as String.compareTo does (UTF-16 units).

FALLBACK: a HashMap bin reaching 9 keys (where Java grows the table or makes a tree of it; only
ids with colliding hashes get there); a member id listed twice; a string that is not valid UTF-8
(or a Python str with a lone surrogate, in ``assign_batch``); a member's user data naming a topic
in malformed UTF-8 when some topic's name holds U+FFFD (the name decodes to a string with one,
which could be that topic); a topic listed twice in one problem's partition counts; more than 256
owned partitions beyond their topic's count in one problem, or any such partition claimed when
the general builder runs (kept, it makes Java's lists hold a partition twice, which the kernel's
one owner per partition does not model).
"""

from __future__ import annotations

import dataclasses
from collections import namedtuple
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numba import njit

from lib.assignors.javautil import AssignorError
from lib.assignors.model import Subscription, TopicPartition
from lib.numba_cache import use_stable_zip_cache

use_stable_zip_cache(__file__)  # before the first @njit(cache=True): see lib.numba_cache

# Kernels that allocate nothing are compiled without numba's reference counting: otherwise every
# call increments and decrements each array it is passed (atomically), which cost most of the
# time of a problem. Only the batch's entry points (which allocate) count references.
njit_kernel = njit(cache=True, nogil=True, _nrt=False)  # type: ignore[call-overload]
njit_inline_kernel = njit(cache=True, nogil=True, _nrt=False, inline="always")  # type: ignore[call-overload]

# assignor codes (ProblemBatch.assignor), in lib.assignors.ASSIGNOR_NAMES order
RANGE, ROUNDROBIN, STICKY, COOPERATIVE_STICKY = 0, 1, 2, 3
ASSIGNOR_CODES = {"range": RANGE, "roundrobin": ROUNDROBIN, "sticky": STICKY, "cooperative-sticky": COOPERATIVE_STICKY}
# per-problem status
OK, ERROR, FALLBACK = 0, 1, 2
# AssignmentBatch.error: an index into JAVA_EXCEPTIONS
ILLEGAL_ARGUMENT, ARITHMETIC, ILLEGAL_STATE, CONCURRENT_MODIFICATION, NO_SUCH_ELEMENT, NULL_POINTER = range(6)
JAVA_EXCEPTIONS = (
    "IllegalArgumentException",
    "ArithmeticException",
    "IllegalStateException",
    "ConcurrentModificationException",
    "NoSuchElementException",
    "NullPointerException",
)
_UNCOVERED = 127  # a kernel's "not modelled here": the problem falls back

_MAX_OUT_OF_RANGE = 256  # owned partitions beyond their topic's count, per problem (each a linear lookup)
_TREEIFY_THRESHOLD = 8  # HashMap: a put into a bin already holding 8 keys calls treeifyBin


@dataclass(frozen=True)
class ProblemBatch:
    """Many assignment problems as flat arrays. An ``X_offsets`` array is CSR: item i of X is
    flat[X_offsets[i]:X_offsets[i + 1]], the offsets non-decreasing (they need not start at 0,
    so an Arrow array's own offsets and values buffers serve as they are). Any integer and
    bool dtypes are taken (converted to int64 offsets, int32 ids and numbers, uint8 bytes).

    Topics, batch-wide (every name the problems mention, each once):
        topic_offsets[T+1], topic_bytes: the names in UTF-8; a topic id is an index here.
    Problems (P):
        assignor[P]: RANGE, ROUNDROBIN, STICKY or COOPERATIVE_STICKY.
        member_offsets[P+1]: the problem's members, in the order ``assign`` takes them (the
            record's: the HashMap's insertion order); 0 first and M last, each member in one
            problem.
        count_offsets[P+1], count_topic, count_partitions: the partition count of each topic
            the metadata knows (a topic at most once per problem; counts <= 0 and topics
            nobody subscribes to are ignored, as ``assign`` ignores them).
    Members (M):
        member_id_offsets[M+1], member_id_bytes: member ids, UTF-8.
        instance_id_offsets[M+1], instance_id_bytes, has_instance_id[M]: group.instance.id,
            null where has_instance_id is False.
        topic_list_offsets[M+1], topic_list: subscribed topic ids as the member lists them
            (a topic listed twice, or one without metadata, included).
        owned_offsets[M+1], owned_topic, owned_partition: ownedPartitions as (topic id,
            partition) pairs.
        generation[M]: the subscription's generation id; negative where absent.
        user_data_offsets[M+1], user_data_bytes, has_user_data[M]: the subscription's user
            data, null where has_user_data is False (empty is not null).

    From the GroupMetadata members column (list<CLASSIC_MEMBER>), without a loop per member:
    member_offsets is the list's offsets; each string or binary field gives its offsets, its
    values buffer and its validity; subscribed_topics and the owned partitions' topics become
    topic ids by one dictionary encoding of all topic names; the owned partitions (a list of
    (topic, partitions list) per member) flatten to owned_offsets = partition_offsets[
    entry_offsets], owned_topic = the entry's topic id repeated per partition, owned_partition
    = the partition values. Null lists must have empty ranges (fill_null them first).
    """

    topic_offsets: np.ndarray
    topic_bytes: np.ndarray
    assignor: np.ndarray
    member_offsets: np.ndarray
    count_offsets: np.ndarray
    count_topic: np.ndarray
    count_partitions: np.ndarray
    member_id_offsets: np.ndarray
    member_id_bytes: np.ndarray
    instance_id_offsets: np.ndarray
    instance_id_bytes: np.ndarray
    has_instance_id: np.ndarray
    topic_list_offsets: np.ndarray
    topic_list: np.ndarray
    owned_offsets: np.ndarray
    owned_topic: np.ndarray
    owned_partition: np.ndarray
    generation: np.ndarray
    user_data_offsets: np.ndarray
    user_data_bytes: np.ndarray
    has_user_data: np.ndarray


@dataclass(frozen=True)
class AssignmentBatch:
    """The kernels' answer: status[P] int8 (OK, ERROR, FALLBACK), error[P] int8 (an index into
    JAVA_EXCEPTIONS where status is ERROR), and per member (CSR over the batch's members,
    empty for problems not OK) its partitions: assigned_offsets[M+1], assigned_topic (topic
    ids), assigned_partition, in no particular order; a partition can repeat where Java's
    list repeats it (only ever for inconsistent owned partitions)."""

    status: np.ndarray
    error: np.ndarray
    assigned_offsets: np.ndarray
    assigned_topic: np.ndarray
    assigned_partition: np.ndarray


# --- strings as Java sees them ------------------------------------------------------------------


@njit_kernel
def _utf8_scan(data, start, end, units, at):
    """Decode strict UTF-8 data[start:end] to UTF-16 units written from units[at] (when units
    is non-empty); -> (units written, valid). Strict UTF-8 is exactly what Java decodes without
    a replacement character, so equal valid bytes are equal Java strings."""
    write = len(units) > 0
    n = 0
    i = start
    while i < end:
        b = np.int64(data[i])
        if b < 0x80:
            c = b
            i += 1
        elif 0xC2 <= b <= 0xDF:
            if i + 1 >= end or (data[i + 1] & 0xC0) != 0x80:
                return n, False
            c = ((b & 0x1F) << 6) | (np.int64(data[i + 1]) & 0x3F)
            i += 2
        elif 0xE0 <= b <= 0xEF:
            if i + 2 >= end or (data[i + 1] & 0xC0) != 0x80 or (data[i + 2] & 0xC0) != 0x80:
                return n, False
            c = ((b & 0x0F) << 12) | ((np.int64(data[i + 1]) & 0x3F) << 6) | (np.int64(data[i + 2]) & 0x3F)
            if c < 0x800 or 0xD800 <= c <= 0xDFFF:
                return n, False
            i += 3
        elif 0xF0 <= b <= 0xF4:
            if (
                i + 3 >= end
                or (data[i + 1] & 0xC0) != 0x80
                or (data[i + 2] & 0xC0) != 0x80
                or (data[i + 3] & 0xC0) != 0x80
            ):
                return n, False
            c = (
                ((b & 0x07) << 18)
                | ((np.int64(data[i + 1]) & 0x3F) << 12)
                | ((np.int64(data[i + 2]) & 0x3F) << 6)
                | (np.int64(data[i + 3]) & 0x3F)
            )
            if c < 0x10000 or c > 0x10FFFF:
                return n, False
            i += 4
            if write:
                c -= 0x10000
                units[at + n] = 0xD800 | (c >> 10)
                units[at + n + 1] = 0xDC00 | (c & 0x3FF)
            n += 2
            continue
        else:
            return n, False
        if write:
            units[at + n] = c
        n += 1
    return n, True


@njit(cache=True, nogil=True)
def _java_strings(data, offsets):
    """UTF-16 units of every string (CSR), String.hashCode of each (its 32 bits, unsigned),
    and whether its UTF-8 was valid (an invalid one gets no units)."""
    count = len(offsets) - 1
    units = np.empty(len(data), np.uint16)
    unit_offsets = np.empty(count + 1, np.int64)
    hashes = np.empty(count, np.int64)
    valid = np.empty(count, np.bool_)
    at = 0
    for s in range(count):
        unit_offsets[s] = at
        start, end = offsets[s], offsets[s + 1]
        h = np.int64(0)
        n = 0
        ok = True
        for i in range(start, end):  # ASCII, the usual case: a unit per byte
            b = np.int64(data[i])
            if b >= 0x80:
                n = -1
                break
            units[at + n] = b
            h = (h * 31 + b) & 0xFFFFFFFF
            n += 1
        if n < 0:
            n, ok = _utf8_scan(data, start, end, units, at)
            h = 0
            for k in range(at, at + n):
                h = (h * 31 + np.int64(units[k])) & 0xFFFFFFFF
        valid[s] = ok
        if ok:
            at += n
        hashes[s] = h if ok else 0
    unit_offsets[count] = at
    return units, unit_offsets, hashes, valid


@njit_inline_kernel
def _compare(units, offsets, a, b):
    """The sign of String.compareTo (UTF-16 units) of strings a and b."""
    sa, ea, sb, eb = offsets[a], offsets[a + 1], offsets[b], offsets[b + 1]
    n = min(ea - sa, eb - sb)
    for k in range(n):
        ua, ub = units[sa + k], units[sb + k]
        if ua != ub:
            return -1 if ua < ub else 1
    la, lb = ea - sa, eb - sb
    return -1 if la < lb else (1 if la > lb else 0)


@njit(cache=True, nogil=True)
def _has_replacement_char(data, offsets):
    """Per string: does its UTF-8 hold U+FFFD (EF BF BD)?"""
    count = len(offsets) - 1
    out = np.zeros(count, np.bool_)
    for s in range(count):
        for i in range(offsets[s], offsets[s + 1] - 2):
            if data[i] == 0xEF and data[i + 1] == 0xBF and data[i + 2] == 0xBD:
                out[s] = True
                break
    return out


# --- the members' HashMap ----------------------------------------------------------------------


@njit_kernel
def _hashmap_order(hashes, units, unit_offsets, first, m, order, counts, scratch):
    """The iteration order of a java.util.HashMap (default capacity) after putting members
    first .. first+m-1 in that order: bins in index order, each in insertion order (resizes
    split bins keeping their order). -> False where that is not the whole story: a bin that
    Java would treeify (or grow the table for), or a key put twice."""
    capacity, threshold = 16, 12
    if len(counts) < capacity:
        return False
    counts[:capacity] = 0
    for i in range(m):
        h = hashes[first + i]
        slot = (h ^ (h >> 16)) & (capacity - 1)
        if counts[slot] >= _TREEIFY_THRESHOLD:
            return False
        counts[slot] += 1
        if i + 1 > threshold:
            capacity *= 2
            threshold *= 2
            if len(counts) < capacity:
                return False
            counts[:capacity] = 0
            for j in range(i + 1):
                hj = hashes[first + j]
                counts[(hj ^ (hj >> 16)) & (capacity - 1)] += 1
    # a stable counting sort of the members by bin
    start = 0
    for slot in range(capacity):
        c = counts[slot]
        counts[slot] = start
        start += c
    for i in range(m):
        h = hashes[first + i]
        slot = (h ^ (h >> 16)) & (capacity - 1)
        scratch[i] = slot
        order[counts[slot]] = i
        counts[slot] += 1
    # a key put twice: same bin, same hash, same units
    for a in range(m):
        for b in range(a + 1, m):
            i, j = order[a], order[b]
            if scratch[i] != scratch[j]:
                break
            if hashes[first + i] == hashes[first + j] and _compare(units, unit_offsets, first + i, first + j) == 0:
                return False
    return True


@njit_inline_kernel
def _member_info_less(a, b, id_units, id_offsets, inst_units, inst_offsets, has_instance):
    """AbstractPartitionAssignor.MemberInfo.compareTo(a, b) < 0: static members first, by
    group.instance.id; then dynamic ones by member id."""
    if has_instance[a] != has_instance[b]:
        return has_instance[a]
    if has_instance[a]:
        return _compare(inst_units, inst_offsets, a, b) < 0
    return _compare(id_units, id_offsets, a, b) < 0


@njit_kernel
def _sort_member_info(members, n, first, id_units, id_offsets, inst_units, inst_offsets, has_instance):
    """Collections.sort by MemberInfo (stable): binary insertion, after equal elements."""
    for i in range(1, n):
        v = members[i]
        lo, hi = 0, i
        while lo < hi:
            mid = (lo + hi) // 2
            if _member_info_less(
                first + v, first + members[mid], id_units, id_offsets, inst_units, inst_offsets, has_instance
            ):
                hi = mid
            else:
                lo = mid + 1
        for k in range(i, lo, -1):
            members[k] = members[k - 1]
        members[lo] = v


@njit_kernel
def _sort_by_id(members, start, end, first, id_units, id_offsets):
    """Sort members[start:end] by member id (String.compareTo); ids are distinct."""
    for i in range(start + 1, end):
        v = members[i]
        k = i
        while k > start and _compare(id_units, id_offsets, first + v, first + members[k - 1]) < 0:
            members[k] = members[k - 1]
            k -= 1
        members[k] = v


@njit_inline_kernel
def _sort_keys(keys, values, start, end):
    """Insertion sort of values[start:end] by keys[start:end] (both permuted; stable)."""
    for i in range(start + 1, end):
        kv, vv = keys[i], values[i]
        k = i
        while k > start and keys[k - 1] > kv:
            keys[k] = keys[k - 1]
            values[k] = values[k - 1]
            k -= 1
        keys[k] = kv
        values[k] = vv


@njit_inline_kernel
def _copy(dst, src, n):
    """dst[:n] = src[:n] (a slice assignment would allocate a temporary, which needs NRT)."""
    for i in range(n):
        dst[i] = src[i]


# --- big-endian reads of the sticky user data ---------------------------------------------------


@njit_inline_kernel
def _int32(data, at):
    v = (np.int64(data[at]) << 24) | (np.int64(data[at + 1]) << 16) | (np.int64(data[at + 2]) << 8) | data[at + 3]
    return v - (1 << 32) if v >= (1 << 31) else v


@njit_inline_kernel
def _int16(data, at):
    v = (np.int64(data[at]) << 8) | data[at + 1]
    return v - (1 << 16) if v >= (1 << 15) else v


# --- the batch ------------------------------------------------------------------------------------

# ProblemBatch's arrays, as the kernels take them
_Inputs = namedtuple("_Inputs", [f.name for f in dataclasses.fields(ProblemBatch)])  # type: ignore[misc]
# the batch's strings as Java sees them (units: UTF-16 CSR; hash: String.hashCode's 32 bits)
_Strings = namedtuple(
    "_Strings",
    "topic_units topic_unit_offsets topic_hash topic_valid topic_has_fffd "
    "id_units id_offsets id_hash id_valid inst_units inst_offsets inst_valid",
)
# scratch, sized for the batch's largest problem and reused by every problem. Members are
# numbered 0..m-1 in the problem; known topics (subscribed, with partitions) 0..n_known-1 in
# String order; a partition is a slot: known_base[k] + partition, or past `total` for one
# beyond its topic's count (slot_k/slot_p say which).
_Work = namedtuple(
    "_Work",
    [
        # the problem's members and topics
        "order",  # the members in HashMap iteration order
        "member_scratch",
        "bins",
        "sorted_members",
        "topic_stamp",  # batch topic -> the problem that last marked it subscribed
        "known_stamp",  # batch topic -> the problem for which topic_known holds its index
        "topic_known",  # batch topic -> known topic index, -1: not known
        "known_topic",  # known topic -> batch topic
        "known_n",
        "known_base",
        "subscribes",  # member * n_known + known topic
        "slot_k",
        "slot_p",
        # the sticky assignors' member data and owned partitions
        "claim_start",  # member -> its claimed partitions claim_slot[claim_start:claim_end]
        "claim_end",
        "claim_generation",  # -1 where none
        "claim_has_generation",  # memberData.generation is present (Optional.of)
        "claim_slot",  # slot, -1: a topic not known
        "owned_slot",  # consumerToOwnedPartitions: owned_slot[claim_start:owned_end]
        "owned_end",
        "previous_owner",
        "claimed_twice",
        # the constrained builder
        "sort_key",
        "sort_value",
        "maybe_revoked",
        "transferring",
        "assigned_mark",
        "unassigned",
        "under_min",
        "exactly_min",
        "size",  # each member's list's length, as Java's list.size()
        # the result: (member, slot) entries, member -1 where one was taken back
        "assigned_member",
        "assigned_slot",
        # the general builder
        "owner",  # slot -> the member whose currentAssignment list holds it, -1: none
        "partition_consumer",  # currentPartitionConsumer
        "saved_owner",
        "saved_size",
        "fixed",  # removed from currentAssignment as unable to participate
        "topic_consumers",  # known topic -> how many entries topicConsumers' list has
        "max_size",  # member -> getMaxAssignmentSize of its topics
        "id_rank",
        "sorted_consumers",  # sortedCurrentSubscriptions: by (size, id)
        "sorted_partitions",  # sortedAllPartitions
        "previous_member",  # prevAssignment: slot -> member, -1: none
        "previous_generation",
        "moved_from",  # PartitionMovements.partitionMovements: slot -> source, -1: not moved
        "moved_to",
        "move_set",  # slot -> the set of partitionMovementsByTopic holding it, -1: none
        "move_seq",  # when it entered that set (a HashSet bin keeps insertion order)
        "set_k",
        "set_from",
        "set_to",
        "set_capacity",
        "set_size",
    ],
)


@njit(cache=True, nogil=True)
def _workspace(n_topics, max_m, max_topics, max_slots, max_claims):
    table = 16  # the members' HashMap's largest table
    while table * 3 < max_m * 4 + 64:
        table *= 2
    m1 = max_m + 1
    entries = max_claims + max_slots
    return _Work(
        order=np.empty(m1, np.int64),
        member_scratch=np.empty(m1, np.int64),
        bins=np.empty(4 * table, np.int64),
        sorted_members=np.empty(m1, np.int64),
        topic_stamp=np.full(n_topics, -1, np.int64),
        known_stamp=np.full(n_topics, -1, np.int64),
        topic_known=np.empty(n_topics, np.int64),
        known_topic=np.empty(max_topics, np.int64),
        known_n=np.empty(max_topics, np.int64),
        known_base=np.empty(max_topics, np.int64),
        subscribes=np.zeros(m1 * max_topics, np.bool_),
        slot_k=np.empty(max_slots, np.int64),
        slot_p=np.empty(max_slots, np.int64),
        claim_start=np.empty(m1, np.int64),
        claim_end=np.empty(m1, np.int64),
        claim_generation=np.empty(m1, np.int64),
        claim_has_generation=np.empty(m1, np.bool_),
        claim_slot=np.empty(max_claims, np.int64),
        owned_slot=np.empty(max_claims, np.int64),
        owned_end=np.empty(m1, np.int64),
        previous_owner=np.empty(max_slots, np.int64),
        claimed_twice=np.empty(max_slots, np.bool_),
        sort_key=np.empty(entries, np.int64),
        sort_value=np.empty(entries, np.int64),
        maybe_revoked=np.empty(max_slots, np.int64),
        transferring=np.empty(max_slots, np.int64),
        assigned_mark=np.empty(max_slots, np.int64),
        unassigned=np.empty(max_slots, np.int64),
        under_min=np.empty(m1, np.int64),
        exactly_min=np.empty(m1 + max_slots, np.int64),
        size=np.empty(m1, np.int64),
        assigned_member=np.empty(entries, np.int64),
        assigned_slot=np.empty(entries, np.int64),
        owner=np.empty(max_slots, np.int64),
        partition_consumer=np.empty(max_slots, np.int64),
        saved_owner=np.empty(max_slots, np.int64),
        saved_size=np.empty(m1, np.int64),
        fixed=np.empty(m1, np.bool_),
        topic_consumers=np.empty(max_topics, np.int64),
        max_size=np.empty(m1, np.int64),
        id_rank=np.empty(m1, np.int64),
        sorted_consumers=np.empty(m1, np.int64),
        sorted_partitions=np.empty(max_slots, np.int64),
        previous_member=np.empty(max_slots, np.int64),
        previous_generation=np.empty(max_slots, np.int64),
        moved_from=np.empty(max_slots, np.int64),
        moved_to=np.empty(max_slots, np.int64),
        move_set=np.empty(max_slots, np.int64),
        move_seq=np.empty(max_slots, np.int64),
        set_k=np.empty(max_slots, np.int64),
        set_from=np.empty(max_slots, np.int64),
        set_to=np.empty(max_slots, np.int64),
        set_capacity=np.empty(max_slots, np.int64),
        set_size=np.empty(max_slots, np.int64),
    )


@njit(cache=True, nogil=True)
def _assign_batch(b):
    """Every problem of the batch `b` (an _Inputs): -> AssignmentBatch's arrays."""
    n_problems = len(b.assignor)
    n_topics = len(b.topic_offsets) - 1
    n_members = len(b.member_id_offsets) - 1
    topic_units, topic_unit_offsets, topic_hash, topic_valid = _java_strings(b.topic_bytes, b.topic_offsets)
    id_units, id_offsets, id_hash, id_valid = _java_strings(b.member_id_bytes, b.member_id_offsets)
    inst_units, inst_offsets, _, inst_valid = _java_strings(b.instance_id_bytes, b.instance_id_offsets)
    st = _Strings(
        topic_units,
        topic_unit_offsets,
        topic_hash,
        topic_valid,
        _has_replacement_char(b.topic_bytes, b.topic_offsets),
        id_units,
        id_offsets,
        id_hash,
        id_valid,
        inst_units,
        inst_offsets,
        inst_valid,
    )

    # the largest problem, and room for every member's partitions
    max_m = max_topics = max_slots = max_claims = 1
    room = 0
    for p in range(n_problems):
        first, last = b.member_offsets[p], b.member_offsets[p + 1]
        max_m = max(max_m, last - first)
        partitions = 0
        for j in range(b.count_offsets[p], b.count_offsets[p + 1]):
            partitions += max(0, b.count_partitions[j])
        claims = 0
        if b.assignor[p] == STICKY:
            for g in range(first, last):
                claims += (b.user_data_offsets[g + 1] - b.user_data_offsets[g]) // 4
        elif b.assignor[p] == COOPERATIVE_STICKY:
            claims = b.owned_offsets[last] - b.owned_offsets[first]
        max_claims = max(max_claims, claims)
        max_slots = max(max_slots, partitions + min(claims, _MAX_OUT_OF_RANGE) + 1)
        max_topics = max(max_topics, b.count_offsets[p + 1] - b.count_offsets[p])
        room += partitions + claims
    w = _workspace(n_topics, max_m, max_topics, max_slots, max_claims)

    status = np.empty(n_problems, np.int8)
    error = np.zeros(n_problems, np.int8)
    assigned_offsets = np.zeros(n_members + 1, np.int64)
    # written up to `end` only: the untouched rest of the room costs no memory
    assigned_topic = np.empty(room, np.int32)
    assigned_partition = np.empty(room, np.int32)
    end = 0
    for p in range(n_problems):
        first = b.member_offsets[p]
        m = b.member_offsets[p + 1] - first
        outcome, exception, n_assigned = _solve(p, b, st, w)
        status[p] = outcome
        error[p] = exception
        if outcome == OK:
            # the problem's partitions, member by member, straight to their place
            count = w.member_scratch
            count[:m] = 0
            for e in range(n_assigned):
                if w.assigned_member[e] >= 0:
                    count[w.assigned_member[e]] += 1
            at = end
            for i in range(m):
                assigned_offsets[first + i] = at
                at += count[i]
                count[i] = assigned_offsets[first + i]
            for e in range(n_assigned):
                i = w.assigned_member[e]
                if i >= 0:
                    s = w.assigned_slot[e]
                    assigned_topic[count[i]] = w.known_topic[w.slot_k[s]]
                    assigned_partition[count[i]] = w.slot_p[s]
                    count[i] += 1
            end = at
        else:
            assigned_offsets[first : first + m] = end
    assigned_offsets[n_members] = end
    return status, error, assigned_offsets, assigned_topic[:end], assigned_partition[:end]


# --- one problem -----------------------------------------------------------------------------------


@njit_kernel
def _slot_of(w, t, p, n_slots, total):
    """The slot of partition p of known topic t: known_base[t] + p in range, else an overflow
    slot after `total` (registered on first sight). -> (slot, n_slots), slot -1 past the limit."""
    if 0 <= p < w.known_n[t]:
        return w.known_base[t] + p, n_slots
    for s in range(total, n_slots):
        if w.slot_k[s] == t and w.slot_p[s] == p:
            return s, n_slots
    if n_slots - total >= _MAX_OUT_OF_RANGE:
        return -1, n_slots
    w.slot_k[n_slots] = t
    w.slot_p[n_slots] = p
    return n_slots, n_slots + 1


@njit_kernel
def _known_topics(p, b, st, w, first, m):
    """The problem's known topics (assign()'s counts: subscribed, with partitions) in String
    order, their slots, and who subscribes to which. -> (n_known, total partitions), n_known
    -1 where a topic is listed twice in the counts (or there are over a million)."""
    for g in range(first, first + m):
        for j in range(b.topic_list_offsets[g], b.topic_list_offsets[g + 1]):
            w.topic_stamp[b.topic_list[j]] = p
    n_known = 0
    for j in range(b.count_offsets[p], b.count_offsets[p + 1]):
        t = b.count_topic[j]
        if w.known_stamp[t] == p:
            return -1, 0
        w.known_stamp[t] = p
        w.topic_known[t] = -1
        if b.count_partitions[j] > 0 and w.topic_stamp[t] == p:
            if n_known == 1 << 20:  # the sort keys hold a topic index in 20 bits
                return -1, 0
            # insertion by String.compareTo
            k = n_known
            while k > 0 and _compare(st.topic_units, st.topic_unit_offsets, t, w.known_topic[k - 1]) < 0:
                w.known_topic[k] = w.known_topic[k - 1]
                w.known_n[k] = w.known_n[k - 1]
                k -= 1
            w.known_topic[k] = t
            w.known_n[k] = b.count_partitions[j]
            n_known += 1
    total = 0
    for k in range(n_known):
        w.topic_known[w.known_topic[k]] = k
        w.known_base[k] = total
        for q in range(w.known_n[k]):
            w.slot_k[total + q] = k
            w.slot_p[total + q] = q
        total += w.known_n[k]
    w.subscribes[: m * n_known] = False
    for i in range(m):
        g = first + i
        for j in range(b.topic_list_offsets[g], b.topic_list_offsets[g + 1]):
            t = b.topic_list[j]
            if w.known_stamp[t] == p and w.topic_known[t] >= 0:
                w.subscribes[i * n_known + w.topic_known[t]] = True
    return n_known, total


@njit_kernel
def _solve(p, b, st, w):  # noqa: C901 - numba kernel: the assignor's whole pass in one compiled loop
    """Problem p: -> (status, Java exception code, entries in assigned_member/assigned_slot)."""
    first = b.member_offsets[p]
    m = b.member_offsets[p + 1] - first
    code = b.assignor[p]
    for g in range(first, first + m):
        if not st.id_valid[g] or (b.has_instance_id[g] and not st.inst_valid[g]):
            return FALLBACK, 0, 0
        for j in range(b.topic_list_offsets[g], b.topic_list_offsets[g + 1]):
            if not st.topic_valid[b.topic_list[j]]:
                return FALLBACK, 0, 0
    if not _hashmap_order(st.id_hash, st.id_units, st.id_offsets, first, m, w.order, w.bins, w.member_scratch):
        return FALLBACK, 0, 0
    n_known, total = _known_topics(p, b, st, w, first, m)
    if n_known < 0:
        return FALLBACK, 0, 0

    if code == RANGE or code == ROUNDROBIN:
        _copy(w.sorted_members, w.order, m)
        _sort_member_info(
            w.sorted_members, m, first, st.id_units, st.id_offsets, st.inst_units, st.inst_offsets, b.has_instance_id
        )
        if code == RANGE:
            return OK, 0, _range(w, m, n_known)
        if m == 0:
            return ERROR, ILLEGAL_ARGUMENT, 0  # CircularIterator of no members
        return OK, 0, _roundrobin(w, m, n_known)

    # memberData: the partitions each member claims, as slots (-1: a topic not known)
    n_claims = 0
    n_slots = total
    for i in range(m):
        g = first + i
        w.claim_start[i] = n_claims
        w.claim_has_generation[i] = True
        if code == STICKY:
            n_claims, n_slots, generation, has_generation, usable = _sticky_member_data(
                b, st, w, g, n_known, n_slots, total, n_claims
            )
            if not usable:
                return FALLBACK, 0, 0
            w.claim_generation[i] = generation
            w.claim_has_generation[i] = has_generation
        else:
            for j in range(b.owned_offsets[g], b.owned_offsets[g + 1]):
                t = b.owned_topic[j]
                s = -1
                if w.known_stamp[t] == p and w.topic_known[t] >= 0:
                    s, n_slots = _slot_of(w, w.topic_known[t], b.owned_partition[j], n_slots, total)
                    if s < 0:
                        return FALLBACK, 0, 0
                w.claim_slot[n_claims] = s
                n_claims += 1
            if b.generation[g] >= 0:
                w.claim_generation[i] = b.generation[g]
            elif not b.has_user_data[g]:
                w.claim_generation[i] = -1  # Optional.empty()
                w.claim_has_generation[i] = False
            elif b.user_data_offsets[g + 1] - b.user_data_offsets[g] < 4:
                w.claim_generation[i] = -1  # unparsable: Optional.of(DEFAULT_GENERATION)
            else:
                w.claim_generation[i] = _int32(b.user_data_bytes, b.user_data_offsets[g])
        w.claim_end[i] = n_claims

    all_equal = _resolve_claims(p, b, w, first, m, n_slots)
    if all_equal and m == 0:
        return ERROR, ARITHMETIC, 0  # totalPartitionsCount % numberOfConsumers
    if all_equal:
        n_assigned, err = _constrained(st, w, first, m, total, n_slots)
    elif n_slots > total:
        return FALLBACK, 0, 0  # the general builder with a partition beyond its topic: not compiled
    else:
        n_assigned, err = _general(p, b, st, w, first, m, n_known, total)
        if err == _UNCOVERED:
            return FALLBACK, 0, 0
    if err >= 0:
        return ERROR, err, 0
    if code == COOPERATIVE_STICKY:
        if not all_equal:
            _transferring_ownership(w, m, total)
        # adjustAssignment: a partition changing owner waits for its revocation (the first
        # of its new owner's entries for it leaves)
        for e in range(n_assigned):
            s = w.assigned_slot[e]
            if w.transferring[s] >= 0 and w.assigned_member[e] == w.transferring[s]:
                w.assigned_member[e] = -1
                w.transferring[s] = -1
    return OK, 0, n_assigned


# --- range and roundrobin ------------------------------------------------------------------------


@njit_kernel
def _range(w, m, n_known):
    """RangeAssignor.assignPartitions without racks: per topic, its members in MemberInfo order
    take contiguous ranges, the first `partitions % members` one more."""
    consumers = w.member_scratch
    n_assigned = 0
    for k in range(n_known):
        c = 0
        for r in range(m):
            i = w.sorted_members[r]
            if w.subscribes[i * n_known + k]:
                consumers[c] = i
                c += 1
        if c == 0:
            continue
        n = w.known_n[k]
        per_consumer, with_extra = n // c, n % c
        next_partition = 0
        for r in range(c):
            if next_partition >= n:
                break
            count = min(per_consumer + (1 if with_extra > 0 else 0), n - next_partition)
            if count == 0:
                continue
            for q in range(next_partition, next_partition + count):
                w.assigned_member[n_assigned] = consumers[r]
                w.assigned_slot[n_assigned] = w.known_base[k] + q
                n_assigned += 1
            next_partition += count
            if count > per_consumer:
                with_extra -= 1
    return n_assigned


@njit_kernel
def _roundrobin(w, m, n_known):
    """RoundRobinAssignor: every partition (topics in String order) to the next member in
    MemberInfo order that subscribes to its topic."""
    n_assigned = 0
    position = 0
    for k in range(n_known):
        for q in range(w.known_n[k]):
            while not w.subscribes[w.sorted_members[position] * n_known + k]:
                position = (position + 1) % m
            w.assigned_member[n_assigned] = w.sorted_members[position]
            w.assigned_slot[n_assigned] = w.known_base[k] + q
            n_assigned += 1
            position = (position + 1) % m
    return n_assigned


# --- the sticky assignors' member data ---------------------------------------------------------------


@njit_kernel
def _read_previous_assignment(b, st, w, at, end, n_known, n_slots, total, n_claims):
    """StickyAssignor's previous_assignment array (Schema.read's checks) from user_data_bytes[at:end],
    each partition as its slot (-1: a topic not known). -> (position after it, -1 if it does
    not parse; n_claims; n_slots; usable)."""
    data = b.user_data_bytes
    if end - at < 4:
        return -1, n_claims, n_slots, True
    n_entries = _int32(data, at)
    at += 4
    if n_entries < 0 or n_entries > end - at:
        return -1, n_claims, n_slots, True
    for _ in range(n_entries):
        if end - at < 2:
            return -1, n_claims, n_slots, True
        length = _int16(data, at)
        at += 2
        if length < 0 or length > end - at:
            return -1, n_claims, n_slots, True
        name = at
        at += length
        # which known topic the name is: equal valid UTF-8 is the same Java string; malformed
        # UTF-8 decodes to a string with U+FFFD, which only a topic holding one could equal
        k = -1
        _, valid = _utf8_scan(data, name, at, st.topic_units[:0], 0)
        for kk in range(n_known):
            t = w.known_topic[kk]
            if not valid:
                if st.topic_has_fffd[t]:
                    return -1, n_claims, n_slots, False
                continue
            if b.topic_offsets[t + 1] - b.topic_offsets[t] != length:
                continue
            same = True
            for c in range(length):
                if b.topic_bytes[b.topic_offsets[t] + c] != data[name + c]:
                    same = False
                    break
            if same:
                k = kk
                break
        if end - at < 4:
            return -1, n_claims, n_slots, True
        n_partitions = _int32(data, at)
        at += 4
        if n_partitions < 0 or n_partitions > end - at:
            return -1, n_claims, n_slots, True
        for _ in range(n_partitions):
            if end - at < 4:
                return -1, n_claims, n_slots, True
            partition = _int32(data, at)
            at += 4
            s = -1
            if k >= 0:
                s, n_slots = _slot_of(w, k, partition, n_slots, total)
                if s < 0:
                    return -1, n_claims, n_slots, False
            w.claim_slot[n_claims] = s
            n_claims += 1
    return at, n_claims, n_slots, True


@njit_kernel
def _sticky_member_data(b, st, w, g, n_known, n_slots, total, n_claims):
    """StickyAssignor.memberData of member g: the v1 layout (partitions, generation), else v0
    (partitions, no generation), else no partitions and DEFAULT_GENERATION. -> (n_claims,
    n_slots, generation (-1 for none), whether it has one, usable)."""
    start, end = b.user_data_offsets[g], b.user_data_offsets[g + 1]
    if not b.has_user_data[g] or end == start:
        return n_claims, n_slots, -1, False, True
    before = n_claims
    at, n_claims, n_slots, usable = _read_previous_assignment(b, st, w, start, end, n_known, n_slots, total, n_claims)
    if at < 0:
        return before, n_slots, -1, True, usable  # neither layout parses
    if end - at >= 4:
        return n_claims, n_slots, _int32(b.user_data_bytes, at), True, usable  # v1
    return n_claims, n_slots, -1, False, usable  # v0: no generation


@njit_kernel
def _remove_first(items, start, end, value):
    """List.remove(Object) on items[start:end]; -> the new end."""
    for j in range(start, end):
        if items[j] == value:
            for k in range(j, end - 1):
                items[k] = items[k + 1]
            return end - 1
    return end


@njit_kernel
def _resolve_claims(p, b, w, first, m, n_slots):
    """AbstractStickyAssignor.allSubscriptionsEqual: whether all members list the same topics;
    and each member's still-valid owned partitions (claims resolved in HashMap order) in
    owned_slot[claim_start:owned_end]."""
    w.previous_owner[:n_slots] = -1
    w.claimed_twice[:n_slots] = False
    all_equal = True
    reference_size = 0
    stamp = -2 - p  # marks the reference set in topic_stamp (p marks "subscribed")
    for idx in range(m):
        i = w.order[idx]
        g = first + i
        lo, hi = b.topic_list_offsets[g], b.topic_list_offsets[g + 1]
        # the reference set is (re)initialised while empty
        if reference_size == 0:
            for j in range(lo, hi):
                if w.topic_stamp[b.topic_list[j]] != stamp:
                    w.topic_stamp[b.topic_list[j]] = stamp
                    reference_size += 1
        elif all_equal:
            if hi - lo != reference_size:
                all_equal = False
            else:
                for j in range(lo, hi):
                    if w.topic_stamp[b.topic_list[j]] != stamp:
                        all_equal = False
                        break

        member_generation = w.claim_generation[i]
        end = w.claim_start[i]
        for j in range(w.claim_start[i], w.claim_end[i]):
            s = w.claim_slot[j]
            if s < 0:
                continue
            other = w.previous_owner[s]
            if other < 0:
                w.owned_slot[end] = s
                end += 1
                w.previous_owner[s] = i
                continue
            # the other claimant's generation comes from its Subscription, not its member data
            other_generation = b.generation[first + other] if b.generation[first + other] >= 0 else -1
            if member_generation >= other_generation:
                if member_generation == other_generation:
                    w.claimed_twice[s] = True  # nobody keeps it
                else:
                    w.owned_slot[end] = s
                    end += 1
                if other == i:
                    end = _remove_first(w.owned_slot, w.claim_start[i], end, s)
                else:
                    w.owned_end[other] = _remove_first(w.owned_slot, w.claim_start[other], w.owned_end[other], s)
                w.previous_owner[s] = i
        w.owned_end[i] = end
    # restore the "subscribed" marks the reference set overwrote
    for g in range(first, first + m):
        for j in range(b.topic_list_offsets[g], b.topic_list_offsets[g + 1]):
            w.topic_stamp[b.topic_list[j]] = p
    return all_equal


# --- the constrained builder (all members subscribe to the same topics) ----------------------------


@njit_kernel
def _constrained(st, w, first, m, total, n_slots):  # noqa: C901 - numba kernel: Kafka's builder, step for step
    """AbstractStickyAssignor.ConstrainedAssignmentBuilder.build. -> (entries in
    assigned_member/assigned_slot, Java exception code or -1); transferring holds
    partitionsTransferringOwnership."""
    min_quota = total // m
    max_quota = (total + m - 1) // m
    expected_over_min = total % m
    current_over_min = 0
    w.maybe_revoked[:n_slots] = -1
    w.transferring[:n_slots] = -1
    w.assigned_mark[:n_slots] = 0
    w.size[:m] = 0
    n_assigned = 0
    n_under = 0
    exactly_head = exactly_tail = 0
    irregular = n_slots > total  # an owned partition beyond its topic: the walk below stalls

    # assignOwnedPartitions, in the HashMap's order
    for idx in range(m):
        i = w.order[idx]
        n = 0
        for j in range(w.claim_start[i], w.owned_end[i]):
            s = w.owned_slot[j]
            if not w.claimed_twice[s]:
                w.sort_key[n] = ((w.slot_p[s] + (1 << 31)) << 20) | w.slot_k[s]  # partition, then topic
                w.sort_value[n] = s
                n += 1
        _sort_keys(w.sort_key, w.sort_value, 0, n)
        keep = n
        if n < min_quota:
            w.under_min[n_under] = i
            n_under += 1
        elif n >= max_quota and current_over_min < expected_over_min:
            current_over_min += 1
            if current_over_min == expected_over_min:
                exactly_head = exactly_tail
            keep = max_quota
        else:
            keep = min_quota
            if current_over_min < expected_over_min:
                w.exactly_min[exactly_tail] = i
                exactly_tail += 1
        for r in range(n):
            s = w.sort_value[r]
            if r < keep:
                w.assigned_member[n_assigned] = i
                w.assigned_slot[n_assigned] = s
                n_assigned += 1
                w.size[i] += 1
                if w.assigned_mark[s] > 0:
                    irregular = True
                w.assigned_mark[s] += 1
            else:
                w.maybe_revoked[s] = i

    # getUnassignedPartitions: all partitions (topic, partition) less the assigned ones
    n_unassigned = 0
    if not irregular:
        for s in range(total):
            if w.assigned_mark[s] == 0:
                w.unassigned[n_unassigned] = s
                n_unassigned += 1
    else:
        n_unassigned = _walk_unassigned(w, total, n_assigned)

    _sort_by_id(w.under_min, 0, n_under, first, st.id_units, st.id_offsets)
    _sort_by_id(w.exactly_min, exactly_head, exactly_tail, first, st.id_units, st.id_offsets)

    # assignRoundRobin, with LinkedList's iterator over underMinQuota
    mod_count = 0
    it_next, it_last, it_expected = 0, -1, 0
    for r in range(n_unassigned):
        s = w.unassigned[r]
        if it_next < n_under:
            if mod_count != it_expected:
                return n_assigned, CONCURRENT_MODIFICATION
            it_last = it_next
            it_next += 1
            consumer = w.under_min[it_last]
        elif n_under == 0 and exactly_head == exactly_tail:
            return n_assigned, ILLEGAL_STATE  # "No more unfilled consumers to be assigned."
        elif n_under == 0:
            consumer = w.exactly_min[exactly_head]
            exactly_head += 1
        else:
            it_next, it_last, it_expected = 1, 0, mod_count
            consumer = w.under_min[0]

        # assignNewPartition
        w.assigned_member[n_assigned] = consumer
        w.assigned_slot[n_assigned] = s
        n_assigned += 1
        w.size[consumer] += 1
        if (w.maybe_revoked[s] >= 0 and w.maybe_revoked[s] != consumer) or w.claimed_twice[s]:
            w.transferring[s] = consumer
        if w.size[consumer] == min_quota:
            # iterator.remove()
            if mod_count != it_expected:
                return n_assigned, CONCURRENT_MODIFICATION
            if it_last < 0:
                return n_assigned, ILLEGAL_STATE
            for k in range(it_last, n_under - 1):
                w.under_min[k] = w.under_min[k + 1]
            n_under -= 1
            mod_count += 1
            if it_next > it_last:
                it_next -= 1
            it_last = -1
            it_expected = mod_count
            w.exactly_min[exactly_tail] = consumer
            exactly_tail += 1
        elif w.size[consumer] == max_quota:
            current_over_min += 1

    # verifyUnfilledMembers
    if n_under > 0:
        if current_over_min != expected_over_min:
            return n_assigned, ILLEGAL_STATE
        for r in range(n_under):
            if w.size[w.under_min[r]] != min_quota:
                return n_assigned, ILLEGAL_STATE
    return n_assigned, -1


@njit_kernel
def _walk_unassigned(w, total, n_assigned):
    """getUnassignedPartitions' two-pointer walk over every partition in (topic, partition)
    order, for the irregular case: an assigned partition beyond its topic's range (or a
    repeated one) stalls the pointer, after which every partition counts as unassigned."""
    n = n_assigned
    if n == 0:
        for s in range(total):
            w.unassigned[s] = s
        return total
    for e in range(n):
        s = w.assigned_slot[e]
        w.sort_key[e] = (w.slot_k[s] << 33) | (w.slot_p[s] + (1 << 31))
        w.sort_value[e] = s
    _sort_keys(w.sort_key, w.sort_value, 0, n)
    n_unassigned = 0
    pointer = 0
    add_directly = False
    for s in range(total):
        key = (w.slot_k[s] << 33) | (w.slot_p[s] + (1 << 31))
        if add_directly or w.sort_key[pointer] != key:
            w.unassigned[n_unassigned] = s
            n_unassigned += 1
        elif pointer + 1 < n:
            pointer += 1
        else:
            add_directly = True
    return n_unassigned


# --- the general builder (members subscribe to different topics) ------------------------------------


@njit_inline_kernel
def _sorts_before(w, a, c):
    """sortedCurrentSubscriptions' comparator: fewer partitions first, then member id."""
    return w.size[a] < w.size[c] or (w.size[a] == w.size[c] and w.id_rank[a] < w.id_rank[c])


@njit_kernel
def _consumers_add(w, n, i):
    """TreeSet.add on sortedCurrentSubscriptions[:n]; -> its new length, -1 where the
    comparator throws (a member not in currentAssignment: NullPointerException)."""
    if i < 0 or w.fixed[i]:
        return -1
    sc = w.sorted_consumers
    at = n
    for r in range(n):
        if sc[r] == i:
            return n
        if at == n and _sorts_before(w, i, sc[r]):
            at = r
    for r in range(n, at, -1):
        sc[r] = sc[r - 1]
    sc[at] = i
    return n + 1


@njit_kernel
def _consumers_remove(w, n, i):
    """TreeSet.remove (an empty tree compares nothing); -> the new length, -1 as above."""
    if n == 0:
        return 0
    if i < 0 or w.fixed[i]:
        return -1
    sc = w.sorted_consumers
    for r in range(n):
        if sc[r] == i:
            for q in range(r, n - 1):
                sc[q] = sc[q + 1]
            return n - 1
    return n


@njit_inline_kernel
def _partition_bin(st, w, s, capacity):
    """The HashSet bin of TopicPartition slot s: HashMap.hash of 31 * (31 + partition) +
    topic.hashCode()."""
    h = (31 * (31 + w.slot_p[s]) + st.topic_hash[w.known_topic[w.slot_k[s]]]) & 0xFFFFFFFF
    return (h ^ (h >> 16)) & (capacity - 1)


@njit_kernel
def _movement_set(w, n_sets, k, source, target):
    """partitionMovementsByTopic.get(topic).get(ConsumerPair(source, target)): a set id, -1."""
    for q in range(n_sets):
        if w.set_size[q] > 0 and w.set_k[q] == k and w.set_from[q] == source and w.set_to[q] == target:
            return q
    return -1


@njit_kernel
def _add_movement_record(st, w, n_sets, seq, s, source, target):
    """PartitionMovements.addPartitionMovementRecord. -> (n_sets, False where the set's bin
    would turn into a tree)."""
    k = w.slot_k[s]
    w.moved_from[s] = source
    w.moved_to[s] = target
    q = _movement_set(w, n_sets, k, source, target)
    if q < 0:  # a new HashSet (an emptied one was dropped from its map)
        q = 0
        while q < n_sets and w.set_size[q] > 0:
            q += 1
        if q == n_sets:
            n_sets += 1
        w.set_k[q] = k
        w.set_from[q] = source
        w.set_to[q] = target
        w.set_capacity[q] = 16
        w.set_size[q] = 0
    capacity = w.set_capacity[q]
    in_bin = 0
    slot_bin = _partition_bin(st, w, s, capacity)
    for r in range(w.known_base[k], w.known_base[k] + w.known_n[k]):
        if w.move_set[r] == q and _partition_bin(st, w, r, capacity) == slot_bin:
            in_bin += 1
    if in_bin >= _TREEIFY_THRESHOLD:
        return n_sets, False
    w.move_set[s] = q
    w.move_seq[s] = seq
    w.set_size[q] += 1
    if w.set_size[q] > capacity * 3 // 4:
        w.set_capacity[q] = capacity * 2
    return n_sets, True


@njit_kernel
def _first_of_set(st, w, q):
    """HashSet.iterator().next(): the lowest bin, in it the earliest added."""
    k = w.set_k[q]
    capacity = w.set_capacity[q]
    best, best_bin, best_seq = -1, 0, 0
    for r in range(w.known_base[k], w.known_base[k] + w.known_n[k]):
        if w.move_set[r] == q:
            rb = _partition_bin(st, w, r, capacity)
            if best < 0 or rb < best_bin or (rb == best_bin and w.move_seq[r] < best_seq):
                best, best_bin, best_seq = r, rb, w.move_seq[r]
    return best


@njit_kernel
def _partition_to_be_moved(st, w, n_sets, s, old, new):
    """PartitionMovements.getTheActualPartitionToBeMoved: if a partition of the topic moved the
    opposite way, that one moves back instead."""
    k = w.slot_k[s]
    any_set = False
    for q in range(n_sets):
        if w.set_size[q] > 0 and w.set_k[q] == k:
            any_set = True
            break
    if not any_set:
        return s
    if w.move_set[s] >= 0:
        old = w.moved_from[s]
    q = _movement_set(w, n_sets, k, new, old)
    return s if q < 0 else _first_of_set(st, w, q)


@njit_kernel
def _process_movement(st, w, n_sc, n_sets, seq, s, new):
    """processPartitionMovement. -> (n_sc, n_sets, error code or -1)."""
    old = w.partition_consumer[s]
    n_sc = _consumers_remove(w, n_sc, old)
    if n_sc >= 0:
        n_sc = _consumers_remove(w, n_sc, new)
    if n_sc < 0:
        return n_sc, n_sets, NULL_POINTER
    # PartitionMovements.movePartition
    ok = True
    if w.move_set[s] >= 0:
        source = w.moved_from[s]
        w.set_size[w.move_set[s]] -= 1
        w.move_set[s] = -1
        if source != new:
            n_sets, ok = _add_movement_record(st, w, n_sets, seq, s, source, new)
    else:
        n_sets, ok = _add_movement_record(st, w, n_sets, seq, s, old, new)
    if not ok:
        return n_sc, n_sets, _UNCOVERED
    if old < 0 or w.fixed[old] or new < 0 or w.fixed[new]:
        return n_sc, n_sets, NULL_POINTER
    if w.owner[s] == old:
        w.owner[s] = -1
        w.size[old] -= 1
    if w.owner[s] >= 0:
        return n_sc, n_sets, _UNCOVERED  # a partition in two lists: never seen without odd input
    w.owner[s] = new
    w.size[new] += 1
    w.partition_consumer[s] = new
    n_sc = _consumers_add(w, n_sc, new)
    if n_sc >= 0:
        n_sc = _consumers_add(w, n_sc, old)
    return n_sc, n_sets, -1 if n_sc >= 0 else NULL_POINTER


@njit_kernel
def _is_balanced(p, b, w, first, n_known, n_sc):
    """GeneralAssignmentBuilder.isBalanced. -> (balanced, error code or -1)."""
    if n_sc == 0:
        return False, NO_SUCH_ELEMENT
    sc = w.sorted_consumers
    if w.size[sc[0]] >= w.size[sc[n_sc - 1]] - 1:
        return True, -1
    for r in range(n_sc):
        c = sc[r]
        count = w.size[c]
        if count == w.max_size[c]:
            continue
        g = first + c
        for j in range(b.topic_list_offsets[g], b.topic_list_offsets[g + 1]):
            t = b.topic_list[j]
            k = w.topic_known[t] if w.known_stamp[t] == p else -1
            if k < 0:
                continue
            for s in range(w.known_base[k], w.known_base[k] + w.known_n[k]):
                other = w.owner[s]
                if other != c:
                    if other < 0 or w.fixed[other]:
                        return False, NULL_POINTER
                    if count + 1 < w.size[other]:
                        return False, -1
    return True, -1


@njit_kernel
def _perform_reassignments(p, b, st, w, first, m, n_known, partitions, n_partitions, n_sc, n_sets, seq):
    """performReassignments: move partitions off crowded members until balanced. -> (performed,
    n_sets, seq, error code or -1)."""
    performed = False
    for _ in range(1_000_000):
        modified = False
        for r in range(n_partitions):
            s = partitions[r]
            balanced, err = _is_balanced(p, b, w, first, n_known, n_sc)
            if err >= 0:
                return performed, n_sets, seq, err
            if balanced:
                break
            consumer = w.partition_consumer[s]
            target = -2  # none yet
            previous = w.previous_member[s]
            if previous >= 0:
                if consumer < 0 or w.fixed[consumer] or w.fixed[previous]:
                    return performed, n_sets, seq, NULL_POINTER
                if w.size[consumer] > w.size[previous] + 1:
                    target = previous
            if target == -2:
                k = w.slot_k[s]
                for idx in range(m):
                    other = w.order[idx]
                    if not w.subscribes[other * n_known + k]:
                        continue
                    if consumer < 0 or w.fixed[consumer] or w.fixed[other]:
                        return performed, n_sets, seq, NULL_POINTER
                    if w.size[consumer] > w.size[other] + 1:
                        # reassignPartition: to the least loaded member that can take it
                        target = -1
                        for q in range(n_sc):
                            if w.subscribes[w.sorted_consumers[q] * n_known + k]:
                                target = w.sorted_consumers[q]
                                break
                        break
            if target == -2:
                continue
            # reassignPartition(partition, newConsumer)
            moving = _partition_to_be_moved(st, w, n_sets, s, consumer, target)
            seq += 1
            n_sc, n_sets, err = _process_movement(st, w, n_sc, n_sets, seq, moving, target)
            if err >= 0:
                return performed, n_sets, seq, err
            performed = modified = True
        if not modified:
            return performed, n_sets, seq, -1
    return performed, n_sets, seq, _UNCOVERED


@njit_kernel
def _balance_score(sizes, m, fixed, scratch):
    """getBalanceScore over the members still in currentAssignment."""
    n = 0
    for i in range(m):
        if not fixed[i]:
            v = sizes[i]
            k = n
            while k > 0 and scratch[k - 1] > v:
                scratch[k] = scratch[k - 1]
                k -= 1
            scratch[k] = v
            n += 1
    score = 0
    for r in range(n):
        score += scratch[r] * (2 * r - n + 1)
    return score


@njit_kernel
def _general(p, b, st, w, first, m, n_known, total):  # noqa: C901 - numba kernel: Kafka's builder, step for step
    """AbstractStickyAssignor.GeneralAssignmentBuilder.build. -> (entries in assigned_member/
    assigned_slot, Java exception code, -1, or _UNCOVERED). Each partition is in at most one
    member's list here (no partition beyond its topic's range), so a list is its owner[]
    entries and no HashMap's iteration order decides anything but prevAssignment's ties."""
    # consumerTopics / topicConsumers (a topic listed twice counts twice, as in Java's lists)
    w.topic_consumers[:n_known] = 0
    for i in range(m):
        g = first + i
        entries = 0
        partitions = 0
        for j in range(b.topic_list_offsets[g], b.topic_list_offsets[g + 1]):
            t = b.topic_list[j]
            if w.known_stamp[t] == p and w.topic_known[t] >= 0:
                entries += 1
                partitions += w.known_n[w.topic_known[t]]
                w.topic_consumers[w.topic_known[t]] += 1
        w.max_size[i] = total if entries == n_known else partitions
        w.fixed[i] = False
    for i in range(m):
        w.sorted_members[i] = i
    _sort_by_id(w.sorted_members, 0, m, first, st.id_units, st.id_offsets)
    for r in range(m):
        w.id_rank[w.sorted_members[r]] = r

    # currentAssignment (the owned partitions), currentPartitionConsumer
    w.owner[:total] = -1
    w.partition_consumer[:total] = -1
    for i in range(m):
        w.size[i] = w.owned_end[i] - w.claim_start[i]
        for j in range(w.claim_start[i], w.owned_end[i]):
            w.owner[w.owned_slot[j]] = i
            w.partition_consumer[w.owned_slot[j]] = i

    # prepopulateCurrentAssignments: who held what in generations before the newest
    max_generation = -1
    for i in range(m):
        max_generation = max(max_generation, w.claim_generation[i])
    w.previous_member[:total] = -1
    for idx in range(m):
        i = w.order[idx]
        if w.claim_has_generation[i] and w.claim_generation[i] < max_generation:
            generation = w.claim_generation[i]
        elif not w.claim_has_generation[i] and max_generation > -1:
            generation = -1
        else:
            continue
        for j in range(w.claim_start[i], w.claim_end[i]):
            s = w.claim_slot[j]
            if s >= 0 and (w.previous_member[s] < 0 or generation > w.previous_generation[s]):
                w.previous_member[s] = i
                w.previous_generation[s] = generation

    # assignOwnedPartitions: a partition of a topic its member left goes (revocation required)
    revocation_required = False
    for s in range(total):
        i = w.owner[s]
        if i >= 0 and not w.subscribes[i * n_known + w.slot_k[s]]:
            w.owner[s] = -1
            w.size[i] -= 1
            revocation_required = True

    # sortedAllPartitions: topics by how many consume them, then name; getUnassignedPartitions
    for k in range(n_known):
        w.sort_key[k] = (w.topic_consumers[k] << 20) | k
        w.sort_value[k] = k
    _sort_keys(w.sort_key, w.sort_value, 0, n_known)
    n_sorted = 0
    n_unassigned = 0
    for r in range(n_known):
        k = w.sort_value[r]
        for s in range(w.known_base[k], w.known_base[k] + w.known_n[k]):
            w.sorted_partitions[n_sorted] = s
            n_sorted += 1
            if w.owner[s] < 0:
                w.unassigned[n_unassigned] = s
                n_unassigned += 1

    n_sc = 0
    for i in range(m):
        n_sc = _consumers_add(w, n_sc, i)

    # balance
    initializing = w.size[w.sorted_consumers[n_sc - 1]] == 0
    for r in range(n_unassigned):
        s = w.unassigned[r]
        k = w.slot_k[s]
        for q in range(n_sc):  # maybeAssignPartition: the least loaded member that can take it
            c = w.sorted_consumers[q]
            if w.subscribes[c * n_known + k]:
                n_sc = _consumers_remove(w, n_sc, c)
                w.owner[s] = c
                w.size[c] += 1
                w.partition_consumer[s] = c
                n_sc = _consumers_add(w, n_sc, c)
                break
    # partitions of topics with one consumer stay where they are
    n_kept = 0
    for r in range(n_sorted):
        if w.topic_consumers[w.slot_k[w.sorted_partitions[r]]] >= 2:
            w.sorted_partitions[n_kept] = w.sorted_partitions[r]
            n_kept += 1
    n_sorted = n_kept
    n_kept = 0
    for r in range(n_unassigned):
        if w.topic_consumers[w.slot_k[w.unassigned[r]]] >= 2:
            w.unassigned[n_kept] = w.unassigned[r]
            n_kept += 1
    n_unassigned = n_kept
    # and so do members that cannot participate (canConsumerParticipateInReassignment)
    for i in range(m):
        participates = w.size[i] < w.max_size[i]
        for s in range(total):
            if w.owner[s] == i and w.topic_consumers[w.slot_k[s]] >= 2:
                participates = True
                break
        if not participates:
            n_sc = _consumers_remove(w, n_sc, i)
            w.fixed[i] = True

    _copy(w.saved_owner, w.owner, total)
    _copy(w.saved_size, w.size, m)
    w.move_set[:total] = -1
    n_sets = 0
    seq = 0
    if not revocation_required:
        _, n_sets, seq, err = _perform_reassignments(
            p, b, st, w, first, m, n_known, w.unassigned, n_unassigned, n_sc, n_sets, seq
        )
        if err >= 0:
            return 0, err
    reassigned, n_sets, seq, err = _perform_reassignments(
        p, b, st, w, first, m, n_known, w.sorted_partitions, n_sorted, n_sc, n_sets, seq
    )
    if err >= 0:
        return 0, err
    # keep the moves only if they made the assignment more balanced
    if (
        not initializing
        and reassigned
        and _balance_score(w.size, m, w.fixed, w.member_scratch)
        >= _balance_score(w.saved_size, m, w.fixed, w.member_scratch)
    ):
        _copy(w.owner, w.saved_owner, total)
        _copy(w.size, w.saved_size, m)

    n_assigned = 0
    for s in range(total):
        if w.owner[s] >= 0:
            w.assigned_member[n_assigned] = w.owner[s]
            w.assigned_slot[n_assigned] = s
            n_assigned += 1
    return n_assigned, -1


@njit_kernel
def _transferring_ownership(w, m, total):
    """CooperativeStickyAssignor.computePartitionsTransferringOwnership after the general
    builder: partitions given to a member that did not own them while a member that owned them
    loses them (claims are the members' ownedPartitions)."""
    kept = w.assigned_mark
    revoked = w.maybe_revoked
    kept[:total] = 0
    revoked[:total] = 0
    for i in range(m):
        for j in range(w.claim_start[i], w.claim_end[i]):
            s = w.claim_slot[j]
            if s >= 0:
                if w.owner[s] == i:
                    kept[s] = 1
                else:
                    revoked[s] = 1
    for s in range(total):
        w.transferring[s] = w.owner[s] if w.owner[s] >= 0 and kept[s] == 0 and revoked[s] == 1 else -1


# --- from Python objects ----------------------------------------------------------------------------


_DTYPES = {
    "assignor": np.int8,
    "count_topic": np.int32,
    "count_partitions": np.int32,
    "topic_list": np.int32,
    "owned_topic": np.int32,
    "owned_partition": np.int32,
    "generation": np.int32,
    "has_instance_id": np.bool_,
    "has_user_data": np.bool_,
}


def _kernel_arg(name: str, values: np.ndarray) -> np.ndarray:
    """One dtype per argument, contiguous and read-only (numba compiles, and caches, one kernel
    per signature, and a writable array is another type than a read-only one: the audit's
    views of Arrow buffers and the arrays built here gave three, each loaded by every pool
    process before its first task, 37 ms each). A view: the caller's array stays as it is."""
    if name.endswith("_offsets"):
        dtype: type = np.int64
    elif name.endswith("_bytes"):
        dtype = np.uint8
    else:
        dtype = _DTYPES[name]
    view: np.ndarray = np.ascontiguousarray(values, dtype=dtype).view()
    view.flags.writeable = False
    return view


def _check_layout(args: dict[str, np.ndarray]) -> None:
    """The shapes the kernels rely on (they check no index): ValueError where one is off."""

    def fail(what: str) -> None:
        raise ValueError(f"ProblemBatch: {what}")

    def csr(offsets: str, count: int, *flat: str) -> None:
        o = args[offsets]
        if len(o) != count + 1:
            fail(f"{offsets} has {len(o)} entries, expected {count + 1}")
        if count and (o[0] < 0 or np.any(np.diff(o) < 0)):
            fail(f"{offsets} is not non-decreasing from 0 or more")
        for name in flat:
            if o[-1] > len(args[name]):
                fail(f"{offsets} reaches past the end of {name}")

    n_problems = len(args["assignor"])
    n_members = len(args["member_id_offsets"]) - 1
    n_topics = len(args["topic_offsets"]) - 1
    csr("topic_offsets", n_topics, "topic_bytes")
    csr("member_offsets", n_problems)
    m = args["member_offsets"]
    if m[0] != 0 or m[-1] != n_members:
        fail("member_offsets must run from 0 to the number of members")
    csr("count_offsets", n_problems, "count_topic", "count_partitions")
    for name in ("member_id", "instance_id", "user_data"):
        csr(f"{name}_offsets", n_members, f"{name}_bytes")
    csr("topic_list_offsets", n_members, "topic_list")
    csr("owned_offsets", n_members, "owned_topic", "owned_partition")
    for name in ("has_instance_id", "generation", "has_user_data"):
        if len(args[name]) != n_members:
            fail(f"{name} has {len(args[name])} entries, expected {n_members}")
    if len(args["count_topic"]) != len(args["count_partitions"]) or len(args["owned_topic"]) != len(
        args["owned_partition"]
    ):
        fail("paired arrays differ in length")
    for name in ("count_topic", "topic_list", "owned_topic"):
        ids = args[name]
        if len(ids) and (ids.min() < 0 or ids.max() >= n_topics):
            fail(f"{name} holds an id outside the topic table")
    if n_problems and (args["assignor"].min() < RANGE or args["assignor"].max() > COOPERATIVE_STICKY):
        fail("an unknown assignor code")


def assign_arrays(batch: ProblemBatch) -> AssignmentBatch:
    """Run the kernels over a batch (one thread; they release the GIL)."""
    args = {f.name: _kernel_arg(f.name, getattr(batch, f.name)) for f in dataclasses.fields(batch)}
    _check_layout(args)
    return AssignmentBatch(*_assign_batch(_Inputs(**args)))


def _csr(chunks: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(chunks) + 1, np.int64)
    np.cumsum([len(c) for c in chunks], out=offsets[1:])
    return offsets, np.frombuffer(b"".join(chunks), np.uint8).copy()


def _offsets(lengths: Sequence[int]) -> np.ndarray:
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


Problem = tuple[str, Mapping[str, int], Sequence[Subscription]]  # assign()'s arguments


def _encodable(problem: Problem) -> bool:
    """Strings the batch can carry: UTF-8 encodable (Python strs may hold lone surrogates)."""
    _, counts, subscriptions = problem
    strings = [*counts]
    for s in subscriptions:
        strings += [s.member_id, *s.topics, *(t for t, _ in s.owned_partitions)]
        if s.group_instance_id is not None:
            strings.append(s.group_instance_id)
    try:
        for text in strings:
            text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def build_batch(problems: Sequence[Problem]) -> tuple[ProblemBatch, list[str]]:
    """The arrays of `problems` (assignor name, partitions per topic, subscriptions), and the
    batch's topic names (topic id -> name). For tests and small callers: a loop per member."""
    topic_ids: dict[str, int] = {}

    def topic_id(name: str) -> int:
        return topic_ids.setdefault(name, len(topic_ids))

    assignors, member_counts, count_lengths, count_topic, count_partitions = [], [], [], [], []
    ids, instances, has_instance, topic_lengths, topic_list = [], [], [], [], []
    owned_lengths, owned_topic, owned_partition, generations, user_data, has_user_data = [], [], [], [], [], []
    for name, counts, subscriptions in problems:
        assignors.append(ASSIGNOR_CODES[name])
        member_counts.append(len(subscriptions))
        count_lengths.append(len(counts))
        for topic, n in counts.items():
            count_topic.append(topic_id(topic))
            count_partitions.append(n)
        for s in subscriptions:
            ids.append(s.member_id.encode())
            instances.append((s.group_instance_id or "").encode())
            has_instance.append(s.group_instance_id is not None)
            topic_lengths.append(len(s.topics))
            topic_list += [topic_id(t) for t in s.topics]
            owned_lengths.append(len(s.owned_partitions))
            owned_topic += [topic_id(t) for t, _ in s.owned_partitions]
            owned_partition += [p for _, p in s.owned_partitions]
            generations.append(-1 if s.generation_id is None else s.generation_id)
            user_data.append(s.user_data or b"")
            has_user_data.append(s.user_data is not None)
    names = list(topic_ids)
    topic_offsets, topic_bytes = _csr([t.encode() for t in names])
    id_offsets, id_bytes = _csr(ids)
    instance_offsets, instance_bytes = _csr(instances)
    user_data_offsets, user_data_bytes = _csr(user_data)
    batch = ProblemBatch(
        topic_offsets=topic_offsets,
        topic_bytes=topic_bytes,
        assignor=np.array(assignors, np.int8),
        member_offsets=_offsets(member_counts),
        count_offsets=_offsets(count_lengths),
        count_topic=np.array(count_topic, np.int32),
        count_partitions=np.array(count_partitions, np.int32),
        member_id_offsets=id_offsets,
        member_id_bytes=id_bytes,
        instance_id_offsets=instance_offsets,
        instance_id_bytes=instance_bytes,
        has_instance_id=np.array(has_instance, np.bool_),
        topic_list_offsets=_offsets(topic_lengths),
        topic_list=np.array(topic_list, np.int32),
        owned_offsets=_offsets(owned_lengths),
        owned_topic=np.array(owned_topic, np.int32),
        owned_partition=np.array(owned_partition, np.int32),
        generation=np.array(generations, np.int32),
        user_data_offsets=user_data_offsets,
        user_data_bytes=user_data_bytes,
        has_user_data=np.array(has_user_data, np.bool_),
    )
    return batch, names


def same_result(fast: dict | AssignorError, reference: dict | AssignorError) -> bool:
    """Whether an assign_batch result (not a FALLBACK) is what ``assign`` gave: the same
    partitions per member, or an AssignorError naming the same Java exception."""
    if isinstance(reference, AssignorError):
        return isinstance(fast, AssignorError) and fast.java_exception == reference.java_exception
    return fast == reference


def assign_batch(problems: Sequence[Problem]) -> list[dict[str, list[TopicPartition]] | AssignorError | None]:
    """``assign`` over many problems through the kernels: per problem its result (as
    ``assign`` returns it), the AssignorError ``assign`` raises, or None where the kernels
    FALLBACK."""
    carried = [i for i, problem in enumerate(problems) if _encodable(problem)]
    batch, names = build_batch([problems[i] for i in carried])
    answer = assign_arrays(batch)
    results: list[dict[str, list[TopicPartition]] | AssignorError | None] = [None] * len(problems)
    offsets = answer.assigned_offsets
    for row, i in enumerate(carried):
        if answer.status[row] == ERROR:
            results[i] = AssignorError(JAVA_EXCEPTIONS[answer.error[row]])
        elif answer.status[row] == OK:
            out: dict[str, list[TopicPartition]] = {}
            g = int(batch.member_offsets[row])
            for s in problems[i][2]:
                lo, hi = offsets[g], offsets[g + 1]
                out[s.member_id] = sorted(
                    (names[t], int(q))
                    for t, q in zip(answer.assigned_topic[lo:hi].tolist(), answer.assigned_partition[lo:hi].tolist())
                )
                g += 1
            results[i] = out
    return results
