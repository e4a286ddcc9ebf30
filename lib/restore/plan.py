"""What putting a group's committed offsets back "as of" an instant means, partition by
partition: the pure decision, from the warehouse's answer (the group's effective committed
offsets then: lib.replay.offsets_spark.offset_effects, as the audit committed_offset_as_of
reads it) and the cluster's state now (the group's committed offsets, each partition's log
start and end). No I/O here: jobs.restore_offsets asks, this decides, the job applies.

A target outside the partition's log now needs the operator's decision: below the log start
the records are gone (a consumer fetching it gets OFFSET_OUT_OF_RANGE and resets per its
auto.offset.reset), above the log end the topic was recreated or truncated. The plan never
guesses: such partitions are applied only under an explicit choice, and so are partitions
that exist now but had no offset then (left as they are, listed)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from schemas.tables import RESTORE_ACTIONS

TopicPartition = tuple[str, int]

# what to do with a target below the log start / above the log end
REFUSE, SKIP, CLAMP = "refuse", "skip", "clamp"
CHOICES = (REFUSE, SKIP, CLAMP)

# a partition's action in the plan (their meanings: schemas.tables.RESTORE_ACTIONS)
RESTORE, UNCHANGED, NO_OFFSET_THEN, BELOW_LOG_START, ABOVE_LOG_END, NOT_IN_CLUSTER, SKIPPED = RESTORE_ACTIONS


@dataclass(frozen=True)
class Committed:
    """A committed offset with what Kafka commits beside it."""

    offset: int
    leader_epoch: int | None = None
    metadata: str | None = None


@dataclass(frozen=True)
class Target:
    """The warehouse's answer for one partition at the instant: its committed offset then, or
    None where the last effect was a tombstone (deleted, expired) before it."""

    topic: str
    partition: int
    committed: Committed | None
    applied_at_ms: int | None  # when that offset took effect (a COMMIT marker's time if transactional)
    transactional: bool = False


@dataclass(frozen=True)
class PartitionNow:
    """One partition on the cluster now (None where it does not exist)."""

    log_start: int
    log_end: int


@dataclass(frozen=True)
class PartitionPlan:
    topic: str
    partition: int
    current: Committed | None  # the group's committed offset now (OffsetFetch)
    target: Committed | None  # the offset as of the instant (None: none then)
    log_start: int | None
    log_end: int | None
    action: str
    apply: Committed | None  # what --execute commits (None: nothing)
    note: str = ""

    @property
    def difference(self) -> int | None:
        """target - current (records the group goes back by when negative)."""
        if self.target is None or self.current is None:
            return None
        return self.target.offset - self.current.offset

    @property
    def needs_decision(self) -> bool:
        return self.action in (BELOW_LOG_START, ABOVE_LOG_END)


def plan_restore(
    targets: Sequence[Target],
    current: Mapping[TopicPartition, Committed],
    partitions_now: Mapping[TopicPartition, PartitionNow | None],
    below_log_start: str = REFUSE,
    above_log_end: str = REFUSE,
) -> list[PartitionPlan]:
    """The plan for every partition the group had an offset for at the instant, or has one
    for now, sorted by topic and partition. `partitions_now` has every such partition (None:
    it does not exist now). `below_log_start` / `above_log_end`: refuse (the plan needs a
    decision; nothing is applied), skip (leave the partition as it is) or clamp (commit the log
    start / the log end instead)."""
    assert below_log_start in CHOICES and above_log_end in CHOICES
    by_tp = {(t.topic, t.partition): t for t in targets}
    out = []
    for tp in sorted(set(by_tp) | set(current)):
        target, now, cur = by_tp.get(tp), partitions_now.get(tp), current.get(tp)
        wanted = target.committed if target is not None else None
        action, apply, note = _decide(target, now, cur, below_log_start, above_log_end)
        start, end = (now.log_start, now.log_end) if now is not None else (None, None)
        out.append(PartitionPlan(tp[0], tp[1], cur, wanted, start, end, action, apply, note))
    return out


def _decide(
    target: Target | None, now: PartitionNow | None, cur: Committed | None, below: str, above: str
) -> tuple[str, Committed | None, str]:
    """(action, what to commit, note) for one partition."""
    wanted = target.committed if target is not None else None
    if wanted is None:
        why = "deleted before the instant" if target is not None else "no offset committed by the instant"
        return NO_OFFSET_THEN, None, why + "; left as it is"
    if now is None:
        return NOT_IN_CLUSTER, None, "the partition does not exist now"
    if wanted.offset < now.log_start:
        return _outside(BELOW_LOG_START, below, wanted, now.log_start)
    if wanted.offset > now.log_end:
        return _outside(ABOVE_LOG_END, above, wanted, now.log_end)
    if cur == wanted:
        return UNCHANGED, None, ""
    return RESTORE, wanted, ""


def _outside(action: str, choice: str, wanted: Committed, bound: int) -> tuple[str, Committed | None, str]:
    bound_name = "log start" if action == BELOW_LOG_START else "log end"
    if choice == SKIP:
        return SKIPPED, None, f"target {wanted.offset} is outside the log ({bound_name} {bound}); skipped"
    if choice == CLAMP:
        # the leader epoch belongs to the record at the target, not to the bound
        return RESTORE, Committed(bound, None, wanted.metadata), f"target {wanted.offset} clamped to the {bound_name}"
    if action == BELOW_LOG_START:
        note = (
            f"target {wanted.offset} is below the log start {bound}: its records are gone; a consumer "
            "there gets OFFSET_OUT_OF_RANGE and resets per its auto.offset.reset "
            "(--below-log-start clamp commits the log start, skip leaves the partition)"
        )
    else:
        note = (
            f"target {wanted.offset} is above the log end {bound}: the topic was recreated or truncated "
            "(--above-log-end clamp commits the log end, skip leaves the partition)"
        )
    return action, None, note


def blocking(plan: Sequence[PartitionPlan]) -> list[PartitionPlan]:
    """The partitions that need a decision the operator has not made: --execute writes nothing
    while there is one."""
    return [p for p in plan if p.needs_decision]


def to_apply(plan: Sequence[PartitionPlan]) -> dict[TopicPartition, Committed]:
    return {(p.topic, p.partition): p.apply for p in plan if p.apply is not None}


def reset_offsets_csv(plan: Sequence[PartitionPlan]) -> str:
    """The plan as `kafka-consumer-groups --reset-offsets --from-file` reads it: one
    `topic,partition,offset` line per partition to change (ResetOffsetsCommand parses exactly
    three comma-separated fields)."""
    return "".join(f"{p.topic},{p.partition},{p.apply.offset}\n" for p in plan if p.apply is not None)
