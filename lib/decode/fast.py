"""Fast path of lib.decode.SegmentDecoder: numba kernels over the segment's bytes.

The output is exactly what the pure-Python decoder yields (same Arrow batches, chunk
boundaries, counters, errors, quarantine rows). How:

1. `_frame` (one numba pass) hops over the entries as SegmentReader does, steps over the
   batches below the start offset on their headers, checks each magic-2 batch's header and
   CRC-32C, and classifies every entry: FAST (uncompressed, or no records), COMP (compressed:
   decompressed in Python with lib.codec.compression, then parsed like FAST), SLOW (anything
   else: legacy magic 0/1, a bad CRC, an odd header), SKIP, or TAIL (an entry size below the
   minimum: nothing after it can be framed).
2. `_records` (one numba pass) parses the records of every FAST/COMP batch (varints) and
   decodes the hot case in place: OffsetCommit keys (type 0/1) with tombstones or values
   v0-v4, transaction markers, and GroupMetadata keys (type 2) with tombstones or values
   v0-v3, whose values lib.decode.group_kernel then parses (one more numba pass, members and
   consumer-protocol bytes included), and the keys of the KIP-848, share and streams group
   records (types 3-8, 10-17, 19-23) with tombstones or values of the version
   lib.decode.json_kernel compiled, which that kernel then writes as value_json text (one more
   numba pass). Strings and bytes stay (offset, length) pairs into the segment (or the
   decompressed bytes). A batch holding anything else (unknown record types, headers, invalid
   UTF-8, a value either kernel hands back, any inconsistency) turns SLOW as a whole.
3. Each output chunk's Arrow buffers are written by lib.decode.arrow_kernel (fixed-width
   columns, bitmaps, string offsets, then the strings' bytes) into memory allocated here
   (`_arena`), and wrapped without copies; the nested group_metadata column is put together from
   the group kernel's levels likewise, value_json from the json kernel's text.
4. Runs of consecutive SLOW entries are decoded by the pure-Python decoder (lib.decode.rows.PythonDecoder) over
   that byte range, so everything the fast path does not handle (and every error, with the
   same class, message and location) comes from the one reference implementation.
"""

from __future__ import annotations

import functools
import mmap
import os
import time
from collections.abc import Mapping

import numpy as np
import pyarrow as pa
from numba import njit

from lib.codec.compression import CODEC_NAMES, decompress
from lib.codec.errors import DecodeError
from lib.decode import arrow_kernel as ak
from lib.decode import group_kernel as gk
from lib.decode import json_kernel as jk
from lib.decode.group_kernel import group_values
from lib.decode.numba_bytes import (
    BASE64_URL,
    HARDWARE_CRC32C,
    NO_REFCOUNT,
    base64_into,
    copy_bytes,
    crc32c_u8,
    crc32c_u64,
    load_u64,
    string16,
    utf8_ok,
)
from lib.decode.numba_bytes import i16 as _i16
from lib.decode.numba_bytes import i32 as _i32
from lib.decode.numba_bytes import i64 as _i64
from lib.decode.numba_bytes import u64 as _u64
from lib.decode.numba_bytes import uvarint as _uvarint
from lib.decode.rows import PLAIN_SCHEMA, SCHEMA, Columns, PythonDecoder
from lib.decode.values import MAX_TIMESTAMP_MS, MIN_TIMESTAMP_MS
from lib.numba_cache import use_stable_zip_cache
from schemas.records import CONTROL_TYPES, RECORD_TYPES, RecordType

use_stable_zip_cache(__file__)  # before the first @njit(cache=True): see lib.numba_cache

FAST, COMP, SLOW, SKIP, TAIL = 0, 1, 2, 3, 4
# record types as plain ints (numba folds module-level ints into the kernels as constants)
LEGACY_OFFSET_COMMIT = int(RecordType.LEGACY_OFFSET_COMMIT)
OFFSET_COMMIT = int(RecordType.OFFSET_COMMIT)
GROUP_METADATA = int(RecordType.GROUP_METADATA)
_MIN_RECORD_BYTES = 7  # length varint + attributes + 5 one-byte varints

# --- CRC-32C (Castagnoli), slicing-by-8 ------------------------------------------------------


def _crc_tables() -> np.ndarray:
    t = np.zeros((8, 256), dtype=np.uint32)
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t[0, i] = c
    for i in range(256):
        c = int(t[0, i])
        for k in range(1, 8):
            c = (c >> 8) ^ int(t[0, c & 0xFF])
            t[k, i] = c
    return t


_CRC = _crc_tables()


@njit(cache=True, nogil=True)
def _crc32c_hardware(buf, start, stop, tab):
    """CRC-32C with SSE 4.2's instruction, 8 bytes a step (one dependent chain: about 3 cycles
    a step, 5-6x the table-driven loop below)."""
    crc = np.uint64(0xFFFFFFFF)
    i = start
    while i + 8 <= stop:
        crc = crc32c_u64(crc, load_u64(buf, i))
        i += 8
    c = np.uint32(crc)
    while i < stop:
        c = crc32c_u8(c, buf[i])
        i += 1
    return c ^ np.uint32(0xFFFFFFFF)


@njit(cache=True, nogil=True)
def _crc32c_table(buf, start, stop, tab):
    """CRC-32C by tables, slicing-by-8 (where the CPU has no CRC32 instruction)."""
    crc = np.uint32(0xFFFFFFFF)
    i = start
    while i + 8 <= stop:
        one = crc ^ (
            np.uint32(buf[i])
            | (np.uint32(buf[i + 1]) << np.uint32(8))
            | (np.uint32(buf[i + 2]) << np.uint32(16))
            | (np.uint32(buf[i + 3]) << np.uint32(24))
        )
        two = (
            np.uint32(buf[i + 4])
            | (np.uint32(buf[i + 5]) << np.uint32(8))
            | (np.uint32(buf[i + 6]) << np.uint32(16))
            | (np.uint32(buf[i + 7]) << np.uint32(24))
        )
        crc = (
            tab[7, one & np.uint32(0xFF)]
            ^ tab[6, (one >> np.uint32(8)) & np.uint32(0xFF)]
            ^ tab[5, (one >> np.uint32(16)) & np.uint32(0xFF)]
            ^ tab[4, one >> np.uint32(24)]
            ^ tab[3, two & np.uint32(0xFF)]
            ^ tab[2, (two >> np.uint32(8)) & np.uint32(0xFF)]
            ^ tab[1, (two >> np.uint32(16)) & np.uint32(0xFF)]
            ^ tab[0, two >> np.uint32(24)]
        )
        i += 8
    while i < stop:
        crc = tab[0, (crc ^ np.uint32(buf[i])) & np.uint32(0xFF)] ^ (crc >> np.uint32(8))
        i += 1
    return crc ^ np.uint32(0xFFFFFFFF)


# numba binds the kernel a global names when it compiles its caller (and keys its cache by the CPU)
_crc32c = _crc32c_hardware if HARDWARE_CRC32C else _crc32c_table


def crc32c(data) -> int:
    """The kernel's CRC-32C (for tests)."""
    buf = np.frombuffer(data, dtype=np.uint8)
    return int(_crc32c(buf, 0, len(buf), _CRC))


# --- big-endian and varint readers ------------------------------------------------------------


@njit(cache=True, **NO_REFCOUNT)
def _varint(buf, pos, end, maxshift):
    v, pos, ok = _uvarint(buf, pos, end, maxshift)
    return (v >> 1) ^ -(v & 1), pos, ok


@njit(cache=True, inline="always")
def _add_ok(a, b):
    """a + b without int64 overflow (Python's ints never overflow: such input goes SLOW)."""
    if b > 0:
        return a <= 9223372036854775807 - b
    return a >= -9223372036854775807 - 1 - b


# --- pass 1: framing ------------------------------------------------------------------------------

_MAX_OFFSET = 2**63 - 2  # lib.codec.segments.MAX_RECORD_OFFSET: beyond it the Python reader raises
# _frame's rows of its per-entry array
_F_KIND, _F_EPOS, _F_ETOTAL, _F_BASE, _F_LAST, _F_ATTR, _F_BASE_TS, _F_MAX_TS, _F_PID, _F_PEPOCH, _F_COUNT = range(11)
_FRAME_COLUMNS = 11


