"""GroupMetadataValue v0-v3 and its members' consumer-protocol bytes (spec 2.5 and 3) parsed by
numba into flat arrays, one per nesting level of the group_metadata struct, from which
lib.decode.fast builds the Arrow column without a Python object per value.

Each level is a 2-d array, a row per field and a column per item: a string or bytes field is
its start and length (-1: null), the start an offset into the segment or, past the segment's
length, into the decompressed bytes (as lib.decode.fast's row columns); a list field is the end
of the item's elements in the level below.

It reads only values lib.decode.group_metadata reads itself, and gives the same values.
Anything that reader hands back (to the schema-driven reader, or to the generic
consumer-protocol reader for member bytes it finds odd), and flexible v4, comes out flagged odd:
lib.decode.fast then decodes the batch with the Python decoder.

The helpers the kernel calls per value, member or string take the segment and the levels as
arguments and allocate nothing: they are compiled without numba's reference counting
(NO_REFCOUNT)."""

from __future__ import annotations

import numpy as np
from numba import njit

from lib.decode.numba_bytes import NO_REFCOUNT, i16, i32, i64, string16
from lib.numba_cache import use_stable_zip_cache

use_stable_zip_cache(__file__)  # before the first @njit(cache=True): see lib.numba_cache

# the levels below the values, in the order group_values returns them
MEMBERS, TOPICS, OWNED, OWNED_PARTITIONS, ASSIGNED, ASSIGNED_PARTITIONS = range(6)
# The fields of a level's items. Strings and bytes come first: their starts, then their lengths
# in the same order (so lib.decode.fast gathers them all in one pass over the items).
# a value's (VALUE_VARWIDTH: the Arrow fields of its strings, in order)
VALUE_VARWIDTH = ("protocol_type", "protocol", "leader")
(
    PROTOCOL_TYPE,
    PROTOCOL,
    LEADER,
    PROTOCOL_TYPE_LEN,
    PROTOCOL_LEN,
    LEADER_LEN,
    GENERATION,
    STATE_TIMESTAMP,
    MEMBERS_END,
) = range(9)
# a member's; SUBSCRIPTION_VERSION and ASSIGNMENT_VERSION are -1 where the bytes were not read
# (not the consumer protocol, or empty), and their fields are then null
MEMBER_VARWIDTH = (
    "member_id",
    "group_instance_id",
    "client_id",
    "client_host",
    "subscription_user_data",
    "rack_id",
    "assignment_user_data",
    "subscription_bytes",
    "assignment_bytes",
)
(
    MEMBER_ID,
    INSTANCE_ID,
    CLIENT_ID,
    CLIENT_HOST,
    SUBSCRIPTION_USER_DATA,
    RACK_ID,
    ASSIGNMENT_USER_DATA,
    SUBSCRIPTION,
    ASSIGNMENT,
    MEMBER_ID_LEN,
    INSTANCE_ID_LEN,
    CLIENT_ID_LEN,
    CLIENT_HOST_LEN,
    SUBSCRIPTION_USER_DATA_LEN,
    RACK_ID_LEN,
    ASSIGNMENT_USER_DATA_LEN,
    SUBSCRIPTION_LEN,
    ASSIGNMENT_LEN,
    REBALANCE_TIMEOUT,
    SESSION_TIMEOUT,
    SUBSCRIPTION_VERSION,
    TOPICS_END,
    OWNED_END,
    GENERATION_ID,
    ASSIGNMENT_VERSION,
    ASSIGNED_END,
) = range(26)
# a subscribed topic (TOPICS), and a topic with its partitions (OWNED, ASSIGNED; the partitions
# themselves are the one row of OWNED_PARTITIONS / ASSIGNED_PARTITIONS, int32): the Arrow field
# "topic", then the end of its partitions
TOPIC, TOPIC_LEN, PARTITIONS_END = range(3)
_FIELDS = (26, 2, 3, 1, 3, 1)  # rows of each level

# what the parsing helpers answer besides "level k is full" (k >= 0: grow it and parse the value
# again; a level grows only as far as items are read, whatever count the bytes claim)
OK, ODD = -1, -2


