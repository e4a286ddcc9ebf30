-- description: Groups whose lag on a topic partition has stayed at or above a threshold for at least a given time, as of an instant
-- param now timestamp = now: the instant
-- param min_records int = null: lag threshold in records (default: any lag above 0)
-- param min_lag duration = null: lag threshold in time (age of the first unconsumed record)
-- param for_at_least duration = 1h: how long the lag must have stayed at or above the thresholds
--
-- The lag is evaluated at every change of either side (each effective commit of the group, each
-- end-offset row of the partition) and at `now`, as lag_at does; an evaluation whose end offset is
-- not known yet (lag_at's NULL) is neither behind nor caught up. A partition is listed when every
-- evaluation since `behind_since` (the first of the current unbroken stretch at or above the
-- thresholds) is at or above them and `now - behind_since >= for_at_least`. Both thresholds
-- given: both must hold. lag_records / lag_ms: at `now`; max_lag_records: the largest in the stretch.
WITH tps AS (
  SELECT DISTINCT group_id, topic, partition FROM group_lag WHERE kind = 'commit' AND at <= :now
),
events AS (
  SELECT group_id, topic, partition, at, 0 AS kind, committed_offset, CAST(NULL AS BIGINT) AS end_offset
  FROM group_lag WHERE kind = 'commit' AND at <= :now
  UNION ALL
  SELECT t.group_id, e.topic, e.partition, e.at, 1, NULL, e.end_offset
  FROM partition_end_offsets e JOIN tps t USING (topic, partition)
  WHERE e.at IS NOT NULL AND e.at <= :now
  UNION ALL
  SELECT group_id, topic, partition, :now, 2, NULL, NULL FROM tps
),
asof AS (
  SELECT group_id, topic, partition, at, kind,
         last(committed_offset, true) OVER w AS committed_offset,
         last(end_offset, true) OVER w AS end_asof
  FROM events
  WINDOW w AS (PARTITION BY group_id, topic, partition ORDER BY at, kind ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
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
  SELECT a.group_id, a.topic, a.partition, a.at, a.kind, a.committed_offset, k.record_time,
         coalesce(a.committed_offset > l.log_end, false) AS truncated,
         CASE WHEN a.end_asof IS NULL AND a.at < l.first.at AND a.committed_offset = l.first.first_offset
                THEN a.committed_offset
              WHEN a.end_asof IS NULL THEN NULL
              WHEN a.committed_offset > l.log_end THEN a.end_asof
              ELSE greatest(a.end_asof, a.committed_offset) END AS end_offset
  FROM asof a
  LEFT JOIN log_end l USING (topic, partition)
  LEFT JOIN known k USING (topic, partition, committed_offset)
  WHERE a.committed_offset IS NOT NULL
),
judged AS (
  SELECT group_id, topic, partition, at, kind, committed_offset,
         end_offset - committed_offset AS lag_records,
         CASE WHEN truncated THEN NULL
              WHEN end_offset = committed_offset THEN 0
              WHEN record_time IS NOT NULL THEN greatest(0, unix_millis(at) - unix_millis(record_time)) END AS lag_ms
  FROM points
  WHERE end_offset IS NOT NULL
),
flagged AS (
  SELECT *,
         lag_records > 0
           AND (:min_records IS NULL OR lag_records >= :min_records)
           AND (:min_lag IS NULL OR lag_ms >= unix_millis(timestamp_millis(0) + :min_lag)) AS behind
  FROM judged
),
stretch AS (
  SELECT group_id, topic, partition,
         max(CASE WHEN NOT coalesce(behind, false) THEN at END) AS last_ok,
         max_by(struct(lag_records, lag_ms, behind, committed_offset), struct(at, kind)) AS now_row
  FROM flagged GROUP BY group_id, topic, partition
),
since AS (
  SELECT f.group_id, f.topic, f.partition, min(f.at) AS behind_since, max(f.lag_records) AS max_lag_records
  FROM flagged f JOIN stretch s USING (group_id, topic, partition)
  WHERE f.behind AND (s.last_ok IS NULL OR f.at > s.last_ok)
  GROUP BY f.group_id, f.topic, f.partition
)
SELECT s.group_id, s.topic, s.partition, b.behind_since, :now - b.behind_since AS behind_for,
       s.now_row.committed_offset AS committed_offset, s.now_row.lag_records AS lag_records,
       s.now_row.lag_ms AS lag_ms, b.max_lag_records
FROM stretch s JOIN since b USING (group_id, topic, partition)
WHERE s.now_row.behind AND b.behind_since <= :now - :for_at_least
ORDER BY behind_for DESC, group_id, topic, partition
