"""The assignment audit decided in the replay's one pass (lib.replay.engine feeds it), one
offsets partition at a time, in log order, as lib.assignors.audit defines it.

A classic group's generation is audited at its last GroupMetadata record: when the group's next
record shows it over (a record of another generation, a tombstone), its row is final; the
generation still open when the partition's records end gets a row too, an open one, kept apart
(its row is replaced if more records of that generation come, and becomes final when the next
generation comes, in this run or a later one). A KIP-848 group's target assignment epoch is
audited at its target assignment record, from the group's fold (its members and targets then).
What an incremental run needs of the past is kept with the group's fold state (`state`,
`load`): the previous audited generation's owners (what moved since is counted against them),
and the open generation's number and record."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from lib.assignors.audit import CLASSIC, CONSUMER, AuditMember, Generation, audit_generation, classic_members


@dataclass
class _Open:
    """A classic group's generation whose last record may still be to come."""

    generation: int
    offsets_partition: int
    log_offset: int
    at_ms: int | None
    value: Callable[[], dict] | dict | None  # the GroupMetadata value, read when needed (None: carried)

    @property
    def carried(self) -> bool:
        """From an earlier run: its row is among the open rows already written."""
        return self.value is None

    def read(self) -> dict:
        if callable(self.value):
            self.value = self.value()
        assert self.value is not None
        return self.value


@dataclass
class AuditOutcome:
    closed: list[dict] = field(default_factory=list)  # rows of generations over (new)
    opened: list[dict] = field(default_factory=list)  # rows of generations still open (new)
    # groups whose open row of an earlier run is final now (it moves to the final rows as it is),
    # and those whose open row of an earlier run is replaced (by a later record of its generation)
    carried_closed: set[str] = field(default_factory=set)
    carried_replaced: set[str] = field(default_factory=set)


class AssignmentTracker:
    def __init__(self, floors: Mapping[str, int] | None = None, names: Mapping[str, str] | None = None):
        self.known = dict(floors or {})  # partitions per topic known so far
        self.names = dict(names or {})
        self.previous: dict[str, Generation] = {}  # group -> its last audited generation
        self.open: dict[str, _Open] = {}
        self.outcome = AuditOutcome()
        self.touched: set[str] = set()  # groups whose state changed

    # --- state across runs ------------------------------------------------------------------------
    def load(self, group_id: str, state: dict) -> None:
        """A group's audit state as `state` gave it (kept with its fold state)."""
        prev = state.get("previous")
        if prev is not None:
            self.previous[group_id] = _generation_of(group_id, prev)
        o = state.get("open")
        if o is not None:
            self.open[group_id] = _Open(o["generation"], -1, o["log_offset"], None, None)

    def state(self, group_id: str) -> dict | None:
        """What the next run needs of the group (None: nothing)."""
        prev = self.previous.get(group_id)
        o = self.open.get(group_id)
        if prev is None and o is None:
            return None
        out: dict = {}
        if prev is not None:
            out["previous"] = _state_of(prev)
        if o is not None:
            out["open"] = {"generation": o.generation, "log_offset": o.log_offset}
        return out

    # --- records, in log order ----------------------------------------------------------------------
    def classic(self, group_id: str, generation: int, offsets_partition: int, log_offset: int, at_ms, value) -> None:
        """A GroupMetadata value record (`value`: the value, or a callable giving it)."""
        self.touched.add(group_id)
        o = self.open.get(group_id)
        if o is not None and o.generation != generation:
            self._close(group_id)
        elif o is not None and o.carried:
            self.outcome.carried_replaced.add(group_id)  # its generation goes on: a later record
        self.open[group_id] = _Open(generation, offsets_partition, log_offset, at_ms, value)

    def group_deleted(self, group_id: str) -> None:
        """A group tombstone: its generation over, its next one a new group's first."""
        self.touched.add(group_id)
        self._close(group_id)
        self.previous.pop(group_id, None)

    def consumer_epoch(self, group_id: str, epoch: int, offsets_partition: int, log_offset: int, at_ms, group) -> None:
        """A KIP-848 target assignment record; `group`: the group's fold (ModernGroup) after it."""
        self.touched.add(group_id)
        names = {**self.names, **group.topic_names}
        members = []
        for member_id, target in sorted(group.target.items()):
            meta = group.members.get(member_id) or {}
            members.append(
                AuditMember(
                    member_id=member_id,
                    topics=tuple(sorted(meta.get("subscribedTopicNames") or ())),
                    assignment=tuple(
                        (names.get(tp["topicId"], tp["topicId"]), int(p))
                        for tp in target.get("topicPartitions") or ()
                        for p in tp.get("partitions") or ()
                    ),
                    group_instance_id=meta.get("instanceId"),
                    client_id=meta.get("clientId"),
                    rack_id=meta.get("rackId"),
                )
            )
        named = ((group.members.get(m.member_id) or {}).get("serverAssignor") for m in members)
        assignors = {a for a in named if a is not None}
        gen = Generation(
            group_id,
            CONSUMER,
            int(epoch),
            at_ms,
            min(assignors) if len(assignors) == 1 else None,
            tuple(members),
            offsets_partition,
            log_offset,
            protocol_type=CONSUMER,
        )
        self.outcome.closed.append(self._audit(gen))

    # --- audits -----------------------------------------------------------------------------------------
    def _close(self, group_id: str) -> None:
        o = self.open.pop(group_id, None)
        if o is None:
            return
        if o.carried:
            self.outcome.carried_closed.add(group_id)  # its row is final as it is
            return
        gen = self._generation(group_id, o)
        if gen is not None:
            self.outcome.closed.append(self._audit(gen))

    def _generation(self, group_id: str, o: _Open) -> Generation | None:
        md = o.read()
        members = classic_members(md)
        if members is None or (md.get("protocol_type") or "") != "consumer":
            return None
        return Generation(
            group_id,
            CLASSIC,
            int(md.get("generation") or 0),
            o.at_ms,
            md.get("protocol"),
            members,
            o.offsets_partition,
            o.log_offset,
            protocol_type=md.get("protocol_type"),
            leader=md.get("leader"),
        )

    def _audit(self, gen: Generation, keep_previous: bool = False) -> dict:
        for m in gen.members:
            for topic, partition in m.assignment:
                self.known[topic] = max(self.known.get(topic, 0), partition + 1)
        row = audit_generation(gen, self.previous.get(gen.group_id), self.known)
        if not keep_previous:
            self.previous[gen.group_id] = gen
        return row

    def read_pending(self) -> None:
        """Read now the values of the open generations not read yet (their batch is going)."""
        for o in self.open.values():
            if callable(o.value):
                o.read()

    def finish(self) -> AuditOutcome:
        """What this run's records add: the rows of the generations over, and of those still
        open (audited once; their previous generation stays the one before them)."""
        for group_id, o in self.open.items():
            if o.carried:
                continue
            gen = self._generation(group_id, o)
            if gen is not None:
                self.outcome.opened.append(self._audit(gen, keep_previous=True))
        return self.outcome


def _state_of(gen: Generation) -> dict:
    return {
        "members": [
            {"member_id": m.member_id, "instance": m.group_instance_id, "assignment": [list(tp) for tp in m.assignment]}
            for m in gen.members
        ],
    }


def _generation_of(group_id: str, state: dict) -> Generation:
    members = tuple(
        AuditMember(m["member_id"], (), tuple((t, int(p)) for t, p in m["assignment"]), group_instance_id=m["instance"])
        for m in state["members"]
    )
    return Generation(group_id, CLASSIC, 0, None, None, members, -1, -1)
