"""GroupMetadataValue v0-v3 and the consumer-protocol bytes read straight into the
group_metadata struct, without the schema-driven reader's JsonConverter detour (base64 in,
base64 out). About one record in a hundred of a busy log is a GroupMetadata record, and the
generic reader spent more time on them than on all the offset commits.

Anything unusual (a null where none is allowed, a negative length, truncation, invalid UTF-8,
flexible v4) makes these functions answer None, and the caller uses the schema-driven reader:
errors and odd cases keep one implementation, and tests compare both on the same bytes."""

from __future__ import annotations

import struct

from lib.decode.values import decode_consumer_member, member_row, micros

_H = struct.Struct(">h")
_I = struct.Struct(">i")
_Q = struct.Struct(">q")


class _Odd(Exception):
    pass


def _sized(buf, p: int, end: int, nullable: bool, length: struct.Struct) -> tuple[bytes | None, int]:
    """Bytes after a big-endian length (int16 for strings, int32 for bytes); -1 is null."""
    if p + length.size > end:
        raise _Odd
    n = length.unpack_from(buf, p)[0]
    p += length.size
    if n < 0:
        if not nullable:
            raise _Odd
        return None, p
    if p + n > end:
        raise _Odd
    return bytes(buf[p : p + n]), p + n


def _str(buf, p: int, end: int, nullable: bool) -> tuple[str | None, int]:
    raw, p = _sized(buf, p, end, nullable, _H)
    return (None if raw is None else raw.decode("utf-8")), p


def _bytes(buf, p: int, end: int, nullable: bool) -> tuple[bytes | None, int]:
    return _sized(buf, p, end, nullable, _I)


def _i32(buf, p: int, end: int) -> tuple[int, int]:
    if p + 4 > end:
        raise _Odd
    return _I.unpack_from(buf, p)[0], p + 4


def _count(buf, p: int, end: int) -> tuple[int, int]:
    n, p = _i32(buf, p, end)
    if n < 0 or n > end - p:
        raise _Odd
    return n, p


def _topic_partitions(buf, p: int, end: int) -> tuple[list, int]:
    n, p = _count(buf, p, end)
    out = []
    for _ in range(n):
        topic, p = _str(buf, p, end, False)
        k, p = _count(buf, p, end)
        if p + 4 * k > end:
            raise _Odd
        parts = list(struct.unpack_from(f">{k}i", buf, p))
        p += 4 * k
        out.append({"topic": topic, "partitions": parts})
    return out, p


def group_metadata(value) -> dict | None:
    """The group_metadata struct of a GroupMetadataValue v0-v3 (as lib.decode.rows builds it), or
    None to let the schema-driven reader handle it."""
    try:
        return _group_metadata(value)
    except (_Odd, UnicodeDecodeError, struct.error):
        return None


def _group_metadata(buf) -> dict | None:

    end = len(buf)
    if end < 2:
        return None
    version = _H.unpack_from(buf, 0)[0]
    if not 0 <= version <= 3:
        return None
    p = 2
    protocol_type, p = _str(buf, p, end, False)
    generation, p = _i32(buf, p, end)
    protocol, p = _str(buf, p, end, True)
    leader, p = _str(buf, p, end, True)
    state_ts = -1
    if version >= 2:
        if p + 8 > end:
            raise _Odd
        state_ts = _Q.unpack_from(buf, p)[0]
        p += 8
    n, p = _count(buf, p, end)
    consumer = protocol_type == "consumer"
    members = []
    for _ in range(n):
        member_id, p = _str(buf, p, end, False)
        instance_id = None
        if version >= 3:
            instance_id, p = _str(buf, p, end, True)
        client_id, p = _str(buf, p, end, False)
        client_host, p = _str(buf, p, end, False)
        rebalance = -1
        if version >= 1:
            rebalance, p = _i32(buf, p, end)
        session, p = _i32(buf, p, end)
        sub_raw, p = _bytes(buf, p, end, False)
        asg_raw, p = _bytes(buf, p, end, False)
        member = member_row(member_id, instance_id, client_id, client_host, rebalance, session, sub_raw, asg_raw)
        if consumer:
            consumer_member(member, sub_raw, asg_raw)
        members.append(member)
    return {
        "protocol_type": protocol_type,
        "generation": generation,
        "protocol": protocol,
        "leader": leader,
        "current_state_timestamp": micros(state_ts),
        "members": members,
    }


# Parsed consumer-protocol bytes by their value. A group's members keep their subscription (and
# often their assignment) across rebalances, and every GroupMetadata record repeats them all.
_PARSED: dict[bytes, dict] = {}
_PARSED_MAX = 8192


def consumer_member(member: dict, sub_raw, asg_raw) -> None:
    """The consumer-protocol fields of a member, as lib.decode.values.decode_consumer_member sets
    them; bytes these readers find odd go through that function instead."""

    if sub_raw:
        if not _cached(member, b"s" + sub_raw, _subscription, sub_raw):
            decode_consumer_member(member, sub_raw, None)
    if asg_raw:
        if not _cached(member, b"a" + asg_raw, _assignment, asg_raw):
            decode_consumer_member(member, None, asg_raw)


def _cached(member: dict, key: bytes, read, raw) -> bool:
    """Set the fields `read` takes from `raw` (shared, never mutated), or False when it finds them odd."""
    fields = _PARSED.get(key)
    if fields is None:
        fields = {}
        try:
            read(fields, raw)
        except (_Odd, UnicodeDecodeError, struct.error):
            return False
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[key] = fields
    member.update(fields)
    return True


def _version(buf) -> int:
    """The leading int16 version of consumer-protocol bytes (odd when absent or negative)."""
    if len(buf) < 2:
        raise _Odd
    version = _H.unpack_from(buf, 0)[0]
    if version < 0:
        raise _Odd
    return version


def _subscription(member: dict, buf) -> None:
    end = len(buf)
    version = _version(buf)
    v = min(version, 3)
    p = 2
    n, p = _count(buf, p, end)
    topics = []
    for _ in range(n):
        t, p = _str(buf, p, end, False)
        topics.append(t)
    user_data, p = _bytes(buf, p, end, True)
    owned = generation = rack = None
    if v >= 1:
        owned, p = _topic_partitions(buf, p, end)
    if v >= 2:
        generation, p = _i32(buf, p, end)
    if v >= 3:
        rack, p = _str(buf, p, end, True)
    member["subscription_version"] = version
    member["subscribed_topics"] = topics
    member["owned_partitions"] = owned
    member["subscription_user_data"] = user_data
    member["generation_id"] = generation
    member["rack_id"] = rack


def _assignment(member: dict, buf) -> None:
    end = len(buf)
    version = _version(buf)
    p = 2
    assigned, p = _topic_partitions(buf, p, end)
    user_data, p = _bytes(buf, p, end, True)
    member["assignment_version"] = version
    member["assignment"] = assigned
    member["assignment_user_data"] = user_data
