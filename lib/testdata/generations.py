"""Classic generations as lib.assignors.fast_audit takes them, for its tests and its
measurement: the GroupMetadata records of an offsets partition in the order
lib.replay.assignment.AssignmentTracker audits them, as a GenerationBatch; and a log dir's
GroupMetadata records as lib.decode reads them."""

from __future__ import annotations

import datetime as dt
import os

import pyarrow as pa
import pyarrow.compute as pc

from lib.assignors.fast_audit import GenerationBatch
from lib.decode import SegmentDecoder
from lib.source.topic_log import find_topic_partitions
from schemas.records import RecordType as R

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
RECORD_COLUMNS = ["offsets_partition", "log_offset", "log_timestamp", "record_type", "group_id", "is_tombstone"]


def tracker_events(records: list[dict]) -> list[tuple[dict, bool]]:
    """One offsets partition's records (offsets_log rows, group_metadata as a dict) -> its
    GroupMetadata records as AssignmentTracker audits them, (record, deleted): a generation's
    last record when the group's next record shows it over (or at the end, in the order the
    tracker keeps the open ones), a tombstone as a deletion."""
    events: list[tuple[dict, bool]] = []
    pending: dict[str, dict] = {}  # group -> its open generation's last record
    for rec in records:
        if rec["record_type"] != R.GROUP_METADATA:
            continue
        group_id, md = rec["group_id"], rec["group_metadata"]
        before = pending.get(group_id)
        if rec["is_tombstone"] or md is None:
            if before is not None:
                events.append((pending.pop(group_id), False))
            events.append((rec, True))
            continue
        if before is not None and before["group_metadata"].get("generation") != md.get("generation"):
            events.append((pending.pop(group_id), False))
        pending[group_id] = rec
    events.extend((rec, False) for rec in pending.values())
    return events


def batch_of(events: list[tuple[dict, bool]], values: pa.Array | None = None) -> GenerationBatch:
    """`values`: the events' GroupMetadata values as Arrow (else the records' dicts)."""
    return GenerationBatch.of(
        values if values is not None else [None if deleted else rec["group_metadata"] for rec, deleted in events],
        [rec["group_id"] for rec, _ in events],
        [rec["offsets_partition"] for rec, _ in events],
        [rec["log_offset"] for rec, _ in events],
        [rec.get("log_timestamp_ms") for rec, _ in events],
        [deleted for _, deleted in events],
    )


def group_metadata_records(log_dir: str) -> list[tuple[list[dict], pa.Array]]:
    """Per offsets partition of the log dir: its GroupMetadata records as dicts (with
    `log_timestamp_ms`, and `row`: the record's row in the column) and their group_metadata
    column as lib.decode gives it."""
    out = []
    partitions = sorted(int(d.rsplit("-", 1)[1]) for d in os.listdir(log_dir) if d.startswith("__consumer_offsets-"))
    for p in partitions:
        folder = os.path.join(log_dir, f"__consumer_offsets-{p}")
        table = pa.Table.from_batches(
            [
                b
                for name in sorted(f for f in os.listdir(folder) if f.endswith(".log"))
                for b in SegmentDecoder(os.path.join(folder, name), p)
            ]
        )
        table = table.filter(
            pc.and_(pc.equal(table["record_type"], R.GROUP_METADATA), pc.equal(table["decode_status"], "ok"))
        )
        values = table.column("group_metadata").combine_chunks()
        records = table.select(RECORD_COLUMNS).to_pylist()
        for i, (rec, value) in enumerate(zip(records, values.to_pylist())):
            at = rec.pop("log_timestamp")
            rec["log_timestamp_ms"] = None if at is None else (at - EPOCH) // dt.timedelta(milliseconds=1)
            rec["group_metadata"] = value
            rec["row"] = i
        out.append((records, values))
    return out


def floors_of(log_dir: str) -> dict[str, int]:
    """Partitions per topic the log dir's folders show (what the driver knows before a run)."""
    floors: dict[str, int] = {}
    for t in find_topic_partitions(log_dir):
        floors[t.topic] = max(floors.get(t.topic, 0), t.partition + 1)
    return floors


def partition_batch(records: list[dict], values: pa.Array) -> tuple[list[tuple[dict, bool]], GenerationBatch]:
    """One partition's tracker events and their batch, the values taken from the decoder's column."""
    events = tracker_events(records)
    return events, batch_of(events, values.take(pa.array([rec["row"] for rec, _ in events], pa.int64())))