@njit(cache=True, nogil=True)
def _frame(buf, skip_below, verify_crc, tab):
    """Entries of one segment, as SegmentReader walks them. Returns (status, n, trailing_pos,
    last_skipped (or None as has_skipped=False), per-entry arrays). status 1: an offset sum
    overflows int64 (the caller decodes the whole file in Python)."""
    end = len(buf)
    # one walk of the headers, into arrays that grow as needed: counting the entries first
    # walked them twice, and each hop to the next header is a cache miss the walk waits for
    cap = max(64, end // 1024)
    cols = np.zeros((_FRAME_COLUMNS, cap), np.int64)
    has_skipped = False
    last_skipped = np.int64(0)
    status = 0
    pos = 0
    e = 0
    while end - pos >= 17:
        offset = _i64(buf, pos)
        size = _i32(buf, pos + 8)
        if e == cap:
            cap *= 2
            wider = np.zeros((_FRAME_COLUMNS, cap), np.int64)
            wider[:, :e] = cols[:, :e]
            cols = wider
        cols[_F_EPOS, e] = pos
        cols[_F_BASE, e] = offset
        cols[_F_LAST, e] = offset
        if size < 14:
            cols[_F_KIND, e] = TAIL
            cols[_F_ETOTAL, e] = end - pos
            e += 1
            pos = end
            break
        if pos + 12 + size > end:
            break
        total = 12 + size
        cols[_F_ETOTAL, e] = total
        magic = buf[pos + 16]
        if magic == 2 and skip_below != 0 and size >= 49:
            d = _i32(buf, pos + 23)
            if not _add_ok(offset, d):
                status = 1
                break
            if offset + d < skip_below:
                has_skipped = True
                last_skipped = offset + d
                cols[_F_KIND, e] = SKIP
                e += 1
                pos += total
                continue
        k = SLOW
        if magic == 2 and total >= 61:
            crc_ok = True
            if verify_crc:
                crc_ok = _crc32c(buf, pos + 21, pos + total, tab) == np.uint32(_u64(buf, pos + 17, 4))
            a = _i16(buf, pos + 21)
            d = _i32(buf, pos + 23)
            c = _i32(buf, pos + 57)
            if crc_ok and c >= 0 and d >= 0 and offset >= 0 and _add_ok(offset, d) and offset + d <= _MAX_OFFSET:
                cols[_F_ATTR, e] = a
                cols[_F_LAST, e] = offset + d
                cols[_F_BASE_TS, e] = _i64(buf, pos + 27)
                cols[_F_MAX_TS, e] = _i64(buf, pos + 35)
                cols[_F_PID, e] = _i64(buf, pos + 43)
                cols[_F_PEPOCH, e] = _i16(buf, pos + 51)
                cols[_F_COUNT, e] = c
                codec = a & 7
                if c == 0 or codec == 0:
                    if c <= (total - 61) // _MIN_RECORD_BYTES:
                        k = FAST
                elif codec <= 4:
                    k = COMP
        cols[_F_KIND, e] = k
        e += 1
        pos += total
    return (
        status,
        e,
        pos,
        has_skipped,
        last_skipped,
        cols[_F_KIND, :e].astype(np.int8),
        cols[_F_EPOS, :e].copy(),
        cols[_F_ETOTAL, :e].copy(),
        cols[_F_BASE, :e].copy(),
        cols[_F_LAST, :e].copy(),
        cols[_F_ATTR, :e].copy(),
        cols[_F_BASE_TS, :e].copy(),
        cols[_F_MAX_TS, :e].copy(),
        cols[_F_PID, :e].copy(),
        cols[_F_PEPOCH, :e].copy(),
        cols[_F_COUNT, :e].copy(),
    )


# --- pass 2: records ----------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def _records(  # noqa: C901 - numba kernel: every record of a window in one compiled loop
    seg,
    extra,
    kind,
    src,
    estart,
    estop,
    ecount,
    ebase,
    elast,
    ebase_ts,
    emax_ts,
    eattr,
    start_offset,
    w64,
    w32,
    w16,
    key_strings,
    key_member,
    roots,
):
    """Parses every FAST/COMP entry's records; an entry with anything else turns SLOW (kind
    is updated in place). Returns the per-entry first row and the row columns, written into the
    rows of `w64` (12 x capacity, int64), `w32` (10 x capacity, int32) and `w16` (3 x capacity,
    int16).
    `key_strings`, `key_member`, `roots`: lib.decode.json_kernel's tables of the record types
    whose values it writes."""
    seglen = len(seg)
    n = len(kind)
    row0 = np.zeros(n + 1, np.int64)
    # lengths and small values in int32 or int16 (they fit): a segment's rows are held at once,
    # in the rows of w64, w32 and w16 (see _arena). Those of the Arrow column's type are its
    # values (lib.decode.fast._Rows.batch wraps their slices: a null's value is left undefined)
    r_entry = w32[0]
    r_offset = w64[0]
    r_ts = w64[1]
    r_key_off = w64[2]
    r_key_len = w32[1]
    r_val_off = w64[3]
    r_val_len = w32[2]  # -1: null value
    r_rtype = w16[0]  # record type, or the control type for markers
    r_kver = w16[1]
    r_vver = w16[2]  # -1: null
    r_cepoch = w32[3]
    r_group_off = w64[4]
    r_group_len = w32[4]
    r_topic_off = w64[5]
    r_topic_len = w32[5]
    r_part = w32[6]
    r_committed = w64[6]
    r_lepoch = w32[7]
    r_meta_off = w64[7]
    r_meta_len = w32[8]
    r_cts = w64[8]
    r_ets = w64[9]
    r_tid = w64[10]  # -1: none
    r_member_off = w64[11]  # (set for the types json_kernel reads only)
    r_member_len = w32[9]  # -1: null
    r = 0
    for e in range(n):
        row0[e] = r
        k = kind[e]
        if k != FAST and k != COMP:
            continue
        if src[e] == 0:
            buf = seg
            voff = 0
        else:
            buf = extra
            voff = seglen
        pos = estart[e]
        end = estop[e]
        count = ecount[e]
        if count > (end - pos) // _MIN_RECORD_BYTES:
            kind[e] = SLOW
            continue
        base_offset = ebase[e]
        base_ts = ebase_ts[e]
        attributes = eattr[e]
        log_append = (attributes >> 3) & 1
        control = (attributes & 0x20) != 0
        below = elast[e] < start_offset  # framed and checked, but no rows (as the decoder)
        ok = True
        r_first = r
        for _ in range(count):
            length, pos, ok = _varint(buf, pos, end, 28)
            if not ok:
                break
            body_end = pos + length
            if length < 0 or body_end > end:
                ok = False
                break
            pos += 1
            ts_delta, pos, ok = _varint(buf, pos, body_end, 56)
            if not ok:
                break
            odelta, pos, ok = _varint(buf, pos, body_end, 28)
            if not ok:
                break
            klen, pos, ok = _varint(buf, pos, body_end, 28)
            if not ok:
                break
            kpos = pos
            if klen >= 0:
                if pos + klen > body_end:
                    ok = False
                    break
                pos += klen
            vlen, pos, ok = _varint(buf, pos, body_end, 28)
            if not ok:
                break
            vpos = pos
            if vlen >= 0:
                if pos + vlen > body_end:
                    ok = False
                    break
                pos += vlen
            hcount, pos, ok = _varint(buf, pos, body_end, 28)
            if not ok or hcount != 0 or pos != body_end:
                ok = False
                break
            if not _add_ok(base_offset, odelta) or odelta < 0 or odelta > elast[e] - base_offset:
                ok = False  # the Python reader names this error (offset delta outside the batch)
                break
            offset = base_offset + odelta
            if log_append:
                ts = emax_ts[e]
            else:
                if not _add_ok(base_ts, ts_delta):
                    ok = False
                    break
                ts = base_ts + ts_delta
            if below or offset < start_offset:
                continue
            # --- the coordinator record
            if klen < 0:
                ok = False
                break
            kend = kpos + klen
            vend = vpos + vlen
            r_entry[r] = e
            r_offset[r] = offset
            r_ts[r] = ts
            r_key_off[r] = kpos + voff
            r_key_len[r] = klen
            r_val_off[r] = vpos + voff
            r_val_len[r] = vlen if vlen >= 0 else -1
            r_vver[r] = -1
            if control:
                if klen < 4:
                    ok = False
                    break
                r_kver[r] = _i16(buf, kpos)
                ctype = _i16(buf, kpos + 2)
                r_rtype[r] = ctype
                if ctype == 0 or ctype == 1:
                    if vlen < 6:
                        ok = False
                        break
                    r_vver[r] = _i16(buf, vpos)
                    r_cepoch[r] = _i32(buf, vpos + 2)
                r += 1
                continue
            if klen < 2:
                ok = False
                break
            rtype = _i16(buf, kpos)
            if rtype == GROUP_METADATA:
                # GroupMetadata: the key here; the value (v0-v3) is read by lib.decode.group_kernel
                r_rtype[r] = GROUP_METADATA
                r_kver[r] = 0
                p, ln, q, ok = string16(buf, kpos + 2, kend, False)
                if not ok:
                    break
                r_group_off[r] = p + voff
                r_group_len[r] = ln
                if vlen >= 0:
                    if vlen < 2:
                        ok = False
                        break
                    version = _i16(buf, vpos)
                    if version < 0 or version > 3:
                        ok = False
                        break
                    r_vver[r] = version
                r += 1
                continue
            if rtype != LEGACY_OFFSET_COMMIT and rtype != OFFSET_COMMIT:
                # KIP-848, share and streams group records: the key here; the value (the version
                # one lib.decode.json_kernel has compiled) is read by that kernel
                if rtype < 0 or rtype >= len(key_strings) or key_strings[rtype] == 0:
                    ok = False
                    break
                r_rtype[r] = rtype
                r_kver[r] = 0
                r_member_len[r] = -1
                q = kpos + 2
                for j in range(key_strings[rtype]):
                    p, ln, q, ok = string16(buf, q, kend, False)
                    if not ok:
                        break
                    if j == 0:
                        r_group_off[r] = p + voff
                        r_group_len[r] = ln
                    elif j == key_member[rtype]:
                        r_member_off[r] = p + voff
                        r_member_len[r] = ln
                if not ok:
                    break
                if vlen >= 0:
                    if vlen < 2:
                        ok = False
                        break
                    version = _i16(buf, vpos)
                    if version < 0 or version >= roots.shape[1] or roots[rtype, version] < 0:
                        ok = False
                        break
                    r_vver[r] = version
                r += 1
                continue
            r_rtype[r] = rtype
            r_kver[r] = 0
            p, ln, q, ok = string16(buf, kpos + 2, kend, False)
            if not ok:
                break
            r_group_off[r] = p + voff
            r_group_len[r] = ln
            p, ln, q, ok = string16(buf, q, kend, False)
            if not ok:
                break
            r_topic_off[r] = p + voff
            r_topic_len[r] = ln
            if q + 4 > kend:
                ok = False
                break
            r_part[r] = _i32(buf, q)
            if vlen < 0:
                r += 1
                continue
            # --- OffsetCommitValue v0-v4 / LegacyOffsetCommitValue v0
            if vlen < 2:
                ok = False
                break
            version = _i16(buf, vpos)
            if version < 0 or version > (0 if rtype == LEGACY_OFFSET_COMMIT else 4):
                ok = False
                break
            r_vver[r] = version
            p = vpos + 2
            if p + 8 > vend:
                ok = False
                break
            r_committed[r] = _i64(buf, p)
            p += 8
            lepoch = -1
            if version >= 3:
                if p + 4 > vend:
                    ok = False
                    break
                lepoch = _i32(buf, p)
                p += 4
            r_lepoch[r] = lepoch
            if version >= 4:
                m, p, ok = _uvarint(buf, p, vend, 28)
                if not ok:
                    break
                m -= 1
            else:
                if p + 2 > vend:
                    ok = False
                    break
                m = _i16(buf, p)
                p += 2
            if m < 0 or p + m > vend or not utf8_ok(buf, p, m):
                ok = False
                break
            r_meta_off[r] = p + voff
            r_meta_len[r] = m
            p += m
            if p + 8 > vend:
                ok = False
                break
            r_cts[r] = _i64(buf, p)
            p += 8
            ets = -1
            if version == 1:
                if p + 8 > vend:
                    ok = False
                    break
                ets = _i64(buf, p)
                p += 8
            r_ets[r] = ets
            tid = -1
            if version >= 4:
                ntags, p, ok = _uvarint(buf, p, vend, 28)
                if not ok:
                    break
                for _t in range(ntags):
                    tag, p, ok = _uvarint(buf, p, vend, 28)
                    if not ok:
                        break
                    tsize, p, ok = _uvarint(buf, p, vend, 28)
                    if not ok:
                        break
                    if tag == 0 and tsize != 16:
                        ok = False
                        break
                    if p + tsize > vend:
                        ok = False
                        break
                    if tag == 0:
                        tid = -1
                        for j in range(16):
                            if buf[p + j] != 0:
                                tid = p + voff
                                break
                    p += tsize
                if not ok:
                    break
            r_tid[r] = tid
            r += 1
        if ok and pos != end:
            ok = False
        if not ok:
            kind[e] = SLOW
            r = r_first
    row0[n] = r
    return (
        row0,
        r_entry,
        r_offset,
        r_ts,
        r_key_off,
        r_key_len,
        r_val_off,
        r_val_len,
        r_rtype,
        r_kver,
        r_vver,
        r_cepoch,
        r_group_off,
        r_group_len,
        r_topic_off,
        r_topic_len,
        r_part,
        r_committed,
        r_lepoch,
        r_meta_off,
        r_meta_len,
        r_cts,
        r_ets,
        r_tid,
        r_member_off,
        r_member_len,
    )


