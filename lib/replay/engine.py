"""One __consumer_offsets partition replayed in log order, in one pass, as Kafka's loader does
(spec 4.3-4.4): committed offsets (per-key latest, tombstones, transactions), pending
transactional offsets and every group's fold, then expiry as of a chosen time (4.7).

The hot path is compiled: offset-commit keys are interned by their bytes (numba hash table)
and plain commits and tombstones are applied by a numba loop that keeps, per key, a reference
to the row that set its value. Rows that need more (group records, transactional commits,
markers, a tombstone of a key with pending entries) stop the loop and are applied here in
Python, then the loop resumes, so the order is the log's. Rows still referenced when a chunk
ends are copied out (Arrow take) and the chunk is dropped: memory is one chunk plus the live
state, whatever the log's length.

Reference semantics: `lib.replay.offsets.PartitionOffsets` and `lib.replay.groups.GroupFold`
(record by record); the tests check this engine against them."""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numba import njit

from lib.decode.numba_bytes import NO_REFCOUNT, copy_bytes, load_u64
from lib.numba_cache import use_stable_zip_cache
from lib.replay.assignment import AssignmentTracker
from lib.replay.expiry import offset_rule
from lib.replay.groups import ClassicGroup, GroupFold, GroupReplayError, ModernGroup, topic_ids_of
from schemas.records import OFFSET_COMMIT_TYPES, RecordType
from schemas.tables import (
    COMMIT_EVENT_SCHEMA,
    CONSUMER_GROUPS,
    GROUP_FOLD_STATE,
    GROUP_OFFSETS,
    PENDING_TRANSACTIONAL_OFFSETS,
)

use_stable_zip_cache(__file__)  # before the first @njit(cache=True): see lib.numba_cache


_OFFSET_COMMIT_TYPES = [int(t) for t in OFFSET_COMMIT_TYPES]
GROUP_METADATA = int(RecordType.GROUP_METADATA)
CONSUMER_GROUP_METADATA = int(RecordType.CONSUMER_GROUP_METADATA)
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = int(RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA)

VALUE_COLUMNS = GROUP_OFFSETS.column_names
# one schema for every retained table (the decoded batches' columns are all nullable)
VALUE_SCHEMA = pa.schema([f.with_nullable(True) for f in GROUP_OFFSETS.arrow_schema])
NONE = -1  # c_ref: no committed value
NO_PRODUCER = -1
# row kinds for the loop (CLASSIC_VALUE / CLASSIC_TOMBSTONE: a GroupMetadata record whose group
# has no other group record in the batch: the loop keeps the group's existence in log order, and
# the fold and the audit take the records after it)
SKIP, PLAIN, TOMBSTONE, PYTHON, CLASSIC_VALUE, CLASSIC_TOMBSTONE = 0, 1, 2, 3, 4, 5
# gstate: does the group exist, and is it a simple group created by an offset commit?
NO_GROUP, SIMPLE, OTHER = 0, 1, 2
FOLD_COLUMNS = [
    "offsets_partition",
    "group_id",
    "log_offset",
    "record_type",
    "is_tombstone",
    "member_id",
    "group_metadata",
    "value_json",
    "raw_key",
]
FOLD_COLUMNS_FLAT = [c for c in FOLD_COLUMNS if c != "group_metadata"]
_EVENT_VALUE_COLUMNS = ["group_id", "topic", "partition", "committed_offset", "offsets_partition", "log_offset"]
_TS = pa.timestamp("us", tz="UTC")
_EVENT_VALUE_SCHEMA = pa.schema([COMMIT_EVENT_SCHEMA.field(c) for c in _EVENT_VALUE_COLUMNS])


# --- interning byte strings (open addressing, a word-at-a-time hash) -------------------------------------------


@njit(cache=True, **NO_REFCOUNT)
def _hash(buf, a, n):
    """64-bit hash of buf[a:a+n], eight bytes a step (FNV-style multiply-xor, then a finaliser
    that mixes the high bits into the low ones the table's mask keeps)."""
    h = np.uint64(14695981039346656037) ^ np.uint64(n)
    i = a
    end = a + n
    while i + 8 <= end:
        h = (h ^ load_u64(buf, i)) * np.uint64(1099511628211)
        h ^= h >> np.uint64(29)
        i += 8
    while i < end:
        h = (h ^ np.uint64(buf[i])) * np.uint64(1099511628211)
        i += 1
    h ^= h >> np.uint64(32)
    h *= np.uint64(0xD6E8FEB86659FD93)
    h ^= h >> np.uint64(32)
    return h


@njit(cache=True, **NO_REFCOUNT)
def _same_bytes(x, xa, y, ya, n):
    i = 0
    while i + 8 <= n:
        if load_u64(x, xa + i) != load_u64(y, ya + i):
            return False
        i += 8
    while i < n:
        if x[xa + i] != y[ya + i]:
            return False
        i += 1
    return True


@njit(cache=True, **NO_REFCOUNT)
def _lookup(slots, hashes, pool, poff, plen, buf, a, n, h):
    """(slot index, id or -1) of the byte string buf[a:a+n]."""
    mask = len(slots) - 1
    s = np.int64(h & np.uint64(mask))
    while True:
        k = slots[s]
        if k < 0:
            return s, -1
        if hashes[k] == h and plen[k] == n and _same_bytes(pool, poff[k], buf, a, n):
            return s, k
        s = (s + 1) & mask


@njit(cache=True)
def _rehash(slots, hashes, count):
    mask = len(slots) - 1
    slots[:] = -1
    for k in range(count):
        s = np.int64(hashes[k] & np.uint64(mask))
        while slots[s] >= 0:
            s = (s + 1) & mask
        slots[s] = k


