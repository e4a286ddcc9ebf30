"""lib.testdata.busy: the busy-cluster benchmark log. A small log is generated once and read back
with the project's readers (lib.decode for the offsets partitions, lib.source.topic_log and
topic_scan for the consumed topics): its bytes depend on the seed only, its batches decode, its
shares are the asked ones, every classic assignment is what lib.assignors computes from the
subscriptions as recorded, and no commit is beyond its partition's end at the time. The last
test replays it with the real job and reads the assignment audit and the offsets."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import random
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest

from lib.assignors import Subscription, assign
from lib.codec.segments import SegmentReader, read_segment_bytes
from lib.codec.serde import encode_assignment, encode_subscription, encode_value
from lib.codec.writer import encode_record
from lib.decode import SegmentDecoder
from lib.replay.partitioning import partition_for
from lib.source.topic_log import find_topic_partitions
from lib.source.topic_scan import scan_partition
from lib.testdata import busy, fastbytes
from lib.testdata.logbuilder import consumer_member, group_metadata_value, offset_commit_value
from tests.helpers import NOW, REPO

HOUR = 3_600_000
SMALL = {
    "records": 12_000,
    "partitions": 6,
    "groups": 48,
    "seed": 11,
    "consumed_partitions": 40,
    "topic_records": 40_000,
    "span_ms": 2 * HOUR,
    "start_ts": NOW - 3 * HOUR,  # the replay below judges expiry as of tests.helpers.NOW
}
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    log_dir = str(tmp_path_factory.mktemp("busy") / "logdir")
    stats = busy.generate_busy_log(log_dir, workers=2, **SMALL)
    return log_dir, stats


def _digests(log_dir: str) -> dict[str, str]:
    out = {}
    for folder, _, files in os.walk(log_dir):
        for name in files:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, log_dir)] = hashlib.sha256(f.read()).hexdigest()
    return out


def _ms(value: dt.datetime) -> int:
    return (value - EPOCH) // dt.timedelta(milliseconds=1)


@pytest.fixture(scope="module")
def offsets_rows(generated) -> list[dict]:
    """Every record of the offsets partitions as lib.decode reads it (CRCs checked)."""
    log_dir, _ = generated
    rows = []
    for p in range(SMALL["partitions"]):
        folder = os.path.join(log_dir, f"__consumer_offsets-{p}")
        for name in sorted(f for f in os.listdir(folder) if f.endswith(".log")):
            for batch in SegmentDecoder(os.path.join(folder, name), p, fast=False, verify_crc=True):
                rows.extend(batch.to_pylist())
    return rows


# --- determinism ---------------------------------------------------------------------------------


def test_same_seed_same_bytes_whatever_the_workers(generated, tmp_path):
    log_dir, stats = generated
    again = busy.generate_busy_log(str(tmp_path / "again"), workers=1, **SMALL)
    assert _digests(str(tmp_path / "again")) == _digests(log_dir)
    assert {k: v for k, v in again.items() if k != "seconds"} == {k: v for k, v in stats.items() if k != "seconds"}
    other = {**SMALL, "seed": 12, "records": 2_000}
    busy.generate_busy_log(str(tmp_path / "other"), workers=1, **other)
    assert _digests(str(tmp_path / "other")) != _digests(log_dir)


def test_same_bytes_from_another_interpreter(generated, tmp_path):
    """Nothing depends on str hashing (sets of names iterate in a per-process order)."""
    log_dir, _ = generated
    args = [sys.executable, "-m", "lib.testdata.busy", "--out", str(tmp_path / "cli"), "--workers", "1"]
    args += ["--records", str(SMALL["records"]), "--partitions", str(SMALL["partitions"])]
    args += ["--groups", str(SMALL["groups"]), "--seed", str(SMALL["seed"]), "--start-ts", str(SMALL["start_ts"])]
    args += ["--consumed-partitions", str(SMALL["consumed_partitions"]), "--topic-records", str(SMALL["topic_records"])]
    args += ["--span-hours", str(SMALL["span_ms"] / HOUR)]
    env = dict(os.environ, PYTHONPATH=REPO, PYTHONHASHSEED="12345")
    subprocess.run(args, cwd=REPO, env=env, check=True, capture_output=True)
    assert _digests(str(tmp_path / "cli")) == _digests(log_dir)


def test_cli_writes_the_figures(tmp_path):
    out, figures = tmp_path / "logdir", tmp_path / "busy.json"
    args = ["--records", "1500", "--out", str(out), "--groups", "20", "--partitions", "3", "--workers", "1"]
    assert busy.main([*args, "--consumed-partitions", "12", "--json", str(figures)]) == 0
    stats = json.loads(figures.read_text())
    assert stats["version"] == busy.BUSY_GENERATOR_VERSION
    assert 1500 <= stats["offsets"]["records"] < 1600
    assert stats["consumed"]["partitions"] == len(find_topic_partitions(str(out))) >= 12


# --- the fast encoders are the schema encoders ----------------------------------------------------


def test_fast_encoders_write_the_schema_encoders_bytes():
    rng = random.Random(5)
    topic_id = "ASNFZ4mrze8BI0VniavN7w"
    for version in (3, 4):
        for metadata in ("", "ckpt-é"):
            ids = (None, topic_id) if version == 4 else (None,)
            for tid in ids:
                fast = fastbytes.offset_commit_value(
                    123456789012, busy.T0, 7, metadata.encode(), version, tid and fastbytes.topic_id_bytes(tid)
                )
                ref = offset_commit_value(123456789012, busy.T0, version=version, leader_epoch=7, metadata=metadata)
                if tid:
                    ref = offset_commit_value(
                        123456789012, busy.T0, version=4, leader_epoch=7, metadata=metadata, topic_id=tid
                    )
                assert fast == ref
    owned = (("orders", 0), ("orders", 3), ("payments", 1))
    owned_json = [{"topic": "orders", "partitions": [0, 3]}, {"topic": "payments", "partitions": [1]}]
    for version in range(4):
        for user_data in (None, b"", b"\x00\x01\xff"):
            fast = fastbytes.subscription(version, ["a", "b"], user_data, owned, 12, "az1")
            ref = encode_subscription(
                version,
                {
                    "topics": ["a", "b"],
                    "userData": user_data,
                    "ownedPartitions": owned_json,
                    "generationId": 12,
                    "rackId": "az1",
                },
            )
            assert fast == ref
        assert fastbytes.assignment(version, owned) == encode_assignment(
            version, {"assignedPartitions": owned_json, "userData": None}
        )
    for version in range(4):
        members, packed = [], []
        for i in range(3):
            m = consumer_member(f"m{i}", ["a"], {"a": [i]}, instance_id=f"i{i}" if version >= 3 else None)
            members.append(m)
            head = fastbytes.member_head(
                version, m["memberId"], m["groupInstanceId"], "client", "/127.0.0.1", 300000, 45000
            )
            packed.append(fastbytes.member(head, m["subscription"], m["assignment"]))
        ref = group_metadata_value(generation=4, leader="m1", state_ts=busy.T0, members=members, version=version)
        fast = fastbytes.group_metadata_value(version, "consumer", 4, "range", "m1", busy.T0, packed)
        assert fast == ref
    assert fastbytes.group_metadata_value(3, "", 0, None, None, 5, []) == encode_value(
        2,
        3,
        {
            "protocolType": "",
            "generation": 0,
            "protocol": None,
            "leader": None,
            "currentStateTimestamp": 5,
            "members": [],
        },
    )
    items = [
        (rng.randbytes(rng.randrange(1, 300)), rng.choice((None, rng.randbytes(rng.randrange(0, 20000)))))
        for _ in range(40)
    ]
    assert fastbytes.records(items) == b"".join(encode_record(i, 0, k, v) for i, (k, v) in enumerate(items))


# --- the offsets partitions ----------------------------------------------------------------------


def test_offsets_batches_decode_with_the_asked_shares(generated, offsets_rows):
    _, stats = generated
    rows = offsets_rows
    assert len(rows) == stats["offsets"]["records"]
    assert all(r["decode_status"] == "ok" for r in rows)
    kinds = Counter(r["record_type"] for r in rows if not r["is_control"])
    total = len(rows)
    assert 0.04 < kinds[2] / total < 0.06  # GroupMetadata, values and tombstones
    assert sum(kinds[t] for t in range(3, 9)) > 0  # KIP-848 records
    transactional = sum(1 for r in rows if r["is_transactional"])
    assert 0.01 < transactional / total < 0.03
    markers = Counter(r["control_type"] for r in rows if r["is_control"])
    assert markers["COMMIT"] and markers["ABORT"]
    tombstones = sum(1 for r in rows if r["is_tombstone"] and r["record_type"] in (1, 2))
    assert 0.005 < tombstones / total < 0.015
    batches = {(r["offsets_partition"], r["batch_base_offset"]): r["compression"] for r in rows if not r["is_control"]}
    compressed = Counter(c for c in batches.values() if c != "none")
    assert set(compressed) == {"gzip", "snappy", "lz4", "zstd"}
    assert 0.07 < sum(compressed.values()) / len(batches) < 0.13
    versions = Counter(
        (r["record_type"], r["value_version"]) for r in rows if not r["is_control"] and not r["is_tombstone"]
    )
    assert versions[(1, 3)] and versions[(1, 4)] and versions[(2, 3)] and versions[(2, 2)]
    assert {v for (t, v) in versions if t == 1} == {3, 4}
    for r in rows:  # every group in the partition Kafka's coordinator would look it up in
        if r["group_id"] is not None:
            assert partition_for(r["group_id"], SMALL["partitions"]) == r["offsets_partition"]
    members = [len(r["group_metadata"]["members"]) for r in rows if r["record_type"] == 2 and r["group_metadata"]]
    assert max(members) <= busy.MAX_MEMBERS and Counter(members)[0] > 0
    subscription_versions = {
        m["subscription_version"] for r in rows if r["group_metadata"] for m in r["group_metadata"]["members"]
    }
    assert subscription_versions == {0, 1, 2, 3}


def test_group_epochs_and_generations_increase(offsets_rows):
    generation: dict[str, int] = {}
    epochs: dict[str, int] = {}
    for r in offsets_rows:
        if r["record_type"] == 2 and r["group_metadata"]:
            g = r["group_metadata"]["generation"]
            assert g >= generation.get(r["group_id"], 0)  # the same one again: a static member's rejoin
            generation[r["group_id"]] = g
        if r["record_type"] == 3 and r["value_json"]:
            epoch = json.loads(r["value_json"])["epoch"]
            assert epoch > epochs.get(r["group_id"], 0)
            epochs[r["group_id"]] = epoch
    assert len(generation) > 10 and len(epochs) >= 3


def _subscription(member: dict) -> Subscription:
    """A member's subscription as the leader decodes it from the JoinGroup response."""
    owned = tuple((o["topic"], p) for o in member["owned_partitions"] or () for p in o["partitions"])
    generation = member["generation_id"]
    return Subscription(
        member["member_id"],
        tuple(member["subscribed_topics"]),
        member["group_instance_id"],
        owned,
        generation if generation is not None and generation >= 0 else None,
        member["rack_id"],
        member["subscription_user_data"],
    )


