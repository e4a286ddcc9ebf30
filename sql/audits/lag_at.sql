-- description: A group's lag on each topic partition it committed, in records and in time, at an instant
-- param group string: consumer group id
-- param at timestamp = now: the instant
--
-- From the view lag_timeline (lib.spark.lag_rules, the rules group_lag and the report use):
-- committed_offset: the group's latest effective commit at or before `at` (an offset deleted
-- afterwards still shows). end_offset: the partition's end offset as of `at` (the last
-- partition_end_offsets row at or before it), never below the committed offset unless the log
-- ends before it (truncated: the topic was truncated or recreated; the lags are then NULL).
-- Before the partition's first end-offset row the end offset is unknown: NULL, and so are the
-- lags, with lag_ms_method 'end_offset_unknown' (except for a commit of the partition's first
-- known offset: the log cannot have ended past it, lag 0).
-- lag_ms: `at` minus the time of the first record the group had not consumed (its own
-- timestamp, method 'record'; else interpolated between end-offset rows, 'interpolated'); 0
-- when caught up; NULL when unknown. committed_at: when that commit took effect;
-- end_offset_at: the time of the end-offset row.
SELECT group_id, topic, partition, committed_offset, end_offset, lag_records,
       lag_ms_at(lag_records, truncated, first_unconsumed_at, :at) AS lag_ms,
       lag_ms_method, committed_at, end_offset_at, truncated, offsets_partition
FROM lag_timeline
WHERE group_id = :group AND valid_from <= :at AND (valid_until IS NULL OR :at < valid_until)
ORDER BY topic, partition
