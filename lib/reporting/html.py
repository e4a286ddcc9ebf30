"""Renders lib.reporting.report_builder.ReportData as one self-contained HTML page: inline CSS and inline SVG,
no scripts, nothing loaded from elsewhere when it is viewed. No pyspark here."""

from __future__ import annotations

import datetime as dt
from html import escape

from lib.reporting.model import DAY_MS, ReportData
from lib.reporting.plots import commit_rate_svg, lag_svg, members_svg, moves_svg, offsets_svg

# lib.replay.expiry_spark.BASIS in words
DUE_BY = {
    "expire_timestamp": "expire_timestamp",
    "current_state_timestamp": "empty since + retention",
    "commit_timestamp": "commit + retention",
}

CSS = """
body { font-family: "DejaVu Sans", "Liberation Sans", Arial, sans-serif; margin: 24px 32px; color: #222;
       background: #fff; font-size: 14px; }
h1 { font-size: 22px; margin-bottom: 4px; }
h2 { font-size: 18px; margin-top: 32px; border-bottom: 1px solid #ccc; padding-bottom: 4px; }
h3 { font-size: 15px; margin: 18px 0 6px; }
.meta { color: #555; margin: 2px 0; }
.note { color: #666; font-size: 12px; max-width: 1100px; }
table { border-collapse: collapse; margin: 6px 0 12px; font-size: 13px; }
th, td { border: 1px solid #d0d0d0; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f2f4f7; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.rankings { display: flex; flex-wrap: wrap; gap: 24px; }
.ok { color: #1a7f37; font-weight: bold; }
.fail { color: #c62828; font-weight: bold; }
.warn { color: #b26a00; font-weight: bold; }
.group { margin-bottom: 18px; }
.plots { display: flex; flex-wrap: wrap; gap: 12px; }
.plots figure { margin: 0; border: 1px solid #e3e3e3; padding: 4px; background: #fff; }
svg.plot { max-width: 100%; height: auto; display: block; }
nav a { margin-right: 14px; }
"""


def iso(ms: int | None) -> str:
    if ms is None:
        return ""
    t = dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
    return t.strftime("%Y-%m-%d %H:%M:%S") + "Z"


def relative(ms: int, now_ms: int) -> str:
    """'in 2.0 d', 'in 5.5 h', '1.2 d ago'."""
    delta = ms - now_ms
    size, unit = (DAY_MS, "d") if abs(delta) >= DAY_MS else (3_600_000, "h")
    text = f"{abs(delta) / size:.1f} {unit}"
    return f"in {text}" if delta >= 0 else f"{text} ago"


def table(table_id: str, headers: list[str], rows: list[list], numeric: frozenset[int] | set[int] = frozenset()) -> str:
    out = [f'<table id="{escape(table_id)}"><thead><tr>']
    out += [f"<th>{escape(h)}</th>" for h in headers]
    out.append("</tr></thead><tbody>")
    for row in rows:
        out.append(
            "<tr>"
            + "".join(
                f'<td class="num">{escape(str(v))}</td>' if i in numeric else f"<td>{escape(str(v))}</td>"
                for i, v in enumerate(row)
            )
            + "</tr>"
        )
    out.append("</tbody></table>")
    return "".join(out)


def _status(ok) -> str:
    if ok is None:
        return "<span>?</span>"
    return '<span class="ok">passed</span>' if ok else '<span class="fail">FAILED</span>'


def summary_section(d: ReportData) -> str:
    t = d.totals
    rows = [
        ["records in offsets_log", t["records"]],
        ["offset commits that took effect", t.get("commits", 0)],
        ["groups (consumer_groups)", t["groups"]],
        ["live offsets (group_offsets)", t["live_offsets"]],
        ["expired offsets (expired_offsets)", t["expired_offsets"]],
        ["groups deleted by expiry (expired_groups)", t["expired_groups"]],
        ["pending transactional offsets", t["pending_offsets"]],
        ["offsets partitions replayed", t["partitions"]],
        ["last replay finished", iso(t["last_run_ms"])],
    ]
    return '<section id="summary"><h2>Summary</h2>' + table("summary-table", ["", "value"], rows, {1}) + "</section>"


