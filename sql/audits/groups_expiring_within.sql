-- description: Offsets and groups that Kafka's offset expiry would remove within a window after `now`
-- param now timestamp = now: look ahead from this instant
-- param within duration = 7d: length of the window (e.g. 7d, 36h, P2DT12H)
-- param retention_minutes int = 10080: offsets.retention.minutes
-- param group string = null: only this group (default: every group)
--
-- Same conditions as lib/replay/expiry_spark.py (Kafka 4.x OffsetExpirationConditionImpl and each
-- group type's rules), applied to the current state (group_offsets, consumer_groups,
-- pending_transactional_offsets) assuming no further activity: an offset expires at its
-- expire_timestamp when it has one, else at base + retention, base being the group's
-- current_state_timestamp for an Empty classic group with a protocol type, else the commit
-- timestamp. Offsets of subscribed topics, of non-empty classic groups other than Stable
-- consumer groups, with a pending transaction, or of no group (after a group tombstone) never
-- expire. A group is deleted once all its offsets expired if it is Empty, not a share group
-- and has no open transaction (a group without offsets at the next check, i.e. `now`).
-- Rows already due at `now` (already_due) are listed too.
WITH groups AS (
  SELECT offsets_partition, group_id, group_type, protocol_type, state, current_state_timestamp, subscribed_topics
  FROM consumer_groups WHERE :group IS NULL OR group_id = :group
),
pending AS (
  SELECT DISTINCT offsets_partition, group_id, topic, partition FROM pending_transactional_offsets
),
open_txn AS (
  SELECT DISTINCT offsets_partition, group_id FROM pending_transactional_offsets
),
judged AS (
  SELECT o.group_id, o.topic, o.partition, o.committed_offset, o.offsets_partition, g.group_type, g.state,
    CASE
      WHEN g.group_type IS NULL OR p.group_id IS NOT NULL THEN false
      WHEN g.group_type = 'classic' AND g.protocol_type IS NULL THEN true
      WHEN g.group_type = 'classic' AND g.state = 'Empty' THEN true
      WHEN g.group_type = 'classic' AND g.protocol_type = 'consumer' AND g.state = 'Stable'
           AND g.subscribed_topics IS NOT NULL THEN NOT coalesce(array_contains(g.subscribed_topics, o.topic), false)
      WHEN g.group_type = 'classic' THEN false
      WHEN g.group_type = 'consumer' THEN NOT coalesce(array_contains(g.subscribed_topics, o.topic), false)
      WHEN g.group_type = 'streams' THEN g.state = 'Empty' OR NOT coalesce(array_contains(g.subscribed_topics, o.topic), false)
      ELSE false
    END AS eligible,
    CASE
      WHEN o.expire_timestamp IS NOT NULL THEN 'expire_timestamp'
      WHEN g.group_type = 'classic' AND g.protocol_type IS NOT NULL AND g.state = 'Empty'
           AND g.current_state_timestamp IS NOT NULL THEN 'current_state_timestamp'
      ELSE 'commit_timestamp'
    END AS basis,
    CASE
      WHEN o.expire_timestamp IS NOT NULL THEN o.expire_timestamp
      WHEN g.group_type = 'classic' AND g.protocol_type IS NOT NULL AND g.state = 'Empty'
        THEN coalesce(g.current_state_timestamp, o.commit_timestamp) + make_dt_interval(0, 0, :retention_minutes, 0)
      ELSE o.commit_timestamp + make_dt_interval(0, 0, :retention_minutes, 0)
    END AS due
  FROM group_offsets o
  LEFT JOIN groups g USING (offsets_partition, group_id)
  LEFT JOIN pending p USING (offsets_partition, group_id, topic, partition)
  WHERE :group IS NULL OR o.group_id = :group
),
offset_rows AS (
  SELECT group_id, 'offset' AS kind, topic, partition, committed_offset, due AS expires_at, basis, group_type, state,
         offsets_partition
  FROM judged WHERE eligible
),
group_rows AS (
  SELECT g.group_id, 'group' AS kind, CAST(NULL AS STRING) AS topic, CAST(NULL AS INT) AS partition,
         CAST(NULL AS BIGINT) AS committed_offset,
         coalesce(max(j.due), :now) AS expires_at,
         CASE WHEN count(j.group_id) = 0 THEN 'no offsets' ELSE 'last offset expires' END AS basis,
         g.group_type, g.state, g.offsets_partition
  FROM groups g
  LEFT JOIN judged j USING (offsets_partition, group_id)
  LEFT ANTI JOIN open_txn t USING (offsets_partition, group_id)
  WHERE g.state = 'Empty' AND g.group_type <> 'share'
  GROUP BY g.offsets_partition, g.group_id, g.group_type, g.state
  HAVING count_if(NOT j.eligible) = 0
)
SELECT group_id, kind, topic, partition, committed_offset, expires_at, expires_at <= :now AS already_due, basis,
       group_type, state, offsets_partition
FROM (SELECT * FROM offset_rows UNION ALL SELECT * FROM group_rows)
WHERE expires_at <= :now + :within
ORDER BY expires_at, group_id, CASE kind WHEN 'offset' THEN 0 ELSE 1 END, topic, partition
