"""The assignment audit decided in the replay's pass (lib.replay.assignment) gives the rows the
record-by-record audit (lib.assignors.audit.audit_records) gives over the whole of each offsets
partition's records, on the bundled ten-day sample: in one full run, and in an incremental run
after a run over the log as it was a day earlier (generations still open then are replaced or
made final by the later records; the previous generation of each is carried in the fold
state)."""

from __future__ import annotations

import datetime as dt
import os
import shutil

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from lib.assignors.audit import audit_records, what_if_of_row
from lib.lake.delta import open_delta, table_path
from lib.testdata.logcut import cut_log_dir_at
from schemas import tables as T
from tests.helpers import REPO

pytestmark = pytest.mark.spark

SAMPLE = os.path.join(REPO, "samples", "days", "logdir")
with open(os.path.join(REPO, "samples", "days", "NOW")) as _f:
    NOW = int(_f.read())
DAY = 86_400_000
KEY = ("offsets_partition", "log_offset", "group_id")


def audit_table(warehouse) -> list[dict]:
    rows = open_delta(table_path(str(warehouse), T.ASSIGNMENT_AUDIT)).to_pyarrow_table().to_pylist()
    return sorted(rows, key=lambda r: tuple(r[k] for k in KEY))


def reference(warehouse, floors: dict, names: dict) -> list[dict]:
    """audit_records over every group record of offsets_log, partition by partition, in log order."""
    log = open_delta(table_path(str(warehouse), T.OFFSETS_LOG)).to_pyarrow_table(
        columns=[
            "offsets_partition", "log_offset", "log_timestamp", "record_type", "group_id", "member_id",
            "is_tombstone", "group_metadata", "value_json", "is_control", "decode_status",
        ]
    )  # fmt: skip
    log = log.filter(pc.and_(pc.invert(log.column("is_control")), pc.equal(log.column("decode_status"), "ok")))
    log = log.filter(pc.greater_equal(log.column("record_type"), 2))
    log = log.sort_by([("offsets_partition", "ascending"), ("log_offset", "ascending")])
    rows = []
    by_partition: dict[int, list[dict]] = {}
    for r in log.to_pylist():
        ts = r.pop("log_timestamp")
        r["log_timestamp_ms"] = None if ts is None else round(ts.timestamp() * 1000)
        if r["record_type"] != 2:
            r["group_metadata"] = None
        by_partition.setdefault(r["offsets_partition"], []).append(r)
    for records in by_partition.values():
        for row in audit_records(records, floors, names):
            row["at"] = None if row["at_ms"] is None else dt.datetime.fromtimestamp(row.pop("at_ms") / 1000, dt.UTC)
            rows.append(row)
    return sorted(rows, key=lambda r: tuple(r[k] for k in KEY))


def floors_and_names(log_dir: str = SAMPLE) -> tuple[dict, dict]:
    """What the driver knows before the first run into an empty warehouse: the log dir's
    partition folders and topic ids."""
    from lib.source.topic_log import find_topic_partitions

    floors: dict[str, int] = {}
    names: dict[str, str] = {}
    for t in find_topic_partitions(log_dir):
        floors[t.topic] = max(floors.get(t.topic, 0), t.partition + 1)
        if t.topic_id:
            names[t.topic_id] = t.topic
    return floors, names


def test_one_full_run_audits_as_the_record_by_record_audit(replay_logdir, tmp_path):
    replay_logdir(SAMPLE, tmp_path / "wh", NOW)
    got = audit_table(tmp_path / "wh")
    want = reference(tmp_path / "wh", *floors_and_names())
    assert len(got) == 117
    assert [(r["group_id"], r["generation"], r["log_offset"]) for r in got] == [
        (r["group_id"], r["generation"], r["log_offset"]) for r in want
    ]
    # what_if is left to the readers (lib.assignors.audit.what_if_of_row): null in the table,
    # and what_if_of_row over each row and its group's previous row gives the reference's
    assert {r["what_if"] is None for r in got} == {True}
    assert [{**r, "what_if": None} for r in got] == [{**r, "what_if": None} for r in want]
    previous: dict[str, list] = {}
    computed = []
    for r in sorted(got, key=lambda r: (r["offsets_partition"], r["log_offset"])):
        computed.append(((r["offsets_partition"], r["log_offset"]), what_if_of_row(r, previous.get(r["group_id"]))))
        previous[r["group_id"]] = r["members"]
    by_key = {(r["offsets_partition"], r["log_offset"]): r["what_if"] for r in want}
    assert sum(w is not None for _, w in computed) == sum(r["group_type"] == "classic" for r in want)
    assert [w for _, w in computed] == [by_key[k] for k, _ in computed]
    # the table is history whose member ids repeat generation after generation: every file's
    # column chunks, the nested ones too, are written with dictionaries
    files = open_delta(table_path(str(tmp_path / "wh"), T.ASSIGNMENT_AUDIT)).file_uris()
    assert files
    for f in files:
        meta = pq.ParquetFile(f).metadata
        for g in range(meta.num_row_groups):
            chunks = {
                meta.row_group(g).column(i).path_in_schema: meta.row_group(g).column(i) for i in range(meta.num_columns)
            }
            for path in ("group_id", "members.list.element.member_id", "reference.list.element.member_id"):
                assert "RLE_DICTIONARY" in chunks[path].encodings, (f, path, chunks[path].encodings)


