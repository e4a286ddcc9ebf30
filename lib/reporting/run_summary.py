"""What a replay run prints after its commits, read with delta-rs and pyarrow from the small
tables only (checkpoints, the state tables, this --now's lag rows, the audit's columns it
needs): no Spark job, and nothing that grows with the log is scanned. The run's own record
counts come from its tasks."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lib import storage
from lib.lake.delta import open_delta, read_small_table, table_exists, table_files, table_path
from schemas import tables as T
from schemas.records import RECORD_TYPES

LIMIT = 50


def _table(warehouse: str, table: T.Table, columns: list[str] | None = None) -> pa.Table | None:
    path = table_path(warehouse, table)
    if not table_exists(path):
        return None
    return open_delta(path).to_pyarrow_table(columns=columns)


def _of(table: pa.Table | None, partitions: list[int]) -> pa.Table | None:
    if table is None:
        return None
    return table.filter(pc.is_in(table.column("offsets_partition"), pa.array(partitions, pa.int32())))


def _count(table: pa.Table | None) -> int:
    return 0 if table is None else table.num_rows


def summarize(warehouse: str, partitions: list[int], record_types: dict[tuple[int, bool, bool], int]) -> dict:
    """The run's partitions' checkpoints, groups, offsets, expiry and quarantine (from the
    tables), and the run's records by type (`record_types`: RunResult.record_types)."""
    checkpoints = _of(read_small_table(table_path(warehouse, T.REPLAY_CHECKPOINTS)), partitions)
    groups = _of(_table(warehouse, T.CONSUMER_GROUPS), partitions)
    offsets = _of(_table(warehouse, T.GROUP_OFFSETS, ["group_id", "commit_timestamp", "offsets_partition"]), partitions)
    expired = _of(_table(warehouse, T.EXPIRED_OFFSETS, ["group_id", "offsets_partition"]), partitions)
    expired_groups = _of(_table(warehouse, T.EXPIRED_GROUPS, ["group_id", "offsets_partition"]), partitions)
    pending = _of(_table(warehouse, T.PENDING_TRANSACTIONAL_OFFSETS, ["offsets_partition"]), partitions)
    quarantine = _of(
        _table(warehouse, T.QUARANTINED_RECORDS, ["offsets_partition", "segment_file", "level"]), partitions
    )

    by_type: dict[tuple, int] = {}
    for (rtype, control, _), n in record_types.items():
        name = RECORD_TYPES[rtype][0] if rtype in RECORD_TYPES else None
        by_type[(name, control)] = by_type.get((name, control), 0) + n
    group_rows: list[dict] = []
    if groups is not None and groups.num_rows:
        per_group: dict[str, tuple[int | None, object]] = {}
        if offsets is not None and offsets.num_rows:
            agg = offsets.group_by("group_id").aggregate([("group_id", "count"), ("commit_timestamp", "max")])
            per_group = dict(
                zip(
                    agg.column("group_id").to_pylist(),
                    zip(agg.column("group_id_count").to_pylist(), agg.column("commit_timestamp_max").to_pylist()),
                )
            )
        first = groups.sort_by("group_id").slice(0, LIMIT)
        for r in first.select(
            ["group_id", "group_type", "protocol_type", "state", "generation", "members", "offsets_partition"]
        ).to_pylist():
            offsets_n, last = per_group.get(r["group_id"], (None, None))
            group_rows.append({**r, "members": len(r["members"] or []), "offsets": offsets_n, "last_commit": last})
    expired_rows = []
    if expired is not None and expired.num_rows:
        agg = expired.group_by("group_id").aggregate([("group_id", "count")]).sort_by("group_id").slice(0, LIMIT)
        expired_rows = [
            {"group_id": g, "offsets": n}
            for g, n in zip(agg.column("group_id").to_pylist(), agg.column("group_id_count").to_pylist())
        ]
    quarantined = []
    if quarantine is not None and quarantine.num_rows:
        keys = ["offsets_partition", "segment_file", "level"]
        agg = quarantine.group_by(keys).aggregate([("level", "count")]).sort_by([(k, "ascending") for k in keys])
        quarantined = [{**{k: r[k] for k in keys}, "count": r["level_count"]} for r in agg.slice(0, LIMIT).to_pylist()]
    return {
        "partitions": checkpoints.sort_by("offsets_partition").to_pylist() if checkpoints is not None else [],
        "record_types": [
            {"record_type_name": name, "is_control": control, "count": n}
            for (name, control), n in sorted(by_type.items(), key=lambda kv: -kv[1])
        ],
        "groups": group_rows,
        "group_count": _count(groups),
        "offset_count": _count(offsets),
        "expired_offsets": expired_rows,
        "expired_offset_count": _count(expired),
        "expired_groups": sorted(expired_groups.column("group_id").to_pylist())[:LIMIT] if expired_groups else [],
        "pending_count": _count(pending),
        "unknown_records": sum(n for (_, _, bad), n in record_types.items() if bad),
        "quarantined": quarantined,
    }


def now_lag_rows(warehouse: str, now_ms: int) -> pa.Table | None:
    """group_lag's rows of kind now at this --now (the files of that --now only, when the table
    keeps them apart)."""
    from lib.lake.lag_plan import now_file_at

    path = table_path(warehouse, T.GROUP_LAG)
    listing = table_files(path)
    if listing is None:
        return None
    files = [f.absolute for f in listing[1] if now_file_at(f.path) == now_ms]
    if files:
        return pa.concat_tables([storage.open_parquet(f).read(use_threads=False) for f in files])
    import pyarrow.dataset as ds

    at = pa.scalar(now_ms * 1000, pa.timestamp("us", tz="UTC"))
    return open_delta(path).to_pyarrow_dataset().to_table(filter=(ds.field("kind") == "now") & (ds.field("at") == at))