class _Interner:
    """Byte strings -> dense ids; capacity is ensured before each numba call."""

    def __init__(self, capacity: int = 1024):
        self.count = 0
        self.pool_used = 0
        self.slots = np.full(4 * capacity, -1, np.int64)
        self.hashes = np.zeros(capacity, np.uint64)
        self.poff = np.zeros(capacity, np.int64)
        self.plen = np.zeros(capacity, np.int64)
        self.pool = np.zeros(max(capacity * 32, 4096), np.uint8)

    def reserve(self, more_ids: int, more_bytes: int) -> None:
        need = self.count + more_ids
        if need > len(self.hashes):
            cap = max(need, 2 * len(self.hashes))
            for name in ("hashes", "poff", "plen"):
                old = getattr(self, name)
                new = np.zeros(cap, old.dtype)
                new[: self.count] = old[: self.count]
                setattr(self, name, new)
        if need * 2 > len(self.slots):
            size = len(self.slots)
            while need * 2 > size:
                size *= 2
            self.slots = np.full(size, -1, np.int64)
            _rehash(self.slots, self.hashes, self.count)
        if self.pool_used + more_bytes > len(self.pool):
            new = np.zeros(max(self.pool_used + more_bytes, 2 * len(self.pool)), np.uint8)
            new[: self.pool_used] = self.pool[: self.pool_used]
            self.pool = new

    def intern(self, data: bytes) -> int:
        self.reserve(1, len(data))
        buf = np.frombuffer(data, np.uint8)
        kid, self.count, self.pool_used = _intern_one(
            self.slots, self.hashes, self.pool, self.poff, self.plen, self.count, self.pool_used, buf, 0, len(data)
        )
        return kid

    def intern_strings(self, offsets: np.ndarray, data: np.ndarray) -> np.ndarray:
        """Ids of the strings data[offsets[i]:offsets[i + 1]], in one compiled call (a call per
        string costs more in dispatch than the interning itself)."""
        n = len(offsets) - 1
        self.reserve(n, int(offsets[-1] - offsets[0]) if n > 0 else 0)
        ids = np.empty(n, np.int64)
        self.count, self.pool_used = _intern_all(
            self.slots, self.hashes, self.pool, self.poff, self.plen, self.count, self.pool_used, data, offsets, ids
        )
        return ids

    def bytes_of(self, k: int) -> bytes:
        o = self.poff[k]
        return self.pool[o : o + self.plen[k]].tobytes()


@njit(cache=True, **NO_REFCOUNT)
def _intern_one(slots, hashes, pool, poff, plen, count, used, buf, a, n):
    h = _hash(buf, a, n)
    s, k = _lookup(slots, hashes, pool, poff, plen, buf, a, n, h)
    if k >= 0:
        return k, count, used
    k = count
    slots[s] = k
    hashes[k] = h
    poff[k] = used
    plen[k] = n
    copy_bytes(pool, used, buf, a, n)
    return k, count + 1, used + n


@njit(cache=True)
def _intern_all(slots, hashes, pool, poff, plen, count, used, data, offsets, ids):
    for i in range(len(ids)):
        ids[i], count, used = _intern_one(
            slots, hashes, pool, poff, plen, count, used, data, offsets[i], offsets[i + 1] - offsets[i]
        )
    return count, used


@njit(cache=True)
def _intern_keys(
    start,
    kind,
    raw_off,
    raw,
    k_slots,
    k_hash,
    k_pool,
    k_poff,
    k_plen,
    k_count,
    k_used,
    g_slots,
    g_hash,
    g_pool,
    g_poff,
    g_plen,
    g_count,
    g_used,
    k_group,
    row_key,
):
    """The key id of every offset-commit row from `start` (kind != SKIP; -1 elsewhere): its key
    bytes after the version (OffsetCommitKey v0 and v1 are the same key), and for a new key the
    id of its group (the key's first string). Stops at the first row that might not fit the
    tables (returned first, with the new counts): the caller grows them and calls again, so
    the tables stay as small as the keys they hold (a table sized for a batch's worth of new
    keys would not stay in cache)."""
    for r in range(start, len(kind)):
        if kind[r] == SKIP:
            row_key[r] = -1
            continue
        a = raw_off[r] + 2
        n = raw_off[r + 1] - a
        if (
            k_count >= len(k_hash)
            or 2 * (k_count + 1) > len(k_slots)
            or k_used + n > len(k_pool)
            or k_count >= len(k_group)
            or g_count >= len(g_hash)
            or 2 * (g_count + 1) > len(g_slots)
            or g_used + n > len(g_pool)
        ):
            return r, k_count, k_used, g_count, g_used
        before = k_count
        k, k_count, k_used = _intern_one(k_slots, k_hash, k_pool, k_poff, k_plen, k_count, k_used, raw, a, n)
        if k_count != before:  # a new key: intern its group too
            glen = (np.int64(raw[a]) << 8) | np.int64(raw[a + 1])
            g, g_count, g_used = _intern_one(g_slots, g_hash, g_pool, g_poff, g_plen, g_count, g_used, raw, a + 2, glen)
            k_group[k] = g
        row_key[r] = k
    return len(kind), k_count, k_used, g_count, g_used


@njit(cache=True)
def _apply(
    start,
    kind,
    row_key,
    row_group,
    log_offset,
    k_group,
    c_ref,
    c_off,
    kpend,
    gstate,
    gtouch,
    touched,
    n_touched,
    tmark,
    epoch,
):
    """Applies rows from `start` until one needs Python; returns (that row or len, n_touched)."""
    for r in range(start, len(kind)):
        t = kind[r]
        if t == SKIP:
            continue
        if t == PYTHON:
            return r, n_touched
        if t == CLASSIC_VALUE:
            gstate[row_group[r]] = OTHER
            continue
        if t == CLASSIC_TOMBSTONE:
            gstate[row_group[r]] = NO_GROUP
            continue
        k = row_key[r]
        if t == TOMBSTONE:
            if kpend[k] > 0:
                return r, n_touched
            c_ref[k] = NONE
        else:
            c_ref[k] = -(r + 2)
            c_off[k] = log_offset[r]
            g = k_group[k]
            if gstate[g] == NO_GROUP:
                gstate[g] = SIMPLE
                gtouch[g] = log_offset[r]
            elif gstate[g] == SIMPLE:
                gtouch[g] = log_offset[r]
        if tmark[k] != epoch:
            tmark[k] = epoch
            touched[n_touched] = k
            n_touched += 1
    return len(kind), n_touched