# --- pass 3: Arrow buffers -------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def _gather(seg, extra, offs, lens, keep):
    """Arrow buffers of k columns of (offset, length) pairs (k x n arrays; k = 1 for a record
    column, more for the fields of a group_metadata level, gathered in one pass over its items,
    so over their bytes once): int64 offsets (k x n + 1), the data of every column (column j's
    is data[starts[j]:starts[j + 1]]), validity bitmaps (k rows) and null counts. A value is null
    where its length is < 0 or `keep` is False for its row. Offsets past the segment are in
    `extra`."""
    seglen = len(seg)
    k, n = offs.shape
    out_off = np.empty((k, n + 1), np.int64)
    bitmaps = np.zeros((k, (n + 7) >> 3), np.uint8)
    nulls = np.zeros(k, np.int64)
    starts = np.zeros(k + 1, np.int64)
    for j in range(k):
        total = 0
        for i in range(n):
            out_off[j, i] = total
            ln = lens[j, i]
            if ln >= 0 and keep[i]:
                bitmaps[j, i >> 3] |= np.uint8(1 << (i & 7))
                total += ln
            else:
                nulls[j] += 1
        out_off[j, n] = total
        starts[j + 1] = starts[j] + total
    data = np.empty(starts[k], np.uint8)
    for i in range(n):
        for j in range(k):
            ln = out_off[j, i + 1] - out_off[j, i]
            if ln > 0:
                o = offs[j, i]
                at = starts[j] + out_off[j, i]
                if o < seglen:
                    copy_bytes(data, at, seg, o, ln)
                else:
                    copy_bytes(data, at, extra, o - seglen, ln)
    return out_off, data, starts, bitmaps, nulls


@njit(cache=True, nogil=True)
def _uuid_gather(seg, extra, offs, alphabet):
    """Kafka's Uuid.toString() (URL-safe base64 without padding, 22 characters) of each
    16-byte id; offset < 0 is null."""
    seglen = len(seg)
    n = len(offs)
    out_off = np.empty(n + 1, np.int64)
    m = 0
    for i in range(n):
        out_off[i] = m * 22
        if offs[i] >= 0:
            m += 1
    out_off[n] = m * 22
    data = np.empty(m * 22, np.uint8)
    w = 0
    for i in range(n):
        o = offs[i]
        if o < 0:
            continue
        if o < seglen:
            w = base64_into(data, w, seg, o, 16, alphabet, False)
        else:
            w = base64_into(data, w, extra, o - seglen, 16, alphabet, False)
    return out_off, data


# --- Arrow assembly ------------------------------------------------------------------------------


def _validity(valid: np.ndarray):
    if valid is None or valid.all():
        return None, 0
    return pa.py_buffer(np.packbits(valid, bitorder="little")), int(len(valid) - valid.sum())


def _strings(typ, n, out_off, data, bitmap, nulls):
    if out_off[-1] > 2**31 - 1:  # what pa.array(list) would do with it
        objs = [
            None if not bitmap[i >> 3] & (1 << (i & 7)) else bytes(data[out_off[i] : out_off[i + 1]]) for i in range(n)
        ]
        if typ == pa.string():
            objs = [None if o is None else o.decode("utf-8") for o in objs]
        return pa.array(objs, typ)
    return pa.Array.from_buffers(
        typ,
        n,
        [pa.py_buffer(bitmap) if nulls else None, pa.py_buffer(out_off.astype(np.int32)), pa.py_buffer(data)],
        null_count=nulls,
    )


def _string_array(typ, n: int, offsets: np.ndarray, data: np.ndarray, bitmap: np.ndarray, nulls: int) -> pa.Array:
    """A string or binary array of lib.decode.arrow_kernel's buffers (int32 offsets)."""
    return pa.Array.from_buffers(
        typ, n, [pa.py_buffer(bitmap) if nulls else None, pa.py_buffer(offsets), pa.py_buffer(data)], null_count=nulls
    )


def _varwidth_columns(types: list, seg, extra, offs: np.ndarray, lens: np.ndarray, keep: np.ndarray) -> list:
    """k columns of (offset, length) pairs (k x n) as binary/string arrays of `types`, gathered in
    one pass; null where the length is < 0 or not `keep` (n)."""
    out_off, data, starts, bitmaps, nulls = _gather(seg, extra, offs, lens, keep)
    n = offs.shape[1]
    return [
        _strings(typ, n, out_off[j], data[starts[j] : starts[j + 1]], bitmaps[j], int(nulls[j]))
        for j, typ in enumerate(types)
    ]


def _varwidth(typ, seg, extra, offs, lens, keep):
    """The (offset, length) pairs as a binary/string column; null where length < 0 or not keep."""
    return _varwidth_columns([typ], seg, extra, offs[None, :], lens[None, :], keep)[0]


