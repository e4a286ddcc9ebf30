"""Property-based tests of the codec and the segment reader (hypothesis).

Properties:
- decoding arbitrary bytes, or a valid segment after random mutations (bit flips, truncation,
  insertion, deletion, overwritten ranges, duplicated / dropped / shuffled batches, header fields
  set to extremes), never raises anything but the DecodeError family, and every error it raises
  names the file, the partition and the log offset (or the byte position where no offset is known);
- key/value bytes mutated before framing (so every CRC is valid) decode or raise DecodeError;
- a valid segment decodes to exactly the records written (random contents, every batch kind:
  magic 2 plain and gzip/snappy/lz4/zstd, legacy magic 0/1 messages and compressed wrappers,
  transactional batches with COMMIT/ABORT markers, empty batches, GroupMetadata values).

Expected values come from the generators' inputs, never from the decoder's output.

`make test` runs a fixed, derandomized number of examples; `make soak` sets FUZZ_SCALE
(default 50 there) to run every test with that many times more examples and fresh randomness.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import struct

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lib.codec import serde as co
from lib.codec.compression import decompress
from lib.codec.errors import DecodeError
from lib.codec.generic import encode_message
from lib.codec.primitives import uuid_text
from lib.codec.segments import SegmentReader
from lib.codec.writer import encode_batch, encode_control_batch, encode_legacy_message, encode_legacy_wrapper
from lib.decode import SegmentDecoder, decode_group_metadata
from schemas.records import RECORD_TYPES

SCALE = max(1, int(os.environ.get("FUZZ_SCALE", "1")))
SOAK = SCALE > 1
PATH = "/logs/__consumer_offsets-7/00000000000000000000.log"
PARTITION = 7
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)  # exact: fromtimestamp(ms / 1000) rounds through a float
MAX_TS_MS = (2**63 - 1) // 1000  # the largest millisecond count a TIMESTAMP (us) column holds


def fuzz(n: int):
    """n examples in `make test` (derandomized, no example database: reproducible in CI);
    n * FUZZ_SCALE with fresh randomness and hypothesis' database under `make soak`."""
    kw = {"max_examples": n * SCALE, "deadline": None, "suppress_health_check": list(HealthCheck)}
    if not SOAK:
        kw.update(derandomize=True, database=None)
    return settings(**kw)


# ------------------------------------------------------------------------------------------
# checking helpers
# ------------------------------------------------------------------------------------------


def check_located(e: BaseException, path: str = PATH, partition: int = PARTITION) -> None:
    """The error is a DecodeError naming the file, the partition and an offset or a position."""
    if not isinstance(e, DecodeError):
        raise e  # let hypothesis report (and shrink) the unexpected exception
    text = str(e)
    assert e.file == path and e.partition == partition, text
    assert f"file {path}" in text and f"partition {partition}" in text, text
    if e.offset is not None:
        assert f"log offset {e.offset}" in text, text
    else:
        assert e.position is not None and f"byte position {e.position}" in text, text


def decode_segment(data: bytes, *, verify_crc: bool = True, start_offset: int = 0, chunk_rows: int = 65536):
    """Every row SegmentDecoder yields (as a pyarrow Table) plus the decoder; or raises."""
    dec = SegmentDecoder(
        PATH, PARTITION, data=data, verify_crc=verify_crc, start_offset=start_offset, chunk_rows=chunk_rows
    )
    batches = list(dec)
    return (pa.Table.from_batches(batches) if batches else None), dec


def decode_or_located_error(data: bytes, **kw):
    try:
        return decode_segment(data, **kw)
    except Exception as e:
        check_located(e)
        return None


def codec_only_decode_errors(fn, *args):
    try:
        return fn(*args)
    except DecodeError:
        return None


# ------------------------------------------------------------------------------------------
# strategies: schema-driven values, coordinator records, whole segments
# ------------------------------------------------------------------------------------------

