"""Value rules shared by both decode paths (lib.decode.rows in Python, lib.decode.fast with
numba, and lib.decode.group_metadata): timestamps as Spark can hold them, and the members of
the group_metadata struct."""

from __future__ import annotations

import base64

from lib.codec.errors import DecodeError
from lib.codec.serde import decode_assignment, decode_subscription

# Kafka's timestamps are any int64 (ms since the epoch): clients chose commit timestamps in
# OffsetCommit v1, retention times set expiries, and the coordinator compares the raw longs
# (OffsetExpirationConditionImpl: now >= expireTimestamp, now - base >= retention). A TIMESTAMP
# column holds that instant, before 1970 included. Beyond what PySpark can read back it holds
# the bound (the start is a day into year 1: collect() makes a local datetime by probing a day
# either side, and fails on 0001-01-01 itself); any real "now" compares with the bound as with
# the true value, so expiry decides alike. The one exception, a base within "now" ms of
# Long.MIN_VALUE, where Java's subtraction overflows and Kafka never expires the offset, is in
# the README. raw_value keeps the exact bytes.
MIN_TIMESTAMP_MS = -62_135_510_400_000  # 0001-01-02T00:00:00.000Z
MAX_TIMESTAMP_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
# RecordBatch.NO_TIMESTAMP, and the sentinel of an OffsetCommitValue's expireTimestamp and a
# GroupMetadataValue's currentStateTimestamp (Utils.ofSentinel, ClassicGroup.fromRecord): only
# -1 means "none"; any other negative value is an instant.
NO_TIMESTAMP = -1


def instant_ms(value: int) -> int:
    """A timestamp that is always there (a commit's): its instant, within Spark's range."""
    return MIN_TIMESTAMP_MS if value < MIN_TIMESTAMP_MS else MAX_TIMESTAMP_MS if value > MAX_TIMESTAMP_MS else value


def optional_ms(value: int | None) -> int | None:
    """A timestamp with Kafka's -1 sentinel (record, expire and state timestamps): None for -1
    (or no value at all), else its instant."""
    if value is None or value == NO_TIMESTAMP:
        return None
    return instant_ms(value)


def micros(ms: int | None) -> int | None:
    """optional_ms in µs, as a TIMESTAMP inside a struct is built."""
    held = optional_ms(ms)
    return None if held is None else held * 1000


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