def lag_summary(warehouse: str, now_ms: int, limit: int = 12) -> list[dict]:
    """The live offsets furthest behind at now (group_lag kind now), most behind in time
    first: read from the files of this --now's rows only."""
    rows = now_lag_rows(warehouse, now_ms)
    if rows is None:
        return []
    rows = rows.filter(pc.greater(rows.column("lag_records"), 0))
    if rows.num_rows == 0:
        return []
    lag_ms = rows.column("lag_ms").fill_null(-1).to_numpy()
    lag_records = rows.column("lag_records").to_numpy()
    groups = np.asarray(rows.column("group_id").to_pylist(), dtype=object)
    topics = np.asarray(rows.column("topic").to_pylist(), dtype=object)
    partitions = rows.column("partition").to_numpy()
    order = sorted(
        range(rows.num_rows), key=lambda i: (-lag_ms[i], -lag_records[i], groups[i], topics[i], partitions[i])
    )
    return rows.take(pa.array(order[:limit])).to_pylist()


def _partitions_in(col: pa.ChunkedArray) -> np.ndarray:
    """Per row, how many partitions a topic-partitions list column holds (vectorised)."""
    arr = col.combine_chunks()
    n = len(arr)
    entries = pc.list_flatten(arr)
    parts = pc.list_value_length(pc.struct_field(entries, "partitions")).fill_null(0).to_numpy()
    out = np.zeros(n, np.int64)
    np.add.at(out, pc.list_parent_indices(arr).to_numpy(), parts)
    return out


def _numbers(values: pa.Array) -> np.ndarray:
    """An integer column without nulls as numpy (the audit's keys are never null)."""
    return values.to_numpy(zero_copy_only=False)


def assignment_summary(warehouse: str, limit: int = 8) -> dict:
    """Verdict counts over every audited generation, and the groups whose latest generation
    needs a look (lib.assignors.audit.why_flagged), worst first. The table is history (a row per
    generation): its flat columns are read whole, the nested ones only for each group's latest
    row, so the summary's memory follows the groups, not the generations."""
    import pyarrow.dataset as ds

    from lib.assignors.audit import why_flagged

    path = table_path(warehouse, T.ASSIGNMENT_AUDIT)
    if not table_exists(path):
        return {"verdicts": {}, "groups": 0, "flagged": []}
    # the strings as their files' dictionaries (both are written dictionary-encoded): a row's
    # group and verdict are then numbers, and nothing is sorted or counted by string
    read = ds.ParquetReadOptions(dictionary_columns={"group_id", "verdict"})
    dataset = open_delta(path).to_pyarrow_dataset(parquet_read_options=read)
    flat = ["group_id", "log_offset", "offsets_partition", "verdict"]
    keys = dataset.to_table(columns=flat)
    if keys.num_rows == 0:
        return {"verdicts": {}, "groups": 0, "flagged": []}
    keys = keys.unify_dictionaries().combine_chunks()
    verdict = keys.column("verdict").chunk(0)
    counts = np.bincount(_numbers(verdict.indices), minlength=len(verdict.dictionary))
    verdicts = {v: int(n) for v, n in zip(verdict.dictionary.to_pylist(), counts.tolist()) if n}
    # each group's latest row: the last of its rows ordered by group, then log offset
    group = _numbers(keys.column("group_id").chunk(0).indices)
    order = np.lexsort((_numbers(keys.column("log_offset").chunk(0)), group))
    last = np.flatnonzero(np.append(group[order][1:] != group[order][:-1], True))
    latest_keys = keys.take(pa.array(order[last]))  # (to_pylist gives a dictionary's strings)
    columns = ["group_id", "log_offset", "offsets_partition", "generation", "assignor", "member_count", "imbalance",
               "moved", "verdict", "unassigned", "assigned_twice"]  # fmt: skip
    # the latest rows: read with a filter on their offsets (a superset: other groups' rows at the
    # same offsets), then exactly by (group, offsets partition, log offset)
    audit = dataset.to_table(columns=columns, filter=ds.field("log_offset").isin(latest_keys.column("log_offset")))
    wanted = set(
        zip(
            latest_keys.column("group_id").to_pylist(),
            latest_keys.column("offsets_partition").to_pylist(),
            latest_keys.column("log_offset").to_pylist(),
        )
    )
    mine = []
    for k in zip(
        audit.column("group_id").to_pylist(),
        audit.column("offsets_partition").to_pylist(),
        audit.column("log_offset").to_pylist(),
    ):
        mine.append(k in wanted)
        wanted.discard(k)  # each once (a warehouse of an earlier version may hold a row twice)
    audit = audit.filter(pa.array(mine, pa.bool_()))
    audit = audit.append_column("unassigned_n", pa.array(_partitions_in(audit.column("unassigned"))))
    audit = audit.append_column("twice", pa.array(_partitions_in(audit.column("assigned_twice"))))
    latest = audit.drop_columns(["unassigned", "assigned_twice", "offsets_partition"]).to_pylist()
    latest.sort(key=lambda r: r["group_id"])  # ties below in group order, whatever the files' order
    rows = [r | {"why": why} for r in latest if (why := why_flagged(r)) is not None]
    rows.sort(key=lambda r: (r["verdict"] == "differs", r["twice"], r["unassigned_n"], r["imbalance"]), reverse=True)
    return {"verdicts": verdicts, "groups": len(latest), "flagged": rows[:limit]}
