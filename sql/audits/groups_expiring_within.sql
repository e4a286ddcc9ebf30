-- description: Offsets and groups that Kafka's offset expiry would remove within a window after `now`
-- param now timestamp = now: look ahead from this instant
-- param within duration = 7d: length of the window (e.g. 7d, 36h, P2DT12H)
-- param retention_minutes int = 10080: offsets.retention.minutes
-- param group string = null: only this group (default: every group)
--
-- From the views offset_expiry and group_expiry (lib.replay.expiry_spark: Kafka 4.x
-- OffsetExpirationConditionImpl and each group type's rules, as the replay and the report apply
-- them), over the current state assuming no further activity: an offset the cleanup may expire
-- (eligible) is due at expiry_due: its expire_timestamp when it has one, else retention after
-- its base (basis: the group's current_state_timestamp for an Empty classic group with a
-- protocol type, else the commit timestamp). Offsets of subscribed topics, of non-empty classic
-- groups other than Stable consumer groups, with a pending transaction, or of no group (after a
-- group tombstone) never expire. A group is deleted once all its offsets expired if it is
-- Empty, not a share group and has no open transaction (a group without offsets at the next
-- check, i.e. `now`). Rows already due at `now` (already_due) are listed too.
WITH judged AS (
  SELECT *, expiry_due(expire_timestamp, retention_base, CAST(:retention_minutes AS BIGINT) * 60000) AS due
  FROM offset_expiry WHERE :group IS NULL OR group_id = :group
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
  FROM group_expiry g
  LEFT JOIN judged j USING (offsets_partition, group_id)
  WHERE g.deletable AND (:group IS NULL OR g.group_id = :group)
  GROUP BY g.offsets_partition, g.group_id, g.group_type, g.state
  HAVING count_if(NOT j.eligible) = 0
)
SELECT group_id, kind, topic, partition, committed_offset, expires_at, expires_at <= :now AS already_due, basis,
       group_type, state, offsets_partition
FROM (SELECT * FROM offset_rows UNION ALL SELECT * FROM group_rows)
WHERE expires_at <= :now + :within
ORDER BY expires_at, group_id, CASE kind WHEN 'offset' THEN 0 ELSE 1 END, topic, partition
