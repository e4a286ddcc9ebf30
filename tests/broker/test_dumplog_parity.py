"""Record-by-record parity with Kafka's own decoder on logs that real brokers wrote.

On each broker (Kafka 4.x and 3.9) real clients generate coordinator traffic
(parity_traffic.generate): classic group joins, a rebalance, commits with metadata, a
standalone assign() commit, transactional offset commits with a COMMIT and an ABORT marker, a
non-ASCII group id, a deleted group (tombstones) and, on 4.x, a KIP-848 consumer group.
The broker's `__consumer_offsets` folders are then snapshotted once, and the same snapshot is
read twice:

- by Kafka's DumpLogSegments --offsets-decoder (every `.log` segment), whose record lines are
  parsed into (offsets partition, offset) -> key text / payload text or marker text;
- by the replay job (replay_logdir) into a fresh warehouse, whose `offsets_log` rows are keyed
  the same way.

Then (a) both sides must hold the same set of offsets, (b) every data record's
`key_and_payload(raw_key, raw_value, offset)` must equal Kafka's key and payload text exactly
(and `control_text` its marker text), and (c) the structured columns must agree with Kafka's
JSON. The first mismatch fails the test, naming segment file, partition and offset. Finally the
test checks, from Kafka's side, that the traffic really produced each kind of record expected,
so it cannot pass vacuously."""

from __future__ import annotations

import base64
import collections
import glob
import json
import os
import re
import time

import pytest

from lib.codec.dumplog import control_text, key_and_payload
from schemas.records import RECORD_TYPES
from tests.broker.kafka_broker import dump_log_segments, snapshot_offsets_log_dir
from tests.broker.parity_traffic import generate
from tests.helpers import rows

pytestmark = [pytest.mark.broker, pytest.mark.spark]

# "| offset: 12 CreateTime: ..." (record of a v2 batch) or "offset: 12 ..." (legacy magic 0/1 entry)
_RECORD_LINE = re.compile(r"^(?:\| )?offset: (\d+) ")
_MARKER = re.compile(r"endTxnMarker: (\S+) coordinatorEpoch: (-?\d+)")
_SEGMENT = re.compile(r"__consumer_offsets-(\d+)$")
_JSON = json.JSONDecoder()


# ---------------------------------------------------------------------------------------------
# Kafka's side: DumpLogSegments output
# ---------------------------------------------------------------------------------------------


def parse_dump(text: str) -> tuple[dict, list[str]]:
    """DumpLogSegments stdout -> ({(partition, offset): record}, [segment paths dumped]).

    A record is {"segment", "partition", "offset", "line"} plus either "marker" (the
    `endTxnMarker: ... coordinatorEpoch: N` text, "control_type", "coordinator_epoch") or
    "key_text" / "payload_text" (None when Kafka printed no payload) / "key" / "payload"
    (parsed JSON, "<DELETE>" for tombstones, None when not JSON)."""
    records: dict = {}
    dumped: list[str] = []
    segment = partition = None
    # Not splitlines(): Jackson prints U+2028/U+0085 raw inside strings; only "\n" ends a line.
    for line in text.split("\n"):
        if line.startswith("Dumping "):
            path = line[len("Dumping ") :].strip()
            dumped.append(path)
            m = _SEGMENT.search(os.path.dirname(path))
            assert m, f"unexpected segment path in DumpLogSegments output: {line!r}"
            segment, partition = os.path.basename(path), int(m.group(1))
            continue
        m = _RECORD_LINE.match(line)
        if not m:
            continue
        assert segment is not None, f"record line before any 'Dumping' line: {line!r}"
        offset = int(m.group(1))
        rec = {"segment": segment, "partition": partition, "offset": offset, "line": line}
        k = line.find(" key: ")
        mk = _MARKER.search(line)
        if mk and (k < 0 or mk.start() < k):
            rec["marker"] = line[mk.start() :].rstrip()
            rec["control_type"], rec["coordinator_epoch"] = mk.group(1), int(mk.group(2))
        elif k >= 0:
            tail = line[k + len(" key: ") :]
            key_text, payload_text = _split_key_payload(tail)
            rec["key_text"], rec["payload_text"] = key_text, payload_text
            rec["key"] = _maybe_json(key_text)
            rec["payload"] = payload_text if payload_text == "<DELETE>" else _maybe_json(payload_text)
        else:
            raise AssertionError(
                f"{segment} (partition {partition}) offset {offset}: "
                f"neither key nor marker in DumpLogSegments line {line!r}"
            )
        where = (partition, offset)
        assert where not in records, f"offset {offset} of partition {partition} printed twice"
        records[where] = rec
    return records, dumped