def _grow(a: np.ndarray, n: int, fill) -> np.ndarray:
    if n <= len(a):
        return a
    new = np.full(max(n, 2 * len(a)), fill, a.dtype)
    new[: len(a)] = a
    return new


def _string_buffers(col) -> tuple[np.ndarray, np.ndarray]:
    """(int64 offsets, data) of a string column."""
    arr = pa.concat_arrays(col.chunks) if isinstance(col, pa.ChunkedArray) else col
    arr = arr.cast(pa.large_string())
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], np.int64)[arr.offset : arr.offset + len(arr) + 1]
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    return offsets, data


@njit(cache=True)
def _build_keys(g_off, g_data, t_off, t_data, parts):
    """OffsetCommitKey v1 bytes (version, group, topic, partition) of each row."""
    n = len(parts)
    out_off = np.empty(n + 1, np.int64)
    total = 0
    for i in range(n):
        out_off[i] = total
        total += 2 + 2 + (g_off[i + 1] - g_off[i]) + 2 + (t_off[i + 1] - t_off[i]) + 4
    out_off[n] = total
    data = np.empty(total, np.uint8)
    w = 0
    for i in range(n):
        data[w] = 0
        data[w + 1] = 1
        w += 2
        for off, buf in ((g_off, g_data), (t_off, t_data)):
            a, b = off[i], off[i + 1]
            ln = b - a
            data[w] = (ln >> 8) & 0xFF
            data[w + 1] = ln & 0xFF
            w += 2
            copy_bytes(data, w, buf, a, ln)
            w += ln
        p = parts[i]
        data[w] = (p >> 24) & 0xFF
        data[w + 1] = (p >> 16) & 0xFF
        data[w + 2] = (p >> 8) & 0xFF
        data[w + 3] = p & 0xFF
        w += 4
    return out_off, data


def _key_bytes(group: str, topic: str, partition: int) -> bytes:
    g, t = group.encode(), topic.encode()
    return struct.pack(">h", len(g)) + g + struct.pack(">h", len(t)) + t + struct.pack(">i", partition)


