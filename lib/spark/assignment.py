"""The assignment audit, around the replay: it is decided in the replay's pass
(lib.replay.assignment), with the partition counts known before the run (`known_topics`); the
report's helpers over assignment_audit."""

from __future__ import annotations

import pyarrow.compute as pc
from pyspark.sql import Column
from pyspark.sql import functions as F

from lib.assignors.audit import why_flagged  # noqa: F401 - the report's
from lib.spark.delta import open_delta, table_exists, table_path
from schemas import tables as T


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


def partitions_in(col: str) -> Column:
    """How many partitions a topic-partitions list column (unassigned, assigned_twice) holds."""
    return F.aggregate(F.col(col), F.lit(0), lambda acc, t: acc + F.size(t["partitions"]))
