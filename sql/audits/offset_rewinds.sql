-- description: Committed offsets that went backwards: an effective commit smaller than the one it replaced
-- param group string = null: only this group (default: every group)
-- param topic string = null: only this topic (default: every topic)
--
-- From the view offset_effects (the loader's rules, as in committed_offset_as_of): plain commits
-- at their record, transactional ones at their producer's COMMIT marker when they took effect,
-- aborted ones never. A tombstone ends the chain: a commit after a deletion is not a rewind.
-- restore_id / restored_as_of: the jobs.restore_offsets run that made the rewind (it committed
-- that offset to that group, from a minute before to 10 minutes after it ran: clocks differ);
-- null for any other rewind (a reset by hand, a consumer bug).
WITH effects AS (
  SELECT * FROM offset_effects
  WHERE (:group IS NULL OR group_id = :group) AND (:topic IS NULL OR topic = :topic)
),
segmented AS (   -- chain = number of tombstones so far
  SELECT *, sum(CASE WHEN kind = 'tombstone' THEN 1 ELSE 0 END) OVER (
              PARTITION BY offsets_partition, group_id, topic, partition ORDER BY applied_offset
              ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS chain
  FROM effects
),
chained AS (
  SELECT *,
         lag(committed_offset) OVER w AS previous_offset,
         lag(applied_at) OVER w AS previous_applied_at,
         lag(record_log_offset) OVER w AS previous_log_offset
  FROM segmented
  WHERE kind = 'commit'
  WINDOW w AS (PARTITION BY offsets_partition, group_id, topic, partition, chain ORDER BY applied_offset)
)
SELECT c.group_id, c.topic, c.partition, previous_offset, previous_applied_at, committed_offset AS offset, applied_at,
       previous_offset - committed_offset AS rewound_by, transactional,
       previous_log_offset, record_log_offset AS log_offset, c.offsets_partition,
       r.restore_id, r.as_of AS restored_as_of
FROM chained c
LEFT JOIN restores r
  ON r.to_group = c.group_id AND r.topic = c.topic AND r.partition = c.partition
 AND r.applied_offset = c.committed_offset
 AND c.applied_at BETWEEN r.run_at - INTERVAL 1 MINUTE AND r.run_at + INTERVAL 10 MINUTES
WHERE committed_offset < previous_offset
QUALIFY row_number() OVER (PARTITION BY c.offsets_partition, c.record_log_offset ORDER BY r.run_at DESC) = 1
ORDER BY group_id, topic, partition, applied_at, log_offset
