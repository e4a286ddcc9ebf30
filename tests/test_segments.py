"""Segment reading (spec 1.2-1.8, 7): magic-2 batches, legacy magic 0/1 messages and wrappers,
compression, partial trailing entries and corruption.

Every batch and message here is built by hand with `struct`, an independent CRC-32C table,
`zlib.crc32`, and the compression libraries directly (gzip, cramjam raw snappy with hand-made
xerial framing, cramjam lz4 frames, cramjam zstd). The project's writer is not used.
"""

from __future__ import annotations

import gzip
import struct
import zlib

import cramjam
import lz4.frame
import pytest
import xxhash

from lib.codec.errors import CorruptBatchError, DecodeError
from lib.codec.segments import SegmentReader
from tests.helpers import crc32c


def h(text: str) -> bytes:
    return bytes.fromhex("".join(text.split()))


def i16(v):
    return struct.pack(">h", v)


def i32(v):
    return struct.pack(">i", v)


def i64(v):
    return struct.pack(">q", v)


def s16(s: str) -> bytes:
    raw = s.encode("utf-8")
    return i16(len(raw)) + raw


def b32(b):
    return i32(-1) if b is None else i32(len(b)) + b


def uv(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def zz32(n):
    return uv(((n << 1) ^ (n >> 31)) & 0xFFFFFFFF)


def zz64(n):
    return uv(((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF)


def rec(offset_delta, ts_delta, key, value, headers=(), length_adjust=0, extra=b""):
    """DefaultRecord (spec 1.6)."""
    body = b"\x00" + zz64(ts_delta) + zz32(offset_delta)
    body += zz32(-1) if key is None else zz32(len(key)) + key
    body += zz32(-1) if value is None else zz32(len(value)) + value
    body += zz32(len(headers))
    for hk, hv in headers:
        body += zz32(len(hk)) + hk + (zz32(-1) if hv is None else zz32(len(hv)) + hv)
    body += extra
    return zz32(len(body) + length_adjust) + body


def batch(base, payload, count, *, ple=0, attrs=0, last_delta=0, base_ts=-1, max_ts=-1, pid=-1, pepoch=-1, bseq=-1):
    body = struct.pack(">hiqqqhii", attrs, last_delta, base_ts, max_ts, pid, pepoch, bseq, count) + payload
    return struct.pack(">qiib", base, 9 + len(body), ple, 2) + struct.pack(">I", crc32c(body)) + body


def legacy(offset, magic, key, value, ts=-1, attrs=0):
    """One magic 0/1 entry (spec 1.7)."""
    body = struct.pack(">bb", magic, attrs) + (i64(ts) if magic == 1 else b"") + b32(key) + b32(value)
    return struct.pack(">qiI", offset, 4 + len(body), zlib.crc32(body)) + body


XERIAL = h("82 53 4E 41 50 50 59 00")


def xerial_snappy(data: bytes) -> bytes:
    """snappy-java stream framing, two blocks when possible (spec 1.5)."""
    out = XERIAL + i32(1) + i32(1)
    cut = len(data) // 2
    for chunk in (data[:cut], data[cut:]):
        block = bytes(cramjam.snappy.compress_raw(chunk))
        out += i32(len(block)) + block
    return out


COMPRESS = {
    1: lambda d: gzip.compress(d),
    2: xerial_snappy,
    3: lambda d: kafka_lz4(d),
    4: lambda d: bytes(cramjam.zstd.compress(d)),
}


def kafka_lz4(data: bytes) -> bytes:
    """An LZ4 frame as Kafka's producers write it (python-lz4): independent 64 KiB blocks, no checksums."""
    return lz4.frame.compress(
        data, block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False, content_checksum=False, store_size=False
    )


def lz4_with_old_kafka_header_checksum(data: bytes) -> bytes:
    """An LZ4 frame whose descriptor checksum was computed the wrong way (over the magic too),
    as very old Kafka clients did (spec 1.5)."""
    frame = bytearray(kafka_lz4(data))
    assert frame[:4] == h("04 22 4D 18")
    flg = frame[4]
    hc_pos = 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
    wrong = (xxhash.xxh32_intdigest(bytes(frame[0:hc_pos])) >> 8) & 0xFF
    assert wrong != frame[hc_pos]
    frame[hc_pos] = wrong
    return bytes(frame)


# --- spec 7 batches -----------------------------------------------------------------------------

T = 1700000000000
OC_KEY = h("00 01  00 08 6d 79 2d 67 72 6f 75 70  00 06 6f 72 64 65 72 73  00 00 00 03")
OC_V3 = h("00 03  00 00 00 00 00 00 04 d2  00 00 00 05  00 00  00 00 01 8b cf e5 68 00")
GM_KEY = h("00 02  00 08 6d 79 2d 67 72 6f 75 70")
GM_V3 = h("""
00 03 00 08 63 6f 6e 73 75 6d 65 72 00 00 00 01 00 05 72 61 6e 67 65 00 02 6d 31
00 00 01 8b cf e5 68 00 00 00 00 01
00 02 6d 31 ff ff 00 02 63 31 00 09 2f 31 30 2e 30 2e 30 2e 31 00 04 93 e0 00 00 af c8
00 00 00 1c 00 03 00 00 00 01 00 06 6f 72 64 65 72 73 ff ff ff ff 00 00 00 00 ff ff ff ff ff ff
00 00 00 22 00 03 00 00 00 01 00 06 6f 72 64 65 72 73
00 00 00 03 00 00 00 00 00 00 00 01 00 00 00 02 ff ff ff ff""")
TXN_V3 = i16(3) + i64(5000) + i32(-1) + s16("") + i64(T + 2000)

B71 = (
    h("""
00 00 00 00 00 00 00 64 00 00 00 68 00 00 00 07 02 45 5d 15 34 00 00 00 00 00 00
00 00 01 8b cf e5 68 00 00 00 01 8b cf e5 68 00 ff ff ff ff ff ff ff ff ff ff 00 00 00 00
00 00 00 01 6c 00 00 00 30""")
    + OC_KEY
    + h("30")
    + OC_V3
    + h("00")
)
B72 = batch(101, h("ba 02 00 00 00 18") + GM_KEY + h("94 02") + GM_V3 + h("00"), 1, ple=7, base_ts=T, max_ts=T, bseq=0)
B73 = h("""
00 00 00 00 00 00 00 66 00 00 00 63 00 00 00 07 02 77 16 b0 97 00 00 00 00 00 01
00 00 01 8b cf e5 6b e8 00 00 01 8b cf e5 6b e8 ff ff ff ff ff ff ff ff ff ff 00 00 00 00 00 00 00 02
3c 00 00 00 30 00 01 00 08 6d 79 2d 67 72 6f 75 70 00 06 6f 72 64 65 72 73 00 00 00 03 01 00
24 00 00 02 18 00 02 00 08 6d 79 2d 67 72 6f 75 70 01 00""")
B74_TXN = batch(
    104, rec(0, 0, OC_KEY, TXN_V3), 1, ple=7, attrs=0x10, base_ts=T + 2000, max_ts=T + 2000, pid=4000, pepoch=2, bseq=0
)
B74_MARKER = h("""
00 00 00 00 00 00 00 69 00 00 00 42 00 00 00 07 02 98 38 8e 18 00 30 00 00 00 00
00 00 01 8b cf e5 73 b8 00 00 01 8b cf e5 73 b8 00 00 00 00 00 00 0f a0 00 02 ff ff ff ff
00 00 00 01 20 00 00 00 08 00 00 00 01 0c 00 00 00 00 00 0b 00""")
LEGACY_7_5 = (
    h("""
00 00 00 00 00 00 00 2a 00 00 00 4a 68 c8 03 6e 01 00 00 00 01 8b cf e5 68 00
00 00 00 18""")
    + OC_KEY
    + h("""00 00 00 1c
00 01 00 00 00 00 00 00 04 d2 00 00 00 00 01 8b cf e5 68 00 00 00 01 8b f3 f1 ec 00""")
)

SPEC_SEGMENT = B71 + B72 + B73 + B74_TXN + B74_MARKER
FILE = "/data/__consumer_offsets-12/00000000000000000100.log"


def read_all(buf, **kw):
    r = SegmentReader(buf, **kw)
    return list(r), r


def test_fixture_crcs_match_spec():
    assert xerial_snappy(b"abc" * 100)[:8] == h("82 53 4E 41 50 50 59 00")
    assert B72[17:21] == h("b3 f2 b3 ce") and len(B72) == 220
    assert B74_TXN[17:21] == h("e5 f0 80 aa") and len(B74_TXN) == 116
    assert crc32c(B73[21:]) == 0x7716B097 and crc32c(B74_MARKER[21:]) == 0x98388E18


def test_spec_segment_concatenated():
    batches, r = read_all(SPEC_SEGMENT, file=FILE, partition=12)
    assert r.trailing_bytes == 0
    summary = [
        (
            b.position,
            b.size,
            b.magic,
            b.base_offset,
            b.last_offset,
            b.partition_leader_epoch,
            b.crc,
            b.is_transactional,
            b.is_control,
            b.producer_id,
            b.producer_epoch,
            b.base_sequence,
        )
        for b in batches
    ]
    assert summary == [
        (0, 116, 2, 100, 100, 7, 1163728180, False, False, -1, -1, 0),
        (116, 220, 2, 101, 101, 7, 3019027406, False, False, -1, -1, 0),
        (336, 111, 2, 102, 103, 7, 1997975703, False, False, -1, -1, 0),
        (447, 116, 2, 104, 104, 7, 0xE5F080AA, True, False, 4000, 2, 0),
        (563, 78, 2, 105, 105, 7, 2553843224, True, True, 4000, 2, -1),
    ]
    assert [rec for b in batches for rec in b.records] == [
        (100, T, OC_KEY, OC_V3),
        (101, T, GM_KEY, GM_V3),
        (102, T + 1000, OC_KEY, None),
        (103, T + 1000, GM_KEY, None),
        (104, T + 2000, OC_KEY, TXN_V3),
        (105, T + 3000, h("00 00 00 01"), h("00 00 00 00 00 0b")),
    ]
    assert [b.next_offset for b in batches] == [101, 102, 104, 105, 106]


def test_legacy_and_v2_mixed_in_one_segment():
    batches, r = read_all(LEGACY_7_5 + B71)
    assert [(b.magic, b.position, b.base_offset, b.last_offset) for b in batches] == [(1, 0, 42, 42), (2, 86, 100, 100)]
    assert r.trailing_bytes == 0


# --- magic 2 semantics ----------------------------------------------------------------------------


def test_compacted_batch_offsets_have_gaps():
    payload = rec(0, 0, b"k0", b"v0") + rec(5, 7, b"k5", b"v5")
    (b,), _ = read_all(batch(100, payload, 2, last_delta=7, base_ts=T, max_ts=T + 7))
    assert (b.base_offset, b.last_offset, b.next_offset) == (100, 107, 108)
    assert b.records == [(100, T, b"k0", b"v0"), (105, T + 7, b"k5", b"v5")]


def test_empty_batch_advances_offsets():
    empty = batch(200, b"", 0, last_delta=4, base_ts=-1, max_ts=T, pid=77, pepoch=1, bseq=12)
    nxt = batch(205, rec(0, 0, b"k", b"v"), 1, base_ts=T, max_ts=T)
    (b1, b2), r = read_all(empty + nxt)
    assert (b1.base_offset, b1.last_offset, b1.next_offset, b1.records, b1.producer_id) == (200, 204, 205, [], 77)
    assert (b2.position, b2.base_offset, b2.records) == (len(empty), 205, [(205, T, b"k", b"v")])
    assert r.trailing_bytes == 0


def test_log_append_time_records_take_max_timestamp():
    payload = rec(0, 0, b"a", b"1") + rec(1, 10, b"b", b"2")
    (b,), _ = read_all(batch(10, payload, 2, attrs=0x08, last_delta=1, base_ts=T, max_ts=T + 5000))
    assert (b.timestamp_type, b.attributes) == (1, 0x08)
    assert [(o, ts) for o, ts, _, _ in b.records] == [(10, T + 5000), (11, T + 5000)]


def test_create_time_negative_delta():
    payload = rec(0, 0, b"a", b"1") + rec(1, -3, b"b", b"2")
    (b,), _ = read_all(batch(10, payload, 2, last_delta=1, base_ts=T, max_ts=T))
    assert [ts for _, ts, _, _ in b.records] == [T, T - 3]


def test_delete_horizon_bit():
    horizon = T + 86400000
    payload = rec(0, -86400000, OC_KEY, None) + rec(1, -86400000 + 20, GM_KEY, None)
    (b,), _ = read_all(batch(300, payload, 2, attrs=0x40, last_delta=1, base_ts=horizon, max_ts=T + 20))
    assert (b.has_delete_horizon, b.base_timestamp, b.max_timestamp, b.timestamp_type) == (True, horizon, T + 20, 0)
    assert b.records == [(300, T, OC_KEY, None), (301, T + 20, GM_KEY, None)]


def test_attribute_bits_decoded():
    (b,), _ = read_all(batch(1, rec(0, 0, b"k", b"v"), 1, attrs=0x10 | 0x40, base_ts=T, max_ts=T, pid=5, pepoch=0))
    assert (b.compression, b.timestamp_type, b.is_transactional, b.is_control, b.has_delete_horizon) == (
        0,
        0,
        True,
        False,
        True,
    )


def test_headers_are_skipped():
    headers = [(b"h1", b"value-1"), (b"", b""), (b"h3", None)]
    payload = rec(0, 0, b"key", b"val", headers=headers) + rec(1, 1, None, b"x", headers=[(b"z" * 200, b"y" * 300)])
    (b,), _ = read_all(batch(50, payload, 2, last_delta=1, base_ts=T, max_ts=T + 1))
    assert b.records == [(50, T, b"key", b"val"), (51, T + 1, None, b"x")]


RECS = [(0, 0, OC_KEY, OC_V3), (1, 1000, GM_KEY, GM_V3), (3, 2000, OC_KEY, None)]
EXPECTED = [(500, T, OC_KEY, OC_V3), (501, T + 1000, GM_KEY, GM_V3), (503, T + 2000, OC_KEY, None)]


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4], ids=["none", "gzip", "snappy", "lz4", "zstd"])
def test_v2_compression(codec):
    raw = b"".join(rec(*r) for r in RECS)
    payload = COMPRESS[codec](raw) if codec else raw
    (b,), _ = read_all(batch(500, payload, 3, attrs=codec, last_delta=3, base_ts=T, max_ts=T + 2000))
    assert b.compression == codec
    assert b.records == EXPECTED


def test_v2_unknown_codec_raises():
    for codec in (5, 6, 7):
        with pytest.raises(CorruptBatchError):
            read_all(batch(1, rec(0, 0, b"k", b"v"), 1, attrs=codec, base_ts=T, max_ts=T))


# --- legacy magic 0/1 -----------------------------------------------------------------------------


def test_legacy_magic0_uncompressed():
    m = legacy(7, 0, b"key", b"value")
    (b,), _ = read_all(m)
    assert (b.magic, b.size, b.base_offset, b.last_offset, b.timestamp_type, b.compression, b.crc) == (
        0,
        len(m),
        7,
        7,
        -1,
        0,
        zlib.crc32(m[16:]),
    )
    assert b.records == [(7, -1, b"key", b"value")]


def test_legacy_magic1_uncompressed_and_tombstone():
    (b1, b2), r = read_all(legacy(8, 1, b"key", b"value", T) + legacy(9, 1, OC_KEY, None, T + 1))
    assert (b1.magic, b1.timestamp_type, b1.records) == (1, 0, [(8, T, b"key", b"value")])
    assert b2.records == [(9, T + 1, OC_KEY, None)]
    assert r.trailing_bytes == 0


INNER = [(b"k0", b"v0", T), (b"k2", b"v2", T + 2), (b"k5", None, T + 5)]


@pytest.mark.parametrize("codec", [1, 2, 3], ids=["gzip", "snappy", "lz4"])
def test_legacy_magic1_wrapper_relative_offsets(codec):
    inner = b"".join(legacy(rel, 1, k, v, ts) for rel, (k, v, ts) in zip((0, 2, 5), INNER))
    wrapper = legacy(105, 1, None, COMPRESS[codec](inner), T + 9, attrs=codec)
    (b,), r = read_all(wrapper)
    assert (b.magic, b.compression, b.base_offset, b.last_offset, b.timestamp_type) == (1, codec, 100, 105, 0)
    # CreateTime wrapper: inner messages keep their own timestamps
    assert b.records == [(100, T, b"k0", b"v0"), (102, T + 2, b"k2", b"v2"), (105, T + 5, b"k5", None)]
    assert r.trailing_bytes == 0


@pytest.mark.parametrize("codec", [1, 2, 3], ids=["gzip", "snappy", "lz4"])
def test_legacy_magic0_wrapper_absolute_offsets(codec):
    inner = b"".join(legacy(o, 0, k, v) for o, (k, v, _) in zip((100, 102, 105), INNER))
    (b,), _ = read_all(legacy(105, 0, None, COMPRESS[codec](inner), attrs=codec))
    assert (b.magic, b.compression, b.base_offset, b.last_offset, b.timestamp_type) == (0, codec, 100, 105, -1)
    assert b.records == [(100, -1, b"k0", b"v0"), (102, -1, b"k2", b"v2"), (105, -1, b"k5", None)]


def test_legacy_magic1_wrapper_offset_zero_means_base_zero():
    inner = legacy(0, 1, b"a", b"1", T) + legacy(1, 1, b"b", b"2", T)
    (b,), _ = read_all(legacy(0, 1, None, gzip.compress(inner), T, attrs=1))
    assert [o for o, _, _, _ in b.records] == [0, 1]


def test_legacy_magic1_log_append_time_wrapper():
    inner = legacy(0, 1, b"a", b"1", T) + legacy(1, 1, b"b", b"2", T + 50)
    (b,), _ = read_all(legacy(11, 1, None, gzip.compress(inner), T + 999, attrs=0x08 | 1))
    assert b.timestamp_type == 1
    assert b.records == [(10, T + 999, b"a", b"1"), (11, T + 999, b"b", b"2")]


def test_legacy_magic0_lz4_ignores_header_checksum():
    inner = legacy(3, 0, b"a", b"1") + legacy(4, 0, b"b", b"2")
    (b,), _ = read_all(legacy(4, 0, None, lz4_with_old_kafka_header_checksum(inner), attrs=3))
    assert b.records == [(3, -1, b"a", b"1"), (4, -1, b"b", b"2")]


def test_legacy_magic1_lz4_bad_header_checksum_raises():
    inner = legacy(0, 1, b"a", b"1", T)
    with pytest.raises(CorruptBatchError):
        read_all(legacy(4, 1, None, lz4_with_old_kafka_header_checksum(inner), T, attrs=3))


def test_legacy_zstd_wrapper_rejected():
    for magic in (0, 1):
        inner = legacy(0, magic, b"a", b"1", T)
        with pytest.raises(CorruptBatchError):
            read_all(legacy(0, magic, None, bytes(cramjam.zstd.compress(inner)), T, attrs=4))


# --- partial trailing entries ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "first,second",
    [
        (B71, B72),
        (B73, B74_MARKER),
        (LEGACY_7_5, B71),
        (B71, LEGACY_7_5),
        (B71, batch(9, gzip.compress(rec(0, 0, b"k", b"v" * 40)), 1, attrs=1, base_ts=T, max_ts=T)),
    ],
    ids=["v2-v2", "tombstones-marker", "legacy-v2", "v2-legacy", "v2-gzip"],
)
def test_partial_trailing_entry_every_position(first, second):
    (expected,), _ = read_all(first)
    seg = first + second
    for cut in range(len(first), len(seg)):
        batches, r = read_all(seg[:cut], file=FILE, partition=12)
        assert [(b.base_offset, b.records) for b in batches] == [(expected.base_offset, expected.records)], cut
        assert r.trailing_bytes == cut - len(first), cut