def quality_section(d: ReportData) -> str:
    out = ['<section id="quality"><h2>Quality checks</h2>']
    docs = (
        (
            f'<p>Data docs: <a id="quality-docs" href="{escape(d.quality_docs_href)}">'
            f"{escape(d.quality_docs_href)}</a></p>"
        )
        if d.quality_docs_href
        else ""
    )
    if d.quality_error:
        out.append(f'<p class="fail" id="quality-status">{escape(d.quality_error)}</p>{docs}</section>')
        return "".join(out)
    q = d.quality
    if q is None:
        out.append(
            '<p id="quality-status">no quality run yet (no _quality/results.json in the warehouse; '
            "run jobs.quality)</p>" + docs + "</section>"
        )
        return "".join(out)
    out.append(
        f'<p id="quality-status">Checked at {escape(str(q.get("checked_at", "?")))}: '
        f"{_status(q.get('success'))}</p>{docs}"
    )
    tables = q.get("tables") or []
    rows = []
    for tb in tables:
        exps = tb.get("expectations") or []
        failed = sum(1 for e in exps if e.get("success") is False)
        rows.append(
            [
                tb.get("table", "?"),
                "passed" if tb.get("success") else "FAILED",
                "" if tb.get("rows") is None else tb.get("rows"),
                len(exps),
                failed,
            ]
        )
    out.append(table("quality-tables", ["table", "result", "rows", "expectations", "failed"], rows, {2, 3, 4}))
    failures = [
        [
            tb.get("table", "?"),
            e.get("name", ""),
            e.get("expectation_type", ""),
            e.get("column") or "",
            e.get("severity", ""),
            "" if e.get("unexpected_count") is None else e.get("unexpected_count"),
            _details(e.get("details")),
        ]
        for tb in tables
        for e in (tb.get("expectations") or [])
        if e.get("success") is False
    ]
    if failures:
        out.append("<h3>Failed expectations</h3>")
        out.append(
            table(
                "quality-failures",
                ["table", "name", "expectation", "column", "severity", "unexpected", "details"],
                failures,
                {5},
            )
        )
    else:
        out.append('<p id="quality-failures-none">No failed expectations.</p>')
    out.append("</section>")
    return "".join(out)


def _details(details) -> str:
    if details is None:
        return ""
    text = details if isinstance(details, str) else repr(details)
    return text if len(text) <= 300 else text[:297] + "..."


RANKINGS = (("live_offsets", "By live offsets"), ("members", "By members"), ("commits", "By commits"))


def largest_section(d: ReportData) -> str:
    out = [f'<section id="largest"><h2>Largest groups (top {d.top})</h2><div class="rankings">']
    for metric, title in RANKINGS:
        rows = [
            [
                i + 1,
                r["group_id"],
                r["group_type"] or "(no group)",
                r["state"] or "",
                r["live_offsets"],
                r["members"],
                r["commits"],
            ]
            for i, r in enumerate(d.largest[metric])
        ]
        out.append(f"<div><h3>{escape(title)}</h3>")
        out.append(
            table(
                f"largest-{metric.replace('_', '-')}",
                ["#", "group", "type", "state", "live offsets", "members", "commits"],
                rows,
                {0, 4, 5, 6},
            )
            if rows
            else "<p>none</p>"
        )
        out.append("</div>")
    out.append(
        '</div><p class="note">"(no group)": no group record now: the group was deleted (its commits are '
        "still in the log), or its offsets outlived a group tombstone (Kafka 4.x keeps such offsets and "
        "never expires them). Commits: offset commits that took effect (aborted and still-open "
        "transactional commits are left out).</p></section>"
    )
    return "".join(out)


def expiring_section(d: ReportData) -> str:
    out = [
        f'<section id="expiring"><h2>Expiring within {d.days} days</h2>',
        f'<p class="note">As of {iso(d.now_ms)}, retention {d.retention_minutes} minutes. An offset is listed '
        f"when the coordinator's cleanup would remove it by {iso(d.now_ms + d.days * DAY_MS)} if nothing "
        "changed until then (no new commit, the group's state as it is now), by the same rules as the "
        "replay's expiry. Due: the explicit expire timestamp when the commit has one, else the base + retention, "
        "where the base is the time an Empty classic group became empty, or the commit time otherwise.</p>",
    ]
    out.append(f"<h3>Offsets ({d.expiring_offsets_total})</h3>")
    if d.expiring_offsets:
        rows = [
            [
                iso(r["due_ms"]),
                relative(r["due_ms"], d.now_ms),
                r["group_id"],
                r["topic"],
                r["partition"],
                r["committed_offset"],
                iso(r["commit_timestamp"]),
                DUE_BY[r["reason"]],
            ]
            for r in d.expiring_offsets
        ]
        out.append(
            table(
                "expiring-offsets",
                ["due", "", "group", "topic", "partition", "committed offset", "committed at", "due by"],
                rows,
                {4, 5},
            )
        )
        if d.expiring_offsets_total > len(d.expiring_offsets):
            out.append(f'<p class="note">First {len(d.expiring_offsets)} of {d.expiring_offsets_total} shown.</p>')
    else:
        out.append('<p id="expiring-offsets-none">none</p>')
    out.append(f"<h3>Groups ({d.expiring_groups_total})</h3>")
    if d.expiring_groups:
        rows = [
            [
                iso(r["due_ms"]),
                relative(r["due_ms"], d.now_ms),
                r["group_id"],
                r["group_type"],
                r["state"],
                r["offsets"],
            ]
            for r in d.expiring_groups
        ]
        out.append(table("expiring-groups", ["due", "", "group", "type", "state", "offsets expiring"], rows, {5}))
    else:
        out.append('<p id="expiring-groups-none">none</p>')
    out.append("</section>")
    return "".join(out)


