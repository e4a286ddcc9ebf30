"""The Arrow buffers of a chunk of lib.decode.fast's rows, written by numba in a pass or two, so
that lib.decode.fast wraps them (pa.Array.from_buffers) instead of converting numpy columns
one by one (masks, casts, a gather per string column, labels by lookup).

`row_buffers` writes every top-level column but group_metadata and value_json (and the constant
ones): fixed-width values, validity bitmaps and bool columns (bit-packed), and each string or
binary column's int32 offsets and bytes, all copied in one pass over the rows (a row's key,
value and the strings inside them are neighbours in the segment). `value_buffers` writes the
group_metadata struct's own fields over every row of a chunk from its few values; `gather`
writes the string and bytes fields of a level below it (members, topics).

A string column whose bytes pass 2**31 - 1 in one chunk (int32 offsets) is flagged `big`, its
bytes left out: lib.decode.fast builds that column as before (int64 offsets)."""

from __future__ import annotations

import numpy as np
from numba import njit

from lib.decode.numba_bytes import base64_into, copy_bytes
from lib.numba_cache import use_stable_zip_cache

use_stable_zip_cache(__file__)  # before the first @njit(cache=True): see lib.numba_cache

_INT32_MAX = 2**31 - 1
_CONTROL = 0x20
_TRANSACTIONAL = 0x10
_OFFSET_COMMIT = 1  # record types <= this are offset commits (schemas.records.RecordType)
_GROUP_METADATA = 2

# row_buffers' string and binary columns (rows of its offsets, bitmaps of its validity)
(
    S_KEY,
    S_VALUE,
    S_GROUP,
    S_MEMBER,
    S_TOPIC,
    S_METADATA,
    S_TOPIC_ID,
    S_COMPRESSION,
    S_TYPE_NAME,
    S_CONTROL_TYPE,
) = range(10)
STRINGS = 10
# its other bitmaps, after the strings' validity: bool columns' values, then validities
(
    B_TRANSACTIONAL,
    B_CONTROL,
    B_TOMBSTONE,
    V_RECORD_TYPE,
    V_VALUE_VERSION,
    V_COORDINATOR_EPOCH,
    V_PARTITION,
    V_COMMITTED,
    V_LEADER_EPOCH,
    V_LOG_TS,
    V_COMMIT_TS,
    V_EXPIRE_TS,
) = range(STRINGS, STRINGS + 12)
BITMAPS = STRINGS + 12
# its fixed-width columns: rows of the int64, int32 and int16 outputs
# (the others are lib.decode.fast._records' own columns)
I64_BASE, I64_PRODUCER_ID, I64_LOG_TS, I64_COMMIT_TS, I64_EXPIRE_TS = range(5)
I16_PRODUCER_EPOCH = 0


@njit(cache=True, inline="always")
def _clamp_ts(v, lo, hi, scale):
    return (lo if v < lo else hi if v > hi else v) * scale


@njit(cache=True, nogil=True)
def _pack(flags, nulls):
    """(k x n) 0/1 bytes -> k little-endian bitmaps; nulls[j]: the zeros of row j."""
    k, n = flags.shape
    bits = np.zeros((k, (n + 7) >> 3), np.uint8)
    for j in range(k):
        zeros = 0
        for b in range(n >> 3):
            i = b << 3
            v = (
                flags[j, i]
                | (flags[j, i + 1] << 1)
                | (flags[j, i + 2] << 2)
                | (flags[j, i + 3] << 3)
                | (flags[j, i + 4] << 4)
                | (flags[j, i + 5] << 5)
                | (flags[j, i + 6] << 6)
                | (flags[j, i + 7] << 7)
            )
            bits[j, b] = v
        for i in range(n & ~7, n):
            bits[j, i >> 3] |= flags[j, i] << (i & 7)
        for i in range(n):
            zeros += 1 - flags[j, i]
        nulls[j] = zeros
    return bits


