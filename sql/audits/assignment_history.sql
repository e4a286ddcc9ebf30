-- description: A group's assignments generation by generation: spread, moves, and what Kafka's assignors would have done
-- param group string: the group
--
-- From assignment_audit: one row per generation (classic) or target assignment epoch (KIP-848).
-- per_member: member (instance id, else client id and the member id's last 4 characters) and
-- its partition count. moved / min_moves:
-- partitions whose owner changed since the previous generation, and the fewest a balanced
-- sticky assignment could have moved. verdict: matches / equivalent (other partitions, but the
-- same counts over the members, as many assigned and as many moved: another client's
-- tie-breaking) / differs (the leader's assignment is not what Kafka's Java assignor of that name
-- computes from the same subscriptions: a client bug or a custom assignor) / custom /
-- not_recomputed. what_if_imbalance / what_if_moved: the imbalance and the moves each of
-- Kafka's assignors would have given (the sticky ones starting from the previous actual
-- assignment; - for the first generation; computed here by assignor_what_if, as the table
-- leaves what_if null: see lib.assignors.audit.what_if_of_row).
WITH history AS (
  SELECT *, coalesce(what_if, assignor_what_if(
           struct(group_type, group_id, generation, assignor, members, topics, moved, reference),
           lag(members) OVER (PARTITION BY group_id ORDER BY offsets_partition, log_offset))) AS what_ifs
  FROM assignment_audit
  WHERE group_id = :group
)
SELECT group_id, group_type, generation, at, assignor, member_count,
       array_join(transform(members, m -> concat(
         coalesce(m.group_instance_id, concat(m.client_id, '..', right(m.member_id, 4))), '=', m.partition_count)), ', ') AS per_member,
       partitions, imbalance, moved, min_moves,
       aggregate(unassigned, 0, (acc, t) -> acc + size(t.partitions)) AS unassigned,
       aggregate(assigned_twice, 0, (acc, t) -> acc + size(t.partitions)) AS assigned_twice,
       verdict, array_join(differing_members, ', ') AS differing_members,
       array_join(transform(what_ifs, w -> concat(w.assignor, '=', coalesce(CAST(w.imbalance AS STRING), '-'))), ' ') AS what_if_imbalance,
       array_join(transform(what_ifs, w -> concat(w.assignor, '=', coalesce(CAST(w.moved AS STRING), '-'))), ' ') AS what_if_moved
FROM history
ORDER BY offsets_partition, log_offset
