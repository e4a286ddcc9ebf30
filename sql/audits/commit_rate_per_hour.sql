-- description: Offset commit records per group per hour (of log_timestamp), transactional ones counted apart
-- param group string = null: only this group (default: every group)
-- param since timestamp = null: only records at or after this instant
-- param until timestamp = null: only records before this instant
--
-- commits: OffsetCommit records with a value (one per topic partition committed, transactional
-- ones included, whether committed or aborted later); requests: distinct record batches (one per
-- OffsetCommit / TxnOffsetCommit write); topic_partitions: distinct partitions committed.
SELECT group_id,
       date_trunc('HOUR', log_timestamp) AS hour,
       count(*) AS commits,
       count(DISTINCT offsets_partition, batch_base_offset) AS requests,
       count_if(producer_id <> -1) AS transactional_commits,
       count(DISTINCT topic, partition) AS topic_partitions
FROM offsets_log
WHERE NOT is_control AND record_type IN (${OFFSET_COMMIT_TYPES}) AND NOT is_tombstone AND decode_status = 'ok'
  AND (:group IS NULL OR group_id = :group)
  AND (:since IS NULL OR log_timestamp >= :since)
  AND (:until IS NULL OR log_timestamp < :until)
GROUP BY group_id, date_trunc('HOUR', log_timestamp)
ORDER BY group_id, hour