names = st.text(max_size=12)
int32s = st.integers(*INT32)
int64s = st.integers(*INT64)
# -1 = none (expire and state timestamps; a commit's -1 is an instant), else 1691 to 2248
timestamps = st.one_of(st.just(-1), st.integers(-(2**43), 2**43))
uuids = st.binary(min_size=16, max_size=16).map(uuid_text)

_PRIMS = {
    "bool": st.booleans(),
    "int8": st.integers(-128, 127),
    "int16": st.integers(-(2**15), 2**15 - 1),
    "uint16": st.integers(0, 2**16 - 1),
    "int32": int32s,
    "int64": int64s,
    "float64": st.floats(allow_nan=False),
    "string": names,
    "bytes": st.binary(max_size=12).map(lambda b: base64.b64encode(b).decode("ascii")),
    "uuid": uuids,
}


def st_fields(fields, version: int):
    return st.fixed_dictionaries({f.json_name: st_field(f, version) for f in fields if f.exists_in(version)})


def st_field(f, version: int):
    if f.is_array:
        elem = st_fields(f.fields, version) if f.is_struct else _PRIMS[f.element]
        s = st.lists(elem, max_size=3)
    elif f.is_struct:
        s = st_fields(f.fields, version)
    else:
        s = _PRIMS[f.type]
    return (st.none() | s) if f.nullable_in(version) else s


@st.composite
def offset_commit(draw):
    """(key, value, expected decoded columns) of a type 0/1 offset commit."""
    rtype = draw(st.sampled_from([0, 1]))
    version = 0 if rtype == 0 else draw(st.integers(0, 4))
    group, topic, partition = draw(names), draw(names), draw(int32s)
    data = {"offset": draw(int64s), "metadata": draw(st.text(max_size=30)), "commitTimestamp": draw(timestamps)}
    leader_epoch = draw(int32s) if version >= 3 else -1
    expire = draw(timestamps) if version == 1 else -1
    topic_id = draw(st.none() | uuids.filter(lambda u: u != "AAAAAAAAAAAAAAAAAAAAAA")) if version == 4 else None
    data.update(leaderEpoch=leader_epoch, expireTimestamp=expire)
    if topic_id:
        data["topicId"] = topic_id
    key = co.encode_key(co.CoordinatorKey(rtype, group, topic, partition))
    value = co.encode_value(rtype, version, data)
    expect = {
        "record_type": rtype,
        "group_id": group,
        "topic": topic,
        "partition": partition,
        "value_version": version,
        "committed_offset": data["offset"],
        "metadata": data["metadata"],
        "leader_epoch": None if leader_epoch == -1 else leader_epoch,
        "commit_timestamp": data["commitTimestamp"] * 1000,
        "expire_timestamp": ms_to_us(expire),
        "topic_id": topic_id,
        "is_tombstone": False,
    }
    return key, value, expect


def ms_to_us(ms: int):
    """An expire or state timestamp: only Kafka's -1 means none."""
    return None if ms == -1 else ms * 1000


@st.composite
def offset_tombstone(draw):
    rtype, group, topic, partition = draw(st.sampled_from([0, 1])), draw(names), draw(names), draw(int32s)
    key = co.encode_key(co.CoordinatorKey(rtype, group, topic, partition))
    return (
        key,
        None,
        {
            "record_type": rtype,
            "group_id": group,
            "topic": topic,
            "partition": partition,
            "is_tombstone": True,
            "committed_offset": None,
        },
    )


@st.composite
def consumer_protocol(draw):
    """(protocol version, subscription bytes, assignment bytes, expected member fields)."""
    pv = draw(st.integers(0, 3))
    topics = draw(st.lists(names, max_size=3))
    tps = st.lists(st.fixed_dictionaries({"topic": names, "partitions": st.lists(int32s, max_size=3)}), max_size=2)
    owned, assigned = draw(tps), draw(tps)
    sub_ud, asg_ud = draw(st.none() | st.binary(max_size=8)), draw(st.none() | st.binary(max_size=8))
    generation, rack = draw(int32s), draw(st.none() | names)
    sub = co.encode_subscription(
        pv, {"topics": topics, "userData": sub_ud, "ownedPartitions": owned, "generationId": generation, "rackId": rack}
    )
    asg = co.encode_assignment(pv, {"assignedPartitions": assigned, "userData": asg_ud})
    expect = {
        "subscription_version": pv,
        "subscribed_topics": topics,
        "owned_partitions": owned if pv >= 1 else None,
        "subscription_user_data": sub_ud,
        "generation_id": generation if pv >= 2 else None,
        "rack_id": rack if pv >= 3 else None,
        "assignment_version": pv,
        "assignment": assigned,
        "assignment_user_data": asg_ud,
        "subscription_bytes": sub,
        "assignment_bytes": asg,
    }
    return sub, asg, expect