def _uuids(seg, extra, offs):
    out_off, data = _uuid_gather(seg, extra, offs, BASE64_URL)
    valid = offs >= 0
    bitmap, nulls = _validity(valid)
    return pa.Array.from_buffers(
        pa.string(), len(offs), [bitmap, pa.py_buffer(out_off.astype(np.int32)), pa.py_buffer(data)], null_count=nulls
    )


_NUMPY_TYPES = {pa.int8(): np.int8, pa.int16(): np.int16, pa.int32(): np.int32, pa.int64(): np.int64}


def _num(values: np.ndarray, typ, valid=None):
    # (not typ.to_pandas_dtype(): it imports pandas, a fifth of a second in every new worker)
    dtype = np.int64 if pa.types.is_timestamp(typ) else _NUMPY_TYPES[typ]
    values = values.astype(dtype, copy=False)
    if valid is None or valid.all():
        return pa.array(values, typ)
    return pa.array(values, typ, mask=~valid)


_NO_BYTES = np.zeros(0, np.uint8)
_NO_BYTES.flags.writeable = False


@functools.lru_cache(maxsize=256)
def _name_table(names: tuple) -> tuple[np.ndarray, np.ndarray]:
    encoded = [n.encode("utf-8") for n in names]
    offsets = np.zeros(len(encoded) + 1, np.int64)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    return offsets, _readonly(np.frombuffer(b"".join(encoded) or b"\0", np.uint8))


def _labels(codes: np.ndarray, names: list, keep=None):
    """Strings by index into `names` (null where not keep)."""
    if keep is None:
        keep = np.ones(len(codes), bool)
    name_off, name_data = _name_table(tuple(names))
    # the names are byte ranges of name_data: the same gather as the segment's strings
    starts, lengths = name_off[:-1][codes], np.diff(name_off)[codes]
    return _varwidth(pa.string(), name_data, _NO_BYTES, starts, lengths, keep)


@functools.lru_cache(maxsize=8)
def _filled(n: int, value: int, dtype: str) -> pa.Array:
    """An integer column holding `value` in every row (shared, as _constant's)."""
    return pa.array(np.full(n, value, dtype))


@functools.lru_cache(maxsize=8)
def _constant(n: int, value: str) -> pa.Array:
    """A string column holding `value` in every row (Arrow arrays are immutable: the chunks of a
    segment share one, a segment file's name repeated in a full chunk being a megabyte)."""
    raw = value.encode("utf-8")
    if n * len(raw) > 2**31 - 1:
        return _labels(np.zeros(n, np.int64), [value])
    offsets = np.arange(n + 1, dtype=np.int32) * np.int32(len(raw))
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(raw * n)])


def _span(ends: np.ndarray, lo: int, hi: int) -> tuple[int, int, np.ndarray]:
    """Items lo..hi of a lib.decode.group_kernel level, `ends` their list field: the range of
    their elements in the level below, and the Arrow offsets of their lists (from 0)."""
    start = int(ends[lo - 1]) if lo else 0
    offsets = np.zeros(hi - lo + 1, np.int32)
    offsets[1:] = ends[lo:hi] - start
    return start, start + int(offsets[-1]), offsets


def _list(typ, offsets: np.ndarray, child: pa.Array, valid=None) -> pa.Array:
    bitmap, nulls = _validity(valid)
    return pa.Array.from_buffers(
        typ, len(offsets) - 1, [bitmap, pa.py_buffer(offsets)], null_count=nulls, children=[child]
    )


def _struct(typ, n: int, columns: dict, valid=None) -> pa.Array:
    bitmap, nulls = _validity(valid)
    return pa.Array.from_buffers(typ, n, [bitmap], null_count=nulls, children=[columns[f.name] for f in typ])


class _GroupValues:
    """The GroupMetadata values among a segment's fast rows, parsed by lib.decode.group_kernel:
    `odd_entries`, the entries holding a value it hands back; then, for the rows of a batch,
    the group_metadata column (`column`) and the values as Python dicts (`as_python`)."""

    def __init__(self, seg, extra, rows, data_rows: np.ndarray):
        """`rows`: _records' output; `data_rows`: whether each row is a data record's."""
        total = len(data_rows)
        entry, val_off, val_len, rtype = rows[1][:total], rows[6][:total], rows[7][:total], rows[8][:total]
        self.seg, self.extra = seg, extra
        self.rows = np.flatnonzero(data_rows & (rtype == GROUP_METADATA) & (val_len >= 0))
        self.val_off = val_off[self.rows]
        self.val_len = val_len[self.rows].astype(np.int64)
        odd, self.values, *self.levels = group_values(seg, extra, self.val_off, self.val_len)
        self.odd_entries = np.unique(entry[self.rows[odd]])
        self.strings: np.ndarray | None = None  # (_bytes)
        self.strings_used = 0
        self.last_members: tuple | None = None  # ((start, stop, type), the members child last built)

    def column(self, r0: int, r1: int, typ, sel: np.ndarray | None = None) -> pa.Array | None:
        """The group_metadata column of rows r0..r1: the values there, null elsewhere. `sel`:
        of those rows only, when they are the rows with a value among r0..r1 (else None)."""
        n = r1 - r0
        lo, hi = (int(i) for i in np.searchsorted(self.rows, (r0, r1)))
        if sel is not None:
            if not np.array_equal(self.rows[lo:hi], sel):
                return None
            n = hi - lo
        if lo == hi:
            return pa.nulls(n, typ)
        at = self.rows[lo:hi] - r0 if sel is None else np.arange(n, dtype=self.rows.dtype)
        ts_type = typ.field("current_state_timestamp").type
        width = len(gk.VALUE_VARWIDTH)
        (offsets, data, starts, bitmaps, nulls, big, more, more_nulls, generation, state_ts, member_offsets) = (
            ak.value_buffers(
                self.seg,
                self.extra,
                n,
                at,
                self.values,
                lo,
                hi,
                width,
                gk.GENERATION,
                gk.STATE_TIMESTAMP,
                gk.MEMBERS_END,
                MIN_TIMESTAMP_MS,
                MAX_TIMESTAMP_MS,
                1000 if ts_type == _MICROS else 1,
            )
        )
        present = pa.py_buffer(more[0]) if more_nulls[0] else None
        absent = int(more_nulls[0])
        if big.any():  # (int16 strings: only with chunks of over 2**15 rows)
            spread = np.full((2 * width, n), -1, np.int64)
            spread[:, at] = self.values[: 2 * width, lo:hi]
            columns = self._fields(typ, gk.VALUE_VARWIDTH, spread[:width], spread[width:])
        else:
            columns = {
                name: _string_array(
                    typ.field(name).type, n, offsets[j], data[starts[j] : starts[j + 1]], bitmaps[j], int(nulls[j])
                )
                for j, name in enumerate(gk.VALUE_VARWIDTH)
            }
        columns["generation"] = pa.Array.from_buffers(
            pa.int32(), n, [present, pa.py_buffer(generation)], null_count=absent
        )
        ts = pa.Array.from_buffers(
            ts_type if ts_type == _MICROS else _MILLIS,
            n,
            [pa.py_buffer(more[1]) if more_nulls[1] else None, pa.py_buffer(state_ts)],
            null_count=int(more_nulls[1]),
        )
        columns["current_state_timestamp"] = ts if ts_type == _MICROS else ts.cast(ts_type)
        members_type = typ.field("members").type
        start, stop = int(self.values[gk.MEMBERS_END, lo - 1]) if lo else 0, int(self.values[gk.MEMBERS_END, hi - 1])
        # the members of values lo..hi: the same child for a batch's column and for its part
        # of GroupMetadata rows (SegmentDecoder.batch_parts asks for it next), built once
        key = (start, stop, members_type)
        if self.last_members is None or self.last_members[0] != key:
            self.last_members = (key, self._members(members_type.value_type, start, stop))
        columns["members"] = pa.Array.from_buffers(
            members_type,
            n,
            [present, pa.py_buffer(member_offsets)],
            null_count=absent,
            children=[self.last_members[1]],
        )
        return pa.Array.from_buffers(typ, n, [present], null_count=absent, children=[columns[f.name] for f in typ])

    def _gathered(self, types: list, starts: np.ndarray, lengths: np.ndarray) -> list:
        """String and bytes columns of a level's items (starts and lengths: k x n; null where the
        length is < 0), in one pass."""
        n = starts.shape[1]
        totals = np.maximum(lengths, 0).sum(axis=1)
        if (totals > _INT32_MAX).any():
            return _varwidth_columns(types, self.seg, self.extra, starts, lengths, np.ones(n, bool))
        data = self._bytes(int(totals.sum()))
        offsets, bounds, bitmaps, nulls = ak.gather(self.seg, self.extra, starts, lengths, data)
        return [
            _string_array(typ, n, offsets[j], data[bounds[j] : bounds[j + 1]], bitmaps[j], int(nulls[j]))
            for j, typ in enumerate(types)
        ]

    def _bytes(self, size: int) -> np.ndarray:
        """Room for `size` bytes of the levels' strings: the next part of one buffer for the
        whole segment's (allocated at the first call: a chunk's own, under numpy's huge-page
        size, cost a page fault per 4 KiB)."""
        if self.strings is None:
            members, topics, owned, _, assigned, _ = self.levels
            width = len(gk.MEMBER_VARWIDTH)
            need = np.maximum(members[width : 2 * width], 0).sum()
            for level in (topics, owned, assigned):
                need += np.maximum(level[gk.TOPIC_LEN], 0).sum()
            self.strings = np.empty(int(need), np.uint8)
        if self.strings_used + size > len(self.strings):  # (a range asked for again)
            return np.empty(size, np.uint8)
        self.strings_used += size
        return self.strings[self.strings_used - size : self.strings_used]

    def _fields(self, typ, names: tuple, starts: np.ndarray, lengths: np.ndarray) -> dict:
        """The struct `typ`'s string and bytes fields `names`, by name."""
        return dict(zip(names, self._gathered([typ.field(name).type for name in names], starts, lengths)))

    def _members(self, typ, lo: int, hi: int) -> pa.Array:
        members, topics, owned, owned_partitions, assigned, assigned_partitions = self.levels
        m = members[:, lo:hi]
        width = len(gk.MEMBER_VARWIDTH)
        columns = self._fields(typ, gk.MEMBER_VARWIDTH, m[:width], m[width : 2 * width])
        subscription, assignment = m[gk.SUBSCRIPTION_VERSION], m[gk.ASSIGNMENT_VERSION]
        t0, t1, topic_offsets = _span(members[gk.TOPICS_END], lo, hi)
        (names,) = self._gathered([pa.string()], topics[:1, t0:t1], topics[1:2, t0:t1])
        o0, o1, owned_offsets = _span(members[gk.OWNED_END], lo, hi)
        a0, a1, assigned_offsets = _span(members[gk.ASSIGNED_END], lo, hi)
        owned_type, assigned_type = typ.field("owned_partitions").type, typ.field("assignment").type
        columns |= {
            "rebalance_timeout_ms": _num(m[gk.REBALANCE_TIMEOUT], pa.int32()),
            "session_timeout_ms": _num(m[gk.SESSION_TIMEOUT], pa.int32()),
            "subscription_version": _num(subscription, pa.int16(), subscription >= 0),
            "subscribed_topics": _list(typ.field("subscribed_topics").type, topic_offsets, names, subscription >= 0),
            "owned_partitions": _list(
                owned_type,
                owned_offsets,
                self._topic_partitions(owned_type.value_type, owned, owned_partitions, o0, o1),
                subscription >= 1,
            ),
            "generation_id": _num(m[gk.GENERATION_ID], pa.int32(), subscription >= 2),
            "assignment_version": _num(assignment, pa.int16(), assignment >= 0),
            "assignment": _list(
                assigned_type,
                assigned_offsets,
                self._topic_partitions(assigned_type.value_type, assigned, assigned_partitions, a0, a1),
                assignment >= 0,
            ),
        }
        return _struct(typ, hi - lo, columns)

    def _topic_partitions(self, typ, topics: np.ndarray, partitions: np.ndarray, lo: int, hi: int) -> pa.Array:
        p0, p1, offsets = _span(topics[gk.PARTITIONS_END], lo, hi)
        numbers = pa.Array.from_buffers(pa.int32(), p1 - p0, [None, pa.py_buffer(partitions[0, p0:p1])])
        columns = self._fields(typ, ("topic",), topics[:1, lo:hi], topics[1:2, lo:hi])
        columns["partitions"] = _list(typ.field("partitions").type, offsets, numbers)
        return _struct(typ, hi - lo, columns)

    def as_python(self, r0: int, r1: int) -> _PythonGroupValues:
        lo, hi = (int(i) for i in np.searchsorted(self.rows, (r0, r1)))
        return _PythonGroupValues(self, lo, hi, r0)


