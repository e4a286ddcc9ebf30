-- description: Groups whose lag on a topic partition has stayed at or above a threshold for at least a given time, as of an instant
-- param now timestamp = now: the instant
-- param min_records int = null: lag threshold in records (default: any lag above 0)
-- param min_lag duration = null: lag threshold in time (age of the first unconsumed record)
-- param for_at_least duration = 1h: how long the lag must have stayed at or above the thresholds
--
-- The lag is evaluated at every change of either side (each effective commit of the group, each
-- end-offset row of the partition: the start of each stretch of the view lag_timeline) and at
-- `now`, as lag_at answers; an evaluation whose end offset is not known yet (lag_at's NULL) is
-- neither behind nor caught up. A partition is listed when every evaluation since
-- `behind_since` (the first of the current unbroken stretch at or above the thresholds) is at
-- or above them and `now - behind_since >= for_at_least`. Both thresholds given: both must
-- hold. lag_records / lag_ms: at `now`; max_lag_records: the largest in the stretch.
WITH evaluations AS (
  SELECT group_id, topic, partition, valid_from AS at, 0 AS kind, committed_offset, lag_records,
         lag_ms_at(lag_records, truncated, first_unconsumed_at, valid_from) AS lag_ms
  FROM lag_timeline
  WHERE valid_from <= :now AND lag_records IS NOT NULL
  UNION ALL
  SELECT group_id, topic, partition, :now, 1, committed_offset, lag_records,
         lag_ms_at(lag_records, truncated, first_unconsumed_at, :now)
  FROM lag_timeline
  WHERE valid_from <= :now AND (valid_until IS NULL OR :now < valid_until) AND lag_records IS NOT NULL
),
flagged AS (
  SELECT *,
         lag_records > 0
           AND (:min_records IS NULL OR lag_records >= :min_records)
           AND (:min_lag IS NULL OR lag_ms >= unix_millis(timestamp_millis(0) + :min_lag)) AS behind
  FROM evaluations
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
