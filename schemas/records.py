"""Every record of the __consumer_offsets topic, as versioned schemas (spec sections 1.8, 2, 3).

A coordinator record is key = int16 type + key struct (never flexible, one layout) and
value = int16 version + value struct. RECORD_TYPES maps the type id to (name, key, value).
"""

from __future__ import annotations

from enum import IntEnum

from schemas.dsl import EMPTY, F, M

# --- control records (transaction markers), spec 1.8 ---------------------------------------
CONTROL_TYPES = {
    0: "ABORT",
    1: "COMMIT",
    2: "LEADER_CHANGE",
    3: "SNAPSHOT_HEADER",
    4: "SNAPSHOT_FOOTER",
    5: "KRAFT_VERSION",
    6: "KRAFT_VOTERS",
}

# --- keys -----------------------------------------------------------------------------------
OFFSET_COMMIT_KEY = M(
    "OffsetCommitKey", "0", "none", F("group", "string"), F("topic", "string"), F("partition", "int32")
)
GROUP_METADATA_KEY = M("GroupMetadataKey", "0", "none", F("group", "string"))
GROUP_ID_KEY = (F("GroupId", "string"),)
MEMBER_KEY = (F("GroupId", "string"), F("MemberId", "string"))


def _group_key(name: str):
    return M(name, "0", "none", *GROUP_ID_KEY)


def _member_key(name: str):
    return M(name, "0", "none", *MEMBER_KEY)


# --- offset commits (types 0 and 1), spec 2.4 ------------------------------------------------
LEGACY_OFFSET_COMMIT_VALUE = M(
    "LegacyOffsetCommitValue", "0", "none", F("offset", "int64"), F("metadata", "string"), F("commitTimestamp", "int64")
)

OFFSET_COMMIT_VALUE = M(
    "OffsetCommitValue",
    "0-4",
    "4+",
    F("offset", "int64", "0+"),
    F("leaderEpoch", "int32", "3+", default=-1),
    F("metadata", "string", "0+"),
    F("commitTimestamp", "int64", "0+"),
    F("expireTimestamp", "int64", "1", default=-1),
    F("topicId", "uuid", "4+", tag=0),
)

# --- classic groups (type 2), spec 2.5 ------------------------------------------------------
MEMBER_METADATA = (
    F("memberId", "string", "0+"),
    F("groupInstanceId", "string", "3+", nullable="3+", default=None),
    F("clientId", "string", "0+"),
    F("clientHost", "string", "0+"),
    F("rebalanceTimeout", "int32", "1+", default=-1),
    F("sessionTimeout", "int32", "0+"),
    F("subscription", "bytes", "0+"),
    F("assignment", "bytes", "0+"),
)
GROUP_METADATA_VALUE = M(
    "GroupMetadataValue",
    "0-4",
    "4+",
    F("protocolType", "string", "0+"),
    F("generation", "int32", "0+"),
    F("protocol", "string", "0+", nullable="0+"),
    F("leader", "string", "0+", nullable="0+"),
    F("currentStateTimestamp", "int64", "2+", default=-1),
    F("members", "[]MemberMetadata", "0+", fields=MEMBER_METADATA),
)

# --- consumer protocol bytes (spec 3) -------------------------------------------------------
TOPIC_PARTITION = (F("topic", "string"), F("partitions", "[]int32"))
CONSUMER_PROTOCOL_SUBSCRIPTION = M(
    "ConsumerProtocolSubscription",
    "0-3",
    "none",
    F("topics", "[]string", "0+"),
    F("userData", "bytes", "0+", nullable="0+", default=None),
    F("ownedPartitions", "[]TopicPartition", "1+", fields=TOPIC_PARTITION),
    F("generationId", "int32", "2+", default=-1),
    F("rackId", "string", "3+", nullable="3+", default=None),
)
CONSUMER_PROTOCOL_ASSIGNMENT = M(
    "ConsumerProtocolAssignment",
    "0-3",
    "none",
    F("assignedPartitions", "[]TopicPartition", "0+", fields=TOPIC_PARTITION),
    F("userData", "bytes", "0+", nullable="0+", default=None),
)

