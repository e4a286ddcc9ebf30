-- description: Which group members owned a topic partition at a time (classic and KIP-848 consumer groups)
-- param topic string: the topic
-- param partition int = null: only this partition (default: every partition of the topic)
-- param at timestamp = now: the instant (records with log_timestamp <= at are considered)
-- param group string = null: only this group (default: every group)
--
-- classic: the members' assignments in the group's latest GroupMetadata record at or before
-- `at` (none if that record is a tombstone, or if consumer-group records came after it).
-- consumer (KIP-848): each member's latest ConsumerGroupCurrentMemberAssignment record at or
-- before `at` (a tombstone means the member owns nothing); partitions pending revocation are
-- still owned (pending_revocation true); client from the member's latest metadata record.
-- since is the time of the record the ownership is read from. Streams and share groups
-- (tasks, share partitions) are not covered.
WITH log AS (
  SELECT * FROM offsets_log
  WHERE NOT is_control AND decode_status = 'ok' AND record_type BETWEEN ${RecordType.GROUP_METADATA} AND ${RecordType.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT} AND log_timestamp <= :at
    AND (:group IS NULL OR group_id = :group)
),
names AS (
  SELECT topic_id, max(topic_name) AS topic_name FROM (
    SELECT topic_id, topic AS topic_name FROM offsets_log WHERE topic_id IS NOT NULL AND topic IS NOT NULL
    UNION ALL
    SELECT t.topicId, t.topicName
    FROM (SELECT explode(from_json(value_json, 'STRUCT<topics: ARRAY<STRUCT<topicId: STRING, topicName: STRING>>>').topics) AS t
          FROM offsets_log WHERE record_type = ${RecordType.CONSUMER_GROUP_PARTITION_METADATA} AND NOT is_control AND NOT is_tombstone AND decode_status = 'ok')
  ) GROUP BY topic_id
),
last_classic AS (
  SELECT offsets_partition, group_id,
         max_by(struct(log_offset, log_timestamp, is_tombstone, group_metadata), log_offset) AS r
  FROM log WHERE record_type = ${RecordType.GROUP_METADATA} GROUP BY offsets_partition, group_id
),
last_modern AS (
  SELECT offsets_partition, group_id, max(log_offset) AS modern_offset
  FROM log WHERE record_type BETWEEN ${RecordType.CONSUMER_GROUP_METADATA} AND ${RecordType.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT} GROUP BY offsets_partition, group_id
),
classic_owners AS (
  SELECT c.group_id, 'classic' AS group_type, m.member_id, m.group_instance_id, m.client_id, m.client_host,
         c.r.group_metadata.generation AS generation, a.topic, p AS partition, false AS pending_revocation,
         c.r.log_timestamp AS since, c.offsets_partition, c.r.log_offset AS log_offset
  FROM last_classic c LEFT JOIN last_modern lm USING (offsets_partition, group_id)
  LATERAL VIEW explode(c.r.group_metadata.members) mv AS m
  LATERAL VIEW explode(m.assignment) av AS a
  LATERAL VIEW explode(a.partitions) pv AS p
  WHERE NOT c.r.is_tombstone AND (lm.modern_offset IS NULL OR lm.modern_offset < c.r.log_offset)
),
last_current AS (
  SELECT offsets_partition, group_id, member_id,
         max_by(struct(log_offset, log_timestamp, is_tombstone, value_json), log_offset) AS r
  FROM log WHERE record_type = ${RecordType.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT} GROUP BY offsets_partition, group_id, member_id
),
last_meta AS (
  SELECT offsets_partition, group_id, member_id, max_by(value_json, log_offset) AS meta
  FROM log WHERE record_type = ${RecordType.CONSUMER_GROUP_MEMBER_METADATA} AND NOT is_tombstone GROUP BY offsets_partition, group_id, member_id
),
current AS (
  SELECT c.offsets_partition, c.group_id, c.member_id, c.r.log_offset AS log_offset, c.r.log_timestamp AS since,
         CAST(get_json_object(c.r.value_json, '$.memberEpoch') AS INT) AS member_epoch,
         from_json(c.r.value_json, 'STRUCT<assignedPartitions: ARRAY<STRUCT<topicId: STRING, partitions: ARRAY<INT>>>,
           partitionsPendingRevocation: ARRAY<STRUCT<topicId: STRING, partitions: ARRAY<INT>>>>') AS v
  FROM last_current c LEFT JOIN last_classic lc USING (offsets_partition, group_id)
  WHERE NOT c.r.is_tombstone AND (lc.r IS NULL OR lc.r.log_offset < c.r.log_offset)
),
consumer_parts AS (
  SELECT offsets_partition, group_id, member_id, log_offset, since, member_epoch, false AS pending_revocation,
         explode(v.assignedPartitions) AS tp
  FROM current
  UNION ALL
  SELECT offsets_partition, group_id, member_id, log_offset, since, member_epoch, true,
         explode(v.partitionsPendingRevocation)
  FROM current
),
consumer_owners AS (
  SELECT c.group_id, 'consumer' AS group_type, c.member_id, get_json_object(m.meta, '$.instanceId') AS group_instance_id,
         get_json_object(m.meta, '$.clientId') AS client_id, get_json_object(m.meta, '$.clientHost') AS client_host,
         c.member_epoch AS generation, coalesce(n.topic_name, c.tp.topicId) AS topic, p AS partition,
         c.pending_revocation, c.since, c.offsets_partition, c.log_offset
  FROM consumer_parts c
  LEFT JOIN names n ON n.topic_id = c.tp.topicId
  LEFT JOIN last_meta m USING (offsets_partition, group_id, member_id)
  LATERAL VIEW explode(c.tp.partitions) pv AS p
)
SELECT topic, partition, group_id, group_type, member_id, group_instance_id, client_id, client_host, generation,
       pending_revocation, since, offsets_partition, log_offset
FROM (SELECT * FROM classic_owners UNION ALL SELECT * FROM consumer_owners)
WHERE topic = :topic AND (:partition IS NULL OR partition = :partition)
ORDER BY topic, partition, group_id, member_id