def test_partial_first_entry_and_tiny_buffers():
    for cut in range(0, len(B71)):
        batches, r = read_all(B71[:cut])
        assert batches == [] and r.trailing_bytes == cut


# --- corruption ---------------------------------------------------------------------------------------


def test_crc_mismatch_names_file_partition_offset():
    # positions inside the second batch (base offset 101): the stored CRC itself and the covered region
    for pos in (17, 20, 21, 22, 30, 60, 61, 100, 219):
        seg = bytearray(B71 + B72 + B73)
        seg[len(B71) + pos] ^= 0x01
        with pytest.raises(CorruptBatchError) as ei:
            read_all(bytes(seg), file=FILE, partition=12)
        e = ei.value
        assert isinstance(e, DecodeError)
        assert (e.file, e.partition, e.offset) == (FILE, 12, 101), pos
        msg = str(e)
        assert FILE in msg and "12" in msg and "101" in msg, msg


def test_partition_leader_epoch_not_covered_by_crc():
    for pos, expected_epoch in ((12, -16777209), (15, 0xF8), (13, 0xFF0007)):
        seg = bytearray(B71)
        seg[pos] ^= 0xFF
        (b,), _ = read_all(bytes(seg))
        assert b.partition_leader_epoch == expected_epoch
        assert b.records == [(100, T, OC_KEY, OC_V3)]