# --- KIP-848 consumer groups (types 3-8, 16), spec 2.6 ----------------------------------------
CONSUMER_GROUP_METADATA_VALUE = M(
    "ConsumerGroupMetadataValue",
    "0",
    "0+",
    F("Epoch", "int32"),
    F("MetadataHash", "int64", "0+", tag=0, default=0),
)
CONSUMER_GROUP_PARTITION_METADATA_VALUE = M(
    "ConsumerGroupPartitionMetadataValue",
    "0",
    "0+",
    F(
        "Topics",
        "[]TopicMetadata",
        fields=(
            F("TopicId", "uuid"),
            F("TopicName", "string"),
            F("NumPartitions", "int32"),
            F("PartitionMetadata", "[]PartitionMetadata", fields=(F("Partition", "int32"), F("Racks", "[]string"))),
        ),
    ),
)
CLASSIC_MEMBER_METADATA = (
    F("SessionTimeoutMs", "int32"),
    F("SupportedProtocols", "[]ClassicProtocol", fields=(F("Name", "string"), F("Metadata", "bytes"))),
)
CONSUMER_GROUP_MEMBER_METADATA_VALUE = M(
    "ConsumerGroupMemberMetadataValue",
    "0",
    "0+",
    F("InstanceId", "string", nullable="0+", default=None),
    F("RackId", "string", nullable="0+", default=None),
    F("ClientId", "string"),
    F("ClientHost", "string"),
    F("SubscribedTopicNames", "[]string"),
    F("SubscribedTopicRegex", "string", nullable="0+", default=None),
    F("RebalanceTimeoutMs", "int32", default=-1),
    F("ServerAssignor", "string", nullable="0+", default=None),
    F(
        "ClassicMemberMetadata",
        "ClassicMemberMetadata",
        nullable="0+",
        tag=0,
        default=EMPTY,
        fields=CLASSIC_MEMBER_METADATA,
    ),
)
ASSIGNMENT_METADATA_VALUE_FIELDS = (
    F("AssignmentEpoch", "int32"),
    F("AssignmentTimestamp", "int64", "0+", tag=0, default=0),
)
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE = M(
    "ConsumerGroupTargetAssignmentMetadataValue", "0", "0+", *ASSIGNMENT_METADATA_VALUE_FIELDS
)
TOPIC_ID_PARTITIONS = (F("TopicId", "uuid"), F("Partitions", "[]int32"))
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE = M(
    "ConsumerGroupTargetAssignmentMemberValue",
    "0",
    "0+",
    F("TopicPartitions", "[]TopicPartition", fields=TOPIC_ID_PARTITIONS),
)
TOPIC_ID_PARTITIONS_EPOCHS = TOPIC_ID_PARTITIONS + (
    F("AssignmentEpochs", "[]int32", "0+", nullable="0+", tag=0, default=EMPTY),
)
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE = M(
    "ConsumerGroupCurrentMemberAssignmentValue",
    "0",
    "0+",
    F("MemberEpoch", "int32"),
    F("PreviousMemberEpoch", "int32"),
    F("State", "int8"),
    F("AssignedPartitions", "[]TopicPartitions", fields=TOPIC_ID_PARTITIONS_EPOCHS),
    F("PartitionsPendingRevocation", "[]TopicPartitions", fields=TOPIC_ID_PARTITIONS_EPOCHS),
)
CONSUMER_GROUP_REGULAR_EXPRESSION_KEY = M(
    "ConsumerGroupRegularExpressionKey", "0", "none", F("GroupId", "string"), F("RegularExpression", "string")
)
CONSUMER_GROUP_REGULAR_EXPRESSION_VALUE = M(
    "ConsumerGroupRegularExpressionValue",
    "0",
    "0+",
    F("Topics", "[]string"),
    F("Version", "int64"),
    F("Timestamp", "int64"),
)