def _split_key_payload(tail: str) -> tuple[str, str | None]:
    """'K payload: P' -> (K, P); 'K' -> (K, None). K is cut where its JSON ends, so a
    ' payload: ' inside a string of the key cannot fool the split."""
    if tail.startswith("{"):
        try:
            _, end = _JSON.raw_decode(tail)
        except json.JSONDecodeError:
            end = None
        if end is not None:
            rest = tail[end:]
            if rest.startswith(" payload: "):
                return tail[:end], rest[len(" payload: ") :]
            if rest.strip() == "":
                return tail[:end], None
    # an error text instead of a key (unknown type, bad bytes): no JSON to cut at
    key_text, sep, payload = tail.partition(" payload: ")
    return key_text, (payload if sep else None)


def _maybe_json(text: str | None):
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None


# ---------------------------------------------------------------------------------------------
# Our side vs Kafka's, record by record
# ---------------------------------------------------------------------------------------------


class Mismatch(AssertionError):
    pass


def _ms(ts) -> int | None:
    """A collected TIMESTAMP (datetime, naive local or aware) -> epoch ms."""
    return None if ts is None else round(ts.timestamp() * 1000)


def _b64(value) -> str | None:
    return None if value is None else base64.b64encode(bytes(value)).decode("ascii")


def _where(k: dict) -> str:
    return f"segment {k['segment']} (__consumer_offsets-{k['partition']}) offset {k['offset']}"


def _check(k: dict, what: str, kafka_value, our_value) -> None:
    if kafka_value != our_value:
        raise Mismatch(
            f"{_where(k)}: {what} differs\n  Kafka: {kafka_value!r}\n  ours:  {our_value!r}\n"
            f"  Kafka line: {k['line'][:2000]}"
        )


def compare_record(k: dict, r: dict) -> None:
    """One record: Kafka's parsed dump line k against our offsets_log row r."""
    _check(k, "segment file", k["segment"], r["segment_file"])
    raw_key = None if r["raw_key"] is None else bytes(r["raw_key"])
    raw_value = None if r["raw_value"] is None else bytes(r["raw_value"])
    if "marker" in k:
        _check(k, "is_control", True, r["is_control"])
        _check(k, "marker text (control_text)", k["marker"], control_text(raw_key, raw_value))
        _check(k, "control_type", k["control_type"], r["control_type"])
        _check(k, "coordinator_epoch", k["coordinator_epoch"], r["coordinator_epoch"])
        return
    _check(k, "is_control", False, r["is_control"])
    key_text, payload_text = key_and_payload(raw_key, raw_value, k["offset"])
    # (b) exact text
    _check(k, "key text", k["key_text"], key_text)
    _check(k, "payload text", k["payload_text"], payload_text)
    # (c) structured columns
    key, payload = k["key"], k["payload"]
    if key is None:  # Kafka could not decode the key: nothing structured to compare
        return
    rtype = int(key["type"])
    kd = key["data"]
    _check(k, "record_type", rtype, r["record_type"])
    _check(k, "group_id", kd.get("group", kd.get("groupId")), r["group_id"])
    if "memberId" in kd:
        _check(k, "member_id", kd["memberId"], r["member_id"])
    tombstone = payload == "<DELETE>"
    _check(k, "is_tombstone", tombstone, r["is_tombstone"])
    if rtype in (0, 1):
        _check(k, "topic", kd["topic"], r["topic"])
        _check(k, "partition", kd["partition"], r["partition"])
    if tombstone or payload is None:
        return
    _check(k, "value_version", int(payload["version"]), r["value_version"])
    d = payload["data"]
    if rtype in (0, 1):
        _check(k, "committed_offset", d["offset"], r["committed_offset"])
        epoch = d.get("leaderEpoch", -1)
        _check(k, "leader_epoch", None if epoch == -1 else epoch, r["leader_epoch"])
        _check(k, "metadata", d["metadata"], r["metadata"])
        _check(k, "commit_timestamp", d["commitTimestamp"], _ms(r["commit_timestamp"]))
        expire = d.get("expireTimestamp", -1)
        _check(k, "expire_timestamp", None if expire == -1 else expire, _ms(r["expire_timestamp"]))
        _check(k, "topic_id", d.get("topicId"), r["topic_id"])
        _check(k, "value_json (none for offset commits)", None, r["value_json"])
    elif rtype == 2:
        gm = r["group_metadata"]
        _check(k, "group_metadata present", True, gm is not None)
        _check(k, "protocolType", d["protocolType"], gm["protocol_type"])
        _check(k, "generation", d["generation"], gm["generation"])
        _check(k, "protocol", d["protocol"], gm["protocol"])
        _check(k, "leader", d["leader"], gm["leader"])
        cst = d.get("currentStateTimestamp", -1)
        _check(k, "currentStateTimestamp", None if cst == -1 else cst, _ms(gm["current_state_timestamp"]))
        _check(k, "member count", len(d["members"]), len(gm["members"]))
        for i, (km, om) in enumerate(zip(d["members"], gm["members"])):
            m = f"members[{i}]."
            _check(k, m + "memberId", km["memberId"], om["member_id"])
            _check(k, m + "groupInstanceId", km.get("groupInstanceId"), om["group_instance_id"])
            _check(k, m + "clientId", km["clientId"], om["client_id"])
            _check(k, m + "clientHost", km["clientHost"], om["client_host"])
            _check(k, m + "sessionTimeout", km["sessionTimeout"], om["session_timeout_ms"])
            _check(k, m + "rebalanceTimeout", km.get("rebalanceTimeout", -1), om["rebalance_timeout_ms"])
            sub, asg = km.get("subscription"), km.get("assignment")
            if isinstance(sub, dict):  # Kafka decoded the consumer-protocol bytes
                _check(k, m + "subscription.topics", sub["topics"], om["subscribed_topics"])
                if "ownedPartitions" in sub:
                    _check(k, m + "subscription.ownedPartitions", sub["ownedPartitions"], om["owned_partitions"])
                if "generationId" in sub:
                    _check(k, m + "subscription.generationId", sub["generationId"], om["generation_id"])
                if "rackId" in sub:
                    _check(k, m + "subscription.rackId", sub["rackId"], om["rack_id"])
                _check(k, m + "subscription.userData", sub.get("userData"), _b64(om["subscription_user_data"]))
            if isinstance(asg, dict):
                _check(k, m + "assignment.assignedPartitions", asg["assignedPartitions"], om["assignment"])
                _check(k, m + "assignment.userData", asg.get("userData"), _b64(om["assignment_user_data"]))
        _check(k, "value_json (none for group metadata)", None, r["value_json"])
    else:
        _check(k, "group_metadata (only for type 2)", None, r["group_metadata"])
        ours = None if r["value_json"] is None else json.loads(r["value_json"])
        _check(k, "json.loads(value_json)", d, ours)