@njit(cache=True, nogil=True)
def row_layout(  # noqa: C901 - numba kernel: one pass over the rows for every column
    r0,
    r1,
    sel,
    entry,
    e_base,
    e_attr,
    e_pid,
    e_pepoch,
    ts,
    key_len,
    val_len,
    rtype,
    vver,
    group_len,
    topic_len,
    lepoch,
    meta_len,
    cts,
    ets,
    tid,
    member_len,
    codec_off,
    type_off,
    control_off,
    lo_ms,
    hi_ms,
    scale,
    i64,
    i16,
    bitmaps,
    offsets,
):
    """Rows r0..r1 (or the rows `sel` when it has any) of lib.decode.fast._records' columns (and the
    entries' `e_*`): the fixed-width
    columns that are not _records' own into i64 (I64_* x n) and i16, their bitmaps (BITMAPS x bytes:
    validity, and the bool columns' values) and their string columns' offsets (STRINGS x n + 1,
    int32), all allocated by the caller. Returns (the bytes of each string column, nulls per
    bitmap, odd_control: a control type with no name in `control_off`, that column left to the
    caller). The names are byte ranges (`*_off`), as lib.decode.fast._name_table; timestamps
    are held within [lo_ms, hi_ms] and times `scale`; their null values are 0. Two loops over
    the rows, each writing part of the buffers: a dozen streams at a time, not forty (15% less
    time)."""
    picked = len(sel) > 0
    n = len(sel) if picked else r1 - r0
    # the entries' columns spread over their rows, and the timestamps (held in range, in the
    # column's unit)
    for i in range(n):
        r = sel[i] if picked else r0 + i
        e = entry[r]
        i64[I64_BASE, i] = e_base[e]
        i64[I64_PRODUCER_ID, i] = e_pid[e]
        i16[I16_PRODUCER_EPOCH, i] = e_pepoch[e]
        x = ts[r]
        i64[I64_LOG_TS, i] = _clamp_ts(x, lo_ms, hi_ms, scale) if x != -1 else 0
        oc = (e_attr[e] & _CONTROL) == 0 and rtype[r] <= _OFFSET_COMMIT and val_len[r] >= 0
        i64[I64_COMMIT_TS, i] = _clamp_ts(cts[r], lo_ms, hi_ms, scale) if oc else 0
        x = ets[r]
        i64[I64_EXPIRE_TS, i] = _clamp_ts(x, lo_ms, hi_ms, scale) if oc and x != -1 else 0
    # the bitmaps and the strings' offsets
    acc = np.zeros(BITMAPS, np.int64)
    t0 = t1 = t2 = t3 = t4 = t5 = t6 = t7 = t8 = t9 = 0
    n_types = len(type_off) - 1
    n_controls = len(control_off) - 1
    odd_control = False
    for i in range(n):
        r = sel[i] if picked else r0 + i
        bit = 1 << (i & 7)
        e = entry[r]
        attr = e_attr[e]
        vlen = val_len[r]
        t = rtype[r]
        if vver[r] >= 0:
            acc[V_VALUE_VERSION] |= bit
        if attr & _TRANSACTIONAL:
            acc[B_TRANSACTIONAL] |= bit
        if vlen < 0:
            acc[B_TOMBSTONE] |= bit
        if ts[r] != -1:
            acc[V_LOG_TS] |= bit
        offsets[S_KEY, i] = t0
        t0 += max(key_len[r], 0)
        offsets[S_VALUE, i] = t1
        t1 += max(vlen, 0)
        c = attr & 7
        offsets[S_COMPRESSION, i] = t7
        t7 += max(codec_off[c + 1] - codec_off[c], 0)
        n_group = n_member = n_topic = n_metadata = n_topic_id = n_type = n_control = -1
        if attr & _CONTROL:
            acc[B_CONTROL] |= bit
            if t >= 0 and t < n_controls:
                n_control = control_off[t + 1] - control_off[t]
            else:
                odd_control = True
            if t == 0 or t == 1:
                acc[V_COORDINATOR_EPOCH] |= bit
        else:
            acc[V_RECORD_TYPE] |= bit
            if t >= 0 and t < n_types:
                n_type = type_off[t + 1] - type_off[t]
            n_group = group_len[r]
            if t > _GROUP_METADATA:
                n_member = member_len[r]
            elif t <= _OFFSET_COMMIT:
                n_topic = topic_len[r]
                acc[V_PARTITION] |= bit
                if vlen >= 0:
                    acc[V_COMMITTED] |= bit
                    if lepoch[r] != -1:
                        acc[V_LEADER_EPOCH] |= bit
                    n_metadata = meta_len[r]
                    acc[V_COMMIT_TS] |= bit
                    if ets[r] != -1:
                        acc[V_EXPIRE_TS] |= bit
                    if tid[r] >= 0:
                        n_topic_id = 22  # Kafka's Uuid.toString() of its 16 bytes
        offsets[S_GROUP, i] = t2
        t2 += max(n_group, 0)
        offsets[S_MEMBER, i] = t3
        t3 += max(n_member, 0)
        offsets[S_TOPIC, i] = t4
        t4 += max(n_topic, 0)
        offsets[S_METADATA, i] = t5
        t5 += max(n_metadata, 0)
        offsets[S_TOPIC_ID, i] = t6
        t6 += max(n_topic_id, 0)
        offsets[S_TYPE_NAME, i] = t8
        t8 += max(n_type, 0)
        offsets[S_CONTROL_TYPE, i] = t9
        t9 += max(n_control, 0)
        if key_len[r] >= 0:
            acc[S_KEY] |= bit
        if vlen >= 0:
            acc[S_VALUE] |= bit
        acc[S_COMPRESSION] |= bit
        if n_group >= 0:
            acc[S_GROUP] |= bit
        if n_member >= 0:
            acc[S_MEMBER] |= bit
        if n_topic >= 0:
            acc[S_TOPIC] |= bit
        if n_metadata >= 0:
            acc[S_METADATA] |= bit
        if n_topic_id >= 0:
            acc[S_TOPIC_ID] |= bit
        if n_type >= 0:
            acc[S_TYPE_NAME] |= bit
        if n_control >= 0:
            acc[S_CONTROL_TYPE] |= bit
        if bit == 128 or i == n - 1:
            b = i >> 3
            for j in range(BITMAPS):
                bitmaps[j, b] = acc[j]
                acc[j] = 0
    totals = np.array([t0, t1, t2, t3, t4, t5, t6, t7, t8, t9], np.int64)
    for j in range(STRINGS):
        offsets[j, n] = totals[j]
    return totals, _zeros(bitmaps, n), odd_control