class _PythonGroupValues(Mapping):
    """Row of a batch -> its GroupMetadata value as a Python dict, as lib.decode.group_metadata
    reads it, read when first asked: the replay engine takes them (SegmentDecoder's
    batch_group_metadata), a decode alone never does."""

    def __init__(self, groups: _GroupValues, lo: int, hi: int, r0: int):
        self.groups, self.lo, self.hi, self.r0 = groups, lo, hi, r0
        self.read: dict[int, dict] = {}

    @functools.cached_property
    def index(self) -> dict[int, int]:
        """Row of the batch -> index of its value in the segment's."""
        rows = self.groups.rows[self.lo : self.hi] - self.r0
        return dict(zip(rows.tolist(), range(self.lo, self.hi)))

    def __getitem__(self, row: int) -> dict:
        value = self.read.get(row)
        if value is None:
            from lib.decode.group_metadata import group_metadata

            g = self.groups
            i = self.index[row]
            o, n = int(g.val_off[i]), int(g.val_len[i])
            seglen = len(g.seg)
            raw = g.seg[o : o + n] if o < seglen else g.extra[o - seglen : o - seglen + n]
            value = group_metadata(raw.tobytes())
            if value is None:  # never for what the kernel read (it reads less); the caller then has the column
                raise KeyError(row)
            self.read[row] = value
        return value

    def __iter__(self):
        return iter(self.index)

    def __len__(self) -> int:
        return len(self.index)


class _JsonValues:
    """The KIP-848, share and streams group values among a segment's fast rows, written as
    value_json text by lib.decode.json_kernel: `odd_entries`, the entries holding a value it
    hands back; then the value_json column of a batch's rows (`column`)."""

    def __init__(self, seg, extra, rows, data_rows: np.ndarray):
        """As _GroupValues'."""
        total = len(data_rows)
        entry, val_off, val_len, rtype, vver = (rows[i][:total] for i in (1, 6, 7, 8, 10))
        # a fast data row is an offset commit, a GroupMetadata record, or of a type the kernel reads
        self.rows = np.flatnonzero(data_rows & (rtype > GROUP_METADATA) & (val_len >= 0))
        if not len(self.rows):  # (most segments of today's clusters: no kernel call)
            self.ends, self.text, self.odd_entries = np.zeros(1, np.int64), np.zeros(0, np.uint8), self.rows
            return
        odd, self.ends, self.text = jk.value_json(
            seg,
            extra,
            val_off[self.rows],
            val_len[self.rows].astype(np.int64),
            jk.ROOTS[rtype[self.rows], vver[self.rows]],
            jk.STRUCTS,
            jk.FIELDS,
            jk.TEXT,
            jk.DEPTH,
            jk.ALPHABETS,
            jk.HEX_DIGITS,
        )
        self.odd_entries = np.unique(entry[self.rows[odd]])

    def column(self, r0: int, r1: int, sel: np.ndarray | None = None) -> pa.Array:
        """The value_json column of rows r0..r1 (or of the rows `sel` among them): the values
        there, null elsewhere."""
        n = r1 - r0 if sel is None else len(sel)
        lo, hi = (int(i) for i in np.searchsorted(self.rows, (r0, r1)))
        values = np.arange(lo, hi)
        at = self.rows[lo:hi] - r0
        if sel is not None:  # (the values of the rows in `sel`, at their places there)
            at = np.searchsorted(sel, self.rows[lo:hi])
            kept = sel[np.minimum(at, n - 1)] == self.rows[lo:hi] if n else np.zeros(hi - lo, bool)
            values, at = values[kept], at[kept]
        if not len(values):
            return pa.nulls(n, pa.string())
        sizes = self.ends[values + 1] - self.ends[values]
        lengths = np.zeros(n + 1, np.int64)
        lengths[at + 1] = sizes
        present = np.zeros(n, bool)
        present[at] = True
        if len(values) == hi - lo:
            data = self.text[self.ends[lo] : self.ends[hi]]
        else:
            data = np.concatenate([self.text[self.ends[v] : self.ends[v + 1]] for v in values.tolist()])
        bitmap = np.packbits(present, bitorder="little")
        return _strings(pa.string(), n, np.cumsum(lengths), data, bitmap, n - len(values))


