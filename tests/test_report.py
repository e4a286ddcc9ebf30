"""The HTML report on a hand-built log: every number checked against values worked out by hand
from the log below, then the page rendered by headless Chromium (DOM and screenshot).

The log (4 offsets partitions, each group where Kafka would put it), NOW on an hour boundary,
retention 7 days, report horizon 3 days:
- orders-app: classic, Stable, 2 members subscribed to `orders`; 25 hourly commits of orders-0
  (100, 110, ...) and orders-1 (200, 205, ...) from NOW-2d+10min: 50 commits, 1-hour buckets of 2.
- reporting: classic, Stable, 1 member subscribed to `clicks`; clicks-0 at NOW-1h, legacy-0 at
  NOW-6.5d: legacy is not subscribed, so it expires at NOW+0.5d though the group is Stable.
- billing: 3 commits at NOW-6d, then Empty since NOW-5d: all three due at NOW+2d (empty since +
  retention), and the group with them.
- standalone (no group record: a simple group): s-0 at NOW-6.5d (due NOW+0.5d), s-1 at NOW-1d
  (due NOW+6d, beyond the horizon, so the group stays).
- deadline: one v1 commit at NOW-20d with expireTimestamp NOW+1d: due then, and the group too.
- txn-group: t-0 plain at NOW-1h then a committed transactional commit (t-0 = 2); an aborted one
  (t-1) and an open one (t-2): 2 commits that took effect, 1 live offset.
- orphaned: x-0 at NOW-10d, then a group tombstone: the offset stays live with no group and
  never expires (Kafka 4.x), though it is older than the retention.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import struct
import subprocess
from html.parser import HTMLParser

import pytest

from lib.replay.partitioning import partition_for
from lib.testdata.logbuilder import PartitionLogBuilder, consumer_member

N = 4
MINUTE = 60_000
HOUR = 3_600_000
DAY = 86_400_000
NOW = 1_699_999_200_000 + 30 * DAY  # an hour boundary
DAYS = 3
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def iso(ms: int) -> str:
    from lib.reporting.html import iso as fmt

    return fmt(ms)


def build_log(log_dir: str) -> None:
    b = {p: PartitionLogBuilder(p) for p in range(N)}

    def on(group):
        return b[partition_for(group, N)]

    g = "orders-app"
    on(g).group(
        g,
        NOW - 2 * DAY,
        generation=3,
        state_ts=NOW - 2 * DAY,
        members=[
            consumer_member("m1", ["orders"], {"orders": [0]}),
            consumer_member("m2", ["orders"], {"orders": [1]}),
        ],
    )
    for k in range(25):
        ts = NOW - 2 * DAY + k * HOUR + 10 * MINUTE
        on(g).commit(g, "orders", 0, 100 + 10 * k, ts).commit(g, "orders", 1, 200 + 5 * k, ts)

    g = "reporting"
    on(g).group(g, NOW - 7 * DAY, members=[consumer_member("r1", ["clicks"], {"clicks": [0]})])
    on(g).commit(g, "legacy", 0, 7, NOW - 6 * DAY - 12 * HOUR).commit(g, "clicks", 0, 70, NOW - HOUR)

    g = "billing"
    for p, off in ((0, 7), (1, 8), (2, 9)):
        on(g).commit(g, "invoices", p, off, NOW - 6 * DAY)
    on(g).group(g, NOW - 5 * DAY, generation=4, state_ts=NOW - 5 * DAY, members=[])

    g = "standalone"
    on(g).commit(g, "s", 0, 1, NOW - 6 * DAY - 12 * HOUR).commit(g, "s", 1, 2, NOW - DAY)

    g = "deadline"
    on(g).commit(g, "d", 0, 5, NOW - 20 * DAY, version=1, expire_ts=NOW + DAY)

    g = "txn-group"
    ts = NOW - HOUR
    on(g).commit(g, "t", 0, 1, ts).commit(g, "t", 0, 2, ts, producer_id=500).marker(500, True, ts)
    on(g).commit(g, "t", 1, 3, ts, producer_id=501).marker(501, False, ts)
    on(g).commit(g, "t", 2, 4, ts, producer_id=502)

    g = "orphaned"
    on(g).commit(g, "x", 0, 3, NOW - 10 * DAY).group_tombstone(g, NOW - 10 * DAY)
    for builder in b.values():
        builder.write(log_dir)


QUALITY = {
    "checked_at": "2023-12-14T22:00:00+00:00",
    "success": False,
    "tables": [
        {
            "table": "offsets_log",
            "success": True,
            "rows": 81,
            "expectations": [
                {
                    "name": "log_offset_not_null",
                    "expectation_type": "expect_column_values_to_not_be_null",
                    "column": "log_offset",
                    "severity": "critical",
                    "success": True,
                    "unexpected_count": 0,
                    "details": None,
                }
            ],
        },
        {
            "table": "group_offsets",
            "success": False,
            "rows": 10,
            "expectations": [
                {
                    "name": "offset_non_negative",
                    "expectation_type": "expect_column_values_to_be_between",
                    "column": "committed_offset",
                    "severity": "critical",
                    "success": False,
                    "unexpected_count": 2,
                    "details": "min_value=0",
                },
                {
                    "name": "key_unique",
                    "expectation_type": "expect_compound_columns_to_be_unique",
                    "column": None,
                    "severity": "warning",
                    "success": True,
                    "unexpected_count": 0,
                    "details": None,
                },
            ],
        },
    ],
}


class Tables(HTMLParser):
    """Cell texts of every <table id=...>, and every <svg>'s <title>."""

    def __init__(self):
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.svg_titles: list[str] = []
        self._table = None
        self._cell = None
        self._in_svg_title = False
        self._svg_depth = 0
        self.ids: dict[str, str] = {}
        self.hrefs: list[str] = []
        self.texts: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            self.ids[a["id"]] = tag
        if tag == "a" and "href" in a:
            self.hrefs.append(a["href"])
        if tag == "table":
            self._table = a.get("id")
            self.tables[self._table] = []
        elif tag == "tr" and self._table is not None:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._table is not None:
            self._cell = []
        elif tag == "svg":
            self._svg_depth += 1
        elif tag == "title" and self._svg_depth:
            self._in_svg_title = True
            self.svg_titles.append("")

    def handle_endtag(self, tag):
        if tag == "table":
            self._table = None
        elif tag in ("td", "th") and self._cell is not None:
            self.tables[self._table][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "svg":
            self._svg_depth -= 1
        elif tag == "title":
            self._in_svg_title = False

    def handle_data(self, data):
        self.texts.append(data)
        if self._cell is not None:
            self._cell.append(data)
        if self._in_svg_title:
            self.svg_titles[-1] += data


def parse(html: str) -> Tables:
    p = Tables()
    p.feed(html)
    return p


def body_rows(t: Tables, table_id: str) -> list[list[str]]:
    return t.tables[table_id][1:]


# ---------------------------------------------------------------- pure parts (no Spark)


def test_bucket_width_ladder():
    from lib.reporting.report_builder import bucket_width

    assert bucket_width(0) == HOUR
    assert bucket_width(71 * HOUR) == HOUR  # 72 buckets
    assert bucket_width(72 * HOUR) == 3 * HOUR  # 73 one-hour buckets would be too many
    assert bucket_width(24 * HOUR) == HOUR
    assert bucket_width(10 * DAY) == 6 * HOUR  # 241 / 81 buckets at 1 h / 3 h; 41 at 6 h
    assert bucket_width(3 * 365 * DAY) == 30 * DAY  # 37 buckets
    assert bucket_width(10 * 365 * DAY) == 60 * DAY  # past the ladder: multiples of 30 days


# ---------------------------------------------------------------- on a replayed log


@pytest.fixture(scope="module")
def report(spark, replay_logdir, tmp_path_factory):
    """(ReportData, path of the page, warehouse) for the log above."""
    from lib.reporting.report_builder import collect_report, write_html

    root = tmp_path_factory.mktemp("report")
    log_dir, warehouse = str(root / "logdir"), str(root / "warehouse")
    build_log(log_dir)
    replay_logdir(log_dir, warehouse, NOW)
    qdir = os.path.join(warehouse, "_quality", "data_docs")
    os.makedirs(qdir)
    with open(os.path.join(warehouse, "_quality", "results.json"), "w") as f:
        json.dump(QUALITY, f)
    with open(os.path.join(qdir, "index.html"), "w") as f:
        f.write("<html><body>data docs</body></html>")
    data = collect_report(spark, warehouse, NOW, top=20, days=DAYS, retention_minutes=7 * 24 * 60)
    path = write_html(data, warehouse)
    return data, path, warehouse


RANK_HEADER = ["#", "group", "type", "state", "live offsets", "members", "commits"]
ROW = {  # group -> type, state, live offsets, members, commits (worked out from the log above)
    "orders-app": ["classic", "Stable", "2", "2", "50"],
    "reporting": ["classic", "Stable", "2", "1", "2"],
    "billing": ["classic", "Empty", "3", "0", "3"],
    "standalone": ["classic", "Empty", "2", "0", "2"],
    "deadline": ["classic", "Empty", "1", "0", "1"],
    "txn-group": ["classic", "Empty", "1", "0", "2"],
    "orphaned": ["(no group)", "", "1", "0", "1"],
}


def ranked(groups: list[str]) -> list[list[str]]:
    return [[str(i + 1), g, *ROW[g]] for i, g in enumerate(groups)]


@pytest.mark.spark
def test_page_is_in_the_warehouse_and_self_contained(report):
    data, path, warehouse = report
    assert path == os.path.join(warehouse, "report", "index.html")
    html = open(path, encoding="utf-8").read()
    assert "<script" not in html and "<link" not in html and " src=" not in html
    assert "url(http" not in html and "@import" not in html
    t = parse(html)
    assert sorted(set(t.hrefs)) == sorted(
        {
            "#summary",
            "#quality",
            "#largest",
            "#expiring",
            "#groups",
            "#assignments",
            "../_quality/data_docs/index.html",
        }
    )


@pytest.mark.spark
def test_largest_groups(report):
    data, path, _ = report
    t = parse(open(path, encoding="utf-8").read())
    assert t.tables["largest-live-offsets"][0] == RANK_HEADER
    assert body_rows(t, "largest-live-offsets") == ranked(
        ["billing", "orders-app", "reporting", "standalone", "deadline", "orphaned", "txn-group"]
    )
    assert body_rows(t, "largest-members") == ranked(["orders-app", "reporting"])
    assert body_rows(t, "largest-commits") == ranked(
        ["orders-app", "billing", "reporting", "standalone", "txn-group", "deadline", "orphaned"]
    )


@pytest.mark.spark
def test_summary_counts(report):
    data, path, _ = report
    t = parse(open(path, encoding="utf-8").read())
    summary = {r[0]: r[1] for r in body_rows(t, "summary-table")}
    # records: orders-app 1 + 50, reporting 1 + 2, billing 3 + 1, standalone 2, deadline 1,
    # txn-group 4 commits + 2 markers, orphaned 1 + 1
    assert summary["records in offsets_log"] == str(51 + 3 + 4 + 2 + 1 + 6 + 2)
    assert summary["offset commits that took effect"] == "61"
    assert summary["groups (consumer_groups)"] == "6"
    assert summary["live offsets (group_offsets)"] == "12"
    assert summary["expired offsets (expired_offsets)"] == "0"
    assert summary["pending transactional offsets"] == "1"
    assert summary["offsets partitions replayed"] == str(N)


@pytest.mark.spark
def test_expiring_soon(report):
    data, path, _ = report
    t = parse(open(path, encoding="utf-8").read())
    half, one, two = NOW + 12 * HOUR, NOW + DAY, NOW + 2 * DAY
    assert t.tables["expiring-offsets"][0] == [
        "due",
        "",
        "group",
        "topic",
        "partition",
        "committed offset",
        "committed at",
        "due by",
    ]
    assert body_rows(t, "expiring-offsets") == [
        [iso(half), "in 12.0 h", "reporting", "legacy", "0", "7", iso(NOW - 6 * DAY - 12 * HOUR), "commit + retention"],
        [iso(half), "in 12.0 h", "standalone", "s", "0", "1", iso(NOW - 6 * DAY - 12 * HOUR), "commit + retention"],
        [iso(one), "in 1.0 d", "deadline", "d", "0", "5", iso(NOW - 20 * DAY), "expire_timestamp"],
        *[
            [iso(two), "in 2.0 d", "billing", "invoices", str(p), str(o), iso(NOW - 6 * DAY), "empty since + retention"]
            for p, o in ((0, 7), (1, 8), (2, 9))
        ],
    ]
    assert body_rows(t, "expiring-groups") == [
        [iso(one), "in 1.0 d", "deadline", "classic", "Empty", "1"],
        [iso(two), "in 2.0 d", "billing", "classic", "Empty", "3"],
    ]
    assert data.expiring_offsets_total == 6 and data.expiring_groups_total == 2


@pytest.mark.spark
def test_plot_data(report):
    data, _, _ = report
    assert [p.group_id for p in data.plots] == [
        "orders-app",
        "billing",
        "reporting",
        "standalone",
        "txn-group",
        "deadline",
        "orphaned",
    ]
    orders = data.plots[0]
    assert orders.bucket_ms == HOUR and orders.commits == 50
    assert orders.rate == [(NOW - 2 * DAY + k * HOUR, 2.0) for k in range(25)]
    assert [(s.topic, s.partition) for s in orders.series] == [("orders", 0), ("orders", 1)]
    times = [NOW - 2 * DAY + k * HOUR + 10 * MINUTE for k in range(25)]
    assert orders.series[0].points == [(ts, 100 + 10 * k) for k, ts in enumerate(times)]
    assert orders.series[1].points == [(ts, 200 + 5 * k) for k, ts in enumerate(times)]
    txn = data.plots[4]  # the plain commit and the committed transactional one, same bucket
    assert txn.rate == [((NOW - HOUR), 2.0)]
    assert [(s.topic, s.partition, s.points) for s in txn.series] == [("t", 0, [(NOW - HOUR, 2)])]
    # reporting: 155 hours apart, 3-hour buckets (156 one-hour buckets would be too many). NOW is
    # 1 hour past a multiple of 3 hours since the epoch: NOW-1h starts a bucket, NOW-156h falls
    # in the bucket starting at NOW-157h; 53 buckets, one commit in the first and the last.
    reporting = data.plots[2]
    assert (NOW - HOUR) % (3 * HOUR) == 0
    assert reporting.bucket_ms == 3 * HOUR
    assert len(reporting.rate) == 53
    assert reporting.rate[0] == (NOW - 157 * HOUR, 1 / 3) and reporting.rate[-1] == (NOW - HOUR, 1 / 3)
    assert sum(r for _, r in reporting.rate) == 2 / 3


@pytest.mark.spark
def test_quality_section(report):
    data, path, _ = report
    t = parse(open(path, encoding="utf-8").read())
    status = "".join(t.texts)
    assert "Checked at 2023-12-14T22:00:00+00:00: FAILED" in status
    assert body_rows(t, "quality-tables") == [
        ["offsets_log", "passed", "81", "1", "0"],
        ["group_offsets", "FAILED", "10", "2", "1"],
    ]
    assert body_rows(t, "quality-failures") == [
        [
            "group_offsets",
            "offset_non_negative",
            "expect_column_values_to_be_between",
            "committed_offset",
            "critical",
            "2",
            "min_value=0",
        ]
    ]
    # without a quality run
    from lib.reporting.html import render_html

    bare = parse(render_html(dataclasses.replace(data, quality=None, quality_docs_href=None, plots=[])))
    assert "no quality run yet" in "".join(bare.texts)
    assert "quality-tables" not in bare.tables and "../_quality/data_docs/index.html" not in bare.hrefs


# ---------------------------------------------------------------- in a browser


@pytest.fixture(scope="module")
def chromium():
    """Debian's chromium; `make browser` installs it when missing (root, apt)."""
    exe = shutil.which("chromium")
    if exe is None:
        done = subprocess.run(["make", "-s", "-C", REPO, "browser"], capture_output=True, text=True, timeout=1200)
        exe = shutil.which("chromium")
        if exe is None:
            tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
            pytest.skip("chromium could not be installed (make browser): " + " | ".join(tail))
    return exe


def run_chromium(exe: str, profile: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            exe,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )


@pytest.mark.spark
def test_assignment_section(report):
    data, path, _ = report
    # neither group is flagged (orders' two partitions one each, clicks' one to r1): by name
    assert [(a.group_id, a.assignor, a.generations, a.flag) for a in data.assignments] == [
        ("orders-app", "range", 1, None),
        ("reporting", "range", 1, None),
    ]
    assert [
        (r.generation, r.per_member, r.imbalance, r.moved, r.min_moves, r.verdict)
        for r in data.assignments[0].rebalances
    ] == [(3, {"m1": 1, "m2": 1}, 0, None, None, "matches")]
    t = parse(open(path, encoding="utf-8").read())
    assert t.tables["assignment-table-0"][0] == [
        "generation",
        "at",
        "members",
        "imbalance",
        "moved",
        "fewest",
        "unassigned",
        "twice",
        "verdict",
    ]
    assert body_rows(t, "assignment-table-0") == [["3", iso(NOW - 2 * DAY), "2", "0", "", "", "0", "0", "matches"]]


@pytest.mark.spark
def test_rendered_in_chromium(report, chromium, tmp_path):
    data, path, _ = report
    url = "file://" + os.path.abspath(path)
    dom = run_chromium(chromium, str(tmp_path / "profile"), "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    t = parse(dom.stdout)
    groups = ["orders-app", "billing", "reporting", "standalone", "txn-group", "deadline", "orphaned"]
    audited = ["orders-app", "reporting"]  # the groups with members in a generation
    assert t.svg_titles == [f"{kind}: {g}" for g in groups for kind in ("Commit rate", "Committed offsets")] + [
        f"{kind}: {g}" for g in audited for kind in ("Partitions per member", "Moves per rebalance")
    ]
    assert dom.stdout.count('class="plot"') == 18
    assert body_rows(t, "largest-commits") == ranked(groups)
    # the legend of orders-app's offsets plot names its two partitions (text kept as text)
    first_offsets_svg = dom.stdout.split('data-kind="committed-offsets"', 1)[1].split("</svg>", 1)[0]
    assert "orders-0" in first_offsets_svg and "orders-1" in first_offsets_svg

    shot = tmp_path / "report.png"
    run = run_chromium(chromium, str(tmp_path / "profile"), "--window-size=1280,2400", f"--screenshot={shot}", url)
    assert run.returncode == 0, run.stderr[-2000:]
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", png[16:24]) == (1280, 2400)
    from PIL import Image

    with Image.open(shot) as im:
        colors = im.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colors is not None and len(colors) > 50  # text, tables and plots, not a blank page
    keep = os.environ.get("REPORT_SCREENSHOT")
    if keep:
        shutil.copyfile(shot, keep)