@njit(cache=True, nogil=True)
def _zeros(bitmaps, n):
    """The zero bits among the first n of each bitmap."""
    k = bitmaps.shape[0]
    out = np.zeros(k, np.int64)
    for j in range(k):
        ones = 0
        for b in range(n >> 3):
            v = bitmaps[j, b]
            v = (v & 0x55) + ((v >> 1) & 0x55)
            v = (v & 0x33) + ((v >> 2) & 0x33)
            ones += (v & 0x0F) + (v >> 4)
        for i in range(n & ~7, n):
            ones += (bitmaps[j, i >> 3] >> (i & 7)) & 1
        out[j] = n - ones
    return out


@njit(cache=True, nogil=True)
def row_bytes(
    seg,
    extra,
    r0,
    r1,
    sel,
    entry,
    e_attr,
    rtype,
    key_off,
    val_off,
    group_off,
    member_off,
    topic_off,
    meta_off,
    tid,
    codec_off,
    codec_names,
    type_off,
    type_names,
    control_off,
    control_names,
    alphabet,
    offsets,
    starts,
    copy,
    data,
):
    """The bytes of row_layout's string columns (those with `copy`), column j's at
    data[starts[j]:], by its offsets (the same rows: r0..r1, or `sel`)."""
    seglen = len(seg)
    picked = len(sel) > 0
    n = len(sel) if picked else r1 - r0
    sources = (key_off, val_off, group_off, member_off, topic_off, meta_off)  # S_KEY..S_METADATA's
    for i in range(n):
        r = sel[i] if picked else r0 + i
        for j in range(S_TOPIC_ID):
            ln = offsets[j, i + 1] - offsets[j, i]
            if ln > 0 and copy[j]:
                o = sources[j][r]
                at = starts[j] + offsets[j, i]
                # (no helper taking the arrays: numba's reference counting of them per call
                # would cost several times the copy)
                if o < seglen:
                    copy_bytes(data, at, seg, o, ln)
                else:
                    copy_bytes(data, at, extra, o - seglen, ln)
        ln = offsets[S_TOPIC_ID, i + 1] - offsets[S_TOPIC_ID, i]
        if ln > 0 and copy[S_TOPIC_ID]:
            o = tid[r]
            at = starts[S_TOPIC_ID] + offsets[S_TOPIC_ID, i]
            if o < seglen:
                base64_into(data, at, seg, o, 16, alphabet, False)
            else:
                base64_into(data, at, extra, o - seglen, 16, alphabet, False)
        ln = offsets[S_COMPRESSION, i + 1] - offsets[S_COMPRESSION, i]
        if ln > 0 and copy[S_COMPRESSION]:
            at = starts[S_COMPRESSION] + offsets[S_COMPRESSION, i]
            copy_bytes(data, at, codec_names, codec_off[e_attr[entry[r]] & 7], ln)
        ln = offsets[S_TYPE_NAME, i + 1] - offsets[S_TYPE_NAME, i]
        if ln > 0 and copy[S_TYPE_NAME]:
            copy_bytes(data, starts[S_TYPE_NAME] + offsets[S_TYPE_NAME, i], type_names, type_off[rtype[r]], ln)
        ln = offsets[S_CONTROL_TYPE, i + 1] - offsets[S_CONTROL_TYPE, i]
        if ln > 0 and copy[S_CONTROL_TYPE]:
            at = starts[S_CONTROL_TYPE] + offsets[S_CONTROL_TYPE, i]
            copy_bytes(data, at, control_names, control_off[rtype[r]], ln)