@st.composite
def group_metadata(draw, max_members: int = 3):
    version = draw(st.integers(0, 4))
    consumer = draw(st.booleans())
    protocol_type = "consumer" if consumer else draw(names.filter(lambda s: s != "consumer"))
    members, expected_members = [], []
    for _ in range(draw(st.integers(0, max_members))):
        if consumer:
            sub, asg, mexp = draw(consumer_protocol())
        else:
            sub, asg = draw(st.binary(max_size=10)), draw(st.binary(max_size=10))
            mexp = {
                "subscription_version": None,
                "subscribed_topics": None,
                "assignment": None,
                "subscription_bytes": sub,
                "assignment_bytes": asg,
            }
        m = {
            "memberId": draw(names),
            "groupInstanceId": draw(st.none() | names) if version >= 3 else None,
            "clientId": draw(names),
            "clientHost": draw(names),
            "rebalanceTimeout": draw(int32s) if version >= 1 else -1,
            "sessionTimeout": draw(int32s),
            "subscription": sub,
            "assignment": asg,
        }
        members.append(m)
        expected_members.append(
            {
                "member_id": m["memberId"],
                "group_instance_id": m["groupInstanceId"],
                "client_id": m["clientId"],
                "client_host": m["clientHost"],
                "session_timeout_ms": m["sessionTimeout"],
                # v0 has no rebalance timeout: the decoder reports -1 (the fold applies
                # Kafka's "use the session timeout" rule later)
                "rebalance_timeout_ms": m["rebalanceTimeout"],
                **mexp,
            }
        )
    state_ts = draw(timestamps) if version >= 2 else -1
    data = {
        "protocolType": protocol_type,
        "generation": draw(int32s),
        "protocol": draw(st.none() | names),
        "leader": draw(st.none() | names),
        "currentStateTimestamp": state_ts,
        "members": members,
    }
    group = draw(names)
    key = co.encode_key(co.CoordinatorKey(2, group))
    value = co.encode_value(2, version, data)
    expect = {
        "record_type": 2,
        "group_id": group,
        "value_version": version,
        "is_tombstone": False,
        "group_metadata": {
            "protocol_type": protocol_type,
            "generation": data["generation"],
            "protocol": data["protocol"],
            "leader": data["leader"],
            "current_state_timestamp": (None if state_ts == -1 else EPOCH + dt.timedelta(milliseconds=state_ts)),
            "members": expected_members,
        },
    }
    return key, value, expect


@st.composite
def group_tombstone(draw):
    group = draw(names)
    return (
        co.encode_key(co.CoordinatorKey(2, group)),
        None,
        {"record_type": 2, "group_id": group, "is_tombstone": True, "group_metadata": None},
    )


OTHER_TYPES = sorted(t for t in RECORD_TYPES if t > 2)


@st.composite
def other_record(draw):
    """Any KIP-848 / share / streams record, its value built from the schema."""
    rtype = draw(st.sampled_from(OTHER_TYPES))
    _, key_schema, value_schema, _ = RECORD_TYPES[rtype]
    kdata = draw(st_fields(key_schema.fields, 0))
    key = struct.pack(">h", rtype) + encode_message(key_schema, 0, kdata)
    version = 0
    vdata = draw(st_fields(value_schema.fields, version))
    value = struct.pack(">h", version) + encode_message(value_schema, version, vdata)
    tombstone = draw(st.booleans())
    return (
        key,
        (None if tombstone else value),
        {
            "record_type": rtype,
            "group_id": kdata["groupId"],
            "member_id": kdata.get("memberId"),
            "value_version": None if tombstone else version,
            "is_tombstone": tombstone,
            "_schema": (value_schema, version),
        },
    )