def test_classic_assignments_are_the_assignors_own(generated, offsets_rows):
    """Recomputed from each GroupMetadata record's subscriptions with the topics' partition
    counts in the log dir: the record that opens a generation holds exactly its assignor's
    result; a static member's rejoin later in the generation may not (its new subscription),
    which the generator counts."""
    log_dir, stats = generated
    counts: dict[str, int] = {}
    for log in find_topic_partitions(log_dir):
        counts[log.topic] = max(counts.get(log.topic, 0), log.partition + 1)
    last: dict[tuple[str, int], tuple[str, bool]] = {}
    assignors = Counter()
    for r in offsets_rows:
        md = r["group_metadata"]
        if r["record_type"] != 2 or not md or not md["members"]:
            continue
        key = (r["group_id"], md["generation"])
        subs = [_subscription(m) for m in md["members"]]
        recorded = {
            m["member_id"]: {(a["topic"], p) for a in m["assignment"] for p in a["partitions"]} for m in md["members"]
        }
        topics = {t for s in subs for t in s.topics}
        result = assign(md["protocol"], {t: counts[t] for t in topics}, subs)
        matches = all(set(result[mid]) == tps for mid, tps in recorded.items())
        if key not in last:
            assert matches, (r["group_id"], md["generation"], md["protocol"])
            assignors[md["protocol"]] += 1
        last[key] = (md["protocol"], matches)
    assert set(assignors) == {"range", "roundrobin", "sticky", "cooperative-sticky"}
    expected = stats["expected"]
    assert len(last) == expected["classic_generations"]
    assert sum(m for _, m in last.values()) == expected["classic_generations_assignor_own"]
    assert stats["offsets"]["rebalances"]["cooperative_follow_up"] > 0
    assert stats["offsets"]["rebalances"]["static_rejoin"] > 0


