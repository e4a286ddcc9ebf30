"""End offsets from batch headers (lib.source.topic_log) on hand-built consumed-topic segments:
every batch shape a broker writes, compared with what the records themselves say (the values
below are stated by hand from the bytes written, not read back through the scanner)."""

from __future__ import annotations

import os

import pytest

from lib.codec.errors import CorruptBatchError
from lib.codec.writer import encode_batch, encode_control_batch, encode_legacy_message, encode_legacy_wrapper
from lib.source.topic_log import find_topic_partitions
from lib.source.topic_scan import ScanStart, record_timestamps, scan_partition

T = 1_763_000_000_000


def _recs(base, n, ts0, step=10):
    return [(base + i, ts0 + i * step, None, b"v%d" % i) for i in range(n)]


def _write(folder, segments: dict[int, bytes], topic_id="AAAAAAAAAAAAAAAAAAAAAQ"):
    os.makedirs(folder, exist_ok=True)
    for base, data in segments.items():
        with open(os.path.join(folder, f"{base:020d}.log"), "wb") as f:
            f.write(data)
    if topic_id:
        with open(os.path.join(folder, "partition.metadata"), "w") as f:
            f.write(f"version: 0\ntopic_id: {topic_id}\n")


@pytest.fixture
def log_dir(tmp_path):
    seg0 = b"".join(
        [
            # 0..4 uncompressed CreateTime
            encode_batch(0, _recs(0, 5, T)),
            # 5..9 zstd
            encode_batch(5, _recs(5, 5, T + 1000), compression=4),
            # 10..14 compacted: records 11 and 14 left, base timestamp is the original first's
            encode_batch(10, [(11, T + 2010, None, b"a"), (14, T + 2040, None, b"b")], base_timestamp=T + 2000),
            # 15..17 LogAppendTime (every record has the max timestamp)
            encode_batch(15, _recs(15, 3, T + 3000), log_append_time=True, max_timestamp=T + 3500),
            # 18 a COMMIT marker
            encode_control_batch(18, 7, 0, True, T + 4000),
        ]
    )
    seg1 = b"".join(
        [
            encode_legacy_message(19, 1, None, b"x", T + 5000),  # magic 1, one message
            encode_legacy_wrapper(_recs(20, 3, T + 6000), 1, 1, timestamp=T + 6020),  # magic 1 gzip wrapper 20..22
            encode_legacy_message(23, 0, None, b"y"),  # magic 0: no timestamp
            encode_batch(24, _recs(24, 2, T + 7000), compression=3)[:30],  # a write that never finished
        ]
    )
    _write(str(tmp_path / "orders-3"), {0: seg0, 19: seg1})
    _write(str(tmp_path / "__consumer_offsets-0"), {0: b""}, None)
    _write(str(tmp_path / "orders-1.0123456789abcdef0123456789abcdef-delete"), {0: seg0}, None)
    with open(tmp_path / "replication-offset-checkpoint", "w") as f:
        f.write("0\n2\norders 3 24\n__consumer_offsets 0 0\n")
    return str(tmp_path)


def test_consumed_partitions_are_found_with_topic_id_and_high_watermark(log_dir):
    (log,) = find_topic_partitions(log_dir)
    assert (log.topic, log.partition, log.topic_id, log.high_watermark) == ("orders", 3, "AAAAAAAAAAAAAAAAAAAAAQ", 24)
    assert [s.base_offset for s in log.segments] == [0, 19]
    assert find_topic_partitions(log_dir, {("orders", 4)}) == []
    assert find_topic_partitions(str(os.path.join(log_dir, "nowhere"))) == []


