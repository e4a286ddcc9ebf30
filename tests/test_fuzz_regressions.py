"""Crashes the property tests in tests/test_fuzz.py found, kept as plain regression tests.

Each failed with an exception outside the DecodeError family (so a replay died with a Python
traceback instead of a message naming the file, partition and offset), or lost rows silently."""

from __future__ import annotations

import datetime as dt
import struct

import pytest

from lib.codec.errors import CorruptBatchError
from lib.codec.writer import encode_batch, encode_legacy_message, encode_legacy_wrapper
from lib.decode import SegmentDecoder
from lib.testdata.logbuilder import T0, offset_commit_key, offset_commit_value

PATH = "/logs/__consumer_offsets-3/00000000000000000000.log"
MAX = 2**63 - 1


def decode(data: bytes, **kw):
    dec = SegmentDecoder(PATH, 3, data=data, **kw)
    return [row for b in dec for row in b.to_pylist()], dec


def commit(offset: int, commit_ts: int, **kw) -> tuple[bytes, bytes]:
    return offset_commit_key("g", "t", 0), offset_commit_value(offset, commit_ts, **kw)


# --- timestamps beyond what a TIMESTAMP column holds (found: ArrowInvalid out of bounds) ---------

LATEST = dt.datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=dt.UTC)  # Spark's last TIMESTAMP


@pytest.mark.parametrize("commit_ts", [253_402_300_800_000, 2**56, 2**62, MAX])
def test_commit_and_expire_timestamps_after_year_9999_are_stored_as_the_latest_instant(commit_ts):
    # Kafka keeps any int64 here (v1 values carry client-chosen timestamps); the row keeps the
    # exact bytes and the columns hold the latest instant Spark's TIMESTAMP supports.
    k, v = commit(5, commit_ts, version=1, expire_ts=commit_ts)
    (row,), _ = decode(encode_batch(0, [(0, T0, k, v)]))
    assert row["commit_timestamp"] == LATEST and row["expire_timestamp"] == LATEST
    assert row["committed_offset"] == 5 and row["raw_value"] == v


def test_timestamp_at_the_limit_is_exact():
    k, v = commit(5, 253_402_300_799_999)
    (row,), _ = decode(encode_batch(0, [(0, T0, k, v)]))
    assert row["commit_timestamp"] == LATEST


def test_log_timestamp_overflowing_int64_from_base_plus_delta():
    # hypothesis found a batch whose base timestamp read 2^56 ms (ArrowInvalid); here the sum
    # baseTimestamp + timestampDelta even reaches 2^63-1, the largest int64
    k, v = commit(1, T0)
    data = encode_batch(0, [(0, MAX - 10, k, v), (1, MAX, k, v)], base_timestamp=MAX - 10)
    rows, _ = decode(data)
    assert [r["log_offset"] for r in rows] == [0, 1]
    assert [r["log_timestamp"] for r in rows] == [LATEST, LATEST]


def test_group_state_timestamp_beyond_the_column():
    from lib.testdata.logbuilder import group_key, group_metadata_value

    data = encode_batch(0, [(0, T0, group_key("g"), group_metadata_value(state_ts=2**62, members=[]))])
    (row,), _ = decode(data)
    assert row["group_metadata"]["current_state_timestamp"] == LATEST


# --- offsets outside 0..2^63-2 (found: OverflowError in the Arrow conversion; negative
# offsets were dropped silently by the start-offset filter) --------------------------------


def three_records(base: int) -> bytes:
    k, v = commit(1, T0)
    data = bytearray(encode_batch(0, [(0, T0, k, v), (1, T0, k, v), (2, T0, k, v)]))
    data[0:8] = struct.pack(">q", base)  # the base offset is not covered by the CRC
    return bytes(data)


@pytest.mark.parametrize("base", [MAX, MAX - 1, MAX - 2, -1, -5, -(2**63)])
def test_batch_offsets_outside_the_int64_log_range_are_corrupt(base):
    with pytest.raises(CorruptBatchError) as e:
        decode(three_records(base))
    assert e.value.file == PATH and e.value.partition == 3 and e.value.offset == base
    assert e.value.position == 0
    assert f"file {PATH}, partition 3, log offset {base}, byte position 0" in str(e.value)
    assert "outside" in str(e.value)


