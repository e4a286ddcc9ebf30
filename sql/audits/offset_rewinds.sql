-- description: Committed offsets that went backwards: an effective commit smaller than the one it replaced
-- param group string = null: only this group (default: every group)
-- param topic string = null: only this topic (default: every topic)
--
-- Effective commits follow Kafka 4.x replay (see committed_offset_as_of): non-transactional
-- commits at their record; transactional ones at their producer's COMMIT marker, if their
-- pending entry survived and their record is newer than the committed entry's; aborted ones
-- never. A tombstone ends the chain: a commit after a deletion is not a rewind.
WITH log AS (
  SELECT * FROM offsets_log WHERE decode_status = 'ok'
),
commits AS (
  SELECT offsets_partition, log_offset, log_timestamp, producer_id, is_tombstone, group_id, topic, partition,
         committed_offset,
         min(CASE WHEN is_tombstone THEN log_offset END) OVER (
           PARTITION BY offsets_partition, group_id, topic, partition ORDER BY log_offset
           ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING) AS next_tombstone,
         lead(log_offset) OVER (
           PARTITION BY offsets_partition, group_id, topic, partition, producer_id ORDER BY log_offset) AS next_same_producer
  FROM log
  WHERE NOT is_control AND record_type IN (${OFFSET_COMMIT_TYPES})
    AND (:group IS NULL OR group_id = :group) AND (:topic IS NULL OR topic = :topic)
),
markers AS (
  SELECT offsets_partition, producer_id, log_offset, log_timestamp, control_type
  FROM log WHERE is_control AND control_type IN ('COMMIT', 'ABORT')
),
txn AS (
  SELECT c.*, m.log_offset AS marker_offset, m.log_timestamp AS marker_time, m.control_type AS marker_type
  FROM commits c
  JOIN markers m ON m.offsets_partition = c.offsets_partition AND m.producer_id = c.producer_id
                AND m.log_offset > c.log_offset
  WHERE c.producer_id <> -1 AND NOT c.is_tombstone
  QUALIFY row_number() OVER (PARTITION BY c.offsets_partition, c.log_offset ORDER BY m.log_offset) = 1
),
events AS (   -- candidates (record offset, applied position) and tombstones, per key
  SELECT offsets_partition, group_id, topic, partition, committed_offset, producer_id, log_offset,
         log_offset AS applied_offset, log_timestamp AS applied_at, is_tombstone
  FROM commits WHERE producer_id = -1 OR is_tombstone
  UNION ALL
  SELECT offsets_partition, group_id, topic, partition, committed_offset, producer_id, log_offset,
         marker_offset, marker_time, false
  FROM txn
  WHERE marker_type = 'COMMIT'
    AND (next_tombstone IS NULL OR next_tombstone > marker_offset)
    AND (next_same_producer IS NULL OR next_same_producer > marker_offset)
),
segmented AS (   -- chain = number of tombstones so far
  SELECT *, sum(CASE WHEN is_tombstone THEN 1 ELSE 0 END) OVER (
              PARTITION BY offsets_partition, group_id, topic, partition ORDER BY applied_offset
              ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS chain
  FROM events
),
ranked AS (
  SELECT *, max(CASE WHEN NOT is_tombstone THEN log_offset END) OVER (
              PARTITION BY offsets_partition, group_id, topic, partition, chain ORDER BY applied_offset
              ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS newest_before
  FROM segmented
),
effective AS (   -- a COMMIT marker keeps a pending record only if it is newer than the committed one
  SELECT * FROM ranked
  WHERE NOT is_tombstone AND (producer_id = -1 OR newest_before IS NULL OR log_offset > newest_before)
),
chained AS (
  SELECT *,
         lag(committed_offset) OVER w AS previous_offset,
         lag(applied_at) OVER w AS previous_applied_at,
         lag(log_offset) OVER w AS previous_log_offset
  FROM effective
  WINDOW w AS (PARTITION BY offsets_partition, group_id, topic, partition, chain ORDER BY applied_offset)
)
SELECT group_id, topic, partition, previous_offset, previous_applied_at, committed_offset AS offset, applied_at,
       previous_offset - committed_offset AS rewound_by, producer_id <> -1 AS transactional,
       previous_log_offset, log_offset, offsets_partition
FROM chained
WHERE committed_offset < previous_offset
ORDER BY group_id, topic, partition, applied_at, log_offset