records = st.one_of(offset_commit(), offset_tombstone(), group_metadata(), group_tombstone(), other_record())


@st.composite
def segment(draw, max_entries: int = 6):
    """(segment bytes, expected rows in log order, base offset of every entry)."""
    out = bytearray()
    rows = []
    offset = draw(st.integers(0, 1000))
    ts0 = 1_700_000_000_000
    for _ in range(draw(st.integers(1, max_entries))):
        kind = draw(st.sampled_from(["v2", "v2", "txn", "empty", "legacy", "wrapper"]))
        if kind in ("v2", "txn"):
            recs = draw(st.lists(records, min_size=1, max_size=4))
            gaps = sorted(draw(st.sets(st.integers(0, 20), min_size=len(recs), max_size=len(recs))))
            codec = draw(st.integers(0, 4))
            pid = draw(st.integers(0, 2**40)) if kind == "txn" else -1
            stamped = [(offset + g, ts0 + draw(st.integers(-(10**6), 10**6)), k, v) for g, (k, v, _) in zip(gaps, recs)]
            out += encode_batch(
                offset,
                stamped,
                compression=codec,
                producer_id=pid,
                producer_epoch=0 if pid >= 0 else -1,
                transactional=kind == "txn",
                base_sequence=0 if pid >= 0 else -1,
                partition_leader_epoch=draw(int32s),
            )
            for (o, ts, k, v), (_, _, exp) in zip(stamped, recs):
                rows.append(
                    {
                        "log_offset": o,
                        "log_timestamp": ts * 1000,
                        "raw_key": k,
                        "raw_value": v,
                        "magic": 2,
                        "compression": ["none", "gzip", "snappy", "lz4", "zstd"][codec],
                        "producer_id": pid,
                        "is_transactional": kind == "txn",
                        "is_control": False,
                        "batch_base_offset": offset,
                        **exp,
                    }
                )
            offset = stamped[-1][0] + 1
            if kind == "txn":
                commit = draw(st.booleans())
                out += encode_control_batch(offset, pid, 0, commit, ts0, coordinator_epoch=draw(int32s))
                rows.append(
                    {
                        "log_offset": offset,
                        "is_control": True,
                        "producer_id": pid,
                        "control_type": "COMMIT" if commit else "ABORT",
                        "record_type": None,
                    }
                )
                offset += 1
        elif kind == "empty":
            span = draw(st.integers(1, 5))
            out += encode_batch(offset, [], last_offset_delta=span - 1)
            offset += span
        elif kind == "legacy":
            magic = draw(st.integers(0, 1))
            k, v, exp = draw(records)
            ts = ts0 + draw(st.integers(0, 1000))
            out += encode_legacy_message(offset, magic, k, v, ts)
            rows.append(
                {
                    "log_offset": offset,
                    "log_timestamp": ts * 1000 if magic == 1 else None,
                    "magic": magic,
                    "compression": "none",
                    "raw_key": k,
                    "raw_value": v,
                    "producer_id": -1,
                    **exp,
                }
            )
            offset += 1
        else:
            magic, codec = draw(st.integers(0, 1)), draw(st.integers(1, 3))
            recs = draw(st.lists(records, min_size=1, max_size=3))
            msgs = [(offset + i, ts0 + i, k, v) for i, (k, v, _) in enumerate(recs)]
            out += encode_legacy_wrapper(msgs, magic, codec, timestamp=ts0)
            for (o, ts, k, v), (_, _, exp) in zip(msgs, recs):
                rows.append(
                    {
                        "log_offset": o,
                        "log_timestamp": ts * 1000 if magic == 1 else None,
                        "magic": magic,
                        "compression": ["none", "gzip", "snappy", "lz4"][codec],
                        "raw_key": k,
                        "raw_value": v,
                        **exp,
                    }
                )
            offset += len(recs)
    return bytes(out), rows, offset


