"""What a replay run prints after its commits, read with delta-rs and pyarrow from the small
tables only (checkpoints, the state tables, this --now's lag rows, the footers of the audit's
files): no Spark job, and nothing that grows with the log is scanned. The run's own record
counts come from its tasks."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from lib import storage
from lib.lake.behind import SUMMARY_ROWS, behind_now
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


def lag_summary(warehouse: str, now_ms: int, limit: int = SUMMARY_ROWS) -> list[dict]:
    """The live offsets furthest behind at now (group_lag kind now), most behind in time
    first: read from the files of this --now's rows only (a run whose lag stage ran has them
    from its tasks: LagResult.furthest_behind)."""
    rows = now_lag_rows(warehouse, now_ms)
    if rows is None:
        return []
    return behind_now(rows, limit).to_pylist()


def assignment_summary(warehouse: str, limit: int = 8) -> dict:
    """Verdict counts over every audited generation, and the groups whose latest generation
    needs a look (lib.assignors.audit.why_flagged), worst first. The table is history (a row per
    generation): each file's footer holds what this needs of its rows (lib.lake.audit_digest),
    so the summary reads a footer per file, not the generations, and its memory follows the
    groups."""
    from lib.assignors.audit import why_flagged
    from lib.lake.audit_digest import AuditDigest, file_digest

    listing = table_files(table_path(warehouse, T.ASSIGNMENT_AUDIT))
    digest = AuditDigest()
    for f in listing[1] if listing is not None else []:
        digest.add(file_digest(f.absolute))
    latest = digest.latest.to_pylist()
    latest.sort(key=lambda r: r["group_id"])  # ties below in group order, whatever the files' order
    rows = [r | {"why": why} for r in latest if (why := why_flagged(r)) is not None]
    rows.sort(key=lambda r: (r["verdict"] == "differs", r["twice"], r["unassigned_n"], r["imbalance"]), reverse=True)
    verdicts = {v: n for v, n in digest.verdicts.items() if n}
    return {"verdicts": verdicts, "groups": len(latest), "flagged": rows[:limit]}
