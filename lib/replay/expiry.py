"""Offset expiry as of a chosen time (spec 4.7), the way the coordinator's periodic cleanup
(GroupCoordinatorShard.cleanupGroupMetadata) decides at `now_ms`, for the state of one
offsets partition: which offsets of a group are eligible, here (group deletion is decided by
PartitionReplay, lib.replay.engine); the instant an eligible offset expires
(its explicit expiry, else its group's state timestamp for an empty classic group, else its
commit timestamp, plus the retention) is computed for all offsets at once by
PartitionReplay._judge_offsets."""

from __future__ import annotations

DEFAULT_RETENTION_MINUTES = 10080


def offset_rule(group: dict | None):
    """(kind, subscribed topics, base is the state timestamp) of a group's
    offsetExpirationCondition: kind "never", "always" or "unsubscribed" (only offsets of
    topics the group does not subscribe to are eligible)."""
    if group is None:
        # offsets whose group is gone: kept by Kafka 4.x, never visited by the cleanup
        return "never", None, False
    gtype, protocol_type, state = group["group_type"], group["protocol_type"], group["state"]
    subscribed = group.get("subscribed_topics")
    if gtype == "classic":
        if protocol_type is None:
            return "always", None, False  # simple group
        if state == "Empty":
            return "always", None, True
        if protocol_type == "consumer" and state == "Stable" and subscribed is not None:
            return "unsubscribed", set(subscribed), False
        return "never", None, False
    if gtype == "consumer":
        return "unsubscribed", set(subscribed or ()), False
    if gtype == "streams":
        if state == "Empty":
            return "always", None, False
        return "unsubscribed", set(subscribed or ()), False
    return "never", None, False