class PartitionReplay:
    """Feed offsets_log batches of one partition in log order, then `finish`."""

    def __init__(self, partition: int):
        self.partition = partition
        self.keys = _Interner(4096)
        self.groups = _Interner(1024)
        self.k_group = np.zeros(4096, np.int64)
        self.c_ref = np.full(4096, NONE, np.int64)
        self.c_off = np.zeros(4096, np.int64)
        self.kpend = np.zeros(4096, np.int64)
        self.tmark = np.full(4096, -1, np.int64)
        self.gstate = np.zeros(1024, np.int8)
        self.gtouch = np.zeros(1024, np.int64)
        self.folds: dict[int, GroupFold] = {}
        self.group_names: dict[int, str] = {}
        self.pending: dict[int, dict[int, tuple[int, int]]] = {}  # producer -> key -> (ref, log offset)
        self.retained: list[pa.Table] = []
        self.retained_rows = 0
        self.topic_names: dict[str, str] = {}
        self.epoch = 0
        self.records = 0
        self.emit_commit_events = False
        self._classic_values: tuple | None = None  # (group_metadata column, decoder's values) of the batch fed
        self._audit_values: pa.Array | None = None  # its audit_view (the audit's, as it feeds)
        self._classic_read: dict[int, dict] = {}  # values read from that batch, by row
        self.audit: AssignmentTracker | None = None  # set to audit assignments in the pass
        self._audit_loaded: set[int] = set()
        self._events: list[pa.Table] = []
        self._applied: list[tuple[int, int]] = []  # (value ref, marker row) of a batch

    # --- state across runs ---------------------------------------------------------------------
    def load(
        self,
        committed: pa.Table | None,
        pending: pa.Table | None,
        folds: pa.Table | None,
        group_rows: pa.Table | None = None,
    ) -> None:
        """The state a previous run left: committed offsets before expiry (group_offsets and
        expired_offsets rows), pending transactional offsets, group fold states, and
        optionally the groups' rows (consumer_groups and expired_groups), which let a classic
        group's state stay unparsed until a record of the group arrives."""
        if committed is not None and committed.num_rows:
            committed = committed.select(VALUE_COLUMNS).cast(VALUE_SCHEMA)
            kids = self._intern_values(committed)
            self._ensure_keys()
            idx = len(self.retained)
            self.retained.append(committed)
            self.retained_rows += committed.num_rows
            self.c_ref[kids] = (idx << 32) | np.arange(len(kids), dtype=np.int64)
            self.c_off[kids] = committed.column("log_offset").to_numpy()
        if pending is not None and pending.num_rows:
            values = pending.select([c for c in VALUE_COLUMNS if c in pending.column_names])
            values = values.append_column(
                "expire_timestamp", pa.nulls(values.num_rows, GROUP_OFFSETS.arrow_schema.field("expire_timestamp").type)
            )
            values = (
                values.append_column("topic_id", pa.nulls(values.num_rows, pa.string()))
                .select(VALUE_COLUMNS)
                .cast(VALUE_SCHEMA)
            )
            kids = self._intern_values(values)
            self._ensure_keys()
            idx = len(self.retained)
            self.retained.append(values)
            self.retained_rows += values.num_rows
            offs = values.column("log_offset").to_pylist()
            for j, (pid, k) in enumerate(zip(pending.column("producer_id").to_pylist(), kids.tolist())):
                entries = self.pending.setdefault(pid, {})
                if k not in entries:
                    self.kpend[k] += 1
                entries[k] = ((idx << 32) | j, offs[j])
        if folds is not None and folds.num_rows:
            rows = {r["group_id"]: r for r in group_rows.to_pylist()} if group_rows is not None else {}
            gids = self.groups.intern_strings(*_string_buffers(folds.column("group_id"))).tolist()
            self._ensure_groups()
            for g, row in zip(gids, folds.to_pylist()):
                fold = GroupFold.from_state(
                    row["group_id"],
                    row["fold_state"],
                    row["offsets_partition"],
                    row["log_offset"],
                    rows.get(row["group_id"]),
                )
                self.group_names.setdefault(g, row["group_id"])
                self.folds[g] = fold
                if fold.untouched:
                    self.gstate[g] = OTHER  # a classic group that is not simple
                else:
                    self._sync_group(g, fold)

    def load_folds(self, folds: dict[str, GroupFold]) -> None:
        """Group folds held in memory (the coordinator's), instead of their serialised states."""
        for group_id, fold in folds.items():
            g = self._group_id(group_id)
            self.folds[g] = fold
            self._sync_group(g, fold)

    def _intern_values(self, t: pa.Table) -> np.ndarray:
        """Key ids of state rows (group_id, topic, partition columns): their OffsetCommitKey bytes
        are built in one compiled pass."""
        g = _string_buffers(t.column("group_id"))
        tp = _string_buffers(t.column("topic"))
        parts = t.column("partition").to_numpy().astype(np.int64)
        offsets, data = _build_keys(g[0], g[1], tp[0], tp[1], parts)
        arr = pa.Array.from_buffers(pa.large_binary(), len(parts), [None, pa.py_buffer(offsets), pa.py_buffer(data)])
        kind = np.full(len(parts), PLAIN, np.int8)
        return self._intern_rows(kind, arr)

    def _group_id(self, group_id: str) -> int:
        g = self.groups.intern(group_id.encode())
        self._ensure_groups()
        self.group_names.setdefault(g, group_id)
        return g

    def _ensure_keys(self) -> None:
        n = self.keys.count
        self.k_group = _grow(self.k_group, n, 0)
        self.c_ref = _grow(self.c_ref, n, NONE)
        self.c_off = _grow(self.c_off, n, 0)
        self.kpend = _grow(self.kpend, n, 0)
        self.tmark = _grow(self.tmark, n, -1)

    def _ensure_groups(self) -> None:
        n = self.groups.count
        self.gstate = _grow(self.gstate, n, NO_GROUP)
        self.gtouch = _grow(self.gtouch, n, 0)

    def _intern_rows(self, kind: np.ndarray, raw_key: pa.Array) -> np.ndarray:
        n = len(kind)
        bufs = raw_key.buffers()
        wide = pa.types.is_large_binary(raw_key.type)
        offsets = np.frombuffer(bufs[1], np.int64 if wide else np.int32)[raw_key.offset : raw_key.offset + n + 1]
        data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
        longest = int(np.diff(offsets).max()) if n else 0
        row_key = np.empty(n, np.int64)
        k, g = self.keys, self.groups
        r = 0
        while True:
            r, k.count, k.pool_used, g.count, g.pool_used = _intern_keys(
                r,
                kind,
                offsets,
                data,
                k.slots,
                k.hashes,
                k.pool,
                k.poff,
                k.plen,
                k.count,
                k.pool_used,
                g.slots,
                g.hashes,
                g.pool,
                g.poff,
                g.plen,
                g.count,
                g.pool_used,
                self.k_group,
                row_key,
            )
            if r >= n:
                break
            # grown by doubling: amortised O(1) a key, and no larger than twice what is held
            k.reserve(max(k.count, 1024), max(k.pool_used, 64 * 1024) + longest)
            g.reserve(max(g.count, 1024), max(g.pool_used, 64 * 1024) + longest)
            self.k_group = _grow(self.k_group, 2 * len(k.hashes), 0)
        self._ensure_keys()
        self._ensure_groups()
        return row_key

    # --- groups ----------------------------------------------------------------------------------
    def _sync_group(self, g: int, fold: GroupFold) -> None:
        grp = fold.group
        if grp is None:
            self.gstate[g] = NO_GROUP
        elif isinstance(grp, ClassicGroup) and grp.simple:
            self.gstate[g] = SIMPLE
            self.gtouch[g] = fold.log_offset if fold.log_offset is not None else -1
        else:
            self.gstate[g] = OTHER

    def _fold(self, g: int) -> GroupFold:
        """The group's fold, brought up to date with what the compiled loop did to it."""
        fold = self.folds.get(g)
        if fold is None:
            fold = self.folds[g] = GroupFold(self._group_name(g))
        if self.gstate[g] == SIMPLE:
            if fold.group is None or not (isinstance(fold.group, ClassicGroup) and fold.group.simple):
                fold.group = ClassicGroup(None, 0, None, None, None, [], simple=True)
            fold.offsets_partition = self.partition
            fold.log_offset = int(self.gtouch[g])
        elif self.gstate[g] == NO_GROUP:
            fold.group = None
        return fold

    def _group_name(self, g: int) -> str:
        name = self.group_names.get(g)
        if name is None:
            name = self.group_names[g] = self.groups.bytes_of(g).decode("utf-8")
        return name

    # --- the replay ------------------------------------------------------------------------------
    def feed(self, batch: pa.RecordBatch, group_metadata: dict[int, dict] | None = None) -> None:
        """Applies one offsets_log batch (rows in log order). `group_metadata`: the decoder's
        Python values of the batch's group_metadata column by row (SegmentDecoder's
        batch_group_metadata), which spare converting that nested column back."""
        n = batch.num_rows
        if n == 0:
            return
        self.records += n
        col = batch.column
        ok = pc.equal(col("decode_status"), "ok").to_numpy(zero_copy_only=False)
        control = col("is_control").to_numpy(zero_copy_only=False)
        rtype = col("record_type").fill_null(-1).to_numpy()
        tomb = col("is_tombstone").to_numpy(zero_copy_only=False)
        pid = col("producer_id").to_numpy()
        oc = ok & ~control & np.isin(rtype, _OFFSET_COMMIT_TYPES)
        kind = np.full(n, SKIP, np.int8)
        kind[oc & ~tomb & (pid == NO_PRODUCER)] = PLAIN
        kind[oc & tomb] = TOMBSTONE
        kind[oc & ~tomb & (pid != NO_PRODUCER)] = PYTHON
        ctype = col("control_type")
        marker = control & pc.is_in(ctype, pa.array(["COMMIT", "ABORT"])).to_numpy(zero_copy_only=False)
        kind[marker] = PYTHON
        group_rec = ok & ~control & (rtype != -1) & ~oc
        kind[group_rec] = PYTHON
        row_key = self._intern_rows(np.where(oc, PLAIN, SKIP).astype(np.int8), col("raw_key"))
        log_offset = col("log_offset").to_numpy()
        self._topic_pairs(batch, oc & ~tomb)
        self.epoch += 1
        # each key once: this batch's rows, and the keys a marker here commits, which its
        # transaction may have written in earlier batches (or runs)
        before = sum(len(entries) for entries in self.pending.values()) if marker.any() else 0
        touched = np.empty(n + 1 + before, np.int64)
        n_touched = 0
        group_rows: dict[int, dict] = {}
        row_group = np.full(n, -1, np.int64)
        deferred = np.zeros(0, np.int64)
        classic_rows: _ClassicRows | None = None
        if group_rec.any():
            idx = np.flatnonzero(group_rec)
            # the groups' ids interned at once (a compiled call per row cost more than the row)
            gids = self.groups.intern_strings(*_string_buffers(col("group_id").take(pa.array(idx))))
            self._ensure_groups()
            row_group[idx] = gids
            # times as ms, for the audit: the column at once (a datetime per row cost more)
            at_ms = _millis(col("log_timestamp"))
            # GroupMetadata records of groups with no other group record in the batch: kept in
            # the compiled loop (see CLASSIC_VALUE), the fold and the audit take them after it,
            # from these arrays (a dict per record cost most of their time)
            classic = rtype[idx] == GROUP_METADATA
            others = np.unique(gids[~classic])
            simple_order = classic & ~np.isin(gids, others)
            deferred = idx[simple_order]
            kind[deferred] = np.where(tomb[deferred], CLASSIC_TOMBSTONE, CLASSIC_VALUE)
            if len(deferred):
                classic_rows = _ClassicRows(deferred, gids[simple_order], tomb[deferred], log_offset[deferred], at_ms)
            # the other group records (KIP-848, share and streams ones; classic ones of groups
            # that have those in the batch) as dicts, for the fold
            rest = idx[~simple_order]
            if len(rest):
                rows = batch.select(FOLD_COLUMNS_FLAT).take(pa.array(rest)).to_pylist()
                for row, g, r in zip(rows, gids[~simple_order].tolist(), rest.tolist()):
                    row["_g"], row["_r"], row["_at_ms"] = g, r, at_ms[r]
                    self.group_names.setdefault(g, row["group_id"])
                group_rows = dict(zip(rest.tolist(), rows))
        # GroupMetadata values are read from the batch only for the groups that still hold one
        # when the batch is done (or that something looks into before): a busy log replaces most
        # of them within a batch, and reading the nested value back is most of its cost
        self._classic_values = (batch.column("group_metadata"), group_metadata)
        self._classic_read = {}
        lazy: dict[int, GroupFold] = {}
        generations = None
        if self.audit is not None and group_rec.any():
            from lib.assignors.fast_audit import audit_view

            nested = batch.column("group_metadata")
            generations = pc.struct_field(nested, "generation").fill_null(0).to_numpy(zero_copy_only=False)
            self._audit_values = audit_view(nested)  # what the audit keeps of the values
        is_commit: np.ndarray | None = None
        r = 0
        while True:
            r, n_touched = _apply(
                r,
                kind,
                row_key,
                row_group,
                log_offset,
                self.k_group,
                self.c_ref,
                self.c_off,
                self.kpend,
                self.gstate,
                self.gtouch,
                touched,
                n_touched,
                self.tmark,
                self.epoch,
            )
            if r >= n:
                break
            if group_rec[r]:
                row = group_rows[r]
                if row["record_type"] == GROUP_METADATA and not row["is_tombstone"]:
                    lazy[r] = self._apply_classic_value(row, r)
                else:
                    self._apply_group_record(row)
                if self.audit is not None:
                    self._audit_record(row, r, generations)
            elif marker[r]:
                if is_commit is None:
                    is_commit = pc.equal(ctype, "COMMIT").to_numpy(zero_copy_only=False)
                n_touched = self._end_transaction(int(pid[r]), bool(is_commit[r]), touched, n_touched, r)
            elif tomb[r]:
                k = int(row_key[r])
                self._clear_pending(k)
                self.c_ref[k] = NONE
                n_touched = self._touch(k, touched, n_touched)
            else:  # a transactional commit: pending until its producer's marker
                k = int(row_key[r])
                entries = self.pending.setdefault(int(pid[r]), {})
                if k not in entries:
                    self.kpend[k] += 1
                entries[k] = (-(r + 2), int(log_offset[r]))
                g = int(self.k_group[k])
                if self.gstate[g] == NO_GROUP:
                    self.gstate[g] = SIMPLE
                    self.gtouch[g] = log_offset[r]
                elif self.gstate[g] == SIMPLE:
                    self.gtouch[g] = log_offset[r]
            r += 1
        if classic_rows is not None:
            self._apply_classic_records(classic_rows, lazy, generations)
        # the values still unread when the batch goes: copied out of it, read only if something
        # looks into the group (most are replaced by a later record, read or not)
        pending = {r: fold for r, fold in lazy.items() if fold.classic_pending}
        if pending:
            assert self._classic_values is not None
            kept = self._classic_values[0].take(pa.array(list(pending), pa.int64()))
            for i, fold in enumerate(pending.values()):
                fold.keep_classic(functools.partial(_kept_value, kept, i))
        if self.audit is not None:
            self.audit.end_batch()
        self._classic_values = self._audit_values = None
        self._classic_read = {}
        if self.emit_commit_events:
            self._collect_events(batch, kind == PLAIN, log_offset)
        self._retain(batch, touched[:n_touched])

    def take_commit_events(self) -> pa.Table | None:
        """The offset commits that took effect since the last call (COMMIT_EVENT_SCHEMA, in the
        order they took effect), when `emit_commit_events` is on."""
        if not self._events:
            return None
        events, self._events = self._events, []
        return pa.concat_tables(events) if len(events) > 1 else events[0]

    def _collect_events(self, batch: pa.RecordBatch, plain: np.ndarray, log_offset: np.ndarray) -> None:
        applied, self._applied = self._applied, []
        if not plain.any() and not applied:
            return
        at = batch.column("log_timestamp").cast(_TS)
        rows = np.flatnonzero(plain)
        applied_rows = np.array([r for _, r in applied], np.int64)
        refs = np.array([ref for ref, _ in applied], np.int64)
        here = refs <= -2
        # the events' values: rows of this batch (its commits, then those a marker here commits
        # that were written here), then those of earlier batches a marker here commits
        value_rows = np.concatenate([rows, -(refs[here] + 2)])
        by_row = np.concatenate([rows, applied_rows[here], applied_rows[~here]])
        values = pa.Table.from_batches([batch.select(_EVENT_VALUE_COLUMNS)])
        stored = self._take(refs[~here]).select(_EVENT_VALUE_COLUMNS) if (~here).any() else None
        offsets = log_offset[value_rows]
        if stored is not None:
            offsets = np.concatenate([offsets, stored.column("log_offset").to_numpy()])
        # in the order they took effect: by the row that made each effective, then log offset
        order = np.lexsort((offsets, by_row))
        by_row = by_row[order]
        if stored is None:  # (most batches) taken once, in that order
            table = values.take(pa.array(value_rows[order])).cast(_EVENT_VALUE_SCHEMA)
        else:
            table = pa.concat_tables(
                [values.take(pa.array(value_rows)).cast(_EVENT_VALUE_SCHEMA), stored.cast(_EVENT_VALUE_SCHEMA)]
            ).take(pa.array(order))
        table = table.append_column("applied_offset", pa.array(log_offset[by_row])).append_column(
            "applied_at", at.take(pa.array(by_row))
        )
        self._events.append(table.cast(COMMIT_EVENT_SCHEMA))

    def _touch(self, k: int, touched: np.ndarray, n_touched: int) -> int:
        if self.tmark[k] != self.epoch:
            self.tmark[k] = self.epoch
            touched[n_touched] = k
            n_touched += 1
        return n_touched

    def _apply_classic_records(self, rows: _ClassicRows, lazy: dict, generations) -> None:
        """GroupMetadata records the compiled loop kept the groups' existence of (CLASSIC_VALUE,
        CLASSIC_TOMBSTONE), in log order: the audit takes each, the fold the last of its group."""
        p = self.partition
        where = rows.rows.tolist()
        groups = rows.groups.tolist()
        tombs = rows.tombstone.tolist()
        offsets = rows.offset.tolist()
        if self.audit is not None:
            for g in set(groups) - self._audit_loaded:
                self._load_audit(g)
            assert self._audit_values is not None
            self.audit.classic_records(
                [self._group_name(g) for g in groups],
                rows.groups,
                generations[rows.rows],
                p,
                rows.offset,
                [rows.at_ms[r] for r in where],
                rows.tombstone,
                self._audit_values,
                rows.rows,
            )
        last = {g: i for i, g in enumerate(groups)}  # each group's last record
        for g, i in last.items():
            fold = self.folds.get(g)
            if fold is None:
                fold = self.folds[g] = GroupFold(self._group_name(g))
            if tombs[i]:
                fold.delete_classic(p, offsets[i])  # the group's state after it: the loop's (a commit may make it anew)
            else:
                fold.set_classic(functools.partial(self._classic_value, where[i]), p, offsets[i])
                lazy[where[i]] = fold

    def _apply_classic_value(self, row: dict, r: int) -> GroupFold:
        """A GroupMetadata record (a value): the group is classic, its value read when needed."""
        g = row["_g"]
        fold = self._fold(g)
        fold.set_classic(functools.partial(self._classic_value, r), row["offsets_partition"], row["log_offset"])
        self.gstate[g] = OTHER
        return fold

    def _classic_value(self, r: int) -> dict:
        value = self._classic_read.get(r)
        if value is None:
            assert self._classic_values is not None, "read while its batch is fed"
            column, decoded = self._classic_values
            value = decoded.get(r) if decoded is not None else None
            if value is None:
                value = column[r].as_py()
            self._classic_read[r] = value  # the fold and the audit read the same value
        return value

    def _audit_record(self, row: dict, r: int, generations) -> None:
        """The assignment audit's view of a group record (lib.replay.assignment)."""
        assert self.audit is not None
        rtype, group_id = row["record_type"], row["group_id"]
        g = row["_g"]
        if g not in self._audit_loaded:
            self._load_audit(g)
        at_ms = row["_at_ms"]
        if rtype == GROUP_METADATA:
            if row["is_tombstone"]:
                self.audit.group_deleted(group_id)
            else:
                assert self._audit_values is not None
                self.audit.classic(
                    group_id,
                    int(generations[r]),
                    row["offsets_partition"],
                    row["log_offset"],
                    at_ms,
                    self._audit_values,
                    r,
                )
        elif rtype == CONSUMER_GROUP_METADATA and row["is_tombstone"]:
            self.audit.group_deleted(group_id)
        elif rtype == CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA and not row["is_tombstone"]:
            group = self.folds[g].group
            if isinstance(group, ModernGroup):
                self.audit.names.update(self.topic_names)  # what the partition's commits name so far
                self.audit.consumer_epoch(
                    group_id, group.assignment_epoch, row["offsets_partition"], row["log_offset"], at_ms, group
                )

    def _load_audit(self, g: int) -> None:
        """The audit state an earlier run left with the group's fold, once per group."""
        assert self.audit is not None
        self._audit_loaded.add(g)
        state = self.folds[g].audit_state if g in self.folds else None
        if state:
            self.audit.load(self._group_name(g), state)

    def _apply_group_record(self, row: dict) -> None:
        g = row["_g"] if "_g" in row else self._group_id(row["group_id"])
        fold = self._fold(g)
        try:
            fold.apply(row)
        except GroupReplayError as e:
            e.partition, e.offset = row["offsets_partition"], row["log_offset"]
            raise
        self._sync_group(g, fold)

    def _end_transaction(self, producer: int, commit: bool, touched, n_touched, marker_row: int = -1) -> int:
        for k, (ref, off) in self.pending.pop(producer, {}).items():
            self.kpend[k] -= 1
            # a later non-transactional commit wins over the transaction's record
            if commit and (self.c_ref[k] == NONE or off > self.c_off[k]):
                self.c_ref[k] = ref
                self.c_off[k] = off
                n_touched = self._touch(k, touched, n_touched)
                if self.emit_commit_events:
                    self._applied.append((ref, marker_row))
        return n_touched

    def _clear_pending(self, k: int) -> None:
        if self.kpend[k] <= 0:
            return
        for producer in list(self.pending):
            entries = self.pending[producer]
            if entries.pop(k, None) is not None:
                self.kpend[k] -= 1
                if not entries:
                    del self.pending[producer]

    def _topic_pairs(self, batch: pa.RecordBatch, values: np.ndarray) -> None:
        """The topic names of the topic ids the batch's commits carry: each id's name at its last
        commit in the batch (a later batch's over an earlier one's). Without Arrow's group_by,
        whose module (pyarrow.acero, and pyarrow.dataset it imports) a replay task would import
        for it alone (and the local pool's server, which prepares what tasks import)."""
        tid = batch.column("topic_id")
        if tid.null_count == len(tid):
            return
        rows = np.flatnonzero(values & tid.is_valid().to_numpy(zero_copy_only=False))
        if not len(rows):
            return
        ids = tid.take(pa.array(rows))
        codes = pc.dictionary_encode(ids).indices.to_numpy()
        _, from_end = np.unique(codes[::-1], return_index=True)
        last = pa.array(rows[len(rows) - 1 - from_end])
        for topic_id, topic in zip(tid.take(last).to_pylist(), batch.column("topic").take(last).to_pylist()):
            self.topic_names[topic_id] = topic

    def _retain(self, batch: pa.RecordBatch, touched: np.ndarray) -> None:
        """Copies out the rows of this batch that the state still references."""
        refs = self.c_ref[touched]
        cur = touched[refs <= -2]
        pend = (
            [
                (producer, k, ref)
                for producer, entries in self.pending.items()
                for k, (ref, _) in entries.items()
                if ref <= -2
            ]
            if self.pending
            else []
        )
        rows = -(self.c_ref[cur] + 2)
        if pend:
            rows = np.concatenate([rows, np.array([-(ref + 2) for _, _, ref in pend], np.int64)])
        if len(rows) == 0:
            return
        uniq = np.unique(rows)
        idx = len(self.retained)
        self.retained.append(
            pa.Table.from_batches([batch.select(VALUE_COLUMNS)]).take(pa.array(uniq)).cast(VALUE_SCHEMA)
        )
        self.retained_rows += len(uniq)
        self.c_ref[cur] = (idx << 32) | np.searchsorted(uniq, -(self.c_ref[cur] + 2))
        for producer, k, ref in pend:
            _, off = self.pending[producer][k]
            self.pending[producer][k] = ((idx << 32) | int(np.searchsorted(uniq, -(ref + 2))), off)
        live = int((self.c_ref[: self.keys.count] >= 0).sum())
        if self.retained_rows > 2 * live + 262_144:
            self._compact()

    def _compact(self) -> None:
        """One retained table holding only the rows the state references."""
        n = self.keys.count
        live_keys = np.flatnonzero(self.c_ref[:n] >= 0)
        pend = [(producer, k, ref) for producer, entries in self.pending.items() for k, (ref, _) in entries.items()]
        refs = np.concatenate([self.c_ref[live_keys], np.array([p[2] for p in pend], np.int64)])
        table = self._take(refs)
        self.retained = [table]
        self.retained_rows = table.num_rows
        self.c_ref[live_keys] = np.arange(len(live_keys), dtype=np.int64)
        for j, (producer, k, _) in enumerate(pend):
            _, off = self.pending[producer][k]
            self.pending[producer][k] = (len(live_keys) + j, off)

    def _take(self, refs: np.ndarray) -> pa.Table:
        if not self.retained:
            return pa.Table.from_batches([], schema=GROUP_OFFSETS.arrow_schema)
        sizes = np.array([t.num_rows for t in self.retained], np.int64)
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        flat = starts[refs >> 32] + (refs & 0xFFFFFFFF)
        return pa.concat_tables(self.retained).take(pa.array(flat)).combine_chunks()

    # --- the result -------------------------------------------------------------------------------
    def finish(
        self, now_ms: int, retention_ms: int, other_topic_names: dict | None = None, fold_states: bool = True
    ) -> dict:
        """Arrow tables of the partition's state, judged at now_ms: group_offsets,
        expired_offsets, pending_transactional_offsets, consumer_groups, expired_groups,
        group_fold_state; and `expiry_changes_at` (the first later `now` at which the
        judgement would differ, None if never)."""
        n = self.keys.count
        live_keys = np.flatnonzero(self.c_ref[:n] >= 0)
        offsets = self._take(self.c_ref[live_keys]).cast(GROUP_OFFSETS.arrow_schema)
        pending = self._pending_table()
        # every group that exists, with its fold brought up to date
        for g in np.flatnonzero(self.gstate[: self.groups.count] != NO_GROUP).tolist():
            self._fold(g)
        audit = None
        if self.audit is not None:
            audit = self.audit.finish()
            for fold in self.folds.values():
                if fold.group_id in self.audit.touched:
                    fold.audit_state = self.audit.state(fold.group_id)
        groups: dict[str, dict] = {}
        states: list[dict] = []
        names = {**(other_topic_names or {}), **self.topic_names}
        unresolved: set = set()
        for g, fold in sorted(self.folds.items(), key=lambda kv: kv[1].group_id):
            if self.gstate[g] == NO_GROUP:
                continue
            row = fold.result(names)
            if row is None:
                continue
            if not fold.untouched and isinstance(fold.group, ModernGroup):
                unresolved |= topic_ids_of(fold.group) - set(fold.group.topic_names) - {None}
            groups[fold.group_id] = row
            if fold_states:
                states.append(
                    {
                        "offsets_partition": fold.offsets_partition,
                        "group_id": fold.group_id,
                        "log_offset": fold.log_offset,
                        "fold_state": fold.to_state(),
                    }
                )
        expired, changes_at = self._judge_offsets(offsets, live_keys, groups, now_ms, retention_ms)
        exp_mask = pa.array(expired, pa.bool_())
        live_offsets = offsets.filter(pc.invert(exp_mask))
        expired_offsets = offsets.filter(exp_mask)
        with_live = set(live_offsets.column("group_id").to_pylist())
        open_txn = set(pending.column("group_id").to_pylist())
        live_groups: list[dict] = []
        deleted_groups: list[dict] = []
        for gid, row in groups.items():
            deleted = (
                gid not in with_live
                and gid not in open_txn
                and row["state"] == "Empty"
                and row["group_type"] != "share"
            )
            (deleted_groups if deleted else live_groups).append(row)
        schema = CONSUMER_GROUPS.arrow_schema
        return {
            "group_offsets": live_offsets,
            "expired_offsets": expired_offsets,
            "pending_transactional_offsets": pending,
            "consumer_groups": pa.Table.from_pylist(live_groups, schema=schema),
            "expired_groups": pa.Table.from_pylist(deleted_groups, schema=schema),
            "group_fold_state": pa.Table.from_pylist(states, schema=GROUP_FOLD_STATE.arrow_schema),
            "expiry_changes_at": changes_at,
            "unresolved_topic_ids": sorted(unresolved),
            "assignment_audit": audit,  # the assignment audit's rows (lib.replay.assignment.AuditOutcome)
        }

    def _pending_table(self) -> pa.Table:
        items = [
            (producer, k, ref)
            for producer, entries in sorted(self.pending.items())
            for k, (ref, _) in sorted(entries.items())
        ]
        schema = PENDING_TRANSACTIONAL_OFFSETS.arrow_schema
        if not items:
            return pa.Table.from_batches([], schema=schema)
        values = self._take(np.array([i[2] for i in items], np.int64))
        cols = {"producer_id": pa.array([i[0] for i in items], pa.int64())}
        for f in schema:
            if f.name != "producer_id":
                cols[f.name] = values.column(f.name)
        return pa.table(cols).cast(schema)

    def _judge_offsets(self, offsets: pa.Table, keys: np.ndarray, groups: dict, now_ms: int, retention_ms: int):
        """lib.replay.expiry's judgement of each live offset (rows of `offsets`, whose key ids
        are `keys`), vectorised: the rule is decided per group and per (group, topic), the
        instants per row. Returns (expired mask, the first later instant the judgement changes)."""
        n = offsets.num_rows
        if n == 0:
            return np.zeros(0, bool), None
        gcodes = pc.dictionary_encode(offsets.column("group_id")).combine_chunks()
        tcodes = pc.dictionary_encode(offsets.column("topic")).combine_chunks()
        g_idx = gcodes.indices.to_numpy()
        t_idx = tcodes.indices.to_numpy()
        topics = tcodes.dictionary.to_pylist()
        gids = gcodes.dictionary.to_pylist()
        eligible_pair = np.zeros((len(gids), len(topics)), bool)
        use_state = np.zeros(len(gids), bool)
        state_ms = np.full(len(gids), -1, np.int64)
        for i, gid in enumerate(gids):
            group = groups.get(gid)
            kind, subscribed, use = offset_rule(group)
            if kind == "always":
                eligible_pair[i, :] = True
            elif kind == "unsubscribed":
                eligible_pair[i, :] = [t not in subscribed for t in topics]
            if use and group is not None and group.get("current_state_timestamp") is not None:
                use_state[i] = True
                state_ms[i] = _floor_ms(group["current_state_timestamp"])
        # offsets with a pending transactional commit are not expired (Kafka skips their keys)
        eligible = eligible_pair[g_idx, t_idx] & (self.kpend[keys] == 0)

        def millis(column):
            col = offsets.column(column).combine_chunks()
            valid = col.is_valid().to_numpy(zero_copy_only=False)
            values = col.cast(pa.int64()).fill_null(0).to_numpy() // 1000
            return values, valid

        commit_ms, has_commit = millis("commit_timestamp")
        expire_ms, has_expire = millis("expire_timestamp")
        # expires_at: an explicit expiry wins; else the state timestamp (empty groups) or the commit
        by_state = use_state[g_idx]
        base = np.where(by_state, state_ms[g_idx], commit_ms)
        has_base = by_state | has_commit
        at = np.where(has_expire, expire_ms, base + retention_ms)
        has_at = eligible & (has_expire | has_base)
        expired = has_at & (now_ms >= at)
        later = has_at & ~expired
        changes_at = int(at[later].min()) if later.any() else None
        return expired, changes_at


