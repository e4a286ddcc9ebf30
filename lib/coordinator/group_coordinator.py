"""A lightweight, JVM-free group coordinator load step.

On immigration of an offsets partition it loads the partition's groups, committed offsets
and pending transactional offsets from the Delta tables (read with delta-rs, no Spark), then
replays only the records after the partition's checkpoint, fetched from the live topic, and
marks the partition owned. Lookups for a partition that is loading answer "loading"; for a
partition it does not own, "not coordinator" (as GroupCoordinator does)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Literal, overload

from lib.lake.delta import CompletedRuns, completed_runs, read_committed, table_path
from lib.replay.groups import GroupFold
from lib.replay.offsets import PartitionOffsets
from lib.replay.partitioning import partition_for
from schemas import tables as T

LOADING, OWNED = "loading", "owned"
RELOADS = 3  # loads of a partition done again when a segment of its log dir goes while it is read


class NotCoordinatorError(Exception):
    """This coordinator does not own the group's partition."""


class CoordinatorLoadInProgressError(Exception):
    """The group's partition is still being loaded."""


@dataclass
class PartitionState:
    offsets: PartitionOffsets = field(default_factory=PartitionOffsets)
    groups: dict[str, GroupFold] = field(default_factory=dict)
    topic_names: dict[str, str] = field(default_factory=dict)
    next_offset: int = 0
    next_position: tuple = (None, None)  # (byte position, segment base) where the tables' run stopped
    loaded_from_tables: int = 0
    tail_records: int = 0
    load_seconds: float = 0.0


def _read_partition(warehouse: str, table: T.Table, partition: int, completed: CompletedRuns):
    """The rows of one offsets partition of a table as the completed runs left it (delta-rs),
    as Arrow; None if absent."""
    return read_committed(table_path(warehouse, table), completed, partition)


