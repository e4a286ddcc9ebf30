"""Writing and reading the Delta tables.

Delta commits one table at a time, so a run's commit point is its replay_checkpoints commit,
written last. Every commit names its run in its userMetadata (lib.lake.run_tags). A run is
complete when replay_checkpoints has a commit of it; a later run rolls back (RESTORE) any
table whose newest commits belong to a run that never completed, so the latest versions
always hold what the completed runs left."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession

from lib.lake.run_tags import ROLLBACK_TAG, tagged_run
from schemas.tables import Table


def commit_history(spark: SparkSession | None, path: str, limit: int | None = None) -> list[tuple[int, str | None]]:
    """(version, userMetadata) of every commit (or the newest `limit`), newest first. Read
    from the Delta log with delta-rs (no Spark job): `spark` is unused."""
    from deltalake import DeltaTable

    history = DeltaTable(path).history(limit)
    return sorted(((h["version"], h.get("userMetadata")) for h in history), reverse=True)


def table_path(warehouse: str, table: Table | str) -> str:
    return os.path.join(warehouse, table if isinstance(table, str) else table.name)


def table_exists(spark: SparkSession | None, path: str) -> bool:
    from deltalake import DeltaTable

    return os.path.isdir(os.path.join(path, "_delta_log")) and DeltaTable.is_deltatable(path)


def read_table(spark: SparkSession, warehouse: str, table: Table | str) -> DataFrame:
    return spark.read.format("delta").load(table_path(warehouse, table))


def completed_runs(spark: SparkSession | None, checkpoints_path: str) -> set[str]:
    """Runs that reached their commit point: each commit of replay_checkpoints names one."""
    if not table_exists(spark, checkpoints_path):
        return set()
    return {r for _, meta in commit_history(spark, checkpoints_path) if (r := tagged_run(meta)) is not None}


def roll_back_incomplete_runs(
    spark: SparkSession | None, warehouse: str, tables: Sequence[Table], checkpoints: Table
) -> list[dict]:
    """Undo the commits of runs that died before their checkpoint commit: each table whose
    newest commits name such a run goes back (RESTORE, itself a new commit) to the version
    before them, or is removed if such a run created it. Returns what was rolled back."""
    from deltalake import CommitProperties, DeltaTable

    completed = completed_runs(spark, table_path(warehouse, checkpoints))
    done = []
    for table in tables:
        if table is checkpoints:
            continue
        path = table_path(warehouse, table)
        if not table_exists(spark, path):
            continue
        # the usual case, a table whose newest commit is sound, needs no more than that commit
        ((_, newest),) = commit_history(spark, path, limit=1)
        if tagged_run(newest) is None or tagged_run(newest) in completed:
            continue
        streak = []
        for version, meta in commit_history(spark, path):
            run = tagged_run(meta)
            if run is None or run in completed:
                break
            streak.append((version, run))
        if not streak:
            continue
        first_version, run = streak[-1]
        if first_version == 0:
            shutil.rmtree(path)
            done.append({"table": table.name, "run": run, "from_version": streak[0][0], "to_version": None})
            continue
        DeltaTable(path).restore(
            first_version - 1, commit_properties=CommitProperties(custom_metadata={"userMetadata": ROLLBACK_TAG + run})
        )
        done.append({"table": table.name, "run": run, "from_version": streak[0][0], "to_version": first_version - 1})
    return done


# --- commits of files the workers wrote (delta-rs: no Spark job, no copy) ----------------------


def delta_schema(table: Table):
    from deltalake import Schema

    return Schema.from_arrow(table.arrow_schema)


def partition_files(path: str, partitions: list[int]) -> dict[int, list[str]]:
    """Absolute paths of the data files of each of `partitions` in the table's latest version."""
    from deltalake import DeltaTable

    out: dict[int, list[str]] = {p: [] for p in partitions}
    if not table_exists(None, path):
        return out
    wanted = {str(p) for p in partitions}
    for uri in DeltaTable(path).file_uris():
        local = uri[len("file://") :] if uri.startswith("file://") else uri
        folder = os.path.basename(os.path.dirname(local))
        if folder.startswith("offsets_partition=") and folder.split("=", 1)[1] in wanted:
            out[int(folder.split("=", 1)[1])].append(local)
    return out


def commit_files(
    path: str,
    table: Table,
    files: list[dict],
    tag: str,
    replace: list[int] | None = None,
    current: dict[int, list[str]] | None = None,
) -> bool:
    """One commit adding `files` (written by the workers under offsets_partition=P/), replacing
    every file of the `replace` partitions (None: append). No commit when it would change
    nothing. `current`: the files of the `replace` partitions if the caller already listed
    them (spares loading the table to find that there is nothing to replace). Returns whether
    a commit was made."""
    from deltalake import CommitProperties, DeltaTable
    from deltalake.transaction import AddAction, RemoveAction, create_table_with_add_actions

    adds = [
        AddAction(
            f["path"],
            f["size"],
            {"offsets_partition": f["path"].split("/", 1)[0].split("=", 1)[1]},
            f["modification_time"],
            True,
            f["stats"],
        )
        for f in files
    ]
    props = CommitProperties(custom_metadata={"userMetadata": tag})
    if not table_exists(None, path):
        os.makedirs(path, exist_ok=True)
        create_table_with_add_actions(
            path,
            delta_schema(table),
            adds,
            mode="error",
            partition_by=list(table.partition_by) or None,
            commit_properties=props,
        )
        return True
    if not adds:
        replaced = current if current is not None else partition_files(path, replace) if replace else {}
        if not any(replaced.get(p) for p in replace or ()):
            return False
    actions: list[AddAction | RemoveAction] = [*adds]
    DeltaTable(path).create_write_transaction(
        actions,
        mode="overwrite" if replace else "append",
        schema=delta_schema(table),
        partition_by=list(table.partition_by) or None,
        partition_filters=[("offsets_partition", "in", [str(p) for p in replace])] if replace else None,
        commit_properties=props,
    )
    return True


def read_small_table(path: str):
    """A small table (replay_checkpoints) as Arrow, latest version; None when absent."""
    import pyarrow as pa
    from deltalake import DeltaTable

    if not table_exists(None, path):
        return None
    return pa.table(DeltaTable(path).to_pyarrow_table())


def overwrite_small_table(path: str, table: Table, rows, tag: str) -> None:
    """Replace a small unpartitioned table's content with `rows` (Arrow) in one commit."""
    import uuid

    import pyarrow.parquet as pq
    from deltalake import CommitProperties, DeltaTable
    from deltalake.transaction import AddAction, create_table_with_add_actions

    os.makedirs(path, exist_ok=True)
    name = f"part-{uuid.uuid4().hex}.snappy.parquet"
    full = os.path.join(path, name)
    pq.write_table(rows.select(table.column_names).cast(table.arrow_schema), full, compression="snappy")
    import time

    add = AddAction(
        name, os.path.getsize(full), {}, int(time.time() * 1000), True, json.dumps({"numRecords": rows.num_rows})
    )
    props = CommitProperties(custom_metadata={"userMetadata": tag})
    if not table_exists(None, path):
        create_table_with_add_actions(path, delta_schema(table), [add], mode="error", commit_properties=props)
        return
    DeltaTable(path).create_write_transaction(
        [add], mode="overwrite", schema=delta_schema(table), commit_properties=props
    )
