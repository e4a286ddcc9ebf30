"""The assignors' input: one member's subscription, as the group leader decodes it from the
JoinGroup response (ConsumerProtocol.deserializeSubscription plus the member's group.instance.id)."""

from __future__ import annotations

from dataclasses import dataclass

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class Subscription:
    member_id: str
    topics: tuple[str, ...]
    group_instance_id: str | None = None
    owned_partitions: tuple[TopicPartition, ...] = ()  # ConsumerProtocolSubscription v1+
    generation_id: int | None = (
        None  # as recorded in ConsumerProtocolSubscription v2+ (-1 or None: absent, as Java's Optional.empty)
    )
    rack_id: str | None = None  # v3+
    user_data: bytes | None = None


def subscription_generation(subscription: Subscription) -> int:
    """Subscription.generationId().orElse(DEFAULT_GENERATION): Java's constructor maps any
    negative generation to Optional.empty()."""
    gen = subscription.generation_id
    return gen if gen is not None and gen >= 0 else -1
