"""Byte-exact vectors for the coordinator-record codec (spec sections 2, 3 and 7).

Every expected value below comes from the specification (/work/shared/spec/offsets-topic.md,
section 7 worked examples) or from bytes built by hand in this file with `struct` and a few
tiny helpers that follow the spec's primitive encodings (2.2). Nothing here was produced by
running the project's code.
"""

from __future__ import annotations

import base64
import struct

import pytest

from lib.codec import serde as co
from lib.codec import writer
from lib.codec.errors import DecodeError, UnknownRecordTypeError, UnknownRecordVersionError
from lib.codec.segments import SegmentReader
from tests.helpers import crc32c


def h(text: str) -> bytes:
    """Hex literal with arbitrary whitespace."""
    return bytes.fromhex("".join(text.split()))


# --- independent primitive encoders (spec 1.6 / 2.2) ----------------------------------------


def i8(v):
    return struct.pack(">b", v)


def i16(v):
    return struct.pack(">h", v)


def u16(v):
    return struct.pack(">H", v)


def i32(v):
    return struct.pack(">i", v)


def i64(v):
    return struct.pack(">q", v)


def s16(s):
    """Non-flexible string: int16 length + UTF-8 (-1 = null)."""
    if s is None:
        return i16(-1)
    raw = s.encode("utf-8")
    return i16(len(raw)) + raw


def b32(b):
    """Non-flexible bytes: int32 length (-1 = null)."""
    return i32(-1) if b is None else i32(len(b)) + b


def arr32(items):
    return i32(len(items)) + b"".join(items)


def uv(n: int) -> bytes:
    """Unsigned varint, 7 bits per byte, least significant group first."""
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def zz32(n: int) -> bytes:
    return uv(((n << 1) ^ (n >> 31)) & 0xFFFFFFFF)


