"""Bad input stops the run with one clear message naming the file, partition and log offset,
and leaves every table exactly as it was."""

from __future__ import annotations

import os
import struct

import pytest

from jobs import replay_offsets
from lib.testdata.logbuilder import T0, PartitionLogBuilder, offset_commit_key
from tests.helpers import rows

TABLES = (
    "offsets_log",
    "group_offsets",
    "expired_offsets",
    "pending_transactional_offsets",
    "consumer_groups",
    "expired_groups",
    "replay_checkpoints",
)
NOW = T0 + 86_400_000


def run_job(*args) -> int:
    return replay_offsets.main([*map(str, args), "--quiet", "--now", str(NOW)])


def delta_versions(spark, warehouse) -> dict:
    from delta.tables import DeltaTable

    return {t: DeltaTable.forPath(spark, os.path.join(warehouse, t)).history(1).collect()[0]["version"] for t in TABLES}


def test_missing_input_path(tmp_path, capsys):
    assert run_job("--input", tmp_path / "nope", "--warehouse", tmp_path / "wh") == 2
    err = capsys.readouterr().err
    assert f"input path does not exist: {tmp_path / 'nope'}" in err
    assert "Traceback" not in err
    assert not (tmp_path / "wh").exists()


def test_input_without_offsets_partitions(tmp_path, capsys):
    (tmp_path / "logs" / "orders-0").mkdir(parents=True)
    (tmp_path / "logs" / "__consumer_offsets-3-delete").mkdir()
    assert run_job("--input", tmp_path / "logs", "--warehouse", tmp_path / "wh") == 2
    assert "no __consumer_offsets partitions in" in capsys.readouterr().err


def test_requested_partition_missing(tmp_path, capsys):
    PartitionLogBuilder(0).commit("g", "t", 0, 1, T0).write(str(tmp_path / "logs"))
    assert run_job("--input", tmp_path / "logs", "--warehouse", tmp_path / "wh", "--partitions", "0,7") == 2
    assert "__consumer_offsets partitions [7] not found" in capsys.readouterr().err


def test_partitions_without_segments(tmp_path, capsys):
    (tmp_path / "logs" / "__consumer_offsets-0").mkdir(parents=True)
    assert run_job("--input", tmp_path / "logs", "--warehouse", tmp_path / "wh") == 2
    assert "hold no .log segments" in capsys.readouterr().err


def test_bad_now(tmp_path, capsys):
    PartitionLogBuilder(0).commit("g", "t", 0, 1, T0).write(str(tmp_path / "logs"))
    assert (
        replay_offsets.main(
            ["--input", str(tmp_path / "logs"), "--warehouse", str(tmp_path / "wh"), "--now", "yesterday"]
        )
        == 2
    )
    assert "not epoch milliseconds or an ISO-8601 time: 'yesterday'" in capsys.readouterr().err


def test_fetch_size_only_with_a_live_source(tmp_path, capsys):
    PartitionLogBuilder(0).commit("g", "t", 0, 1, T0).write(str(tmp_path / "logs"))
    assert run_job("--input", tmp_path / "logs", "--warehouse", tmp_path / "wh", "--fetch-max-bytes", "1024") == 2
    assert "--fetch-max-bytes takes a positive size, with --bootstrap-servers" in capsys.readouterr().err
    assert not (tmp_path / "wh").exists()


@pytest.fixture
def good_run(spark, tmp_path):
    """A log of two partitions replayed once: the state bad runs must not touch."""
    logs = tmp_path / "logs"
    b0 = PartitionLogBuilder(0).commit("g0", "t", 0, 1, T0).commit("g0", "t", 1, 2, T0)
    b1 = PartitionLogBuilder(1).commit("g1", "t", 0, 3, T0)
    b0.write(str(logs))
    b1.write(str(logs))
    wh = tmp_path / "wh"
    assert run_job("--input", logs, "--warehouse", wh) == 0
    before = {t: rows(spark, str(wh), t, ("offsets_partition",)) for t in TABLES if t != "replay_checkpoints"}
    return logs, wh, b0, b1, delta_versions(spark, str(wh)), before


def assert_untouched(spark, wh, versions, before):
    assert delta_versions(spark, str(wh)) == versions
    for t, expected in before.items():
        assert rows(spark, str(wh), t, ("offsets_partition",)) == expected
    assert not (wh / "_staging").exists()