def test_highest_usable_offsets_still_decode():
    rows, dec = decode(three_records(MAX - 3))
    assert [r["log_offset"] for r in rows] == [MAX - 3, MAX - 2, MAX - 1]
    assert dec.next_offset == MAX


def test_record_offset_delta_beyond_last_offset_delta_is_corrupt():
    # a CRC-valid batch whose record claims offset delta 5 while lastOffsetDelta is 0
    k, v = commit(1, T0)
    data = encode_batch(MAX - 3, [(MAX - 3 + 5, T0, k, v)], last_offset_delta=0)
    with pytest.raises(CorruptBatchError, match="offset delta 5"):
        decode(data)


def test_negative_record_offset_delta_is_corrupt():
    k, v = commit(1, T0)
    data = encode_batch(10, [(10, T0, k, v), (7, T0, k, v)], last_offset_delta=1)
    with pytest.raises(CorruptBatchError, match="offset delta -3") as e:
        decode(data)
    assert e.value.offset == 10


@pytest.mark.parametrize("offset", [-1, MAX])
def test_legacy_message_offset_outside_the_range_is_corrupt(offset):
    k, v = commit(1, T0)
    with pytest.raises(CorruptBatchError, match="outside") as e:
        decode(encode_legacy_message(offset, 1, k, v, T0))
    assert e.value.offset == offset and e.value.file == PATH


def test_legacy_wrapper_inner_offsets_overflowing_are_corrupt():
    # magic 1: absolute = wrapper offset - last inner + inner; a wrapper at MAX - 1 whose inner
    # relative offsets are 0 and -2^40 puts the first record beyond 2^63-1
    k, v = commit(1, T0)
    data = encode_legacy_wrapper([(0, T0, k, v), (-(2**40), T0, k, v)], 1, 1)
    data = struct.pack(">q", MAX - 1) + data[8:]
    with pytest.raises(CorruptBatchError, match="outside"):
        decode(data)


# --- a snappy block claiming a huge uncompressed length (found by probing the codecs' length
# headers: the decoder allocates the claimed size first; under a memory limit, such as the one
# spark.executor.pyspark.memory sets on Python workers, the process aborted) --------------------

BOMB_SCRIPT = r"""
import resource, struct, sys
resource.setrlimit(resource.RLIMIT_AS, (1_500_000_000, 1_500_000_000))
from lib.codec.compression import XERIAL_MAGIC
from lib.codec.errors import DecodeError
from lib.codec.primitives import encode_uvarint
from lib.codec.writer import encode_batch
from lib.decode import SegmentDecoder
import lib.codec.writer as w
bomb = encode_uvarint(0xFFFFFFFF) + b"\0"
payload = bomb if sys.argv[1] == "raw" else XERIAL_MAGIC + struct.pack(">iii", 1, 1, len(bomb)) + bomb
w.compress = lambda codec, data: payload
data = encode_batch(9, [(9, 0, b"k", b"v")], compression=2)
try:
    list(SegmentDecoder("/logs/__consumer_offsets-3/00000000000000000000.log", 3, data=data))
except DecodeError as e:
    print(str(e))
"""


@pytest.mark.parametrize("framing", ["raw", "xerial"])
def test_snappy_block_claiming_4_gib_is_corrupt_even_under_a_memory_limit(framing):
    import os
    import subprocess
    import sys

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run(
        [sys.executable, "-c", BOMB_SCRIPT, framing],
        cwd=repo,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": repo},
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == (
        "snappy block of 6 bytes claims 4294967295 bytes uncompressed "
        "(file /logs/__consumer_offsets-3/00000000000000000000.log, partition 3, log offset 9, byte position 0)"
    )


def test_snappy_at_its_largest_expansion_still_decodes():
    from lib.codec.compression import compress, decompress

    data = b"a" * 1_000_000  # compresses about 21 times (64-byte copies)
    packed = compress(2, data)
    assert len(data) > 20 * (len(packed) - 20)
    assert decompress(2, packed, 2) == data
