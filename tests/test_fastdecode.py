"""lib.decode.fast: the numba fast path of SegmentDecoder.

The pure-Python SegmentDecoder (checked against spec vectors and Kafka's own dump tool
elsewhere) is the reference: on every log here both paths must yield equal Arrow batches
(schema, values, order, chunk boundaries), the same counters, and the same error (class,
message, file, partition, offset, byte position) or quarantine rows. One test also checks
the fast path's rows against values worked out by hand."""

from __future__ import annotations

import datetime as dt
import glob
import json
import os
import random
import struct
import zlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lib.codec.generic import RAW_TAGGED_FIELDS
from lib.codec.primitives import ZERO_UUID, encode_uvarint, uuid_bytes, uuid_text
from lib.codec.serde import (
    CoordinatorKey,
    decode_value,
    encode_assignment,
    encode_key,
    encode_subscription,
    encode_value,
)
from lib.codec.writer import encode_batch, encode_control_batch, encode_legacy_message, encode_legacy_wrapper
from lib.decode import SegmentDecoder
from lib.decode.rows import PLAIN_SCHEMA
from lib.testdata.generate import generate_log
from lib.testdata.logbuilder import (
    PartitionLogBuilder,
    consumer_member,
    group_key,
    group_metadata_value,
    offset_commit_key,
    offset_commit_value,
)
from schemas.dsl import Field
from schemas.records import RECORD_TYPES

fastdecode = pytest.importorskip("lib.decode.fast")
jk = pytest.importorskip("lib.decode.json_kernel")
kernels = pytest.importorskip("lib.testdata.kernels")

PART = 7
T = 1_700_000_000_000
TOPIC_ID = "ASNFZ4mrze8BI0VniavN7w"  # 0123456789abcdef0123456789abcdef


def _run(fast: bool, path: str, quarantine: bool = False, **kw):
    extra = {"quarantine": []} if quarantine else {}
    dec = SegmentDecoder(path, PART, fast=fast, **extra, **kw)
    batches, err = [], None
    try:
        for b in dec:
            batches.append(b)
    except Exception as e:  # compared below, class included
        err = e
    return dec, batches, err


def assert_same(path: str, quarantine: bool = False, python_batches: int | None = 0, **kw) -> list[pa.RecordBatch]:
    """Both paths over one segment (or `data`): equal batches, counters, errors, quarantine.
    python_batches: how many of the segment's batches the fast path must hand to the Python
    decoder (the rest it must decode with its kernels); None: the whole file (odd framing) or
    any number (an error stops the read)."""
    pdec, pb, perr = _run(False, path, quarantine, **kw)
    fdec, fb, ferr = _run(True, path, quarantine, **kw)
    if python_batches is not None and perr is None:  # (an error stops the count; it is the answer)
        assert not fdec.python_whole_file
        assert fdec.python_batches == python_batches, (fdec.compiled_batches, fdec.python_batches)
    assert [b.num_rows for b in fb] == [b.num_rows for b in pb]
    for a, b in zip(pb, fb):
        b.validate(full=True)
        assert b.schema == a.schema
        for name in a.schema.names:
            assert b.column(name).equals(a.column(name)), name
    if perr is not None:
        assert type(ferr) is type(perr), (ferr, perr)
        assert str(ferr) == str(perr)
        for attr in ("message", "file", "partition", "offset", "position"):
            assert getattr(ferr, attr, None) == getattr(perr, attr, None), attr
    else:
        assert ferr is None, ferr
        assert (fdec.records, fdec.next_offset, fdec.trailing_bytes) == (
            pdec.records,
            pdec.next_offset,
            pdec.trailing_bytes,
        )
    if quarantine:
        assert fdec.quarantine == pdec.quarantine
    return pb


def write_segment(tmp_path, data: bytes, name: str = "00000000000000000000.log") -> str:
    path = os.path.join(str(tmp_path), name)
    with open(path, "wb") as f:
        f.write(data)
    return path


def rows_of(batches) -> list[dict]:
    return pa.Table.from_batches(batches).to_pylist() if batches else []


# --- a hand-built log with every kind of record -------------------------------------------------


UNKNOWN_TYPE_AT: dict[int, int] = {}  # the offset of rich_log's unknown-type record, by its first offset


def rich_log(b: PartitionLogBuilder) -> PartitionLogBuilder:
    g = "group-a"
    b.commit(g, "t", 0, 10, T, version=0)
    b.commit(g, "t", 1, 11, T + 1, version=1, expire_ts=T + 86_400_000)
    b.commit(g, "t", 2, 12, T + 2, version=1)  # expire -1 -> null
    b.commit(g, "t", 3, 13, T + 3, version=2, metadata="meta")
    b.commit(g, "t", 4, 14, T + 4, version=3, leader_epoch=-1)
    b.commit(g, "t", 5, 15, T + 5, version=3, leader_epoch=9, metadata="x" * 5000)
    b.commit(g, "t", 6, 16, T + 6, version=4, topic_id=TOPIC_ID, metadata="ü€😀")
    b.commit(g, "t", 7, 17, T + 7, version=4)
    b.commit(g, "t", 8, 18, -5, version=3)  # a negative timestamp is an instant before 1970
    b.commit("grüppe-😀", "tøpic", 0, 5, T, record_type=0, version="legacy")
    b.offset_tombstone(g, "t", 0, T + 8)
    b.offset_tombstone(g, "t", 1, T + 9, record_type=0)
    b.group(g, T + 10, generation=3, members=[consumer_member("m1", ["t"], {"t": [0, 1]})], state_ts=T)
    b.commit(g, "t", 9, 19, T + 11, producer_id=42)
    b.marker(42, True, T + 12, coordinator_epoch=3)
    b.commit(g, "t", 9, 20, T + 13, producer_id=43)
    b.marker(43, False, T + 14)
    b.group_tombstone("gone", T + 15)
    b.record(3, {"group_id": "g848"}, {"epoch": 5}, T + 16)
    key = struct.pack(">h", 99) + struct.pack(">h", 1) + b"u"
    b.batch([(key, b"\x00\x00whatever", T + 17)])  # unknown record type -> Python
    UNKNOWN_TYPE_AT[b.segments[0][0]] = b.next_offset - 1
    b.batch(
        [
            (offset_commit_key(g, "t", p), offset_commit_value(100 + p, T, version=3, leader_epoch=2), T + p)
            for p in range(4)
        ],
        gaps=[0, 2, 5, 6],
    )  # compacted batch
    b.batch([], gaps=[2])  # empty batch
    for codec in (1, 2, 3, 4):
        b.batch(
            [
                (offset_commit_key(f"c{codec}", "t", p), offset_commit_value(p, T, version=v), T + p)
                for p, v in enumerate((0, 1, 3, 4, 3))
            ],
            compression=codec,
        )
    b.batch(
        [
            (offset_commit_key(g, "t", 1), None, T),
            (group_key(g), None, T),
            (offset_commit_key(g, "t", 2), offset_commit_value(1, T), T),
        ]
    )  # mixed batch
    b.batch(
        [(offset_commit_key(g, "t", p), offset_commit_value(p, T, version=4, topic_id=TOPIC_ID), T) for p in range(3)],
        producer_id=44,
        producer_epoch=2,
        transactional=True,
        compression=4,
    )
    b.marker(44, True, T, producer_epoch=2)
    return b


@pytest.fixture(scope="module")
def rich(tmp_path_factory):
    """rich_log's batches (the kernels read all but the one of an unknown record type:
    RICH_PYTHON), then a log-append-time batch."""
    d = tmp_path_factory.mktemp("rich")
    b = rich_log(PartitionLogBuilder(PART, start_offset=1000))
    # a log-append-time batch
    base = b.next_offset
    b.raw(
        encode_batch(
            base,
            [
                (base, T, offset_commit_key("lat", "t", 0), offset_commit_value(1, T)),
                (base + 1, T + 5, offset_commit_key("lat", "t", 1), offset_commit_value(2, T)),
            ],
            log_append_time=True,
            max_timestamp=T + 99,
        ),
        2,
    )
    folder = b.write(str(d))
    return glob.glob(os.path.join(folder, "*.log"))[0]


RICH_PYTHON = 1  # the rich log's batches the Python decoder reads: the unknown record type's


@pytest.mark.parametrize("zeros", [17, 4096, 70_000])
def test_preallocated_zeros_after_the_rich_log(rich, zeros):
    data = open(rich, "rb").read()
    assert_same(
        "pad.log", python_batches=RICH_PYTHON, data=data + bytes(zeros), source_name="pad.log", start_offset=1003
    )
    dec, batches, err = _run(True, "pad.log", data=data + bytes(zeros), source_name="pad.log")
    assert err is None and dec.trailing_bytes == zeros
    same_log = [{**r, "segment_file": "pad.log"} for r in rows_of(_run(True, rich)[1])]
    assert rows_of(batches) == same_log


def test_zeros_then_data_after_the_rich_log_same_error(rich):
    data = open(rich, "rb").read()
    assert_same("pad.log", data=data + bytes(100) + data, source_name="pad.log")
    _, _, err = _run(True, "pad.log", data=data + bytes(100) + data, source_name="pad.log")
    assert "zero bytes, then data" in str(err) and err.position == len(data)


