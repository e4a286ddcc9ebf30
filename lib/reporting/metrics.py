"""Prometheus metrics of a replay run: what it read, and each group's state and lag at the run's
--now, pushed to a Pushgateway (the Prometheus way for batch jobs) and/or written as a
node_exporter textfile. Read with delta-rs from this --now's group_lag rows and the state tables
(no Spark job, nothing that grows with the log).

Names follow Prometheus' conventions, and kafka-lag-exporter's (kafka_consumergroup_group_lag,
..._lag_seconds, ..._max_lag) where they mean the same: METRICS below, one home for names and help.
Labels: group, topic, partition; `warehouse` is the Pushgateway grouping key (and a label of the
textfile's series), so two warehouses push side by side."""

from __future__ import annotations

import os
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from lib.lake.delta import open_delta, table_exists, table_path
from lib.reporting.run_summary import now_lag_rows
from schemas import tables as T

PREFIX = "offsets_lake_"
JOB = "offsets_lake_replay"
LAG = ("group", "topic", "partition")

# name (without PREFIX) -> (labels, help)
METRICS: dict[str, tuple[tuple[str, ...], str]] = {
    "group_lag_records": (
        LAG,
        "Records between the group's committed offset and the partition's end, at the run's --now",
    ),
    "group_lag_seconds": (
        LAG,
        "Age at the run's --now of the first record the group has not consumed; 0 when caught up",
    ),
    "group_offsets_committed": (LAG, "The group's committed offset (the next record it will consume)"),
    "partition_latest_offset": (("topic", "partition"), "The partition's end offset as of the run's --now"),
    "group_max_lag_records": (("group",), "The group's largest lag in records over its partitions"),
    "group_max_lag_seconds": (("group",), "The group's largest lag in seconds over its partitions"),
    "group_sum_lag_records": (("group",), "The group's lag in records summed over its partitions"),
    "group_state": (("group", "state"), "1 for the group's state (Empty, Stable, PreparingRebalance, Dead, ...)"),
    "group_members": (("group",), "Members of the group's current generation"),
    "last_success_timestamp_seconds": ((), "When the last successful replay run ended (Unix time)"),
    "run_duration_seconds": ((), "Wall time of the last successful run"),
    "run_now_timestamp_seconds": ((), "The --now the run judged expiry and lag at (Unix time)"),
    "records_replayed": ((), "Records the last run read from __consumer_offsets"),
    "rows_quarantined": ((), "Records the last run set aside in quarantined_records"),
    "partitions_replayed": ((), "Partitions of __consumer_offsets the last run covered"),
}


@dataclass(frozen=True)
class RunFigures:
    """What the run itself knows (lib.spark.pipeline.RunResult), for the run's metrics."""

    now_ms: int
    finished_at_s: float
    duration_s: float
    records: int
    quarantined: int
    partitions: int


class _Samples:
    """A prometheus_client collector of the run's samples, one family per metric: what a run
    computed once, exported as it is (Gauge children, with a lock each, cost 7x more on a
    warehouse of 135K series)."""

    def __init__(self, const_labels: dict[str, str]):
        self.extra = const_labels
        self.values: dict[str, dict[tuple, float]] = {name: {} for name in METRICS}

    def put(self, name: str, value: float, **labels) -> None:
        # keyed by the label values: a series set twice keeps its last value, as a Gauge would
        self.values[name][tuple(labels[k] for k in METRICS[name][0])] = value

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily

        extra = list(self.extra.values())
        for name, (labels, doc) in METRICS.items():
            family = GaugeMetricFamily(PREFIX + name, doc, labels=[*labels, *self.extra])
            for key, value in self.values[name].items():
                family.add_metric([*key, *extra], value)
            yield family


def build_registry(warehouse: str, run: RunFigures, const_labels: dict[str, str] | None = None):
    """A prometheus_client CollectorRegistry holding every metric of METRICS for this run."""
    from prometheus_client import CollectorRegistry

    samples = _Samples(dict(const_labels or {}))
    registry = CollectorRegistry()
    registry.register(samples)
    put = samples.put

    lag = now_lag_rows(warehouse, run.now_ms)
    if lag is not None and lag.num_rows:
        _lag_metrics(lag, put)
    groups_path = table_path(warehouse, T.CONSUMER_GROUPS)
    if table_exists(groups_path):
        groups = open_delta(groups_path).to_pyarrow_table(columns=["group_id", "state", "members"])
        members = pc.list_value_length(groups.column("members")).fill_null(0).to_pylist()
        for gid, state, n in zip(groups.column("group_id").to_pylist(), groups.column("state").to_pylist(), members):
            put("group_state", 1, group=gid, state=state or "Unknown")
            put("group_members", n, group=gid)
    put("last_success_timestamp_seconds", run.finished_at_s)
    put("run_duration_seconds", run.duration_s)
    put("run_now_timestamp_seconds", run.now_ms / 1000)
    put("records_replayed", run.records)
    put("rows_quarantined", run.quarantined)
    put("partitions_replayed", run.partitions)
    return registry


def _lag_metrics(lag: pa.Table, put) -> None:
    cols = {c: lag.column(c).to_pylist() for c in ("group_id", "topic", "partition", "committed_offset")}
    lag_records = lag.column("lag_records").to_pylist()
    lag_ms = lag.column("lag_ms").to_pylist()
    end = lag.column("end_offset").to_pylist()
    worst: dict[str, list[float]] = {}  # group -> [max records, max seconds, sum records]
    for i, gid in enumerate(cols["group_id"]):
        key = {"group": gid, "topic": cols["topic"][i], "partition": str(cols["partition"][i])}
        put("group_offsets_committed", cols["committed_offset"][i], **key)
        if end[i] is not None:
            put("partition_latest_offset", end[i], topic=key["topic"], partition=key["partition"])
        w = worst.setdefault(gid, [0.0, 0.0, 0.0])
        if lag_records[i] is not None:  # unknown (no end offset yet, or truncated): no sample
            put("group_lag_records", lag_records[i], **key)
            w[0], w[2] = max(w[0], lag_records[i]), w[2] + lag_records[i]
        if lag_ms[i] is not None:
            put("group_lag_seconds", lag_ms[i] / 1000, **key)
            w[1] = max(w[1], lag_ms[i] / 1000)
    for gid, (max_records, max_seconds, sum_records) in worst.items():
        put("group_max_lag_records", max_records, group=gid)
        put("group_max_lag_seconds", max_seconds, group=gid)
        put("group_sum_lag_records", sum_records, group=gid)


def grouping_key(warehouse: str) -> dict[str, str]:
    return {"warehouse": os.path.abspath(warehouse) if "://" not in warehouse else warehouse}


def push(warehouse: str, run: RunFigures, gateway: str, timeout_s: float = 10.0) -> int:
    """Replace this warehouse's metrics on the Pushgateway at `gateway` (HOST:PORT or a URL).
    Returns the number of samples pushed."""
    from prometheus_client import push_to_gateway

    registry = build_registry(warehouse, run)
    push_to_gateway(gateway, job=JOB, registry=registry, grouping_key=grouping_key(warehouse), timeout=timeout_s)
    return _samples(registry)


def write_textfile(warehouse: str, run: RunFigures, path: str) -> int:
    """node_exporter's textfile collector format, written atomically (a temporary file renamed)."""
    from prometheus_client import write_to_textfile

    registry = build_registry(warehouse, run, const_labels=grouping_key(warehouse))
    write_to_textfile(path, registry)
    return _samples(registry)


def _samples(registry) -> int:
    return sum(len(m.samples) for m in registry.collect())
