"""The assignment audit, around the replay: it is decided in the replay's pass
(lib.replay.assignment), with the partition counts known before the run (`known_topics`); the
report's helpers over assignment_audit."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from lib.assignors.audit import why_flagged  # noqa: F401 - the report's
from lib.lake.delta import open_delta, table_exists, table_path
from lib.source.topic_log import TopicPartitionLog
from schemas import tables as T

if TYPE_CHECKING:  # (the run's driver reads the known counts here without pyspark)
    from pyspark.sql import Column


def known_topics(
    warehouse: str,
    topic_logs: list[TopicPartitionLog],
    from_tables: tuple[dict[str, int], dict[str, str]] | None = None,
) -> tuple[dict[str, int], dict[str, str]]:
    """Partition counts known today, per topic (the log dir's partition folders and the largest
    partition with a committed offset), and topic id -> name (KIP-848 records name topics by id
    only; v4 offset commits name both). `from_tables`: known_from_tables(warehouse), if read
    already."""
    floors, names = known_from_tables(warehouse) if from_tables is None else from_tables
    floors = dict(floors)
    for log in topic_logs:  # (the log dir's partition folders)
        floors[log.topic] = max(floors.get(log.topic, 0), log.partition + 1)
    return floors, dict(names)


def known_from_tables(warehouse: str) -> tuple[dict[str, int], dict[str, str]]:
    """known_topics' part read from group_offsets and expired_offsets, small tables, with
    delta-rs (no Spark job): per topic the largest partition with a committed offset, plus one,
    and topic id -> name. A run reads it while its log dir's consumed topics are listed (the
    replay's tasks wait for both)."""
    floors: dict[str, int] = {}
    names: dict[str, str] = {}
    for table in (T.GROUP_OFFSETS, T.EXPIRED_OFFSETS):
        path = table_path(warehouse, table)
        if not table_exists(path):
            continue
        offsets = open_delta(path).to_pyarrow_table(columns=["topic", "partition", "topic_id"])
        for r in offsets.group_by(["topic"]).aggregate([("partition", "max")]).to_pylist():
            floors[r["topic"]] = max(floors.get(r["topic"], 0), r["partition_max"] + 1)
        named = offsets.filter(pc.is_valid(offsets["topic_id"])).group_by(["topic_id", "topic"]).aggregate([])
        names.update(zip(named["topic_id"].to_pylist(), named["topic"].to_pylist()))
    return floors, names


def partitions_in(col: str) -> Column:
    """How many partitions a topic-partitions list column (unassigned, assigned_twice) holds."""
    from pyspark.sql import functions as F

    return F.aggregate(F.col(col), F.lit(0), lambda acc, t: acc + F.size(t["partitions"]))


WHAT_IF_FUNCTION = "assignor_what_if"
# the row's columns what_if_of_row reads
WHAT_IF_INPUT = ("group_type", "group_id", "generation", "assignor", "members", "topics", "moved", "reference")


def previous_members() -> Column:
    """The members of the group's previous row of assignment_audit (what_if's previous)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    return F.lag("members").over(Window.partitionBy("group_id").orderBy("offsets_partition", "log_offset"))


def what_if(previous: Column) -> Column:
    """assignment_audit's `what_if` for the rows it is taken on (the column where the table has
    it); `previous`: previous_members()."""
    from pyspark.sql import functions as F

    return F.coalesce(F.col("what_if"), F.call_function(WHAT_IF_FUNCTION, F.struct(*WHAT_IF_INPUT), previous))


def _assignor_what_if(rows: pa.Array, previous: pa.Array) -> pa.Array:
    from lib.assignors.audit import what_if_of_row

    return pa.array(
        [what_if_of_row(r, p) for r, p in zip(rows.to_pylist(), previous.to_pylist())],
        T.ASSIGNMENT_AUDIT.arrow_schema.field("what_if").type,
    )


def register_what_if(spark) -> None:
    """The SQL function assignor_what_if(struct(<WHAT_IF_INPUT>), previous members): what each of
    Kafka's assignors would have done for a classic generation (lib.assignors.audit.what_if_of_row),
    batch by batch in Arrow; for the rows a query shows (the pass leaves what_if null)."""
    from pyspark.sql.functions import arrow_udf

    column = next(c for c in T.ASSIGNMENT_AUDIT.columns if c.name == "what_if")
    spark.udf.register(WHAT_IF_FUNCTION, arrow_udf(_assignor_what_if, column.ddl))  # type: ignore[call-overload]
