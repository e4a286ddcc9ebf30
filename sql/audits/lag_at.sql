-- description: A group's lag on each topic partition it committed, in records and in time, at an instant
-- param group string: consumer group id
-- param at timestamp = now: the instant
--
-- committed_offset: the group's latest effective commit at or before `at` (group_lag kind
-- commit; an offset deleted afterwards still shows). end_offset: the partition's end offset as
-- of `at` (the last partition_end_offsets row at or before it), never below the committed offset
-- unless the log ends before it (truncated: the topic was truncated or recreated). Before the
-- partition's first end-offset row the end offset is unknown (NULL, and so are the lags), except
-- for a commit of the partition's first known offset: the log cannot have ended past it (lag 0).
-- lag_ms: `at` minus the time of the first record the group had not consumed, taken from a
-- group_lag row with the same committed offset (its record, or its interpolated estimate); null
-- when none knows it. committed_at: when that commit took effect; end_offset_at: the time of the
-- end-offset row.
WITH commits AS (
  SELECT topic, partition, committed_offset, at AS committed_at, offsets_partition
  FROM group_lag
  WHERE group_id = :group AND kind = 'commit' AND at <= :at
  QUALIFY row_number() OVER (PARTITION BY topic, partition ORDER BY at DESC, log_offset DESC) = 1
),
ends AS (
  SELECT c.topic, c.partition,
         max_by(struct(e.end_offset AS end_offset, e.at AS at), struct(e.at, e.end_offset)) AS e
  FROM commits c
  JOIN partition_end_offsets e ON e.topic = c.topic AND e.partition = c.partition AND e.at <= :at
  GROUP BY c.topic, c.partition
),
log_end AS (
  SELECT topic, partition, max(end_offset) AS log_end,
         min_by(struct(at, first_offset), struct(at, end_offset)) AS first
  FROM partition_end_offsets GROUP BY topic, partition
),
known AS (
  SELECT topic, partition, committed_offset,
         max_by(first_unconsumed_timestamp, lag_ms_method = 'record') AS record_time,
         max_by(lag_ms_method, lag_ms_method = 'record') AS method
  FROM group_lag WHERE first_unconsumed_timestamp IS NOT NULL
  GROUP BY topic, partition, committed_offset
),
lag AS (
  SELECT c.topic, c.partition, c.committed_offset, c.committed_at, n.e.at AS end_offset_at,
         coalesce(c.committed_offset > l.log_end, false) AS truncated,
         CASE WHEN n.e IS NULL AND :at < l.first.at AND c.committed_offset = l.first.first_offset
                THEN c.committed_offset
              WHEN n.e IS NULL THEN NULL
              WHEN c.committed_offset > l.log_end THEN n.e.end_offset
              ELSE greatest(n.e.end_offset, c.committed_offset) END AS end_offset,
         k.record_time, k.method, c.offsets_partition
  FROM commits c
  LEFT JOIN ends n USING (topic, partition)
  LEFT JOIN log_end l USING (topic, partition)
  LEFT JOIN known k USING (topic, partition, committed_offset)
)
SELECT :group AS group_id, topic, partition, committed_offset, end_offset, end_offset - committed_offset AS lag_records,
       CASE WHEN truncated OR end_offset IS NULL THEN NULL
            WHEN end_offset = committed_offset THEN 0
            WHEN record_time IS NOT NULL THEN greatest(0, unix_millis(:at) - unix_millis(record_time)) END AS lag_ms,
       CASE WHEN truncated OR end_offset IS NULL THEN NULL
            WHEN end_offset = committed_offset THEN 'caught_up' ELSE method END AS lag_ms_method,
       committed_at, end_offset_at, truncated, offsets_partition
FROM lag
ORDER BY topic, partition
