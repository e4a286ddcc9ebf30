"""Value rules shared by both decode paths (lib.decode.rows in Python, lib.decode.fast with
numba, and lib.decode.group_metadata): timestamps as Spark can hold them, and the members of
the group_metadata struct."""

from __future__ import annotations

import base64

from lib.codec.errors import DecodeError
from lib.codec.serde import decode_assignment, decode_subscription

# The latest instant Spark's TIMESTAMP supports (9999-12-31T23:59:59.999Z; Python's datetime
# ends there too), in ms. Kafka takes any int64 (clients chose commit timestamps in OffsetCommit
# v1, and expiry through retention times); a later timestamp is stored as this instant, which
# compares with any real "now" as the true value does, so expiry decides alike. raw_value keeps
# the exact bytes.
MAX_TIMESTAMP_MS = 253_402_300_799_999


def clamp_ms(value: int) -> int | None:
    if value is None or value < 0:
        return None
    return value if value <= MAX_TIMESTAMP_MS else MAX_TIMESTAMP_MS


def micros(ms: int) -> int | None:
    clamped = clamp_ms(ms)
    return None if clamped is None else clamped * 1000


def member_row(
    member_id, instance_id, client_id, client_host, rebalance_timeout, session_timeout, sub_raw, asg_raw
) -> dict:
    """A classic member of the group_metadata struct, its consumer-protocol fields not yet read."""
    return {
        "member_id": member_id,
        "group_instance_id": instance_id,
        "client_id": client_id,
        "client_host": client_host,
        "rebalance_timeout_ms": rebalance_timeout,
        "session_timeout_ms": session_timeout,
        "subscription_version": None,
        "subscribed_topics": None,
        "owned_partitions": None,
        "subscription_user_data": None,
        "generation_id": None,
        "rack_id": None,
        "assignment_version": None,
        "assignment": None,
        "assignment_user_data": None,
        "subscription_bytes": sub_raw,
        "assignment_bytes": asg_raw,
    }


def decode_consumer_member(member: dict, sub_raw, asg_raw) -> None:
    # A member whose bytes do not parse keeps them raw, as Kafka's tools do.
    if sub_raw:
        try:
            sub = decode_subscription(sub_raw)
            member["subscription_version"] = int.from_bytes(sub_raw[:2], "big", signed=True)
            member["subscribed_topics"] = sub["topics"] or []
            member["owned_partitions"] = sub.get("ownedPartitions")
            ud = sub.get("userData")
            member["subscription_user_data"] = base64.b64decode(ud) if ud is not None else None
            member["generation_id"] = sub.get("generationId")
            member["rack_id"] = sub.get("rackId")
        except DecodeError:
            pass
    if asg_raw:
        try:
            asg = decode_assignment(asg_raw)
            member["assignment_version"] = int.from_bytes(asg_raw[:2], "big", signed=True)
            member["assignment"] = asg["assignedPartitions"] or []
            ud = asg.get("userData")
            member["assignment_user_data"] = base64.b64decode(ud) if ud is not None else None
        except DecodeError:
            pass