@pytest.mark.parametrize("chunk_rows", [1, 2, 3, 5, 7, 16, 65536])
def test_rich_log_every_chunk_size(rich, chunk_rows):
    assert_same(rich, python_batches=RICH_PYTHON, chunk_rows=chunk_rows)


def test_rich_log_every_start_offset(rich):
    for start in range(995, 1075, 3):
        assert_same(
            rich, python_batches=RICH_PYTHON if start <= UNKNOWN_TYPE_AT[1000] else 0, start_offset=start, chunk_rows=4
        )
    assert_same(rich, start_offset=10**9)


def test_rich_log_without_crc_check_and_from_bytes(rich):
    with open(rich, "rb") as f:
        data = f.read()
    assert_same(rich, python_batches=RICH_PYTHON, verify_crc=False)
    for buf in (data, bytearray(data), memoryview(data)):
        assert_same("where", python_batches=RICH_PYTHON, data=buf, source_name="fetch:1000", chunk_rows=6)


def test_rich_log_rows_hand_checked(rich):
    """The fast path alone, against values worked out from the fixture."""
    rows = rows_of(list(SegmentDecoder(rich, PART, fast=True)))
    by_offset = {r["log_offset"]: r for r in rows}
    assert min(by_offset) == 1000 and max(by_offset) == 1058 and len(rows) == 53
    r = by_offset[1000]
    assert (
        r["offsets_partition"],
        r["batch_base_offset"],
        r["magic"],
        r["compression"],
        r["record_type"],
        r["record_type_name"],
        r["key_version"],
        r["value_version"],
        r["group_id"],
        r["topic"],
        r["partition"],
        r["committed_offset"],
        r["leader_epoch"],
        r["metadata"],
        r["expire_timestamp"],
        r["topic_id"],
        r["decode_status"],
        r["is_tombstone"],
        r["segment_file"],
    ) == (
        PART,
        1000,
        2,
        "none",
        1,
        "OffsetCommit",
        0,
        0,
        "group-a",
        "t",
        0,
        10,
        None,
        "",
        None,
        None,
        "ok",
        False,
        "00000000000000001000.log",
    )
    assert r["log_timestamp"].timestamp() * 1000 == T == r["commit_timestamp"].timestamp() * 1000
    assert by_offset[1001]["expire_timestamp"].timestamp() * 1000 == T + 86_400_000
    assert by_offset[1002]["expire_timestamp"] is None
    assert by_offset[1004]["leader_epoch"] is None and by_offset[1005]["leader_epoch"] == 9
    assert by_offset[1005]["metadata"] == "x" * 5000
    assert (by_offset[1006]["topic_id"], by_offset[1006]["metadata"]) == (TOPIC_ID, "ü€😀")
    assert by_offset[1007]["topic_id"] is None
    before_1970 = dt.datetime(1969, 12, 31, 23, 59, 59, 995000, tzinfo=dt.UTC)
    assert by_offset[1008]["log_timestamp"] == before_1970 == by_offset[1008]["commit_timestamp"]
    r = by_offset[1009]
    assert (r["record_type"], r["record_type_name"], r["group_id"], r["topic"]) == (
        0,
        "LegacyOffsetCommit",
        "grüppe-😀",
        "tøpic",
    )
    r = by_offset[1010]
    assert (r["is_tombstone"], r["value_version"], r["committed_offset"], r["raw_value"]) == (True, None, None, None)
    assert r["raw_key"] == offset_commit_key("group-a", "t", 0)
    r = by_offset[1014]
    assert (
        r["is_control"],
        r["is_transactional"],
        r["control_type"],
        r["coordinator_epoch"],
        r["producer_id"],
        r["record_type"],
        r["key_version"],
        r["value_version"],
        r["group_id"],
    ) == (True, True, "COMMIT", 3, 42, None, 0, 0, None)
    assert by_offset[1016]["control_type"] == "ABORT"
    assert by_offset[1019]["decode_status"] == "unknown_type"
    assert [o for o in by_offset if 1020 <= o < 1030] == [1020, 1022, 1025, 1026]
    gz = [r for r in rows if r["group_id"] == "c1"]
    assert [(r["compression"], r["value_version"], r["committed_offset"]) for r in gz] == [
        ("gzip", 0, 0),
        ("gzip", 1, 1),
        ("gzip", 3, 2),
        ("gzip", 4, 3),
        ("gzip", 3, 4),
    ]
    lat = [r for r in rows if r["group_id"] == "lat"]
    assert [r["log_timestamp"].timestamp() * 1000 for r in lat] == [T + 99, T + 99]


# --- generated logs (the benchmark's generator) ---------------------------------------------------


@pytest.mark.parametrize("seed,share", [(1, 0.1), (2, 0.6)])
def test_generated_logs(tmp_path, seed, share):
    generate_log(str(tmp_path), 2500, partitions=3, groups=40, seed=seed, compressed_share=share, segment_bytes=30_000)
    paths = sorted(glob.glob(os.path.join(str(tmp_path), "*", "*.log")))
    assert len(paths) > 3
    for p in paths:
        assert_same(p, chunk_rows=1000)
    assert_same(paths[1], start_offset=333, chunk_rows=77)


def test_many_small_batches_grow_the_framing_arrays(tmp_path):
    """A batch of one commit every ~110 bytes: several times the entries the framing walk starts
    with room for (one per KiB of segment), so its arrays grow while it walks, some entries
    compressed (each batch is framed, kept, skipped below a start offset or handed on)."""
    b = PartitionLogBuilder(PART)
    for i in range(1500):
        b.batch(
            [(offset_commit_key(f"g{i % 9}", "t", i % 5), offset_commit_value(i, T + i), T + i)], compression=i % 7 // 5
        )
    folder = b.write(str(tmp_path))
    path = glob.glob(os.path.join(folder, "*.log"))[0]
    assert 1000 < os.path.getsize(path) / 1500 * 10 < 2000  # (about ten batches a KiB)
    batches = assert_same(path)
    assert sum(x.num_rows for x in batches) == 1500
    assert batches[-1].column("committed_offset")[-1].as_py() == 1499
    assert sum(x.num_rows for x in assert_same(path, start_offset=1203, chunk_rows=100)) == 297


def _expected_parts(batch: pa.RecordBatch) -> tuple[pa.RecordBatch, pa.RecordBatch]:
    """offsets_log's two parts of a batch (its plain file's, its GroupMetadata rows' file's),
    as Arrow's filter gives them."""
    has = pc.is_valid(batch.column("group_metadata"))
    return batch.drop_columns(["group_metadata"]).filter(pc.invert(has)), batch.filter(has)


@pytest.mark.parametrize("chunk_rows", [1, 3, 16, 65536])
def test_the_two_parts_the_decoder_builds_are_the_batch_filtered(rich, tmp_path, chunk_rows):
    generate_log(str(tmp_path), 2500, partitions=2, groups=40, seed=3, compressed_share=0.3, segment_bytes=60_000)
    paths = [rich, *sorted(glob.glob(os.path.join(str(tmp_path), "*", "*.log")))]
    built = empty = 0
    for path in paths:
        dec = SegmentDecoder(path, PART, fast=True, chunk_rows=chunk_rows)
        for batch in dec:
            plain, groups = dec.batch_parts()
            if plain is None:  # no GroupMetadata value in the batch, or rows the kernels leave to Python
                assert groups is None
                continue
            built += 1
            empty += plain.num_rows == 0
            expected_plain, expected_groups = _expected_parts(batch)
            assert plain.schema == PLAIN_SCHEMA and groups.schema == batch.schema
            plain.validate(full=True)
            groups.validate(full=True)
            assert plain.equals(expected_plain)
            assert groups.equals(expected_groups)
            assert groups.num_rows > 0
    assert built
    if chunk_rows == 1:
        assert empty  # a batch of one GroupMetadata record: no plain row


# --- legacy formats ----------------------------------------------------------------------------------


def test_legacy_magic_0_and_1_between_batches(tmp_path):
    k = offset_commit_key("old", "t", 0)
    v = offset_commit_value(5, T, version=1, expire_ts=T + 1)
    data = bytearray()
    data += encode_legacy_message(0, 0, k, v)
    data += encode_legacy_message(1, 1, k, None, T)
    data += encode_batch(2, [(2, T, k, offset_commit_value(6, T)), (3, T, k, offset_commit_value(7, T))])
    data += encode_legacy_wrapper([(4, T, k, v), (5, T, k, v)], 1, 1, T)
    data += encode_legacy_wrapper([(6, T, k, v), (7, T, k, v)], 0, 2)
    data += encode_batch(8, [(8, T, k, offset_commit_value(9, T))], compression=3)
    path = write_segment(tmp_path, bytes(data))
    for chunk in (1, 3, 100):
        # the two legacy messages and the two legacy wrappers: the Python decoder's
        assert len(rows_of(assert_same(path, python_batches=4, chunk_rows=chunk))) == 9
    assert_same(path, python_batches=4, start_offset=5, chunk_rows=2)


# --- bad input: the same error (or quarantine rows) as the Python path ------------------------------


def _good(offset: int, n: int = 3, **kw) -> bytes:
    return encode_batch(
        offset, [(offset + i, T, offset_commit_key("g", "t", i), offset_commit_value(i, T)) for i in range(n)], **kw
    )


