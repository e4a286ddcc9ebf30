"""Kafka's four assignors as numba kernels over many problems at once (the compiled path of
``lib.assignors.assign``, which stays the reference).

A batch of problems is a ``ProblemBatch`` of flat numpy arrays (CSR: an ``*_offsets`` array of
n + 1 positions into a flat array), laid out so that it can be filled from the Arrow buffers of
the GroupMetadata members column without a Python loop per member. ``assign_arrays`` returns, per
member, its partitions, and per problem a status: OK (equal to ``assign``), ERROR (``assign``
raises ``AssignorError``; ``error`` names the Java exception) or FALLBACK (a case the kernels do
not cover: run ``assign`` for it).

Covered in numba: range, roundrobin, and the sticky assignors' constrained builder (every member
subscribes to the same topics) with everything that feeds it: StickyAssignor's v0/v1 user data,
owned partitions and generations resolving claims, CooperativeStickyAssignor's holding back of
partitions that change owner. Java's HashMap iteration order of the members is reproduced
(String.hashCode over UTF-16 units, the table's size and resizes); strings compare as
String.compareTo does (UTF-16 units).

FALLBACK: the general builder (members subscribing to different topics); a HashMap bin reaching
9 keys (javautil's tree bins); a member id listed twice; a string that is not valid UTF-8; a
member's user data naming a topic in malformed UTF-8 when some topic's name holds U+FFFD (the
replacement the malformed name decodes to could match it); a topic listed twice in one problem's
partition counts; more than 256 owned partitions outside their topic's range in one problem.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numba import njit

from lib.assignors.javautil import AssignorError
from lib.assignors.model import Subscription, TopicPartition
from lib.numba_cache import use_stable_zip_cache

use_stable_zip_cache(__file__)  # before the first @njit(cache=True): see lib.numba_cache

# assignor codes (ProblemBatch.assignor), in lib.assignors.ASSIGNOR_NAMES order
RANGE, ROUNDROBIN, STICKY, COOPERATIVE_STICKY = 0, 1, 2, 3
ASSIGNOR_CODES = {"range": RANGE, "roundrobin": ROUNDROBIN, "sticky": STICKY, "cooperative-sticky": COOPERATIVE_STICKY}
# per-problem status
OK, ERROR, FALLBACK = 0, 1, 2
# AssignmentBatch.error: an index into JAVA_EXCEPTIONS
ILLEGAL_ARGUMENT, ARITHMETIC, ILLEGAL_STATE, CONCURRENT_MODIFICATION, NO_SUCH_ELEMENT = 0, 1, 2, 3, 4
JAVA_EXCEPTIONS = (
    "IllegalArgumentException",
    "ArithmeticException",
    "IllegalStateException",
    "ConcurrentModificationException",
    "NoSuchElementException",
)

_MAX_OUT_OF_RANGE = 256  # owned partitions beyond their topic's count, per problem (each a linear lookup)
_TREEIFY_THRESHOLD = 8  # HashMap: a put into a bin already holding 8 keys calls treeifyBin


@dataclass(frozen=True)
class ProblemBatch:
    """Many assignment problems as flat arrays. ``*_offsets`` are int64 CSR offsets (n + 1
    entries, first 0); ids are int32; "bytes" are uint8 arrays.

    Topics, batch-wide (every name the problems mention, each once):
        topic_offsets[T+1], topic_bytes: the names in UTF-8.
    Problems (P):
        assignor[P] int8: RANGE, ROUNDROBIN, STICKY, COOPERATIVE_STICKY.
        member_offsets[P+1]: the problem's members, a range of the member arrays, in the
            order ``assign`` takes them (the record's: HashMap insertion order).
        count_offsets[P+1], count_topic, count_partitions (int32): the partition count of
            each topic the metadata knows (a topic at most once per problem; counts <= 0 and
            topics nobody subscribes to are ignored, as ``assign`` ignores them).
    Members (M):
        member_id_offsets[M+1], member_id_bytes: member ids, UTF-8.
        instance_id_offsets[M+1], instance_id_bytes, has_instance_id[M] bool: group.instance.id
            (null where has_instance_id is False).
        topic_list_offsets[M+1], topic_list: subscribed topic ids as the member lists them
            (duplicates and topics without metadata included).
        owned_offsets[M+1], owned_topic, owned_partition (int32): ownedPartitions.
        generation[M] int32: the subscription's generation id; negative: absent.
        user_data_offsets[M+1], user_data_bytes, has_user_data[M] bool: the subscription's
            user data (null where has_user_data is False; empty is not null).
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


@njit(cache=True, nogil=True)
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
    """UTF-16 units of every string (CSR), String.hashCode of each, and whether its UTF-8 was
    valid (an invalid one gets no units)."""
    count = len(offsets) - 1
    units = np.empty(len(data), np.uint16)
    unit_offsets = np.empty(count + 1, np.int64)
    hashes = np.empty(count, np.int64)
    valid = np.empty(count, np.bool_)
    at = 0
    for s in range(count):
        unit_offsets[s] = at
        n, ok = _utf8_scan(data, offsets[s], offsets[s + 1], units, at)
        valid[s] = ok
        h = np.int64(0)
        if ok:
            for k in range(at, at + n):
                h = (h * 31 + np.int64(units[k])) & 0xFFFFFFFF
            at += n
        hashes[s] = h  # unsigned: only its bits feed HashMap.hash
    unit_offsets[count] = at
    return units, unit_offsets, hashes, valid


@njit(cache=True, nogil=True, inline="always")
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
def _string_ranks(units, offsets):
    """Each string's rank in String.compareTo order (a bottom-up merge sort)."""
    count = len(offsets) - 1
    idx = np.arange(count).astype(np.int64)
    tmp = np.empty(count, np.int64)
    width = 1
    while width < count:
        for lo in range(0, count, 2 * width):
            mid = min(lo + width, count)
            hi = min(lo + 2 * width, count)
            i, j, k = lo, mid, lo
            while i < mid and j < hi:
                if _compare(units, offsets, idx[j], idx[i]) < 0:
                    tmp[k] = idx[j]
                    j += 1
                else:
                    tmp[k] = idx[i]
                    i += 1
                k += 1
            while i < mid:
                tmp[k] = idx[i]
                i += 1
                k += 1
            while j < hi:
                tmp[k] = idx[j]
                j += 1
                k += 1
        idx, tmp = tmp, idx
        width *= 2
    ranks = np.empty(count, np.int64)
    for r in range(count):
        ranks[idx[r]] = r
    return ranks


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


@njit(cache=True, nogil=True)
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


@njit(cache=True, nogil=True, inline="always")
def _member_info_less(a, b, id_units, id_offsets, inst_units, inst_offsets, has_instance):
    """AbstractPartitionAssignor.MemberInfo.compareTo(a, b) < 0: static members first, by
    group.instance.id; then dynamic ones by member id."""
    if has_instance[a] != has_instance[b]:
        return has_instance[a]
    if has_instance[a]:
        return _compare(inst_units, inst_offsets, a, b) < 0
    return _compare(id_units, id_offsets, a, b) < 0


@njit(cache=True, nogil=True)
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


@njit(cache=True, nogil=True)
def _sort_by_id(members, start, end, first, id_units, id_offsets):
    """Sort members[start:end] by member id (String.compareTo); ids are distinct."""
    for i in range(start + 1, end):
        v = members[i]
        k = i
        while k > start and _compare(id_units, id_offsets, first + v, first + members[k - 1]) < 0:
            members[k] = members[k - 1]
            k -= 1
        members[k] = v


@njit(cache=True, nogil=True, inline="always")
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


# --- big-endian reads of the sticky user data ---------------------------------------------------


@njit(cache=True, nogil=True, inline="always")
def _int32(data, at):
    v = (np.int64(data[at]) << 24) | (np.int64(data[at + 1]) << 16) | (np.int64(data[at + 2]) << 8) | data[at + 3]
    return v - (1 << 32) if v >= (1 << 31) else v


@njit(cache=True, nogil=True, inline="always")
def _int16(data, at):
    v = (np.int64(data[at]) << 8) | data[at + 1]
    return v - (1 << 16) if v >= (1 << 15) else v


# --- one problem ---------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def _slot_of(t, p, known_n, known_base, slot_k, slot_p, n_slots, total):
    """The slot of partition p of known topic t: known_base[t] + p in range, else an overflow
    slot after `total` (registered on first sight). -> (slot, n_slots), slot -1 past the limit."""
    if 0 <= p < known_n[t]:
        return known_base[t] + p, n_slots
    for s in range(total, n_slots):
        if slot_k[s] == t and slot_p[s] == p:
            return s, n_slots
    if n_slots - total >= _MAX_OUT_OF_RANGE:
        return -1, n_slots
    slot_k[n_slots] = t
    slot_p[n_slots] = p
    return n_slots, n_slots + 1


@njit(cache=True, nogil=True)
def _assign_batch(
    topic_offsets,
    topic_bytes,
    assignor,
    member_offsets,
    count_offsets,
    count_topic,
    count_partitions,
    member_id_offsets,
    member_id_bytes,
    instance_id_offsets,
    instance_id_bytes,
    has_instance_id,
    topic_list_offsets,
    topic_list,
    owned_offsets,
    owned_topic,
    owned_partition,
    generation,
    user_data_offsets,
    user_data_bytes,
    has_user_data,
):
    n_problems = len(assignor)
    n_topics = len(topic_offsets) - 1
    n_members = len(member_id_offsets) - 1

    # the strings, as Java sees them
    topic_units, topic_unit_offsets, _, topic_valid = _java_strings(topic_bytes, topic_offsets)
    topic_rank = _string_ranks(topic_units, topic_unit_offsets)
    topic_has_fffd = _has_replacement_char(topic_bytes, topic_offsets)
    id_units, id_offsets, id_hash, id_valid = _java_strings(member_id_bytes, member_id_offsets)
    inst_units, inst_offsets, _, inst_valid = _java_strings(instance_id_bytes, instance_id_offsets)

    # each problem's room: its partitions, plus what its members may claim to own
    max_m = 0
    max_slots = 1
    max_topics = 1
    max_claims = 1
    room = np.zeros(n_problems + 1, np.int64)
    for p in range(n_problems):
        first, last = member_offsets[p], member_offsets[p + 1]
        max_m = max(max_m, last - first)
        partitions = 0
        for j in range(count_offsets[p], count_offsets[p + 1]):
            partitions += max(0, count_partitions[j])
        claims = 0
        if assignor[p] == STICKY:
            for g in range(first, last):
                claims += (user_data_offsets[g + 1] - user_data_offsets[g]) // 4
        elif assignor[p] == COOPERATIVE_STICKY:
            claims = owned_offsets[last] - owned_offsets[first]
        max_claims = max(max_claims, claims)
        max_slots = max(max_slots, partitions + min(claims, _MAX_OUT_OF_RANGE))
        max_topics = max(max_topics, count_offsets[p + 1] - count_offsets[p])
        room[p + 1] = room[p] + partitions + claims

    # outputs: each problem writes its members' partitions into its room, compacted at the end
    status = np.zeros(n_problems, np.int8)
    error = np.zeros(n_problems, np.int8)
    member_count = np.zeros(n_members, np.int64)
    out_topic = np.empty(room[n_problems], np.int32)
    out_partition = np.empty(room[n_problems], np.int32)

    # scratch, sized for the largest problem and reused
    table = 16
    while table * 3 < max_m * 4 + 64:
        table *= 2
    bins = np.empty(4 * table, np.int64)
    member_scratch = np.empty(max_m + 1, np.int64)
    order = np.empty(max_m + 1, np.int64)
    sorted_members = np.empty(max_m + 1, np.int64)
    topic_stamp = np.full(n_topics, -1, np.int64)  # == p: the topic is subscribed in problem p
    known_stamp = np.full(n_topics, -1, np.int64)  # == p: topic_known holds its index in problem p
    topic_known = np.empty(n_topics, np.int64)
    known_topic = np.empty(max_topics, np.int64)  # known topic index -> batch topic, in Java order
    known_key = np.empty(max_topics, np.int64)
    known_n = np.empty(max_topics, np.int64)
    known_base = np.empty(max_topics, np.int64)
    subscribes = np.zeros((max_m + 1) * max_topics, np.bool_)  # member * n_known + known topic
    slot_k = np.empty(max_slots, np.int64)
    slot_p = np.empty(max_slots, np.int64)
    # the sticky assignors
    claim_start = np.empty(max_m + 1, np.int64)
    claim_end = np.empty(max_m + 1, np.int64)
    claim_generation = np.empty(max_m + 1, np.int64)
    claim_slot = np.empty(max_claims, np.int64)
    owned_end = np.empty(max_m + 1, np.int64)  # consumerToOwnedPartitions: claim_slot[claim_start:owned_end]
    sort_key = np.empty(max_claims + max_slots, np.int64)
    sort_value = np.empty(max_claims + max_slots, np.int64)
    previous_owner = np.empty(max_slots, np.int64)
    claimed_twice = np.empty(max_slots, np.bool_)
    maybe_revoked = np.empty(max_slots, np.int64)
    transferring = np.empty(max_slots, np.int64)
    assigned_mark = np.empty(max_slots, np.int64)
    unassigned = np.empty(max_slots, np.int64)
    under_min = np.empty(max_m + 1, np.int64)
    exactly_min = np.empty(max_m + 1 + max_slots, np.int64)
    # the assignment: (member, slot) in the order given, with holes where one was taken back
    assigned_member = np.empty(max_claims + max_slots, np.int64)
    assigned_slot = np.empty(max_claims + max_slots, np.int64)
    size = np.empty(max_m + 1, np.int64)  # each member's list's length, as Java's list.size()

    for p in range(n_problems):
        first = member_offsets[p]
        m = member_offsets[p + 1] - first
        code = assignor[p]
        status[p] = FALLBACK

        # members: valid strings, the HashMap's order
        usable = True
        for g in range(first, first + m):
            if not id_valid[g] or (has_instance_id[g] and not inst_valid[g]):
                usable = False
            for j in range(topic_list_offsets[g], topic_list_offsets[g + 1]):
                if not topic_valid[topic_list[j]]:
                    usable = False
        if not usable or not _hashmap_order(id_hash, id_units, id_offsets, first, m, order, bins, member_scratch):
            continue

        # topics: those subscribed with partitions (assign()'s counts), in Java order
        for g in range(first, first + m):
            for j in range(topic_list_offsets[g], topic_list_offsets[g + 1]):
                topic_stamp[topic_list[j]] = p
        n_known = 0
        duplicate_topic = False
        for j in range(count_offsets[p], count_offsets[p + 1]):
            t = count_topic[j]
            if known_stamp[t] == p:
                duplicate_topic = True
            known_stamp[t] = p
            topic_known[t] = -1
            if count_partitions[j] > 0 and topic_stamp[t] == p:
                known_key[n_known] = topic_rank[t]
                known_topic[n_known] = t
                n_known += 1
        if duplicate_topic:
            continue
        _sort_keys(known_key, known_topic, 0, n_known)
        total = 0
        for k in range(n_known):
            t = known_topic[k]
            topic_known[t] = k
            known_base[k] = total
            for j in range(count_offsets[p], count_offsets[p + 1]):
                if count_topic[j] == t:
                    known_n[k] = count_partitions[j]
            for q in range(known_n[k]):
                slot_k[total + q] = k
                slot_p[total + q] = q
            total += known_n[k]
        subscribes[: m * n_known] = False
        for i in range(m):
            g = first + i
            for j in range(topic_list_offsets[g], topic_list_offsets[g + 1]):
                t = topic_list[j]
                if known_stamp[t] == p and topic_known[t] >= 0:
                    subscribes[i * n_known + topic_known[t]] = True

        n_assigned = 0
        outcome = OK
        if code == RANGE or code == ROUNDROBIN:
            sorted_members[:m] = order[:m]
            _sort_member_info(sorted_members, m, first, id_units, id_offsets, inst_units, inst_offsets, has_instance_id)
            if code == RANGE:
                n_assigned = _range(
                    m,
                    n_known,
                    known_n,
                    known_base,
                    subscribes,
                    sorted_members,
                    member_scratch,
                    assigned_member,
                    assigned_slot,
                )
            elif m == 0:
                outcome = ERROR
                error[p] = ILLEGAL_ARGUMENT  # CircularIterator of no members
            else:
                n_assigned = _roundrobin(
                    m, n_known, known_n, known_base, subscribes, sorted_members, assigned_member, assigned_slot
                )
        else:
            # memberData: the partitions each member claims, as slots (-1: a topic not known)
            n_claims = 0
            n_slots = total
            for i in range(m):
                g = first + i
                claim_start[i] = n_claims
                if code == STICKY:
                    n_claims, n_slots, member_generation, ok = _sticky_member_data(
                        user_data_bytes,
                        user_data_offsets[g],
                        user_data_offsets[g + 1],
                        has_user_data[g],
                        topic_bytes,
                        topic_offsets,
                        topic_has_fffd,
                        known_topic,
                        n_known,
                        known_n,
                        known_base,
                        slot_k,
                        slot_p,
                        n_slots,
                        total,
                        claim_slot,
                        n_claims,
                    )
                    claim_generation[i] = member_generation
                    if not ok:
                        usable = False
                else:
                    for j in range(owned_offsets[g], owned_offsets[g + 1]):
                        t = owned_topic[j]
                        s = -1
                        if known_stamp[t] == p and topic_known[t] >= 0:
                            s, n_slots = _slot_of(
                                topic_known[t], owned_partition[j], known_n, known_base, slot_k, slot_p, n_slots, total
                            )
                            if s < 0:
                                usable = False
                        claim_slot[n_claims] = s
                        n_claims += 1
                    if generation[g] >= 0:
                        claim_generation[i] = generation[g]
                    elif not has_user_data[g]:
                        claim_generation[i] = -1  # Optional.empty(), read as DEFAULT_GENERATION
                    elif user_data_offsets[g + 1] - user_data_offsets[g] < 4:
                        claim_generation[i] = -1  # unparsable: DEFAULT_GENERATION
                    else:
                        claim_generation[i] = _int32(user_data_bytes, user_data_offsets[g])
                claim_end[i] = n_claims
            if not usable:
                continue

            all_equal = _resolve_claims(
                m,
                first,
                order,
                topic_list_offsets,
                topic_list,
                topic_stamp,
                n_topics,
                generation,
                claim_start,
                claim_end,
                claim_generation,
                claim_slot,
                owned_end,
                previous_owner,
                claimed_twice,
                n_slots,
                p,
            )
            if not all_equal:
                continue  # the general builder: not compiled
            if m == 0:
                outcome = ERROR
                error[p] = ARITHMETIC  # totalPartitionsCount % numberOfConsumers
            else:
                n_assigned, err = _constrained(
                    m,
                    first,
                    order,
                    total,
                    n_slots,
                    slot_k,
                    slot_p,
                    claim_start,
                    owned_end,
                    claim_slot,
                    claimed_twice,
                    maybe_revoked,
                    transferring,
                    assigned_mark,
                    unassigned,
                    under_min,
                    exactly_min,
                    sort_key,
                    sort_value,
                    assigned_member,
                    assigned_slot,
                    size,
                    id_units,
                    id_offsets,
                )
                if err >= 0:
                    outcome = ERROR
                    error[p] = err
                elif code == COOPERATIVE_STICKY:
                    # adjustAssignment: a partition changing owner waits for its revocation (the
                    # first of its new owner's entries for it leaves)
                    for e in range(n_assigned):
                        s = assigned_slot[e]
                        if transferring[s] >= 0 and assigned_member[e] == transferring[s]:
                            assigned_member[e] = -1
                            transferring[s] = -1

        status[p] = outcome
        if outcome != OK:
            continue
        # the members' partitions into the problem's room, member by member
        at = room[p]
        for e in range(n_assigned):
            if assigned_member[e] >= 0:
                member_count[first + assigned_member[e]] += 1
        start = at
        for i in range(m):
            member_scratch[i] = start
            start += member_count[first + i]
        for e in range(n_assigned):
            i = assigned_member[e]
            if i >= 0:
                s = assigned_slot[e]
                out_topic[member_scratch[i]] = known_topic[slot_k[s]]
                out_partition[member_scratch[i]] = slot_p[s]
                member_scratch[i] += 1

    # compact the rooms into one CSR over the members
    assigned_offsets = np.zeros(n_members + 1, np.int64)
    for g in range(n_members):
        assigned_offsets[g + 1] = assigned_offsets[g] + member_count[g]
    assigned_topic = np.empty(assigned_offsets[n_members], np.int32)
    assigned_partition = np.empty(assigned_offsets[n_members], np.int32)
    for p in range(n_problems):
        if status[p] != OK:
            continue
        src = room[p]
        first, last = member_offsets[p], member_offsets[p + 1]
        n = assigned_offsets[last] - assigned_offsets[first]
        dst = assigned_offsets[first]
        assigned_topic[dst : dst + n] = out_topic[src : src + n]
        assigned_partition[dst : dst + n] = out_partition[src : src + n]
    return status, error, assigned_offsets, assigned_topic, assigned_partition


# --- range and roundrobin ------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def _range(m, n_known, known_n, known_base, subscribes, sorted_members, consumers, assigned_member, assigned_slot):
    """RangeAssignor.assignPartitions without racks: per topic, its members in MemberInfo order
    take contiguous ranges, the first `partitions % members` one more."""
    n_assigned = 0
    for k in range(n_known):
        c = 0
        for r in range(m):
            i = sorted_members[r]
            if subscribes[i * n_known + k]:
                consumers[c] = i
                c += 1
        if c == 0:
            continue
        n = known_n[k]
        per_consumer, with_extra = n // c, n % c
        next_partition = 0
        for r in range(c):
            if next_partition >= n:
                break
            count = min(per_consumer + (1 if with_extra > 0 else 0), n - next_partition)
            if count == 0:
                continue
            for q in range(next_partition, next_partition + count):
                assigned_member[n_assigned] = consumers[r]
                assigned_slot[n_assigned] = known_base[k] + q
                n_assigned += 1
            next_partition += count
            if count > per_consumer:
                with_extra -= 1
    return n_assigned


@njit(cache=True, nogil=True)
def _roundrobin(m, n_known, known_n, known_base, subscribes, sorted_members, assigned_member, assigned_slot):
    """RoundRobinAssignor: every partition (topics in String order) to the next member in
    MemberInfo order that subscribes to its topic."""
    n_assigned = 0
    position = 0
    for k in range(n_known):
        for q in range(known_n[k]):
            while not subscribes[sorted_members[position] * n_known + k]:
                position = (position + 1) % m
            assigned_member[n_assigned] = sorted_members[position]
            assigned_slot[n_assigned] = known_base[k] + q
            n_assigned += 1
            position = (position + 1) % m
    return n_assigned


# --- the sticky assignors --------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def _read_previous_assignment(
    data,
    at,
    end,
    topic_bytes,
    topic_offsets,
    topic_has_fffd,
    known_topic,
    n_known,
    known_n,
    known_base,
    slot_k,
    slot_p,
    n_slots,
    total,
    claim_slot,
    n_claims,
):
    """StickyAssignor's previous_assignment array (Schema.read's checks), each partition as
    its slot (-1: a topic not known). -> (position after it or -1 if it does not parse,
    n_claims, n_slots, usable)."""
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
        name_start = at
        at += length
        # which known topic the name is: equal valid UTF-8 is the same Java string; malformed
        # UTF-8 decodes to a string with U+FFFD, which can only be a topic that holds one
        k = -1
        _, valid = _utf8_scan(data, name_start, at, slot_k[:0], 0)
        for kk in range(n_known):
            t = known_topic[kk]
            if not valid:
                if topic_has_fffd[t]:
                    return -1, n_claims, n_slots, False
                continue
            if topic_offsets[t + 1] - topic_offsets[t] != length:
                continue
            same = True
            for b in range(length):
                if topic_bytes[topic_offsets[t] + b] != data[name_start + b]:
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
                s, n_slots = _slot_of(k, partition, known_n, known_base, slot_k, slot_p, n_slots, total)
                if s < 0:
                    return -1, n_claims, n_slots, False
            claim_slot[n_claims] = s
            n_claims += 1
    return at, n_claims, n_slots, True


