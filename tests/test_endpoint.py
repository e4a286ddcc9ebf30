"""The SQL endpoint (jobs.serve) over the ten-day sample's warehouse, queried by real clients:
Spark Connect (jobs.audit --remote, in its own process) and beeline over JDBC.

- every canned audit's answer through the endpoint equals jobs.audit's on the same warehouse
  (Connect: the same text, row order included; JDBC: the audit's table function, the same rows);
- a replay that commits while the server runs shows in the next query, through both;
- writes are refused, through both, and no table changes;
- the token is required: a wrong one is refused, through both."""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import secrets

import pytest

from lib.source.logdir import find_partitions
from tests import endpoint_server as E
from tests.helpers import REPO

pytestmark = pytest.mark.spark

SAMPLE = os.path.join(REPO, "samples", "days", "logdir")
with open(os.path.join(REPO, "samples", "days", "NOW")) as _f:
    NOW = int(_f.read().strip())
HOUR, DAY = 3_600_000, 86_400_000


def iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat()


# every canned audit, with parameters that give it rows on the sample (instants explicit: an
# answer as of "now" would differ between two clients asking a millisecond apart)
PARAMS: dict[str, dict[str, str]] = {
    "assignment_history": {"group": "orders-fraud"},
    "commit_rate_per_hour": {"group": "email-notifier", "since": iso(NOW - 3 * DAY), "until": iso(NOW)},
    "committed_offset_as_of": {"group": "orders-analytics", "at": iso(NOW - 2 * DAY)},
    "group_generation_history": {"group": "reporting-nightly"},
    "groups_expiring_within": {"now": iso(NOW), "within": "14d"},
    "groups_falling_behind": {"now": iso(NOW), "for_at_least": "1h"},
    "idle_groups": {"now": iso(NOW), "idle_for": "2d"},
    "lag_at": {"group": "email-notifier", "at": iso(NOW)},
    "lag_history": {"group": "orders-billing", "since": iso(NOW - DAY), "until": iso(NOW), "bucket": "6h"},
    "offset_rewinds": {},
    "partition_owner_at": {"topic": "orders", "at": iso(NOW - DAY)},
    "unbalanced_groups": {"min_imbalance": "1"},
}


@pytest.fixture(scope="module")
def warehouse(spark, tmp_path_factory):
    from lib.spark.pipeline import run_replay

    wh = str(tmp_path_factory.mktemp("endpoint") / "wh")
    run_replay(spark, find_partitions(SAMPLE), wh, NOW, full=True)
    return wh


@pytest.fixture(scope="module")
def endpoint(warehouse, tmp_path_factory):
    conf = ("spark.master=local[2]", "spark.sql.shuffle.partitions=2")
    server = E.launch(warehouse, str(tmp_path_factory.mktemp("serve")), "tk-" + secrets.token_hex(12), conf)
    yield server
    assert E.stop(server) == 0, server.log_tail()


@pytest.fixture(scope="module")
def local_audit(spark, warehouse):
    """What `jobs.audit --warehouse WH NAME --param ... --format F` prints, without the endpoint
    (jobs.audit.main's own steps, on the shared session, the catalog opened once)."""
    from lib.reporting.audit_queries import bind, collect, format_rows, load_queries, open_catalog, run_query

    open_catalog(spark, warehouse)
    queries = load_queries()

    def run(name: str, params: dict[str, str], fmt: str) -> str:
        q = queries[name]
        return format_rows(*collect(run_query(spark, q, bind(q, params))), fmt) + "\n"

    yield run
    spark.catalog.setCurrentDatabase("default")


def _args(params: dict[str, str]) -> list[str]:
    return [a for k, v in params.items() for a in ("--param", f"{k}={v}")]


def _json_values(text: str) -> list:
    """The JSON documents printed one after another (the prompt's answers)."""
    decoder, out, i = json.JSONDecoder(), [], 0
    while i < len(text):
        if text[i].isspace():
            i += 1
            continue
        value, i = decoder.raw_decode(text, i)
        out.append(value)
    return out