def test_commits_never_pass_the_partition_end_at_their_time(generated, offsets_rows):
    log_dir, _ = generated
    ends = {}
    for log in find_topic_partitions(log_dir):
        scans = scan_partition(log)
        end = np.concatenate([s.end_offset for s in scans])
        visible = np.maximum.accumulate(np.concatenate([s.max_timestamp for s in scans]))
        ends[(log.topic, log.partition)] = (visible, end)
    commits = [r for r in offsets_rows if r["record_type"] == 1 and not r["is_tombstone"]]
    assert commits
    behind = 0
    for r in commits:
        visible, end = ends[(r["topic"], r["partition"])]
        i = np.searchsorted(visible, _ms(r["commit_timestamp"]), side="right") - 1
        at_the_time = int(end[i]) if i >= 0 else 0
        assert r["committed_offset"] <= at_the_time, r
        behind += r["committed_offset"] < at_the_time
    assert behind > len(commits) // 50  # quiet partitions are read to their end; some groups fall behind


def test_consumed_topic_segments_are_valid(generated, offsets_rows):
    log_dir, stats = generated
    logs = find_topic_partitions(log_dir)
    assert len(logs) == stats["consumed"]["partitions"]
    committed = {(r["topic"], r["partition"]) for r in offsets_rows if r["record_type"] == 1}
    assert committed <= {(log.topic, log.partition) for log in logs}
    records = 0
    for log in logs:
        assert log.topic_id and log.high_watermark is not None
        scans = scan_partition(log)
        assert all(s.trailing_bytes == 0 for s in scans)
        assert int(scans[-1].end_offset[-1]) == log.high_watermark
        for seg in log.segments:
            for batch in SegmentReader(read_segment_bytes(seg.path), file=seg.path, partition=log.partition):
                records += len(batch.records)
    assert records == stats["consumed"]["records"]
    codecs = {c for c, n in stats["consumed"]["bytes_by_codec"].items() if n}
    assert len(codecs) >= 2  # some topics compressed, with their own codecs


