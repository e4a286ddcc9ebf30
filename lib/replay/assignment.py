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

from collections.abc import Mapping
from dataclasses import dataclass, field

import pyarrow as pa

from lib.assignors.audit import CLASSIC, CONSUMER, AuditMember, Generation, audit_generation, classic_members


@dataclass
class _Open:
    """A classic group's generation whose last record may still be to come: its GroupMetadata
    value is row `row` of `values` (None: carried from an earlier run, its row already written)."""

    generation: int
    offsets_partition: int
    log_offset: int
    at_ms: int | None
    values: pa.Array | None = None
    row: int = 0
    audited: Generation | None = None  # as audited when the run that read it ended (its owners)

    @property
    def carried(self) -> bool:
        return self.values is None


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
        self._closing: list[tuple[str, _Open]] = []  # generations over in the batch being fed
        self._kept: pa.Array | None = None  # values of open generations of earlier batches

    # --- state across runs ------------------------------------------------------------------------
    def load(self, group_id: str, state: dict) -> None:
        """A group's audit state as `state` gave it (kept with its fold state)."""
        prev = state.get("previous")
        if prev is not None:
            self.previous[group_id] = _generation_of(group_id, prev)
        o = state.get("open")
        if o is not None:
            owners = o.get("owners")
            audited = _generation_of(group_id, owners) if owners is not None else None
            self.open[group_id] = _Open(o["generation"], -1, o["log_offset"], None, audited=audited)

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
            if o.audited is not None:
                out["open"]["owners"] = _state_of(o.audited)
        return out

    # --- records, in log order ----------------------------------------------------------------------
    def classic(
        self, group_id: str, generation: int, offsets_partition: int, log_offset: int, at_ms, values: pa.Array, row: int
    ) -> None:
        """A GroupMetadata value record: its value is row `row` of `values` (the batch's
        group_metadata column)."""
        self.touched.add(group_id)
        o = self.open.get(group_id)
        if o is not None and o.generation != generation:
            self._close(group_id)
        elif o is not None and o.carried:
            self.outcome.carried_replaced.add(group_id)  # its generation goes on: a later record
        self.open[group_id] = _Open(generation, offsets_partition, log_offset, at_ms, values, row)

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
            if o.audited is not None:
                self.previous[group_id] = o.audited
            return
        self._closing.append((group_id, o))

    def end_batch(self) -> None:
        """The batch fed is done: the generations it closed are audited (in log order, at once),
        and the values of those still open are kept apart from it."""
        if self._closing:
            self.outcome.closed.extend(self._audit_classic(self._closing, keep_previous=False))
            self._closing = []
        # the open generations' values, taken out of the batch (which goes) into one array
        opens = [o for o in self.open.values() if o.values is not None]
        if opens and any(o.values is not self._kept for o in opens):
            by_source: dict[int, tuple[pa.Array, list[_Open]]] = {}
            for o in opens:
                by_source.setdefault(id(o.values), (o.values, []))[1].append(o)
            parts, ordered = [], []
            for values, group in by_source.values():
                parts.append(values.take(pa.array([o.row for o in group], pa.int64())))
                ordered.extend(group)
            self._kept = pa.concat_arrays(parts)
            for i, o in enumerate(ordered):
                o.values, o.row = self._kept, i

    def _audit_classic(self, closing: list[tuple[str, _Open]], keep_previous: bool) -> list[dict]:
        """The rows of classic generations over (or still open: `keep_previous`, and each
        remembers what it was audited as), in log order."""
        rows = []
        for group_id, o in closing:
            gen = self._generation(group_id, o)
            if gen is not None:
                rows.append(self._audit(gen, keep_previous=keep_previous))
                if keep_previous:
                    o.audited = gen
        return rows

    def _generation(self, group_id: str, o: _Open) -> Generation | None:
        assert o.values is not None
        md = o.values[o.row].as_py()
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

    def finish(self) -> AuditOutcome:
        """What this run's records add: the rows of the generations over, and of those still
        open (audited once; their previous generation stays the one before them)."""
        opened = [(g, o) for g, o in self.open.items() if not o.carried]
        self.outcome.opened.extend(self._audit_classic(opened, keep_previous=True))
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