@njit(cache=True, nogil=True)
def _sticky_member_data(
    data,
    start,
    end,
    has_data,
    topic_bytes,
    topic_offsets,
    topic_has_fffd,
    known_topic,
    n_known,
    known_n,
    known_base,
    slot_k,
    slot_p,
    n_slots,
    total,
    claim_slot,
    n_claims,
):
    """StickyAssignor.memberData: the v1 layout (partitions, generation), else v0 (partitions,
    no generation), else nothing with DEFAULT_GENERATION. -> (n_claims, n_slots, member
    generation (-1 for none), usable)."""
    if not has_data or end == start:
        return n_claims, n_slots, -1, True
    before = n_claims
    at, n_claims, n_slots, usable = _read_previous_assignment(
        data,
        start,
        end,
        topic_bytes,
        topic_offsets,
        topic_has_fffd,
        known_topic,
        n_known,
        known_n,
        known_base,
        slot_k,
        slot_p,
        n_slots,
        total,
        claim_slot,
        n_claims,
    )
    if at < 0:
        return before, n_slots, -1, usable  # neither layout parses
    if end - at >= 4:
        return n_claims, n_slots, _int32(data, at), usable  # v1
    return n_claims, n_slots, -1, usable  # v0: no generation


@njit(cache=True, nogil=True)
def _remove_first(claim_slot, start, end, s):
    """List.remove(Object) on claim_slot[start:end]; -> the new end."""
    for j in range(start, end):
        if claim_slot[j] == s:
            for k in range(j, end - 1):
                claim_slot[k] = claim_slot[k + 1]
            return end - 1
    return end


