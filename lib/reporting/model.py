"""What the HTML report shows, as plain data (lib.reporting.report_builder gathers it with Spark,
lib.reporting.html and lib.reporting.plots render it)."""

from __future__ import annotations

from dataclasses import dataclass, field

DAY_MS = 86_400_000
HOUR_MS = 3_600_000
MINUTE_MS = 60_000
# Bucket widths to choose from, smallest first: an hour at least, so a bar is a count of commits
# in one hour (or the mean per hour of a wider bucket), never a short burst scaled up.
BUCKET_LADDER_MS = (HOUR_MS, 3 * HOUR_MS, 6 * HOUR_MS, 12 * HOUR_MS, DAY_MS, 7 * DAY_MS, 30 * DAY_MS)
MAX_BUCKETS = 72
MAX_SERIES = 8
MAX_BEHIND_PLOTS = 5  # groups furthest behind now, plotted before the top groups by commits
MAX_EXPIRING_ROWS = 200
MAX_ASSIGNMENT_GROUPS = 10  # groups with an assignment section: flagged ones first, then the most rebalanced
MAX_GENERATIONS = 40  # the latest generations drawn per group
REPORT_DIR = "report"
QUALITY_DIR = "_quality"


@dataclass
class Series:
    topic: str
    partition: int
    points: list[tuple[int, int]]  # (time of the bucket's last commit ms, committed offset it set)


@dataclass
class GroupPlot:
    group_id: str
    commits: int
    bucket_ms: int
    rate: list[tuple[int, float]]  # (bucket start ms, commits per hour); every bucket of the span
    series: list[Series]
    series_total: int  # topic-partitions the group committed to
    # (bucket end ms, lag in records summed over the partitions, the oldest unconsumed record's
    # age in ms, None when unknown) at each bucket's end; empty without lag tables
    lag: list[tuple[int, int | None, int | None]] = field(default_factory=list)


@dataclass
class Rebalance:
    """One generation of a group's assignment (an assignment_audit row, trimmed)."""

    generation: int
    at_ms: int | None
    per_member: dict[str, int]  # member (instance id, else member id) -> partitions
    imbalance: int
    moved: int | None
    min_moves: int | None
    what_if_moved: dict[str, int | None]  # Kafka assignor -> moves it would have made
    unassigned: int
    assigned_twice: int
    verdict: str


@dataclass
class AssignmentPlot:
    group_id: str
    group_type: str
    assignor: str | None
    generations: int  # in the table; the latest MAX_GENERATIONS are drawn
    rebalances: list[Rebalance]
    flag: str | None  # why the group is listed first (its latest generation's problem), None when fine


@dataclass
class ReportData:
    warehouse: str
    now_ms: int
    days: int
    top: int
    retention_minutes: int
    generated_ms: int
    totals: dict
    largest: dict[str, list[dict]]  # "live_offsets" / "members" / "commits" -> group rows
    expiring_offsets: list[dict]
    expiring_offsets_total: int
    expiring_groups: list[dict]
    expiring_groups_total: int
    plots: list[GroupPlot]
    behind: list[str] = field(default_factory=list)  # plotted first: furthest behind now (lag in time)
    quality: dict | None = None
    quality_error: str | None = None
    quality_docs_href: str | None = None
    notes: list[str] = field(default_factory=list)
    assignments: list[AssignmentPlot] = field(default_factory=list)