@njit(cache=True, **NO_REFCOUNT)
def _string(buf, p, end, nullable):
    """string16 compiled once for this module's dozen call sites: it is inlined in numba's IR
    (as the record kernel wants it), and inlined into each of them it took minutes to compile."""
    return string16(buf, p, end, nullable)


@njit(cache=True, **NO_REFCOUNT)
def _bytes32(buf, p, end, nullable):
    """(start, length, next position, ok) of int32-length bytes; a negative length is a null."""
    if p + 4 > end:
        return 0, -1, p, False
    n = i32(buf, p)
    p += 4
    if n < 0:
        return 0, -1, p, nullable
    if n > end - p:
        return 0, -1, p, False
    return p, n, p + n, True


@njit(cache=True, **NO_REFCOUNT)
def _count(buf, p, end):
    """(count, next position, ok) of an array: odd when negative or beyond the bytes left."""
    if p + 4 > end:
        return 0, p, False
    n = i32(buf, p)
    p += 4
    return n, p, 0 <= n <= end - p


@njit(cache=True, **NO_REFCOUNT)
def _topic_partitions(buf, p, end, base, topics, partitions, t, q, topics_level, partitions_level):
    """[Topic string, Partitions []int32] into `topics` from column t and `partitions` from q.
    Returns (status, next position, t, q)."""
    n, p, ok = _count(buf, p, end)
    if not ok:
        return ODD, p, t, q
    for _ in range(n):
        if t == topics.shape[1]:
            return topics_level, p, t, q
        start, length, p, ok = _string(buf, p, end, False)
        if not ok:
            return ODD, p, t, q
        k, p, ok = _count(buf, p, end)
        if not ok or 4 * k > end - p:
            return ODD, p, t, q
        if q + k > partitions.shape[1]:
            return partitions_level, p, t, q
        for j in range(k):
            partitions[0, q + j] = i32(buf, p + 4 * j)
        p += 4 * k
        q += k
        topics[TOPIC, t] = start + base
        topics[TOPIC_LEN, t] = length
        topics[PARTITIONS_END, t] = q
        t += 1
    return OK, p, t, q


@njit(cache=True, **NO_REFCOUNT)
def _subscription(buf, p, end, base, members, m, topics, owned, owned_partitions, s, o, q):
    """ConsumerProtocolSubscription (a higher version read as v3) into member m's fields and the
    levels below. Returns (status, s, o, q)."""
    if end - p < 2:
        return ODD, s, o, q
    version = i16(buf, p)
    if version < 0:
        return ODD, s, o, q
    p += 2
    n, p, ok = _count(buf, p, end)
    if not ok:
        return ODD, s, o, q
    for _ in range(n):
        if s == topics.shape[1]:
            return TOPICS, s, o, q
        start, length, p, ok = _string(buf, p, end, False)
        if not ok:
            return ODD, s, o, q
        topics[TOPIC, s] = start + base
        topics[TOPIC_LEN, s] = length
        s += 1
    user_data, user_data_len, p, ok = _bytes32(buf, p, end, True)
    if not ok:
        return ODD, s, o, q
    if version >= 1:
        status, p, o, q = _topic_partitions(buf, p, end, base, owned, owned_partitions, o, q, OWNED, OWNED_PARTITIONS)
        if status != OK:
            return status, s, o, q
    generation = -1
    if version >= 2:
        if p + 4 > end:
            return ODD, s, o, q
        generation = i32(buf, p)
        p += 4
    rack, rack_len = 0, -1
    if version >= 3:
        rack, rack_len, p, ok = _string(buf, p, end, True)
        if not ok:
            return ODD, s, o, q
    members[SUBSCRIPTION_VERSION, m] = version
    members[TOPICS_END, m] = s
    members[OWNED_END, m] = o
    members[SUBSCRIPTION_USER_DATA, m] = user_data + base
    members[SUBSCRIPTION_USER_DATA_LEN, m] = user_data_len
    members[GENERATION_ID, m] = generation
    members[RACK_ID, m] = rack + base
    members[RACK_ID_LEN, m] = rack_len
    return OK, s, o, q