def test_a_segment_deleted_after_the_listing_stops_the_run_and_changes_nothing(spark, good_run):
    """A live log dir: the log cleaner deleted a segment of partition 1 (merged into another)
    after the run listed it. The run stops naming the file, rather than replay around it."""
    from lib.source.logdir import find_partitions
    from lib.spark.pipeline import ReplayError, run_replay

    logs, wh, b0, b1, versions, before = good_run
    b1.commit("g1", "t", 1, 4, T0)
    b1.write(str(logs))
    listed = find_partitions(str(logs))
    gone = listed[1].segments[0].path
    os.remove(gone)
    with pytest.raises(ReplayError) as e:
        run_replay(spark, listed, str(wh), NOW)
    assert str(e.value).startswith("SegmentGone: a listed segment was deleted while the run read the log")
    assert f"file {gone}, partition 1" in str(e.value)
    assert_untouched(spark, wh, versions, before)


def test_crc_mismatch_names_file_partition_offset_and_changes_nothing(spark, good_run, capsys):
    logs, wh, b0, b1, versions, before = good_run
    b1.commit("g1", "t", 1, 4, T0)  # offset 1 of partition 1
    path = b1.write(str(logs)) + "/00000000000000000000.log"
    data = bytearray(open(path, "rb").read())
    second = len(data) - (len(data) // 2)  # start of the second batch: both batches have equal size
    data[second + 70] ^= 0xFF  # inside the CRC-covered region
    open(path, "wb").write(bytes(data))
    assert run_job("--input", logs, "--warehouse", wh) == 2
    err = capsys.readouterr().err
    assert "CRC-32C mismatch" in err
    assert f"file {path}, partition 1, log offset 1, byte position {second}" in err
    assert "no table was changed" in err and "Traceback" not in err
    assert_untouched(spark, wh, versions, before)


def test_impossible_length_is_corrupt(spark, good_run, capsys):
    logs, wh, b0, b1, versions, before = good_run
    path = str(logs / "__consumer_offsets-0" / "00000000000000000000.log")
    data = bytearray(open(path, "rb").read())
    data[8:12] = struct.pack(">i", 5)  # batch length below any valid entry
    open(path, "wb").write(bytes(data))
    # an incremental run starts where the last one stopped (as a Kafka fetch does): the damage,
    # in bytes already replayed, is met by a full run
    assert run_job("--input", logs, "--warehouse", wh, "--full") == 2
    err = capsys.readouterr().err
    assert "entry size 5 is smaller than the minimum 14" in err
    assert f"file {path}, partition 0, log offset 0, byte position 0" in err
    assert_untouched(spark, wh, versions, before)


def test_unknown_value_version_fails_like_kafkas_loader(spark, good_run, capsys):
    logs, wh, b0, b1, versions, before = good_run
    value = struct.pack(">hq", 9, 5) + b"\x00\x00" + struct.pack(">q", T0)
    b0.batch([(offset_commit_key("g0", "t", 0), value, T0)])  # offset 2
    b0.write(str(logs))
    assert run_job("--input", logs, "--warehouse", wh) == 2
    err = capsys.readouterr().err
    assert "unknown value version 9 for coordinator record type 1" in err
    assert "partition 0, log offset 2" in err
    assert_untouched(spark, wh, versions, before)


def test_empty_value_is_malformed_not_a_tombstone(spark, good_run, capsys):
    logs, wh, b0, b1, versions, before = good_run
    b0.batch([(offset_commit_key("g0", "t", 0), b"", T0)])  # offset 2, zero-length value
    b0.write(str(logs))
    assert run_job("--input", logs, "--warehouse", wh) == 2
    err = capsys.readouterr().err
    assert "offset commit value has no version" in err and "partition 0, log offset 2" in err
    assert_untouched(spark, wh, versions, before)


def test_share_record_for_a_classic_group_fails_like_kafkas_loader(spark, good_run, capsys):
    logs, wh, b0, b1, versions, before = good_run
    b0.record(11, {"group_id": "g0"}, {"epoch": 1, "metadataHash": 0}, T0)
    b0.write(str(logs))
    assert run_job("--input", logs, "--warehouse", wh) == 2
    err = capsys.readouterr().err
    assert "share record for group 'g0', which is a classic group" in err
    assert_untouched(spark, wh, versions, before)


def test_truncated_tail_is_ignored_and_reported(spark, good_run):
    logs, wh, b0, b1, versions, before = good_run
    path = str(logs / "__consumer_offsets-1" / "00000000000000000000.log")
    with open(path, "ab") as f:
        f.write(b"\x00" * 8 + struct.pack(">i", 500) + b"\x00" * 30)  # a batch cut short by a crash
    assert run_job("--input", logs, "--warehouse", wh) == 0
    cps = {
        r["offsets_partition"]: (r["next_log_offset"], r["trailing_bytes"])
        for r in rows(spark, str(wh), "replay_checkpoints")
    }
    assert cps == {0: (2, 0), 1: (1, 42)}


def test_preallocated_segment_is_read_up_to_its_zeros(spark, good_run):
    """log.preallocate=true: the active segment is created at its full size and filled from the
    front; a crash (or a copy of a running broker's log dir) leaves the zeros after the data."""
    logs, wh, b0, b1, versions, before = good_run
    path = str(logs / "__consumer_offsets-1" / "00000000000000000000.log")
    written = os.path.getsize(path)
    os.truncate(path, 1 << 20)  # the zeros of a preallocated 1 MiB segment
    assert run_job("--input", logs, "--warehouse", wh) == 0
    assert (
        rows(spark, str(wh), "replay_checkpoints", ("offsets_partition",))[1]["trailing_bytes"] == (1 << 20) - written
    )

    # the broker writes on into the zeros: the next run reads from where the data ended
    b1.commit("g1", "t", 1, 4, T0)  # offset 1
    with open(path, "r+b") as f:
        f.seek(written)
        f.write(b1.segments[0][1][written:])
    grown = len(b1.segments[0][1])
    assert os.path.getsize(path) == 1 << 20 and grown > written
    assert run_job("--input", logs, "--warehouse", wh) == 0
    cps = {
        r["offsets_partition"]: (r["next_log_offset"], r["trailing_bytes"], r["next_byte_position"])
        for r in rows(spark, str(wh), "replay_checkpoints")
    }
    p0_size = os.path.getsize(logs / "__consumer_offsets-0" / "00000000000000000000.log")
    assert cps == {0: (2, 0, p0_size), 1: (2, (1 << 20) - grown, grown)}
    offsets = {
        (r["group_id"], r["topic"], r["partition"]): r["committed_offset"]
        for r in rows(spark, str(wh), "group_offsets")
    }
    assert offsets == {("g0", "t", 0): 1, ("g0", "t", 1): 2, ("g1", "t", 0): 3, ("g1", "t", 1): 4}


def test_zeros_followed_by_data_are_corrupt(spark, good_run, capsys):
    logs, wh, b0, b1, versions, before = good_run
    path = str(logs / "__consumer_offsets-1" / "00000000000000000000.log")
    data = open(path, "rb").read()
    b1.commit("g1", "t", 1, 4, T0)
    later = b1.segments[0][1][len(data) :]  # offset 1's batch: its base offset begins with 7 zeros
    open(path, "wb").write(data + bytes(100) + later)
    assert run_job("--input", logs, "--warehouse", wh, "--full") == 2
    err = capsys.readouterr().err
    assert "entry size 0 is smaller than the minimum 14 (107 zero bytes, then data" in err
    assert f"file {path}, partition 1, log offset 0, byte position {len(data)}" in err
    assert_untouched(spark, wh, versions, before)


def test_same_input_twice_leaves_identical_tables(spark, good_run):
    logs, wh, b0, b1, versions, before = good_run
    assert run_job("--input", logs, "--warehouse", wh) == 0
    for t, expected in before.items():
        assert rows(spark, str(wh), t, ("offsets_partition",)) == expected


def test_a_workers_error_reaches_the_driver_typed(tmp_path, replay_logdir):
    """The replay's ReplayError keeps the worker's error as a WorkerError (kind, file,
    partition, offset, byte position), not only as text."""
    from lib.lake.worker_errors import ReplayError, WorkerError

    b = PartitionLogBuilder(2).commit("g", "t", 0, 1, T0).commit("g", "t", 0, 2, T0)
    path = b.write(str(tmp_path / "logs")) + "/00000000000000000000.log"
    data = bytearray(open(path, "rb").read())
    second = len(data) // 2  # both batches have the same size
    data[second + 70] ^= 0xFF  # inside the CRC-covered region of offset 1's batch
    open(path, "wb").write(bytes(data))
    with pytest.raises(ReplayError) as caught:
        replay_logdir(tmp_path / "logs", tmp_path / "wh", NOW)
    error = caught.value.error
    assert isinstance(error, WorkerError)
    assert (error.kind, error.file, error.partition, error.offset, error.position, error.topic) == (
        "CorruptBatchError",  # the DecodeError's own class
        path,
        2,
        1,
        second,
        None,
    )
    assert "CRC-32C mismatch" in error.message
    assert str(caught.value) == error.describe()
    assert f"(file {path}, partition 2, log offset 1, byte position {second})" in str(caught.value)