def test_segments_carry_their_size_and_time_and_only_they_are_statted(log_dir):
    from lib import storage

    (log,) = find_topic_partitions(log_dir)
    for seg in log.segments:
        st = os.stat(seg.path)
        assert (seg.size, seg.mtime_ns) == (st.st_size, st.st_mtime_ns)
    folder = os.path.join(log_dir, "orders-3")
    listed = {e.name: e for e in storage.list_dir(folder, sized=lambda name: name.endswith(".log"))}
    meta = listed["partition.metadata"]
    assert (meta.path, meta.is_dir, meta.size, meta.mtime_ns) == (
        os.path.join(folder, "partition.metadata"),
        False,
        0,
        0,
    )
    assert listed["00000000000000000019.log"].size == os.path.getsize(os.path.join(folder, "00000000000000000019.log"))
    whole = {e.name: e for e in storage.list_dir(folder)}
    assert whole["partition.metadata"].size == os.path.getsize(os.path.join(folder, "partition.metadata")) > 0
    assert (
        sorted(listed)
        == sorted(whole)
        == [
            "00000000000000000000.log",
            "00000000000000000019.log",
            "partition.metadata",
        ]
    )
    top = {e.name: e for e in storage.list_dir(log_dir, sized=lambda name: False)}
    assert top["orders-3"].is_dir and not top["replication-offset-checkpoint"].is_dir


def test_each_batch_gives_its_end_offset_and_times_from_its_header(log_dir):
    (log,) = find_topic_partitions(log_dir)
    s0, s1 = scan_partition(log)
    assert s0.end_offset.tolist() == [5, 10, 15, 18, 19]
    assert s0.first_offset.tolist() == [0, 5, 10, 15, 18]
    assert s0.max_timestamp.tolist() == [T + 40, T + 1040, T + 2040, T + 3500, T + 4000]
    # compacted batch: the record at its base offset is gone, so its first timestamp is unknown
    assert s0.first_timestamp.tolist() == [T, T + 1000, -1, T + 3500, T + 4000]
    assert s0.timestamp_type.tolist() == [0, 0, 0, 1, 0]
    assert s0.is_control.tolist() == [False, False, False, False, True]
    assert s0.producer_id.tolist() == [-1, -1, -1, -1, 7]
    assert s0.trailing_bytes == 0
    assert s1.end_offset.tolist() == [20, 23, 24]
    assert s1.first_offset.tolist() == [19, -1, 23]
    assert s1.max_timestamp.tolist() == [T + 5000, T + 6020, -1]
    assert s1.first_timestamp.tolist() == [T + 5000, -1, -1]
    assert s1.timestamp_type.tolist() == [0, 0, 2]
    assert s1.trailing_bytes == 30
    assert s1.next_position == s1.position[-1] + s1.size[-1]
    assert s0.position.tolist()[0] == 0 and s1.position.tolist()[0] == 0


def test_a_scan_resumes_at_its_checkpoint(log_dir):
    (log,) = find_topic_partitions(log_dir)
    whole = scan_partition(log)
    # from a byte position in the first segment
    (a, b) = scan_partition(log, ScanStart(10, 0, int(whole[0].position[2])))
    assert a.end_offset.tolist() == [15, 18, 19] and b.end_offset.tolist() == [20, 23, 24]
    # a checkpoint whose segment is gone (deleted by retention): by offset
    (c,) = scan_partition(log, ScanStart(22, 7, 999))
    assert c.end_offset.tolist() == [23, 24]
    # at the end: nothing new
    (d,) = scan_partition(log, ScanStart(24, 19, whole[1].next_position))
    assert len(d) == 0


def _two_segments(folder):
    """t-0: segment 0 with 0..4 and 5..9, segment 10 with 10..14 and 15..19 (10 ms apart)."""
    seg0 = encode_batch(0, _recs(0, 5, T)) + encode_batch(5, _recs(5, 5, T + 50))
    seg10 = encode_batch(10, _recs(10, 5, T + 100)) + encode_batch(15, _recs(15, 5, T + 150))
    _write(folder, {0: seg0, 10: seg10})
    return seg0, seg10