def compare_all(kafka: dict, ours: dict) -> None:
    missing = sorted(set(kafka) - set(ours))
    extra = sorted(set(ours) - set(kafka))
    if missing or extra:
        lines = [f"the offsets differ: {len(missing)} only in Kafka's dump, {len(extra)} only in offsets_log"]
        for p, o in missing[:10]:
            lines.append(f"  only Kafka: {_where(kafka[(p, o)])}: {kafka[(p, o)]['line'][:300]}")
        for p, o in extra[:10]:
            lines.append(f"  only ours:  segment {ours[(p, o)]['segment_file']} (__consumer_offsets-{p}) offset {o}")
        raise Mismatch("\n".join(lines))
    for where in sorted(kafka):
        compare_record(kafka[where], ours[where])


# ---------------------------------------------------------------------------------------------
# What the traffic produced (from Kafka's side, so independent of our decoder)
# ---------------------------------------------------------------------------------------------


def kinds(kafka: dict, groups: set[str] | None = None) -> collections.Counter:
    """Counter of 'TypeName' / 'TypeName tombstone' / 'marker COMMIT' ... over the records
    (of the given groups only, markers always)."""
    c = collections.Counter()
    for rec in kafka.values():
        if "marker" in rec:
            c[f"marker {rec['control_type']}"] += 1
            continue
        key = rec["key"]
        if key is None:
            c["undecodable"] += 1
            continue
        if groups is not None and key["data"].get("group", key["data"].get("groupId")) not in groups:
            continue
        t = int(key["type"])
        name = RECORD_TYPES[t][0] if t in RECORD_TYPES else f"type{t}"
        c[f"{t}:{name}" + (" tombstone" if rec["payload"] == "<DELETE>" else "")] += 1
    return c