def test_base_offset_not_covered_by_crc():
    seg = bytearray(B71)
    seg[7] = 0x70  # baseOffset 100 -> 112
    (b,), _ = read_all(bytes(seg))
    assert (b.base_offset, b.records[0][0]) == (112, 112)


def test_entry_size_below_14_raises():
    # spec 1.2: the size check comes before the partial-entry check, so a size-13 entry that would
    # also run past the end of the buffer is still corruption, not a partial write
    for size, tail in ((0, 20), (13, 20), (13, 40), (-1, 20), (-(2**31), 20)):
        bad = i64(300) + i32(size) + b"\x00\x00\x00\x00\x02" + bytes(tail - 17)
        with pytest.raises(CorruptBatchError) as ei:
            read_all(B71 + bad, file=FILE, partition=3)
        assert (ei.value.file, ei.value.partition) == (FILE, 3), (size, tail)


# --- a preallocated segment (log.preallocate=true) that was not trimmed, as after a crash --------


@pytest.mark.parametrize("padding", [1, 16, 17, 100, 4096, (1 << 20) + 3])
def test_zero_padding_after_the_last_batch_is_a_tail(padding):
    # Kafka's recovery stops at the first entry of size 0 and truncates the file there
    batches, r = read_all(B71 + B72 + bytes(padding), file=FILE, partition=3)
    assert [b.base_offset for b in batches] == [100, 101]
    assert (r.trailing_bytes, r.unreadable_bytes) == (padding, 0)


