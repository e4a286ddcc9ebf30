"""Records -> offsets_log rows, record by record in Python (pyarrow, no numba): the reference
decode path, and the one lib.decode.fast falls back to for what it does not compile."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from lib.codec.compression import CODEC_NAMES
from lib.codec.errors import DecodeError, UnknownRecordTypeError
from lib.codec.segments import Batch, SegmentReader, read_segment_bytes
from lib.codec.serde import (
    decode_control_key,
    decode_end_txn_marker,
    decode_key,
    decode_offset_commit_value,
    decode_value,
    record_type_of,
    value_version,
)
from lib.decode.group_metadata import group_metadata as fast_group_metadata
from lib.decode.values import decode_consumer_member, instant_ms, member_row, micros, optional_ms
from schemas.records import CONTROL_TYPES, OFFSET_COMMIT_TYPES, RECORD_TYPES, RecordType
from schemas.tables import OFFSETS_LOG

SCHEMA = OFFSETS_LOG.arrow_schema
PLAIN_SCHEMA = SCHEMA.remove(SCHEMA.get_field_index("group_metadata"))  # (offsets_log's plain files)
COLUMNS = OFFSETS_LOG.column_names
_TS_COLUMNS = ("log_timestamp", "commit_timestamp", "expire_timestamp")
DEFAULT_CHUNK_ROWS = 65536


class Columns:
    """Column-wise accumulator; one Python list per column."""

    def __init__(self):
        self.cols = {name: [] for name in COLUMNS}

    def to_batch(self) -> pa.RecordBatch:
        arrays = []
        for field in SCHEMA:
            values = self.cols[field.name]
            if field.name in _TS_COLUMNS:
                arr = pa.array(values, pa.int64()).cast(pa.timestamp("ms", tz="UTC")).cast(field.type)
            else:
                arr = pa.array(values, field.type)
            arrays.append(arr)
        return pa.RecordBatch.from_arrays(arrays, schema=SCHEMA)


def decode_group_metadata(data: dict) -> dict:
    """GroupMetadataValue (JsonConverter form) -> the group_metadata struct, with the
    consumer-protocol bytes decoded when protocolType is "consumer" (spec 3)."""
    is_consumer = data.get("protocolType") == "consumer"
    members = []
    for m in data.get("members") or []:
        sub_raw = base64.b64decode(m["subscription"]) if m.get("subscription") is not None else None
        asg_raw = base64.b64decode(m["assignment"]) if m.get("assignment") is not None else None
        member = member_row(
            m["memberId"],
            m.get("groupInstanceId"),
            m["clientId"],
            m["clientHost"],
            m.get("rebalanceTimeout", -1),
            m["sessionTimeout"],
            sub_raw,
            asg_raw,
        )
        if is_consumer:
            decode_consumer_member(member, sub_raw, asg_raw)
        members.append(member)
    return {
        "protocol_type": data["protocolType"],
        "generation": data["generation"],
        "protocol": data.get("protocol"),
        "leader": data.get("leader"),
        # nested timestamps go straight into an Arrow timestamp[us] column
        "current_state_timestamp": micros(data.get("currentStateTimestamp", -1)),
        "members": members,
    }


def _append_record(cols: dict, partition: int, batch: Batch, rec, segment_file: str) -> None:
    offset, timestamp, key, value = rec
    c = cols
    c["offsets_partition"].append(partition)
    c["log_offset"].append(offset)
    c["log_timestamp"].append(optional_ms(timestamp))
    c["batch_base_offset"].append(batch.base_offset)
    c["magic"].append(batch.magic)
    c["compression"].append(CODEC_NAMES.get(batch.compression, str(batch.compression)))
    c["producer_id"].append(batch.producer_id)
    c["producer_epoch"].append(batch.producer_epoch)
    c["is_transactional"].append(batch.is_transactional)
    c["is_control"].append(batch.is_control)
    c["is_tombstone"].append(value is None)
    c["segment_file"].append(segment_file)
    c["raw_key"].append(key)
    c["raw_value"].append(value)

    control_type = coordinator_epoch = record_type = type_name = key_version = version = None
    group_id = member_id = topic = tp = committed = leader_epoch = metadata = None
    commit_ts = expire_ts = topic_id = group_metadata = value_json = None
    status = "ok"
    if batch.is_control:
        key_version, ctype = decode_control_key(key)
        control_type = CONTROL_TYPES.get(ctype, f"UNKNOWN({ctype})")
        if ctype in (0, 1):
            version, coordinator_epoch = decode_end_txn_marker(value)
    else:
        if key is None:
            raise DecodeError("data record with a null key")
        record_type = record_type_of(key)
        try:
            ckey = decode_key(key)
        except UnknownRecordTypeError:
            status = "unknown_type"
            ckey = None
        if ckey is not None:
            key_version = 0
            type_name = RECORD_TYPES[record_type][0]
            group_id = ckey.group_id
            member_id = ckey.member_id
            if record_type in OFFSET_COMMIT_TYPES:
                topic, tp = ckey.topic, ckey.partition
                if value is not None:
                    oc = decode_offset_commit_value(record_type, value)
                    version, committed, metadata = oc.version, oc.offset, oc.metadata
                    leader_epoch = None if oc.leader_epoch == -1 else oc.leader_epoch
                    commit_ts, expire_ts, topic_id = (
                        instant_ms(oc.commit_timestamp),
                        optional_ms(oc.expire_timestamp),
                        oc.topic_id,
                    )
            elif value is not None:
                fast = fast_group_metadata(value) if record_type == RecordType.GROUP_METADATA else None
                if fast is not None:
                    version, group_metadata = value_version(value), fast
                    data = None
                else:
                    decoded = decode_value(record_type, value)
                    assert decoded is not None, "a value, not a tombstone"
                    version, data = decoded
                if fast is not None:
                    pass
                elif record_type == RecordType.GROUP_METADATA:
                    assert data is not None, "decode_value read it"
                    group_metadata = decode_group_metadata(data)
                else:
                    value_json = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
        elif value is not None and len(value) >= 2:
            version = value_version(value)
    c["control_type"].append(control_type)
    c["coordinator_epoch"].append(coordinator_epoch)
    c["record_type"].append(record_type)
    c["record_type_name"].append(type_name)
    c["key_version"].append(key_version)
    c["value_version"].append(version)
    c["decode_status"].append(status)
    c["group_id"].append(group_id)
    c["member_id"].append(member_id)
    c["topic"].append(topic)
    c["partition"].append(tp)
    c["committed_offset"].append(committed)
    c["leader_epoch"].append(leader_epoch)
    c["metadata"].append(metadata)
    c["commit_timestamp"].append(commit_ts)
    c["expire_timestamp"].append(expire_ts)
    c["topic_id"].append(topic_id)
    c["group_metadata"].append(group_metadata)
    c["value_json"].append(value_json)


def _drop_partial_row(cols: dict) -> None:
    """Undo the columns a failed _append_record had already filled for its row."""
    n = min(len(v) for v in cols.values())
    for v in cols.values():
        del v[n:]


def _bytes_or_none(b):
    return None if b is None else bytes(b)


class PythonDecoder:
    """The reference decode path, record by record in Python: one segment file (or `data`)
    into offsets_log Arrow batches of at most `chunk_rows` rows. After iteration: `records`,
    `next_offset` (after the last batch) and `trailing_bytes`. lib.decode.SegmentDecoder is the
    interface; lib.decode.fast hands byte ranges it does not compile to this class."""

    def __init__(
        self,
        path: str,
        partition: int,
        *,
        start_offset: int = 0,
        chunk_rows: int = DEFAULT_CHUNK_ROWS,
        verify_crc: bool = True,
        data=None,
        source_name: str | None = None,
        quarantine: list | None = None,
        rows: Callable[[], Any] = Columns,
    ):
        """`data`: the bytes to decode instead of reading `path` (fetched batches);
        `source_name`: what the segment_file column says (default: the file name);
        `quarantine`: a list to which undecodable batches and records are appended (as
        quarantined_records rows without run_id) instead of raising;
        `rows`: makes the row accumulator of each output batch (lib.decode.fast passes one
        that adds to rows it shares between byte ranges)."""
        self.path = path
        self.data = data
        self.source_name = source_name
        self.partition = partition
        self.start_offset = start_offset
        self.chunk_rows = chunk_rows
        self.verify_crc = verify_crc
        self.records = 0
        self.batch_group_metadata: dict[int, dict] | None = None
        self._batch_parts: Callable[[], tuple] | None = None  # (batch_parts, set by lib.decode.fast)
        self.next_offset: int | None = None
        self.trailing_bytes = 0
        self.quarantine = quarantine
        self._rows = rows

    def batch_parts(self) -> tuple[pa.RecordBatch | None, pa.RecordBatch | None]:
        """The batch just yielded in the two parts offsets_log writes apart, built on demand
        by the fast path as it built the batch: its rows without a GroupMetadata value, without
        that column, and its rows with one. (None, None) where it cannot (no row holds a value,
        rows decoded in Python, the reference decoder): the caller filters the batch."""
        make = self._batch_parts
        return make() if make is not None else (None, None)

    def _quarantine(self, e: DecodeError, level: str, name: str, raw_bytes=None, raw_key=None, raw_value=None):
        assert self.quarantine is not None, "called only when quarantining"
        self.quarantine.append(
            {
                "offsets_partition": self.partition,
                "segment_file": name,
                "byte_position": e.position or 0,
                "log_offset": e.offset if e.offset is not None else -1,
                "level": level,
                "error_kind": type(e).__name__,
                "error": e.message,
                "raw_bytes": raw_bytes,
                "raw_key": raw_key,
                "raw_value": raw_value,
                "file_path": self.path,
            }
        )

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        name = self.source_name or os.path.basename(self.path)
        data = self.data if self.data is not None else read_segment_bytes(self.path)
        on_corrupt = None
        if self.quarantine is not None:

            def on_corrupt(e, raw):
                self._quarantine(e, "batch", name, raw_bytes=raw)

        reader = SegmentReader(
            data,
            file=self.path,
            partition=self.partition,
            verify_crc=self.verify_crc,
            skip_below=self.start_offset,
            on_corrupt=on_corrupt,
        )
        acc = self._rows()
        cols = acc.cols
        n = 0
        for batch in reader:
            self.next_offset = batch.last_offset + 1
            if batch.last_offset < self.start_offset:
                continue
            for rec in batch.records:
                if rec[0] < self.start_offset:
                    continue
                try:
                    _append_record(cols, self.partition, batch, rec, name)
                except DecodeError as e:
                    e.locate(file=self.path, partition=self.partition, offset=rec[0], position=batch.position)
                    if self.quarantine is None:
                        raise e from None
                    _drop_partial_row(cols)
                    self._quarantine(
                        e, "record", name, raw_key=_bytes_or_none(rec[2]), raw_value=_bytes_or_none(rec[3])
                    )
                    continue
                n += 1
                if n >= self.chunk_rows:
                    self.records += n
                    yield acc.to_batch()
                    acc = self._rows()
                    cols = acc.cols
                    n = 0
        self.trailing_bytes = reader.trailing_bytes
        if reader.last_skipped_offset is not None and (self.next_offset or 0) <= reader.last_skipped_offset:
            self.next_offset = reader.last_skipped_offset + 1
        if n:
            self.records += n
            yield acc.to_batch()
