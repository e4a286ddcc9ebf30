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
and the open generation's number and record.

Classic generations over are audited in batches (lib.assignors.fast_audit, thousands at once,
in log order); a KIP-848 epoch waits with them when nothing it reads can change before its
turn, else the batch before it is audited first (see `consumer_epoch`), and the epochs waiting
are audited after the classic batch, as a batch of their own when there are enough. The rows are those
audit_generation gives record by record but for `what_if`, which the report and the
`assignment_history` audit compute for the groups they show."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lib.assignors.audit import CLASSIC, CONSUMER, AuditMember, Generation, audit_generation
from lib.assignors.fast_audit import (
    AUDIT_VALUE_TYPE,
    GenerationBatch,
    Previous,
    audit_classic_batch,
    audit_closed_then_open,
    audit_closed_then_open_rows,
    audit_rows_table,
    epoch_values,
)


class _Open:
    """A classic group's generation whose last record may still be to come: its GroupMetadata
    value is row `row` of `values` (None: carried from an earlier run, its row already written).
    `audited`: its owners as audited when the run that read it ended (state form). Slotted: one
    is made per GroupMetadata record."""

    __slots__ = ("generation", "offsets_partition", "log_offset", "at_ms", "values", "row", "audited")

    def __init__(
        self,
        generation: int,
        offsets_partition: int,
        log_offset: int,
        at_ms: int | None,
        values: pa.Array | None = None,
        row: int = 0,
        audited: dict | None = None,
    ):
        self.generation = generation
        self.offsets_partition = offsets_partition
        self.log_offset = log_offset
        self.at_ms = at_ms
        self.values = values
        self.row = row
        self.audited = audited

    @property
    def carried(self) -> bool:
        return self.values is None


@dataclass
class AuditOutcome:
    closed: list[pa.Table] = field(default_factory=list)  # rows of generations over (new)
    opened: list[pa.Table] = field(default_factory=list)  # rows of generations still open (new)
    # groups whose open row of an earlier run is final now (it moves to the final rows as it is),
    # and those whose open row of an earlier run is replaced (by a later record of its generation)
    carried_closed: set[str] = field(default_factory=set)
    carried_replaced: set[str] = field(default_factory=set)
    # where rows of generations over go as they are made, instead of `closed`: they are final,
    # and a partition's whole history of them held until its end grew with the log
    sink: Callable[[pa.Table], None] | None = None
    sunk: int = 0  # rows given to the sink

    def add_closed(self, rows: pa.Table) -> None:
        if self.sink is None:
            self.closed.append(rows)
        elif rows.num_rows:
            self.sink(rows)
            self.sunk += rows.num_rows

    @property
    def rows(self) -> int:
        return self.sunk + sum(t.num_rows for t in self.closed) + sum(t.num_rows for t in self.opened)


# pending entries, in log order
_CLASSIC, _DELETE, _CONSUMER, _BLOCK = 0, 1, 2, 3
# KIP-848 epochs of one flush audited as a batch from this many (fewer: one by one, cheaper than
# a batch's fixed cost)
EPOCH_BATCH = 16


@dataclass
class _Block:
    """Classic entries (generations over, group tombstones) of one batch's records, in log
    order, as arrays (AssignmentTracker.classic_records): entry k is a tombstone where
    `deleted[k]`, else a generation whose value is row `source[k]` of `values` or, where
    `opens` has k, that _Open's (an earlier batch's)."""

    groups: list[str]
    source: np.ndarray
    opens: dict[int, _Open]
    log_offset: np.ndarray
    at_ms: list
    deleted: np.ndarray
    values: pa.Array
    offsets_partition: int


