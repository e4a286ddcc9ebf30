-- description: Groups whose current assignment is unbalanced, leaves partitions out, assigns one twice, or is not what their assignor computes
-- param min_imbalance int = 2: list a group when its busiest member has at least this many more partitions than its idlest
--
-- Each group's latest generation in assignment_audit, for the groups that have members now
-- (consumer_groups; a classic group's current generation must be the audited one). A group is
-- listed when imbalance >=
-- min_imbalance, or a subscribed partition is unassigned, or one is assigned twice, or its
-- verdict is differs. best_assignor: the Kafka assignor with the smallest imbalance on the same
-- subscriptions (ties: fewest moves, then name; assignor_what_if computes them for the groups
-- listed, as the table leaves what_if null).
WITH audit AS (
  SELECT *, lag(members) OVER (PARTITION BY group_id ORDER BY offsets_partition, log_offset) AS previous_members
  FROM assignment_audit
),
latest AS (
  SELECT a.* FROM audit a
  JOIN consumer_groups g ON g.group_id = a.group_id AND g.offsets_partition = a.offsets_partition
  WHERE size(g.members) > 0 AND (a.group_type <> 'classic' OR g.generation = a.generation)
  QUALIFY row_number() OVER (PARTITION BY a.group_id ORDER BY a.log_offset DESC) = 1
),
ranked AS (
  SELECT *, element_at(array_sort(coalesce(what_if, assignor_what_if(
           struct(group_type, group_id, generation, assignor, members, topics, moved, reference), previous_members)),
         (a, b) -> CASE
           WHEN a.imbalance <> b.imbalance THEN a.imbalance - b.imbalance
           WHEN coalesce(a.moved, 0) <> coalesce(b.moved, 0) THEN coalesce(a.moved, 0) - coalesce(b.moved, 0)
           WHEN a.assignor < b.assignor THEN -1 WHEN a.assignor > b.assignor THEN 1 ELSE 0 END), 1) AS best
  FROM latest
)
SELECT group_id, group_type, generation, at, assignor, member_count, partitions, min_per_member, max_per_member,
       imbalance,
       aggregate(unassigned, 0, (acc, t) -> acc + size(t.partitions)) AS unassigned_partitions,
       aggregate(assigned_twice, 0, (acc, t) -> acc + size(t.partitions)) AS assigned_twice_partitions,
       verdict,
       best.assignor AS best_assignor, best.imbalance AS best_imbalance,
       CASE WHEN verdict = 'differs' THEN 'assignment differs from the reference ' || assignor
            WHEN size(assigned_twice) > 0 THEN 'partitions assigned twice'
            WHEN size(unassigned) > 0 THEN 'partitions unassigned'
            ELSE 'imbalance ' || imbalance END AS reason
FROM ranked
WHERE imbalance >= :min_imbalance OR size(unassigned) > 0 OR size(assigned_twice) > 0 OR verdict = 'differs'
ORDER BY imbalance DESC, group_id
