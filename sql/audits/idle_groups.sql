-- description: Existing groups with no offset commit and no group record in the `idle_for` before `now`
-- param now timestamp = now: the instant to look back from
-- param idle_for duration = 7d: how long without activity (e.g. 7d, 12h, P30D)
--
-- A group exists if it is in consumer_groups or still has live offsets in group_offsets (offsets
-- left by a group tombstone). Activity: offset commit records with a value (transactional ones
-- included) and group records (types 2-23) other than tombstones, with log_timestamp <= now.
WITH activity AS (
  SELECT offsets_partition, group_id,
         max(CASE WHEN record_type IN (${OFFSET_COMMIT_TYPES}) THEN log_timestamp END) AS last_commit,
         max(CASE WHEN record_type NOT IN (${OFFSET_COMMIT_TYPES}) THEN log_timestamp END) AS last_group_record
  FROM offsets_log
  WHERE NOT is_control AND NOT is_tombstone AND decode_status = 'ok' AND group_id IS NOT NULL
    AND log_timestamp <= :now
  GROUP BY offsets_partition, group_id
),
live AS (
  SELECT offsets_partition, group_id, count(*) AS live_offsets FROM group_offsets GROUP BY offsets_partition, group_id
),
existing AS (
  SELECT offsets_partition, group_id FROM consumer_groups
  UNION
  SELECT offsets_partition, group_id FROM live
),
summary AS (
  SELECT e.group_id, g.group_type, g.state, a.last_commit, a.last_group_record,
         greatest(a.last_commit, a.last_group_record) AS last_activity,
         coalesce(l.live_offsets, 0) AS live_offsets, e.offsets_partition
  FROM existing e
  LEFT JOIN consumer_groups g USING (offsets_partition, group_id)
  LEFT JOIN activity a USING (offsets_partition, group_id)
  LEFT JOIN live l USING (offsets_partition, group_id)
)
SELECT group_id, group_type, state, last_commit, last_group_record, last_activity,
       :now - last_activity AS idle_for, live_offsets, offsets_partition
FROM summary
WHERE last_activity IS NULL OR last_activity < :now - :idle_for
ORDER BY last_activity NULLS FIRST, group_id