@njit(cache=True, nogil=True)
def _resolve_claims(
    m,
    first,
    order,
    topic_list_offsets,
    topic_list,
    topic_stamp,
    n_topics,
    generation,
    claim_start,
    claim_end,
    claim_generation,
    claim_slot,
    owned_end,
    previous_owner,
    claimed_twice,
    n_slots,
    p,
):
    """AbstractStickyAssignor.allSubscriptionsEqual: whether all members list the same topics,
    and each member's still-valid owned partitions (claims resolved in HashMap order) left in
    claim_slot[claim_start:owned_end] (the claims are consumed in place: a member's list only
    grows from its own claims, so it never overtakes them)."""
    previous_owner[:n_slots] = -1
    claimed_twice[:n_slots] = False
    all_equal = True
    reference_size = 0
    stamp = -2 - p  # topic_stamp marks the reference set with this (p marks "subscribed")
    for idx in range(m):
        i = order[idx]
        g = first + i
        lo, hi = topic_list_offsets[g], topic_list_offsets[g + 1]
        if reference_size == 0:
            for j in range(lo, hi):
                if topic_stamp[topic_list[j]] != stamp:
                    topic_stamp[topic_list[j]] = stamp
                    reference_size += 1
        elif all_equal:
            if hi - lo != reference_size:
                all_equal = False
            else:
                for j in range(lo, hi):
                    if topic_stamp[topic_list[j]] != stamp:
                        all_equal = False
                        break

        member_generation = claim_generation[i]
        end = claim_start[i]
        for j in range(claim_start[i], claim_end[i]):
            s = claim_slot[j]
            if s < 0:
                continue
            other = previous_owner[s]
            if other < 0:
                claim_slot[end] = s
                end += 1
                previous_owner[s] = i
                continue
            # the other claimant's generation comes from its Subscription, not its member data
            other_generation = generation[first + other] if generation[first + other] >= 0 else -1
            if member_generation >= other_generation:
                if member_generation == other_generation:
                    claimed_twice[s] = True  # nobody keeps it
                else:
                    claim_slot[end] = s
                    end += 1
                if other == i:
                    end = _remove_first(claim_slot, claim_start[i], end, s)
                else:
                    owned_end[other] = _remove_first(claim_slot, claim_start[other], owned_end[other], s)
                previous_owner[s] = i
        owned_end[i] = end
    # the topic stamps of this problem's subscribed topics were overwritten: restore "subscribed"
    for g in range(first, first + m):
        for j in range(topic_list_offsets[g], topic_list_offsets[g + 1]):
            topic_stamp[topic_list[j]] = p
    return all_equal