def test_a_busy_log_with_kip848_groups_audits_as_the_record_by_record_audit(replay_logdir, tmp_path):
    """make bench's kind of log, small: classic generations of every assignor and KIP-848 target
    epochs of other groups in the same batches, so that a flush audits classic generations and
    epochs together (lib.replay.assignment._flush: one batch of the kernels for both)."""
    from lib.testdata.busy import generate_busy_log

    log = str(tmp_path / "busy")
    start = NOW - 3 * 3_600_000
    generate_busy_log(log, 12_000, partitions=3, groups=40, seed=5, consumed_partitions=12,
                      topic_records=4_000, span_ms=2 * 3_600_000, start_ts=start, workers=1)  # fmt: skip
    replay_logdir(log, tmp_path / "wh", NOW)
    got = audit_table(tmp_path / "wh")
    want = reference(tmp_path / "wh", *floors_and_names(log))
    kinds = {t: sum(r["group_type"] == t for r in want) for t in ("classic", "consumer")}
    assert kinds["classic"] > 100 and kinds["consumer"] > 10, kinds
    assert [{**r, "what_if": None} for r in got] == [{**r, "what_if": None} for r in want]


def test_an_incremental_run_after_a_run_a_day_earlier_audits_as_one_full_run(replay_logdir, tmp_path):
    log = tmp_path / "log"
    cut_log_dir_at(SAMPLE, str(log), NOW - DAY)
    replay_logdir(log, tmp_path / "wh", NOW - DAY)
    early = audit_table(tmp_path / "wh")
    shutil.rmtree(log)
    shutil.copytree(SAMPLE, log)
    replay_logdir(log, tmp_path / "wh", NOW)
    replay_logdir(SAMPLE, tmp_path / "full", NOW)
    full = audit_table(tmp_path / "full")
    got = audit_table(tmp_path / "wh")
    assert len(early) < len(got)

    def latest(rows):
        return {r["group_id"]: r["log_offset"] for r in sorted(rows, key=lambda r: r["log_offset"])}

    # the day's records closed generations that were open a day earlier (new ones came)
    assert any(latest(got)[g] != o for g, o in latest(early).items())
    assert got == full


def test_the_run_summary_reads_the_latest_generation_of_each_group(replay_logdir, tmp_path):
    """lib.reporting.run_summary.assignment_summary (what `make run` prints) from the table's flat
    columns and each group's latest row: the verdict counts of every row, and the flagged groups
    as the whole table, read in Python, gives them."""
    from lib.assignors.audit import why_flagged
    from lib.reporting.run_summary import assignment_summary

    replay_logdir(SAMPLE, tmp_path / "wh", NOW)
    rows = audit_table(tmp_path / "wh")
    summary = assignment_summary(str(tmp_path / "wh"))
    # README: "117 generations of 29 groups audited (matches 114, not_recomputed 3)"
    assert summary["verdicts"] == {"matches": 114, "not_recomputed": 3}
    assert summary["groups"] == 29
    latest: dict[str, dict] = {}
    for r in rows:
        if r["group_id"] not in latest or r["log_offset"] > latest[r["group_id"]]["log_offset"]:
            latest[r["group_id"]] = r
    want = []
    for r in latest.values():
        r = dict(
            r,
            unassigned_n=sum(len(t["partitions"]) for t in r["unassigned"]),
            twice=sum(len(t["partitions"]) for t in r["assigned_twice"]),
        )
        if why_flagged(r) is not None:
            want.append((r["group_id"], r["generation"], why_flagged(r)))
    assert want == [] and summary["flagged"] == []  # nothing in the sample needs a look


def test_each_audit_file_keeps_its_rows_digest_and_a_file_without_one_is_read(replay_logdir, tmp_path):
    """Every assignment_audit file the replay writes holds in its footer the digest of its rows
    (lib.lake.audit_digest: verdict counts, each group's latest row); the run summary reads only
    those. A file without one (OPTIMIZE's, an older version's) is digested from its rows: the
    summary of the same files, their digests stripped, is the same, and so are its counts
    against the rows themselves."""
    from collections import Counter

    from lib.lake.audit_digest import DIGEST_KEY, AuditDigest
    from lib.lake.delta import table_files
    from lib.reporting.run_summary import assignment_summary

    wh = tmp_path / "wh"
    replay_logdir(SAMPLE, wh, NOW)
    files = table_files(table_path(str(wh), T.ASSIGNMENT_AUDIT))[1]
    assert files
    for f in files:
        footer = pq.read_metadata(f.absolute).metadata[DIGEST_KEY.encode()]
        stored, rows = AuditDigest.from_json(footer), pq.read_table(f.absolute)
        assert stored.verdicts == dict(Counter(rows.column("verdict").to_pylist()))
        latest = {}
        for r in rows.to_pylist():
            if r["group_id"] not in latest or r["log_offset"] >= latest[r["group_id"]]["log_offset"]:
                latest[r["group_id"]] = r
        assert sorted(stored.latest.to_pylist(), key=lambda r: r["group_id"]) == [
            {
                **{k: latest[g][k] for k in ("group_id", "log_offset", "generation", "assignor", "member_count")},
                **{k: latest[g][k] for k in ("imbalance", "moved", "verdict")},
                "unassigned_n": sum(len(t["partitions"]) for t in latest[g]["unassigned"]),
                "twice": sum(len(t["partitions"]) for t in latest[g]["assigned_twice"]),
            }
            for g in sorted(latest)
        ]
    with_digests = assignment_summary(str(wh))
    assert with_digests["verdicts"] == {"matches": 114, "not_recomputed": 3} and with_digests["groups"] == 29
    for f in files:  # the same rows, no digest
        table = pq.read_table(f.absolute)
        pq.write_table(table.replace_schema_metadata(None), f.absolute)
        assert DIGEST_KEY.encode() not in (pq.read_metadata(f.absolute).metadata or {})
    assert assignment_summary(str(wh)) == with_digests


