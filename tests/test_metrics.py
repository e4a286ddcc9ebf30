"""The replay's Prometheus metrics: a replay of the ten-day sample (jobs.replay_offsets, as a user
runs it, with --pushgateway and --metrics-file) pushes to a real Pushgateway, a real Prometheus
scrapes it, and the lag of two groups read back through Prometheus' HTTP API equals group_lag at
the run's --now, and the numbers stated by hand for the sample (tests/test_days_sample.py's FACTS:
email-notifier is 147 records behind on notifications-0; payments-eos has read everything)."""

from __future__ import annotations

import contextlib
import io
import os

import pytest

from tests import prometheus_servers as P
from tests.helpers import REPO

pytestmark = pytest.mark.spark

SAMPLE = os.path.join(REPO, "samples", "days", "logdir")
with open(os.path.join(REPO, "samples", "days", "NOW")) as _f:
    NOW = int(_f.read().strip())
GROUPS = ("email-notifier", "payments-eos")


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("prometheus")
    gateway = P.start_pushgateway(tmp)
    prometheus = P.start_prometheus(tmp, gateway)
    yield gateway, prometheus
    P.stop(prometheus)
    P.stop(gateway)


@pytest.fixture(scope="module")
def run(spark, servers, tmp_path_factory):
    from jobs import replay_offsets

    gateway, _ = servers
    tmp = tmp_path_factory.mktemp("metrics")
    warehouse, textfile = str(tmp / "wh"), str(tmp / "offsets_lake.prom")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = replay_offsets.main(
            ["--input", SAMPLE, "--warehouse", warehouse, "--now", str(NOW), "--full"]
            + ["--pushgateway", gateway.address, "--metrics-file", textfile]
        )
    assert code == 0, out.getvalue()
    return {"warehouse": warehouse, "textfile": textfile, "stdout": out.getvalue()}


def _lag_rows(spark, warehouse: str, group: str) -> dict[tuple[str, str], tuple]:
    df = spark.read.format("delta").load(os.path.join(warehouse, "group_lag"))
    rows = df.where(f"kind = 'now' AND group_id = '{group}' AND at = timestamp_millis({NOW})").collect()
    return {(r.topic, str(r.partition)): (r.lag_records, r.lag_ms, r.committed_offset) for r in rows}


def _series(prometheus, metric: str, group: str) -> dict[tuple[str, str], float]:
    got = P.wait_for_series(prometheus, f'{metric}{{group="{group}"}}', timeout_s=30)
    assert all(s["metric"]["job"] == "offsets_lake_replay" for s in got)
    return {(s["metric"]["topic"], s["metric"]["partition"]): float(s["value"][1]) for s in got}


def test_lag_of_two_groups_through_prometheus_equals_group_lag_at_now(spark, servers, run):
    _, prometheus = servers
    for group in GROUPS:
        expected = _lag_rows(spark, run["warehouse"], group)
        assert expected, group
        records = _series(prometheus, "offsets_lake_group_lag_records", group)
        seconds = _series(prometheus, "offsets_lake_group_lag_seconds", group)
        committed = _series(prometheus, "offsets_lake_group_offsets_committed", group)
        assert records == {k: float(v[0]) for k, v in expected.items()}
        assert seconds == {k: v[1] / 1000 for k, v in expected.items()}
        assert committed == {k: float(v[2]) for k, v in expected.items()}
    # stated by hand for the sample, independent of the tables
    assert _series(prometheus, "offsets_lake_group_lag_records", "email-notifier")[("notifications", "0")] == 147
    assert set(_series(prometheus, "offsets_lake_group_lag_records", "payments-eos").values()) == {0.0}
    worst = P.query(prometheus, 'offsets_lake_group_max_lag_records{group="email-notifier"}')
    assert float(worst[0]["value"][1]) == max(
        v[0] for v in _lag_rows(spark, run["warehouse"], "email-notifier").values()
    )


def test_the_runs_own_figures_and_group_states(spark, servers, run):
    _, prometheus = servers
    now = P.query(prometheus, "offsets_lake_run_now_timestamp_seconds")
    assert [float(s["value"][1]) for s in now] == [NOW / 1000]
    records = P.query(prometheus, "offsets_lake_records_replayed")
    assert [int(float(s["value"][1])) for s in records] == [22010]  # the sample's records (samples/README.md)
    states = P.query(prometheus, 'offsets_lake_group_state{group="email-notifier"}')
    assert [(s["metric"]["state"], s["value"][1]) for s in states] == [("Empty", "1")]
    assert run["stdout"].count("metrics:") == 2


def test_the_textfile_holds_the_same_samples(spark, run):
    with open(run["textfile"]) as f:
        text = f.read()
    wh = os.path.abspath(run["warehouse"])
    line = f'offsets_lake_group_lag_records{{group="email-notifier",partition="0",topic="notifications",warehouse="{wh}"}} 147.0'
    assert line in text.splitlines()
    assert "# TYPE offsets_lake_group_lag_seconds gauge" in text


def test_an_unreachable_pushgateway_is_a_warning_and_the_run_stands(spark, tmp_path, capsys):
    from jobs import replay_offsets
    from lib.ports import free_port

    code = replay_offsets.main(
        ["--input", SAMPLE, "--warehouse", str(tmp_path / "wh"), "--now", str(NOW), "--quiet"]
        + ["--skip-lag", "--skip-assignment-audit", "--pushgateway", f"127.0.0.1:{free_port()}"]
    )
    assert code == 0
    err = capsys.readouterr().err
    assert "warning: metrics not written to 127.0.0.1:" in err and "Connection refused" in err


def test_every_panel_of_the_grafana_dashboard_queries_series_the_run_pushed(servers, run):
    """conf/grafana/offsets-lake.json: each panel's PromQL, its variables set to "all", is valid
    for Prometheus and names only metrics of lib.reporting.metrics.METRICS, and answers."""
    import json
    import re

    from lib.reporting.metrics import METRICS, PREFIX

    _, prometheus = servers
    with open(os.path.join(REPO, "conf", "grafana", "offsets-lake.json")) as f:
        dashboard = json.load(f)
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert len(exprs) >= 10
    for expr in exprs:
        named = set(re.findall(r"\b(offsets_lake_\w+)", expr))
        assert named and named <= {PREFIX + m for m in METRICS}, expr
        promql = expr.replace("$warehouse", ".*").replace("$group", ".*")
        assert P.query(prometheus, promql), expr