def test_zero_padding_is_not_quarantined():
    handed = []
    batches, r = read_all(B71 + bytes(300), on_corrupt=lambda e, raw: handed.append(raw))
    assert [b.base_offset for b in batches] == [100] and handed == [] and r.trailing_bytes == 300


def test_a_segment_of_zeros_only_is_a_tail():
    batches, r = read_all(bytes(5000))
    assert batches == [] and r.trailing_bytes == 5000


@pytest.mark.parametrize("zeros", [17, 40, 1 << 20])
def test_zeros_followed_by_data_stay_an_error(zeros):
    with pytest.raises(CorruptBatchError) as ei:
        read_all(B71 + bytes(zeros) + B72, file=FILE, partition=3)
    e = ei.value
    assert (e.file, e.partition, e.offset, e.position) == (FILE, 3, 0, len(B71))
    # B72 begins with its base offset 101: seven more zero bytes, then 0x65
    assert B72[:8] == i64(101) and B72[7] == 0x65
    assert str(e.message) == (
        f"entry size 0 is smaller than the minimum 14 ({zeros + 7} zero bytes, then data: "
        "not a preallocated file's unused end)"
    )


def test_unknown_magic_raises():
    for magic in (3, 4, 0x7F, 0xFF):
        seg = bytearray(B71)
        seg[16] = magic
        with pytest.raises(CorruptBatchError) as ei:
            read_all(bytes(seg), file=FILE, partition=12)
        assert (ei.value.file, ei.value.partition, ei.value.offset) == (FILE, 12, 100)