class GroupCoordinator:
    def __init__(
        self,
        warehouse: str | None,
        bootstrap_servers: str | None = None,
        partition_count: int | None = None,
        log_dir: str | None = None,
        fetch_max_bytes: int | None = None,
    ):
        """The tail comes from the live topic (`bootstrap_servers`) or, for offline use and
        benchmarks, from a broker log dir's segment files (`log_dir`). `fetch_max_bytes`: the
        size limit of each Fetch of the live topic (default lib.source.live.FETCH_MAX_BYTES)."""
        if (bootstrap_servers is None) == (log_dir is None):
            raise ValueError("give exactly one of bootstrap_servers and log_dir")
        self.warehouse = warehouse
        self.bootstrap = bootstrap_servers
        self.log_dir = log_dir
        self.fetch_max_bytes = fetch_max_bytes
        self._partition_count = partition_count
        self._states: dict[int, str] = {}
        self._partitions: dict[int, PartitionState] = {}
        self._lock = threading.Lock()

    # --- ownership ---------------------------------------------------------------------------
    @property
    def partition_count(self) -> int:
        if self._partition_count is None and self.log_dir is not None:
            from lib.source.logdir import find_partitions

            self._partition_count = max(pl.partition for pl in find_partitions(self.log_dir)) + 1
        if self._partition_count is None:
            from lib.source.live import OffsetsTopicReader

            assert self.bootstrap is not None, "the constructor takes a log dir or a bootstrap"
            reader = OffsetsTopicReader(self.bootstrap)
            try:
                self._partition_count = len(reader.partitions())
            finally:
                reader.close()
        return self._partition_count

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.partition_count)

    @overload
    def immigrate(self, partition: int, background: Literal[False] = False) -> PartitionState: ...
    @overload
    def immigrate(self, partition: int, background: Literal[True]) -> threading.Thread: ...

    def immigrate(self, partition: int, background: bool = False) -> PartitionState | threading.Thread:
        with self._lock:
            self._states[partition] = LOADING
        if background:
            t = threading.Thread(target=self._load, args=(partition,), daemon=True)
            t.start()
            return t
        return self._load(partition)

    def emigrate(self, partition: int) -> None:
        with self._lock:
            self._states.pop(partition, None)
            self._partitions.pop(partition, None)

    def owned_partitions(self) -> list[int]:
        return sorted(p for p, s in self._states.items() if s == OWNED)

    # --- the load step -----------------------------------------------------------------------
    def _load(self, partition: int) -> PartitionState:
        """The partition's load, done again from the start when a segment of a log dir goes
        while it is read (a live broker's log cleaner merges segments into the first one and
        deletes the others; retention deletes the oldest): the segments are listed anew, and the
        records read from a replaced file are not mixed with its replacement's. A load that
        fails leaves the partition not owned (lookups answer "not coordinator", as before the
        immigration), not loading for ever."""
        try:
            for attempt in range(RELOADS + 1):
                try:
                    state = self._load_once(partition)
                    break
                except FileNotFoundError:
                    if self.log_dir is None or attempt == RELOADS:
                        raise
        except BaseException:
            with self._lock:
                if self._states.get(partition) == LOADING:
                    self._states.pop(partition, None)
            raise
        with self._lock:
            if self._states.get(partition) == LOADING:  # not emigrated meanwhile
                self._partitions[partition] = state
                self._states[partition] = OWNED
        return state

    def _load_once(self, partition: int) -> PartitionState:
        from lib.replay.engine import PartitionReplay

        t0 = time.monotonic()
        state = PartitionState()
        # one engine (lib.replay.engine, as the Spark tasks use) seeded from the tables, then
        # the tail; the state kept for lookups is taken from it once at the end
        engine = PartitionReplay(partition)
        if self.warehouse:
            self._load_tables(self.warehouse, partition, state, engine)
        self._replay_tail(partition, state, engine)
        self._take_engine_state(engine, state)
        state.load_seconds = time.monotonic() - t0
        return state

    def _load_tables(self, warehouse: str, partition: int, state: PartitionState, engine) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        # a run that died between its table commits is not seen: its tables are read at the
        # versions the completed runs left (the next run rolls the dead one back)
        completed = completed_runs(table_path(warehouse, T.REPLAY_CHECKPOINTS))
        found = _read_partition(warehouse, T.REPLAY_CHECKPOINTS, partition, completed)
        checkpoints = found.to_pylist() if found is not None else []
        if not checkpoints:
            return  # never replayed: the whole partition comes from the topic
        state.next_offset = checkpoints[0]["next_log_offset"]
        state.next_position = (
            checkpoints[0].get("next_byte_position"),
            (checkpoints[0].get("source_signature") or "").split(":", 1)[0],
        )
        # Kafka holds every offset still in the log: expiry is a prediction of tombstones
        # not yet written, so expired offsets are loaded too.
        parts = [
            t
            for t in (
                _read_partition(warehouse, table, partition, completed)
                for table in (T.GROUP_OFFSETS, T.EXPIRED_OFFSETS)
            )
            if t is not None
        ]
        committed = pa.concat_tables(parts) if parts else None
        pending = _read_partition(warehouse, T.PENDING_TRANSACTIONAL_OFFSETS, partition, completed)
        folds = _read_partition(warehouse, T.GROUP_FOLD_STATE, partition, completed)
        engine.load(committed, pending, folds)
        state.loaded_from_tables = sum(t.num_rows for t in (committed, pending, folds) if t is not None)
        if committed is not None and committed.num_rows:
            named = committed.filter(pc.is_valid(committed.column("topic_id")))
            state.topic_names.update(zip(named.column("topic_id").to_pylist(), named.column("topic").to_pylist()))

    def _replay_tail(self, partition: int, state: PartitionState, engine) -> None:
        if self.log_dir is not None:
            self._replay_tail_from_files(partition, state, engine)
            return
        from lib.lake.partition_task import LiveTopicRead

        assert self.bootstrap is not None, "the constructor takes a log dir or a bootstrap"
        live = LiveTopicRead(self.bootstrap, partition, state.next_offset, fetch_max_bytes=self.fetch_max_bytes)
        for batch in live:
            engine.feed(batch, live.batch_group_metadata)
        state.tail_records += live.records
        state.next_offset = live.next_offset

    def _replay_tail_from_files(self, partition: int, state: PartitionState, engine) -> None:
        from lib.lake.partition_task import ReadProgress, read_segments
        from lib.source.logdir import find_partitions, segments_from

        assert self.log_dir is not None
        (log,) = find_partitions(self.log_dir, [partition])
        segs = segments_from(log, state.next_offset)
        position, base = getattr(state, "next_position", (None, None))
        start_position = position if position is not None and segs and base == str(segs[0].base_offset) else None
        progress = ReadProgress()

        def consume(batches):
            for batch in batches:
                engine.feed(batch, batches.batch_group_metadata)

        segments = [(seg.path, seg.base_offset) for seg in segs]
        read_segments(partition, state.next_offset, segments, start_position, progress, None, consume)
        state.tail_records += progress.records
        if progress.next_offset is not None:
            state.next_offset = max(state.next_offset, progress.next_offset)

    @staticmethod
    def _take_engine_state(engine, state: PartitionState) -> None:
        from lib.replay.engine import NO_GROUP

        # both tables: Kafka holds every offset still in the log (expiry is not applied on load)
        out = engine.finish(0, 1, fold_states=False)
        offsets = PartitionOffsets()
        for table in ("group_offsets", "expired_offsets"):
            for row in out[table].to_pylist():
                offsets.load_committed(row)
        for row in out["pending_transactional_offsets"].to_pylist():
            offsets.load_pending(row["producer_id"], row)
        state.offsets = offsets
        state.groups = {
            f.group_id: f for g, f in engine.folds.items() if engine.gstate[g] != NO_GROUP and f.group is not None
        }
        state.topic_names.update(engine.topic_names)

    # --- lookups -------------------------------------------------------------------------------
    def _owned_state(self, group_id: str) -> PartitionState:
        p = self.partition_for(group_id)
        status = self._states.get(p)
        if status is None:
            raise NotCoordinatorError(f"not the coordinator of group {group_id!r} (partition {p})")
        if status == LOADING:
            raise CoordinatorLoadInProgressError(f"partition {p} of group {group_id!r} is loading")
        return self._partitions[p]

    def committed_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None = None) -> dict:
        """{(topic, partition): entry} of a group; empty for a group that does not exist (as
        OffsetFetch answers: offsets left behind by a group tombstone are not visible)."""
        state = self._owned_state(group_id)
        if group_id not in state.groups:
            return {}
        out = {(k[1], k[2]): e for k, e in state.offsets.offsets.items() if k[0] == group_id}
        if partitions is not None:
            out = {tp: e for tp, e in out.items() if tp in set(partitions)}
        return out

    def describe_group(self, group_id: str) -> dict | None:
        state = self._owned_state(group_id)
        fold = state.groups.get(group_id)
        return None if fold is None else fold.result(state.topic_names)

    def list_groups(self) -> list[dict]:
        out = []
        for p in self.owned_partitions():
            state = self._partitions[p]
            for g, fold in sorted(state.groups.items()):
                row = fold.result(state.topic_names)
                if row is None:  # deleted (a tombstone) but still folded
                    continue
                out.append(
                    {
                        "group_id": g,
                        "group_type": row["group_type"],
                        "state": row["state"],
                        "protocol_type": row["protocol_type"],
                        "offsets_partition": p,
                    }
                )
        return out