def test_every_canned_audit_through_spark_connect_answers_as_jobs_audit(spark, endpoint, warehouse, local_audit):
    from lib.reporting.audit_queries import load_queries

    assert set(PARAMS) | {"group_offsets_as_of_version"} == set(load_queries())
    path = os.path.join(warehouse, "group_offsets")
    last_commit = spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").first()["timestamp"]  # as Delta dates it
    asked = dict(PARAMS, group_offsets_as_of_version={"at": str(int(last_commit.timestamp() * 1000))})
    # every audit in one jobs.audit --remote prompt (one process, one Connect session)
    script = "".join(f"\\run {name} " + " ".join(f"{k}={v}" for k, v in p.items()) + "\n" for name, p in asked.items())
    got = E.remote_audit(endpoint.connect_url, "--format", "json", stdin=script)
    assert got.returncode == 0, got.stderr[-2000:]
    answers = _json_values(got.stdout)
    assert len(answers) == len(asked), got.stdout[-2000:]
    for (name, params), answer in zip(asked.items(), answers):
        assert answer == json.loads(local_audit(name, params, "json")), name
    for name in ("lag_at", "assignment_history", "partition_owner_at", "group_offsets_as_of_version"):
        assert answers[list(asked).index(name)], f"{name} answers nothing on the sample: a weak check"
    # one audit per run, as the command line prints it, in both formats
    for fmt in ("table", "json"):
        one = E.remote_audit(endpoint.connect_url, "lag_at", *_args(PARAMS["lag_at"]), "--format", fmt)
        assert one.returncode == 0, one.stderr[-2000:]
        assert one.stdout == local_audit("lag_at", PARAMS["lag_at"], fmt)


def _function_call(name: str, params: dict[str, str]) -> str:
    """The audit's table function called by name, its arguments as SQL literals."""
    from lib.reporting.audit_queries import bind, load_queries, sql_literal

    q = load_queries()[name]
    bound = bind(q, params)
    args = ", ".join(f"`{p.name}` => {sql_literal(p.type, bound[p.name])}" for p in q.params if p.name in params)
    return f"{name}({args})"


def test_every_canned_audit_is_a_table_function_over_jdbc(spark, endpoint, warehouse):
    from lib.reporting.audit_queries import bind, load_queries, open_catalog, sql

    queries = load_queries()
    statements = []
    for name, params in PARAMS.items():
        statements.append(f"SELECT '{E.BEELINE_ROW}{name}'")
        statements.append(f"SELECT base64(to_json(struct(*))) FROM {_function_call(name, params)}")
    out = E.beeline(endpoint.jdbc_url, statements, endpoint.token)
    assert out.returncode == 0, out.stderr[-3000:]
    answers = E.beeline_answers(out.stdout)
    open_catalog(spark, warehouse)
    try:
        for name, params in PARAMS.items():
            q = queries[name]
            df = sql(spark, q.sql, bind(q, params))
            expected = sorted(r[0] for r in df.selectExpr("to_json(struct(*))").collect())
            got = sorted(base64.b64decode(line).decode() for line in answers[name])
            assert got == expected, name
    finally:
        spark.catalog.setCurrentDatabase("default")
    assert answers["lag_at"] and answers["assignment_history"]


def _count(spark, warehouse: str, table: str) -> int:
    return spark.read.format("delta").load(os.path.join(warehouse, table)).count()


def test_a_replay_committing_beside_the_server_shows_in_the_next_query(spark, endpoint, warehouse, local_audit):
    import time

    from lib.reporting.endpoint import table_version
    from lib.spark.pipeline import run_replay

    count = "SELECT count(*) AS n FROM offsets_lake.group_lag WHERE kind = 'now'"
    before = _count_through_both(endpoint, count)
    assert before == (_now_rows(spark, warehouse),) * 2
    run_replay(spark, find_partitions(SAMPLE), warehouse, NOW + HOUR)  # a later --now: new lag rows
    # the tables: at once
    after = _count_through_both(endpoint, count)
    assert after == (_now_rows(spark, warehouse),) * 2
    assert after[0] > before[0]
    # the kept rule views: once the server has seen the commit (it looks every 2 s)
    wanted = f"group_lag@{table_version(warehouse, 'group_lag')}"
    versions = "SELECT table_versions FROM global_temp.endpoint_views WHERE view = 'lag_timeline'"
    deadline = time.monotonic() + 180
    while True:
        shown = E.remote_audit(endpoint.connect_url, "--sql", versions, "--format", "json")
        assert shown.returncode == 0, shown.stderr[-2000:]
        if wanted in json.loads(shown.stdout)[0]["table_versions"]:
            break
        assert time.monotonic() < deadline, f"lag_timeline still shows {shown.stdout}, not {wanted}"
        time.sleep(2)
    params = {"group": "email-notifier", "at": iso(NOW + HOUR)}
    got = E.remote_audit(endpoint.connect_url, "lag_at", *_args(params), "--format", "json")
    assert got.returncode == 0, got.stderr[-2000:]
    expected = local_audit("lag_at", params, "json")
    assert got.stdout == expected
    assert any(r["end_offset_at"] for r in json.loads(expected))


def _now_rows(spark, warehouse: str) -> int:
    return spark.read.format("delta").load(os.path.join(warehouse, "group_lag")).where("kind = 'now'").count()


