-- description: Generations (classic) and assignment epochs (KIP-848 consumer groups) a group went through, with members and assignments
-- param group string = null: only this group (default: every group)
--
-- classic: one row per generation (per incarnation of the group: a group tombstone starts a new
-- one), from the GroupMetadata records: started_at is the first record of the generation,
-- protocol / leader / members / assignments come from its last record.
-- consumer (KIP-848): one row per target assignment (ConsumerGroupTargetAssignmentMetadata,
-- type 6): generation is its assignment epoch, members are the members with a target
-- assignment (the latest type-7 record of each before it, tombstones removing), their client
-- from their latest ConsumerGroupMemberMetadata record; started_at is the first
-- ConsumerGroupMetadata record of that epoch (else the type-6 record); reconciled_at is when the
-- last of those members reached the epoch in a ConsumerGroupCurrentMemberAssignment record
-- (null while one has not). Topic ids are named from v4 offset commits and type-4 records.
WITH names AS (
  SELECT topic_id, max(topic_name) AS topic_name FROM (
    SELECT topic_id, topic AS topic_name FROM offsets_log WHERE topic_id IS NOT NULL AND topic IS NOT NULL
    UNION ALL
    SELECT t.topicId, t.topicName
    FROM (SELECT explode(from_json(value_json, 'STRUCT<topics: ARRAY<STRUCT<topicId: STRING, topicName: STRING>>>').topics) AS t
          FROM offsets_log WHERE record_type = ${RecordType.CONSUMER_GROUP_PARTITION_METADATA} AND NOT is_control AND NOT is_tombstone AND decode_status = 'ok')
  ) GROUP BY topic_id
),
classic_records AS (
  SELECT offsets_partition, group_id, log_offset, log_timestamp, is_tombstone, group_metadata,
         sum(CASE WHEN is_tombstone THEN 1 ELSE 0 END) OVER (
           PARTITION BY offsets_partition, group_id ORDER BY log_offset
           ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS incarnation
  FROM offsets_log
  WHERE NOT is_control AND record_type = ${RecordType.GROUP_METADATA} AND decode_status = 'ok' AND (:group IS NULL OR group_id = :group)
),
classic AS (
  SELECT offsets_partition, group_id, group_metadata.generation AS generation, min(log_timestamp) AS started_at,
         max_by(struct(log_offset, group_metadata), log_offset) AS last
  FROM classic_records WHERE NOT is_tombstone
  GROUP BY offsets_partition, group_id, incarnation, group_metadata.generation
),
classic_rows AS (
  SELECT group_id, 'classic' AS group_type, generation, started_at, CAST(NULL AS TIMESTAMP) AS reconciled_at,
         nullif(last.group_metadata.protocol_type, '') AS protocol_type, last.group_metadata.protocol AS protocol,
         last.group_metadata.leader AS leader,
         array_sort(transform(last.group_metadata.members, m -> named_struct(
           'member_id', m.member_id, 'group_instance_id', m.group_instance_id, 'client_id', m.client_id,
           'client_host', m.client_host,
           'assignment', array_sort(transform(m.assignment, a -> named_struct(
             'topic', a.topic, 'partitions', array_sort(a.partitions))))))) AS members,
         offsets_partition, last.log_offset AS log_offset
  FROM classic
),
cg AS (
  SELECT offsets_partition, group_id, member_id, log_offset, log_timestamp, record_type, is_tombstone, value_json
  FROM offsets_log
  WHERE NOT is_control AND record_type IN (${RecordType.CONSUMER_GROUP_METADATA}, ${RecordType.CONSUMER_GROUP_MEMBER_METADATA}, ${RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA}, ${RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER}, ${RecordType.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT}) AND decode_status = 'ok'
    AND (:group IS NULL OR group_id = :group)
),
targets AS (
  SELECT offsets_partition, group_id, log_offset, log_timestamp,
         CAST(get_json_object(value_json, '$.assignmentEpoch') AS INT) AS epoch
  FROM cg WHERE record_type = ${RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA} AND NOT is_tombstone
),
target_members AS (   -- each member's latest type-7 record before the target's type-6 record
  SELECT t.offsets_partition, t.group_id, t.log_offset AS target_offset, t.epoch, m.member_id,
         m.is_tombstone, m.value_json
  FROM targets t
  JOIN cg m ON m.record_type = ${RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER} AND m.offsets_partition = t.offsets_partition AND m.group_id = t.group_id
           AND m.log_offset < t.log_offset
  QUALIFY row_number() OVER (PARTITION BY t.offsets_partition, t.group_id, t.log_offset, m.member_id
                             ORDER BY m.log_offset DESC) = 1
),
member_parts AS (
  SELECT offsets_partition, group_id, target_offset, epoch, member_id,
         explode_outer(from_json(value_json,
           'STRUCT<topicPartitions: ARRAY<STRUCT<topicId: STRING, partitions: ARRAY<INT>>>>').topicPartitions) AS tp
  FROM target_members WHERE NOT is_tombstone
),
member_assignment AS (
  SELECT p.offsets_partition, p.group_id, p.target_offset, p.epoch, p.member_id,
         array_sort(collect_list(CASE WHEN p.tp IS NOT NULL THEN named_struct(
           'topic', coalesce(n.topic_name, p.tp.topicId), 'partitions', array_sort(p.tp.partitions)) END)) AS assignment
  FROM member_parts p LEFT JOIN names n ON n.topic_id = p.tp.topicId
  GROUP BY p.offsets_partition, p.group_id, p.target_offset, p.epoch, p.member_id
),
member_meta AS (   -- the member's latest metadata record before the target
  SELECT a.offsets_partition, a.group_id, a.target_offset, a.member_id, m.value_json AS meta
  FROM member_assignment a
  JOIN cg m ON m.record_type = ${RecordType.CONSUMER_GROUP_MEMBER_METADATA} AND NOT m.is_tombstone AND m.offsets_partition = a.offsets_partition
           AND m.group_id = a.group_id AND m.member_id = a.member_id AND m.log_offset < a.target_offset
  QUALIFY row_number() OVER (PARTITION BY a.offsets_partition, a.group_id, a.target_offset, a.member_id
                             ORDER BY m.log_offset DESC) = 1
),
member_reached AS (   -- when the member's current assignment first reached the epoch
  SELECT a.offsets_partition, a.group_id, a.target_offset, a.member_id, min(c.log_timestamp) AS reached_at
  FROM member_assignment a
  JOIN cg c ON c.record_type = ${RecordType.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT} AND NOT c.is_tombstone AND c.offsets_partition = a.offsets_partition
           AND c.group_id = a.group_id AND c.member_id = a.member_id AND c.log_offset > a.target_offset
           AND CAST(get_json_object(c.value_json, '$.memberEpoch') AS INT) >= a.epoch
  GROUP BY a.offsets_partition, a.group_id, a.target_offset, a.member_id
),
epoch_start AS (
  SELECT t.offsets_partition, t.group_id, t.log_offset AS target_offset, min(g.log_timestamp) AS started_at
  FROM targets t
  JOIN cg g ON g.record_type = ${RecordType.CONSUMER_GROUP_METADATA} AND NOT g.is_tombstone AND g.offsets_partition = t.offsets_partition
           AND g.group_id = t.group_id AND g.log_offset <= t.log_offset
           AND CAST(get_json_object(g.value_json, '$.epoch') AS INT) = t.epoch
  GROUP BY t.offsets_partition, t.group_id, t.log_offset
),
consumer_members AS (
  SELECT a.offsets_partition, a.group_id, a.target_offset,
         array_sort(collect_list(named_struct(
           'member_id', a.member_id, 'group_instance_id', get_json_object(mm.meta, '$.instanceId'),
           'client_id', get_json_object(mm.meta, '$.clientId'), 'client_host', get_json_object(mm.meta, '$.clientHost'),
           'assignment', a.assignment))) AS members,
         max(get_json_object(mm.meta, '$.serverAssignor')) AS assignor,
         CASE WHEN count(r.reached_at) = count(*) THEN max(r.reached_at) END AS reconciled_at
  FROM member_assignment a
  LEFT JOIN member_meta mm USING (offsets_partition, group_id, target_offset, member_id)
  LEFT JOIN member_reached r USING (offsets_partition, group_id, target_offset, member_id)
  GROUP BY a.offsets_partition, a.group_id, a.target_offset
),
consumer_rows AS (
  SELECT t.group_id, 'consumer' AS group_type, t.epoch AS generation,
         coalesce(s.started_at, t.log_timestamp) AS started_at, m.reconciled_at,
         'consumer' AS protocol_type, m.assignor AS protocol, CAST(NULL AS STRING) AS leader,
         coalesce(m.members, array()) AS members, t.offsets_partition, t.log_offset
  FROM targets t
  LEFT JOIN consumer_members m ON m.offsets_partition = t.offsets_partition AND m.group_id = t.group_id
                               AND m.target_offset = t.log_offset
  LEFT JOIN epoch_start s ON s.offsets_partition = t.offsets_partition AND s.group_id = t.group_id
                          AND s.target_offset = t.log_offset
)
SELECT * FROM classic_rows
UNION ALL
SELECT * FROM consumer_rows
ORDER BY group_id, log_offset