# --- the real job ---------------------------------------------------------------------------------


@pytest.mark.spark
def test_replayed_by_the_job_every_classic_generation_is_audited_as_its_assignors(generated, tmp_path):
    from deltalake import DeltaTable

    from tests.helpers import replay_job

    log_dir, stats = generated
    job = replay_job(log_dir, tmp_path / "wh")
    out, err = job.communicate(timeout=900)
    assert job.returncode == 0, err[-3000:]
    audit = DeltaTable(str(tmp_path / "wh" / "assignment_audit")).to_pyarrow_table().to_pylist()
    classic = [r for r in audit if r["group_type"] == "classic"]
    expected = stats["expected"]
    assert len(classic) == expected["classic_generations"]
    verdicts = Counter(r["verdict"] for r in classic)
    assert verdicts["matches"] == expected["classic_generations_assignor_own"], verdicts
    consumer = [r for r in audit if r["group_type"] == "consumer"]
    assert len(consumer) == expected["consumer_target_assignments"]
    offsets = DeltaTable(str(tmp_path / "wh" / "group_offsets")).to_pyarrow_table().to_pylist()
    assert len(offsets) == expected["group_offsets"]
    assert sum(r["committed_offset"] for r in offsets) == expected["committed_offset_sum"]
    pending = DeltaTable(str(tmp_path / "wh" / "pending_transactional_offsets")).to_pyarrow_table()
    assert pending.num_rows == expected["pending_transactional_offsets"] == 0