@njit(cache=True, nogil=True)
def _constrained(
    m,
    first,
    order,
    total,
    n_slots,
    slot_k,
    slot_p,
    claim_start,
    owned_end,
    claim_slot,
    claimed_twice,
    maybe_revoked,
    transferring,
    assigned_mark,
    unassigned,
    under_min,
    exactly_min,
    sort_key,
    sort_value,
    assigned_member,
    assigned_slot,
    size,
    id_units,
    id_offsets,
):
    """AbstractStickyAssignor.ConstrainedAssignmentBuilder.build. -> (entries in
    assigned_member/assigned_slot, Java exception code or -1)."""
    min_quota = total // m
    max_quota = (total + m - 1) // m
    expected_over_min = total % m
    current_over_min = 0
    maybe_revoked[:n_slots] = -1
    transferring[:n_slots] = -1
    assigned_mark[:n_slots] = 0
    size[:m] = 0
    n_assigned = 0
    n_under = 0
    exactly_head = exactly_tail = 0
    irregular = n_slots > total  # an owned partition beyond its topic: the walk below stalls

    # assignOwnedPartitions, in the HashMap's order
    for idx in range(m):
        i = order[idx]
        n = 0
        for j in range(claim_start[i], owned_end[i]):
            s = claim_slot[j]
            if not claimed_twice[s]:
                # by partition, then topic
                sort_key[n] = ((slot_p[s] + (1 << 31)) << 20) | slot_k[s]
                sort_value[n] = s
                n += 1
        _sort_keys(sort_key, sort_value, 0, n)
        keep = n
        if n < min_quota:
            under_min[n_under] = i
            n_under += 1
        elif n >= max_quota and current_over_min < expected_over_min:
            current_over_min += 1
            if current_over_min == expected_over_min:
                exactly_head = exactly_tail
            keep = max_quota
        else:
            keep = min_quota
            if current_over_min < expected_over_min:
                exactly_min[exactly_tail] = i
                exactly_tail += 1
        for r in range(n):
            s = sort_value[r]
            if r < keep:
                assigned_member[n_assigned] = i
                assigned_slot[n_assigned] = s
                n_assigned += 1
                size[i] += 1
                if assigned_mark[s] > 0:
                    irregular = True
                assigned_mark[s] += 1
            else:
                maybe_revoked[s] = i

    # getUnassignedPartitions: all partitions (topic, partition) less the assigned ones
    n_unassigned = 0
    if not irregular:
        for s in range(total):
            if assigned_mark[s] == 0:
                unassigned[n_unassigned] = s
                n_unassigned += 1
    else:
        n_unassigned = _walk_unassigned(
            total, n_assigned, assigned_slot, slot_k, slot_p, sort_key, sort_value, unassigned
        )

    _sort_by_id(under_min, 0, n_under, first, id_units, id_offsets)
    _sort_by_id(exactly_min, exactly_head, exactly_tail, first, id_units, id_offsets)

    # assignRoundRobin, with LinkedList's iterator over underMinQuota
    mod_count = 0
    it_next, it_last, it_expected = 0, -1, 0
    for r in range(n_unassigned):
        s = unassigned[r]
        if it_next < n_under:
            if mod_count != it_expected:
                return n_assigned, CONCURRENT_MODIFICATION
            it_last = it_next
            it_next += 1
            consumer = under_min[it_last]
        elif n_under == 0 and exactly_head == exactly_tail:
            return n_assigned, ILLEGAL_STATE  # "No more unfilled consumers to be assigned."
        elif n_under == 0:
            consumer = exactly_min[exactly_head]
            exactly_head += 1
        else:
            it_next, it_last, it_expected = 1, 0, mod_count
            consumer = under_min[0]

        # assignNewPartition
        assigned_member[n_assigned] = consumer
        assigned_slot[n_assigned] = s
        n_assigned += 1
        size[consumer] += 1
        if (maybe_revoked[s] >= 0 and maybe_revoked[s] != consumer) or claimed_twice[s]:
            transferring[s] = consumer
        if size[consumer] == min_quota:
            # iterator.remove()
            if mod_count != it_expected:
                return n_assigned, CONCURRENT_MODIFICATION
            if it_last < 0:
                return n_assigned, ILLEGAL_STATE
            for k in range(it_last, n_under - 1):
                under_min[k] = under_min[k + 1]
            n_under -= 1
            mod_count += 1
            if it_next > it_last:
                it_next -= 1
            it_last = -1
            it_expected = mod_count
            exactly_min[exactly_tail] = consumer
            exactly_tail += 1
        elif size[consumer] == max_quota:
            current_over_min += 1

    # verifyUnfilledMembers
    if n_under > 0:
        if current_over_min != expected_over_min:
            return n_assigned, ILLEGAL_STATE
        for r in range(n_under):
            if size[under_min[r]] != min_quota:
                return n_assigned, ILLEGAL_STATE
    return n_assigned, -1


