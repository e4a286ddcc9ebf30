-- description: Committed offset of a group (per topic partition) as of a time, replayed from offsets_log with Kafka 4.x rules
-- param group string: consumer group id
-- param topic string = null: only this topic (default: every topic)
-- param partition int = null: only this partition (default: every partition)
-- param at timestamp = now: replay the records whose log_timestamp is at or before this instant
--
-- Rules (spec 4.3/4.4), applied to the log prefix of records with log_timestamp <= :at:
-- * a non-transactional OffsetCommit (producer_id = -1) applies at its own record;
-- * a transactional one (producer_id <> -1) stays pending until the first COMMIT/ABORT marker
--   of its producer later in the same offsets partition; it applies at a COMMIT marker only if
--   its pending entry survived (no tombstone of the key, no newer record of the same producer
--   for the key in between) and its record is newer (log offset) than the committed entry's;
--   an ABORT drops it; with no marker yet it is not committed;
-- * an offset tombstone (any producer) deletes the committed offset and pending entries;
-- * a group tombstone deletes the group, not its offsets (Kafka 4.x).
-- Between tombstones the committed entry's record offset only grows, so the answer is the
-- applicable commit with the highest record offset after the key's last tombstone.
-- status: 'committed', or 'deleted' when the last event is a tombstone (offset columns null).
WITH log AS (
  SELECT * FROM offsets_log
  WHERE log_timestamp <= :at AND decode_status = 'ok'
),
commits AS (
  SELECT offsets_partition, log_offset, log_timestamp, producer_id, is_tombstone, group_id, topic, partition,
         committed_offset, leader_epoch, metadata, commit_timestamp, expire_timestamp,
         -- the next tombstone of this key, and the next record of the same producer for it
         min(CASE WHEN is_tombstone THEN log_offset END) OVER (
           PARTITION BY offsets_partition, group_id, topic, partition ORDER BY log_offset
           ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING) AS next_tombstone,
         lead(log_offset) OVER (
           PARTITION BY offsets_partition, group_id, topic, partition, producer_id ORDER BY log_offset) AS next_same_producer
  FROM log
  WHERE NOT is_control AND record_type IN (${OFFSET_COMMIT_TYPES}) AND group_id = :group
    AND (:topic IS NULL OR topic = :topic) AND (:partition IS NULL OR partition = :partition)
),
markers AS (
  SELECT offsets_partition, producer_id, log_offset, log_timestamp, control_type
  FROM log WHERE is_control AND control_type IN ('COMMIT', 'ABORT')
),
txn AS (   -- each transactional record with the first marker of its producer after it
  SELECT c.*, m.log_offset AS marker_offset, m.log_timestamp AS marker_time, m.control_type AS marker_type
  FROM commits c
  JOIN markers m ON m.offsets_partition = c.offsets_partition AND m.producer_id = c.producer_id
                AND m.log_offset > c.log_offset
  WHERE c.producer_id <> -1 AND NOT c.is_tombstone
  QUALIFY row_number() OVER (PARTITION BY c.offsets_partition, c.log_offset ORDER BY m.log_offset) = 1
),
applicable AS (
  SELECT offsets_partition, group_id, topic, partition, committed_offset, leader_epoch, metadata, commit_timestamp,
         expire_timestamp, producer_id, log_offset, log_timestamp, log_offset AS applied_offset,
         log_timestamp AS applied_at
  FROM commits WHERE producer_id = -1 AND NOT is_tombstone
  UNION ALL
  SELECT offsets_partition, group_id, topic, partition, committed_offset, leader_epoch, metadata, commit_timestamp,
         expire_timestamp, producer_id, log_offset, log_timestamp, marker_offset, marker_time
  FROM txn
  WHERE marker_type = 'COMMIT'
    AND (next_tombstone IS NULL OR next_tombstone > marker_offset)
    AND (next_same_producer IS NULL OR next_same_producer > marker_offset)
),
last_tombstone AS (
  SELECT offsets_partition, group_id, topic, partition,
         max(log_offset) AS tombstone_offset, max_by(log_timestamp, log_offset) AS tombstone_time
  FROM commits WHERE is_tombstone
  GROUP BY offsets_partition, group_id, topic, partition
),
live AS (
  SELECT a.* FROM applicable a
  LEFT JOIN last_tombstone t USING (offsets_partition, group_id, topic, partition)
  WHERE t.tombstone_offset IS NULL OR a.applied_offset > t.tombstone_offset
  QUALIFY row_number() OVER (PARTITION BY a.offsets_partition, a.group_id, a.topic, a.partition
                             ORDER BY a.log_offset DESC) = 1
)
SELECT group_id, topic, partition, 'committed' AS status, committed_offset, leader_epoch, metadata,
       commit_timestamp, expire_timestamp, log_offset AS record_log_offset, log_timestamp AS record_time,
       applied_at, producer_id <> -1 AS transactional, producer_id, offsets_partition
FROM live
UNION ALL
SELECT t.group_id, t.topic, t.partition, 'deleted', NULL, NULL, NULL, NULL, NULL, t.tombstone_offset,
       t.tombstone_time, t.tombstone_time, false, NULL, t.offsets_partition
FROM last_tombstone t
LEFT ANTI JOIN live USING (offsets_partition, group_id, topic, partition)
ORDER BY topic, partition, offsets_partition