class _Rows:
    """The fast rows of one segment (numpy columns), turned into Arrow batches on demand."""

    def __init__(self, dec, seg, extra, ent, rows, groups: _GroupValues, values: _JsonValues):
        self.dec = dec
        self.groups = groups
        self.values = values
        self.seg = seg
        self.extra = extra
        self.ent = ent
        (
            self.row0,
            self.entry,
            self.offset,
            self.ts,
            self.key_off,
            self.key_len,
            self.val_off,
            self.val_len,
            self.rtype,
            self.kver,
            self.vver,
            self.cepoch,
            self.group_off,
            self.group_len,
            self.topic_off,
            self.topic_len,
            self.part,
            self.committed,
            self.lepoch,
            self.meta_off,
            self.meta_len,
            self.cts,
            self.ets,
            self.tid,
            self.member_off,
            self.member_len,
        ) = rows

    def batch(
        self, r0: int, r1: int, schema: pa.Schema, name: str, sel: np.ndarray | None = None
    ) -> pa.RecordBatch | None:
        """Rows r0..r1 as a batch of `schema`'s columns (group_metadata left out when the schema
        has none). `sel`: only these rows among them (ascending), or None (the few rows that need
        Python's columns: a control type with no name, strings past 2 GiB)."""
        n = r1 - r0 if sel is None else len(sel)
        if sel is not None and not n:
            return pa.RecordBatch.from_pylist([], schema=schema)
        picked = np.zeros(0, np.int64) if sel is None else sel.astype(np.int64, copy=False)

        def rows_of(column: np.ndarray) -> np.ndarray:
            return column[r0:r1] if sel is None else column[sel]

        ent = self.ent
        seg, extra = self.seg, self.extra
        ts_type = schema.field("log_timestamp").type
        i64, i16, bitmaps, offsets = _row_arena(n)
        codecs, types, controls = _name_table(_CODECS), _name_table(_TYPE_NAMES), _name_table(_CONTROL_NAMES)
        totals, nulls, odd_control = ak.row_layout(
            r0,
            r1,
            picked,
            self.entry,
            ent["base"],
            ent["attr"],
            ent["pid"],
            ent["pepoch"],
            self.ts,
            self.key_len,
            self.val_len,
            self.rtype,
            self.vver,
            self.group_len,
            self.topic_len,
            self.lepoch,
            self.meta_len,
            self.cts,
            self.ets,
            self.tid,
            self.member_len,
            codecs[0],
            types[0],
            controls[0],
            MIN_TIMESTAMP_MS,
            MAX_TIMESTAMP_MS,
            1000 if ts_type == _MICROS else 1,
            i64,
            i16,
            bitmaps,
            offsets,
        )
        big = totals > _INT32_MAX
        if sel is not None and (odd_control or big.any()):
            return None
        starts = np.zeros(len(totals) + 1, np.int64)
        np.cumsum(np.where(big, 0, totals), out=starts[1:])
        data = np.empty(int(starts[-1]), np.uint8)
        ak.row_bytes(
            seg,
            extra,
            r0,
            r1,
            picked,
            self.entry,
            ent["attr"],
            self.rtype,
            self.key_off,
            self.val_off,
            self.group_off,
            self.member_off,
            self.topic_off,
            self.meta_off,
            self.tid,
            *codecs,
            *types,
            *controls,
            BASE64_URL,
            offsets,
            starts,
            ~big,
            data,
        )
        nulls = nulls.tolist()

        nb = (n + 7) >> 3

        def validity(j: int):
            return pa.py_buffer(bitmaps[j, :nb]) if nulls[j] else None

        def fixed(typ, values: np.ndarray, valid: int | None = None) -> pa.Array:
            buffers = [None if valid is None else validity(valid), pa.py_buffer(values[:n])]
            return pa.Array.from_buffers(typ, n, buffers, null_count=0 if valid is None else nulls[valid])

        def flag(j: int) -> pa.Array:
            return pa.Array.from_buffers(pa.bool_(), n, [None, pa.py_buffer(bitmaps[j, :nb])], null_count=0)

        def ts(row: int, valid: int) -> pa.Array:
            arr = fixed(ts_type if ts_type == _MICROS else _MILLIS, i64[row], valid)
            return arr if ts_type == _MICROS else arr.cast(ts_type)

        def string(typ, j: int) -> pa.Array:
            if big[j]:
                return self._wide(typ, j, r0, r1)
            return pa.Array.from_buffers(
                typ,
                n,
                [validity(j), pa.py_buffer(offsets[j, : n + 1]), pa.py_buffer(data[starts[j] : starts[j + 1]])],
                null_count=nulls[j],
            )

        cols = {}
        cols["offsets_partition"] = _filled(n, self.dec.partition, "int32")
        cols["log_offset"] = fixed(pa.int64(), rows_of(self.offset))
        cols["batch_base_offset"] = fixed(pa.int64(), i64[ak.I64_BASE])
        cols["magic"] = _filled(n, 2, "int8")
        cols["compression"] = string(pa.string(), ak.S_COMPRESSION)
        cols["producer_id"] = fixed(pa.int64(), i64[ak.I64_PRODUCER_ID])
        cols["producer_epoch"] = fixed(pa.int16(), i16[ak.I16_PRODUCER_EPOCH])
        cols["is_transactional"] = flag(ak.B_TRANSACTIONAL)
        cols["is_control"] = flag(ak.B_CONTROL)
        cols["is_tombstone"] = flag(ak.B_TOMBSTONE)
        cols["segment_file"] = _constant(n, name)
        cols["raw_key"] = string(pa.binary(), ak.S_KEY)
        cols["raw_value"] = string(pa.binary(), ak.S_VALUE)
        cols["control_type"] = self._control_types(r0, r1) if odd_control else string(pa.string(), ak.S_CONTROL_TYPE)
        cols["coordinator_epoch"] = fixed(pa.int32(), rows_of(self.cepoch), ak.V_COORDINATOR_EPOCH)
        cols["record_type"] = fixed(pa.int16(), rows_of(self.rtype), ak.V_RECORD_TYPE)
        cols["record_type_name"] = string(pa.string(), ak.S_TYPE_NAME)
        cols["key_version"] = fixed(pa.int16(), rows_of(self.kver))
        cols["value_version"] = fixed(pa.int16(), rows_of(self.vver), ak.V_VALUE_VERSION)
        cols["decode_status"] = _constant(n, "ok")
        cols["group_id"] = string(pa.string(), ak.S_GROUP)
        cols["member_id"] = string(pa.string(), ak.S_MEMBER)
        cols["topic"] = string(pa.string(), ak.S_TOPIC)
        cols["partition"] = fixed(pa.int32(), rows_of(self.part), ak.V_PARTITION)
        cols["committed_offset"] = fixed(pa.int64(), rows_of(self.committed), ak.V_COMMITTED)
        cols["leader_epoch"] = fixed(pa.int32(), rows_of(self.lepoch), ak.V_LEADER_EPOCH)
        cols["metadata"] = string(pa.string(), ak.S_METADATA)
        cols["log_timestamp"] = ts(ak.I64_LOG_TS, ak.V_LOG_TS)
        cols["commit_timestamp"] = ts(ak.I64_COMMIT_TS, ak.V_COMMIT_TS)
        cols["expire_timestamp"] = ts(ak.I64_EXPIRE_TS, ak.V_EXPIRE_TS)
        cols["topic_id"] = string(pa.string(), ak.S_TOPIC_ID)
        if "group_metadata" in schema.names:
            nested = self.groups.column(r0, r1, schema.field("group_metadata").type, sel)
            if nested is None:
                return None
            cols["group_metadata"] = nested
        cols["value_json"] = self.values.column(r0, r1, sel)
        return pa.RecordBatch.from_arrays([cols[f.name] for f in schema], schema=schema)

    def parts(self, r0: int, r1: int, batch: pa.RecordBatch, name: str) -> tuple:
        """The two parts offsets_log writes apart of `batch` (rows r0..r1, as `batch` built
        them), built as it was (filters of the batch cost twice that): its rows without a
        GroupMetadata value, without that column, and those with one (each None where these
        rows need Python's columns); (None, None) when no row holds a value."""
        nested = batch.column("group_metadata")
        if nested.null_count == len(nested):
            return None, None
        has = nested.is_valid().to_numpy(zero_copy_only=False)
        return (
            self.batch(r0, r1, PLAIN_SCHEMA, name, r0 + np.flatnonzero(~has)),
            self.batch(r0, r1, SCHEMA, name, r0 + np.flatnonzero(has)),
        )

    def _masks(self, r0: int, r1: int) -> dict:
        """The rows' kinds, for the columns ak.row_layout leaves to Python."""
        s = slice(r0, r1)
        control = (self.ent["attr"][self.entry[s]] & 0x20) != 0
        data = ~control
        rtype = self.rtype[s]
        commit = data & (rtype <= OFFSET_COMMIT)
        oc = commit & (self.val_len[s] >= 0)
        return {"control": control, "data": data, "rtype": rtype, "commit": commit, "oc": oc}

    def _control_types(self, r0: int, r1: int) -> pa.Array:
        """control_type where a control type has no name (UNKNOWN(type))."""
        m = self._masks(r0, r1)
        control, rtype = m["control"], m["rtype"]
        if not control.any():
            return pa.nulls(r1 - r0, pa.string())
        uniq = np.unique(rtype[control])
        inv = np.searchsorted(uniq, np.where(control, rtype, uniq[0]))
        return _labels(inv, [CONTROL_TYPES.get(int(t), f"UNKNOWN({int(t)})") for t in uniq], control)

    def _wide(self, typ, j: int, r0: int, r1: int) -> pa.Array:
        """String column j of ak.row_layout whose bytes pass int32 offsets (2 GiB in a chunk):
        as before there was a kernel for it (int64 offsets, then _strings' rule)."""
        s = slice(r0, r1)
        seg, extra = self.seg, self.extra
        m = self._masks(r0, r1)
        if j == ak.S_KEY:
            return _varwidth(typ, seg, extra, self.key_off[s], self.key_len[s], np.ones(r1 - r0, bool))
        if j == ak.S_VALUE:
            return _varwidth(typ, seg, extra, self.val_off[s], self.val_len[s], np.ones(r1 - r0, bool))
        if j == ak.S_GROUP:
            return _varwidth(typ, seg, extra, self.group_off[s], self.group_len[s], m["data"])
        if j == ak.S_MEMBER:
            keep = m["data"] & (m["rtype"] > GROUP_METADATA)
            return _varwidth(typ, seg, extra, self.member_off[s], np.where(keep, self.member_len[s], -1), keep)
        if j == ak.S_TOPIC:
            return _varwidth(typ, seg, extra, self.topic_off[s], self.topic_len[s], m["commit"])
        if j == ak.S_METADATA:
            return _varwidth(typ, seg, extra, self.meta_off[s], self.meta_len[s], m["oc"])
        if j == ak.S_TOPIC_ID:
            return _uuids(seg, extra, np.where(m["oc"], self.tid[s], -1))
        if j == ak.S_COMPRESSION:
            return _labels(self.ent["attr"][self.entry[s]] & 7, list(_CODECS))
        if j == ak.S_TYPE_NAME:
            return _labels(np.where(m["data"], m["rtype"], 0), list(_TYPE_NAMES), m["data"])
        return self._control_types(r0, r1)