@njit(cache=True, nogil=True)
def _walk_unassigned(total, n_assigned, assigned_slot, slot_k, slot_p, sort_key, sort_value, unassigned):
    """getUnassignedPartitions' two-pointer walk over every partition in (topic, partition)
    order, for the irregular case: an assigned partition beyond its topic's range (or a
    repeated one) stalls the pointer, after which every partition counts as unassigned."""
    n = 0
    for e in range(n_assigned):
        s = assigned_slot[e]
        sort_key[n] = (slot_k[s] << 33) | (slot_p[s] + (1 << 31))
        sort_value[n] = s
        n += 1
    if n == 0:
        for s in range(total):
            unassigned[s] = s
        return total
    sort_key[:n] = np.sort(sort_key[:n])
    n_unassigned = 0
    pointer = 0
    add_directly = False
    for s in range(total):
        key = (slot_k[s] << 33) | (slot_p[s] + (1 << 31))
        if add_directly or sort_key[pointer] != key:
            unassigned[n_unassigned] = s
            n_unassigned += 1
        elif pointer + 1 < n:
            pointer += 1
        else:
            add_directly = True
    return n_unassigned


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
    """One dtype per argument (numba compiles, and caches, one kernel per signature)."""
    if name.endswith("_offsets"):
        dtype: type = np.int64
    elif name.endswith("_bytes"):
        dtype = np.uint8
    else:
        dtype = _DTYPES[name]
    return np.ascontiguousarray(values, dtype=dtype)


def assign_arrays(batch: ProblemBatch) -> AssignmentBatch:
    """Run the kernels over a batch (one thread; the kernels release the GIL)."""
    args = [_kernel_arg(f.name, getattr(batch, f.name)) for f in dataclasses.fields(batch)]
    return AssignmentBatch(*_assign_batch(*args))


def _csr(chunks: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(chunks) + 1, np.int64)
    np.cumsum([len(c) for c in chunks], out=offsets[1:])
    return offsets, np.frombuffer(b"".join(chunks), np.uint8).copy()


def _offsets(lengths: Sequence[int]) -> np.ndarray:
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


Problem = tuple[str, Mapping[str, int], Sequence[Subscription]]


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
