"""The live offsets furthest behind at a --now, as the run's summary prints them: one rule for
the summary read from group_lag (lib.reporting.run_summary.lag_summary) and for the lag tasks,
each of which picks the same from the rows it writes (lib.lake.lag_task), so that a run whose
lag stage ran needs no read of them (the driver's last step of an incremental run: 26-87 ms
of make bench's 1%, beside the pool's stop). The order is total (a now row per live offset:
group, topic and partition are unique), so the first rows of the tasks' firsts are the
first rows of them all."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

SUMMARY_ROWS = 12  # the rows the summary prints


def behind_now(rows: pa.Table, limit: int = SUMMARY_ROWS) -> pa.Table:
    """Of group_lag's rows of kind now, those with records to read, the `limit` furthest behind."""
    return furthest_behind(rows.filter(pc.greater(rows.column("lag_records"), 0)), limit)


def furthest_behind(rows: pa.Table, limit: int) -> pa.Table:
    """The `limit` rows most behind: by lag_ms (null last), then lag_records, both descending,
    then group, topic and partition. The numbers pick the rows at or above the cut (a row per
    committed partition: 40K on make bench's log, and a Python sort of them all was 20 ms of
    each incremental run, growing with the consumed partitions); only those are sorted whole."""
    if rows.num_rows == 0 or limit <= 0:
        return rows.slice(0, 0)
    lag_ms = rows.column("lag_ms").fill_null(-1).to_numpy()
    lag_records = rows.column("lag_records").to_numpy()
    if rows.num_rows > limit:
        cut = np.lexsort((-lag_records, -lag_ms))[limit - 1]
        ms, records = lag_ms[cut], lag_records[cut]
        candidates = np.flatnonzero((lag_ms > ms) | ((lag_ms == ms) & (lag_records >= records)))
    else:
        candidates = np.arange(rows.num_rows)
    picked = rows.take(pa.array(candidates))
    groups = picked.column("group_id").to_pylist()
    topics = picked.column("topic").to_pylist()
    partitions = picked.column("partition").to_pylist()
    ms_of, records_of = lag_ms[candidates].tolist(), lag_records[candidates].tolist()
    order = sorted(
        range(len(candidates)),
        key=lambda i: (-ms_of[i], -records_of[i], groups[i], topics[i], partitions[i]),
    )
    return picked.take(pa.array(order[:limit], pa.int64()))
