"""--on-corrupt=quarantine: undecodable batches and records are kept, with their bytes, in
quarantined_records; the replay goes on without them and says so."""

from __future__ import annotations

import struct

import pytest

from jobs import replay_offsets
from lib.testdata.logbuilder import T0, PartitionLogBuilder, offset_commit_key
from tests.helpers import rows

pytestmark = pytest.mark.spark
NOW = T0 + 86_400_000


def run_job(*args) -> int:
    return replay_offsets.main([*map(str, args), "--now", str(NOW)])


@pytest.fixture
def corrupt_log(tmp_path):
    """Partition 0: two good commits, then a record whose value version (9) no Kafka knows.
    Partition 1: three one-record batches of equal size; the middle one's CRC is broken."""
    logs = tmp_path / "logs"
    b0 = PartitionLogBuilder(0).commit("g0", "t", 0, 1, T0).commit("g0", "t", 1, 2, T0)
    bad_value = struct.pack(">hq", 9, 5) + b"\x00\x00" + struct.pack(">q", T0)
    b0.batch([(offset_commit_key("g0", "t", 0), bad_value, T0)])  # offset 2
    b1 = PartitionLogBuilder(1).commit("g1", "t", 0, 3, T0).commit("g1", "t", 1, 4, T0).commit("g1", "t", 0, 5, T0)
    b0.write(str(logs))
    p1 = b1.write(str(logs)) + "/00000000000000000000.log"
    data = bytearray(open(p1, "rb").read())
    size = len(data) // 3
    batch1 = bytes(data[size : 2 * size])
    data[size + 70] ^= 0xFF
    open(p1, "wb").write(bytes(data))
    p0 = str(logs / "__consumer_offsets-0" / "00000000000000000000.log")
    return {
        "logs": logs,
        "p0": p0,
        "p1": p1,
        "size": size,
        "batch1": batch1,
        "corrupted1": bytes(data[size : 2 * size]),
        "bad_value": bad_value,
    }


def test_quarantine_keeps_the_bad_bytes_and_replays_the_rest(spark, tmp_path, corrupt_log, capsys):
    wh = tmp_path / "wh"
    assert run_job("--input", corrupt_log["logs"], "--warehouse", wh, "--on-corrupt", "quarantine") == 0
    out = capsys.readouterr().out
    assert "QUARANTINED 2 undecodable batches/records" in out
    assert "partition 0 00000000000000000000.log: 1 record(s)" in out
    assert "partition 1 00000000000000000000.log: 1 batch(s)" in out

    q = rows(spark, str(wh), "quarantined_records", ("offsets_partition",))
    assert [
        (r["offsets_partition"], r["segment_file"], r["log_offset"], r["level"], r["error_kind"], r["file_path"])
        for r in q
    ] == [
        (0, "00000000000000000000.log", 2, "record", "UnknownRecordVersionError", corrupt_log["p0"]),
        (1, "00000000000000000000.log", 1, "batch", "CorruptBatchError", corrupt_log["p1"]),
    ]
    record, batch = q
    assert record["error"] == "unknown value version 9 for coordinator record type 1"
    assert record["raw_key"] == offset_commit_key("g0", "t", 0) and record["raw_value"] == corrupt_log["bad_value"]
    assert record["raw_bytes"] is None
    assert batch["byte_position"] == corrupt_log["size"]
    assert batch["error"].startswith("CRC-32C mismatch: stored ")
    assert batch["raw_bytes"] == corrupt_log["corrupted1"] and batch["raw_bytes"] != corrupt_log["batch1"]
    assert batch["raw_key"] is None and batch["raw_value"] is None

    offsets = {(r["group_id"], r["partition"]): r["committed_offset"] for r in rows(spark, str(wh), "group_offsets")}
    assert offsets == {("g0", 0): 1, ("g0", 1): 2, ("g1", 0): 5}  # g1 t-1 (offset 4) was in the bad batch
    logged = {(r["offsets_partition"], r["log_offset"]) for r in rows(spark, str(wh), "offsets_log")}
    assert logged == {(0, 0), (0, 1), (1, 0), (1, 2)}
    cps = {r["offsets_partition"]: r["next_log_offset"] for r in rows(spark, str(wh), "replay_checkpoints")}
    assert cps == {0: 3, 1: 3}

    # An incremental run over the same log reads nothing new and quarantines nothing twice.
    assert run_job("--input", corrupt_log["logs"], "--warehouse", wh, "--on-corrupt", "quarantine") == 0
    assert len(rows(spark, str(wh), "quarantined_records")) == 2


def test_an_impossible_length_quarantines_the_rest_of_the_segment(spark, tmp_path, corrupt_log, capsys):
    path, size = corrupt_log["p1"], corrupt_log["size"]
    data = bytearray(open(path, "rb").read())
    data[size : 2 * size] = corrupt_log["batch1"]  # undo the CRC damage
    data[size + 8 : size + 12] = struct.pack(">i", 5)  # no entry is 5 bytes long
    open(path, "wb").write(bytes(data))
    wh = tmp_path / "wh"
    assert (
        run_job("--input", corrupt_log["logs"], "--warehouse", wh, "--on-corrupt", "quarantine", "--partitions", "1")
        == 0
    )
    q = rows(spark, str(wh), "quarantined_records")
    assert [(r["log_offset"], r["level"], r["byte_position"], r["error"]) for r in q] == [
        (1, "batch", size, "entry size 5 is smaller than the minimum 14")
    ]
    assert q[0]["raw_bytes"] == bytes(data[size:])  # everything from there on, unframeable
    offsets = {(r["group_id"], r["partition"]): r["committed_offset"] for r in rows(spark, str(wh), "group_offsets")}
    assert offsets == {("g1", 0): 3}
    cps = {
        r["offsets_partition"]: (r["next_log_offset"], r["trailing_bytes"])
        for r in rows(spark, str(wh), "replay_checkpoints")
    }
    assert cps == {1: (1, 2 * size)}  # the checkpoint stays before the damage


def test_fail_is_the_default_and_writes_no_quarantine(spark, tmp_path, corrupt_log, capsys):
    wh = tmp_path / "wh"
    assert run_job("--input", corrupt_log["logs"], "--warehouse", wh, "--partitions", "1") == 2
    err = capsys.readouterr().err
    assert "CRC-32C mismatch" in err and f"file {corrupt_log['p1']}, partition 1, log offset 1" in err
    assert not (wh / "quarantined_records").exists()
