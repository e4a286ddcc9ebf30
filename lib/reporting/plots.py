"""The report's plots: matplotlib figures rendered to inline SVG (text kept as text, no
scripts, nothing fetched when the page is viewed). No pyspark here."""

from __future__ import annotations

import datetime as dt
import html
import io
import re
import warnings

import matplotlib

matplotlib.use("Agg")

from matplotlib import dates as mdates
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from lib.reporting.model import DAY_MS, HOUR_MS, MAX_SERIES, AssignmentPlot, GroupPlot

FIGSIZE = (5.8, 2.7)
BAR_COLOR = "#4c72b0"
LAG_COLOR = "#dd8452"
LAG_TIME_COLOR = "#c44e52"


def _utc(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC)


def width_label(ms: int) -> str:
    for unit, size in (("day", DAY_MS), ("hour", 3_600_000), ("minute", 60_000)):
        if ms % size == 0:
            n = ms // size
            return f"{n}-{unit}" if n > 1 else unit
    return f"{ms} ms"


def _time_axis(ax, plot: GroupPlot) -> None:
    """The same time range on both plots of a group: its buckets, half a bucket either side."""
    pad = plot.bucket_ms // 2
    ax.set_xlim(_utc(plot.rate[0][0] - pad), _utc(plot.rate[-1][0] + plot.bucket_ms + pad))
    locator = mdates.AutoDateLocator(tz=dt.UTC, minticks=3, maxticks=7)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, tz=dt.UTC))
    ax.grid(True, axis="y", color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def to_svg(fig: Figure, title: str, salt: str, kind: str) -> str:
    """The figure as an inline <svg> element whose <title> is `title`."""
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": salt}), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # missing glyphs: the browser draws the text, not matplotlib
        fig.savefig(buf, format="svg", metadata={"Date": None})
    svg = buf.getvalue()
    svg = svg[svg.index("<svg") :]
    svg = re.sub(r"<metadata>.*?</metadata>", "", svg, flags=re.S)  # creator links, nothing to show
    # A unique id prefix per figure: several SVGs share one page.
    prefix = re.sub(r"[^A-Za-z0-9]", "", salt)
    svg = re.sub(r'id="([^"]+)"', lambda m: f'id="{prefix}-{m.group(1)}"', svg)
    svg = re.sub(r"url\(#([^)]+)\)", lambda m: f"url(#{prefix}-{m.group(1)})", svg)
    svg = re.sub(r'xlink:href="#([^"]+)"', lambda m: f'xlink:href="#{prefix}-{m.group(1)}"', svg)
    head_end = svg.index(">") + 1
    head = svg[:head_end].replace(
        "<svg ", f'<svg role="img" class="plot" data-kind="{kind}" aria-label="{html.escape(title)}" ', 1
    )
    return head + f"<title>{html.escape(title, quote=False)}</title>" + svg[head_end:]


def commit_rate_svg(plot: GroupPlot, index: int) -> str:
    fig = Figure(figsize=FIGSIZE, dpi=100, layout="constrained")
    ax = fig.add_subplot()
    xs = [_utc(b) for b, _ in plot.rate]
    ys = [r for _, r in plot.rate]
    ax.bar(xs, ys, width=plot.bucket_ms / DAY_MS, align="edge", color=BAR_COLOR, edgecolor="white", linewidth=0.3)  # type: ignore[arg-type]  # matplotlib takes datetimes; its stubs list numbers only
    ax.set_ylim(bottom=0)
    ax.set_ylabel("commits / hour")
    ax.set_title(
        f"Commit rate ({width_label(plot.bucket_ms)} buckets, {plot.commits} commit{'s' if plot.commits != 1 else ''})",
        fontsize=10,
        loc="left",
    )
    _time_axis(ax, plot)
    return to_svg(fig, f"Commit rate: {plot.group_id}", f"rate{index}", "commit-rate")


def offsets_svg(plot: GroupPlot, index: int) -> str:
    fig = Figure(figsize=FIGSIZE, dpi=100, layout="constrained")
    ax = fig.add_subplot()
    for s in plot.series:
        xs = [_utc(b) for b, _ in s.points]
        ys = [o for _, o in s.points]
        if len(xs) == 1:  # one bucket: a dot, not an invisible step
            ax.plot(xs, ys, marker="o", markersize=4, linestyle="none", label=f"{s.topic}-{s.partition}")  # type: ignore[arg-type]  # matplotlib takes datetimes; its stubs list numbers only
        else:
            ax.step(xs, ys, where="post", marker="o", markersize=2.5, linewidth=1.2, label=f"{s.topic}-{s.partition}")  # type: ignore[arg-type]  # matplotlib takes datetimes; its stubs list numbers only
    shown = (
        f"{len(plot.series)} of {plot.series_total} partitions"
        if plot.series_total > len(plot.series)
        else f"{plot.series_total} partition{'s' if plot.series_total != 1 else ''}"
    )
    ax.set_title(f"Committed offsets ({shown})", fontsize=10, loc="left")
    ax.set_ylabel("committed offset")
    ax.ticklabel_format(axis="y", style="plain", useOffset=False)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    values = {o for s in plot.series for _, o in s.points}
    if len(values) == 1:  # one value: a small integer range around it, not +-0.1
        v = values.pop()
        ax.set_ylim(v - 1, v + 1)
    if plot.series:
        ax.legend(fontsize=7, loc="upper left", frameon=False, ncols=2 if len(plot.series) > 4 else 1)
    _time_axis(ax, plot)
    return to_svg(fig, f"Committed offsets: {plot.group_id}", f"offsets{index}", "committed-offsets")


def lag_svg(plot: GroupPlot, index: int, in_time: bool) -> str:
    """The group's lag at each bucket's end: in records (summed over its partitions), or in time
    (the oldest unconsumed record's age, in hours)."""
    fig = Figure(figsize=FIGSIZE, dpi=100, layout="constrained")
    ax = fig.add_subplot()
    # hours, or minutes when the lag never reaches two hours
    unit_ms, unit = (
        (HOUR_MS, "hours") if max((m or 0 for _, _, m in plot.lag), default=0) >= 2 * HOUR_MS else (60_000, "minutes")
    )
    points = [(t, r if not in_time else (None if m is None else m / unit_ms)) for t, r, m in plot.lag]
    points = [(t, v) for t, v in points if v is not None]
    xs = [_utc(t) for t, _ in points]
    ys = [v for _, v in points]
    color = LAG_COLOR if not in_time else LAG_TIME_COLOR
    ax.fill_between(xs, ys, step="post", alpha=0.25, color=color)  # type: ignore[arg-type]  # matplotlib takes datetimes; its stubs list numbers only
    ax.step(xs, ys, where="post", color=color, linewidth=1.2)  # type: ignore[arg-type]  # matplotlib takes datetimes; its stubs list numbers only
    ax.set_ylim(bottom=0)
    if in_time:
        ax.set_ylabel(f"{unit} behind")
        ax.set_title("Lag in time (oldest unconsumed record, at each bucket's end)", fontsize=10, loc="left")
    else:
        ax.set_ylabel("records behind")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title("Lag in records (all partitions, at each bucket's end)", fontsize=10, loc="left")
    _time_axis(ax, plot)
    kind = "lag-time" if in_time else "lag-records"
    what = "Lag in time" if in_time else "Lag in records"
    return to_svg(fig, f"{what}: {plot.group_id}", f"{kind}{index}", kind)


def _generation_axis(ax, plot: AssignmentPlot) -> None:
    ax.set_xticks(range(len(plot.rebalances)), [str(r.generation) for r in plot.rebalances])
    ax.xaxis.set_major_locator(MaxNLocator(nbins=12, integer=True))
    ax.tick_params(axis="x", labelsize=7)
    ax.set_xlabel("generation" if plot.group_type == "classic" else "assignment epoch", fontsize=8)
    ax.grid(True, axis="y", color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def members_svg(plot: AssignmentPlot, index: int) -> str:
    """Partitions per member, generation by generation: a stacked bar per generation, one colour
    per member (instance id, else member id) over all generations drawn; the members beyond
    MAX_SERIES (by partitions held) share one grey."""
    fig = Figure(figsize=FIGSIZE, dpi=100, layout="constrained")
    ax = fig.add_subplot()
    totals: dict[str, int] = {}
    for r in plot.rebalances:
        for m, n in r.per_member.items():
            totals[m] = totals.get(m, 0) + n
    named = sorted(totals, key=lambda m: (-totals[m], m))[:MAX_SERIES]
    xs = list(range(len(plot.rebalances)))
    bottom = [0] * len(xs)
    for m in named + ["other"]:
        ys = [
            r.per_member.get(m, 0) if m != "other" else sum(n for k, n in r.per_member.items() if k not in named)
            for r in plot.rebalances
        ]
        if not any(ys):
            continue
        label = m if len(m) <= 28 else m[:25] + "..."
        ax.bar(
            xs,
            ys,
            bottom=bottom,
            label=label,
            color="#bbbbbb" if m == "other" else None,
            edgecolor="white",
            linewidth=0.3,
        )
        bottom = [b + y for b, y in zip(bottom, ys)]
    ax.set_ylabel("partitions")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title("Partitions per member", fontsize=10, loc="left")
    if named:
        ax.legend(fontsize=6, loc="upper left", frameon=False, ncols=2 if len(named) > 4 else 1)
    _generation_axis(ax, plot)
    return to_svg(fig, f"Partitions per member: {plot.group_id}", f"members{index}", "members")


def moves_svg(plot: AssignmentPlot, index: int) -> str:
    """Partitions moved in each rebalance, next to the fewest a balanced assignment could have
    moved and to what cooperative-sticky would have moved from the same previous assignment."""
    fig = Figure(figsize=FIGSIZE, dpi=100, layout="constrained")
    ax = fig.add_subplot()
    xs = list(range(len(plot.rebalances)))
    width = 0.28
    series = (
        ("moved", [r.moved for r in plot.rebalances], BAR_COLOR),
        ("fewest possible", [r.min_moves for r in plot.rebalances], "#55a868"),
        ("cooperative-sticky", [r.what_if_moved.get("cooperative-sticky") for r in plot.rebalances], LAG_COLOR),
    )
    drawn = False
    for i, (label, ys, color) in enumerate(series):
        points = [(x + (i - 1) * width, y) for x, y in zip(xs, ys) if y is not None]
        if points:
            ax.bar([x for x, _ in points], [y for _, y in points], width=width, label=label, color=color)
            drawn = True
    ax.set_ylim(bottom=0)
    ax.set_ylabel("partitions moved")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title("Moves per rebalance", fontsize=10, loc="left")
    if drawn:
        ax.legend(fontsize=7, loc="upper left", frameon=False)
    else:  # one generation: nothing to compare with yet
        ax.text(0.5, 0.5, "no rebalance yet", transform=ax.transAxes, ha="center", va="center", color="#888888")
    _generation_axis(ax, plot)
    return to_svg(fig, f"Moves per rebalance: {plot.group_id}", f"moves{index}", "moves")
