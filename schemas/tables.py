"""The Delta tables: one spec per table, the single source for DDL, Arrow schemas,
quality checks and test fixtures. Names are snake_case; timestamps are UTC TIMESTAMPs."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import pyarrow as pa

from schemas.types import arrow_type

TOPIC_PARTITIONS = "ARRAY<STRUCT<topic: STRING, partitions: ARRAY<INT>>>"

CLASSIC_MEMBER = (
    "STRUCT<member_id: STRING, group_instance_id: STRING, client_id: STRING, client_host: STRING, "
    "rebalance_timeout_ms: INT, session_timeout_ms: INT, subscription_version: SMALLINT, "
    f"subscribed_topics: ARRAY<STRING>, owned_partitions: {TOPIC_PARTITIONS}, "
    "subscription_user_data: BINARY, generation_id: INT, rack_id: STRING, assignment_version: SMALLINT, "
    f"assignment: {TOPIC_PARTITIONS}, assignment_user_data: BINARY, subscription_bytes: BINARY, "
    "assignment_bytes: BINARY>"
)
GROUP_METADATA = (
    "STRUCT<protocol_type: STRING, generation: INT, protocol: STRING, leader: STRING, "
    f"current_state_timestamp: TIMESTAMP, members: ARRAY<{CLASSIC_MEMBER}>>"
)
AUDIT_MEMBER = (
    "STRUCT<member_id: STRING, group_instance_id: STRING, client_id: STRING, rack_id: STRING, "
    f"subscribed_topics: ARRAY<STRING>, partition_count: INT, assignment: {TOPIC_PARTITIONS}>"
)
GROUP_MEMBER = (
    "STRUCT<member_id: STRING, group_instance_id: STRING, client_id: STRING, client_host: STRING, "
    "rebalance_timeout_ms: INT, session_timeout_ms: INT, subscribed_topics: ARRAY<STRING>, "
    f"assignment: {TOPIC_PARTITIONS}>"
)


@dataclass(frozen=True)
class Column:
    name: str
    ddl: str
    nullable: bool = True
    doc: str = ""


@dataclass(frozen=True)
class Table:
    name: str
    doc: str
    columns: tuple[Column, ...]
    key: tuple[str, ...] = ()  # unique per row
    # Only quarantined_records (rare, per partition) is partitioned by offsets_partition. The
    # other tables hold it as a column: a file per partition and run cost more to write than an
    # incremental run's rows. The state tables get one file per Spark task; offsets_log one per
    # partition and 4M rows in a full replay, and one per task for the partitions with few new
    # rows. Each flat file names its partitions in its footer, and its offsets_partition
    # min/max in the Delta log skips it for readers of other partitions.
    partition_by: tuple[str, ...] = ()

    @property
    def ddl(self) -> str:
        """Spark DDL of the columns, e.g. for DataFrameReader.schema or CREATE TABLE."""
        return ", ".join(f"{c.name} {c.ddl}{'' if c.nullable else ' NOT NULL'}" for c in self.columns)

    @functools.cached_property
    def arrow_schema(self) -> pa.Schema:
        # cached: parsing the DDL types costs ~0.1 ms a table, and workers ask for it per file
        return pa.schema([pa.field(c.name, arrow_type(c.ddl), c.nullable) for c in self.columns])

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]


def C(name: str, ddl: str, doc: str = "", nullable: bool = True) -> Column:
    return Column(name, ddl, nullable, doc)


OFFSET_COLUMNS = (
    C("group_id", "STRING", "consumer group id", False),
    C("topic", "STRING", "", False),
    C("partition", "INT", "", False),
    C("committed_offset", "BIGINT", "", False),
    C("leader_epoch", "INT", "leader epoch the client committed with; null when absent or -1"),
    C("metadata", "STRING", "client metadata string"),
    C("commit_timestamp", "TIMESTAMP", ""),
    C("expire_timestamp", "TIMESTAMP", "explicit expiry of a v1 value; null when absent"),
    C("topic_id", "STRING", "topic id of a v4 value (4.1+), null when absent"),
    C("offsets_partition", "INT", "__consumer_offsets partition", False),
    C("log_offset", "BIGINT", "log offset of the record that set this value", False),
)

OFFSETS_LOG = Table(
    "offsets_log",
    "Every record of the replayed __consumer_offsets partitions, in log order.",
    (
        C("offsets_partition", "INT", "", False),
        C("log_offset", "BIGINT", "absolute offset: batch base offset + offset delta", False),
        C("log_timestamp", "TIMESTAMP", "record timestamp (null for magic 0)"),
        C("batch_base_offset", "BIGINT", "", False),
        C("magic", "TINYINT", "record format: 0/1 legacy, 2 record batch", False),
        C("compression", "STRING", "none, gzip, snappy, lz4, zstd", False),
        C("producer_id", "BIGINT", "-1 for non-transactional records", False),
        C("producer_epoch", "SMALLINT", "", False),
        C("is_transactional", "BOOLEAN", "", False),
        C("is_control", "BOOLEAN", "transaction marker", False),
        C("control_type", "STRING", "COMMIT / ABORT (or another control type) for markers"),
        C("coordinator_epoch", "INT", "transaction coordinator epoch of a marker"),
        C("record_type", "SMALLINT", "coordinator record type id (leading int16 of the key)"),
        C("record_type_name", "STRING", "e.g. OffsetCommit, GroupMetadata; null when unknown"),
        C("key_version", "SMALLINT", "key schema version: 0 for coordinator keys, the control key version for markers"),
        C("value_version", "SMALLINT", "leading int16 of the value; null for tombstones"),
        C("is_tombstone", "BOOLEAN", "null value", False),
        C("decode_status", "STRING", "ok, or unknown_type (kept undecoded, skipped by the replay)", False),
        C("group_id", "STRING", ""),
        C("member_id", "STRING", "member id of KIP-848 / share / streams member records"),
        C("topic", "STRING", ""),
        C("partition", "INT", ""),
        C("committed_offset", "BIGINT", ""),
        C("leader_epoch", "INT", "null when absent or -1"),
        C("metadata", "STRING", ""),
        C("commit_timestamp", "TIMESTAMP", ""),
        C("expire_timestamp", "TIMESTAMP", "null when absent"),
        C("topic_id", "STRING", ""),
        C("group_metadata", GROUP_METADATA, "decoded GroupMetadataValue (type 2)"),
        C("value_json", "STRING", "other record types' values as Kafka's JsonConverter prints them"),
        C("segment_file", "STRING", "segment file name", False),
        C("raw_key", "BINARY", ""),
        C("raw_value", "BINARY", ""),
    ),
    key=("offsets_partition", "log_offset"),
)

GROUP_OFFSETS = Table(
    "group_offsets",
    "Live committed offsets after replay and expiry.",
    OFFSET_COLUMNS,
    key=("group_id", "topic", "partition"),
)
EXPIRED_OFFSETS = Table(
    "expired_offsets",
    "Offsets that expiry removed as of the run's --now.",
    OFFSET_COLUMNS,
    key=("group_id", "topic", "partition"),
)

PENDING_TRANSACTIONAL_OFFSETS = Table(
    "pending_transactional_offsets",
    "Transactional offset commits whose transaction had no COMMIT/ABORT marker yet.",
    (
        C("producer_id", "BIGINT", "", False),
        C("group_id", "STRING", "", False),
        C("topic", "STRING", "", False),
        C("partition", "INT", "", False),
        C("committed_offset", "BIGINT", "", False),
        C("leader_epoch", "INT", ""),
        C("metadata", "STRING", ""),
        C("commit_timestamp", "TIMESTAMP", ""),
        C("offsets_partition", "INT", "", False),
        C("log_offset", "BIGINT", "", False),
    ),
    key=("producer_id", "group_id", "topic", "partition"),
)

GROUP_COLUMNS = (
    C("group_id", "STRING", "", False),
    C("group_type", "STRING", "classic, consumer, share or streams", False),
    C("protocol_type", "STRING", "classic groups: e.g. consumer, connect; null for simple groups"),
    C("generation", "INT", "classic: generation id; consumer/share/streams: group epoch"),
    C("protocol", "STRING", "classic: selected assignor; modern: server assignor when uniform"),
    C("leader", "STRING", ""),
    C("state", "STRING", "as Kafka reports it: Empty, Stable, ...", False),
    C("current_state_timestamp", "TIMESTAMP", ""),
    C("members", f"ARRAY<{GROUP_MEMBER}>", ""),
    C("subscribed_topics", "ARRAY<STRING>", "topics the group subscribes to; null when unknown"),
    C("offsets_partition", "INT", "", False),
    C("log_offset", "BIGINT", "offset of the last record that changed the group", False),
)
CONSUMER_GROUPS = Table(
    "consumer_groups",
    "Groups after replay and expiry.",
    GROUP_COLUMNS,
    key=("group_id",),
)
EXPIRED_GROUPS = Table(
    "expired_groups",
    "Groups that Kafka's cleanup would delete as of --now.",
    GROUP_COLUMNS,
    key=("group_id",),
)

REPLAY_CHECKPOINTS = Table(
    "replay_checkpoints",
    "Where each offsets partition's replay stopped.",
    (
        C("offsets_partition", "INT", "", False),
        C("next_log_offset", "BIGINT", "the next offset to read (log end offset after the run)", False),
        C("records_read", "BIGINT", "", False),
        C("high_watermark", "BIGINT", "from replication-offset-checkpoint, when present"),
        C("trailing_bytes", "BIGINT", "bytes of a partial batch at the end of the segments", False),
        C("run_id", "STRING", "", False),
        C("finished_at", "TIMESTAMP", "", False),
        C(
            "source_signature",
            "STRING",
            "the last segment's base offset, size and modification time as read; "
            "a run that finds the same (and nothing to re-judge) skips the partition",
        ),
        C("judged_at_ms", "BIGINT", "the --now (epoch ms) expiry was judged at"),
        C("retention_minutes", "INT", "offsets.retention.minutes expiry was judged with"),
        C(
            "expiry_changes_at_ms",
            "BIGINT",
            "the first later --now at which an offset of the partition expires (epoch ms); null if none would",
        ),
        C(
            "next_byte_position",
            "BIGINT",
            "byte position in the last segment after its last complete batch: "
            "where the next incremental run starts reading",
        ),
    ),
    key=("offsets_partition",),
)

GROUP_FOLD_STATE = Table(
    "group_fold_state",
    "Internal: every existing group's complete replay state (JSON), where an incremental run resumes.",
    (
        C("offsets_partition", "INT", "", False),
        C("group_id", "STRING", "", False),
        C("log_offset", "BIGINT", "offset of the last record that changed the group", False),
        C("fold_state", "STRING", "lib.replay.groups.GroupFold state", False),
    ),
    key=("offsets_partition", "group_id"),
)

QUARANTINED_RECORDS = Table(
    "quarantined_records",
    "Batches and records that could not be decoded, kept with their bytes (--on-corrupt=quarantine).",
    (
        C("offsets_partition", "INT", "", False),
        C("segment_file", "STRING", "segment file name (or fetch:<offset> for the live topic)", False),
        C("byte_position", "BIGINT", "position of the batch in the segment file", False),
        C("log_offset", "BIGINT", "the record's offset; for a batch, the base offset its header claims", False),
        C("level", "STRING", "batch (framing, checksum, compression) or record (key or value)", False),
        C("error_kind", "STRING", "the decode error's class, e.g. CorruptBatchError", False),
        C("error", "STRING", "the decode error's message", False),
        C("raw_bytes", "BINARY", "the whole batch for level batch; null for level record"),
        C("raw_key", "BINARY", "the record's key for level record"),
        C("raw_value", "BINARY", "the record's value for level record"),
        C("file_path", "STRING", "full path of the segment file (or the broker it was fetched from)", False),
        C("run_id", "STRING", "the run that quarantined it", False),
    ),
    key=("offsets_partition", "segment_file", "byte_position", "log_offset"),
    partition_by=("offsets_partition",),
)

PARTITION_END_OFFSETS = Table(
    "partition_end_offsets",
    "End offsets of the consumed topic partitions over time: one row per record batch of their "
    "segments in the log dir (read from batch headers), or per ListOffsets sample of a live cluster.",
    (
        C("topic", "STRING", "", False),
        C("partition", "INT", "", False),
        C("end_offset", "BIGINT", "the partition's log end offset after this batch (last offset + 1)", False),
        C(
            "at",
            "TIMESTAMP",
            "when the log reached end_offset: the batch's max timestamp, or an earlier batch's when that is later "
            "(producer clocks differ), so that end offsets never decrease in time; the sample time for list_offsets; "
            "null while no batch had a timestamp (magic 0)",
        ),
        C("source", "STRING", "segment (a batch header in the log dir) or list_offsets (a live sample)", False),
        C("topic_id", "STRING", "from the partition's partition.metadata (Kafka 2.8+), null when absent"),
        C("first_offset", "BIGINT", "offset of the batch's first record; null when unknown (legacy compressed)"),
        C("first_timestamp", "TIMESTAMP", "timestamp of the record at first_offset, where the header tells it"),
        C("max_timestamp", "TIMESTAMP", "the batch's own max timestamp (list_offsets: the newest record's, KIP-734)"),
        C("timestamp_type", "STRING", "CreateTime, LogAppendTime or NoTimestamp (magic 0)"),
        C("is_control", "BOOLEAN", "a transaction marker batch"),
        C("segment_file", "STRING", "segment file name (segment rows)"),
        C("byte_position", "BIGINT", "position of the batch in its segment file (segment rows)"),
        C("run_id", "STRING", "the run that wrote the row", False),
    ),
    key=("topic", "partition", "source", "end_offset", "at"),
)

GROUP_LAG = Table(
    "group_lag",
    "Consumer lag of every group on every partition it committed, in records and in time: at each effective "
    "commit (kind commit) and at each run's --now for the live offsets (kind now).",
    (
        C("group_id", "STRING", "", False),
        C("topic", "STRING", "", False),
        C("partition", "INT", "", False),
        C(
            "at",
            "TIMESTAMP",
            "commit: when the commit took effect (its record, or its transaction's COMMIT marker); "
            "now: the run's --now",
            False,
        ),
        C("kind", "STRING", "commit or now", False),
        C("committed_offset", "BIGINT", "", False),
        C("end_offset", "BIGINT", "the partition's end offset at `at`; null when no end offset is known by then"),
        C("end_offset_at", "TIMESTAMP", "time of the end-offset row used (how fresh end_offset is)"),
        C("lag_records", "BIGINT", "end_offset - committed_offset"),
        C("lag_ms", "BIGINT", "age at `at` of the first record not consumed; 0 when nothing is left to consume"),
        C(
            "lag_ms_method",
            "STRING",
            "record (that record's own timestamp, from the log), interpolated (between end-offset rows, "
            "as kafka-lag-exporter does), caught_up (lag_records 0), end_offset_unknown (no end offset of the "
            "partition known yet: lag_records and lag_ms null), or null when the lag is not known otherwise",
        ),
        C(
            "first_unconsumed_timestamp",
            "TIMESTAMP",
            "timestamp of the first record not consumed (method record), or its estimate (interpolated)",
        ),
        C(
            "truncated",
            "BOOLEAN",
            "the committed offset is beyond everything the log holds: the topic was truncated or recreated",
            False,
        ),
        C("topic_id", "STRING", "of the end-offset row used"),
        C("offsets_partition", "INT", "", False),
        C(
            "log_offset",
            "BIGINT",
            "the record that made the commit effective (the commit or its COMMIT marker); null for kind now",
        ),
        C("run_id", "STRING", "the run that wrote the row", False),
    ),
    key=("group_id", "topic", "partition", "kind", "at", "log_offset"),
)

LAG_CHECKPOINTS = Table(
    "lag_checkpoints",
    "Where the lag stage stopped: per consumed topic partition, the end of its scan; per offsets partition "
    "(topic __consumer_offsets), the log offset up to which its commits have group_lag rows.",
    (
        C("topic", "STRING", "", False),
        C("partition", "INT", "", False),
        C("next_offset", "BIGINT", "the next offset to read", False),
        C("topic_id", "STRING", "the topic id the scan read (a new id means the topic was recreated)"),
        C("segment_base_offset", "BIGINT", "segment the scan stopped in"),
        C("next_byte_position", "BIGINT", "byte position after the last complete batch of that segment"),
        C("trailing_bytes", "BIGINT", "bytes of a partial batch at the end of the segments"),
        C(
            "at_ms",
            "BIGINT",
            "consumed partition: its latest `at` so far; offsets partition: the --now of the stage (epoch ms)",
        ),
        C("source_signature", "STRING", "the last segment's base offset, size and modification time as read"),
        C("run_id", "STRING", "", False),
        C("finished_at", "TIMESTAMP", "", False),
        C(
            "log_end_offset",
            "BIGINT",
            "consumed partition: the largest end offset of its partition_end_offsets rows (null: not yet known)",
        ),
        C("first_at_ms", "BIGINT", "consumed partition: `at` of its first partition_end_offsets row"),
        C("first_offset", "BIGINT", "consumed partition: first_offset of its first partition_end_offsets row"),
        C(
            "tail_file",
            "STRING",
            "consumed partition: the file of _lag_tails holding its last partition_end_offsets rows with a time "
            "(null: none kept; its rows are read where a point needs them)",
        ),
    ),
    key=("topic", "partition"),
)

ASSIGNMENT_AUDIT = Table(
    "assignment_audit",
    "One row per generation of a classic consumer group (its last GroupMetadata record, where the leader's "
    "assignment is) or per target assignment epoch of a KIP-848 consumer group: how the partitions were spread, "
    "what moved, and what Kafka's own assignors would have done with the same subscriptions.",
    (
        C("group_id", "STRING", "", False),
        C("group_type", "STRING", "classic or consumer (KIP-848)", False),
        C("generation", "INT", "classic: generation id; consumer: assignment epoch", False),
        C("at", "TIMESTAMP", "time of the record that holds the assignment"),
        C("protocol_type", "STRING", "classic: consumer (only consumer-protocol groups are audited)"),
        C(
            "assignor",
            "STRING",
            "classic: the protocol the group chose (range, roundrobin, ...); consumer: server assignor",
        ),
        C("leader", "STRING", "classic: the member that computed the assignment"),
        C("member_count", "INT", "", False),
        C("members", f"ARRAY<{AUDIT_MEMBER}>", "each member, its subscription and what it was assigned", False),
        C(
            "topics",
            "ARRAY<STRUCT<topic: STRING, partitions: INT>>",
            "subscribed topics and their partition counts",
            False,
        ),
        C("partitions", "INT", "partitions of the subscribed topics", False),
        C("assigned", "INT", "distinct partitions assigned to some member", False),
        C("min_per_member", "INT", "fewest partitions a member got", False),
        C("max_per_member", "INT", "most partitions a member got", False),
        C("imbalance", "INT", "max_per_member - min_per_member", False),
        C(
            "moved",
            "INT",
            "partitions whose owner (instance id, else member id) changed or went away since the previous generation; null for the first",
        ),
        C("min_moves", "INT", "fewest moves a balanced (sticky) assignment could have made; null for the first"),
        C("unassigned", TOPIC_PARTITIONS, "subscribed partitions no member got", False),
        C("assigned_twice", TOPIC_PARTITIONS, "partitions assigned to more than one member", False),
        C(
            "verdict",
            "STRING",
            "matches (the leader assigned what Kafka's Java assignor of that name gives), equivalent (other "
            "partitions, but the members' counts are the same (which member gets the larger share may differ), as many "
            "are assigned and as many moved: another "
            "client's tie-breaking), differs (a client bug or a custom assignor under a standard name), custom (not "
            "one of Kafka's assignors), or not_recomputed (KIP-848 server-side assignment)",
            False,
        ),
        C("differing_members", "ARRAY<STRING>", "members whose assignment differs from the reference"),
        C("reference", f"ARRAY<STRUCT<member_id: STRING, assignment: {TOPIC_PARTITIONS}>>", "the reference assignment"),
        C(
            "what_if",
            "ARRAY<STRUCT<assignor: STRING, imbalance: INT, moved: INT, unassigned: INT>>",
            "each of Kafka's assignors recomputed on the same subscriptions (the sticky ones from the previous "
            "generation's actual assignment): its imbalance, moves and partitions left unassigned (cooperative-sticky "
            "leaves what it moves unassigned for one rebalance, as a cooperative group does)",
        ),
        C(
            "racks_recorded",
            "BOOLEAN",
            "members sent rack ids (rack-aware variants need partition racks, not in the log)",
            False,
        ),
        C("offsets_partition", "INT", "", False),
        C("log_offset", "BIGINT", "the record that holds the assignment", False),
    ),
    key=("group_id", "offsets_partition", "log_offset"),
)

# what a restore did with a partition (lib.restore.plan decides) and how the run ended
RESTORE_ACTIONS = (
    "restore",  # committed the target
    "unchanged",  # the group was there already
    "no_offset_then",  # no offset at the instant (never committed, or deleted): left as it is
    "below_log_start",  # the target's records are gone: needs the operator's decision
    "above_log_end",  # the log is shorter than the target (recreated, truncated): needs a decision
    "not_in_cluster",  # the partition does not exist now
    "skipped",  # outside the log, and the operator said skip
)
RESTORE_MODES = ("dry_run", "executed", "refused")

OFFSET_RESTORES = Table(
    "offset_restores",
    "Every run of jobs.restore_offsets, one row per topic partition: who put which group back to its "
    "offsets as of which instant, what the group had before, what was committed and what OffsetFetch "
    "answered after. Dry runs and refusals are recorded too.",
    (
        C("restore_id", "STRING", "one id per run of the job", False),
        C("run_by", "STRING", "the OS user who ran it", False),
        C("run_at", "TIMESTAMP", "when the job asked the cluster (before it committed)", False),
        C("bootstrap_servers", "STRING", "the cluster", False),
        C("group_id", "STRING", "the group whose history was read", False),
        C("to_group", "STRING", "the group the offsets were committed to (--to-group; else group_id)", False),
        C("as_of", "TIMESTAMP", "the instant the group was put back to", False),
        C("mode", "STRING", "dry_run, executed, or refused (the group had members, or a decision was missing)", False),
        C("topic", "STRING", "", False),
        C("partition", "INT", "", False),
        C(
            "action",
            "STRING",
            "restore, unchanged, no_offset_then, below_log_start, above_log_end, not_in_cluster or skipped "
            "(lib.restore.plan)",
            False,
        ),
        C("before_offset", "BIGINT", "to_group's committed offset when the job ran (null: none)"),
        C("target_offset", "BIGINT", "group_id's effective committed offset at as_of (null: none then)"),
        C("applied_offset", "BIGINT", "what the job committed (null: nothing; differs from target when clamped)"),
        C("after_offset", "BIGINT", "OffsetFetch after the commit (executed runs)"),
        C("log_start_offset", "BIGINT", "the partition's log start when the job ran"),
        C("log_end_offset", "BIGINT", "the partition's log end when the job ran"),
        C("note", "STRING", "why, for a partition that was not restored"),
    ),
    key=("restore_id", "topic", "partition"),
)

# In commit order: replay_checkpoints last, since its commit is a run's commit point.
REPLAY_TABLES = (
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
)
# The lag stage's, after the replay's: lag_checkpoints last, its own commit point.
LAG_TABLES = (PARTITION_END_OFFSETS, GROUP_LAG, LAG_CHECKPOINTS)
# Written by jobs.restore_offsets, not by a replay.
RESTORE_TABLES = (OFFSET_RESTORES,)
ALL_TABLES = REPLAY_TABLES + LAG_TABLES + RESTORE_TABLES
TABLES = {t.name: t for t in ALL_TABLES}

# An offset commit that took effect (Kafka 4.x): a non-transactional one at its own record; a
# transactional one at its producer's COMMIT marker, when it is newer than the value in effect.
# `log_offset` is the commit's record, `applied_offset` and `applied_at` the record that made it
# effective (the commit itself, or the marker).
COMMIT_EVENT_SCHEMA = pa.schema(
    [
        pa.field("group_id", pa.string()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("committed_offset", pa.int64()),
        pa.field("offsets_partition", pa.int32()),
        pa.field("log_offset", pa.int64()),
        pa.field("applied_offset", pa.int64()),
        pa.field("applied_at", pa.timestamp("us", tz="UTC")),
    ]
)