def test_v2_batch_smaller_than_overhead_raises():
    bad = i64(5) + i32(40) + i32(0) + b"\x02" + bytes(39)
    with pytest.raises(CorruptBatchError):
        read_all(bad)


def test_legacy_crc_mismatch():
    # the stored CRC-32 (12..15), magic/attributes/timestamp, key and value
    for pos in (12, 15, 17, 25, 40, 85):
        seg = bytearray(B71 + LEGACY_7_5)
        seg[len(B71) + pos] ^= 0x10
        with pytest.raises(CorruptBatchError) as ei:
            read_all(bytes(seg), file=FILE, partition=12)
        assert (ei.value.file, ei.value.partition, ei.value.offset) == (FILE, 12, 42), pos
        assert FILE in str(ei.value) and "42" in str(ei.value)


def test_legacy_magic1_message_below_minimum_size_raises():
    body = struct.pack(">bb", 1, 0) + bytes(12)  # 18-byte message, magic 1 needs 22
    bad = struct.pack(">qiI", 5, 4 + len(body), zlib.crc32(body)) + body
    with pytest.raises(CorruptBatchError):
        read_all(bad)


@pytest.mark.parametrize(
    "payload,count",
    [
        (rec(0, 0, b"k", b"v"), 2),  # fewer records than the count
        (rec(0, 0, b"k", b"v") + rec(1, 0, b"k", b"v"), 1),  # bytes left after the last record
        (rec(0, 0, b"k", b"v", extra=b"\x00"), 1),  # record length not fully consumed
        (rec(0, 0, b"k", b"v", length_adjust=5), 1),  # record length past the batch end
    ],
    ids=["short-count", "leftover", "record-length-mismatch", "record-past-end"],
)
def test_inconsistent_batch_contents_raise(payload, count):
    with pytest.raises(CorruptBatchError):
        read_all(batch(7, payload, count, base_ts=T, max_ts=T))