def _with_key_and_value(offset: int, key, value) -> bytes:
    return encode_batch(
        offset, [(offset, T, offset_commit_key("g", "t", 0), offset_commit_value(1, T)), (offset + 1, T, key, value)]
    )


def _bad_inputs() -> dict[str, bytes]:
    ok = _good(0)
    bad_crc = bytearray(_good(3))
    bad_crc[-1] ^= 0xFF
    k = offset_commit_key("g", "t", 0)
    cases = {
        "crc": ok + bytes(bad_crc) + _good(6),
        "truncated tail": ok + _good(3)[:-5],
        "short header tail": ok + _good(3)[:15],
        "entry size too small": ok + struct.pack(">qi", 3, 5) + b"\x02" * 40 + _good(4),
        "unknown magic": ok + (lambda b: b[:16] + b"\x07" + b[17:])(_good(3)) + _good(6),
        "batch below minimum": ok + struct.pack(">qiib", 3, 20, 0, 2) + b"\x00" * 15 + _good(4),
        "null key": ok + _with_key_and_value(3, None, b"\x00\x01"),
        "short key": ok + _with_key_and_value(3, b"\x00", None),
        "invalid utf-8 group": ok + _with_key_and_value(3, b"\x00\x01\x00\x02\xc3\x28\x00\x01t\x00\x00\x00\x00", None),
        "surrogate in topic": ok
        + _with_key_and_value(3, b"\x00\x01\x00\x01g\x00\x03\xed\xa0\x80\x00\x00\x00\x00", None),
        "truncated partition": ok + _with_key_and_value(3, b"\x00\x01\x00\x01g\x00\x01t\x00\x00", None),
        "value version 5": ok + _with_key_and_value(3, k, struct.pack(">hq", 5, 1) + b"\x00" * 20),
        "legacy key with v1 value": ok
        + _with_key_and_value(3, offset_commit_key("g", "t", 0, 0), offset_commit_value(1, T, version=1)),
        "value without version": ok + _with_key_and_value(3, k, b"\x00"),
        "truncated value": ok + _with_key_and_value(3, k, offset_commit_value(1, T)[:-3]),
        "null metadata": ok + _with_key_and_value(3, k, struct.pack(">hqhq", 1, 1, -1, T)),
        "bad topic id size": ok
        + _with_key_and_value(3, k, struct.pack(">hqi", 4, 1, 0) + b"\x01" + struct.pack(">q", T) + b"\x01\x00\x03abc"),
        "unknown value version of a group": ok + _with_key_and_value(3, group_key("g"), b"\x00\x09"),
        "member key with invalid utf-8 member id": ok
        + _with_key_and_value(3, b"\x00\x05\x00\x01g\x00\x02\xc3\x28", struct.pack(">hi", 0, 5)),
        "member key without its member id": ok + _with_key_and_value(3, b"\x00\x07\x00\x01g", None),
        "regular expression key of a null expression": ok + _with_key_and_value(3, b"\x00\x10\x00\x01g\xff\xff", None),
        "unknown value version of a consumer group": ok
        + _with_key_and_value(3, b"\x00\x03\x00\x01g", struct.pack(">hi", 1, 5) + b"\x00"),
        "retired share group type 9": ok + _with_key_and_value(3, b"\x00\x09\x00\x01g", struct.pack(">hi", 0, 5)),
        "bad compressed data": ok + (lambda b: b[:61] + b"\x00" * (len(b) - 61))(_good(3, compression=4)),
        "record count too high": ok + (lambda b: b[:57] + struct.pack(">i", 50) + b[61:])(_good(3)),
        "trailing bytes in a batch": ok + (lambda b: b[:57] + struct.pack(">i", 2) + b[61:])(_good(3)),
        "bad legacy message": ok + encode_legacy_message(3, 1, k, None, T)[:-1] + b"\x00\x00",
        "negative count": ok + (lambda b: b[:57] + struct.pack(">i", -1) + b[61:])(_good(3)),
    }
    return {name: _fix_crcs(data) if name != "crc" else data for name, data in cases.items()}


def _fix_crcs(data: bytes) -> bytes:
    """Recompute every complete magic-2 batch CRC (so the intended defect is what is found)."""
    import crc32c

    out = bytearray(data)
    pos = 0
    while len(out) - pos >= 17:
        size = struct.unpack_from(">i", out, pos + 8)[0]
        if size < 14 or pos + 12 + size > len(out):
            break
        if out[pos + 16] == 2 and size >= 9:
            out[pos + 17 : pos + 21] = struct.pack(">I", crc32c.crc32c(bytes(out[pos + 21 : pos + 12 + size])))
        elif out[pos + 16] in (0, 1):
            out[pos + 12 : pos + 16] = struct.pack(">I", zlib.crc32(bytes(out[pos + 16 : pos + 12 + size])))
        pos += 12 + size
    return bytes(out)


BAD = _bad_inputs()


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_same_outcome(tmp_path, name):
    path = write_segment(tmp_path, BAD[name])
    for chunk in (1, 2, 100):
        assert_same(path, python_batches=None, chunk_rows=chunk)
    assert_same(path, python_batches=None, verify_crc=False)
    assert_same(path, python_batches=None, start_offset=2)
    assert_same(path, python_batches=None, quarantine=True, chunk_rows=2)


def test_bad_input_is_reported_as_before(tmp_path):
    """Spot check of the error itself (hand-written expectation)."""
    path = write_segment(tmp_path, BAD["value version 5"])
    with pytest.raises(Exception) as exc:
        list(SegmentDecoder(path, PART, fast=True))
    assert type(exc.value).__name__ == "UnknownRecordVersionError"
    assert (exc.value.offset, exc.value.position, exc.value.partition) == (4, len(_good(0)), PART)


# --- property test: random commit contents ------------------------------------------------------

_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)


@st.composite
def commit_records(draw):
    rtype = draw(st.sampled_from((0, 1)))
    key = encode_key(CoordinatorKey(rtype, draw(_text), draw(_text), draw(st.integers(-(2**31), 2**31 - 1))))
    if draw(st.integers(0, 9)) == 0:
        return key, None
    version = 0 if rtype == 0 else draw(st.integers(0, 4))
    offset = draw(st.integers(-(2**63), 2**63 - 1))
    epoch = draw(st.sampled_from((-1, 0, 7, 2**31 - 1)))
    meta = draw(_text).encode("utf-8")
    ts = draw(st.sampled_from((-1, -5, 0, T, 2**62, 9_223_372_036_854_775, -(2**63))))
    value = struct.pack(">hq", version, offset)
    if version >= 3:
        value += struct.pack(">i", epoch)
    if version >= 4:
        value += encode_uvarint(len(meta) + 1) + meta
    else:
        value += struct.pack(">h", len(meta)) + meta
    value += struct.pack(">q", ts)
    if version == 1:
        value += struct.pack(">q", draw(st.sampled_from((-1, -2, T, 2**40, -(2**63)))))
    if version >= 4:
        tags = draw(st.lists(st.tuples(st.sampled_from((0, 1, 5)), st.binary(min_size=16, max_size=16)), max_size=2))
        value += bytes([len(tags)])
        for tag, raw in tags:
            value += bytes([tag, len(raw)]) + raw
    if draw(st.integers(0, 19)) == 0:
        value += b"\x00\x01"  # trailing bytes after the value (accepted, as by Kafka)
    if draw(st.integers(0, 29)) == 0:
        value = value[: draw(st.integers(0, len(value)))]  # truncated: an error
    return key, value


@st.composite
def logs(draw):
    data = bytearray()
    offset = draw(st.integers(0, 2**40))
    first = offset
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.integers(0, 9))
        if kind == 0:
            data += encode_control_batch(offset, 5, 0, draw(st.booleans()), T)
            offset += 1
            continue
        recs = draw(st.lists(commit_records(), min_size=0 if kind == 1 else 1, max_size=5))
        if kind == 2:
            recs.append((group_key("gm"), group_metadata_value(generation=1, members=[])))
        ts = draw(st.sampled_from((-1, -7, T)))
        if not recs:
            data += encode_batch(offset, [], last_offset_delta=draw(st.integers(0, 3)))
            offset += 1
            continue
        data += encode_batch(
            offset,
            [(offset + i, ts + i, k, v) for i, (k, v) in enumerate(recs)],
            compression=draw(st.sampled_from((0, 0, 0, 1, 2, 3, 4))),
            transactional=kind == 3,
            producer_id=9 if kind == 3 else -1,
            log_append_time=kind == 4,
        )
        offset += len(recs)
    if draw(st.integers(0, 4)) == 0 and len(data) > 20:  # flip one byte
        pos = draw(st.integers(0, len(data) - 1))
        data[pos] ^= draw(st.integers(1, 255))
    return bytes(data), first, offset