@njit(cache=True, **NO_REFCOUNT)
def _assignment(buf, p, end, base, members, m, assigned, assigned_partitions, a, q):
    """ConsumerProtocolAssignment into member m's fields and the levels below. Returns
    (status, a, q)."""
    if end - p < 2:
        return ODD, a, q
    version = i16(buf, p)
    if version < 0:
        return ODD, a, q
    status, p, a, q = _topic_partitions(
        buf, p + 2, end, base, assigned, assigned_partitions, a, q, ASSIGNED, ASSIGNED_PARTITIONS
    )
    if status != OK:
        return status, a, q
    user_data, user_data_len, p, ok = _bytes32(buf, p, end, True)
    if not ok:
        return ODD, a, q
    members[ASSIGNMENT_VERSION, m] = version
    members[ASSIGNED_END, m] = a
    members[ASSIGNMENT_USER_DATA, m] = user_data + base
    members[ASSIGNMENT_USER_DATA_LEN, m] = user_data_len
    return OK, a, q


@njit(cache=True, **NO_REFCOUNT)
def _is_consumer(buf, p, n):
    return (
        n == 8
        and buf[p] == 99  # "consumer"
        and buf[p + 1] == 111
        and buf[p + 2] == 110
        and buf[p + 3] == 115
        and buf[p + 4] == 117
        and buf[p + 5] == 109
        and buf[p + 6] == 101
        and buf[p + 7] == 114
    )


@njit(cache=True, nogil=True, **NO_REFCOUNT)
def _group_value(
    buf, p, end, base, values, i, members, topics, owned, owned_partitions, assigned, assigned_partitions, at
):
    """One GroupMetadataValue into column i of `values` and the levels from `at` (the next free
    column of each, moved on when the whole value is read). Returns its status."""
    if end - p < 2:
        return ODD
    version = i16(buf, p)
    if version < 0 or version > 3:
        return ODD
    p += 2
    protocol_type, protocol_type_len, p, ok = _string(buf, p, end, False)
    if not ok or p + 4 > end:
        return ODD
    generation = i32(buf, p)
    p += 4
    protocol, protocol_len, p, ok = _string(buf, p, end, True)
    if not ok:
        return ODD
    leader, leader_len, p, ok = _string(buf, p, end, True)
    if not ok:
        return ODD
    state_ts = -1
    if version >= 2:
        if p + 8 > end:
            return ODD
        state_ts = i64(buf, p)
        p += 8
    n, p, ok = _count(buf, p, end)
    if not ok:
        return ODD
    m, s, o, oq, a, aq = at[0], at[1], at[2], at[3], at[4], at[5]
    consumer = _is_consumer(buf, protocol_type, protocol_type_len)
    for _ in range(n):
        if m == members.shape[1]:
            return MEMBERS
        member_id, member_id_len, p, ok = _string(buf, p, end, False)
        if not ok:
            return ODD
        instance_id, instance_id_len = 0, -1
        if version >= 3:
            instance_id, instance_id_len, p, ok = _string(buf, p, end, True)
            if not ok:
                return ODD
        client_id, client_id_len, p, ok = _string(buf, p, end, False)
        if not ok:
            return ODD
        client_host, client_host_len, p, ok = _string(buf, p, end, False)
        if not ok:
            return ODD
        rebalance = -1
        if version >= 1:
            if p + 4 > end:
                return ODD
            rebalance = i32(buf, p)
            p += 4
        if p + 4 > end:
            return ODD
        session = i32(buf, p)
        p += 4
        sub, sub_len, p, ok = _bytes32(buf, p, end, False)
        if not ok:
            return ODD
        asg, asg_len, p, ok = _bytes32(buf, p, end, False)
        if not ok:
            return ODD
        members[MEMBER_ID, m] = member_id + base
        members[MEMBER_ID_LEN, m] = member_id_len
        members[INSTANCE_ID, m] = instance_id + base
        members[INSTANCE_ID_LEN, m] = instance_id_len
        members[CLIENT_ID, m] = client_id + base
        members[CLIENT_ID_LEN, m] = client_id_len
        members[CLIENT_HOST, m] = client_host + base
        members[CLIENT_HOST_LEN, m] = client_host_len
        members[REBALANCE_TIMEOUT, m] = rebalance
        members[SESSION_TIMEOUT, m] = session
        members[SUBSCRIPTION, m] = sub + base
        members[SUBSCRIPTION_LEN, m] = sub_len
        members[ASSIGNMENT, m] = asg + base
        members[ASSIGNMENT_LEN, m] = asg_len
        # the consumer protocol's fields, null unless read below (as lib.decode.values.member_row)
        members[SUBSCRIPTION_VERSION, m] = -1
        members[TOPICS_END, m] = s
        members[OWNED_END, m] = o
        members[SUBSCRIPTION_USER_DATA_LEN, m] = -1
        members[RACK_ID_LEN, m] = -1
        members[ASSIGNMENT_VERSION, m] = -1
        members[ASSIGNED_END, m] = a
        members[ASSIGNMENT_USER_DATA_LEN, m] = -1
        if consumer and sub_len > 0:
            status, s, o, oq = _subscription(
                buf, sub, sub + sub_len, base, members, m, topics, owned, owned_partitions, s, o, oq
            )
            if status != OK:
                return status
        if consumer and asg_len > 0:
            status, a, aq = _assignment(buf, asg, asg + asg_len, base, members, m, assigned, assigned_partitions, a, aq)
            if status != OK:
                return status
        m += 1
    values[PROTOCOL_TYPE, i] = protocol_type + base
    values[PROTOCOL_TYPE_LEN, i] = protocol_type_len
    values[GENERATION, i] = generation
    values[PROTOCOL, i] = protocol + base
    values[PROTOCOL_LEN, i] = protocol_len
    values[LEADER, i] = leader + base
    values[LEADER_LEN, i] = leader_len
    values[STATE_TIMESTAMP, i] = state_ts
    values[MEMBERS_END, i] = m
    at[0], at[1], at[2], at[3], at[4], at[5] = m, s, o, oq, a, aq
    return OK


