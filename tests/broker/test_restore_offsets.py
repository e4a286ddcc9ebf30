"""jobs.restore_offsets on a real broker with real clients: groups moved away from where they
were (reset to earliest with Kafka's own kafka-consumer-groups, deleted, moved past records DeleteRecords
removed) are put back as of an instant before, and OffsetFetch then answers exactly what the
broker answered at that instant; an active group is refused and left as it was; the exported
CSV, applied with Kafka's own kafka-consumer-groups, gives the same offsets."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Producer, TopicPartition

from tests.broker import scenarios as S
from tests.broker.compare import committed_offsets
from tests.broker.kafka_broker import consumer_groups_tool

pytestmark = [pytest.mark.broker, pytest.mark.spark]


def _now_ms() -> int:
    return int(time.time() * 1000)


def _instant() -> int:
    """An instant strictly between what came before and what comes after (broker timestamps
    are milliseconds on this machine's clock)."""
    time.sleep(0.05)
    at = _now_ms()
    time.sleep(0.05)
    return at


def _reset_to_earliest(jar_dir: str, bootstrap: str, group: str, topic: str) -> None:
    """What an operator does by mistake, with Kafka's own tool (its Java AdminClient):
    kafka-consumer-groups --reset-offsets --to-earliest --execute."""
    args = ["--group", group, "--topic", topic, "--reset-offsets", "--to-earliest", "--execute"]
    consumer_groups_tool(jar_dir, bootstrap, args)


def _replay(spark, bootstrap: str, wh) -> None:
    from lib.source.logdir import live_partitions
    from lib.spark.pipeline import run_replay

    run_replay(spark, live_partitions(bootstrap), str(wh), _now_ms())


def _restore(capsys, wh, bootstrap: str, group: str, as_of: int, *extra: str) -> tuple[int, dict | str, str]:
    """(exit code, the printed plan (JSON parsed), stderr)."""
    from jobs import restore_offsets

    capsys.readouterr()
    args = ["--warehouse", str(wh), "--group", group, "--as-of", str(as_of), "--bootstrap-servers", bootstrap]
    rc = restore_offsets.main([*args, "--format", "json", *extra])
    out, err = capsys.readouterr()
    return rc, (json.loads(out) if out.strip().startswith("{") else out), err


def _plan(printed: dict) -> dict:
    return {
        (p["topic"], p["partition"]): (p["current"], p["target"], p["action"], p["apply"])
        for p in printed["partitions"]
    }


def _offsets(bootstrap: str, group: str) -> dict:
    return {tp: offset for tp, (offset, _, _) in committed_offsets(bootstrap, group).items()}


@pytest.fixture(scope="module")
def kafka4_story(spark, kafka4, tmp_path_factory):
    """Groups on one broker, each moved away from where it was after its instant, then one
    replay of the live topic into a warehouse."""
    b = kafka4.bootstrap
    story: dict = {"bootstrap": b, "jar_dir": kafka4.jar_dir}
    # 20 records per partition; each topic's own story (DeleteRecords and transactions change
    # log starts and ends)
    for topic in ("restore-orders", "restore-eos-t", "restore-trunc-t"):
        S.create_topic(b, topic, 3, messages=60)

    # reset to earliest by mistake
    c = S.consumer(b, "restore-reset")
    c.subscribe(["restore-orders"])
    S.poll_until([c], S.assigned([c], 3), what="restore-reset assigned")
    S.commit(c, "restore-orders", {0: 15, 1: 20, 2: 7}, metadata="before")
    c.close()
    story["reset_before"] = committed_offsets(b, "restore-reset")
    story["reset_at"] = _instant()
    _reset_to_earliest(kafka4.jar_dir, b, "restore-reset", "restore-orders")

    # deleted with DeleteGroups
    S.standalone_commit(b, "restore-deleted", "restore-orders", {0: 3, 1: 4, 2: 5}, metadata="kept")
    story["deleted_before"] = committed_offsets(b, "restore-deleted")
    story["deleted_at"] = _instant()
    S.delete_groups(b, ["restore-deleted"])

    # exactly-once: one committed transaction, then an aborted one, over a plain commit
    member = S.consumer(b, "restore-eos")
    member.subscribe(["restore-eos-t"])
    S.poll_until([member], S.assigned([member], 3), what="restore-eos assigned")
    S.commit(member, "restore-eos-t", {1: 3})
    meta = member.consumer_group_metadata()
    for i, (partition, offset, outcome) in enumerate(((0, 11, "commit"), (1, 17, "abort"))):
        p = Producer({"bootstrap.servers": b, "transactional.id": f"restore-eos-tx-{i}"})
        p.init_transactions(30)
        p.begin_transaction()
        p.produce("restore-eos-t", value=b"x", partition=partition)
        p.send_offsets_to_transaction([TopicPartition("restore-eos-t", partition, offset)], meta, 30)
        p.commit_transaction(30) if outcome == "commit" else p.abort_transaction(30)
    member.close()
    story["eos_before"] = committed_offsets(b, "restore-eos")
    story["eos_at"] = _instant()
    _reset_to_earliest(kafka4.jar_dir, b, "restore-eos", "restore-eos-t")

    # moved on past records that DeleteRecords removed since
    S.standalone_commit(b, "restore-truncated", "restore-trunc-t", {0: 5, 1: 6})
    story["truncated_at"] = _instant()
    S.standalone_commit(b, "restore-truncated", "restore-trunc-t", {0: 18, 1: 19})
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KTP

    a = KafkaAdminClient(bootstrap_servers=b)
    try:
        a.delete_records({KTP("restore-trunc-t", 0): 12})
    finally:
        a.close()

    # still consuming: a restore must not touch it
    active = S.consumer(b, "restore-active", client_id="restore-active-c1")
    active.subscribe(["restore-orders"])
    S.poll_until([active], S.assigned([active], 3), what="restore-active assigned")
    S.commit(active, "restore-orders", {0: 2, 1: 2, 2: 2})
    story["active_at"] = _instant()
    S.commit(active, "restore-orders", {0: 9, 1: 9, 2: 9})

    story["wh"] = tmp_path_factory.mktemp("restore") / "wh"
    _replay(spark, b, story["wh"])
    yield story
    active.close()


def test_an_active_group_is_refused_and_left_as_it_is(kafka4_story, capsys):
    """First: the member must not have left (max.poll.interval.ms) while others run."""
    s, b = kafka4_story, kafka4_story["bootstrap"]
    before = committed_offsets(b, "restore-active")
    rc, printed, err = _restore(capsys, s["wh"], b, "restore-active", s["active_at"], "--execute")
    assert rc == 3
    assert printed["mode"] == "refused" and printed["group_state"] == "Stable"
    assert "group 'restore-active' is Stable with 1 member(s)" in err and "restore-active-c1@" in err
    assert committed_offsets(b, "restore-active") == before


def test_a_group_reset_to_earliest_is_put_back_and_the_csv_does_the_same(kafka4_story, capsys, tmp_path):
    s, b = kafka4_story, kafka4_story["bootstrap"]
    before = {tp: offset for tp, (offset, _, _) in s["reset_before"].items()}
    assert before == {("restore-orders", 0): 15, ("restore-orders", 1): 20, ("restore-orders", 2): 7}
    assert _offsets(b, "restore-reset") == dict.fromkeys(before, 0)

    csv = tmp_path / "plan.csv"
    rc, printed, _ = _restore(capsys, s["wh"], b, "restore-reset", s["reset_at"], "--export-csv", str(csv))
    assert rc == 0 and printed["mode"] == "dry_run" and printed["group_state"] == "Empty"
    assert _plan(printed) == {tp: (0, o, "restore", o) for tp, o in before.items()}
    assert [p["difference"] for p in printed["partitions"]] == [15, 20, 7]
    assert (printed["partitions"][0]["log_start"], printed["partitions"][0]["log_end"]) == (0, 20)
    assert _offsets(b, "restore-reset") == dict.fromkeys(before, 0)  # a dry run changes nothing
    assert csv.read_text() == "restore-orders,0,15\nrestore-orders,1,20\nrestore-orders,2,7\n"

    # Kafka's own tool applies the exported plan
    args = ["--group", "restore-reset", "--reset-offsets", "--from-file", str(csv), "--execute"]
    consumer_groups_tool(s["jar_dir"], b, args)
    assert _offsets(b, "restore-reset") == before

    # and --execute gives the same offsets, with their metadata and leader epochs
    _reset_to_earliest(s["jar_dir"], b, "restore-reset", "restore-orders")
    rc, printed, err = _restore(capsys, s["wh"], b, "restore-reset", s["reset_at"], "--execute")
    assert rc == 0, err
    assert printed["mode"] == "executed"
    assert {(p["topic"], p["partition"]): p["after"] for p in printed["partitions"]} == before
    assert committed_offsets(b, "restore-reset") == s["reset_before"]


def test_a_deleted_group_is_restored(kafka4_story, capsys):
    s, b = kafka4_story, kafka4_story["bootstrap"]
    assert committed_offsets(b, "restore-deleted") == {}
    rc, printed, err = _restore(capsys, s["wh"], b, "restore-deleted", s["deleted_at"], "--execute")
    assert rc == 0, err
    assert printed["group_state"] == "Dead"
    assert committed_offsets(b, "restore-deleted") == s["deleted_before"]


def test_a_transactional_group_goes_back_to_its_committed_offsets(kafka4_story, capsys):
    s, b = kafka4_story, kafka4_story["bootstrap"]
    # the aborted 17 never took effect: partition 1 stays at the plain commit 3
    assert {tp: o for tp, (o, _, _) in s["eos_before"].items()} == {("restore-eos-t", 0): 11, ("restore-eos-t", 1): 3}
    rc, printed, err = _restore(capsys, s["wh"], b, "restore-eos", s["eos_at"], "--execute")
    assert rc == 0, err
    assert {tp: t for tp, (_, t, _, _) in _plan(printed).items()} == {
        ("restore-eos-t", 0): 11,
        ("restore-eos-t", 1): 3,
        ("restore-eos-t", 2): None,
    }
    after = committed_offsets(b, "restore-eos")
    assert {tp: after[tp] for tp in s["eos_before"]} == s["eos_before"]
    assert after[("restore-eos-t", 2)][0] == 0  # the reset's offset: no offset then, left as it is


def test_a_target_below_the_log_start_needs_a_decision(kafka4_story, capsys):
    s, b = kafka4_story, kafka4_story["bootstrap"]
    rc, printed, _ = _restore(capsys, s["wh"], b, "restore-truncated", s["truncated_at"])
    assert rc == 0
    assert _plan(printed) == {
        ("restore-trunc-t", 0): (18, 5, "below_log_start", None),
        ("restore-trunc-t", 1): (19, 6, "restore", 6),
    }
    rc, printed, err = _restore(capsys, s["wh"], b, "restore-truncated", s["truncated_at"], "--execute")
    assert rc == 3 and printed["mode"] == "refused"
    assert "restore-trunc-t-0: target 5 is below the log start 12" in err
    assert _offsets(b, "restore-truncated") == {("restore-trunc-t", 0): 18, ("restore-trunc-t", 1): 19}

    rc, printed, err = _restore(
        capsys, s["wh"], b, "restore-truncated", s["truncated_at"], "--execute", "--below-log-start", "clamp"
    )
    assert rc == 0, err
    assert _offsets(b, "restore-truncated") == {("restore-trunc-t", 0): 12, ("restore-trunc-t", 1): 6}


def test_into_another_group_leaves_the_group_as_it_is(kafka4_story, capsys):
    s, b = kafka4_story, kafka4_story["bootstrap"]
    before = committed_offsets(b, "restore-deleted")
    rc, printed, err = _restore(
        capsys, s["wh"], b, "restore-deleted", s["deleted_at"], "--execute", "--to-group", "restore-canary"
    )
    assert rc == 0, err
    assert printed["to_group"] == "restore-canary"
    assert committed_offsets(b, "restore-canary") == s["deleted_before"]
    assert committed_offsets(b, "restore-deleted") == before


@pytest.mark.parametrize(
    ("group", "as_of", "extra", "message"),
    [
        (
            "restore-nobody",
            "reset_at",
            (),
            "unknown group 'restore-nobody': the warehouse holds no offset commit of it",
        ),
        ("restore-reset", 1_000, (), "--as-of 1970-01-01T00:00:01Z is before the warehouse's history"),
        ("restore-truncated", "later", (), "the warehouse is behind: its last replay finished at"),
        (
            "restore-reset",
            "reset_at",
            ("--bootstrap-servers", "127.0.0.1:1", "--cluster-timeout-s", "2"),
            "cannot reach the cluster at 127.0.0.1:1",
        ),
    ],
)
def test_what_the_warehouse_or_the_cluster_cannot_answer_stops_the_job(
    kafka4_story, capsys, group, as_of, extra, message
):
    s, b = kafka4_story, kafka4_story["bootstrap"]
    at = {"reset_at": s["reset_at"], "later": _now_ms() + 3_600_000}.get(as_of, as_of)
    before = committed_offsets(b, "restore-reset")
    rc, _, err = _restore(capsys, s["wh"], b, group, at, "--execute", *extra)
    assert rc == 2 and f"restore_offsets: error: {message}" in err, err
    assert committed_offsets(b, "restore-reset") == before
    if as_of == "later":
        rc, printed, err = _restore(capsys, s["wh"], b, group, at, "--allow-stale")
        assert rc == 0 and printed["mode"] == "dry_run", err


def test_every_run_is_recorded_in_the_warehouse(kafka4_story, spark):
    from tests.helpers import rows

    runs = rows(spark, str(kafka4_story["wh"]), "offset_restores")
    reset = sorted(
        (r["mode"], r["partition"], r["before_offset"], r["target_offset"], r["applied_offset"], r["after_offset"])
        for r in runs
        if r["group_id"] == "restore-reset"
    )
    assert reset == [
        ("dry_run", 0, 0, 15, None, None),
        ("dry_run", 1, 0, 20, None, None),
        ("dry_run", 2, 0, 7, None, None),
        ("executed", 0, 0, 15, 15, 15),
        ("executed", 1, 0, 20, 20, 20),
        ("executed", 2, 0, 7, 7, 7),
    ]
    assert {r["mode"] for r in runs if r["group_id"] == "restore-active"} == {"refused"}

    # the next replay sees the restores' commits: offset_rewinds names the restore behind a rewind
    from tests.helpers import audits_of

    clamp = {r["restore_id"] for r in runs if r["group_id"] == "restore-truncated" and r["mode"] == "executed"}
    assert len(clamp) == 1
    _replay(spark, kafka4_story["bootstrap"], kafka4_story["wh"])
    audit = audits_of(spark, str(kafka4_story["wh"]))
    try:
        truncated = audit("offset_rewinds", group="restore-truncated")
        reset = audit("offset_rewinds", group="restore-reset")
    finally:
        spark.catalog.setCurrentDatabase("default")
    assert [(r["partition"], r["previous_offset"], r["offset"], r["restore_id"]) for r in truncated] == [
        (0, 18, 12, *clamp),
        (1, 19, 6, *clamp),
    ]
    # the two resets to earliest by hand are rewinds no restore made
    assert [(r["partition"], r["previous_offset"], r["offset"], r["restore_id"]) for r in reset] == [
        (0, 15, 0, None),
        (0, 15, 0, None),
        (1, 20, 0, None),
        (1, 20, 0, None),
        (2, 7, 0, None),
        (2, 7, 0, None),
    ]


def test_restore_on_kafka_3_9(spark, kafka39, tmp_path, capsys):
    b = kafka39.bootstrap
    S.create_topic(b, "restore39", 2, messages=20)
    S.standalone_commit(b, "restore39-app", "restore39", {0: 8, 1: 9}, metadata="m")
    before = committed_offsets(b, "restore39-app")
    at = _instant()
    _reset_to_earliest(kafka39.jar_dir, b, "restore39-app", "restore39")
    _replay(spark, b, tmp_path / "wh")
    rc, _, err = _restore(capsys, tmp_path / "wh", b, "restore39-app", at, "--execute")
    assert rc == 0, err
    assert committed_offsets(b, "restore39-app") == before