def test_lz4_linked_blocks_are_refused_as_kafka_does():
    """Kafka's Lz4BlockInputStream throws "Dependent block stream is unsupported" on a frame
    without the block-independence flag (checked on a 4.3.1 broker's DumpLogSegments)."""
    raw = b"".join(rec(*r) for r in RECS)
    linked = bytes(cramjam.lz4.compress(raw))  # cramjam's frames link their blocks
    assert not linked[4] & 0x20
    with pytest.raises(CorruptBatchError, match="cannot decompress lz4 data: dependent block stream is unsupported"):
        read_all(batch(500, linked, 3, attrs=3, last_delta=3, base_ts=T, max_ts=T + 2000))


# Kafka's readers (GZIPInputStream, ZstdInputStream) read on across concatenated gzip members and
# zstd frames; the quick single-frame readers hand such input back to cramjam's path.
_RAW = b"".join(rec(*r) for r in RECS)
_HALF = len(_RAW) // 2


@pytest.mark.parametrize(
    "payload",
    [
        gzip.compress(_RAW[:_HALF]) + gzip.compress(_RAW[_HALF:]),
        bytes(cramjam.zstd.compress(_RAW[:_HALF])) + bytes(cramjam.zstd.compress(_RAW[_HALF:])),
    ],
    ids=["gzip-two-members", "zstd-two-frames"],
)
def test_concatenated_frames_read_as_one_stream(payload):
    codec = 1 if payload[:2] == b"\x1f\x8b" else 4
    (b,), _ = read_all(batch(500, payload, 3, attrs=codec, last_delta=3, base_ts=T, max_ts=T + 2000))
    assert b.records == EXPECTED


