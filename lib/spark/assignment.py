"""The assignment audit stage: after the replay's commit point, the group records of the offsets
partitions the replay moved past the audit are read from offsets_log and audited in log order,
one Spark task per offsets partition (lib.assignors.audit, which recomputes Kafka's assignors),
and their rows replace those partitions' rows of assignment_audit in one commit.

That commit's userMetadata names the run and, per offsets partition, the replay checkpoint its
rows reflect (`offsets-lake run <id> audited 0:812,3:77`): a stage that died left the table as it
was, and the next run finds those partitions behind the replay and audits them again."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from itertools import groupby

import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from lib.lake.crash_points import crash_point
from lib.lake.run_tags import run_tag
from lib.spark.delta import commit_history, open_delta, read_small_table, table_exists, table_path
from schemas import tables as T
from schemas.records import RecordType as R

AUDITED = " audited "
GROUP_RECORD_TYPES = (
    R.GROUP_METADATA,
    R.CONSUMER_GROUP_METADATA,
    R.CONSUMER_GROUP_PARTITION_METADATA,
    R.CONSUMER_GROUP_MEMBER_METADATA,
    R.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
    R.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
)


@dataclass
class AssignmentResult:
    audited_partitions: list[int] = field(default_factory=list)
    rows: int = 0
    stage_seconds: dict = field(default_factory=dict)


def audited_through(user_metadata: str | None) -> dict[int, int]:
    """offsets partition -> the replay checkpoint (next log offset) the table's rows reflect."""
    if not user_metadata or AUDITED not in user_metadata:
        return {}
    listed = user_metadata.split(AUDITED, 1)[1].strip()
    return {int(p): int(o) for p, o in (item.split(":") for item in listed.split(",") if item)}


def _audited_tag(run_id: str, through: dict[int, int]) -> str:
    return f"{run_tag(run_id)}{AUDITED}{','.join(f'{p}:{o}' for p, o in sorted(through.items()))}"


def known_topics(warehouse: str, log_dir: str | None) -> tuple[dict[str, int], dict[str, str]]:
    """Partition counts known today, per topic (the log dir's partition folders and the largest
    partition with a committed offset), and topic id -> name (KIP-848 records name topics by id
    only; v4 offset commits name both). Read with delta-rs from group_offsets and
    expired_offsets, small tables: no Spark job."""
    floors: dict[str, int] = {}
    names: dict[str, str] = {}
    if log_dir:
        from lib.source.topic_log import find_topic_partitions

        for log in find_topic_partitions(log_dir):
            floors[log.topic] = max(floors.get(log.topic, 0), log.partition + 1)
    for table in (T.GROUP_OFFSETS, T.EXPIRED_OFFSETS):
        path = table_path(warehouse, table)
        if not table_exists(None, path):
            continue
        offsets = open_delta(path).to_pyarrow_table(columns=["topic", "partition", "topic_id"])
        for r in offsets.group_by(["topic"]).aggregate([("partition", "max")]).to_pylist():
            floors[r["topic"]] = max(floors.get(r["topic"], 0), r["partition_max"] + 1)
        named = offsets.filter(pc.is_valid(offsets["topic_id"])).group_by(["topic_id", "topic"]).aggregate([])
        names.update(zip(named["topic_id"].to_pylist(), named["topic"].to_pylist()))
    return floors, names


def audit_frame(records: DataFrame, floors: dict[str, int], names: dict[str, str]) -> DataFrame:
    """assignment_audit rows from offsets_log rows: one task per offsets partition reads its
    group records in log order (lib.assignors.audit)."""
    columns: list[Column | str] = [
        "offsets_partition",
        "log_offset",
        F.unix_millis("log_timestamp").alias("log_timestamp_ms"),
        "record_type",
        "group_id",
        "member_id",
        "is_tombstone",
        "group_metadata",
        F.when(F.col("record_type") != int(R.GROUP_METADATA), F.col("value_json")).alias("value_json"),
    ]
    selected = records.where(
        ~F.col("is_control")
        & (F.col("decode_status") == "ok")
        & F.col("record_type").isin([int(t) for t in GROUP_RECORD_TYPES])
    ).select(*columns)
    table = T.ASSIGNMENT_AUDIT

    def audit(batches):
        import pyarrow as pa

        from lib.assignors.audit import audit_records

        schema = table.arrow_schema
        ms_type = pa.timestamp("us", tz="UTC")

        def rows():
            for batch in batches:
                yield from batch.to_pylist()

        for _, records in groupby(rows(), key=lambda r: r["offsets_partition"]):
            out = list(audit_records(records, floors, names))
            for r in out:
                r["at"] = r.pop("at_ms")
            if out:
                at = pa.array([r["at"] for r in out], pa.int64()).cast(pa.timestamp("ms", tz="UTC")).cast(ms_type)
                arrays = [at if f.name == "at" else pa.array([r[f.name] for r in out], f.type) for f in schema]
                yield pa.RecordBatch.from_arrays(arrays, schema=schema)

    n = max(1, records.sparkSession.sparkContext.defaultParallelism)
    return (
        selected.repartition(n, "offsets_partition")
        .sortWithinPartitions("offsets_partition", "log_offset")
        .mapInArrow(audit, table.ddl)
    )


