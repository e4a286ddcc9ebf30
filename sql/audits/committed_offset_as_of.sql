-- description: Committed offset of a group (per topic partition) as of a time, replayed from offsets_log with Kafka 4.x rules
-- param group string: consumer group id
-- param topic string = null: only this topic (default: every topic)
-- param partition int = null: only this partition (default: every partition)
-- param at timestamp = now: the effects that had taken place at or before this instant
--
-- From the view offset_effects (lib.replay.offsets_spark.offset_effects, the rules of spec
-- 4.3/4.4 that the replay applies): a plain OffsetCommit takes effect at its record; a
-- transactional one at its producer's COMMIT marker, unless an ABORT, a tombstone of its key,
-- a later record of the same producer for the key, or a newer record of the key that took
-- effect first came before the marker; an offset tombstone deletes at its record; a group
-- tombstone deletes the group, not its offsets (Kafka 4.x). The answer is the key's last effect
-- (in log order) at or before :at.
-- status: 'committed', or 'deleted' when the last effect is a tombstone (offset columns null).
-- applied_at: when it took effect (the COMMIT marker's time for a transactional commit).
WITH last_effect AS (
  SELECT * FROM offset_effects
  WHERE group_id = :group AND applied_at <= :at
    AND (:topic IS NULL OR topic = :topic) AND (:partition IS NULL OR partition = :partition)
  QUALIFY row_number() OVER (PARTITION BY offsets_partition, topic, partition ORDER BY applied_offset DESC) = 1
)
SELECT group_id, topic, partition,
       CASE kind WHEN 'commit' THEN 'committed' ELSE 'deleted' END AS status,
       committed_offset, leader_epoch, metadata, commit_timestamp, expire_timestamp,
       record_log_offset, record_time, applied_at,
       transactional, CASE kind WHEN 'commit' THEN producer_id END AS producer_id, offsets_partition
FROM last_effect
ORDER BY topic, partition, offsets_partition