@njit(cache=True, nogil=True)
def gather(seg, extra, offs, lens, data):
    """The string and bytes columns of a level's items: (start, length) pairs (k x n; null where
    the length is < 0) into `data` (the caller's, exactly their bytes; no column over int32
    offsets), column by column. Returns (int32 offsets (k x n + 1), starts (column j's bytes are
    data[starts[j]:starts[j + 1]]), bitmaps (k x bytes), nulls)."""
    seglen = len(seg)
    k, n = offs.shape
    offsets = np.empty((k, n + 1), np.int32)
    flags = np.zeros((k, n), np.uint8)
    starts = np.zeros(k + 1, np.int64)
    for j in range(k):
        total = 0
        for i in range(n):
            offsets[j, i] = total
            ln = lens[j, i]
            if ln >= 0:
                flags[j, i] = 1
                total += ln
        offsets[j, n] = total
        starts[j + 1] = starts[j] + total
    for i in range(n):
        for j in range(k):
            ln = lens[j, i]
            if ln > 0:
                o = offs[j, i]
                at = starts[j] + offsets[j, i]
                if o < seglen:
                    copy_bytes(data, at, seg, o, ln)
                else:
                    copy_bytes(data, at, extra, o - seglen, ln)
    nulls = np.zeros(k, np.int64)
    bitmaps = _pack(flags, nulls)
    return offsets, starts, bitmaps, nulls


@njit(cache=True, nogil=True)
def value_buffers(seg, extra, n, at, values, lo, hi, k_strings, generation, state_ts, members_end, lo_ms, hi_ms, scale):
    """The group_metadata struct's own fields over the n rows of a chunk, from lib.decode.
    group_kernel's `values` lo..hi at rows `at` (increasing): its first `k_strings` rows (starts,
    then lengths) as strings; `generation` (int32), `state_ts` (an optional timestamp) and the
    members lists' offsets (from `members_end`). Returns (offsets (k_strings x n + 1), data,
    starts, bitmaps (k_strings + 2: the strings', the values' presence, the state timestamp's),
    nulls (per bitmap), big (per string), generation (int32, n), state timestamps (int64, n),
    member list offsets (int32, n + 1)); nothing for the rows between the values but offsets."""
    seglen = len(seg)
    k = hi - lo
    gen = np.zeros(n, np.int32)
    tsv = np.zeros(n, np.int64)
    bitmaps = np.zeros((k_strings + 2, (n + 7) >> 3), np.uint8)
    ones = np.zeros(k_strings + 2, np.int64)
    offsets = np.empty((k_strings, n + 1), np.int32)
    member_offsets = np.empty(n + 1, np.int32)
    starts = np.zeros(k_strings + 1, np.int64)
    big = np.zeros(k_strings, np.bool_)
    # the strings' offsets (row by row: every row has one), and the other fields at the values' rows
    for j in range(k_strings):
        total = 0
        i = 0
        for q in range(k):
            row = at[q]
            while i <= row:
                offsets[j, i] = total
                i += 1
            ln = values[k_strings + j, lo + q]
            if ln >= 0:
                total += ln
                bitmaps[j, row >> 3] |= np.uint8(1 << (row & 7))
                ones[j] += 1
        while i <= n:
            offsets[j, i] = total
            i += 1
        big[j] = total > _INT32_MAX
        starts[j + 1] = starts[j] + (0 if big[j] else total)
    first = values[members_end, lo - 1] if lo > 0 else 0
    total = 0
    i = 0
    for q in range(k):
        v = lo + q
        row = at[q]
        while i <= row:
            member_offsets[i] = total
            i += 1
        end = values[members_end, v]
        total = end - first
        gen[row] = values[generation, v]
        bitmaps[k_strings, row >> 3] |= np.uint8(1 << (row & 7))
        ones[k_strings] += 1
        x = values[state_ts, v]
        if x != -1:
            tsv[row] = _clamp_ts(x, lo_ms, hi_ms, scale)
            bitmaps[k_strings + 1, row >> 3] |= np.uint8(1 << (row & 7))
            ones[k_strings + 1] += 1
    while i <= n:
        member_offsets[i] = total
        i += 1
    data = np.empty(starts[k_strings], np.uint8)
    for q in range(k):
        v = lo + q
        row = at[q]
        for j in range(k_strings):
            ln = values[k_strings + j, v]
            if ln > 0 and not big[j]:
                o = values[j, v]
                w = starts[j] + offsets[j, row]
                if o < seglen:
                    copy_bytes(data, w, seg, o, ln)
                else:
                    copy_bytes(data, w, extra, o - seglen, ln)
    nulls = n - ones
    return (
        offsets,
        data,
        starts,
        bitmaps[:k_strings],
        nulls[:k_strings],
        big,
        bitmaps[k_strings:],
        nulls[k_strings:],
        gen,
        tsv,
        member_offsets,
    )