def _count_through_both(endpoint, query: str) -> tuple[int, int]:
    via_connect = E.remote_audit(endpoint.connect_url, "--sql", query, "--format", "json")
    assert via_connect.returncode == 0, via_connect.stderr[-2000:]
    via_jdbc = E.beeline(endpoint.jdbc_url, [query], endpoint.token)
    assert via_jdbc.returncode == 0, via_jdbc.stderr[-2000:]
    return json.loads(via_connect.stdout)[0]["n"], int(via_jdbc.stdout.split()[0])


def _versions(warehouse: str) -> dict[str, list[str]]:
    """Each table's commit files (the warehouse's folders that are Delta tables: not the lag's
    _lag_tails)."""
    logs = {t: os.path.join(warehouse, t, "_delta_log") for t in sorted(os.listdir(warehouse))}
    return {t: sorted(os.listdir(log)) for t, log in logs.items() if os.path.isdir(log)}


WRITES = [
    "INSERT INTO offsets_lake.group_offsets SELECT * FROM offsets_lake.group_offsets LIMIT 1",
    "DELETE FROM offsets_lake.group_offsets WHERE group_id = 'email-notifier'",
    "UPDATE offsets_lake.consumer_groups SET state = 'Dead'",
    "DROP TABLE offsets_lake.group_lag",
    "CREATE TABLE offsets_lake.mine USING delta AS SELECT 1 AS x",
    "TRUNCATE TABLE offsets_lake.offsets_log",
]


def test_writes_are_refused_through_both_and_nothing_changes(endpoint, warehouse):
    before = _versions(warehouse)
    for statement in WRITES:
        out = E.beeline(endpoint.jdbc_url, [statement], endpoint.token)
        assert out.returncode != 0, statement
        assert "offsets_lake endpoint is read-only" in out.stderr, (statement, out.stderr[-1500:])
    code = f"""
for attempt in (
    lambda: spark.sql({WRITES[1]!r}).collect(),
    lambda: spark.table("offsets_lake.group_offsets").limit(1).write.format("delta").mode("append").save(
        {os.path.join(warehouse, "group_offsets")!r}
    ),
    lambda: spark.table("offsets_lake.group_offsets").write.saveAsTable("offsets_lake.copy"),
):
    try:
        attempt()
        print("WROTE")
    except Exception as e:
        print("REFUSED" if "offsets_lake endpoint is read-only" in str(e) else "OTHER " + str(e)[:300])
"""
    out = E.connect_script(endpoint.connect_url, code)
    assert out.stdout.split() == ["REFUSED"] * 3, out.stdout + out.stderr[-2000:]
    assert _versions(warehouse) == before
    # reading goes on
    ok = E.beeline(endpoint.jdbc_url, ["SELECT count(*) FROM offsets_lake.consumer_groups"], endpoint.token)
    assert ok.returncode == 0 and ok.stdout.split() == ["30"], ok.stderr[-1500:]


def test_the_token_is_required(endpoint):
    bare = endpoint.connect_url.split("/;token=")[0]
    for url in (bare, bare + "/;token=wrong"):
        got = E.remote_audit(url, "lag_at", "--param", "group=email-notifier")
        assert got.returncode == 2, got.stdout
        assert "endpoint" in got.stderr and ("authentication" in got.stderr.lower()), got.stderr[-1500:]
    wrong = E.beeline(endpoint.jdbc_url, ["SELECT 1"], "wrong")
    assert wrong.returncode != 0
    assert "SELECT 1" not in wrong.stdout and wrong.stdout.strip() != "1"


def test_bad_input_starts_nothing(tmp_path, capsys, monkeypatch):
    from jobs import serve

    monkeypatch.delenv(serve.TOKEN_ENV, raising=False)
    assert serve.main(["--warehouse", str(tmp_path / "nowhere")]) == 2
    assert "does not exist" in capsys.readouterr().err
    wh = os.path.join(REPO, "samples", "days")  # a folder, but no Delta table in it
    assert serve.main(["--warehouse", wh]) == 2
    assert "holds none of the Delta tables" in capsys.readouterr().err
    empty = tmp_path / "token"
    empty.write_text("\n")
    (tmp_path / "wh" / "group_offsets" / "_delta_log").mkdir(parents=True)
    for args, message in (
        (["--host", "0.0.0.0"], "--host 0.0.0.0 is not loopback: give a token"),
        (["--token-file", str(empty)], "is empty"),
        (["--token-file", str(tmp_path / "missing")], "No such file or directory"),
    ):
        assert serve.main(["--warehouse", str(tmp_path / "wh"), *args]) == 2
        assert message in capsys.readouterr().err