@settings(
    max_examples=300,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(log=logs(), chunk=st.integers(1, 9), start_delta=st.integers(-2, 12))
def test_random_commits_same_as_python(log, chunk, start_delta):
    data, first, end = log
    start = max(0, first + start_delta) if start_delta >= 0 else 0
    kw = {"python_batches": None, "data": data, "source_name": "random.log", "chunk_rows": chunk}
    assert_same("random.log", start_offset=start, **kw)
    assert_same("random.log", quarantine=True, **kw)


# --- GroupMetadata values: lib.decode.group_kernel against the Python reader ---------------------


def sticky_user_data(assignment: dict[str, list[int]], generation: int) -> bytes:
    """StickyAssignor's user data: the member's previous assignment and its generation."""
    out = struct.pack(">i", len(assignment))
    for topic, partitions in assignment.items():
        raw = topic.encode("utf-8")
        out += struct.pack(f">h{len(raw)}si{len(partitions)}i", len(raw), raw, len(partitions), *partitions)
    return out + struct.pack(">i", generation)


def busy_group_value(rng: random.Random, group: str, version: int = 3) -> bytes:
    """A GroupMetadataValue as a busy cluster's coordinator writes them: 1-20 members over 1-5
    topics, assignments of up to 64 partitions, owned partitions and the sticky assignors' user
    data, members on consumer protocol v0-v4 (v4: a newer client, read as v3)."""
    topics = sorted({f"tøpic-{rng.randrange(40)}.évents" for _ in range(rng.randint(1, 5))})
    partitions = [(t, p) for t in topics for p in range(rng.choice((1, 6, 32, 64, 150)))]
    n = rng.randint(1, 20)
    protocol = rng.choice(("range", "roundrobin", "sticky", "cooperative-sticky"))
    generation = rng.randrange(1, 10_000)
    members = []
    for i in range(n):
        mine: dict[str, list[int]] = {}
        for t, p in partitions[i::n][:64]:
            mine.setdefault(t, []).append(p)
        user_data = {
            "sticky": sticky_user_data(mine, generation - 1),
            "cooperative-sticky": struct.pack(">i", generation - 1),
        }.get(protocol)
        pv = rng.choice((0, 1, 2, 3, 3, 4))
        members.append(
            consumer_member(
                f"consumer-{group}-{i + 1}-{rng.getrandbits(64):016x}",
                topics,
                mine,
                client_id=f"consumer-{group}-{i + 1}",
                client_host=f"/10.0.{rng.randrange(256)}.{rng.randrange(256)}",
                instance_id=rng.choice((None, f"static-ü-{i}")),
                protocol_version=pv,
                owned_partitions=mine if protocol == "cooperative-sticky" else None,
                generation_id=generation - 1 if pv >= 2 else -1,
                user_data=user_data,
                assignment_user_data=user_data if protocol == "sticky" else None,
                rack_id=rng.choice((None, f"use1-az{i % 3}")),
            )
        )
    return group_metadata_value(
        generation=generation,
        protocol=protocol,
        members=members,
        state_ts=rng.choice((-1, T, -5, 2**62)),
        version=version,
    )


def busy_log(b: PartitionLogBuilder, seed: int = 5) -> PartitionLogBuilder:
    """GroupMetadata records of every value version between offset commits: single and several
    to a batch, compressed, tombstones, empty groups, null leader and protocol, a "connect"
    group whose member bytes are not the consumer protocol's."""
    rng = random.Random(seed)
    for i in range(24):
        g = f"grüppe-{i % 7}"
        b.commit(g, "t", i, i, T + i, version=3)
        b.batch([(group_key(g), busy_group_value(rng, g, version=i % 4), T + i)])
    b.group_tombstone("grüppe-1", T)
    b.group("empty", T, protocol_type="", generation=0, protocol=None, members=[])  # a new group
    b.group("left", T, protocol_type="consumer", generation=9, protocol=None, leader=None, members=[], state_ts=T)
    connect = consumer_member("w-1", ["t"], {"t": [0]})
    connect["subscription"], connect["assignment"] = b"\x00\x01\xff\xfe connect's own", b""
    b.group("connect-cluster", T, protocol_type="connect", protocol="sessioned", members=[connect], version=1)
    for codec in (0, 1, 2, 3, 4):
        b.batch(
            [
                (offset_commit_key("c", "t", 0), offset_commit_value(1, T), T),
                (group_key("c"), busy_group_value(rng, "c"), T),
                (group_key("d"), None, T),
                (group_key("e"), busy_group_value(rng, "e", version=codec % 4), T),
                (offset_commit_key("c", "t", 1), offset_commit_value(2, T, version=4), T),
            ],
            compression=codec,
        )
    return b


@pytest.fixture(scope="module")
def busy(tmp_path_factory):
    folder = busy_log(PartitionLogBuilder(PART, start_offset=500)).write(str(tmp_path_factory.mktemp("busy")))
    return glob.glob(os.path.join(folder, "*.log"))[0]


@pytest.mark.parametrize("chunk_rows", [1, 3, 16, 65536])
def test_busy_group_metadata_same_as_python(busy, chunk_rows):
    assert_same(busy, chunk_rows=chunk_rows)
    assert_same(busy, chunk_rows=chunk_rows, start_offset=530)


def no_python_ranges(monkeypatch) -> None:
    """Fail the test when the fast path hands a byte range to the Python decoder."""

    def python_range(*args, **kw):
        raise AssertionError("a byte range went to the Python decoder")

    monkeypatch.setattr(fastdecode, "_PythonRange", python_range)


def test_busy_group_metadata_never_reaches_python(busy, monkeypatch):
    """Every value of the busy log is read by the kernel: no byte range goes to the Python decoder."""
    no_python_ranges(monkeypatch)
    rows = rows_of(list(SegmentDecoder(busy, PART, fast=True)))
    groups = [r["group_metadata"] for r in rows if r["record_type"] == 2 and not r["is_tombstone"]]
    assert len(groups) == 24 + 3 + 2 * 5
    members = [m for g in groups for m in g["members"]]
    assert max(len(g["members"]) for g in groups) > 10
    assert max(len(p["partitions"]) for m in members for p in m["assignment"] or []) == 64
    assert {m["subscription_version"] for m in members} == {None, 0, 1, 2, 3, 4}
    assert any(m["owned_partitions"] for m in members) and any(m["subscription_user_data"] for m in members)


def test_busy_group_metadata_as_python_dicts(busy):
    """The values the replay engine takes (batch_group_metadata): the Python reader's, row by row."""
    from lib.decode.group_metadata import group_metadata

    dec = SegmentDecoder(busy, PART, fast=True, chunk_rows=10)
    seen = 0
    for batch in dec:
        values = dec.batch_group_metadata
        assert values is not None
        raw, column = batch.column("raw_value"), batch.column("group_metadata")
        rows = [i for i, t in enumerate(batch.column("record_type").to_pylist()) if t == 2 and raw[i].is_valid]
        assert sorted(values) == rows
        for i in rows:
            expected = group_metadata(raw[i].as_py())
            assert values[i] == expected
            assert column[i].as_py() == {
                **expected,
                "current_state_timestamp": column[i]["current_state_timestamp"].as_py(),
            }
            seen += 1
    assert seen == 24 + 3 + 2 * 5


def test_control_record_of_type_2_is_not_group_metadata(tmp_path):
    """A control record of type 2 (LEADER_CHANGE) whose value would parse as a
    GroupMetadataValue: a control record, as the Python path has it (the fast rows hold the
    control type where a data record's type is)."""
    value = busy_group_value(random.Random(1), "g")
    control = encode_batch(
        3, [(3, T, struct.pack(">hh", 0, 2), value)], producer_id=7, producer_epoch=0, transactional=True, control=True
    )
    path = write_segment(tmp_path, _good(0) + control + _good(4))
    assert_same(path)
    (row,) = [r for r in rows_of(list(SegmentDecoder(path, PART, fast=True))) if r["is_control"]]
    assert (row["control_type"], row["group_metadata"]) == ("LEADER_CHANGE", None)


_ids = st.text(st.characters(blacklist_categories=("Cs",)), max_size=10)  # non-ASCII included
_int32 = st.integers(-(2**31), 2**31 - 1)


@st.composite
def consumer_bytes(draw):
    """A member's subscription and assignment: consumer protocol v0-v3 (or a newer version, read
    as v3), empty, or bytes of another protocol."""
    kind = draw(st.sampled_from(("protocol",) * 6 + ("empty", "other")))
    if kind == "empty":
        return b"", b""
    if kind == "other":
        return draw(st.binary(max_size=12)), draw(st.binary(max_size=12))
    version = draw(st.sampled_from((0, 1, 2, 3, 3, 6)))
    topics = draw(st.lists(_ids, min_size=1, max_size=5))
    tps = st.lists(
        st.fixed_dictionaries({"topic": st.sampled_from(topics), "partitions": st.lists(_int32, max_size=64)}),
        max_size=3,
    )
    owned, assigned = draw(tps), draw(tps)
    user_data = draw(st.none() | st.binary(max_size=40) | st.just(sticky_user_data({"t": [0, 1]}, 4)))
    sub = encode_subscription(
        version,
        {
            "topics": topics,
            "userData": user_data,
            "ownedPartitions": owned,
            "generationId": draw(_int32),
            "rackId": draw(st.none() | _ids),
        },
    )
    asg = encode_assignment(
        version, {"assignedPartitions": assigned, "userData": draw(st.none() | st.binary(max_size=8))}
    )
    if draw(st.integers(0, 9)) == 0:
        sub += b"\x00\x07"  # trailing bytes (ignored, as by Kafka)
    return sub, asg


@st.composite
def group_values(draw):
    """GroupMetadataValue v0-v3 of 0-20 members; now and then mutated or cut short (the kernel
    then reads the same as the Python reader, or hands the batch to the Python decoder)."""
    members = []
    for _ in range(draw(st.integers(0, 20))):
        sub, asg = draw(consumer_bytes())
        members.append(
            {
                "memberId": draw(_ids),
                "groupInstanceId": draw(st.none() | _ids),
                "clientId": draw(_ids),
                "clientHost": draw(_ids),
                "rebalanceTimeout": draw(_int32),
                "sessionTimeout": draw(_int32),
                "subscription": sub,
                "assignment": asg,
            }
        )
    value = group_metadata_value(
        protocol_type=draw(st.sampled_from(("consumer",) * 4 + ("", "connect")) | _ids),
        generation=draw(_int32),
        protocol=draw(st.none() | _ids),
        leader=draw(st.none() | _ids),
        state_ts=draw(st.sampled_from((-1, -5, 0, T, 2**62, -(2**63), 2**63 - 1))),
        members=members,
        version=draw(st.integers(0, 3)),
    )
    if draw(st.integers(0, 3)) == 0:
        mutated = bytearray(value)
        for _ in range(draw(st.integers(1, 3))):
            mutated[draw(st.integers(0, len(mutated) - 1))] = draw(st.integers(0, 255))
        value = bytes(mutated[: draw(st.integers(2, len(mutated)))])
    return value


def kernel_reads(value: bytes) -> bool:
    """Whether lib.decode.group_kernel reads the value itself (else the Python decoder does)."""
    from lib.decode.group_kernel import group_values as parse

    buf = fastdecode._readonly(np.frombuffer(value, np.uint8))
    odd = parse(buf, buf[:0], np.zeros(1, np.int64), np.array([len(value)], np.int64))[0]
    return not odd[0]


@settings(
    max_examples=200,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(values=st.lists(group_values(), min_size=1, max_size=3), compression=st.sampled_from((0, 0, 4)))
def test_random_group_metadata_same_as_python(values, compression):
    from lib.decode.group_metadata import group_metadata

    for value in values:
        if kernel_reads(value):  # never more than the Python reader reads itself
            assert group_metadata(value) is not None
    recs = [(offset_commit_key("g", "t", 0), offset_commit_value(1, T))]
    recs += [(group_key(f"g{i}"), v) for i, v in enumerate(values)]
    data = encode_batch(10, [(10 + i, T, k, v) for i, (k, v) in enumerate(recs)], compression=compression)
    data += encode_batch(10 + len(recs), [(10 + len(recs), T, group_key("one"), values[0])])
    # a batch with a value the kernel hands back goes to the Python decoder whole
    slow = int(not all(kernel_reads(v) for v in values)) + int(not kernel_reads(values[0]))
    for chunk in (1, 4):
        assert_same("gm.log", python_batches=slow, data=data, source_name="gm.log", chunk_rows=chunk)
    assert_same("gm.log", python_batches=slow, quarantine=True, data=data, source_name="gm.log")


def _odd_values() -> dict[str, tuple[bytes, bool]]:
    """Hand-made values: (bytes, whether the kernel reads them itself)."""
    member = consumer_member("mem-9", ["t1", "t2"], {"t1": [0, 2]}, owned_partitions={"t1": [1]}, rack_id="r")
    v3 = group_metadata_value(generation=7, leader="lead", members=[member], state_ts=T)
    head = struct.pack(">h", 3) + struct.pack(">h8s", 8, b"consumer") + struct.pack(">i", 7)
    after_protocol = len(head) + 2 + len("range")

    def with_member(**fields) -> bytes:
        return group_metadata_value(generation=7, leader="lead", members=[{**member, **fields}], state_ts=T)

    def string(s: bytes) -> bytes:
        return struct.pack(">h", len(s)) + s

    sub, asg = member["subscription"], member["assignment"]
    null32 = struct.pack(">i", -1)
    return {
        "v3": (v3, True),
        "every prefix": (v3, False),
        "trailing bytes": (v3 + b"\x01\x02", True),
        "flexible v4": (struct.pack(">h", 4) + v3[2:], False),
        "null protocol type": (struct.pack(">hh", 3, -1) + v3[12:], False),
        "protocol of length -2: null": (head + struct.pack(">h", -2) + v3[after_protocol:], True),
        "negative member count": (head + string(b"range") + string(b"m") + struct.pack(">qi", T, -1), False),
        "member count beyond the bytes": (head + string(b"range") + string(b"m") + struct.pack(">qi", T, 99), False),
        "invalid utf-8 member id": (v3.replace(b"mem-9", b"me\xc3\x28x"), False),
        "surrogate in the client host": (v3.replace(b"/127.0.0.1", b"/127.\xed\xa0\x80.1"), False),
        "null client id": (v3.replace(string(b"client"), struct.pack(">h", -1)), False),
        "null subscription bytes": (v3.replace(struct.pack(">i", len(sub)) + sub, null32), False),
        "negative subscription version": (with_member(subscription=struct.pack(">h", -1) + sub[2:]), False),
        "one-byte subscription": (with_member(subscription=b"\x00"), False),
        "subscription cut short": (with_member(subscription=sub[:-3]), False),
        "invalid utf-8 subscribed topic": (with_member(subscription=sub.replace(b"t2", b"\xc3\x28")), False),
        "assignment partitions beyond the bytes": (with_member(assignment=asg[:-6]), False),
        "empty subscription and assignment": (with_member(subscription=b"", assignment=b""), True),
        "subscription v9 read as v3": (with_member(subscription=struct.pack(">h", 9) + sub[2:] + b"\x05"), True),
        "user data of length -7: null": (with_member(subscription=sub.replace(null32, struct.pack(">i", -7), 1)), True),
        "another protocol's bytes": (
            group_metadata_value(protocol_type="consumer-ish", members=[{**member, "subscription": b"\x01"}]),
            True,
        ),
    }


ODD = _odd_values()


@pytest.mark.parametrize("name", sorted(ODD))
def test_group_metadata_odd_values(tmp_path, name):
    value, read_by_kernel = ODD[name]
    if name == "every prefix":
        cuts = [value[:n] for n in range(len(value))]
        assert not any(kernel_reads(v) for v in cuts)
        value = cuts[len(cuts) // 2]
    assert kernel_reads(value) == read_by_kernel
    data = _good(0) + _with_key_and_value(3, group_key("g"), value) + _good(5)
    path = write_segment(tmp_path, data)
    slow = 0 if read_by_kernel else 1  # its batch
    for chunk in (1, 100):
        assert_same(path, python_batches=slow, chunk_rows=chunk)
    assert_same(path, python_batches=slow, quarantine=True)


# --- KIP-848, share and streams group records: lib.decode.json_kernel against the generic reader ---

JSON_TYPES = [t for t in sorted(RECORD_TYPES) if jk.KEY_STRINGS[t]]


def test_json_kernel_covers_every_consumer_share_and_streams_group_type():
    """KIP-848 (3-8, 16), share (10-15) and streams (17, 19-23) groups: every type Kafka 4.x writes
    besides offset commits and GroupMetadata (9 is retired and 18 was never released: unknown)."""
    assert JSON_TYPES == [3, 4, 5, 6, 7, 8, 10, 11, 12, 13, 14, 15, 16, 17, 19, 20, 21, 22, 23]
    assert all(jk.ROOTS[t, 0] >= 0 and (jk.ROOTS[t, 1:] < 0).all() for t in JSON_TYPES)


# quotes, backslashes and control characters (escaped by json.dumps), DEL, U+2028 and non-BMP
# characters (not escaped with ensure_ascii=False)
_json_text = st.text(
    st.characters(blacklist_categories=("Cs",)) | st.sampled_from('"\\\x00\b\t\n\x0c\r\x1f\x7f\u2028ü😀'), max_size=10
)
_PRIMITIVES = {
    "int8": st.integers(-(2**7), 2**7 - 1),
    "int16": st.integers(-(2**15), 2**15 - 1),
    "uint16": st.integers(0, 2**16 - 1),
    "int32": _int32,
    "int64": st.sampled_from((0, -1, T)) | st.integers(-(2**63), 2**63 - 1),
    "string": _json_text,
    "bytes": st.binary(max_size=12),
    "uuid": st.just(ZERO_UUID) | st.binary(min_size=16, max_size=16).map(uuid_text),
}
# tags no field has (skipped by both readers), and now and then a known one with any payload
_raw_tags = st.lists(
    st.tuples(st.sampled_from((0, 1, 4, 9, 127, 128, 300)), st.binary(max_size=9)).filter(
        lambda t: t[0] >= 4 or len(t[1]) == 0
    )
    | st.tuples(st.integers(0, 3), st.binary(max_size=9)),
    max_size=2,
)


def field_values(f: Field):
    """Values of a field of a version-0 flexible schema: nulls where allowed, empty arrays."""
    if f.is_struct:
        values = st.lists(struct_values(f.fields), max_size=3) if f.is_array else struct_values(f.fields)
    else:
        values = st.lists(_PRIMITIVES[f.element], max_size=4) if f.is_array else _PRIMITIVES[f.type]
    return st.none() | values if f.nullable_in(0) else values


@st.composite
def struct_values(draw, fields):
    """A struct's dict for lib.codec.generic's writer: tagged fields absent (their default) or
    not, and sometimes raw tags (RAW_TAGGED_FIELDS) in its tagged section."""
    out = {}
    for f in fields:
        if f.tagged_in(0) and draw(st.booleans()):
            continue
        out[f.json_name] = draw(field_values(f))
    if draw(st.integers(0, 4)) == 0:
        out[RAW_TAGGED_FIELDS] = draw(_raw_tags)
    return out


def modern_key(rtype: int, group: str, member: str) -> bytes:
    """The record's key: GroupId, then its MemberId or RegularExpression if it has one."""
    second = [f.name for f in RECORD_TYPES[rtype][1].fields][1:]
    return encode_key(
        CoordinatorKey(
            rtype,
            group,
            member_id=member if second == ["MemberId"] else None,
            regular_expression=member if second == ["RegularExpression"] else None,
        )
    )


@st.composite
def modern_records(draw):
    """(type, key, value) of the types lib.decode.json_kernel reads: tombstones, random values,
    now and then with bytes after them, mutated or cut short."""
    rtype = draw(st.sampled_from(JSON_TYPES))
    key = modern_key(rtype, draw(_json_text), draw(_json_text))
    if draw(st.integers(0, 9)) == 0:
        return rtype, key, None
    value = encode_value(rtype, 0, draw(struct_values(RECORD_TYPES[rtype][2].fields)))
    if draw(st.integers(0, 9)) == 0:
        value += draw(st.binary(min_size=1, max_size=3))  # ignored, as by Kafka
    if draw(st.integers(0, 4)) == 0:
        mutated = bytearray(value)
        for _ in range(draw(st.integers(1, 3))):
            mutated[draw(st.integers(0, len(mutated) - 1))] = draw(st.integers(0, 255))
        value = bytes(mutated[: draw(st.integers(1, len(mutated)))])
    return rtype, key, value


def kernel_json(rtype: int, value: bytes) -> str | None:
    """value_json as lib.decode.json_kernel writes it, or None when it hands the value back (an
    unknown version included)."""
    if len(value) < 2:
        return None
    version = struct.unpack_from(">h", value)[0]
    if not 0 <= version < jk.ROOTS.shape[1] or jk.ROOTS[rtype, version] < 0:
        return None
    buf = fastdecode._readonly(np.frombuffer(value, np.uint8))
    odd, _, text = jk.value_json(
        buf,
        buf[:0],
        np.zeros(1, np.int64),
        np.array([len(value)], np.int64),
        jk.ROOTS[[rtype], version],
        jk.STRUCTS,
        jk.FIELDS,
        jk.TEXT,
        jk.DEPTH,
        jk.ALPHABETS,
        jk.HEX_DIGITS,
    )
    return None if odd[0] else text.tobytes().decode("utf-8")


def reference_json(rtype: int, value: bytes) -> str:
    """value_json as lib.decode.rows writes it (raises where that path does)."""
    decoded = decode_value(rtype, value)
    assert decoded is not None
    return json.dumps(decoded[1], separators=(",", ":"), ensure_ascii=False)


def assert_same_in_a_log(
    records: list[tuple[bytes, bytes | None]], compression: int = 0, read_by_kernel: list[bool] | None = None
) -> None:
    """Both decode paths over the records in one batch after an offset commit, the first again in a
    batch of its own, and a GroupMetadata record after them."""
    recs = [(offset_commit_key("g", "t", 0), offset_commit_value(1, T)), *records]
    data = encode_batch(10, [(10 + i, T, k, v) for i, (k, v) in enumerate(recs)], compression=compression)
    n = 10 + len(recs)
    data += encode_batch(n, [(n, T + 1, *records[0])])
    data += encode_batch(n + 1, [(n + 1, T + 2, group_key("g"), group_metadata_value(members=[]))])
    # read_by_kernel: per record; a batch with one the kernel hands back goes to Python whole
    slow = None if read_by_kernel is None else int(not all(read_by_kernel)) + int(not read_by_kernel[0])
    for chunk in (1, 4):
        assert_same("kip848.log", python_batches=slow, data=data, source_name="kip848.log", chunk_rows=chunk)
    assert_same("kip848.log", python_batches=slow, quarantine=True, data=data, source_name="kip848.log")


@settings(
    max_examples=400,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(records=st.lists(modern_records(), min_size=1, max_size=4), compression=st.sampled_from((0, 0, 4)))
def test_random_modern_group_records_same_as_python(records, compression):
    for rtype, _, value in records:
        text = None if value is None else kernel_json(rtype, value)
        if text is not None:  # never more than the generic reader reads itself, and the same text
            assert text == reference_json(rtype, value)
    read = [value is None or kernel_json(rtype, value) is not None for rtype, _, value in records]
    assert_same_in_a_log([(key, value) for _, key, value in records], compression, read)


def sample_struct(fields, i: int) -> dict:
    """A deterministic value of a version-0 flexible struct, varied by `i`: non-ASCII strings,
    nulls where allowed (every third), arrays of 0-2 items, tagged fields set every other time."""
    out: dict = {}
    for k, f in enumerate(fields):
        j = i + k
        if f.tagged_in(0) and j % 2:
            continue
        if f.nullable_in(0) and j % 3 == 2:
            out[f.json_name] = None
            continue

        def one(m: int, f=f):
            if f.is_struct:
                return sample_struct(f.fields, m + 1)
            return {
                "string": f"{f.name}-ü-{m}",
                "bytes": bytes(range(m % 5)),
                "uuid": uuid_text(bytes([m % 256]) * 16),
                "uint16": m * 1000 % 65536,
            }.get(f.element, (m * 7 + 1) % 127 * (-1) ** m)

        out[f.json_name] = [one(j + n) for n in range(j % 3)] if f.is_array else one(j)
    return out


def modern_log(b: PartitionLogBuilder) -> PartitionLogBuilder:
    """Every type lib.decode.json_kernel reads, three values each and a tombstone, one to a batch
    and many to a batch, compressed, beside offset commits and GroupMetadata."""
    for i in range(3):
        for rtype in JSON_TYPES:
            member = f"mémber-{i}"
            key = modern_key(rtype, f"grüppe-{rtype}", member)
            b.batch([(key, encode_value(rtype, 0, sample_struct(RECORD_TYPES[rtype][2].fields, i)), T + i)])
        b.commit("grüppe-3", "t", i, i, T)
    for codec in (0, 1, 2, 3, 4):
        recs = [(offset_commit_key("c", "t", codec), offset_commit_value(codec, T), T)]
        recs += [
            (modern_key(t, "c", "m"), encode_value(t, 0, sample_struct(RECORD_TYPES[t][2].fields, codec + t)), T)
            for t in JSON_TYPES
        ]
        recs += [(modern_key(t, "c", "m"), None, T) for t in JSON_TYPES]  # the group deleted
        recs.append((group_key("c"), group_metadata_value(members=[]), T))
        b.batch(recs, compression=codec)
    return b


@pytest.fixture(scope="module")
def modern(tmp_path_factory):
    folder = modern_log(PartitionLogBuilder(PART, start_offset=200)).write(str(tmp_path_factory.mktemp("modern")))
    return glob.glob(os.path.join(folder, "*.log"))[0]


@pytest.mark.parametrize("chunk_rows", [1, 3, 16, 65536])
def test_modern_group_records_same_as_python(modern, chunk_rows):
    assert_same(modern, chunk_rows=chunk_rows)
    assert_same(modern, chunk_rows=chunk_rows, start_offset=230)


def test_modern_group_records_never_reach_python(modern, monkeypatch):
    """Every record of the modern log is read by the kernels: no byte range goes to the Python decoder."""
    no_python_ranges(monkeypatch)
    rows = rows_of(list(SegmentDecoder(modern, PART, fast=True)))
    by_type = {t: [r for r in rows if r["record_type"] == t] for t in JSON_TYPES}
    assert all(len(by_type[t]) == 3 + 5 + 5 for t in JSON_TYPES)
    r = by_type[5][0]
    assert (r["record_type_name"], r["group_id"], r["member_id"], r["key_version"], r["value_version"]) == (
        "ConsumerGroupMemberMetadata",
        "grüppe-5",
        "mémber-0",
        0,
        0,
    )
    assert json.loads(r["value_json"]) == decode_value(5, r["raw_value"])[1]
    assert by_type[16][0]["member_id"] is None  # a regular expression, not a member
    assert by_type[3][0]["member_id"] is None
    tombstones = [r for r in rows if r["record_type"] in JSON_TYPES and r["is_tombstone"]]
    assert len(tombstones) == 5 * len(JSON_TYPES)
    assert all(r["value_json"] is None and r["value_version"] is None for r in tombstones)


def test_busy_generator_log_never_reaches_python(tmp_path, monkeypatch):
    """A small log of lib.testdata.busy (KIP-848 groups reconciling beside classic ones): both
    paths agree, and the fast one decodes it all itself."""
    from lib.testdata.busy import generate_busy_log

    generate_busy_log(
        str(tmp_path), 8000, partitions=2, groups=40, seed=3, consumed_partitions=2, topic_records=50, workers=1
    )
    paths = sorted(glob.glob(os.path.join(str(tmp_path), "__consumer_offsets-*", "*.log")))
    for p in paths:
        assert_same(p, chunk_rows=500)
    no_python_ranges(monkeypatch)
    types = {t for p in paths for b in SegmentDecoder(p, PART, fast=True) for t in b.column("record_type").to_pylist()}
    assert {3, 4, 5, 6, 7, 8} <= types


def _tags(*fields: tuple[int, bytes]) -> bytes:
    """A tagged section, as written: the count, then each field's tag, size and payload."""
    return encode_uvarint(len(fields)) + b"".join(encode_uvarint(t) + encode_uvarint(len(p)) + p for t, p in fields)


def _compact(s: bytes | None) -> bytes:
    return b"\x00" if s is None else encode_uvarint(len(s) + 1) + s


def _odd_modern_values() -> dict[str, tuple[int, bytes, bool]]:
    """Hand-made values: (type, bytes, whether the kernel reads them itself)."""
    v0 = struct.pack(">h", 0)
    epoch = v0 + struct.pack(">i", 5)  # ConsumerGroupMetadataValue up to its tagged section
    member = {
        "instanceId": None,
        "rackId": "rack",
        "clientId": "cliént",
        "clientHost": "/10.0.0.1",
        "subscribedTopicNames": ["a", "b"],
        "subscribedTopicRegex": None,
        "rebalanceTimeoutMs": -1,
        "serverAssignor": "uniform",
    }
    m5 = encode_value(5, 0, member)
    classic = {"sessionTimeoutMs": 45000, "supportedProtocols": [{"name": "range", "metadata": b"\x00\x01"}]}
    classic_raw = encode_value(5, 0, {**member, "classicMemberMetadata": classic})
    classic_payload = classic_raw[len(m5) - 1 + 3 :]  # after the tagged section's count, tag and size
    default_classic = struct.pack(">bi", 1, 0) + b"\x01\x00"  # present: timeout 0, no protocols, no tags
    cgma = encode_value(8, 0, {"memberEpoch": 1, "previousMemberEpoch": 0, "state": 0})[:-3]  # up to its arrays
    topic_partitions = uuid_bytes(TOPIC_ID) + b"\x03" + struct.pack(">ii", 1, 2)  # an item, up to its tags
    streams_meta = v0 + struct.pack(">iq", 1, 2)
    endpoint = encode_value(
        19, 0, {"clientId": "c", "clientHost": "h", "processId": "p", "userEndpoint": {"host": "x", "port": 9092}}
    )
    at_endpoint = endpoint.index(b"\x01\x02x")  # its marker, then the host
    return {
        "consumer group metadata": (3, epoch + b"\x00", True),
        "metadata hash": (3, epoch + _tags((0, struct.pack(">q", -7))), True),
        "metadata hash at its default, written anyway: left out": (3, epoch + _tags((0, bytes(8))), True),
        "metadata hash in a tag of 9 bytes (the last skipped)": (3, epoch + _tags((0, bytes(range(1, 10)))), True),
        "metadata hash in a tag of 7 bytes": (3, epoch + _tags((0, bytes(7))), False),
        "unknown tags skipped": (3, epoch + _tags((0, bytes(7) + b"\x01"), (5, b"xyz"), (300, b"")), True),
        "the same tag twice": (3, epoch + _tags((0, bytes(7) + b"\x01"), (0, bytes(7) + b"\x02")), False),
        "tags out of order: in the bytes' order": (
            17,
            streams_meta + _tags((3, struct.pack(">i", 9)), (0, struct.pack(">i", 4))),
            True,
        ),
        "tag size past the end": (3, epoch + b"\x01\x00\x09" + bytes(8), False),
        "tag count past the bytes": (3, epoch + b"\x02\x05\x00", False),
        "tag count a varint of six bytes": (3, epoch + b"\x80\x80\x80\x80\x80\x00", False),
        "version 1": (3, struct.pack(">hi", 1, 5) + b"\x00", False),
        "version -1": (3, struct.pack(">hi", -1, 5) + b"\x00", False),
        "only the version": (3, v0, False),
        "one byte": (3, b"\x00", False),
        "bytes after the value": (3, epoch + b"\x00\xff\xfe", True),
        "member metadata": (5, m5, True),
        "null client id": (5, m5.replace(_compact("cliént".encode()), b"\x00"), False),
        "invalid utf-8 client id": (5, m5.replace("é".encode(), b"\xc3\x28"), False),
        "surrogate in a subscribed topic": (5, m5.replace(b"\x02a", b"\x04\xed\xa0\x80"), False),
        "null subscribed topics": (5, m5.replace(b"\x03\x02a\x02b", b"\x00"), False),
        "a null subscribed topic": (5, m5.replace(b"\x03\x02a\x02b", b"\x03\x00\x02b"), False),
        "more subscribed topics than bytes": (5, m5.replace(b"\x03\x02a\x02b", b"\x7f\x02a\x02b"), False),
        "classic member metadata": (5, classic_raw, True),
        "classic member metadata, marker 0: null": (5, m5[:-1] + _tags((0, b"\x00")), True),
        "classic member metadata, marker -1: null": (5, m5[:-1] + _tags((0, b"\xff")), True),
        "classic member metadata, marker 2: present": (5, m5[:-1] + _tags((0, b"\x02" + classic_payload[1:])), True),
        "classic member metadata at its default: left out": (5, m5[:-1] + _tags((0, default_classic)), True),
        "classic member metadata cut short": (5, m5[:-1] + _tags((0, classic_payload[:-2])), False),
        "unknown tag inside an array item": (
            7,
            v0 + b"\x02" + topic_partitions + _tags((9, b"??")) + b"\x00",
            True,
        ),
        "assignment epochs null": (8, cgma + b"\x02" + topic_partitions + _tags((0, b"\x00")) + b"\x01\x00", True),
        "assignment epochs empty (their default): left out": (
            8,
            cgma + b"\x02" + topic_partitions + _tags((0, b"\x01")) + b"\x01\x00",
            True,
        ),
        "assignment epochs": (
            8,
            cgma + b"\x01\x02" + topic_partitions + _tags((0, b"\x02\x00\x00\x00\x07")) + b"\x00",
            True,
        ),
        "streams user endpoint, marker 0: present (untagged)": (
            19,
            endpoint[:at_endpoint] + b"\x00" + endpoint[at_endpoint + 1 :],
            True,
        ),
        "streams user endpoint, marker -1: null": (
            19,
            endpoint[:at_endpoint] + b"\xff" + endpoint[at_endpoint + 6 :],  # (marker, host, port, tags)
            True,
        ),
        "control characters, quotes and backslashes": (
            16,
            v0 + b"\x04" + b"".join(_compact(s) for s in (b'"q"', b"\\", b"\x00\x1f\x7f\n\t")) + bytes(17),
            True,
        ),
        "int64 extremes": (
            16,
            v0 + b"\x01" + struct.pack(">qq", -(2**63), 2**63 - 1) + b"\x00",
            True,
        ),
        "every prefix": (23, encode_value(23, 0, sample_struct(RECORD_TYPES[23][2].fields, 1)), False),
    }


ODD_MODERN = _odd_modern_values()


@pytest.mark.parametrize("name", sorted(ODD_MODERN))
def test_modern_group_odd_values(tmp_path, name):
    rtype, value, read_by_kernel = ODD_MODERN[name]
    if name == "every prefix":
        assert kernel_json(rtype, value) == reference_json(rtype, value)
        cuts = [value[:n] for n in range(len(value))]
        assert not any(kernel_json(rtype, v) for v in cuts)
        value = cuts[len(cuts) // 2]
    text = kernel_json(rtype, value)
    assert (text is not None) == read_by_kernel
    if text is not None:
        assert text == reference_json(rtype, value)
    key = modern_key(rtype, "g", "m")
    path = write_segment(tmp_path, _good(0) + _fix_crcs(_with_key_and_value(3, key, value)) + _good(5))
    slow = 0 if read_by_kernel else 1  # its batch
    for chunk in (1, 100):
        assert_same(path, python_batches=slow, chunk_rows=chunk)
    assert_same(path, python_batches=slow, quarantine=True)


def test_modern_group_values_hand_checked():
    """The text of a few odd values, against what was worked out by hand."""
    assert kernel_json(*ODD_MODERN["metadata hash at its default, written anyway: left out"][:2]) == '{"epoch":5}'
    assert kernel_json(*ODD_MODERN["metadata hash"][:2]) == '{"epoch":5,"metadataHash":-7}'
    assert kernel_json(*ODD_MODERN["tags out of order: in the bytes' order"][:2]) == (
        '{"epoch":1,"metadataHash":2,"failedDescriptionTopologyEpoch":9,"validatedTopologyEpoch":4}'
    )
    assert kernel_json(*ODD_MODERN["control characters, quotes and backslashes"][:2]) == (
        '{"topics":["\\"q\\"","\\\\","\\u0000\\u001f\x7f\\n\\t"],"version":0,"timestamp":0}'
    )
    classic = json.loads(kernel_json(*ODD_MODERN["classic member metadata, marker 2: present"][:2]))
    assert classic["classicMemberMetadata"] == {
        "sessionTimeoutMs": 45000,
        "supportedProtocols": [{"name": "range", "metadata": "AAE="}],
    }
    assert "classicMemberMetadata" not in json.loads(
        kernel_json(*ODD_MODERN["classic member metadata at its default: left out"][:2])
    )


# --- the measuring function ----------------------------------------------------------------------


def test_measure_decode_reports_both_rates(tmp_path):
    generate_log(str(tmp_path), 600, partitions=1, groups=10)
    paths = sorted(glob.glob(os.path.join(str(tmp_path), "*", "*.log")))
    m = kernels.measure_decode(paths)
    assert m["equal"] is True and m["records"] >= 600
    assert m["python_rps"] > 0 and m["fast_rps"] > 0 and m["ratio"] == pytest.approx(m["python_s"] / m["fast_s"])


def test_kernel_crc32c_matches_the_crc32c_package():
    import crc32c

    for data in (b"", b"a", b"123456789", bytes(range(256)) * 5, os.urandom(1001)):
        assert fastdecode.crc32c(data) == crc32c.crc32c(data)
    assert fastdecode.crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value


# --- CRC-32C kernels ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kernel", ["hardware", "table"])
def test_crc32c_kernels_against_the_bitwise_crc(kernel):
    """Both CRC-32C kernels of the framing pass (SSE 4.2's instruction where the CPU has it, the
    slicing-by-8 tables elsewhere) against the bit-by-bit definition (tests.helpers) on every
    length around the 8-byte step, at unaligned starts, and the check value of the CRC
    catalogue ("123456789" -> 0xE3069283)."""
    from lib.decode import fast
    from lib.decode.numba_bytes import HARDWARE_CRC32C
    from tests.helpers import crc32c

    if kernel == "hardware" and not HARDWARE_CRC32C:
        pytest.skip("this CPU has no SSE 4.2 CRC32 instruction")
    run = fast._crc32c_hardware if kernel == "hardware" else fast._crc32c_table
    data = np.frombuffer(b"123456789", np.uint8)
    assert run(data, 0, 9, fast._CRC) == 0xE3069283
    rng = random.Random(11)
    blob = bytes(rng.randrange(256) for _ in range(300))
    buf = np.frombuffer(blob, np.uint8)
    for start in range(0, 9):
        for length in (*range(0, 40), 63, 64, 65, 255):
            assert run(buf, start, start + length, fast._CRC) == crc32c(blob[start : start + length]), (start, length)


# --- lib.decode.arrow_kernel ---------------------------------------------------------------------


def test_control_types_with_and_without_names_same_as_python(tmp_path):
    """Control records of every named type, of types with no name (UNKNOWN(n), negative ones
    included) and of the markers' types, alone in a chunk or mixed: row_layout writes the names
    it has, the chunks with a type it has none for take the Python labels."""
    out = _good(0)
    offset = 4
    for ctype in [0, 1, 2, 3, 4, 5, 6, 7, 99, -3, 1, 0]:
        value = struct.pack(">hi", 0, 5) if ctype in (0, 1) else b"\x00\x00"
        out += encode_batch(
            offset,
            [(offset, T, struct.pack(">hh", 0, ctype), value)],
            producer_id=7,
            producer_epoch=0,
            transactional=True,
            control=True,
        )
        offset += 1
        out += _good(offset)
        offset += 4
    path = write_segment(tmp_path, out)
    for chunk_rows in (1, 3, 7, 65536):
        assert_same(path, chunk_rows=chunk_rows)
    types = [r["control_type"] for r in rows_of(list(SegmentDecoder(path, PART, fast=True))) if r["is_control"]]
    assert types[6:10] == ["KRAFT_VOTERS", "UNKNOWN(7)", "UNKNOWN(99)", "UNKNOWN(-3)"]


def test_string_columns_past_int32_offsets_take_the_wide_path(rich, monkeypatch):
    """A string column whose bytes in one chunk pass int32 offsets (2 GiB) is built with int64
    offsets, as before lib.decode.arrow_kernel: here every column with bytes takes that path."""
    monkeypatch.setattr(fastdecode, "_INT32_MAX", 0)
    for chunk_rows in (5, 65536):
        assert_same(rich, python_batches=RICH_PYTHON, chunk_rows=chunk_rows)


# --- windows: a segment's entries parsed a window of bytes at a time ------------------------------


@pytest.mark.parametrize("window", [1, 200, 700, 4096])
@pytest.mark.parametrize("chunk_rows", [1, 3, 7, 65536])
def test_rich_log_in_windows_of_any_size(rich, monkeypatch, window, chunk_rows):
    """The fast path with windows of a few entries (the segment's whole below the default)
    yields what the reference decoder does: every chunk, counter and error; the slow entries
    (records with headers, a mixed batch) and compressed ones fall in windows of their own or
    share them, and chunks cross the windows' edges."""
    from lib.decode import fast

    monkeypatch.setattr(fast, "WINDOW_BYTES", window)
    assert_same(rich, python_batches=RICH_PYTHON, chunk_rows=chunk_rows)
    assert_same(rich, python_batches=RICH_PYTHON, start_offset=1011, chunk_rows=chunk_rows)
    data = open(rich, "rb").read()
    assert_same(
        "pad.log", python_batches=RICH_PYTHON, data=data + bytes(5000), source_name="pad.log", chunk_rows=chunk_rows
    )


@pytest.mark.parametrize("window", [512, 8192])
def test_generated_log_in_windows(tmp_path, monkeypatch, window):
    from lib.decode import fast

    monkeypatch.setattr(fast, "WINDOW_BYTES", window)
    generate_log(str(tmp_path), 2500, partitions=2, groups=40, seed=3, compressed_share=0.3, segment_bytes=60_000)
    for p in sorted(glob.glob(os.path.join(str(tmp_path), "*", "*.log"))):
        assert_same(p, chunk_rows=1000)
        assert_same(p, chunk_rows=333)


def test_bad_inputs_in_windows(monkeypatch):
    """Each broken segment of BAD with windows of 300 bytes: the same error, at the same place,
    after the same batches."""
    from lib.decode import fast

    monkeypatch.setattr(fast, "WINDOW_BYTES", 300)
    for name, data in sorted(BAD.items()):
        assert_same(name, python_batches=None, data=data, source_name=name, chunk_rows=2)


def _mapped_rss_kb(path: str) -> int:
    """Resident kB of this process's mappings of `path` (/proc/self/smaps)."""
    rss, mine = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            if "-" in line.split(" ", 1)[0]:  # a mapping's header line
                mine = line.rstrip("\n").endswith(path)
            elif mine and line.startswith("Rss:"):
                rss += int(line.split()[1])
    return rss


def test_a_decoded_window_leaves_the_workers_resident_memory(tmp_path):
    """A mapped segment's pages are dropped from the process's RSS once their window is decoded
    (_release_pages), and read again, the same bytes, if touched after."""
    import mmap

    from lib.codec.segments import read_segment_bytes
    from lib.decode.fast import _release_pages

    path = str(tmp_path / "00000000000000000000.log")
    payload = bytes(range(256)) * (16 << 12)  # 16 MB
    with open(path, "wb") as f:
        f.write(payload)
    data = read_segment_bytes(path)
    assert isinstance(data, mmap.mmap)
    assert sum(data[i] for i in range(0, len(data), 4096)) == 0  # every page touched (byte 0 of each)
    assert _mapped_rss_kb(path) == 16 << 10
    _release_pages(data, 5000, 12 << 20)  # from inside the second page on: the page it starts in too
    assert _mapped_rss_kb(path) == (16 << 10) - (12 << 10)
    assert data[5000:5100] == payload[5000:5100] and data[:] == payload
    assert _mapped_rss_kb(path) == 16 << 10
    _release_pages(b"not mapped", 0, 10)  # bytes (an object store's range read): nothing to drop


def test_the_frame_pass_leaves_a_window_of_the_segment_resident(tmp_path, monkeypatch):
    """The frame pass reads every byte of a mapped segment (the CRCs); its pages are dropped
    after it, so while the first window is decoded the process holds that window's pages, not
    the segment's whole (a 100 MB segment: 100 MB more of a worker's peak)."""
    from lib.decode import fast

    window = 256 << 10
    monkeypatch.setattr(fast, "WINDOW_BYTES", window)
    generate_log(str(tmp_path), 30_000, partitions=1, groups=50, seed=5, segment_bytes=64 << 20)
    (path,) = glob.glob(os.path.join(str(tmp_path), "*", "*.log"))
    assert os.path.getsize(path) > 8 * window
    dec = SegmentDecoder(path, 0, fast=True, chunk_rows=500)
    first = next(iter(dec))
    assert first.num_rows == 500
    assert _mapped_rss_kb(path) <= 2 * window >> 10  # the window's entries (one may cross its edge)


def test_an_empty_segment_file_through_the_fast_path(tmp_path):
    """An empty segment file (a new partition's, a preallocated one's start): no batch, no error."""
    from lib.decode import SegmentDecoder

    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"")
    dec = SegmentDecoder(str(path), 0, fast=True)
    assert list(dec) == [] and dec.next_offset is None and dec.trailing_bytes == 0
