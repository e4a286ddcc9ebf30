"""Data quality suites, one per Delta table, next to the table specs they check.

The generic part comes from `schemas/tables.py`, so there is one source: every column with
`nullable=False` gets a not-null expectation and every `Table.key` a uniqueness expectation.
The table-specific rules follow, each with a severity:

- "error": the table is wrong (a rule of Kafka or of this pipeline is broken); the check
  run fails (exit 1).
- "warning": unusual but possible in a real log; reported, never fails the run.

Rules that need a value Spark cannot read straight off a row are checked against a helper
column (`Derived`) that lib/reporting/quality_suites.py adds to the table's DataFrame before validation;
helper column names start with `_q_`. `{partition_count}` in a helper's SQL is the suite
parameter (the actual partition count of __consumer_offsets, default 50).

Severity decisions (spec and Kafka behaviour):
- A negative committed offset is a *warning*: the broker stores whatever offset a client
  commits (Kafka's own Java client refuses negative offsets, the protocol does not); the spec
  sets no lower bound.
- A negative partition, or a group outside the offsets partition `partitionFor(group_id)`
  gives it (spec 5), is an *error* in the state tables: a broker never writes such a record.
  In `offsets_log` the partition rule is a *warning*: the log is kept as read, and a record in
  the wrong partition shows up as an error in the state tables built from it.
- Checkpoints must not move backwards from one Delta version of `replay_checkpoints` to the
  next. A `--full` rebuild is the one legitimate reset; it is recognised by the way the run
  that wrote the checkpoint committed `offsets_log`: a full run (or a partition's first run)
  overwrites the partition (a Delta WRITE with replaceWhere), an incremental run only
  MERGEs new records. Both commits carry the run id in their userMetadata.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from schemas import tables as T
from schemas.records import RECORD_TYPES, RETIRED_RECORD_TYPES

ERROR = "error"
WARNING = "warning"
SEVERITIES = (ERROR, WARNING)
DEFAULT_PARTITION_COUNT = 50

DECODE_STATUSES = ("ok", "unknown_type")
GROUP_TYPES = ("classic", "consumer", "share", "streams")
# The states Kafka's admin API reports per group type (ClassicGroupState, ConsumerGroup,
# ShareGroup, StreamsGroup state enums; the text form Kafka prints).
GROUP_STATES = {
    "classic": ("Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"),
    "consumer": ("Empty", "Assigning", "Reconciling", "Stable", "Dead"),
    "share": ("Empty", "Stable", "Dead"),
    "streams": ("Empty", "NotReady", "Assigning", "Reconciling", "Stable", "Dead"),
}


@dataclass(frozen=True)
class Derived:
    """A helper column added before validation. kind "sql": `sql` is a Spark SQL expression
    over the table's columns; other kinds are computed by lib/reporting/quality_suites.py:
    "previous_checkpoint" (the partition's next_log_offset in the previous Delta version of
    replay_checkpoints, null when that version is a legitimate reset) and "log_end" (the
    largest log_offset of the partition in offsets_log)."""

    name: str
    kind: str
    sql: str = ""
    doc: str = ""


@dataclass(frozen=True)
class Check:
    name: str  # short id, unique within its suite
    expectation: str  # Great Expectations class, e.g. "ExpectColumnValuesToNotBeNull"
    kwargs: dict = field(default_factory=dict, hash=False)
    severity: str = ERROR
    doc: str = ""
    column: str | None = None  # the column it reports on; default: kwargs column / column_A


@dataclass(frozen=True)
class Suite:
    table: T.Table
    checks: tuple[Check, ...]
    derived: tuple[Derived, ...] = ()

    @property
    def name(self) -> str:
        return self.table.name

    def check(self, name: str) -> Check:
        return next(c for c in self.checks if c.name == name)


def report_column(check: Check) -> str | None:
    if check.column is not None:
        return check.column
    return check.kwargs.get("column") or check.kwargs.get("column_A")


# --- Kafka's partitionFor(groupId) in Spark SQL (spec 5) --------------------------------------
def partition_for_sql(col: str, partition_count: str | int = "{partition_count}") -> str:
    """abs(String.hashCode(col)) % partition_count with Kafka's Utils.abs, in Spark SQL: the
    UTF-16 code units are read 4 hex digits at a time from the string's UTF-16BE bytes and
    folded as h = 31*h + c modulo 2^32 (BIGINT, so no overflow even in ANSI mode), then made
    signed; Utils.abs(Integer.MIN_VALUE) is 0. Null for a null id. No Python UDF involved."""
    hx = f"hex(encode({col}, 'UTF-16BE'))"
    fold = (
        f"aggregate(sequence(0, length({hx}) div 4 - 1), CAST(0 AS BIGINT), "
        f"(h, i) -> pmod(h * 31 + CAST(conv(substr({hx}, i * 4 + 1, 4), 16, 10) AS BIGINT), 4294967296))"
    )
    unsigned = f"(CASE WHEN length({col}) = 0 THEN CAST(0 AS BIGINT) ELSE {fold} END)"
    signed = f"(CASE WHEN {unsigned} >= 2147483648 THEN {unsigned} - 4294967296 ELSE {unsigned} END)"
    return f"CAST(CASE WHEN {signed} = -2147483648 THEN 0 ELSE abs({signed}) END % {partition_count} AS INT)"


EXPECTED_PARTITION = Derived(
    "_q_partition_for_group",
    "sql",
    partition_for_sql("group_id"),
    "partitionFor(group_id) = Utils.abs(group_id.hashCode()) % partition_count",
)

_known = ", ".join(str(t) for t in sorted(RECORD_TYPES))
_retired = ", ".join(str(t) for t in sorted(RETIRED_RECORD_TYPES))
UNDECODED_EXPLAINED = Derived(
    "_q_explained",
    "sql",
    "decode_status = 'ok' OR (decode_status = 'unknown_type' AND NOT is_control AND record_type IS NOT NULL "
    f"AND record_type NOT IN ({_known}) AND raw_key IS NOT NULL AND (is_tombstone OR raw_value IS NOT NULL))",
    "true when the row decoded, or is an undecoded row of a record type Kafka does not know "
    f"(unknown, or retired: {_retired}) with its raw key and value kept",
)
UNDECODED_REASON = Derived(
    "_q_undecoded_reason",
    "sql",
    f"CASE WHEN decode_status = 'ok' THEN NULL WHEN record_type IN ({_retired}) THEN 'retired record type' "
    f"WHEN record_type NOT IN ({_known}) THEN 'unknown record type' ELSE 'unexplained' END",
    "why a row is undecoded (shown in Data Docs examples)",
)
PREVIOUS_CHECKPOINT = Derived(
    "_q_previous_next_log_offset",
    "previous_checkpoint",
    doc="next_log_offset of the partition in the previous Delta version; null if none, or if the run "
    "that wrote the current checkpoint rebuilt the partition (--full)",
)
LOG_END = Derived("_q_last_log_offset", "log_end", doc="largest log_offset of the partition in offsets_log")


def _generic(table: T.Table) -> list[Check]:
    checks = [
        Check(
            f"{c.name}_not_null",
            "ExpectColumnValuesToNotBeNull",
            {"column": c.name},
            ERROR,
            f"{c.name} is never null (schemas/tables.py)",
        )
        for c in table.columns
        if not c.nullable
    ]
    if len(table.key) == 1:
        checks.append(
            Check(
                "key_unique",
                "ExpectColumnValuesToBeUnique",
                {"column": table.key[0]},
                ERROR,
                f"one row per {table.key[0]}",
            )
        )
    elif table.key:
        checks.append(
            Check(
                "key_unique",
                "ExpectCompoundColumnsToBeUnique",
                {"column_list": list(table.key)},
                ERROR,
                f"one row per ({', '.join(table.key)})",
            )
        )
    return checks


def _non_negative(col: str, severity: str = ERROR, doc: str = "") -> Check:
    return Check(
        f"{col}_non_negative",
        "ExpectColumnValuesToBeBetween",
        {"column": col, "min_value": 0},
        severity,
        doc or f"{col} >= 0",
    )


def _group_partition(severity: str = ERROR) -> Check:
    return Check(
        "offsets_partition_matches_group",
        "ExpectColumnPairValuesToBeEqual",
        {
            "column_A": "offsets_partition",
            "column_B": EXPECTED_PARTITION.name,
            "ignore_row_if": "either_value_is_missing",
        },
        severity,
        "the row's offsets partition is partitionFor(group_id) (spec 5)",
        column="offsets_partition",
    )


def _offset_rules() -> list[Check]:
    return [
        _non_negative("partition", ERROR, "topic partitions are numbered from 0"),
        _non_negative(
            "committed_offset", WARNING, "clients commit offsets >= 0 in practice; the broker does not enforce it"
        ),
        _non_negative("log_offset"),
        _group_partition(),
    ]


def _group_rules() -> list[Check]:
    pairs = [[t, s] for t in GROUP_TYPES for s in GROUP_STATES[t]]
    return [
        Check(
            "group_type_known",
            "ExpectColumnValuesToBeInSet",
            {"column": "group_type", "value_set": list(GROUP_TYPES)},
            ERROR,
            "classic, consumer, share or streams",
        ),
        Check(
            "state_known",
            "ExpectColumnPairValuesToBeInSet",
            {"column_A": "group_type", "column_B": "state", "value_pairs_set": pairs},
            ERROR,
            "a state name Kafka reports for the group's type",
            column="state",
        ),
        _group_partition(),
    ]


OFFSETS_LOG = Suite(
    T.OFFSETS_LOG,
    tuple(
        _generic(T.OFFSETS_LOG)
        + [
            _non_negative("log_offset"),
            Check(
                "log_offset_in_batch",
                "ExpectColumnPairValuesAToBeGreaterThanB",
                {"column_A": "log_offset", "column_B": "batch_base_offset", "or_equal": True},
                ERROR,
                "a record's offset is at or after its batch's base offset",
            ),
            Check(
                "decode_status_known",
                "ExpectColumnValuesToBeInSet",
                {"column": "decode_status", "value_set": list(DECODE_STATUSES)},
                ERROR,
                "ok or unknown_type",
            ),
            Check(
                "undecoded_rows_explained",
                "ExpectColumnValuesToBeInSet",
                {"column": UNDECODED_EXPLAINED.name, "value_set": [True]},
                ERROR,
                "no undecoded row is left unexplained: each is of a record type Kafka does not know (unknown or "
                "retired), and keeps its raw bytes",
                column="decode_status",
            ),
            _group_partition(WARNING),
        ]
    ),
    (EXPECTED_PARTITION, UNDECODED_EXPLAINED, UNDECODED_REASON),
)

GROUP_OFFSETS = Suite(T.GROUP_OFFSETS, tuple(_generic(T.GROUP_OFFSETS) + _offset_rules()), (EXPECTED_PARTITION,))
EXPIRED_OFFSETS = Suite(T.EXPIRED_OFFSETS, tuple(_generic(T.EXPIRED_OFFSETS) + _offset_rules()), (EXPECTED_PARTITION,))
PENDING_TRANSACTIONAL_OFFSETS = Suite(
    T.PENDING_TRANSACTIONAL_OFFSETS,
    tuple(_generic(T.PENDING_TRANSACTIONAL_OFFSETS) + _offset_rules()),
    (EXPECTED_PARTITION,),
)
CONSUMER_GROUPS = Suite(T.CONSUMER_GROUPS, tuple(_generic(T.CONSUMER_GROUPS) + _group_rules()), (EXPECTED_PARTITION,))
EXPIRED_GROUPS = Suite(T.EXPIRED_GROUPS, tuple(_generic(T.EXPIRED_GROUPS) + _group_rules()), (EXPECTED_PARTITION,))
GROUP_FOLD_STATE = Suite(
    T.GROUP_FOLD_STATE, tuple(_generic(T.GROUP_FOLD_STATE) + [_group_partition()]), (EXPECTED_PARTITION,)
)
REPLAY_CHECKPOINTS = Suite(
    T.REPLAY_CHECKPOINTS,
    tuple(
        _generic(T.REPLAY_CHECKPOINTS)
        + [
            _non_negative("next_log_offset"),
            _non_negative("records_read"),
            _non_negative("trailing_bytes"),
            Check(
                "checkpoint_not_behind_previous_version",
                "ExpectColumnPairValuesAToBeGreaterThanB",
                {
                    "column_A": "next_log_offset",
                    "column_B": PREVIOUS_CHECKPOINT.name,
                    "or_equal": True,
                    "ignore_row_if": "either_value_is_missing",
                },
                ERROR,
                "next_log_offset never moves backwards from the previous Delta version, except in a --full rebuild",
                column="next_log_offset",
            ),
            Check(
                "checkpoint_after_last_record",
                "ExpectColumnPairValuesAToBeGreaterThanB",
                {
                    "column_A": "next_log_offset",
                    "column_B": LOG_END.name,
                    "or_equal": False,
                    "ignore_row_if": "either_value_is_missing",
                },
                ERROR,
                "next_log_offset is past the partition's last record in offsets_log",
                column="next_log_offset",
            ),
        ]
    ),
    (PREVIOUS_CHECKPOINT, LOG_END),
)

QUARANTINED_RECORDS = Suite(
    T.QUARANTINED_RECORDS,
    tuple(
        _generic(T.QUARANTINED_RECORDS)
        + [
            Check(
                "level_known",
                "ExpectColumnValuesToBeInSet",
                {"column": "level", "value_set": ["batch", "record"]},
                ERROR,
                "a whole batch, or one record",
            ),
            _non_negative("byte_position"),
            Check(
                "nothing_quarantined",
                "ExpectTableRowCountToEqual",
                {"value": 0},
                WARNING,
                "records were skipped by --on-corrupt=quarantine: look at them before trusting the state tables",
            ),
        ]
    ),
    (),
)

END_OFFSET_BEFORE = Derived(
    "_q_end_offset_before",
    "sql",
    "lag(end_offset) OVER (PARTITION BY topic, partition, topic_id ORDER BY at, end_offset)",
    doc="the previous end offset of the same topic id and partition in time",
)
PARTITION_END_OFFSETS = Suite(
    T.PARTITION_END_OFFSETS,
    tuple(
        _generic(T.PARTITION_END_OFFSETS)
        + [
            _non_negative("end_offset"),
            Check(
                "source_known",
                "ExpectColumnValuesToBeInSet",
                {"column": "source", "value_set": ["segment", "list_offsets"]},
                ERROR,
                "segment or list_offsets",
            ),
            Check(
                "end_offsets_never_decrease_within_a_topic_id",
                "ExpectColumnPairValuesAToBeGreaterThanB",
                {
                    "column_A": "end_offset",
                    "column_B": END_OFFSET_BEFORE.name,
                    "or_equal": True,
                    "ignore_row_if": "either_value_is_missing",
                },
                ERROR,
                "a partition's end offset only grows in time while its topic id stays (a recreated topic has a new id)",
                column="end_offset",
            ),
        ]
    ),
    (END_OFFSET_BEFORE,),
)
LAG_EXPLAINED = Derived(
    "_q_lag_explained",
    "sql",
    "lag_records IS NULL OR lag_records >= 0 OR truncated",
    doc="a negative lag is only possible where the committed offset is beyond the log (truncated)",
)
GROUP_LAG = Suite(
    T.GROUP_LAG,
    tuple(
        _generic(T.GROUP_LAG)
        + [
            Check(
                "kind_known",
                "ExpectColumnValuesToBeInSet",
                {"column": "kind", "value_set": ["commit", "now"]},
                ERROR,
                "commit or now",
            ),
            Check(
                "lag_never_negative_unless_truncated",
                "ExpectColumnValuesToBeInSet",
                {"column": LAG_EXPLAINED.name, "value_set": [True]},
                ERROR,
                "lag_records >= 0, except where the topic was truncated or recreated (truncated)",
                column="lag_records",
            ),
            _non_negative("lag_ms"),
            Check(
                "lag_ms_method_known",
                "ExpectColumnValuesToBeInSet",
                {"column": "lag_ms_method", "value_set": ["record", "interpolated", "caught_up", "end_offset_unknown"]},
                ERROR,
                "record, interpolated, caught_up or end_offset_unknown (null when the lag in time is unknown)",
            ),
            Check(
                "no_truncated_partitions",
                "ExpectColumnValuesToBeInSet",
                {"column": "truncated", "value_set": [False]},
                WARNING,
                "a group committed beyond the end of a partition's log: the topic was truncated or recreated",
            ),
        ]
    ),
    (LAG_EXPLAINED,),
)
LAG_CHECKPOINTS = Suite(
    T.LAG_CHECKPOINTS,
    tuple(_generic(T.LAG_CHECKPOINTS) + [_non_negative("next_offset"), _non_negative("trailing_bytes")]),
    (),
)

IMBALANCE_CONSISTENT = Derived(
    "_q_imbalance_consistent",
    "sql",
    "imbalance = max_per_member - min_per_member AND min_per_member <= max_per_member AND member_count = size(members)",
    "imbalance is the spread of the members' partition counts",
)
ASSIGNMENT_AUDIT = Suite(
    T.ASSIGNMENT_AUDIT,
    tuple(
        _generic(T.ASSIGNMENT_AUDIT)
        + [
            Check(
                "verdict_known",
                "ExpectColumnValuesToBeInSet",
                {"column": "verdict", "value_set": ["matches", "equivalent", "differs", "custom", "not_recomputed"]},
                ERROR,
                "matches, equivalent, differs, custom or not_recomputed",
            ),
            Check(
                "group_type_known",
                "ExpectColumnValuesToBeInSet",
                {"column": "group_type", "value_set": ["classic", "consumer"]},
                ERROR,
                "classic or consumer",
            ),
            Check(
                "imbalance_consistent",
                "ExpectColumnValuesToBeInSet",
                {"column": IMBALANCE_CONSISTENT.name, "value_set": [True]},
                ERROR,
                IMBALANCE_CONSISTENT.doc,
                column="imbalance",
            ),
            _non_negative("moved"),
            _non_negative("min_moves"),
            Check(
                "assignment_as_its_assignor_computes",
                "ExpectColumnValuesToNotBeInSet",
                {"column": "verdict", "value_set": ["differs"]},
                WARNING,
                "the leader's assignment is not what Kafka's Java assignor of that name computes from the same "
                "subscriptions: a client bug or a custom assignor under a standard name",
                column="differing_members",
            ),
            Check(
                "no_partition_assigned_twice",
                "ExpectColumnValuesToBeInSet",
                {"column": "_q_assigned_twice", "value_set": [0]},
                WARNING,
                "a partition assigned to more than one member of a generation",
                column="assigned_twice",
            ),
        ]
    ),
    (
        IMBALANCE_CONSISTENT,
        Derived("_q_assigned_twice", "sql", "size(assigned_twice)", "partitions assigned to two members"),
    ),
)

OFFSET_RESTORES = Suite(
    T.OFFSET_RESTORES,
    tuple(
        _generic(T.OFFSET_RESTORES)
        + [
            Check(
                "mode_known",
                "ExpectColumnValuesToBeInSet",
                {"column": "mode", "value_set": list(T.RESTORE_MODES)},
                ERROR,
                ", ".join(T.RESTORE_MODES),
            ),
            Check(
                "action_known",
                "ExpectColumnValuesToBeInSet",
                {"column": "action", "value_set": list(T.RESTORE_ACTIONS)},
                ERROR,
                "an action of lib.restore.plan",
            ),
            _non_negative("partition", ERROR, "topic partitions are numbered from 0"),
            Check(
                "executed_as_applied",
                "ExpectColumnPairValuesToBeEqual",
                {"column_A": "after_offset", "column_B": "applied_offset", "ignore_row_if": "either_value_is_missing"},
                WARNING,
                "OffsetFetch after an executed restore answered what was committed (else something committed since)",
                column="after_offset",
            ),
        ]
    ),
    (),
)

ALL_SUITES = (
    OFFSETS_LOG,
    GROUP_OFFSETS,
    EXPIRED_OFFSETS,
    PENDING_TRANSACTIONAL_OFFSETS,
    CONSUMER_GROUPS,
    EXPIRED_GROUPS,
    GROUP_FOLD_STATE,
    QUARANTINED_RECORDS,
    ASSIGNMENT_AUDIT,
    REPLAY_CHECKPOINTS,
    PARTITION_END_OFFSETS,
    GROUP_LAG,
    LAG_CHECKPOINTS,
    OFFSET_RESTORES,
)
SUITES = {s.name: s for s in ALL_SUITES}

assert [s.name for s in ALL_SUITES] == [t.name for t in T.ALL_TABLES], "one suite per table"
for _s in ALL_SUITES:
    assert len({c.name for c in _s.checks}) == len(_s.checks), f"duplicate check name in {_s.name}"
    assert all(c.severity in SEVERITIES for c in _s.checks)