def _audit_row(group, log_offset, generation, imbalance=0, verdict="matches", twice=None) -> dict:
    r = dict.fromkeys(T.ASSIGNMENT_AUDIT.column_names)
    r.update(
        group_id=group, group_type="classic", generation=generation, assignor="range", member_count=2,
        members=[], topics=[], partitions=4, assigned=4, min_per_member=2, max_per_member=2 + imbalance,
        imbalance=imbalance, moved=0, min_moves=0, unassigned=[], assigned_twice=twice or [],
        verdict=verdict, racks_recorded=False, offsets_partition=0, log_offset=log_offset,
    )  # fmt: skip
    return r


def test_an_audit_file_of_more_groups_than_a_digest_holds_gets_none(tmp_path, monkeypatch):
    """A file whose rows name more groups than DIGEST_MAX_GROUPS (2 here) gets no digest (its
    footer would grow with the groups); the summary reads its rows instead and counts the same
    as from a file with one."""
    import pyarrow as pa

    from lib.lake import audit_digest
    from lib.lake.delta import commit_files
    from lib.lake.partition_task import FileWriter
    from lib.reporting.run_summary import assignment_summary

    monkeypatch.setattr(audit_digest, "DIGEST_MAX_GROUPS", 2)
    batches = [
        [_audit_row("g1", 10, 1), _audit_row("g2", 11, 1, imbalance=2)],  # two groups: a digest
        [_audit_row("g1", 10, 1)],
        [_audit_row("g3", 12, 1, verdict="differs")],  # the third: none
    ]
    files = []
    for name, parts in (("two", batches[:2]), ("three", batches)):
        writer = FileWriter(str(tmp_path), T.ASSIGNMENT_AUDIT, None, name)
        for rows in parts:
            writer.write(pa.Table.from_pylist(rows, T.ASSIGNMENT_AUDIT.arrow_schema))
        writer.close()
        (written,) = writer.files
        footer = pq.read_metadata(os.path.join(tmp_path, "assignment_audit", written.path)).metadata or {}
        assert (audit_digest.DIGEST_KEY.encode() in footer) == (name == "two")
        files.append(written)
    commit_files(table_path(str(tmp_path), T.ASSIGNMENT_AUDIT), T.ASSIGNMENT_AUDIT, files, "test")
    summary = assignment_summary(str(tmp_path))
    assert summary["verdicts"] == {"matches": 3 + 3, "differs": 1}  # (the files' 3 and 4 rows)
    assert summary["groups"] == 3
    assert [(f["group_id"], f["why"]) for f in summary["flagged"]] == [
        ("g3", "the leader's assignment differs from Kafka's range assignor"),
        ("g2", "imbalance 2"),
    ]


def test_the_run_summary_flags_by_each_groups_latest_generation(tmp_path):
    """Hand-made rows: g1 was unbalanced, then balanced (not flagged); g2's latest assigns a
    partition twice (flagged); g3 differs (flagged first); a row written twice counts once."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from lib.reporting.run_summary import assignment_summary

    row = _audit_row
    rows = [
        row("g1", 10, 1, imbalance=3),
        row("g1", 20, 2),
        row("g2", 15, 1),
        row("g2", 30, 2, twice=[{"topic": "t", "partitions": [0, 1]}]),
        row("g2", 30, 2, twice=[{"topic": "t", "partitions": [0, 1]}]),
        row("g3", 20, 4, verdict="differs"),
    ]
    write_deltalake(str(tmp_path / "assignment_audit"), pa.Table.from_pylist(rows, T.ASSIGNMENT_AUDIT.arrow_schema))
    summary = assignment_summary(str(tmp_path))
    assert summary["verdicts"] == {"matches": 5, "differs": 1}
    assert summary["groups"] == 3
    assert [(f["group_id"], f["generation"], f["why"]) for f in summary["flagged"]] == [
        ("g3", 4, "the leader's assignment differs from Kafka's range assignor"),
        ("g2", 2, "2 partitions assigned twice"),
    ]