def assert_traffic_coverage(kafka: dict, traffic, kip848: bool) -> None:
    def recs(group, rtype, tombstone=None):
        out = []
        for rec in kafka.values():
            key = rec.get("key")
            if key is None or int(key["type"]) != rtype:
                continue
            if key["data"].get("group", key["data"].get("groupId")) != group:
                continue
            if tombstone is not None and (rec["payload"] == "<DELETE>") != tombstone:
                continue
            out.append(rec)
        return out

    # classic group: commits, one with metadata, and a rebalance from 2 members to 1
    commits = recs(traffic.classic_group, 1, tombstone=False)
    assert len(commits) >= 3, f"too few offset commits of {traffic.classic_group}: {len(commits)}"
    assert any(c["payload"]["data"]["metadata"].startswith(traffic.metadata) for c in commits), (
        f"no commit of {traffic.classic_group} carries the metadata {traffic.metadata!r}"
    )
    sizes = [len(g["payload"]["data"]["members"]) for g in recs(traffic.classic_group, 2, tombstone=False)]
    assert 2 in sizes and 1 in sizes and sizes[-1] == 0, (
        f"{traffic.classic_group}: expected group metadata with 2, then 1, then 0 members; got {sizes}"
    )
    # standalone (non-ASCII id) commits
    assert recs(traffic.standalone_group, 1, tombstone=False), f"no commit of {traffic.standalone_group!r}"
    # deleted group: offset and group tombstones
    assert recs(traffic.deleted_group, 1, tombstone=True), f"no offset tombstones of {traffic.deleted_group}"
    assert recs(traffic.deleted_group, 2, tombstone=True), f"no group tombstone of {traffic.deleted_group}"
    # transactional commits and both markers
    assert len(recs(traffic.txn_group, 1, tombstone=False)) >= 4, f"too few commits of {traffic.txn_group}"
    markers = collections.Counter(r["control_type"] for r in kafka.values() if "marker" in r)
    assert markers["COMMIT"] >= 1 and markers["ABORT"] >= 1, f"expected COMMIT and ABORT markers, got {markers}"
    if kip848:
        g = traffic.kip848_group
        for t in (3, 5, 6, 7, 8):
            assert recs(g, t, tombstone=False), f"no {RECORD_TYPES[t][0]} (type {t}) record of {g}"
        for t in (3, 4, 5, 6, 7, 8):
            assert recs(g, t, tombstone=True), f"no {RECORD_TYPES[t][0]} (type {t}) tombstone of {g}"
        assert recs(g, 1, tombstone=False), f"no offset commit of KIP-848 group {g}"


# ---------------------------------------------------------------------------------------------
# The test
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["kafka4", "kafka39"])
def test_dumplog_parity(request, spark, replay_logdir, tmp_path, monkeypatch, name):
    broker = request.getfixturevalue(name)
    kip848 = int(re.match(r"\d+", broker.version).group()) >= 4  # KIP-848 groups are GA from 4.0
    timings = {}

    t0 = time.monotonic()
    traffic = generate(broker.bootstrap, kip848=kip848)
    timings["traffic"] = time.monotonic() - t0

    t0 = time.monotonic()
    log_dir = snapshot_offsets_log_dir(broker, str(tmp_path / "logdir"))
    segments = sorted(
        glob.glob(os.path.join(log_dir, "__consumer_offsets-*", "*.log")),
        key=lambda p: (int(_SEGMENT.search(os.path.dirname(p)).group(1)), os.path.basename(p)),
    )
    assert len(segments) >= broker.offsets_partitions, segments
    with monkeypatch.context() as m:
        # Kafka's JSON keeps non-ASCII characters raw: make the JVM print them as UTF-8
        # whatever the locale, so a '?' can never pass for a decoder difference.
        m.setenv(
            "JAVA_TOOL_OPTIONS",
            " ".join(
                filter(
                    None,
                    [
                        os.environ.get("JAVA_TOOL_OPTIONS"),
                        "-Dfile.encoding=UTF-8",
                        "-Dsun.stdout.encoding=UTF-8",
                        "-Dstdout.encoding=UTF-8",
                    ],
                )
            ),
        )
        out = dump_log_segments(broker.jar_dir, segments)
    kafka, dumped = parse_dump(out)
    timings["dump"] = time.monotonic() - t0
    assert sorted(dumped) == sorted(os.path.abspath(s) for s in segments), (
        f"DumpLogSegments dumped {dumped}, expected {segments}"
    )
    assert traffic.standalone_group in out, "the non-ASCII group id is not in DumpLogSegments' output as UTF-8"

    t0 = time.monotonic()
    warehouse = str(tmp_path / "warehouse")
    replay_logdir(log_dir, warehouse, int(time.time() * 1000))
    ours = {(r["offsets_partition"], r["log_offset"]): r for r in rows(spark, warehouse, "offsets_log")}
    timings["replay"] = time.monotonic() - t0

    everything = kinds(kafka)
    mine = kinds(kafka, set(traffic.groups))
    print(
        f"\n[{name}] Kafka {broker.version}: {len(kafka)} records in {len(segments)} segments; "
        + ", ".join(f"{k} {v:.1f}s" for k, v in timings.items())
        + f"; traffic steps {traffic.steps}"
    )
    print(f"[{name}] whole log: " + ", ".join(f"{k}={v}" for k, v in sorted(everything.items())))
    print(f"[{name}] this test's groups: " + ", ".join(f"{k}={v}" for k, v in sorted(mine.items())))

    compare_all(kafka, ours)
    assert_traffic_coverage(kafka, traffic, kip848)