def run_assignment_stage(
    spark: SparkSession, warehouse: str, log_dir: str | None, run_id: str, full: bool = False
) -> AssignmentResult:
    """Audit the offsets partitions whose replay checkpoint moved since the table's last commit
    (every one for a full run); nothing to do: no Spark job, no commit."""
    result = AssignmentResult()
    t0 = time.monotonic()
    replay = read_small_table(table_path(warehouse, T.REPLAY_CHECKPOINTS))
    if replay is None:
        return result
    checkpoints = {r["offsets_partition"]: r["next_log_offset"] for r in replay.to_pylist()}
    path = table_path(warehouse, T.ASSIGNMENT_AUDIT)
    exists = table_exists(None, path)
    through = {} if full or not exists else audited_through((commit_history(None, path, 1) or [(0, None)])[0][1])
    stale = sorted(p for p, nxt in checkpoints.items() if through.get(p) != nxt)
    if not stale:
        return result
    log = spark.read.format("delta").load(table_path(warehouse, T.OFFSETS_LOG))
    log = log.where(F.col("offsets_partition").isin(stale))
    rows = audit_frame(log, *known_topics(warehouse, log_dir))
    through = {p: o for p, o in through.items() if p in checkpoints} | {p: checkpoints[p] for p in stale}
    writer = rows.write.format("delta").option("userMetadata", _audited_tag(run_id, through))
    if full or not exists:
        writer.mode("overwrite").option("overwriteSchema", "true").save(path)
    else:
        listed = ", ".join(map(str, stale))
        writer.mode("overwrite").option("replaceWhere", f"offsets_partition IN ({listed})").save(path)
    crash_point("after_commit:assignment_audit")
    result.audited_partitions = stale
    metrics = open_delta(path).history(1)[0].get("operationMetrics") or {}
    result.rows = int(metrics.get("numOutputRows", 0))
    result.stage_seconds["assignment_audit"] = time.monotonic() - t0
    return result


def partitions_in(col: str) -> Column:
    """How many partitions a topic-partitions list column (unassigned, assigned_twice) holds."""
    return F.aggregate(F.col(col), F.lit(0), lambda acc, t: acc + F.size(t["partitions"]))


def why_flagged(row) -> str | None:
    """Why a group's latest generation needs a look (as sql/audits/unbalanced_groups.sql says
    it), from its verdict, assignor, imbalance and `unassigned_n` / `twice` counts; None when fine."""
    if row["verdict"] == "differs":
        return f"the leader's assignment differs from Kafka's {row['assignor']} assignor"
    if row["twice"]:
        return f"{row['twice']} partitions assigned twice"
    if row["unassigned_n"]:
        return f"{row['unassigned_n']} partitions unassigned"
    if row["imbalance"] >= 2:
        return f"imbalance {row['imbalance']}"
    return None


def assignment_summary(spark: SparkSession, warehouse: str, limit: int = 8) -> dict:
    """Verdict counts over every audited generation, and the groups whose latest generation
    needs a look (unassigned or twice-assigned partitions, an imbalance of 2 or more, an
    assignment that differs from its assignor's), worst first: small, collected."""
    path = table_path(warehouse, T.ASSIGNMENT_AUDIT)
    if not table_exists(None, path):
        return {"verdicts": {}, "groups": 0, "flagged": []}
    audit = spark.read.format("delta").load(path)
    verdicts = {r["verdict"]: r["n"] for r in audit.groupBy("verdict").agg(F.count("*").alias("n")).collect()}

    latest = (
        audit.withColumn("_n", F.row_number().over(Window.partitionBy("group_id").orderBy(F.col("log_offset").desc())))
        .where("_n = 1")
        .select(
            "group_id",
            "generation",
            "assignor",
            "member_count",
            "imbalance",
            "moved",
            "verdict",
            partitions_in("unassigned").alias("unassigned_n"),
            partitions_in("assigned_twice").alias("twice"),
        )
    )
    groups = latest.count()
    flagged = (
        latest.where("verdict = 'differs' OR unassigned_n > 0 OR twice > 0 OR imbalance >= 2")
        .orderBy(F.col("verdict") == "differs", "twice", "unassigned_n", "imbalance", ascending=False)
        .limit(limit)
        .collect()
    )
    return {"verdicts": verdicts, "groups": groups, "flagged": [r.asDict() | {"why": why_flagged(r)} for r in flagged]}