# --- share groups (types 9-15), spec 2.7 ------------------------------------------------------
SHARE_GROUP_PARTITION_METADATA_VALUE = M(
    "ShareGroupPartitionMetadataValue", "0", "0+", *CONSUMER_GROUP_PARTITION_METADATA_VALUE.fields
)
SHARE_GROUP_MEMBER_METADATA_VALUE = M(
    "ShareGroupMemberMetadataValue",
    "0",
    "0+",
    F("RackId", "string", nullable="0+", default=None),
    F("ClientId", "string"),
    F("ClientHost", "string"),
    F("SubscribedTopicNames", "[]string"),
)
SHARE_GROUP_METADATA_VALUE = M("ShareGroupMetadataValue", "0", "0+", F("Epoch", "int32"), F("MetadataHash", "int64"))
SHARE_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE = M(
    "ShareGroupTargetAssignmentMetadataValue", "0", "0+", *ASSIGNMENT_METADATA_VALUE_FIELDS
)
SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE = M(
    "ShareGroupTargetAssignmentMemberValue",
    "0",
    "0+",
    F("TopicPartitions", "[]TopicPartition", fields=TOPIC_ID_PARTITIONS),
)
SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE = M(
    "ShareGroupCurrentMemberAssignmentValue",
    "0",
    "0+",
    F("MemberEpoch", "int32"),
    F("PreviousMemberEpoch", "int32"),
    F("State", "int8"),
    F("AssignedPartitions", "[]TopicPartitions", fields=TOPIC_ID_PARTITIONS),
)
TOPIC_PARTITIONS_INFO = (F("TopicId", "uuid"), F("TopicName", "string"), F("Partitions", "[]int32"))
SHARE_GROUP_STATE_PARTITION_METADATA_VALUE = M(
    "ShareGroupStatePartitionMetadataValue",
    "0",
    "0+",
    F("InitializingTopics", "[]TopicPartitionsInfo", fields=TOPIC_PARTITIONS_INFO),
    F("InitializedTopics", "[]TopicPartitionsInfo", fields=TOPIC_PARTITIONS_INFO),
    F("DeletingTopics", "[]TopicInfo", fields=(F("TopicId", "uuid"), F("TopicName", "string"))),
)

# --- streams groups (types 17, 19-23), spec 2.8 -----------------------------------------------
KEY_VALUE = (F("Key", "string"), F("Value", "string"))
STREAMS_GROUP_METADATA_VALUE = M(
    "StreamsGroupMetadataValue",
    "0",
    "0+",
    F("Epoch", "int32"),
    F("MetadataHash", "int64"),
    F("ValidatedTopologyEpoch", "int32", "0+", tag=0, default=-1),
    F("LastAssignmentConfigs", "[]LastAssignmentConfig", "0+", nullable="0+", tag=1, default=EMPTY, fields=KEY_VALUE),
    F("StoredDescriptionTopologyEpoch", "int32", "0+", tag=2, default=-1),
    F("FailedDescriptionTopologyEpoch", "int32", "0+", tag=3, default=-1),
)
STREAMS_GROUP_MEMBER_METADATA_VALUE = M(
    "StreamsGroupMemberMetadataValue",
    "0",
    "0+",
    F("InstanceId", "string", nullable="0+", default=None),
    F("RackId", "string", nullable="0+", default=None),
    F("ClientId", "string"),
    F("ClientHost", "string"),
    F("RebalanceTimeoutMs", "int32", default=-1),
    F("TopologyEpoch", "int32"),
    F("ProcessId", "string"),
    F("UserEndpoint", "Endpoint", nullable="0+", default=None, fields=(F("Host", "string"), F("Port", "uint16"))),
    F("ClientTags", "[]KeyValue", fields=KEY_VALUE),
)
STREAMS_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE = M(
    "StreamsGroupTargetAssignmentMetadataValue", "0", "0+", *ASSIGNMENT_METADATA_VALUE_FIELDS
)
TASK_IDS = (F("SubtopologyId", "string"), F("Partitions", "[]int32"))
STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE = M(
    "StreamsGroupTargetAssignmentMemberValue",
    "0",
    "0+",
    F("ActiveTasks", "[]TaskIds", fields=TASK_IDS),
    F("StandbyTasks", "[]TaskIds", fields=TASK_IDS),
    F("WarmupTasks", "[]TaskIds", fields=TASK_IDS),
)
TASK_IDS_EPOCHS = TASK_IDS + (F("AssignmentEpochs", "[]int32", "0+", nullable="0+", tag=0, default=EMPTY),)
STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE = M(
    "StreamsGroupCurrentMemberAssignmentValue",
    "0",
    "0+",
    F("MemberEpoch", "int32"),
    F("PreviousMemberEpoch", "int32"),
    F("State", "int8"),
    *(
        F(name, "[]TaskIds", fields=TASK_IDS_EPOCHS)
        for name in (
            "ActiveTasks",
            "StandbyTasks",
            "WarmupTasks",
            "ActiveTasksPendingRevocation",
            "StandbyTasksPendingRevocation",
            "WarmupTasksPendingRevocation",
        )
    ),
)
TOPIC_INFO = (
    F("Name", "string"),
    F("Partitions", "int32"),
    F("ReplicationFactor", "int16"),
    F("TopicConfigs", "[]TopicConfig", fields=KEY_VALUE),
)
STREAMS_GROUP_TOPOLOGY_VALUE = M(
    "StreamsGroupTopologyValue",
    "0",
    "0+",
    F("Epoch", "int32"),
    F(
        "Subtopologies",
        "[]Subtopology",
        fields=(
            F("SubtopologyId", "string"),
            F("SourceTopics", "[]string"),
            F("SourceTopicRegex", "[]string"),
            F("StateChangelogTopics", "[]TopicInfo", fields=TOPIC_INFO),
            F("RepartitionSinkTopics", "[]string"),
            F("RepartitionSourceTopics", "[]TopicInfo", fields=TOPIC_INFO),
            F(
                "CopartitionGroups",
                "[]CopartitionGroup",
                fields=(
                    F("SourceTopics", "[]int16"),
                    F("SourceTopicRegex", "[]int16"),
                    F("RepartitionSourceTopics", "[]int16"),
                ),
            ),
        ),
    ),
)