def test_a_segment_deleted_by_retention_after_the_listing_is_not_read(tmp_path):
    """Retention renamed segment 0 (.deleted) after the run listed the folder: the scan reads
    what is left, from the start or from a checkpoint in the segment gone (the run failed)."""
    _two_segments(str(tmp_path / "t-0"))
    (log,) = find_topic_partitions(str(tmp_path))
    seg0 = log.segments[0].path
    os.rename(seg0, seg0 + ".deleted")
    (only,) = scan_partition(log)
    assert only.segment.base_offset == 10 and only.end_offset.tolist() == [15, 20]
    (again,) = scan_partition(log, ScanStart(5, 0, 100))
    assert again.end_offset.tolist() == [15, 20]


def test_segments_the_log_cleaner_merges_while_they_are_read_are_read_again(tmp_path, monkeypatch):
    """The log cleaner merges segments 0 and 10 into 0 (and deletes 10) after the scan read the
    old segment 0: the scan starts again on the folder as it is now, and gives the merged
    segment's batches once, not the old segment's followed by nothing."""
    import lib.source.topic_scan as topic_scan

    folder = str(tmp_path / "t-0")
    seg0, seg10 = _two_segments(folder)
    (log,) = find_topic_partitions(str(tmp_path))
    real = topic_scan.scan_segment
    calls = []

    def merging(segment, *args):
        out = real(segment, *args)
        calls.append(segment.base_offset)
        if len(calls) == 1:  # after the first read: the cleaner's swap
            merged = os.path.join(folder, "00000000000000000000.log.swap")
            with open(merged, "wb") as f:
                f.write(seg0 + seg10)
            os.replace(merged, os.path.join(folder, "00000000000000000000.log"))
            os.remove(os.path.join(folder, "00000000000000000010.log"))
        return out

    monkeypatch.setattr(topic_scan, "scan_segment", merging)
    (whole,) = scan_partition(log)
    assert calls == [0, 0]
    assert whole.segment.base_offset == 0 and whole.end_offset.tolist() == [5, 10, 15, 20]
    assert whole.next_position == len(seg0) + len(seg10)


def test_the_first_unread_records_time_comes_from_its_batch(log_dir):
    (log,) = find_topic_partitions(log_dir)
    s0, s1 = scan_partition(log)
    p = s0.position.tolist()
    seg0 = log.segments[0].path
    got = record_timestamps(seg0, [(p[0], 3), (p[1], 7), (p[2], 12), (p[2], 15), (p[3], 16), (p[4], 18)])
    # record 3; zstd record 7; compacted: 12 is gone, the next is 14; nothing at or after 15 in
    # the compacted batch; LogAppendTime; the marker itself
    assert got == [T + 30, T + 1020, T + 2040, None, T + 3500, T + 4000]
    q = s1.position.tolist()
    assert record_timestamps(log.segments[1].path, [(q[1], 21), (q[2], 23)]) == [T + 6010, None]


def test_framing_errors_name_the_file_and_position(tmp_path):
    good = encode_batch(0, _recs(0, 2, T))
    bad = bytearray(encode_batch(2, _recs(2, 2, T)))
    bad[16] = 7  # magic
    _write(str(tmp_path / "t-0"), {0: good + bytes(bad)})
    (log,) = find_topic_partitions(str(tmp_path))
    with pytest.raises(CorruptBatchError) as e:
        scan_partition(log)
    assert e.value.position == len(good)
    assert "unknown magic byte 7" in str(e.value) and "t-0/00000000000000000000.log" in str(e.value)
    backwards = encode_batch(5, _recs(5, 2, T)) + encode_batch(3, _recs(3, 2, T))
    _write(str(tmp_path / "u-0"), {0: backwards})
    (log,) = find_topic_partitions(str(tmp_path), {("u", 0)})
    with pytest.raises(CorruptBatchError, match="offsets go backwards"):
        scan_partition(log)