def _floor_ms(value) -> int:
    """ms since the epoch of a TIMESTAMP value (µs int or datetime), as Spark's unix_millis."""
    if isinstance(value, int):
        return value // 1000
    import datetime as dt

    delta = value - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return (delta.days * 86_400_000_000 + delta.seconds * 1_000_000 + delta.microseconds) // 1000


@dataclass
class _ClassicRows:
    """A batch's GroupMetadata records that the compiled loop keeps in order (CLASSIC_VALUE,
    CLASSIC_TOMBSTONE): their rows, interned groups, tombstone flags and log offsets; `at_ms`
    is the batch's (by row)."""

    rows: np.ndarray
    groups: np.ndarray
    tombstone: np.ndarray
    offset: np.ndarray
    at_ms: list


def _millis(column: pa.Array) -> list:
    """A TIMESTAMP column as ms since the epoch by row (floored, as Spark's unix_millis; None
    where null), a Python list: the audit takes them one by one."""
    micros = column.cast(pa.int64())
    values = np.floor_divide(micros.fill_null(0).to_numpy(), 1000).tolist()
    if micros.null_count:
        for i in np.flatnonzero(micros.is_null().to_numpy(zero_copy_only=False)).tolist():
            values[i] = None
    return values


def _kept_value(values: pa.Array, i: int) -> dict:
    """A GroupMetadata value copied out of its batch, as the fold reads it."""
    return values[i].as_py()