@pytest.mark.parametrize("codec", [1, 3, 4], ids=["gzip", "lz4", "zstd"])
def test_truncated_frame_raises(codec):
    payload = COMPRESS[codec](_RAW)[:-3]
    with pytest.raises(CorruptBatchError, match="cannot decompress"):
        read_all(batch(500, payload, 3, attrs=codec, last_delta=3, base_ts=T, max_ts=T + 2000))


def _general_reader(codec: int, data: bytes):
    """What lib.codec.compression read snappy and lz4 with before its one-call paths: the value,
    or DecodeError (decompress raises it for whatever these raise)."""
    from lib.codec import compression as c

    try:
        if codec == 2:
            return c._xerial_snappy(data)
        if not data[4:5] or not data[4] & 0x20:
            raise DecodeError("dependent")
        out = c._one_frame(lz4.frame.LZ4FrameDecompressor(), data)
        return out if out is not None else bytes(cramjam.lz4.decompress(data))
    except Exception:
        return DecodeError


@pytest.mark.parametrize("codec", [2, 3], ids=["snappy", "lz4"])
def test_one_call_snappy_and_lz4_read_as_the_general_readers(codec):
    """decompress reads a xerial frame of one snappy block, or one LZ4 frame of independent
    blocks, in one call: on those, on frames of several blocks and on damaged and cut ones,
    it returns what the general readers return, or raises where they raise."""
    import random

    from lib.codec.compression import compress, decompress

    rng = random.Random(codec)
    sizes = [0, 1, 5, 100, 4000, 40_000, 70_000, 200_000]  # (snappy: one block per 32 KiB)
    for trial in range(1500):
        n = sizes[trial] if trial < len(sizes) else rng.randrange(0, 600)
        raw = bytes(rng.getrandbits(8) for _ in range(min(n, 300))) + b"ab" * (n // 2)
        data = bytearray(compress(codec, raw))
        if trial >= len(sizes):
            for _ in range(rng.randrange(0, 3)):
                if data:
                    data[rng.randrange(len(data))] = rng.getrandbits(8)
            if rng.random() < 0.3:
                data = data[: rng.randrange(0, len(data) + 1)]
        else:
            assert decompress(codec, memoryview(bytes(data)), 2) == raw
        expected = _general_reader(codec, bytes(data))
        try:
            got = decompress(codec, memoryview(bytes(data)), 2)
        except DecodeError:
            got = DecodeError
        assert got == expected, (trial, len(data))