class AssignmentTracker:
    def __init__(self, floors: Mapping[str, int] | None = None, names: Mapping[str, str] | None = None):
        self.known = dict(floors or {})  # partitions per topic known so far
        self.names = dict(names or {})
        # group -> the owners of its last audited generation: `_previous` as of the last flush,
        # `_newer` what came since outside a batch (state form; None: the group was deleted)
        self._previous = Previous.empty()
        self._newer: dict[str, dict | Generation | None] = {}
        self.open: dict[str, _Open] = {}
        self.outcome = AuditOutcome()
        self.touched: set[str] = set()  # groups whose state changed
        self._pending: list[tuple[int, str, object]] = []  # audits waiting for a flush
        self._pending_kind: dict[str, int] = {}  # group -> _CLASSIC (or _DELETE) / _CONSUMER
        self._batch_values: pa.Array | None = None  # the values column of the batch being fed
        self._states: dict[str, dict] = {}  # finish(): the previous owners of the touched groups
        self._consumer_rows: list[dict] = []  # rows of KIP-848 epochs (one table at the end)
        # end_batch's flush, made by the next call that reads or adds audits (finish: with the
        # open generations, in one batch of the kernels)
        self._flush_due = False
        self._finished = False  # finish() done (or finish_together's)

    # --- state across runs ------------------------------------------------------------------------
    def load(self, group_id: str, state: dict) -> None:
        """A group's audit state as `state` gave it (kept with its fold state)."""
        prev = state.get("previous")
        if prev is not None:
            self._newer[group_id] = prev
        o = state.get("open")
        if o is not None:
            self.open[group_id] = _Open(o["generation"], -1, o["log_offset"], None, audited=o.get("owners"))

    def state(self, group_id: str) -> dict | None:
        """What the next run needs of the group (None: nothing); after finish()."""
        prev = self._states.get(group_id)
        o = self.open.get(group_id)
        if prev is None and o is None:
            return None
        out: dict = {}
        if prev is not None:
            out["previous"] = prev
        if o is not None:
            out["open"] = {"generation": o.generation, "log_offset": o.log_offset}
            if o.audited is not None:
                out["open"]["owners"] = o.audited
        return out

    # --- records, in log order ----------------------------------------------------------------------
    def classic(
        self, group_id: str, generation: int, offsets_partition: int, log_offset: int, at_ms, values: pa.Array, row: int
    ) -> None:
        """A GroupMetadata value record: its value is row `row` of `values` (the batch's
        group_metadata column, until end_batch)."""
        self._settle()
        self.touched.add(group_id)
        o = self.open.get(group_id)
        if o is not None and o.generation != generation:
            self._close(group_id)
        elif o is not None and o.carried:
            self.outcome.carried_replaced.add(group_id)  # its generation goes on: a later record
        self.open[group_id] = _Open(generation, offsets_partition, log_offset, at_ms, values, row)
        self._batch_values = values

    def classic_records(
        self,
        group_ids: list[str],
        group_codes: np.ndarray,
        generations: np.ndarray,
        offsets_partition: int,
        log_offsets: np.ndarray,
        at_ms: list,
        tombstones: np.ndarray,
        values: pa.Array,
        rows: np.ndarray,
    ) -> None:
        """GroupMetadata records (values and tombstones), in log order, of groups with no other
        group record in the batch being fed (`group_codes`: the groups as integers): what
        `classic` and `group_deleted` do record by record, as arrays. Such a group has no
        KIP-848 audit waiting and no entry before these records, so none needs a flush first;
        its open generation before them is from an earlier batch or run."""
        self._settle()
        n = len(group_ids)
        self.touched.update(group_ids)
        self._batch_values = values
        tomb = np.asarray(tombstones, bool)
        gen = np.asarray(generations, np.int64)
        # each record's previous record of its group among these (-1: its group's first)
        order = np.argsort(group_codes, kind="stable")
        same = group_codes[order][1:] == group_codes[order][:-1]
        prev = np.full(n, -1, np.int64)
        prev[order[1:][same]] = order[:-1][same]
        last = np.ones(n, bool)
        last[order[:-1][same]] = False
        j = np.maximum(prev, 0)
        # a record closes its previous one's generation (a value of another generation, or a tombstone)
        closes = (prev >= 0) & ~tomb[j] & (tomb | (gen != gen[j]))
        # entries in log order: the generations closed here (their value: row `source` of the
        # values, or an earlier batch's _Open), and the tombstones of groups with an entry
        source = np.where(closes, np.asarray(rows, np.int64)[j], -1)
        is_entry = closes.copy()
        opens: dict[int, _Open] = {}
        for i in np.flatnonzero(prev < 0).tolist():  # each group's first record: its open before
            group_id = group_ids[i]
            o = self.open.get(group_id)
            if o is None:
                continue
            if tomb[i] or o.generation != gen[i]:
                del self.open[group_id]
                if o.values is None:  # carried from an earlier run: its row is final as it is
                    self.outcome.carried_closed.add(group_id)
                    if o.audited is not None:
                        self._newer[group_id] = o.audited
                else:
                    opens[i] = o
                    is_entry[i] = True
            elif o.values is None:
                self.outcome.carried_replaced.add(group_id)  # its generation goes on: a later record
        kinds = self._pending_kind
        closed = np.flatnonzero(is_entry)  # entries closing a generation, by the record that closes it
        dropped: list[int] = []  # tombstones that are entries too (after their record's close)
        if tomb.any():
            seen = set(kinds)
            k = 0
            for i in np.flatnonzero(tomb).tolist():
                while k < len(closed) and closed[k] <= i:
                    seen.add(group_ids[int(closed[k])])
                    k += 1
                if group_ids[i] in seen:
                    dropped.append(i)
                else:
                    self._newer[group_ids[i]] = None
        if len(closed) or dropped:
            # entry order: by record, a record's close before its tombstone
            at = np.concatenate([closed, np.array(dropped, np.int64)])
            deleted = np.concatenate([np.zeros(len(closed), bool), np.ones(len(dropped), bool)])
            order = np.lexsort((deleted, at))
            at, deleted = at[order], deleted[order]
            opened = at.tolist()
            value_of = np.where(closes[at], j[at], at)  # the record whose value it is
            self._pending.append(
                (
                    _BLOCK,
                    "",
                    _Block(
                        [group_ids[i] for i in opened],
                        np.where(deleted | ~closes[at], -1, source[at]),
                        {k: opens[i] for k, i in enumerate(opened) if i in opens and not deleted[k]},
                        np.where(deleted, -1, np.asarray(log_offsets, np.int64)[value_of]),
                        [None if d else at_ms[v] for d, v in zip(deleted.tolist(), value_of.tolist())],
                        deleted,
                        values,
                        offsets_partition,
                    ),
                )
            )
            for i in closed.tolist():
                kinds[group_ids[i]] = _CLASSIC
        for i in np.flatnonzero(last).tolist():  # each group's last record: its open generation now
            group_id = group_ids[i]
            if tomb[i]:
                self.open.pop(group_id, None)
            else:
                self.open[group_id] = _Open(
                    int(gen[i]), offsets_partition, int(log_offsets[i]), at_ms[i], values, int(rows[i])
                )

    def group_deleted(self, group_id: str) -> None:
        """A group tombstone: its generation over, its next one a new group's first."""
        self._settle()
        self.touched.add(group_id)
        self._close(group_id)
        if self._pending_kind.get(group_id) == _CONSUMER:
            self._flush()
        if group_id in self._pending_kind:
            self._pending.append((_DELETE, group_id, None))
        else:
            self._newer[group_id] = None

    def consumer_epoch(self, group_id: str, epoch: int, offsets_partition: int, log_offset: int, at_ms, group) -> None:
        """A KIP-848 target assignment record; `group`: the group's fold (ModernGroup) after it."""
        self._settle()
        self.touched.add(group_id)
        own, known_names, known = group.topic_names, self.names, self.known
        members = []
        raises = False  # whether it raises a topic's known count
        for member_id, target in sorted(group.target.items()):
            meta = group.members.get(member_id) or {}
            assignment: list[tuple[str, int]] = []
            for tp in target.get("topicPartitions") or ():
                tid = tp["topicId"]
                name = own[tid] if tid in own else known_names.get(tid, tid)
                partitions = [int(p) for p in tp.get("partitions") or ()]
                if partitions:
                    raises = raises or max(partitions) + 1 > known.get(name, 0)
                    assignment.extend([(name, p) for p in partitions])
            members.append(
                AuditMember(
                    member_id=member_id,
                    topics=tuple(sorted(meta.get("subscribedTopicNames") or ())),
                    assignment=tuple(assignment),
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
        # It may wait for the flush when it raises no topic's known count (then none is raised
        # before its turn by it, and flush() checks the generations before it raised none
        # either) and no classic audit of its group waits.
        if raises or self._pending_kind.get(group_id, _CONSUMER) != _CONSUMER:
            self._flush()
        if raises:
            self._audit_consumer(gen)
        else:
            self._pending.append((_CONSUMER, group_id, gen))
            self._pending_kind[group_id] = _CONSUMER

    # --- audits -----------------------------------------------------------------------------------------
    def _close(self, group_id: str) -> None:
        o = self.open.pop(group_id, None)
        if o is None:
            return
        if o.carried:
            self.outcome.carried_closed.add(group_id)  # its row is final as it is
            if o.audited is not None:
                if group_id in self._pending_kind:
                    self._flush()
                self._newer[group_id] = o.audited
            return
        if self._pending_kind.get(group_id) == _CONSUMER:
            self._flush()
        self._pending.append((_CLASSIC, group_id, o))
        self._pending_kind[group_id] = _CLASSIC

    def end_batch(self) -> None:
        """The batch fed is done: the audits waiting are due (a batch is thousands of records:
        enough of them to share a flush's fixed cost), done by the next call that reads or adds
        audits (they keep the batch's values until then: one batch's), and the values of the
        generations still open are taken out of it (it goes)."""
        self._settle()
        self._flush_due = bool(self._pending)
        values, self._batch_values = self._batch_values, None
        if values is None:
            return
        keep = [o for o in self.open.values() if o.values is values]
        if keep:
            kept = values.take(pa.array([o.row for o in keep], pa.int64()))
            for i, o in enumerate(keep):
                o.values, o.row = kept, i

    def _settle(self) -> None:
        """The flush end_batch left due, before anything else touches the audits."""
        if self._flush_due:
            self._flush_due = False
            self._flush()

    def _apply_newer(self) -> None:
        if self._newer:
            # (a KIP-848 epoch's Generation as it was audited, else the state form)
            gens = {g: s for g, s in self._newer.items() if isinstance(s, Generation)}
            states = {g: s for g, s in self._newer.items() if isinstance(s, dict)}
            kept = self._previous.without(self._newer)
            if gens:
                kept = Previous(pa.concat_tables([kept.table, Previous.from_generations(gens).table]))
            self._previous = Previous(pa.concat_tables([kept.table, Previous.from_states(states).table]))
            self._newer = {}

    def _previous_of(self, group_id: str) -> Generation | None:
        if group_id in self._newer:
            s = self._newer[group_id]
            return s if s is None or isinstance(s, Generation) else _generation_of(group_id, s)
        return self._previous.generation(group_id)

    def _flush(self) -> None:
        """The audits waiting, in log order: the classic ones in one batch, then the KIP-848
        ones (none raised a known count; if the batch raised one that one of them reads, they
        are redone in turn)."""
        if not self._pending:
            return
        pending, self._pending, self._pending_kind = self._pending, [], {}
        self._apply_newer()
        if not any(kind == _CONSUMER for kind, _, _ in pending):
            self.outcome.add_closed(self._audit_batch(pending))
            return
        known, previous = dict(self.known), self._previous
        classic, epochs, values = _split(pending)
        combined = values is not None
        if values is not None:
            # the classic generations, then the epochs, in one batch of the kernels: as the two
            # batches below audit them (the kernels carry the known counts and the groups'
            # previous owners from row to row), for one batch's fixed cost instead of two (each
            # flush of a log with KIP-848 groups paid both: a third of its audit's kernel calls)
            classic_batch = self._batch(classic)
            batch = GenerationBatch.concat([classic_batch, self._epoch_batch(values, epochs)])
            table, _ = self._audited(batch, [None] * len(classic_batch) + epochs)
        else:
            table = self._audit_batch(classic)
        if not _read_raised(epochs, known, self.known):
            self.outcome.add_closed(table)
            if not combined:
                self._audit_epochs(epochs)
            return
        # a classic generation raised a count a KIP-848 one after it reads: in turn, then
        self.known.clear()
        self.known.update(known)
        self._previous = previous
        run: list = []
        for entry in pending:
            if entry[0] == _CONSUMER:
                self.outcome.add_closed(self._audit_batch(run))
                run = []
                self._audit_consumer(entry[2])  # type: ignore[arg-type]
            else:
                run.append(entry)
        self.outcome.add_closed(self._audit_batch(run))

    def _audit_epochs(self, epochs: list[Generation]) -> None:
        """KIP-848 epochs that raise no known count, in log order: in one batch of the kernels
        (lib.assignors.fast_audit, as audit_generation audits them) when there are enough to pay
        for its fixed cost and each has a value there, else one by one."""
        values = epoch_values(epochs) if len(epochs) >= EPOCH_BATCH else None
        if values is None:
            for gen in epochs:
                self._audit_consumer(gen)
            return
        self._apply_newer()  # (the previous generations in one place)
        table, _ = self._audited(self._epoch_batch(values, epochs), epochs)
        self.outcome.add_closed(table)

    @staticmethod
    def _epoch_batch(values: pa.StructArray, epochs: list[Generation]) -> GenerationBatch:
        """KIP-848 epochs as the kernels audit them (their values: epoch_values')."""
        return GenerationBatch.of(
            values,
            [gen.group_id for gen in epochs],
            [gen.offsets_partition for gen in epochs],
            [gen.log_offset for gen in epochs],
            [gen.at_ms for gen in epochs],
        )

    def _audit_consumer(self, gen: Generation) -> None:
        for m in gen.members:
            for topic, partition in m.assignment:
                self.known[topic] = max(self.known.get(topic, 0), partition + 1)
        row = audit_generation(gen, self._previous_of(gen.group_id), self.known)
        row["what_if"] = None
        self._consumer_rows.append(row)
        self._newer[gen.group_id] = gen  # (its owners are what the next audit reads)

    def _batch(self, entries: list) -> GenerationBatch:
        """The classic entries (_CLASSIC / _DELETE, and _BLOCKs of them) as a GenerationBatch,
        in their order."""
        groups: list[str] = []
        partitions: list[np.ndarray] = []
        offsets: list[np.ndarray] = []
        at: list[int | None] = []
        deleted: list[np.ndarray] = []
        sources: dict[int, int] = {}  # id(values) -> its index in `arrays`
        arrays: list[pa.Array] = []
        source: list[np.ndarray] = []
        rows: list[np.ndarray] = []

        def source_of(values: pa.Array) -> int:
            k = sources.get(id(values))
            if k is None:
                k = sources[id(values)] = len(arrays)
                arrays.append(values)
            return k

        single: list[tuple[int, str, _Open | None]] = []

        def flush_single() -> None:
            m = len(single)
            if not m:
                return
            part, off, src, row = (np.full(m, -1, t) for t in (np.int32, np.int64, np.int64, np.int64))
            gone = np.zeros(m, np.bool_)
            for i, (kind, group_id, o) in enumerate(single):
                groups.append(group_id)
                if kind == _DELETE or o is None:
                    gone[i] = True
                    at.append(None)
                    continue
                src[i], row[i] = source_of(o.values), o.row
                part[i], off[i] = o.offsets_partition, o.log_offset
                at.append(o.at_ms)
            partitions.append(part)
            offsets.append(off)
            deleted.append(gone)
            source.append(src)
            rows.append(row)
            single.clear()

        for entry in entries:
            if entry[0] != _BLOCK:
                single.append(entry)
                continue
            flush_single()
            block: _Block = entry[2]
            m = len(block.groups)
            groups.extend(block.groups)
            part = np.where(block.deleted, -1, block.offsets_partition).astype(np.int32)
            off = block.log_offset.copy()
            src = np.where(block.source >= 0, source_of(block.values), -1)
            row = np.maximum(block.source, 0)
            times = list(block.at_ms)
            for k, o in block.opens.items():  # generations of an earlier batch
                src[k], row[k] = source_of(o.values), o.row
                part[k], off[k], times[k] = o.offsets_partition, o.log_offset, o.at_ms
            at.extend(times)
            partitions.append(part)
            offsets.append(off)
            deleted.append(block.deleted)
            source.append(src)
            rows.append(row)
            assert m == len(part)
        flush_single()
        n = len(groups)
        gone = np.concatenate(deleted) if deleted else np.zeros(0, np.bool_)
        src_all = np.concatenate(source) if source else np.zeros(0, np.int64)
        row_all = np.concatenate(rows) if rows else np.zeros(0, np.int64)
        if not arrays:
            values = pa.nulls(n, AUDIT_VALUE_TYPE)
        else:
            # one take, from the sources one after the other (an entry with no source, a
            # tombstone, takes a null index: a null value); taking each source's rows, then
            # those in the entries' order, copied the nested values twice
            base = np.cumsum([0] + [len(a) for a in arrays[:-1]])
            whole = arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays)
            none = src_all < 0
            index = np.where(none, 0, base[np.maximum(src_all, 0)] + row_all)
            values = whole.take(pa.array(index, mask=none if none.any() else None))
        return GenerationBatch.of(
            values,
            groups,
            np.concatenate(partitions) if partitions else np.zeros(0, np.int32),
            np.concatenate(offsets) if offsets else np.zeros(0, np.int64),
            pa.array(at, pa.int64()),
            gone,
        )

    def _audit_batch(self, entries: list, keep_previous: bool = False) -> pa.Table:
        """The rows of these classic entries, audited against the groups' previous owners (and
        those left in place when `keep_previous`: the generations are still open)."""
        if not entries:
            return audit_rows_table([])
        table, after = self._audited(self._batch(entries), keep_previous=keep_previous)
        if keep_previous:
            states = after.states()
            for _, g, o in entries:
                o.audited = states.get(g)  # None: none yet (nothing assigned), as before it
        return table

    def _closed_and_opened(self, opened: list) -> bool:
        """The flush due and the open generations `opened` audited in one batch of the kernels,
        as the flush and then _audit_batch(opened, keep_previous=True) audit them; False, with
        nothing done, where the flush would not audit its generations in one batch itself (KIP-848
        epochs without classic generations, or one without a value there; a classic generation
        raising a count an epoch reads) or a value breaks Kafka's schema."""
        parts = self._finish_parts(opened)
        if parts is None:
            return False
        batch, flags, open_from, epochs = parts
        known = dict(self.known)
        mine = pc.is_in(self._previous.table.column("group_id"), pc.unique(batch.group_id))
        done = audit_closed_then_open(batch, Previous(self._previous.table.filter(mine)), self.known, open_from, flags)
        if done is None:
            return False
        if _read_raised(epochs, known, self.known):
            # (the flush audits them in turn; counts the open generations raised count too)
            self.known.clear()
            self.known.update(known)
            return False
        closed, still_open, after_closed, after_both = done
        groups = pa.array([g for _, g, _ in opened], pa.string())
        states = Previous(after_both.table.filter(pc.is_in(after_both.table.column("group_id"), groups))).states()
        self._finish_apply(mine, closed, still_open, after_closed, opened, states)
        return True

    def _finish_parts(self, opened: list) -> _FinishBatch | None:
        """finish's one batch of the kernels: the flush due (its classic generations, then its
        KIP-848 epochs), then the open generations `opened`; with each row's epoch (None: a
        classic generation), the row the open generations start at and the epochs. None where
        the flush would not audit its generations in one batch itself (KIP-848 epochs without
        classic generations, or one without a value there)."""
        classic, epochs, values = _split(self._pending)
        if epochs and values is None:
            return None
        self._apply_newer()
        parts = [self._batch(classic)] if classic else []
        if values is not None:
            parts.append(self._epoch_batch(values, epochs))
        parts.append(self._batch(opened))
        batch = GenerationBatch.concat(parts) if len(parts) > 1 else parts[0]
        open_from = len(batch) - len(opened)
        flags = [None] * (open_from - len(epochs)) + epochs + [None] * len(opened)
        return _FinishBatch(batch, flags, open_from, epochs)

    def _finish_apply(
        self, mine: pa.Array, closed: pa.Table, still_open: pa.Table, after_closed: Previous, opened: list, states: dict
    ) -> None:
        """finish's batch audited (_closed_and_opened, finish_together): the flush is done, the
        previous owners of the groups `mine` marks are those after the generations over, the open
        generations' own (`states`, by group) are kept with them."""
        self._pending, self._pending_kind, self._flush_due = [], {}, False
        self._previous = Previous(pa.concat_tables([self._previous.table.filter(pc.invert(mine)), after_closed.table]))
        self.outcome.add_closed(closed)
        self.outcome.add_closed(audit_rows_table(self._consumer_rows))
        for _, g, o in opened:
            o.audited = states.get(g)  # None: none yet (nothing assigned), as before it
        self.outcome.opened.append(still_open)

    def _audited(
        self, batch: GenerationBatch, epochs: list | None = None, keep_previous: bool = False
    ) -> tuple[pa.Table, Previous]:
        """The batch audited against its groups' previous owners (fast_audit.audit_classic_batch),
        and their owners after it, which replace theirs in `_previous` unless `keep_previous`."""
        mine = pc.is_in(self._previous.table.column("group_id"), pc.unique(batch.group_id))
        table, after = audit_classic_batch(batch, Previous(self._previous.table.filter(mine)), self.known, epochs)
        if not keep_previous:
            self._previous = Previous(pa.concat_tables([self._previous.table.filter(pc.invert(mine)), after.table]))
        return table, after

    def finish(self) -> AuditOutcome:
        """What this run's records add: the rows of the generations over, and of those still
        open (audited once; their previous generation stays the one before them)."""
        if self._finished:  # (by finish_together)
            return self.outcome
        opened = self._opened()
        if not (self._flush_due and opened and self._closed_and_opened(opened)):
            self._flush_due = False
            self._flush()
            self._apply_newer()
            self.outcome.add_closed(audit_rows_table(self._consumer_rows))
            self.outcome.opened.append(self._audit_batch(opened, keep_previous=True))
        self._states = Previous(self._touched_previous()).states()
        self._finished = True
        return self.outcome

    def _opened(self) -> list:
        return [(_CLASSIC, g, o) for g, o in self.open.items() if not o.carried]

    def _touched_previous(self) -> pa.Table:
        touched = pa.array(sorted(self.touched), pa.string())
        return self._previous.table.filter(pc.is_in(self._previous.table.column("group_id"), touched))


def finish_together(trackers: Sequence[AssignmentTracker]) -> None:
    """finish() of several trackers (an incremental run's task's partitions) in one batch of the
    kernels where it can be: each finish audits its flush due and its open generations in a
    batch of its own, about 150 generations of an incremental run's partition, and a batch's
    fixed cost (4 ms) was most of it. The batch holds every tracker's generations over, then
    every tracker's open ones, so each group's generations keep their order. Trackers join
    when their groups are their own (a group's records go to one offsets partition) and they
    know the same partition counts, which no generation of the batch raises: the kernels carry
    the counts from row to row, so a count one partition's generation raised would reach the
    rows of the partitions after it. Else, and for a tracker that cannot finish in one batch
    itself, nothing is done here: finish() does it, alone, as before."""
    joined = []
    for tracker in trackers:
        opened = tracker._opened()
        if tracker._finished or not (tracker._flush_due and opened):
            continue
        parts = tracker._finish_parts(opened)
        if parts is not None:
            joined.append((tracker, opened, parts))
    if len(joined) < 2:
        return
    known = joined[0][0].known
    groups = [pc.unique(parts.batch.group_id) for _, _, parts in joined]
    if any(t.known != known for t, _, _ in joined) or sum(map(len, groups)) != len(pc.unique(pa.concat_arrays(groups))):
        return
    closed = [parts.batch.slice(0, parts.open_from) for _, _, parts in joined]
    still = [parts.batch.slice(parts.open_from, len(parts.batch)) for _, _, parts in joined]
    batch = GenerationBatch.concat(closed + still)
    flags = [f for _, _, parts in joined for f in parts.flags[: parts.open_from]] + [
        f for _, _, parts in joined for f in parts.flags[parts.open_from :]
    ]
    open_from = sum(len(b) for b in closed)
    mines = [pc.is_in(t._previous.table.column("group_id"), g) for (t, _, _), g in zip(joined, groups)]
    previous = Previous(pa.concat_tables([t._previous.table.filter(m) for (t, _, _), m in zip(joined, mines)]))
    raised = dict(known)
    done = audit_closed_then_open_rows(batch, previous, raised, open_from, flags)
    if done is None or raised != known:
        return
    table, audited, after_closed, after_both = done
    # each tracker's rows: its generations over, then its open ones (the batch's rows, in order)
    ends = np.cumsum([0] + [len(b) for b in closed] + [len(b) for b in still])
    cut = np.searchsorted(audited, ends).tolist()
    k = len(joined)
    opened_groups = pa.array([g for _, opened, _ in joined for _, g, _ in opened], pa.string())
    states = Previous(after_both.table.filter(pc.is_in(after_both.table.column("group_id"), opened_groups))).states()
    group_of_after = after_closed.table.column("group_id")
    for i, ((tracker, opened, _), mine, g) in enumerate(zip(joined, mines, groups)):
        tracker._finish_apply(
            mine,
            table.slice(cut[i], cut[i + 1] - cut[i]),
            table.slice(cut[k + i], cut[k + i + 1] - cut[k + i]),
            Previous(after_closed.table.filter(pc.is_in(group_of_after, g))),
            opened,
            states,
        )
    touched = [t._touched_previous() for t, _, _ in joined]
    all_states = Previous(pa.concat_tables(touched)).states()
    for (tracker, _, _), rows in zip(joined, touched):
        tracker._states = {g: all_states[g] for g in rows.column("group_id").to_pylist()}
        tracker._finished = True


class _FinishBatch(NamedTuple):
    """finish's one batch of the kernels (AssignmentTracker._finish_parts)."""

    batch: GenerationBatch  # the flush due (classic generations, then KIP-848 epochs), then the open ones
    flags: list  # per row, its KIP-848 epoch (None: a classic generation)
    open_from: int  # the row the open generations start at
    epochs: list[Generation]


def _split(pending: list) -> tuple[list, list[Generation], pa.StructArray | None]:
    """A flush's entries: the classic ones, the KIP-848 epochs, and the epochs' values where
    the kernels audit them in one batch after the classic ones (None: not so; epochs without
    classic generations, or one without a value there)."""
    classic = [e for e in pending if e[0] != _CONSUMER]
    epochs: list[Generation] = [gen for kind, _, gen in pending if kind == _CONSUMER]
    return classic, epochs, epoch_values(epochs) if classic and epochs else None


def _read_raised(epochs: list[Generation], before: Mapping[str, int], after: Mapping[str, int]) -> bool:
    """Whether a count raised in a batch (`before` -> `after`) is one a KIP-848 epoch of it
    reads: an epoch reads the known counts of its members' subscribed topics only
    (audit_generation), so counts raised elsewhere leave its row as it is in log order (and the
    epochs waiting raise none: consumer_epoch)."""
    raised = {t for t, n in after.items() if before.get(t) != n}
    return any(t in raised for gen in epochs for m in gen.members for t in m.topics)


def _generation_of(group_id: str, state: dict) -> Generation:
    members = tuple(
        AuditMember(m["member_id"], (), tuple((t, int(p)) for t, p in m["assignment"]), group_instance_id=m["instance"])
        for m in state["members"]
    )
    return Generation(group_id, CLASSIC, 0, None, None, members, -1, -1)