def entry_bounds(data: bytes) -> list[tuple[int, int]]:
    """(start, end) of each top-level entry of a valid segment, from its headers."""
    out, pos = [], 0
    while pos + 12 <= len(data):
        size = struct.unpack_from(">i", data, pos + 8)[0]
        out.append((pos, pos + 12 + size))
        pos += 12 + size
    return out


EXTREMES_32 = [0, 1, -1, 13, 14, 17, 48, 49, 60, 61, 2**31 - 1, -(2**31), 2**30, 0x7FFF, 0xFFFF]
EXTREMES_64 = [0, -1, 2**63 - 1, -(2**63), 2**62, 2**63 - 2**31]
# (offset inside an entry, width): base offset, size, leader epoch, magic+crc, attributes,
# lastOffsetDelta, base/max timestamps, producer id, record count, first record bytes
HEADER_FIELDS = [
    (0, 8),
    (8, 4),
    (12, 4),
    (17, 4),
    (21, 2),
    (23, 4),
    (27, 8),
    (35, 8),
    (43, 8),
    (57, 4),
    (61, 4),
    (16, 1),
    (18, 4),
    (22, 4),
]


@st.composite
def mutate(draw, data: bytes, bounds: list[tuple[int, int]], max_steps: int = 3):
    buf = bytearray(data)
    for _ in range(draw(st.integers(1, max_steps))):
        n = len(buf)
        op = draw(
            st.sampled_from(
                [
                    "flip",
                    "truncate",
                    "insert",
                    "delete",
                    "overwrite",
                    "field",
                    "field",
                    "offset",
                    "duplicate",
                    "drop",
                    "shuffle",
                    "varint",
                ]
            )
        )
        if op == "flip" and n:
            i = draw(st.integers(0, n - 1))
            buf[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "truncate":
            del buf[draw(st.integers(0, n)) :]
        elif op == "insert":
            i = draw(st.integers(0, n))
            buf[i:i] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete" and n:
            i = draw(st.integers(0, n - 1))
            del buf[i : i + draw(st.integers(1, 8))]
        elif op == "overwrite" and n:
            i = draw(st.integers(0, n - 1))
            chunk = draw(st.binary(min_size=1, max_size=16))
            buf[i : i + len(chunk)] = chunk
        elif op == "field" and bounds:
            start, _ = draw(st.sampled_from(bounds))
            rel, width = draw(st.sampled_from(HEADER_FIELDS))
            if width == 8:
                raw = struct.pack(">q", draw(st.sampled_from(EXTREMES_64)))
            elif width == 4:
                raw = struct.pack(">I", draw(st.sampled_from(EXTREMES_32)) & 0xFFFFFFFF)
            elif width == 2:
                raw = struct.pack(">H", draw(st.integers(0, 0xFFFF)))
            else:
                raw = bytes([draw(st.integers(0, 255))])
            if start + rel + width <= len(buf):
                buf[start + rel : start + rel + width] = raw
        elif op == "offset" and bounds:
            # an entry's offset (never covered by a CRC) at the ends of the int64 range
            start, _ = draw(st.sampled_from(bounds))
            if start + 8 <= len(buf):
                buf[start : start + 8] = struct.pack(
                    ">q", draw(st.sampled_from([2**63 - 1, 2**63 - 2, 2**63 - 3, 2**63 - 20, -1, -2, -(2**63)]))
                )
        elif op == "varint" and n:
            i = draw(st.integers(0, n - 1))
            raw = draw(
                st.sampled_from(
                    [
                        b"\xff\xff\xff\xff\x0f",
                        b"\xfe\xff\xff\xff\x0f",
                        b"\x80\x80\x80\x80\x80\x01",
                        b"\x01",
                        b"\x7f",
                        b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",
                    ]
                )
            )
            buf[i : i + len(raw)] = raw
        elif op in ("duplicate", "drop", "shuffle") and len(bounds) > 0:
            entries = [data[s:e] for s, e in bounds]
            if op == "duplicate":
                i = draw(st.integers(0, len(entries) - 1))
                entries.insert(draw(st.integers(0, len(entries))), entries[i])
            elif op == "drop":
                del entries[draw(st.integers(0, len(entries) - 1))]
            else:
                entries = draw(st.permutations(entries))
            buf = bytearray(b"".join(entries))
    return bytes(buf)


# ------------------------------------------------------------------------------------------
# comparison with expectations
# ------------------------------------------------------------------------------------------


def table_rows(table) -> list[dict]:
    if table is None:
        return []
    for name in ("log_timestamp", "commit_timestamp", "expire_timestamp"):
        i = table.schema.get_field_index(name)
        table = table.set_column(i, name, table.column(name).cast(pa.int64()))
    return table.to_pylist()


def assert_rows_match(got: list[dict], expected: list[dict]) -> None:
    assert len(got) == len(expected), (len(got), len(expected))
    for g, e in zip(got, expected):
        assert g["offsets_partition"] == PARTITION and g["decode_status"] == "ok"
        for k, v in e.items():
            if k == "_schema":
                if g["raw_value"] is not None:
                    schema, version = v
                    # the decoded JSON, written back with the schema, gives the value's bytes again
                    assert (
                        struct.pack(">h", version) + encode_message(schema, version, json.loads(g["value_json"]))
                        == g["raw_value"]
                    )
            elif k == "group_metadata" and v is not None:
                gm = g["group_metadata"]
                assert {x: gm[x] for x in v if x != "members"} == {x: y for x, y in v.items() if x != "members"}
                assert len(gm["members"]) == len(v["members"])
                for gmember, emember in zip(gm["members"], v["members"]):
                    assert {x: gmember[x] for x in emember} == emember
            else:
                assert g[k] == v, (k, g[k], v)


# ------------------------------------------------------------------------------------------
# round trip
# ------------------------------------------------------------------------------------------


@fuzz(250)
@given(segment(), st.integers(1, 5))
def test_valid_segment_decodes_to_exactly_the_records_written(seg, chunk_rows):
    data, expected, end = seg
    table, dec = decode_segment(data, chunk_rows=chunk_rows)
    assert_rows_match(table_rows(table), expected)
    assert dec.records == len(expected) and dec.trailing_bytes == 0
    assert dec.next_offset == end


@fuzz(150)
@given(segment(), st.data())
def test_incremental_read_returns_exactly_the_records_from_the_start_offset(seg, data):
    raw, expected, end = seg
    start = data.draw(st.integers(0, end + 2))
    table, dec = decode_segment(raw, start_offset=start)
    assert_rows_match(table_rows(table), [r for r in expected if r["log_offset"] >= start])
    assert dec.next_offset == end


@fuzz(200)
@given(segment(), st.data())
def test_duplicated_dropped_or_shuffled_batches_decode_entry_by_entry(seg, data):
    """Reordering whole entries keeps every CRC valid: each entry decodes to its own records."""
    raw, _, _ = seg
    bounds = entry_bounds(raw)
    order = data.draw(st.lists(st.integers(0, len(bounds) - 1), max_size=len(bounds) + 2))
    entries = [raw[s:e] for s, e in bounds]
    per_entry = [
        [(r[0], r[2], r[3]) for b in SegmentReader(entries[i]) for r in b.records] for i in range(len(entries))
    ]
    got = [
        (r[0], r[2], r[3])
        for b in SegmentReader(b"".join(entries[i] for i in order), file=PATH, partition=PARTITION)
        for r in b.records
    ]
    assert got == [x for i in order for x in per_entry[i]]


# ------------------------------------------------------------------------------------------
# mutations and random bytes: only located DecodeErrors
# ------------------------------------------------------------------------------------------


@st.composite
def mutated_segment(draw):
    raw, _, end = draw(segment(max_entries=4))
    return draw(mutate(raw, entry_bounds(raw))), end


@fuzz(900)
@given(mutated_segment(), st.booleans(), st.integers(0, 40))
def test_mutated_segment_decodes_or_raises_a_located_decode_error(seg, verify_crc, start):
    data, _ = seg
    decode_or_located_error(data, verify_crc=verify_crc, start_offset=start)


@fuzz(800)
@given(st.binary(max_size=400), st.booleans())
def test_random_bytes_decode_or_raise_a_located_decode_error(data, verify_crc):
    decode_or_located_error(data, verify_crc=verify_crc)


@st.composite
def framed_random_body(draw):
    """Random bytes behind a plausible entry header, so the reader gets past the framing."""
    magic = draw(st.sampled_from([0, 1, 2]))
    body = draw(st.binary(min_size=5, max_size=300))
    if magic == 2:
        attrs = struct.pack(">h", draw(st.integers(0, 0x7F)))
        head = struct.pack(">qiib", draw(st.integers(0, 100)), 4 + 1 + 4 + 2 + len(body), 0, 2) + b"\0\0\0\0" + attrs
        return head + body
    return struct.pack(">qiIbb", draw(st.integers(0, 100)), 6 + len(body), 0, magic, draw(st.integers(0, 0x0F))) + body


@fuzz(800)
@given(framed_random_body())
def test_random_batch_bodies_without_crc_decode_or_raise_a_located_decode_error(data):
    decode_or_located_error(data, verify_crc=False)


# ------------------------------------------------------------------------------------------
# key/value-level mutations framed into valid batches (every CRC is right)
# ------------------------------------------------------------------------------------------


def mutate_bytes(draw, raw: bytes) -> bytes:
    buf = bytearray(raw)
    for _ in range(draw(st.integers(1, 3))):
        n = len(buf)
        op = draw(st.sampled_from(["flip", "truncate", "insert", "int", "int", "varint"]))
        if op == "flip" and n:
            buf[draw(st.integers(0, n - 1))] ^= 1 << draw(st.integers(0, 7))
        elif op == "truncate":
            del buf[draw(st.integers(0, n)) :]
        elif op == "insert":
            i = draw(st.integers(0, n))
            buf[i:i] = draw(st.binary(min_size=1, max_size=6))
        elif op == "int" and n:
            # a length / count / version field set to an extreme
            width = draw(st.sampled_from([2, 4, 8]))
            i = draw(st.integers(0, n - 1))
            value = draw(st.sampled_from([0, -1, 1, -2, 0x7F, 0x7FFF, 0x7FFFFFFF, -(2**15), -(2**31), 2**62]))
            fmt = {2: ">H", 4: ">I", 8: ">Q"}[width]
            buf[i : i + width] = struct.pack(fmt, value & ((1 << (8 * width)) - 1))
        elif op == "varint" and n:
            i = draw(st.integers(0, n - 1))
            raw_v = draw(
                st.sampled_from(
                    [b"\x00", b"\xff\xff\xff\xff\x0f", b"\xfe\xff\xff\xff\x07", b"\x80\x80\x80\x80\x80\x01"]
                )
            )
            buf[i : i + len(raw_v)] = raw_v
    return bytes(buf)


@st.composite
def batch_with_mutated_record(draw):
    recs = draw(st.lists(records, min_size=1, max_size=3))
    pairs = [[k, v] for k, v, _ in recs]
    i = draw(st.integers(0, len(pairs) - 1))
    j = draw(st.sampled_from([0, 1] if pairs[i][1] is not None else [0]))
    pairs[i][j] = mutate_bytes(draw, pairs[i][j])
    ts0 = 1_700_000_000_000
    kind = draw(st.sampled_from(["v2", "legacy", "wrapper", "control"]))
    if kind == "v2":
        return encode_batch(
            5, [(5 + n, ts0, k, v) for n, (k, v) in enumerate(pairs)], compression=draw(st.integers(0, 4))
        )
    if kind == "legacy":
        return b"".join(
            encode_legacy_message(5 + n, draw(st.integers(0, 1)), k, v, ts0) for n, (k, v) in enumerate(pairs)
        )
    if kind == "wrapper":
        return encode_legacy_wrapper(
            [(5 + n, ts0, k, v) for n, (k, v) in enumerate(pairs)], draw(st.integers(0, 1)), draw(st.integers(1, 3))
        )
    # a control batch whose key / value are mutated markers
    key, value = (
        mutate_bytes(draw, co.encode_control_key(draw(st.integers(0, 1)))),
        mutate_bytes(draw, co.encode_end_txn_marker(draw(int32s))),
    )
    return encode_batch(5, [(5, ts0, key, value)], producer_id=9, producer_epoch=0, transactional=True, control=True)


@fuzz(800)
@given(batch_with_mutated_record())
def test_mutated_keys_and_values_in_valid_batches_decode_or_raise_a_located_decode_error(data):
    decode_or_located_error(data)


# ------------------------------------------------------------------------------------------
# codec functions on their own: random bytes and mutated valid encodings
# ------------------------------------------------------------------------------------------

ALL_TYPES = sorted(RECORD_TYPES)


@fuzz(1000)
@given(st.binary(max_size=120), st.sampled_from(ALL_TYPES + [9, 99, -1]))
def test_codec_functions_on_random_bytes_raise_only_decode_errors(raw, rtype):
    for fn, args in (
        (co.decode_key, (raw,)),
        (co.decode_value, (rtype, raw)),
        (co.decode_subscription, (raw,)),
        (co.decode_assignment, (raw,)),
        (co.decode_control_key, (raw,)),
        (co.decode_end_txn_marker, (raw,)),
    ):
        codec_only_decode_errors(fn, *args)
    if rtype in (0, 1):
        codec_only_decode_errors(co.decode_offset_commit_value, rtype, raw)
    # a type prefix the decoder knows, followed by random bytes
    codec_only_decode_errors(co.decode_key, struct.pack(">h", rtype) + raw)
    for version in (0, 1, 2, 3, 4):
        if rtype in RECORD_TYPES:
            decoded = codec_only_decode_errors(co.decode_value, rtype, struct.pack(">h", version) + raw)
            if rtype == 2 and decoded is not None:
                decode_group_metadata(decoded[1])


@fuzz(500)
@given(st.one_of(offset_commit(), group_metadata(), other_record()), st.data())
def test_codec_functions_on_mutated_valid_values_raise_only_decode_errors(rec, data):
    key, value, exp = rec
    rtype = exp["record_type"]
    codec_only_decode_errors(co.decode_key, mutate_bytes(data.draw, key))
    if value is None:
        return
    bad = mutate_bytes(data.draw, value)
    decoded = codec_only_decode_errors(co.decode_value, rtype, bad)
    if rtype in (0, 1):
        codec_only_decode_errors(co.decode_offset_commit_value, rtype, bad)
    if rtype == 2 and decoded is not None:
        decode_group_metadata(decoded[1])  # swallows bad consumer-protocol bytes itself


@fuzz(400)
@given(consumer_protocol(), st.data())
def test_consumer_protocol_mutations_raise_only_decode_errors(proto, data):
    sub, asg, _ = proto
    codec_only_decode_errors(co.decode_subscription, mutate_bytes(data.draw, sub))
    codec_only_decode_errors(co.decode_assignment, mutate_bytes(data.draw, asg))


@fuzz(400)
@given(st.sampled_from([1, 2, 3, 4]), st.binary(max_size=200), st.sampled_from([0, 1, 2]))
def test_decompress_random_bytes_raises_only_decode_errors(codec, raw, magic):
    codec_only_decode_errors(decompress, codec, raw, magic)


@fuzz(100)
@given(mutated_segment())
def test_segment_end_scan_never_raises(seg):
    """scan_segment_end (incremental planning) hops over headers only: any bytes give an answer."""
    import tempfile

    from lib.codec.segments import scan_segment_end

    data, _ = seg
    with tempfile.NamedTemporaryFile(suffix=".log") as f:
        f.write(data)
        f.flush()
        next_offset, trailing = scan_segment_end(f.name)
    assert 0 <= trailing <= len(data)