# --- the type table (generated CoordinatorRecordType in Kafka 4.x), spec 2.3 --------------------
# type id -> (name, key schema, value schema, group family)
class RecordType(IntEnum):
    """The coordinator record types (the key's type id), named as Kafka's
    CoordinatorRecordType; RECORD_TYPES below maps each to its schemas."""

    LEGACY_OFFSET_COMMIT = 0
    OFFSET_COMMIT = 1
    GROUP_METADATA = 2
    CONSUMER_GROUP_METADATA = 3
    CONSUMER_GROUP_PARTITION_METADATA = 4
    CONSUMER_GROUP_MEMBER_METADATA = 5
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = 6
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER = 7
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT = 8
    SHARE_GROUP_PARTITION_METADATA = 9  # retired
    SHARE_GROUP_MEMBER_METADATA = 10
    SHARE_GROUP_METADATA = 11
    SHARE_GROUP_TARGET_ASSIGNMENT_METADATA = 12
    SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER = 13
    SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT = 14
    SHARE_GROUP_STATE_PARTITION_METADATA = 15
    CONSUMER_GROUP_REGULAR_EXPRESSION = 16
    STREAMS_GROUP_METADATA = 17
    STREAMS_GROUP_MEMBER_METADATA = 19
    STREAMS_GROUP_TARGET_ASSIGNMENT_METADATA = 20
    STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER = 21
    STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT = 22
    STREAMS_GROUP_TOPOLOGY = 23