def zz64(n: int) -> bytes:
    return uv(((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF)


def cs(s):
    """Compact string: uvarint(len + 1) + UTF-8, 0 = null."""
    if s is None:
        return b"\x00"
    raw = s.encode("utf-8")
    return uv(len(raw) + 1) + raw


def cb(b):
    """Compact bytes."""
    return b"\x00" if b is None else uv(len(b) + 1) + b


def carr(items):
    """Compact array of already-encoded elements (None = null)."""
    return b"\x00" if items is None else uv(len(items) + 1) + b"".join(items)


def tags(*fields):
    """Tagged section: count, then (tag, size, payload) per field."""
    return uv(len(fields)) + b"".join(uv(t) + uv(len(p)) + p for t, p in fields)


NOTAGS = b"\x00"


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def hand_record(offset_delta, ts_delta, key, value):
    body = b"\x00" + zz64(ts_delta) + zz32(offset_delta)
    body += zz32(-1) if key is None else zz32(len(key)) + key
    body += zz32(-1) if value is None else zz32(len(value)) + value
    body += zz32(0)
    return zz32(len(body)) + body


def hand_batch(base, ple, attrs, last_delta, base_ts, max_ts, pid, pepoch, bseq, count, payload):
    body = struct.pack(">hiqqqhii", attrs, last_delta, base_ts, max_ts, pid, pepoch, bseq, count) + payload
    return struct.pack(">qiib", base, 9 + len(body), ple, 2) + struct.pack(">I", crc32c(body)) + body


# =============================================================================================
# Spec section 7 vectors
# =============================================================================================

T = 1700000000000
assert i64(T) == h("00 00 01 8b cf e5 68 00")
TOPIC_ID = "ASNFZ4mrze8BI0VniavN7w"  # 0123456789abcdef0123456789abcdef (spec 7.1)

# 7.1
OC_KEY = h("""00 01  00 08 6d 79 2d 67 72 6f 75 70  00 06 6f 72 64 65 72 73  00 00 00 03""")
OC_V3 = h("""00 03  00 00 00 00 00 00 04 d2  00 00 00 05  00 00  00 00 01 8b cf e5 68 00""")
OC_V4 = h("""00 04  00 00 00 00 00 00 04 d2  00 00 00 05  01  00 00 01 8b cf e5 68 00  00""")
OC_V4_TID = h("""00 04  00 00 00 00 00 00 04 d2  00 00 00 05  01  00 00 01 8b cf e5 68 00
                 01 00 10 01 23 45 67 89 ab cd ef 01 23 45 67 89 ab cd ef""")
OC_DICT = {"offset": 1234, "leaderEpoch": 5, "metadata": "", "commitTimestamp": T}

BATCH_7_1 = (
    h("""
00 00 00 00 00 00 00 64  00 00 00 68  00 00 00 07  02  45 5d 15 34  00 00  00 00 00 00
00 00 01 8b cf e5 68 00  00 00 01 8b cf e5 68 00  ff ff ff ff ff ff ff ff  ff ff  00 00 00 00
00 00 00 01
6c 00 00 00 30""")
    + OC_KEY
    + h("30")
    + OC_V3
    + h("00")
)

# 7.2
GM_KEY = h("00 02  00 08 6d 79 2d 67 72 6f 75 70")
SUB_V3 = h("""00 03  00 00 00 01 00 06 6f 72 64 65 72 73  ff ff ff ff  00 00 00 00  ff ff ff ff  ff ff""")
ASG_V3 = h("""00 03  00 00 00 01  00 06 6f 72 64 65 72 73
              00 00 00 03 00 00 00 00 00 00 00 01 00 00 00 02  ff ff ff ff""")
GM_V3 = (
    h("""
00 03
00 08 63 6f 6e 73 75 6d 65 72
00 00 00 01
00 05 72 61 6e 67 65
00 02 6d 31
00 00 01 8b cf e5 68 00
00 00 00 01
  00 02 6d 31
  ff ff
  00 02 63 31
  00 09 2f 31 30 2e 30 2e 30 2e 31
  00 04 93 e0
  00 00 af c8
  00 00 00 1c""")
    + SUB_V3
    + h("00 00 00 22")
    + ASG_V3
)
SUB_V3_DICT = {"topics": ["orders"], "userData": None, "ownedPartitions": [], "generationId": -1, "rackId": None}
ASG_V3_DICT = {"assignedPartitions": [{"topic": "orders", "partitions": [0, 1, 2]}], "userData": None}
GM_V3_DICT = {
    "protocolType": "consumer",
    "generation": 1,
    "protocol": "range",
    "leader": "m1",
    "currentStateTimestamp": T,
    "members": [
        {
            "memberId": "m1",
            "groupInstanceId": None,
            "clientId": "c1",
            "clientHost": "/10.0.0.1",
            "rebalanceTimeout": 300000,
            "sessionTimeout": 45000,
            "subscription": b64(SUB_V3),
            "assignment": b64(ASG_V3),
        }
    ],
}
GM_RECORD = h("ba 02 00 00 00 18") + GM_KEY + h("94 02") + GM_V3 + h("00")
BATCH_7_2 = hand_batch(101, 7, 0, 0, T, T, -1, -1, 0, 1, GM_RECORD)

# 7.3
T1000 = T + 1000
BATCH_7_3 = h("""
00 00 00 00 00 00 00 66 00 00 00 63 00 00 00 07 02 77 16 b0 97 00 00 00 00 00 01
00 00 01 8b cf e5 6b e8 00 00 01 8b cf e5 6b e8 ff ff ff ff ff ff ff ff ff ff 00 00 00 00 00 00 00 02
3c 00 00 00 30 00 01 00 08 6d 79 2d 67 72 6f 75 70 00 06 6f 72 64 65 72 73 00 00 00 03 01 00
24 00 00 02 18 00 02 00 08 6d 79 2d 67 72 6f 75 70 01 00""")

# 7.4: TxnOffsetCommit batch (only CRC/size given by the spec; the timestamps T+2000 and
# baseSequence 0 are the values for which the spec's CRC e5 f0 80 aa matches, checked below).
TXN_V3 = i16(3) + i64(5000) + i32(-1) + s16("") + i64(T + 2000)
BATCH_7_4_TXN = hand_batch(104, 7, 0x10, 0, T + 2000, T + 2000, 4000, 2, 0, 1, hand_record(0, 0, OC_KEY, TXN_V3))
BATCH_7_4_MARKER = h("""
00 00 00 00 00 00 00 69  00 00 00 42  00 00 00 07  02  98 38 8e 18  00 30  00 00 00 00
00 00 01 8b cf e5 73 b8  00 00 01 8b cf e5 73 b8  00 00 00 00 00 00 0f a0  00 02  ff ff ff ff
00 00 00 01
20 00 00 00  08 00 00 00 01  0c 00 00 00 00 00 0b  00""")

# 7.5
OC_V1_LEGACY = h("00 01 00 00 00 00 00 00 04 d2 00 00 00 00 01 8b cf e5 68 00 00 00 01 8b f3 f1 ec 00")
LEGACY_7_5 = (
    h("""
00 00 00 00 00 00 00 2a  00 00 00 4a  68 c8 03 6e  01 00  00 00 01 8b cf e5 68 00
00 00 00 18""")
    + OC_KEY
    + h("00 00 00 1c")
    + OC_V1_LEGACY
)


def test_section7_lengths_as_stated():
    assert (len(OC_KEY), len(OC_V3), len(OC_V4), len(OC_V4_TID)) == (24, 24, 24, 42)
    assert (len(BATCH_7_1), len(GM_KEY), len(GM_V3), len(SUB_V3), len(ASG_V3)) == (116, 12, 138, 28, 34)
    assert (len(GM_RECORD), len(BATCH_7_2), len(BATCH_7_3)) == (159, 220, 111)
    assert (len(BATCH_7_4_TXN), len(BATCH_7_4_MARKER), len(LEGACY_7_5), len(OC_V1_LEGACY)) == (116, 78, 86, 28)
    # the hand-built batches reproduce the spec's stated CRC bytes (this checks the fixtures themselves)
    assert crc32c(BATCH_7_1[21:]) == 1163728180
    assert BATCH_7_2[8:12] == h("00 00 00 d0") and BATCH_7_2[17:21] == h("b3 f2 b3 ce")
    assert crc32c(BATCH_7_3[21:]) == 1997975703
    assert BATCH_7_4_TXN[17:21] == h("e5 f0 80 aa")
    assert crc32c(BATCH_7_4_MARKER[21:]) == 2553843224


# --- 7.1 ------------------------------------------------------------------------------------


def test_7_1_offset_commit_key():
    k = co.decode_key(OC_KEY)
    assert (k.record_type, k.group_id, k.topic, k.partition, k.member_id, k.regular_expression) == (
        1,
        "my-group",
        "orders",
        3,
        None,
        None,
    )


@pytest.mark.parametrize(
    "raw,version,data,tid",
    [
        (OC_V3, 3, OC_DICT, None),
        (OC_V4, 4, OC_DICT, None),
        (OC_V4_TID, 4, {**OC_DICT, "topicId": TOPIC_ID}, TOPIC_ID),
    ],
    ids=["v3", "v4", "v4-topicId"],
)
def test_7_1_offset_commit_values(raw, version, data, tid):
    assert co.decode_value(1, raw) == (version, data)
    assert co.decode_offset_commit_value(1, raw) == co.OffsetCommit(version, 1234, 5, "", T, -1, tid)


def test_7_1_encoders():
    assert co.encode_key(co.CoordinatorKey(1, "my-group", "orders", 3)) == OC_KEY
    assert co.encode_value(1, 3, OC_DICT) == OC_V3
    assert co.encode_value(1, 4, OC_DICT) == OC_V4
    assert co.encode_value(1, 4, {**OC_DICT, "topicId": TOPIC_ID}) == OC_V4_TID


def test_7_1_batch():
    assert writer.encode_batch(100, [(100, T, OC_KEY, OC_V3)], partition_leader_epoch=7, base_sequence=0) == BATCH_7_1
    r = SegmentReader(BATCH_7_1, file="x.log", partition=12)
    (b,) = list(r)
    assert (b.position, b.size, b.magic, b.base_offset, b.last_offset, b.partition_leader_epoch, b.crc) == (
        0,
        116,
        2,
        100,
        100,
        7,
        1163728180,
    )
    assert (b.attributes, b.compression, b.timestamp_type, b.is_transactional, b.is_control, b.has_delete_horizon) == (
        0,
        0,
        0,
        False,
        False,
        False,
    )
    assert (b.base_timestamp, b.max_timestamp, b.producer_id, b.producer_epoch, b.base_sequence) == (T, T, -1, -1, 0)
    assert b.records == [(100, T, OC_KEY, OC_V3)]
    assert r.trailing_bytes == 0


# --- 7.2 ------------------------------------------------------------------------------------


def test_7_2_group_metadata_key_and_value():
    k = co.decode_key(GM_KEY)
    assert (k.record_type, k.group_id, k.topic, k.partition, k.member_id) == (2, "my-group", None, None, None)
    assert co.decode_value(2, GM_V3) == (3, GM_V3_DICT)


def test_7_2_consumer_protocol():
    assert co.decode_subscription(SUB_V3) == SUB_V3_DICT
    assert co.decode_assignment(ASG_V3) == ASG_V3_DICT


def test_7_2_encoders():
    assert co.encode_key(co.CoordinatorKey(2, "my-group")) == GM_KEY
    assert co.encode_subscription(3, SUB_V3_DICT) == SUB_V3
    assert co.encode_assignment(3, ASG_V3_DICT) == ASG_V3
    assert co.encode_value(2, 3, GM_V3_DICT) == GM_V3


def test_7_2_batch():
    assert writer.encode_batch(101, [(101, T, GM_KEY, GM_V3)], partition_leader_epoch=7, base_sequence=0) == BATCH_7_2
    (b,) = list(SegmentReader(BATCH_7_2))
    assert (b.size, b.base_offset, b.last_offset, b.crc) == (220, 101, 101, 3019027406)
    assert b.records == [(101, T, GM_KEY, GM_V3)]


# --- 7.3 ------------------------------------------------------------------------------------


def test_7_3_tombstone_batch():
    assert (
        writer.encode_batch(
            102, [(102, T1000, OC_KEY, None), (103, T1000, GM_KEY, None)], partition_leader_epoch=7, base_sequence=0
        )
        == BATCH_7_3
    )
    (b,) = list(SegmentReader(BATCH_7_3))
    assert (b.size, b.base_offset, b.last_offset, b.crc, b.base_timestamp, b.max_timestamp) == (
        111,
        102,
        103,
        1997975703,
        T1000,
        T1000,
    )
    assert b.records == [(102, T1000, OC_KEY, None), (103, T1000, GM_KEY, None)]
    assert co.decode_value(1, None) is None
    assert co.decode_value(2, None) is None


# --- 7.4 ------------------------------------------------------------------------------------


def test_7_4_txn_batch():
    assert (
        writer.encode_batch(
            104,
            [(104, T + 2000, OC_KEY, TXN_V3)],
            partition_leader_epoch=7,
            producer_id=4000,
            producer_epoch=2,
            base_sequence=0,
            transactional=True,
        )
        == BATCH_7_4_TXN
    )
    (b,) = list(SegmentReader(BATCH_7_4_TXN))
    assert (b.base_offset, b.crc, b.attributes, b.is_transactional, b.is_control, b.producer_id, b.producer_epoch) == (
        104,
        0xE5F080AA,
        0x10,
        True,
        False,
        4000,
        2,
    )
    assert co.decode_offset_commit_value(1, b.records[0][3]) == co.OffsetCommit(3, 5000, -1, "", T + 2000, -1, None)


def test_7_4_control_marker_batch():
    assert (
        writer.encode_control_batch(105, 4000, 2, True, T + 3000, coordinator_epoch=11, partition_leader_epoch=7)
        == BATCH_7_4_MARKER
    )
    (b,) = list(SegmentReader(BATCH_7_4_MARKER))
    assert (b.size, b.base_offset, b.last_offset, b.crc, b.attributes, b.is_transactional, b.is_control) == (
        78,
        105,
        105,
        2553843224,
        0x30,
        True,
        True,
    )
    assert (b.producer_id, b.producer_epoch, b.base_sequence, b.base_timestamp) == (4000, 2, -1, T + 3000)
    assert b.records == [(105, T + 3000, h("00 00 00 01"), h("00 00 00 00 00 0b"))]
    assert co.decode_control_key(b.records[0][2]) == (0, 1)
    assert co.decode_end_txn_marker(b.records[0][3]) == (0, 11)


def test_control_key_abort_and_higher_version():
    assert co.decode_control_key(h("00 00 00 00")) == (0, 0)
    # a higher control-key version is read with the v0 layout (spec 1.8)
    assert co.decode_control_key(h("00 01 00 01 ff ff")) == (1, 1)


def test_control_key_and_marker_truncated():
    for n in range(4):
        with pytest.raises(DecodeError):
            co.decode_control_key(h("00 00 00 01")[:n])
    for n in range(6):
        with pytest.raises(DecodeError):
            co.decode_end_txn_marker(h("00 00 00 00 00 0b")[:n])


# --- 7.5 ------------------------------------------------------------------------------------


def test_7_5_legacy_message():
    assert writer.encode_legacy_message(42, 1, OC_KEY, OC_V1_LEGACY, T) == LEGACY_7_5
    (b,) = list(SegmentReader(LEGACY_7_5))
    assert (b.magic, b.size, b.base_offset, b.last_offset, b.crc, b.compression, b.timestamp_type) == (
        1,
        86,
        42,
        42,
        1757938542,
        0,
        0,
    )
    assert b.records == [(42, T, OC_KEY, OC_V1_LEGACY)]
    assert co.decode_offset_commit_value(1, OC_V1_LEGACY) == co.OffsetCommit(1, 1234, -1, "", T, 1700604800000, None)
    assert co.decode_value(1, OC_V1_LEGACY) == (
        1,
        {"offset": 1234, "metadata": "", "commitTimestamp": T, "expireTimestamp": 1700604800000},
    )


# =============================================================================================
# Hand-built vectors: offset commits
# =============================================================================================

OC_V0 = i16(0) + i64(77) + s16("meta") + i64(T)
OC_V1 = i16(1) + i64(77) + s16("m\u00e9") + i64(T) + i64(T + 100)  # 2-byte UTF-8 char
OC_V1_NOEXP = i16(1) + i64(77) + s16("") + i64(T) + i64(-1)
OC_V2 = i16(2) + i64(-1) + s16("x") + i64(T)
OC_V4_META = i16(4) + i64(9) + i32(-1) + cs("abc") + i64(T) + NOTAGS
LEGACY_V0 = i16(0) + i64(500) + s16("old") + i64(T - 1)
LEGACY_KEY = i16(0) + s16("g0") + s16("t") + i32(-7 & 0x7FFFFFFF)


@pytest.mark.parametrize(
    "rtype,raw,version,data,oc",
    [
        (
            1,
            OC_V0,
            0,
            {"offset": 77, "metadata": "meta", "commitTimestamp": T},
            co.OffsetCommit(0, 77, -1, "meta", T, -1, None),
        ),
        (
            1,
            OC_V1,
            1,
            {"offset": 77, "metadata": "m\u00e9", "commitTimestamp": T, "expireTimestamp": T + 100},
            co.OffsetCommit(1, 77, -1, "m\u00e9", T, T + 100, None),
        ),
        (
            1,
            OC_V1_NOEXP,
            1,
            {"offset": 77, "metadata": "", "commitTimestamp": T, "expireTimestamp": -1},
            co.OffsetCommit(1, 77, -1, "", T, -1, None),
        ),
        (
            1,
            OC_V2,
            2,
            {"offset": -1, "metadata": "x", "commitTimestamp": T},
            co.OffsetCommit(2, -1, -1, "x", T, -1, None),
        ),
        (
            1,
            OC_V4_META,
            4,
            {"offset": 9, "leaderEpoch": -1, "metadata": "abc", "commitTimestamp": T},
            co.OffsetCommit(4, 9, -1, "abc", T, -1, None),
        ),
        (
            0,
            LEGACY_V0,
            0,
            {"offset": 500, "metadata": "old", "commitTimestamp": T - 1},
            co.OffsetCommit(0, 500, -1, "old", T - 1, -1, None),
        ),
    ],
    ids=["v0", "v1", "v1-noexpire", "v2", "v4-metadata", "legacy-type0"],
)
def test_offset_commit_value_versions(rtype, raw, version, data, oc):
    assert co.decode_value(rtype, raw) == (version, data)
    assert co.decode_offset_commit_value(rtype, raw) == oc
    assert co.encode_value(rtype, version, data) == raw


def test_legacy_offset_commit_key_type0():
    k = co.decode_key(LEGACY_KEY)
    assert (k.record_type, k.group_id, k.topic, k.partition) == (0, "g0", "t", 2147483641)
    assert co.encode_key(co.CoordinatorKey(0, "g0", "t", 2147483641)) == LEGACY_KEY


def test_offset_commit_v4_zero_topic_id_is_absent():
    raw = i16(4) + i64(1) + i32(0) + cs("") + i64(T) + tags((0, bytes(16)))
    assert co.decode_value(1, raw) == (4, {"offset": 1, "leaderEpoch": 0, "metadata": "", "commitTimestamp": T})
    assert co.decode_offset_commit_value(1, raw).topic_id is None


def test_offset_commit_v4_topic_id_is_url_safe_base64():
    raw = i16(4) + i64(1) + i32(0) + cs("") + i64(T) + tags((0, h("fbffbffe00000000000000000000003f")))
    assert co.decode_value(1, raw)[1]["topicId"] == "-_-__gAAAAAAAAAAAAAAPw"
    assert co.decode_offset_commit_value(1, raw).topic_id == "-_-__gAAAAAAAAAAAAAAPw"


def test_offset_commit_v4_unknown_tag_skipped():
    raw = (
        i16(4)
        + i64(1234)
        + i32(5)
        + cs("")
        + i64(T)
        + tags((0, h("0123456789abcdef0123456789abcdef")), (7, b"\xff\xfe\xfd"), (300, b""))
    )
    assert co.decode_value(1, raw) == (4, {**OC_DICT, "topicId": TOPIC_ID})
    assert co.decode_offset_commit_value(1, raw) == co.OffsetCommit(4, 1234, 5, "", T, -1, TOPIC_ID)


# =============================================================================================
# Hand-built vectors: GroupMetadataValue v0, v1, v2, v3 empty, v4
# =============================================================================================

GM_V0 = (
    i16(0)
    + s16("consumer")
    + i32(5)
    + s16("range")
    + s16("m1")
    + i32(1)
    + s16("m1")
    + s16("c1")
    + s16("/h")
    + i32(10000)
    + b32(b"\x01\x02")
    + b32(b"")
)
GM_V0_DICT = {
    "protocolType": "consumer",
    "generation": 5,
    "protocol": "range",
    "leader": "m1",
    "members": [
        {
            "memberId": "m1",
            "clientId": "c1",
            "clientHost": "/h",
            "sessionTimeout": 10000,
            "subscription": "AQI=",
            "assignment": "",
        }
    ],
}
GM_V1 = (
    i16(1)
    + s16("connect")
    + i32(6)
    + s16("sessioned")
    + s16("w1")
    + i32(1)
    + s16("w1")
    + s16("cc")
    + s16("/1.2.3.4")
    + i32(60000)
    + i32(10000)
    + b32(b"\xfb\xff")
    + b32(b"\x00")
)
GM_V1_DICT = {
    "protocolType": "connect",
    "generation": 6,
    "protocol": "sessioned",
    "leader": "w1",
    "members": [
        {
            "memberId": "w1",
            "clientId": "cc",
            "clientHost": "/1.2.3.4",
            "rebalanceTimeout": 60000,
            "sessionTimeout": 10000,
            "subscription": "+/8=",
            "assignment": "AA==",
        }
    ],
}
GM_V2 = i16(2) + s16("consumer") + i32(0) + s16(None) + s16(None) + i64(T + 5) + i32(0)
GM_V2_DICT = {
    "protocolType": "consumer",
    "generation": 0,
    "protocol": None,
    "leader": None,
    "currentStateTimestamp": T + 5,
    "members": [],
}
GM_V3_EMPTY = i16(3) + s16("") + i32(0) + s16(None) + s16(None) + i64(-1) + i32(0)
GM_V3_EMPTY_DICT = {
    "protocolType": "",
    "generation": 0,
    "protocol": None,
    "leader": None,
    "currentStateTimestamp": -1,
    "members": [],
}
GM_V4_MEMBER = cs("m1") + cs("gi-1") + cs("c1") + cs("/10.0.0.1") + i32(300000) + i32(45000) + cb(SUB_V3) + cb(ASG_V3)
GM_V4 = i16(4) + cs("consumer") + i32(2) + cs("range") + cs("m1") + i64(T) + carr([GM_V4_MEMBER + NOTAGS]) + NOTAGS
GM_V4_UNKNOWN_TAGS = (
    i16(4)
    + cs("consumer")
    + i32(2)
    + cs("range")
    + cs("m1")
    + i64(T)
    + carr([GM_V4_MEMBER + tags((3, b"xyz"))])
    + tags((9, b"\x01\x02"))
)
GM_V4_DICT = {
    "protocolType": "consumer",
    "generation": 2,
    "protocol": "range",
    "leader": "m1",
    "currentStateTimestamp": T,
    "members": [
        {
            "memberId": "m1",
            "groupInstanceId": "gi-1",
            "clientId": "c1",
            "clientHost": "/10.0.0.1",
            "rebalanceTimeout": 300000,
            "sessionTimeout": 45000,
            "subscription": b64(SUB_V3),
            "assignment": b64(ASG_V3),
        }
    ],
}


@pytest.mark.parametrize(
    "raw,version,data",
    [
        (GM_V0, 0, GM_V0_DICT),
        (GM_V1, 1, GM_V1_DICT),
        (GM_V2, 2, GM_V2_DICT),
        (GM_V3_EMPTY, 3, GM_V3_EMPTY_DICT),
        (GM_V4, 4, GM_V4_DICT),
    ],
    ids=["v0", "v1", "v2", "v3-empty", "v4-flexible"],
)
def test_group_metadata_versions(raw, version, data):
    assert co.decode_value(2, raw) == (version, data)
    assert co.encode_value(2, version, data) == raw


def test_group_metadata_v4_unknown_tags_on_value_and_member_skipped():
    assert co.decode_value(2, GM_V4_UNKNOWN_TAGS) == (4, GM_V4_DICT)


# =============================================================================================
# Hand-built vectors: KIP-848, share, streams (all v0, flexible)
# =============================================================================================

U1 = h("0123456789abcdef0123456789abcdef")
U1_TEXT = TOPIC_ID
U2 = h("fbffbffe00000000000000000000003f")
U2_TEXT = "-_-__gAAAAAAAAAAAAAAPw"

CLASSIC_META = b"\x00\x03" + b"\x00" * 10

V3_PLAIN = i16(0) + i32(7) + NOTAGS
V3_HASH = i16(0) + i32(7) + tags((0, i64(0x0102030405060708)))
V3_HASH_ZERO = i16(0) + i32(7) + tags((0, i64(0)))
V5_BASE = (
    i16(0)
    + cs(None)
    + cs("r1")
    + cs("c1")
    + cs("/h")
    + carr([cs("orders"), cs("bar")])
    + cs(None)
    + i32(300000)
    + cs("uniform")
)
V5_PLAIN = V5_BASE + NOTAGS
V5_CLASSIC = V5_BASE + tags((0, b"\x01" + i32(45000) + carr([cs("range") + cb(CLASSIC_META) + NOTAGS]) + NOTAGS))
V5_DICT = {
    "instanceId": None,
    "rackId": "r1",
    "clientId": "c1",
    "clientHost": "/h",
    "subscribedTopicNames": ["orders", "bar"],
    "subscribedTopicRegex": None,
    "rebalanceTimeoutMs": 300000,
    "serverAssignor": "uniform",
}
V5_CLASSIC_DICT = {
    **V5_DICT,
    "classicMemberMetadata": {
        "sessionTimeoutMs": 45000,
        "supportedProtocols": [{"name": "range", "metadata": b64(CLASSIC_META)}],
    },
}
V6_PLAIN = i16(0) + i32(3) + NOTAGS
V6_TS = i16(0) + i32(3) + tags((0, i64(T)))
V7 = i16(0) + carr([U1 + carr([i32(0), i32(1)]) + NOTAGS, U2 + carr([]) + NOTAGS]) + NOTAGS
V7_DICT = {"topicPartitions": [{"topicId": U1_TEXT, "partitions": [0, 1]}, {"topicId": U2_TEXT, "partitions": []}]}
V8 = (
    i16(0)
    + i32(10)
    + i32(9)
    + i8(2)
    + carr([U1 + carr([i32(0), i32(2)]) + tags((0, carr([i32(10), i32(9)])))])
    + carr([U2 + carr([i32(5)]) + NOTAGS])
    + NOTAGS
)
V8_DICT = {
    "memberEpoch": 10,
    "previousMemberEpoch": 9,
    "state": 2,
    "assignedPartitions": [{"topicId": U1_TEXT, "partitions": [0, 2], "assignmentEpochs": [10, 9]}],
    "partitionsPendingRevocation": [{"topicId": U2_TEXT, "partitions": [5]}],
}
V8_STABLE = i16(0) + i32(1) + i32(0) + i8(0) + carr([]) + carr([]) + NOTAGS
V8_STABLE_DICT = {
    "memberEpoch": 1,
    "previousMemberEpoch": 0,
    "state": 0,
    "assignedPartitions": [],
    "partitionsPendingRevocation": [],
}
V16 = i16(0) + carr([cs("foo-1"), cs("foo-2")]) + i64(42) + i64(T) + NOTAGS
V16_DICT = {"topics": ["foo-1", "foo-2"], "version": 42, "timestamp": T}

V10 = i16(0) + cs(None) + cs("c") + cs("/h") + carr([cs("orders")]) + NOTAGS
V10_DICT = {"rackId": None, "clientId": "c", "clientHost": "/h", "subscribedTopicNames": ["orders"]}
V11 = i16(0) + i32(4) + i64(99) + NOTAGS
V11_DICT = {"epoch": 4, "metadataHash": 99}
V14 = i16(0) + i32(2) + i32(1) + i8(0) + carr([U1 + carr([i32(3)]) + NOTAGS]) + NOTAGS
V14_DICT = {
    "memberEpoch": 2,
    "previousMemberEpoch": 1,
    "state": 0,
    "assignedPartitions": [{"topicId": U1_TEXT, "partitions": [3]}],
}

V17_PLAIN = i16(0) + i32(2) + i64(5) + NOTAGS
V17_TAGGED = (
    i16(0)
    + i32(2)
    + i64(5)
    + tags((0, i32(2)), (1, carr([cs("num.standby.replicas") + cs("1") + NOTAGS])), (2, i32(3)), (3, i32(1)))
)
V17_TAGGED_DICT = {
    "epoch": 2,
    "metadataHash": 5,
    "validatedTopologyEpoch": 2,
    "lastAssignmentConfigs": [{"key": "num.standby.replicas", "value": "1"}],
    "storedDescriptionTopologyEpoch": 3,
    "failedDescriptionTopologyEpoch": 1,
}
V17_DEFAULT_TAG = i16(0) + i32(2) + i64(5) + tags((0, i32(-1)))
V19_BASE = i16(0) + cs(None) + cs(None) + cs("c") + cs("/h") + i32(1000) + i32(1) + cs("p1")
V19 = V19_BASE + b"\x01" + cs("localhost") + u16(65535) + NOTAGS + carr([cs("k") + cs("v") + NOTAGS]) + NOTAGS
V19_DICT = {
    "instanceId": None,
    "rackId": None,
    "clientId": "c",
    "clientHost": "/h",
    "rebalanceTimeoutMs": 1000,
    "topologyEpoch": 1,
    "processId": "p1",
    "userEndpoint": {"host": "localhost", "port": 65535},
    "clientTags": [{"key": "k", "value": "v"}],
}
V19_NOEP = V19_BASE + b"\xff" + carr([]) + NOTAGS
V19_NOEP_DICT = {**V19_DICT, "userEndpoint": None, "clientTags": []}
V22 = (
    i16(0)
    + i32(3)
    + i32(2)
    + i8(1)
    + carr([cs("0") + carr([i32(0), i32(1)]) + NOTAGS])
    + carr([cs("1") + carr([i32(4)]) + tags((0, carr([i32(3)])))])
    + carr([])
    + carr([])
    + carr([])
    + carr([])
    + NOTAGS
)
V22_DICT = {
    "memberEpoch": 3,
    "previousMemberEpoch": 2,
    "state": 1,
    "activeTasks": [{"subtopologyId": "0", "partitions": [0, 1]}],
    "standbyTasks": [{"subtopologyId": "1", "partitions": [4], "assignmentEpochs": [3]}],
    "warmupTasks": [],
    "activeTasksPendingRevocation": [],
    "standbyTasksPendingRevocation": [],
    "warmupTasksPendingRevocation": [],
}
V23_TOPIC_INFO = (
    cs("app-store-changelog") + i32(3) + i16(-1) + carr([cs("cleanup.policy") + cs("compact") + NOTAGS]) + NOTAGS
)
V23 = (
    i16(0)
    + i32(1)
    + carr(
        [
            cs("0")
            + carr([cs("in")])
            + carr([])
            + carr([V23_TOPIC_INFO])
            + carr([cs("rep")])
            + carr([])
            + carr([carr([i16(0)]) + carr([]) + carr([]) + NOTAGS])
            + NOTAGS
        ]
    )
    + NOTAGS
)
V23_DICT = {
    "epoch": 1,
    "subtopologies": [
        {
            "subtopologyId": "0",
            "sourceTopics": ["in"],
            "sourceTopicRegex": [],
            "stateChangelogTopics": [
                {
                    "name": "app-store-changelog",
                    "partitions": 3,
                    "replicationFactor": -1,
                    "topicConfigs": [{"key": "cleanup.policy", "value": "compact"}],
                }
            ],
            "repartitionSinkTopics": ["rep"],
            "repartitionSourceTopics": [],
            "copartitionGroups": [{"sourceTopics": [0], "sourceTopicRegex": [], "repartitionSourceTopics": []}],
        }
    ],
}

MODERN_VECTORS = [
    ("3-plain", 3, V3_PLAIN, {"epoch": 7}),
    ("3-metadataHash", 3, V3_HASH, {"epoch": 7, "metadataHash": 0x0102030405060708}),
    ("5-plain", 5, V5_PLAIN, V5_DICT),
    ("5-classic", 5, V5_CLASSIC, V5_CLASSIC_DICT),
    ("6-plain", 6, V6_PLAIN, {"assignmentEpoch": 3}),
    ("6-timestamp", 6, V6_TS, {"assignmentEpoch": 3, "assignmentTimestamp": T}),
    ("7", 7, V7, V7_DICT),
    ("8", 8, V8, V8_DICT),
    ("8-stable", 8, V8_STABLE, V8_STABLE_DICT),
    ("16", 16, V16, V16_DICT),
    ("10", 10, V10, V10_DICT),
    ("11", 11, V11, V11_DICT),
    ("14", 14, V14, V14_DICT),
    ("17-plain", 17, V17_PLAIN, {"epoch": 2, "metadataHash": 5}),
    ("17-tagged", 17, V17_TAGGED, V17_TAGGED_DICT),
    ("19", 19, V19, V19_DICT),
    ("19-no-endpoint", 19, V19_NOEP, V19_NOEP_DICT),
    ("22", 22, V22, V22_DICT),
    ("23", 23, V23, V23_DICT),
]


@pytest.mark.parametrize("rtype,raw,data", [v[1:] for v in MODERN_VECTORS], ids=[v[0] for v in MODERN_VECTORS])
def test_modern_values(rtype, raw, data):
    assert co.decode_value(rtype, raw) == (0, data)
    assert co.encode_value(rtype, 0, data) == raw


@pytest.mark.parametrize(
    "rtype,raw,data",
    [
        (3, V3_HASH_ZERO, {"epoch": 7}),  # tagged field equal to its default
        (17, V17_DEFAULT_TAG, {"epoch": 2, "metadataHash": 5}),  # ValidatedTopologyEpoch -1 = default
    ],
    ids=["3-hash-0", "17-validated--1"],
)
def test_tagged_field_equal_to_default_is_omitted(rtype, raw, data):
    assert co.decode_value(rtype, raw) == (0, data)


def test_unknown_tags_skipped_in_nested_structs():
    raw = (
        i16(0)
        + i32(10)
        + i32(9)
        + i8(2)
        + carr([U1 + carr([i32(0), i32(2)]) + tags((0, carr([i32(10), i32(9)])), (5, b"zzzz"))])
        + carr([U2 + carr([i32(5)]) + tags((1, b""))])
        + tags((2, b"\x00\x01"), (40, b"abc"))
    )
    assert co.decode_value(8, raw) == (0, V8_DICT)


def test_share_group_metadata_4_0_layout_underflows():
    # spec 8.14: a 4.0-era type-11 value (Epoch only) underflows under the 4.1+ schema
    with pytest.raises(DecodeError):
        co.decode_value(11, i16(0) + i32(4) + NOTAGS)


# --- keys of the other families ---------------------------------------------------------------

MODERN_KEYS = [
    (i16(3) + s16("cg"), (3, "cg", None, None, None, None)),
    (i16(5) + s16("cg") + s16("member-\u00fc"), (5, "cg", None, None, "member-\u00fc", None)),
    (i16(8) + s16("cg") + s16("m"), (8, "cg", None, None, "m", None)),
    (i16(10) + s16("sg") + s16("m"), (10, "sg", None, None, "m", None)),
    (i16(11) + s16("sg"), (11, "sg", None, None, None, None)),
    (i16(16) + s16("cg") + s16("foo.*"), (16, "cg", None, None, None, "foo.*")),
    (i16(17) + s16("st"), (17, "st", None, None, None, None)),
    (i16(22) + s16("st") + s16("m"), (22, "st", None, None, "m", None)),
    (i16(23) + s16("st"), (23, "st", None, None, None, None)),
]


def test_modern_keys():
    for raw, expected in MODERN_KEYS:
        k = co.decode_key(raw)
        assert (k.record_type, k.group_id, k.topic, k.partition, k.member_id, k.regular_expression) == expected
        assert co.encode_key(k) == raw


# =============================================================================================
# Errors
# =============================================================================================


def test_unknown_record_types():
    for rtype in (18, 24, 99, 0x7FFF, -1):
        with pytest.raises(UnknownRecordTypeError) as ei:
            co.decode_key(i16(rtype) + s16("g"))
        assert ei.value.record_type == rtype
        assert isinstance(ei.value, DecodeError)
        with pytest.raises(UnknownRecordTypeError):
            co.decode_value(rtype, i16(0) + i32(1) + NOTAGS)


def test_type_9_is_unknown_in_current_kafka():
    # spec 2.3 / 8.14: type 9 existed only in 3.9/4.0; a 4.1+ broker skips it as unknown
    with pytest.raises(UnknownRecordTypeError):
        co.decode_key(i16(9) + s16("sg"))


@pytest.mark.parametrize(
    "rtype,raw",
    [
        (1, i16(5) + OC_V3[2:]),
        (1, i16(-1) + OC_V3[2:]),
        (2, i16(5) + GM_V3[2:]),
        (2, i16(-1) + GM_V3[2:]),
        (3, i16(1) + V3_PLAIN[2:]),
        (17, i16(1) + V17_PLAIN[2:]),
        (0, i16(5) + LEGACY_V0[2:]),
    ],
    ids=["oc-v5", "oc-v-1", "gm-v5", "gm-v-1", "cg3-v1", "streams17-v1", "legacy0-v5"],
)
def test_value_version_out_of_range(rtype, raw):
    with pytest.raises(UnknownRecordVersionError) as ei:
        co.decode_value(rtype, raw)
    assert (ei.value.record_type, ei.value.version) == (rtype, struct.unpack(">h", raw[:2])[0])
    if rtype in (0, 1):
        with pytest.raises(UnknownRecordVersionError):
            co.decode_offset_commit_value(rtype, raw)


def test_type0_key_only_accepts_legacy_value_v0():
    # spec 2.3: "In 4.1+ a type-0 key only accepts LegacyOffsetCommitValue v0" (the broker fails the
    # load, DumpLogSegments prints "Found an unknown record version 1 for 0 type")
    with pytest.raises(UnknownRecordVersionError):
        co.decode_value(0, OC_V1_LEGACY)


# --- trailing bytes are ignored (spec 2.1, 8 item 15) -------------------------------------------

TRAILING_CASES = [
    (1, OC_V3, (3, OC_DICT)),
    (1, OC_V4_TID, (4, {**OC_DICT, "topicId": TOPIC_ID})),
    (1, OC_V1_LEGACY, (1, {"offset": 1234, "metadata": "", "commitTimestamp": T, "expireTimestamp": 1700604800000})),
    (2, GM_V3, (3, GM_V3_DICT)),
    (2, GM_V4, (4, GM_V4_DICT)),
    (3, V3_HASH, (0, {"epoch": 7, "metadataHash": 0x0102030405060708})),
    (19, V19, (0, V19_DICT)),
]


def test_trailing_bytes_after_value_ignored():
    for rtype, raw, expected in TRAILING_CASES:
        assert co.decode_value(rtype, raw + h("de ad be ef 00")) == expected, (rtype, raw.hex())


def test_trailing_bytes_after_key_and_fast_path_ignored():
    k = co.decode_key(OC_KEY + h("00 01 02"))
    assert (k.record_type, k.group_id, k.topic, k.partition) == (1, "my-group", "orders", 3)
    assert co.decode_key(GM_KEY + h("ff")).group_id == "my-group"
    assert co.decode_key(i16(16) + s16("cg") + s16("re") + h("00 00")).regular_expression == "re"
    assert co.decode_offset_commit_value(1, OC_V3 + h("01 02")) == co.OffsetCommit(3, 1234, 5, "", T, -1, None)


# --- truncation at every byte position raises DecodeError ---------------------------------------

KEYS = {
    "oc": OC_KEY,
    "gm": GM_KEY,
    "member5": i16(5) + s16("cg") + s16("m1"),
    "regex16": i16(16) + s16("cg") + s16("foo.*"),
    "streams19": i16(19) + s16("st") + s16("m"),
}


def _not_decode_error(fn, *args):
    """None if fn(*args) raised DecodeError, else a description of what happened instead."""
    try:
        result = fn(*args)
    except DecodeError:
        return None
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return f"returned {result!r}"


def test_key_truncated_everywhere():
    failures = [
        (name, n, why)
        for name, raw in KEYS.items()
        for n in range(len(raw))
        if (why := _not_decode_error(co.decode_key, raw[:n]))
    ]
    assert failures == []


VALUES = {
    "oc-v0": (1, OC_V0),
    "oc-v1": (1, OC_V1),
    "oc-v3": (1, OC_V3),
    "oc-v4": (1, OC_V4),
    "oc-v4-tid": (1, OC_V4_TID),
    "legacy0": (0, LEGACY_V0),
    "gm-v0": (2, GM_V0),
    "gm-v3": (2, GM_V3),
    "gm-v4": (2, GM_V4),
    "cg3": (3, V3_HASH),
    "cg5-classic": (5, V5_CLASSIC),
    "cg7": (7, V7),
    "cg8": (8, V8),
    "cg16": (16, V16),
    "share14": (14, V14),
    "streams17": (17, V17_TAGGED),
    "streams19": (19, V19),
    "streams22": (22, V22),
    "streams23": (23, V23),
}


def test_value_truncated_everywhere():
    failures = []
    for name, (rtype, raw) in VALUES.items():
        for n in range(len(raw)):
            fns = [co.decode_value] + ([co.decode_offset_commit_value] if rtype in (0, 1) else [])
            for fn in fns:
                why = _not_decode_error(fn, rtype, raw[:n])
                if why:
                    failures.append((name, fn.__name__, n, why))
    assert failures == []


def test_consumer_protocol_truncated_everywhere():
    failures = [
        (fn.__name__, n, why)
        for fn, raw in ((co.decode_subscription, SUB_V3), (co.decode_assignment, ASG_V3))
        for n in range(len(raw))
        if (why := _not_decode_error(fn, raw[:n]))
    ]
    assert failures == []


MALFORMED = [
    # (description, function, args)
    ("key group not UTF-8 (fast path)", co.decode_key, (i16(1) + i16(2) + b"\xff\xfe" + s16("t") + i32(0),)),
    ("key group not UTF-8 (generic)", co.decode_key, (i16(3) + i16(1) + b"\xc3",)),
    ("key string length -2", co.decode_key, (i16(1) + i16(-2) + s16("t") + i32(0),)),
    ("key group null", co.decode_key, (i16(2) + i16(-1),)),
    ("v3 metadata null", co.decode_value, (1, i16(3) + i64(1) + i32(0) + i16(-1) + i64(T))),
    ("v3 metadata null (fast path)", co.decode_offset_commit_value, (1, i16(3) + i64(1) + i32(0) + i16(-1) + i64(T))),
    ("v3 metadata not UTF-8", co.decode_offset_commit_value, (1, i16(3) + i64(1) + i32(0) + i16(1) + b"\x80" + i64(T))),
    ("v4 metadata compact null", co.decode_value, (1, i16(4) + i64(1) + i32(0) + b"\x00" + i64(T) + NOTAGS)),
    (
        "v4 metadata compact null (fast path)",
        co.decode_offset_commit_value,
        (1, i16(4) + i64(1) + i32(0) + b"\x00" + i64(T) + NOTAGS),
    ),
    (
        "v4 topicId of 15 bytes",
        co.decode_offset_commit_value,
        (1, i16(4) + i64(1) + i32(0) + cs("") + i64(T) + tags((0, bytes(15)))),
    ),
    (
        "v4 overlong varint",
        co.decode_value,
        (1, i16(4) + i64(1) + i32(0) + h("80 80 80 80 80 80 01") + i64(T) + NOTAGS),
    ),
    # spec 1.6/2.2: a varint is at most 5 bytes; this 6-byte one would otherwise read as 1 (= "")
    ("v4 6-byte varint", co.decode_value, (1, i16(4) + i64(1) + i32(0) + h("81 80 80 80 80 00") + i64(T) + NOTAGS)),
    (
        "v4 6-byte varint (fast path)",
        co.decode_offset_commit_value,
        (1, i16(4) + i64(1) + i32(0) + h("81 80 80 80 80 00") + i64(T) + NOTAGS),
    ),
    (
        "gm protocolType null",
        co.decode_value,
        (2, i16(3) + s16(None) + i32(0) + s16(None) + s16(None) + i64(-1) + i32(0)),
    ),
    (
        "gm members count huge",
        co.decode_value,
        (2, i16(3) + s16("") + i32(0) + s16(None) + s16(None) + i64(-1) + i32(0x7FFFFFFF) + bytes(8)),
    ),
    ("gm members null", co.decode_value, (2, i16(3) + s16("") + i32(0) + s16(None) + s16(None) + i64(-1) + i32(-1))),
    (
        "cg5 clientId null",
        co.decode_value,
        (5, i16(0) + cs(None) + cs(None) + cs(None) + cs("/h") + carr([]) + cs(None) + i32(-1) + cs(None) + NOTAGS),
    ),
    ("cg7 compact count huge", co.decode_value, (7, i16(0) + uv(2**31) + NOTAGS)),
    ("tag size past end", co.decode_value, (3, i16(0) + i32(1) + h("01 00 7f") + i64(1))),
    ("subscription topics null", co.decode_subscription, (i16(0) + i32(-1) + b32(None),)),
    ("subscription topics huge", co.decode_subscription, (i16(0) + i32(0x7FFFFFFF) + s16("a"),)),
]


def test_malformed_inputs_raise_decode_error():
    failures = [(what, why) for what, fn, args in MALFORMED if (why := _not_decode_error(fn, *args))]
    assert failures == []


# =============================================================================================
# Consumer protocol (spec 3)
# =============================================================================================

SUB_BODY_V0 = arr32([s16("a"), s16("b")]) + b32(b"\xfb\xff")
SUB_OWNED = arr32([s16("a") + arr32([i32(0), i32(1)])])


@pytest.mark.parametrize(
    "raw,data",
    [
        (i16(0) + SUB_BODY_V0, {"topics": ["a", "b"], "userData": "+/8="}),
        (
            i16(1) + SUB_BODY_V0 + SUB_OWNED,
            {"topics": ["a", "b"], "userData": "+/8=", "ownedPartitions": [{"topic": "a", "partitions": [0, 1]}]},
        ),
        (
            i16(2) + SUB_BODY_V0 + SUB_OWNED + i32(7),
            {
                "topics": ["a", "b"],
                "userData": "+/8=",
                "ownedPartitions": [{"topic": "a", "partitions": [0, 1]}],
                "generationId": 7,
            },
        ),
        (
            i16(3) + SUB_BODY_V0 + SUB_OWNED + i32(7) + s16("rack-a"),
            {
                "topics": ["a", "b"],
                "userData": "+/8=",
                "ownedPartitions": [{"topic": "a", "partitions": [0, 1]}],
                "generationId": 7,
                "rackId": "rack-a",
            },
        ),
    ],
    ids=["v0", "v1", "v2", "v3"],
)
def test_subscription_versions(raw, data):
    assert co.decode_subscription(raw) == data
    assert co.encode_subscription(struct.unpack(">h", raw[:2])[0], data) == raw


def test_subscription_higher_version_read_with_v3_layout():
    raw = i16(4) + SUB_V3[2:] + h("00 00 00 07") + b"extra"
    assert co.decode_subscription(raw) == SUB_V3_DICT


def test_assignment_higher_version_read_with_v3_layout():
    raw = i16(9) + ASG_V3[2:] + h("01 02 03")
    assert co.decode_assignment(raw) == ASG_V3_DICT


def test_assignment_v0_with_user_data():
    raw = i16(0) + arr32([s16("t") + arr32([i32(4)])]) + b32(b"\x00\x01")
    assert co.decode_assignment(raw) == {"assignedPartitions": [{"topic": "t", "partitions": [4]}], "userData": "AAE="}


def test_consumer_protocol_negative_version():
    for fn, body in ((co.decode_subscription, SUB_V3[2:]), (co.decode_assignment, ASG_V3[2:])):
        for version in (-1, -32768):
            with pytest.raises(DecodeError):
                fn(i16(version) + body)
