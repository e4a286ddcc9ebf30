-- description: The group_offsets table as a past replay run left it (Delta time travel, TIMESTAMP AS OF)
-- param at timestamp: a Delta commit time of group_offsets (see DESCRIBE HISTORY group_offsets), not a log time
-- param group string = null: only this group (default: every group)
--
-- Reads the table version current at :at; Delta refuses instants before the first or after
-- the last commit of the table. For the state as of a time in the log, use committed_offset_as_of.
SELECT group_id, topic, partition, committed_offset, leader_epoch, metadata, commit_timestamp, expire_timestamp,
       topic_id, offsets_partition, log_offset
FROM group_offsets TIMESTAMP AS OF :at
WHERE :group IS NULL OR group_id = :group
ORDER BY group_id, topic, partition