RECORD_TYPES = {
    0: ("LegacyOffsetCommit", OFFSET_COMMIT_KEY, LEGACY_OFFSET_COMMIT_VALUE, "offsets"),
    1: ("OffsetCommit", OFFSET_COMMIT_KEY, OFFSET_COMMIT_VALUE, "offsets"),
    2: ("GroupMetadata", GROUP_METADATA_KEY, GROUP_METADATA_VALUE, "classic"),
    3: ("ConsumerGroupMetadata", _group_key("ConsumerGroupMetadataKey"), CONSUMER_GROUP_METADATA_VALUE, "consumer"),
    4: (
        "ConsumerGroupPartitionMetadata",
        _group_key("ConsumerGroupPartitionMetadataKey"),
        CONSUMER_GROUP_PARTITION_METADATA_VALUE,
        "consumer",
    ),
    5: (
        "ConsumerGroupMemberMetadata",
        _member_key("ConsumerGroupMemberMetadataKey"),
        CONSUMER_GROUP_MEMBER_METADATA_VALUE,
        "consumer",
    ),
    6: (
        "ConsumerGroupTargetAssignmentMetadata",
        _group_key("ConsumerGroupTargetAssignmentMetadataKey"),
        CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE,
        "consumer",
    ),
    7: (
        "ConsumerGroupTargetAssignmentMember",
        _member_key("ConsumerGroupTargetAssignmentMemberKey"),
        CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE,
        "consumer",
    ),
    8: (
        "ConsumerGroupCurrentMemberAssignment",
        _member_key("ConsumerGroupCurrentMemberAssignmentKey"),
        CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE,
        "consumer",
    ),
    10: (
        "ShareGroupMemberMetadata",
        _member_key("ShareGroupMemberMetadataKey"),
        SHARE_GROUP_MEMBER_METADATA_VALUE,
        "share",
    ),
    11: ("ShareGroupMetadata", _group_key("ShareGroupMetadataKey"), SHARE_GROUP_METADATA_VALUE, "share"),
    12: (
        "ShareGroupTargetAssignmentMetadata",
        _group_key("ShareGroupTargetAssignmentMetadataKey"),
        SHARE_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE,
        "share",
    ),
    13: (
        "ShareGroupTargetAssignmentMember",
        _member_key("ShareGroupTargetAssignmentMemberKey"),
        SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE,
        "share",
    ),
    14: (
        "ShareGroupCurrentMemberAssignment",
        _member_key("ShareGroupCurrentMemberAssignmentKey"),
        SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE,
        "share",
    ),
    15: (
        "ShareGroupStatePartitionMetadata",
        _group_key("ShareGroupStatePartitionMetadataKey"),
        SHARE_GROUP_STATE_PARTITION_METADATA_VALUE,
        "share",
    ),
    16: (
        "ConsumerGroupRegularExpression",
        CONSUMER_GROUP_REGULAR_EXPRESSION_KEY,
        CONSUMER_GROUP_REGULAR_EXPRESSION_VALUE,
        "consumer",
    ),
    17: ("StreamsGroupMetadata", _group_key("StreamsGroupMetadataKey"), STREAMS_GROUP_METADATA_VALUE, "streams"),
    19: (
        "StreamsGroupMemberMetadata",
        _member_key("StreamsGroupMemberMetadataKey"),
        STREAMS_GROUP_MEMBER_METADATA_VALUE,
        "streams",
    ),
    20: (
        "StreamsGroupTargetAssignmentMetadata",
        _group_key("StreamsGroupTargetAssignmentMetadataKey"),
        STREAMS_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE,
        "streams",
    ),
    21: (
        "StreamsGroupTargetAssignmentMember",
        _member_key("StreamsGroupTargetAssignmentMemberKey"),
        STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE,
        "streams",
    ),
    22: (
        "StreamsGroupCurrentMemberAssignment",
        _member_key("StreamsGroupCurrentMemberAssignmentKey"),
        STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE,
        "streams",
    ),
    23: ("StreamsGroupTopology", _group_key("StreamsGroupTopologyKey"), STREAMS_GROUP_TOPOLOGY_VALUE, "streams"),
}

# Written only by 3.9/4.0 (share-group preview) and removed in 4.1: current Kafka skips it as an
# unknown type, and so do we. Kept for reference.
RETIRED_RECORD_TYPES = {
    9: (
        "ShareGroupPartitionMetadata",
        _group_key("ShareGroupPartitionMetadataKey"),
        SHARE_GROUP_PARTITION_METADATA_VALUE,
        "share",
    ),
}

OFFSET_COMMIT_TYPES = (RecordType.LEGACY_OFFSET_COMMIT, RecordType.OFFSET_COMMIT)
GROUP_METADATA_TYPE = RecordType.GROUP_METADATA
