-- description: A group's lag per topic partition at the end of every bucket of a time range, in records and in time
-- param group string: consumer group id
-- param since timestamp: the first instant
-- param until timestamp = now: the last instant (bucket ends at since, since + bucket, ... up to until)
-- param bucket duration = 1h: the step (e.g. 15m, 1h, 1d)
--
-- At each instant, what lag_at answers for it (the view lag_timeline): the group's latest
-- effective commit at or before it, the partition's end offset as of it, and the age of the first
-- unconsumed record; where no end offset is known yet, NULL. Instants before the group's first
-- commit on a partition are left out. A consumer that stopped shows its lag growing, bucket by
-- bucket.
WITH times AS (
  SELECT explode(sequence(:since, :until, :bucket)) AS at
)
SELECT l.group_id, l.topic, l.partition, times.at, l.committed_offset, l.end_offset, l.lag_records,
       lag_ms_at(l.lag_records, l.truncated, l.first_unconsumed_at, times.at) AS lag_ms,
       l.lag_ms_method, l.truncated
FROM times
JOIN lag_timeline l
  ON l.group_id = :group AND l.valid_from <= times.at AND (l.valid_until IS NULL OR times.at < l.valid_until)
ORDER BY topic, partition, at
