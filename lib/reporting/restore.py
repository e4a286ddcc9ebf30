"""The warehouse's side of a restore (jobs.restore_offsets): a group's effective committed
offsets as of an instant, read with the canned audit committed_offset_as_of (so the restore,
the audit and the report answer from the one rule, lib.replay.offsets_spark.offset_effects),
the checks that the warehouse can answer for that instant, and the record of every restore in
the offset_restores table."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from lib.restore.plan import Committed, PartitionPlan, Target
from schemas import tables as T


class RestoreInputError(Exception):
    """The warehouse cannot answer for this group or instant; the message says why."""


@dataclass(frozen=True)
class History:
    """What the warehouse holds of a group: its offset commit records, the first record's time
    in the whole log, and when the last replay finished."""

    group_commits: int
    first_record_ms: int | None
    last_replay_ms: int | None


def _ms(ts) -> int | None:
    if ts is None:
        return None
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=dt.UTC)
    return round(ts.timestamp() * 1000)


def history(spark, group: str) -> History:
    """From the catalog open_catalog registered (offsets_log, replay_checkpoints)."""
    from pyspark.sql import functions as F

    from schemas.records import OFFSET_COMMIT_TYPES

    log = spark.table("offsets_log")
    row = log.agg(
        F.count(
            F.when((F.col("group_id") == group) & F.col("record_type").isin([int(t) for t in OFFSET_COMMIT_TYPES]), 1)
        ).alias("commits"),
        F.min("log_timestamp").alias("first"),
    ).first()
    last = spark.table("replay_checkpoints").agg(F.max("finished_at").alias("last")).first()
    assert row is not None and last is not None
    return History(int(row["commits"]), _ms(row["first"]), _ms(last["last"]))


def check_history(h: History, group: str, as_of_ms: int, allow_stale: bool) -> None:
    """Raise RestoreInputError where the warehouse cannot say where the group was at as_of."""
    from lib.cli import format_ms

    if h.group_commits == 0:
        raise RestoreInputError(f"unknown group {group!r}: the warehouse holds no offset commit of it")
    if h.first_record_ms is not None and as_of_ms < h.first_record_ms:
        raise RestoreInputError(
            f"--as-of {format_ms(as_of_ms)} is before the warehouse's history (its first record is at "
            f"{format_ms(h.first_record_ms)})"
        )
    if not allow_stale and (h.last_replay_ms is None or h.last_replay_ms < as_of_ms):
        when = format_ms(h.last_replay_ms) if h.last_replay_ms is not None else "never"
        raise RestoreInputError(
            f"the warehouse is behind: its last replay finished at {when}, before --as-of {format_ms(as_of_ms)}; "
            "commits after it are not in the warehouse (replay first, or --allow-stale)"
        )


def targets_as_of(spark, group: str, as_of_ms: int, topics: Sequence[str] | None = None) -> list[Target]:
    """The group's effective committed offset of each topic partition at as_of (the audit
    committed_offset_as_of over the open catalog): a commit, or None after a tombstone."""
    from lib.reporting.audit_queries import bind, collect, get_query, load_queries, run_query

    query = get_query("committed_offset_as_of", load_queries())
    _, rows = collect(run_query(spark, query, bind(query, {"group": group, "at": str(as_of_ms)})))
    wanted = set(topics) if topics else None
    out = []
    for r in rows:
        if wanted is not None and r["topic"] not in wanted:
            continue
        committed = None
        if r["status"] == "committed":
            epoch = r["leader_epoch"]
            committed = Committed(
                int(r["committed_offset"]), None if epoch is None or epoch < 0 else int(epoch), r["metadata"]
            )
        out.append(Target(r["topic"], int(r["partition"]), committed, _ms(r["applied_at"]), bool(r["transactional"])))
    return out


@dataclass(frozen=True)
class RestoreRun:
    """One run of the restore job, for its rows in offset_restores."""

    restore_id: str
    run_by: str
    run_at_ms: int
    bootstrap_servers: str
    group_id: str
    to_group: str
    as_of_ms: int
    mode: str  # schemas.tables.RESTORE_MODES


def restore_rows(run: RestoreRun, plan: Sequence[PartitionPlan], after: dict[tuple[str, int], int]):
    """The run's rows of offset_restores, as Arrow."""
    import pyarrow as pa

    def ts(ms: int) -> dt.datetime:
        return dt.datetime.fromtimestamp(ms / 1000, dt.UTC)

    rows = [
        {
            "restore_id": run.restore_id,
            "run_by": run.run_by,
            "run_at": ts(run.run_at_ms),
            "bootstrap_servers": run.bootstrap_servers,
            "group_id": run.group_id,
            "to_group": run.to_group,
            "as_of": ts(run.as_of_ms),
            "mode": run.mode,
            "topic": p.topic,
            "partition": p.partition,
            "action": p.action,
            "before_offset": p.current.offset if p.current is not None else None,
            "target_offset": p.target.offset if p.target is not None else None,
            "applied_offset": p.apply.offset if p.apply is not None and run.mode == "executed" else None,
            "after_offset": after.get((p.topic, p.partition)),
            "log_start_offset": p.log_start,
            "log_end_offset": p.log_end,
            "note": p.note or None,
        }
        for p in plan
    ]
    return pa.Table.from_pylist(rows, schema=T.OFFSET_RESTORES.arrow_schema)