_CODECS = tuple(CODEC_NAMES.get(i, str(i)) for i in range(8))
_TYPE_NAMES = tuple(RECORD_TYPES[t][0] if t in RECORD_TYPES else "" for t in range(max(RECORD_TYPES) + 1))
_CONTROL_NAMES = tuple(CONTROL_TYPES.get(t, f"UNKNOWN({t})") for t in range(max(CONTROL_TYPES) + 1))
_INT32_MAX = 2**31 - 1
_STAGGER = 5 * 64  # bytes between the rows of an _arena's arrays, modulo 4 KiB
_MICROS = pa.timestamp("us", tz="UTC")
_MILLIS = pa.timestamp("ms", tz="UTC")


def _arena(*parts: tuple[int, int, type]) -> list[np.ndarray]:
    """2-d arrays of (rows, length, dtype), in one allocation (numpy asks the kernel for huge
    pages from 4 MiB on: a 65536-row chunk's buffers in 4 KiB pages cost thousands of page
    faults), each row starting at its own 64-byte line modulo 4 KiB: rows a power-of-two
    size apart share their cache sets, and a kernel writing a dozen of them a row at a time
    ran at a quarter of the speed. So each row is padded (to `length` and more: the arrays are
    C-contiguous, a kernel indexes them past `length` at its peril)."""
    layout = []
    at = 0
    for rows, length, dtype in parts:
        itemsize = np.dtype(dtype).itemsize
        line = -(-length * itemsize // 64) * 64
        stride = line + (_STAGGER - line) % 4096
        layout.append((at, rows, length, dtype, stride))
        at += rows * stride
    arena = np.empty(at + 64, np.uint8)
    skip = -arena.ctypes.data % 64
    return [
        arena[skip + start : skip + start + rows * stride].view(dtype).reshape(rows, -1)
        for start, rows, length, dtype, stride in layout
    ]


def _row_arena(n: int) -> list[np.ndarray]:
    """The buffers lib.decode.arrow_kernel.row_layout writes for n rows."""
    return _arena(
        (5, n, np.int64),
        (1, n, np.int16),
        (ak.BITMAPS, (n + 7) >> 3, np.uint8),
        (ak.STRINGS, n + 1, np.int32),
    )


# --- the decoder ---------------------------------------------------------------------------------


def _shift(e: DecodeError, base: int) -> DecodeError:
    if e.position is not None:
        e.position += base
    return e


class _SlowRows:
    """What the Python decoder's accumulator "yields" inside the fast path: a count of rows
    left in the shared accumulator, turned into Arrow once per output chunk."""

    __slots__ = ("num_rows",)

    def __init__(self, num_rows: int):
        self.num_rows = num_rows


class _Shared:
    """One row accumulator (lib.decode.rows.Columns) shared by every Python-decoded byte range of
    the current output chunk; each range's decoder gets a view that reports its own rows."""

    def __init__(self):
        self.acc = Columns()

    def rows(self) -> int:
        return len(self.acc.cols["offsets_partition"])

    def view(self):
        return functools.partial(_View, self)

    def take(self) -> pa.RecordBatch:
        batch = self.acc.to_batch()
        self.acc = Columns()
        return batch


class _View:
    __slots__ = ("shared", "cols", "start")

    def __init__(self, shared: _Shared):
        self.shared = shared
        self.cols = shared.acc.cols
        self.start = shared.rows()

    def to_batch(self) -> _SlowRows:
        return _SlowRows(self.shared.rows() - self.start)


class _PythonRange:
    """The pure-Python SegmentDecoder over bytes [a, b) of the segment, its rows added to the
    shared accumulator and its positions moved back to the whole segment's."""

    def __init__(self, dec, data, a: int, b: int, name: str, shared: _Shared | None):
        self.own_quarantine = dec.quarantine
        self.sub = PythonDecoder(
            dec.path,
            dec.partition,
            start_offset=dec.start_offset,
            chunk_rows=dec.chunk_rows,
            verify_crc=dec.verify_crc,
            data=data if (a == 0 and b == len(data)) else memoryview(data)[a:b],
            source_name=name,
            quarantine=[] if dec.quarantine is not None else None,
            rows=shared.view() if shared is not None else Columns,
        )
        self.base = a

    def run(self, first_chunk_rows: int, chunk_rows: int):
        """Yields the sub-decoder's batches; the first ends where the caller's chunk ends, as
        the whole-file decoder's would (so an error comes after the same batches)."""
        sub = self.sub
        sub.chunk_rows = first_chunk_rows
        it = iter(sub)
        try:
            while True:
                try:
                    batch = next(it)
                except StopIteration:
                    break
                sub.chunk_rows = chunk_rows
                yield batch
        except DecodeError as e:
            raise _shift(e, self.base) from None
        finally:
            if self.own_quarantine is not None and sub.quarantine is not None:
                for row in sub.quarantine:
                    if row.get("byte_position") is not None:
                        row["byte_position"] += self.base
                    self.own_quarantine.append(row)
                sub.quarantine = []


PROFILE: dict | None = None  # set to a dict to collect seconds per stage (measure_decode)


class _Clock:
    """Seconds spent per stage of iter_fast, summed into PROFILE (time spent by the consumer
    of the batches between yields is not counted)."""

    def __init__(self):
        self.t = time.thread_time()

    def lap(self, what: str) -> None:
        if PROFILE is not None:
            now = time.thread_time()
            PROFILE[what] = PROFILE.get(what, 0.0) + now - self.t
            self.t = now

    def pause(self) -> None:
        self.t = time.thread_time()


def _readonly(a: np.ndarray) -> np.ndarray:
    # one numba type for the segment and the decompressed bytes, whatever buffer they came from
    a = a.view()
    a.flags.writeable = False
    return a


WINDOW_BYTES = 32 << 20  # a segment's entries parsed at once (its bytes), at most about


def _windows(epos: np.ndarray, etotal: np.ndarray, n: int, limit: int = WINDOW_BYTES) -> list[tuple[int, int]]:
    """The entries [e0, e1) of consecutive windows of about `limit` bytes (an entry larger
    than that alone); one window (0, 0) for none."""
    if n == 0:
        return [(0, 0)]
    window = (epos[:n] + etotal[:n] - epos[0] - 1) // limit
    cuts = (np.flatnonzero(np.diff(window)) + 1).tolist()
    bounds = [0, *cuts, n]
    return list(zip(bounds[:-1], bounds[1:]))


def _decompress_window(data, comp, kind, attr, start, stop, src) -> np.ndarray:
    """The window's compressed entries (`comp`) decompressed into one buffer, returned: each
    entry's start/stop then point into it (src 1); one that does not decompress turns SLOW
    (the Python decoder reports it)."""
    parts = []
    at = 0
    mv = memoryview(data)
    for e, codec, a, b in zip(comp.tolist(), (attr[comp] & 7).tolist(), start[comp].tolist(), stop[comp].tolist()):
        try:
            raw = decompress(codec, mv[a:b], 2)
        except DecodeError:
            kind[e] = SLOW
            continue
        parts.append(raw)
        src[e] = 1
        start[e] = at
        at += len(raw)
        stop[e] = at
    return _readonly(np.frombuffer(b"".join(parts), dtype=np.uint8) if parts else np.zeros(0, np.uint8))


def _release_pages(data, lo: int, hi: int) -> None:
    """Drop a mapped segment's pages of bytes [lo, hi) from the worker's resident memory once
    their window is decoded: they are the file's clean pages, read again from the page cache if
    touched (a row still pointing into them sees the same bytes), so the worker's RSS holds a
    window of the segment, not the whole of it (a 100 MB segment was 100 MB of RSS at its end)."""
    if isinstance(data, mmap.mmap) and hi > lo:
        start = lo - lo % mmap.PAGESIZE
        data.madvise(mmap.MADV_DONTNEED, start, hi - start)


def _release_window(data, epos: np.ndarray, etotal: np.ndarray, e0: int, e1: int) -> None:
    """_release_pages for the bytes of entries [e0, e1) (an empty segment's one window has none)."""
    if e1 > e0:
        _release_pages(data, int(epos[e0]), int(epos[e1 - 1] + etotal[e1 - 1]))


def iter_fast(dec):
    """SegmentDecoder.__iter__'s fast path (see the module doc)."""
    from lib.codec.segments import read_segment_bytes

    clock = _Clock()
    name = dec.source_name or os.path.basename(dec.path)
    data = dec.data if dec.data is not None else read_segment_bytes(dec.path)
    chunk_rows = dec.chunk_rows
    seg = _readonly(np.frombuffer(data, dtype=np.uint8) if len(data) else np.zeros(0, np.uint8))
    (
        status,
        n,
        end_pos,
        has_skipped,
        last_skipped,
        kind,
        epos,
        etotal,
        base,
        last,
        attr,
        base_ts,
        max_ts,
        pid,
        pepoch,
        count,
    ) = _frame(seg, int(dec.start_offset), bool(dec.verify_crc), _CRC)
    # the frame pass read every byte (the CRCs): the segment's pages leave the worker's resident
    # memory until a window reads them again, so it holds a window of them, not the whole
    _release_pages(data, 0, len(data))
    clock.lap("frame")
    if status != 0 or chunk_rows < 1:
        # odd offsets (or chunk size): the reference decoder, whole file
        rng = _PythonRange(dec, data, 0, len(data), name, None)
        dec.python_whole_file = True
        yield from rng.run(chunk_rows, chunk_rows)
        dec.records, dec.next_offset, dec.trailing_bytes = rng.sub.records, rng.sub.next_offset, rng.sub.trailing_bytes
        return
    start = epos + 61
    stop = epos + etotal
    src = np.zeros(n, np.int8)
    shared = _Shared()
    pending: list = []  # (_Rows, r0, r1) fast rows | _SlowRows
    pending_n = 0

    def flush():
        nonlocal pending, pending_n
        clock.lap("python_path")
        fast = [p for p in pending if type(p) is tuple]
        dec.batch_group_metadata = None
        dec._batch_parts = None
        if len(pending) == 1 and fast:
            rows, r0, r1 = fast[0]
            out = rows.batch(r0, r1, SCHEMA, name)
            dec.batch_group_metadata = rows.groups.as_python(r0, r1)
            # (on demand: the replay's log writer asks for them, a decode alone does not)
            dec._batch_parts = functools.partial(rows.parts, r0, r1, out, name)
        else:
            # a window's fast rows in one chunk are consecutive (one batch, sliced), so are
            # the chunk's Python-decoded rows
            built: dict[int, tuple[pa.RecordBatch, int]] = {}
            for rows in {id(p[0]): p[0] for p in fast}.values():
                mine = [p for p in fast if p[0] is rows]
                built[id(rows)] = (rows.batch(mine[0][1], mine[-1][2], SCHEMA, name), mine[0][1])
            sb = shared.take() if len(fast) < len(pending) else None
            parts = []
            s0 = 0
            for p in pending:
                if type(p) is tuple:
                    batch, r0 = built[id(p[0])]
                    parts.append(batch.slice(p[1] - r0, p[2] - p[1]))
                elif p.num_rows:
                    assert sb is not None
                    parts.append(sb.slice(s0, p.num_rows))
                    s0 += p.num_rows
            out = pa.concat_batches(parts) if len(parts) > 1 else parts[0]
        dec.records += pending_n
        pending = []
        pending_n = 0
        clock.lap("arrow")
        return out

    def add_fast(rows, r0, r1):
        nonlocal pending_n
        while r1 > r0:
            take = min(r1 - r0, chunk_rows - pending_n)
            pending.append((rows, r0, r0 + take))
            pending_n += take
            r0 += take
            if pending_n >= chunk_rows:
                yield flush()
                dec._batch_parts = None  # (its rows go with the batch)
                clock.pause()

    next_offset = None
    next_offset_at = -1  # entry index that set next_offset
    # the entries in windows of WINDOW_BYTES: a window's rows are parsed and held at once (a
    # 100 MB segment's whole would be 400 MB of arrays), its chunks cut as the whole's would be
    for e0, e1 in _windows(epos, etotal, n, WINDOW_BYTES):
        clock.lap("records")
        extra = _decompress_window(data, e0 + np.flatnonzero(kind[e0:e1] == COMP), kind, attr, start, stop, src)
        clock.lap("decompress")
        # the window's entries only (the others as skipped: no rows)
        mine = np.full(n, SKIP, np.int8)
        mine[e0:e1] = kind[e0:e1]
        live = (mine == FAST) | (mine == COMP)
        capacity = int(np.minimum(count[live], (stop[live] - start[live]) // _MIN_RECORD_BYTES + 1).sum())
        w64, w32, w16 = _arena((12, capacity, np.int64), (10, capacity, np.int32), (3, capacity, np.int16))
        while True:
            rows = _records(
                seg,
                extra,
                mine,
                src,
                start,
                stop,
                count,
                base,
                last,
                base_ts,
                max_ts,
                attr,
                int(dec.start_offset),
                w64,
                w32,
                w16,
                jk.KEY_STRINGS,
                jk.KEY_MEMBER,
                jk.ROOTS,
            )
            clock.lap("records")
            data_rows = (attr[rows[1][: rows[0][-1]]] & 0x20) == 0  # (a control record's rtype is its control type)
            groups = _GroupValues(seg, extra, rows, data_rows)
            clock.lap("group_values")
            values = _JsonValues(seg, extra, rows, data_rows)
            clock.lap("json_values")
            odd = np.union1d(groups.odd_entries, values.odd_entries)
            if not len(odd):
                break
            mine[odd] = SLOW  # the Python decoder reads those batches (and their errors)
        kind[e0:e1] = mine[e0:e1]
        row0 = rows[0]
        fast_rows = _Rows(
            dec, seg, extra, {"base": base, "attr": attr, "pid": pid, "pepoch": pepoch}, rows, groups, values
        )

        # pieces in log order: fast row ranges, and runs of SLOW/TAIL entries decoded in Python
        slow = (kind[e0:e1] == SLOW) | (kind[e0:e1] == TAIL)
        edges = e0 + np.flatnonzero(np.diff(np.concatenate(([0], slow.view(np.int8), [0]))))
        runs = edges.reshape(-1, 2).tolist()  # [first, stop) entry index of each slow run
        clock.lap("records")
        cur = 0
        for first, stop_e in runs:
            r = int(row0[first])
            if r > cur:
                yield from add_fast(fast_rows, cur, r)
                cur = r
            a = int(epos[first])
            b = int(epos[stop_e - 1] + etotal[stop_e - 1])
            rng = _PythonRange(dec, data, a, b, name, shared)
            for piece in rng.run(chunk_rows - pending_n, chunk_rows):
                pending.append(piece)
                pending_n += piece.num_rows
                if pending_n >= chunk_rows:
                    yield flush()
                    dec._batch_parts = None  # (its rows go with the batch)
                    clock.pause()
            if rng.sub.next_offset is not None:
                next_offset, next_offset_at = rng.sub.next_offset, stop_e - 1
            if kind[stop_e - 1] == TAIL:
                dec.trailing_bytes = rng.sub.trailing_bytes
        total_rows = int(row0[n])
        if total_rows > cur:
            yield from add_fast(fast_rows, cur, total_rows)
        del rows, groups, values, fast_rows, w64, w32, w16, extra  # (the chunks pending keep theirs)
        _release_window(data, epos, etotal, e0, e1)
    done = np.flatnonzero((kind == FAST) | (kind == COMP))
    dec.compiled_batches = len(done)
    dec.python_batches = int((kind == SLOW).sum())
    if len(done) and done[-1] > next_offset_at:
        next_offset = int(last[done[-1]]) + 1
    if not (n and kind[n - 1] == TAIL):
        dec.trailing_bytes = len(data) - int(end_pos)
    if has_skipped and (next_offset or 0) <= int(last_skipped):
        next_offset = int(last_skipped) + 1
    dec.next_offset = next_offset
    if pending_n:
        yield flush()
        dec._batch_parts = None  # (its rows go with the batch)
    clock.lap("python_path")