def groups_section(d: ReportData) -> str:

    title = f"top {d.top} by commits"
    if d.behind:
        title = f"the {len(d.behind)} furthest behind now, then the {title}"
    out = [f'<section id="groups"><h2>Groups over time ({title})</h2>']
    if not d.plots:
        out.append("<p>No offset commits in the log.</p></section>")
        return "".join(out)
    out.append(
        '<p class="note">Left: offset commits per hour (bucket width chosen per group to keep at most '
        "72 buckets). Right: each topic-partition's committed offset at the end of each bucket (at most 8 "
        "partitions per group). Below, where the log dir held the consumed topics: the group's lag at the "
        "end of each bucket, in records (summed over its partitions) and in time (the oldest record it had "
        "not consumed; group_lag, partition_end_offsets). Times are UTC, from the records' log timestamps.</p>"
    )
    for i, p in enumerate(d.plots):
        out.append(f'<div class="group" id="group-{i}"><h3>{escape(p.group_id)}</h3><div class="plots">')
        out.append(f"<figure>{commit_rate_svg(p, i)}</figure>")
        out.append(f"<figure>{offsets_svg(p, i)}</figure>")
        if p.lag:
            out.append(f"<figure>{lag_svg(p, i, in_time=False)}</figure>")
            out.append(f"<figure>{lag_svg(p, i, in_time=True)}</figure>")
        out.append("</div></div>")
    out.append("</section>")
    return "".join(out)


def assignments_section(d: ReportData) -> str:
    out = ['<section id="assignments"><h2>Assignments</h2>']
    if not d.assignments:
        out.append("<p>No consumer group assignments in the log.</p></section>")
        return "".join(out)
    out.append(
        '<p class="note">From assignment_audit: groups whose latest generation needs a look first (the '
        "leader's assignment differs from what Kafka's Java assignor of that name computes from the same "
        "subscriptions, partitions unassigned or assigned twice, an imbalance of 2 or more), then the most "
        "rebalanced. Left: partitions per member at each generation. Right: partitions moved in each "
        "rebalance, the fewest a balanced assignment could have moved, and what cooperative-sticky would "
        "have moved from the same previous assignment. sql/audits/assignment_history.sql lists it all.</p>"
    )
    for i, a in enumerate(d.assignments):
        shown = (
            f"latest {len(a.rebalances)} of {a.generations}"
            if a.generations > len(a.rebalances)
            else str(a.generations)
        )
        flag = f' <span class="warn">{escape(a.flag)}</span>' if a.flag else ""
        out.append(
            f'<div class="group" id="assignment-{i}"><h3>{escape(a.group_id)}</h3>'
            f'<p class="meta">{escape(a.group_type)} group, assignor {escape(a.assignor or "unknown")}, '
            f'{shown} generations{flag}</p><div class="plots">'
        )
        out.append(f"<figure>{members_svg(a, i)}</figure>")
        out.append(f"<figure>{moves_svg(a, i)}</figure>")
        out.append("</div>")
        rows = [
            [
                r.generation,
                iso(r.at_ms),
                len(r.per_member),
                r.imbalance,
                "" if r.moved is None else r.moved,
                "" if r.min_moves is None else r.min_moves,
                r.unassigned,
                r.assigned_twice,
                r.verdict,
            ]
            for r in reversed(a.rebalances[-5:])
        ]
        out.append(
            table(
                f"assignment-table-{i}",
                ["generation", "at", "members", "imbalance", "moved", "fewest", "unassigned", "twice", "verdict"],
                rows,
                numeric={0, 2, 3, 4, 5, 6, 7},
            )
        )
        out.append("</div>")
    out.append("</section>")
    return "".join(out)


def render_html(d: ReportData) -> str:
    body = [
        "<h1>offsets-lake report</h1>",
        f'<p class="meta">Warehouse: <code>{escape(d.warehouse)}</code></p>',
        f'<p class="meta">As of {iso(d.now_ms)} &middot; generated {iso(d.generated_ms)}</p>',
        '<nav><a href="#summary">Summary</a><a href="#quality">Quality</a><a href="#largest">Largest groups</a>'
        '<a href="#expiring">Expiring soon</a><a href="#groups">Groups over time</a>'
        '<a href="#assignments">Assignments</a></nav>',
        summary_section(d),
        quality_section(d),
        largest_section(d),
        expiring_section(d),
        groups_section(d),
        assignments_section(d),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        "<title>offsets-lake report</title>"
        f"<style>{CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )
