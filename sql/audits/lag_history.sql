-- description: A group's lag per topic partition at the end of every bucket of a time range, in records and in time
-- param group string: consumer group id
-- param since timestamp: the first instant
-- param until timestamp = now: the last instant (bucket ends at since, since + bucket, ... up to until)
-- param bucket duration = 1h: the step (e.g. 15m, 1h, 1d)
--
-- At each instant, as lag_at computes it: the group's latest effective commit at or before it,
-- the partition's end offset as of it, and the age of the first unconsumed record where a
-- group_lag row knows its time; where no end offset is known yet, NULL (as lag_at). Instants
-- before the group's first commit on a partition are left out. A consumer that stopped shows its
-- lag growing, bucket by bucket.
WITH times AS (
  SELECT explode(sequence(:since, :until, :bucket)) AS at
),
tps AS (
  SELECT DISTINCT topic, partition FROM group_lag WHERE group_id = :group AND kind = 'commit'
),
events AS (
  SELECT topic, partition, at, 0 AS kind, committed_offset, CAST(NULL AS BIGINT) AS end_offset
  FROM group_lag WHERE group_id = :group AND kind = 'commit' AND at <= :until
  UNION ALL
  SELECT e.topic, e.partition, e.at, 1, NULL, e.end_offset
  FROM partition_end_offsets e JOIN tps USING (topic, partition)
  WHERE e.at IS NOT NULL AND e.at <= :until
  UNION ALL
  SELECT tps.topic, tps.partition, times.at, 2, NULL, NULL FROM tps CROSS JOIN times
),
asof AS (
  SELECT topic, partition, at, kind,
         last(committed_offset, true) OVER w AS committed_offset,
         last(end_offset, true) OVER w AS end_asof
  FROM events
  WINDOW w AS (PARTITION BY topic, partition ORDER BY at, kind ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
),
log_end AS (
  SELECT topic, partition, max(end_offset) AS log_end,
         min_by(struct(at, first_offset), struct(at, end_offset)) AS first
  FROM partition_end_offsets GROUP BY topic, partition
),
known AS (
  SELECT topic, partition, committed_offset, max_by(first_unconsumed_timestamp, lag_ms_method = 'record') AS record_time
  FROM group_lag WHERE first_unconsumed_timestamp IS NOT NULL
  GROUP BY topic, partition, committed_offset
),
points AS (
  SELECT a.topic, a.partition, a.at, a.committed_offset, k.record_time,
         coalesce(a.committed_offset > l.log_end, false) AS truncated,
         CASE WHEN a.end_asof IS NULL AND a.at < l.first.at AND a.committed_offset = l.first.first_offset
                THEN a.committed_offset
              WHEN a.end_asof IS NULL THEN NULL
              WHEN a.committed_offset > l.log_end THEN a.end_asof
              ELSE greatest(a.end_asof, a.committed_offset) END AS end_offset
  FROM asof a
  LEFT JOIN log_end l USING (topic, partition)
  LEFT JOIN known k USING (topic, partition, committed_offset)
  WHERE a.kind = 2 AND a.committed_offset IS NOT NULL
)
SELECT :group AS group_id, topic, partition, at, committed_offset, end_offset,
       end_offset - committed_offset AS lag_records,
       CASE WHEN truncated OR end_offset IS NULL THEN NULL
            WHEN end_offset = committed_offset THEN 0
            WHEN record_time IS NOT NULL THEN greatest(0, unix_millis(at) - unix_millis(record_time)) END AS lag_ms,
       truncated
FROM points
ORDER BY topic, partition, at