@njit(cache=True)
def _grown(level):
    rows, columns = level.shape
    out = np.empty((rows, 2 * columns), level.dtype)
    for r in range(rows):  # (not a slice assignment: numba's broadcasting takes seconds to compile)
        for c in range(columns):
            out[r, c] = level[r, c]
    return out


@njit(cache=True, nogil=True)
def group_values(seg, extra, val_off, val_len):
    """The GroupMetadataValues at (val_off, val_len) (offsets past the segment are in `extra`).
    Returns (odd: a flag per value, values, members, topics, owned, owned_partitions, assigned,
    assigned_partitions): an odd value has no members, its other fields are undefined."""
    seglen = len(seg)
    n = len(val_off)
    odd = np.zeros(n, np.bool_)
    values = np.zeros((9, n), np.int64)
    room = 8 * n + 16
    members = np.empty((_FIELDS[MEMBERS], room), np.int64)
    topics = np.empty((_FIELDS[TOPICS], 2 * room), np.int64)
    owned = np.empty((_FIELDS[OWNED], room), np.int64)
    owned_partitions = np.empty((1, 8 * room), np.int32)
    assigned = np.empty((_FIELDS[ASSIGNED], room), np.int64)
    assigned_partitions = np.empty((1, 8 * room), np.int32)
    at = np.zeros(6, np.int64)
    for i in range(n):
        o = val_off[i]
        base = 0 if o < seglen else seglen
        buf = seg if o < seglen else extra
        while True:
            status = _group_value(
                buf,
                o - base,
                o - base + val_len[i],
                base,
                values,
                i,
                members,
                topics,
                owned,
                owned_partitions,
                assigned,
                assigned_partitions,
                at,
            )
            if status == MEMBERS:  # a level too small for this value: grow it and read the value again
                members = _grown(members)
            elif status == TOPICS:
                topics = _grown(topics)
            elif status == OWNED:
                owned = _grown(owned)
            elif status == OWNED_PARTITIONS:
                owned_partitions = _grown(owned_partitions)
            elif status == ASSIGNED:
                assigned = _grown(assigned)
            elif status == ASSIGNED_PARTITIONS:
                assigned_partitions = _grown(assigned_partitions)
            else:
                break
        if status == ODD:
            odd[i] = True
            values[MEMBERS_END, i] = at[MEMBERS]
    return (
        odd,
        values,
        members[:, : at[MEMBERS]],
        topics[:, : at[TOPICS]],
        owned[:, : at[OWNED]],
        owned_partitions[:, : at[OWNED_PARTITIONS]],
        assigned[:, : at[ASSIGNED]],
        assigned_partitions[:, : at[ASSIGNED_PARTITIONS]],
    )
