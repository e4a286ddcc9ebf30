"""Reading __consumer_offsets from a running cluster as raw record batches.

A consumer never returns control records (transaction markers) nor producer ids, and the
replay needs both; so this sends Fetch requests itself (through kafka-python's network
client, read_uncommitted, as a consumer: up to the high watermark) and hands the returned
batches, byte for byte the segment format, to the same codec that reads segment files.

For the lag stage, `sample_end_offsets` asks the leaders of the consumed topic partitions for
their end offsets (ListOffsets LATEST) and newest record timestamps (MAX_TIMESTAMP, KIP-734)."""

from __future__ import annotations

from dataclasses import dataclass

TOPIC = "__consumer_offsets"
FETCH_VERSION = 11  # Kafka 2.3+; carries producer ids, aborted transactions, log start
FETCH_MAX_BYTES = 8 << 20  # a fetch's size limit (response and partition); see fetch()
# The largest response frame the network client accepts: none but the protocol's own (a frame
# length is an int32), as Kafka's Java clients. A fetch answer is bounded by its max_bytes
# except for its first batch, which Kafka returns whole however large (KIP-74): up to the
# topic's max.message.bytes, which may be anything. kafka-python's KafkaNetClient refuses
# frames over 1,000,000 bytes by default ("Invalid frame length"), so without this any fetch of
# more than about 1 MB, and any record batch larger than that, could not be read.
RECEIVE_MESSAGE_MAX_BYTES = (1 << 31) - 1


@dataclass
class FetchedChunk:
    data: bytes
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int


class OffsetsTopicReader:
    def __init__(self, bootstrap_servers: str, timeout_ms: int = 30000):
        self.timeout_ms = timeout_ms
        self.client = _connect(bootstrap_servers, timeout_ms)

    def close(self) -> None:
        self.client.close()

    def partitions(self) -> list[int]:
        """The topic's partitions: their count is what Kafka's partitionFor uses."""
        cluster = self.client.cluster
        self.client._manager.run(self._refresh)
        parts = cluster.partitions_for_topic(TOPIC)
        if not parts:
            raise RuntimeError(f"the cluster has no {TOPIC} topic (no group has committed yet?)")
        return sorted(parts)

    async def _refresh(self):
        self.client.cluster.add_topic(TOPIC)
        await self.client.cluster.refresh_metadata()

    def _leader(self, partition: int) -> int:
        leader = self.client.cluster.leader_for_partition(_tp(partition))
        if leader is None or leader < 0:
            self.client._manager.run(self._refresh)
            leader = self.client.cluster.leader_for_partition(_tp(partition))
        if leader is None or leader < 0:
            raise RuntimeError(f"no leader for {TOPIC}-{partition}")
        return leader

    def fetch(self, partition: int, offset: int, max_bytes: int = FETCH_MAX_BYTES) -> FetchedChunk:
        """Record batches of `partition` from `offset` on, up to about `max_bytes`: the response
        ends where the limit falls, possibly inside a batch (the caller reads the whole ones and
        fetches again from the next offset), except that a first batch larger than the limit
        comes whole (KIP-74). max_bytes=1 therefore returns exactly one batch."""
        from kafka.errors import for_code
        from kafka.protocol.consumer.fetch import FetchRequest

        part = FetchRequest.FetchTopic.FetchPartition(
            partition=partition,
            current_leader_epoch=-1,
            fetch_offset=offset,
            log_start_offset=-1,
            partition_max_bytes=max_bytes,
        )
        request = FetchRequest(
            version=FETCH_VERSION,
            replica_id=-1,
            max_wait_ms=0,
            min_bytes=0,
            max_bytes=max_bytes,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=[FetchRequest.FetchTopic(topic=TOPIC, partitions=[part])],
            forgotten_topics_data=[],
            rack_id="",
        )
        response = self.client.send_and_receive(self._leader(partition), request, timeout_ms=self.timeout_ms)
        p = response.responses[0].partitions[0]
        if p.error_code:
            raise for_code(p.error_code)(f"fetching {TOPIC}-{partition} at offset {offset}")
        return FetchedChunk(bytes(p.records or b""), p.high_watermark, p.last_stable_offset, p.log_start_offset)

    def end_offset(self, partition: int) -> int:
        """The high watermark: what a consumer (and OffsetFetch) can see. Asked with ListOffsets
        LATEST, read_uncommitted (which answers the high watermark): a Fetch would bring a
        record batch along, whole however large (KIP-74)."""
        from kafka.errors import for_code

        leader = self._leader(partition)
        code, offset, _ = _list_offsets(self.client, leader, [(TOPIC, partition)], LATEST, self.timeout_ms)[
            (TOPIC, partition)
        ]
        if code:
            raise for_code(code)(f"ListOffsets of {TOPIC}-{partition} at broker {leader}")
        return offset


def _tp(partition: int):
    from kafka.structs import TopicPartition

    return TopicPartition(TOPIC, partition)


# --- end offsets of consumed partitions (ListOffsets) ------------------------------------------

LATEST = -1  # ListOffsets spec: the log end offset (timestamp -1)
MAX_TIMESTAMP = -3  # KIP-734: offset and timestamp of the record with the largest timestamp
MAX_TIMESTAMP_VERSION = 7  # ListOffsets v7 (Kafka 3.0) understands MAX_TIMESTAMP
READ_UNCOMMITTED = 0  # as kafka-consumer-groups --describe: the log end offset, not the LSO
RETRY_S = 0.2


@dataclass(frozen=True)
class EndOffsetSample:
    """One partition's ListOffsets answer. at_ms: this machine's clock right after the leader's
    LATEST answer (the log end offset was at least end_offset by then). max_timestamp_ms: the
    largest record timestamp in the partition (KIP-734) asked just before LATEST, so the record
    lies below end_offset; None where the leader does not support it or the partition holds no
    record."""

    topic: str
    partition: int
    end_offset: int
    at_ms: int
    max_timestamp_ms: int | None
    topic_id: str | None


def sample_end_offsets(
    bootstrap_servers: str, partitions: set[tuple[str, int]], timeout_ms: int = 30000
) -> list[EndOffsetSample]:
    """ListOffsets for `partitions` (topic, partition), sent to their leaders, read_uncommitted:
    MAX_TIMESTAMP where the leader's negotiated ListOffsets version has it, then LATEST.
    Partitions whose topic no longer exists (deleted) are left out, not an error."""
    import time

    from kafka.errors import IncompatibleBrokerVersion, InvalidMetadataError, for_code
    from kafka.structs import TopicPartition

    if not partitions:
        return []
    client = _connect(bootstrap_servers, timeout_ms)
    # a Metadata request names the topics: never let it create a deleted one again
    client.cluster.config["allow_auto_create_topics"] = False
    topics = sorted({t for t, _ in partitions})

    async def refresh():
        client.cluster.set_topics(topics)
        await client.cluster.refresh_metadata()

    samples: list[EndOffsetSample] = []
    pending = set(partitions)
    deadline = time.monotonic() + timeout_ms / 1000
    try:
        while True:
            client._manager.run(refresh)
            cluster = client.cluster
            by_leader: dict[int, list[tuple[str, int]]] = {}
            for topic, partition in sorted(pending):
                known = cluster.partitions_for_topic(topic)
                if not known or partition not in known:
                    pending.discard((topic, partition))  # deleted (or never there): no sample
                    continue
                leader = cluster.leader_for_partition(TopicPartition(topic, partition))
                if leader is not None and leader >= 0:
                    by_leader.setdefault(leader, []).append((topic, partition))
            for leader, tps in sorted(by_leader.items()):
                try:
                    newest = _list_offsets(client, leader, tps, MAX_TIMESTAMP, timeout_ms)
                except IncompatibleBrokerVersion:
                    newest = {}  # before Kafka 3.0: no max_timestamp
                latest = _list_offsets(client, leader, tps, LATEST, timeout_ms)
                at_ms = int(time.time() * 1000)
                for tp in tps:
                    code, offset, _ = latest[tp]
                    n_code, n_offset, n_ts = newest.get(tp, (0, -1, -1))
                    if code or n_code:
                        error = for_code(code or n_code)
                        if issubclass(error, InvalidMetadataError):
                            continue  # the leader moved, or the topic is being deleted: ask again
                        raise error(f"ListOffsets of {tp[0]}-{tp[1]} at broker {leader}")
                    samples.append(
                        EndOffsetSample(
                            tp[0],
                            tp[1],
                            offset,
                            at_ms,
                            # an empty partition has no newest record: offset and timestamp -1
                            n_ts if n_offset >= 0 and n_ts >= 0 else None,
                            _topic_id(cluster.topic_id(tp[0])),
                        )
                    )
                    pending.discard(tp)
            if not pending:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"no ListOffsets answer for {sorted(pending)} in {timeout_ms} ms (no leader?)")
            time.sleep(RETRY_S)
    finally:
        client.close()
    return sorted(samples, key=lambda s: (s.topic, s.partition))


def _list_offsets(
    client, leader: int, tps: list[tuple[str, int]], spec: int, timeout_ms: int
) -> dict[tuple[str, int], tuple[int, int, int]]:
    """One ListOffsets request to `leader`: (topic, partition) -> (error code, offset,
    timestamp). The version is negotiated with the leader (kafka-python picks the highest both
    support, at least the spec's): IncompatibleBrokerVersion when the leader has none."""
    from kafka.protocol.consumer.offsets import ListOffsetsRequest

    Topic = ListOffsetsRequest.ListOffsetsTopic
    by_topic: dict[str, list] = {}
    for topic, partition in tps:
        by_topic.setdefault(topic, []).append(
            Topic.ListOffsetsPartition(partition_index=partition, current_leader_epoch=-1, timestamp=spec)
        )
    request = ListOffsetsRequest(
        replica_id=-1,
        isolation_level=READ_UNCOMMITTED,
        topics=[Topic(name=t, partitions=ps) for t, ps in by_topic.items()],
        timeout_ms=timeout_ms,
        min_version=MAX_TIMESTAMP_VERSION if spec == MAX_TIMESTAMP else 1,
    )
    response = client.send_and_receive(leader, request, timeout_ms=timeout_ms)
    return {
        (t.name, p.partition_index): (p.error_code, p.offset, p.timestamp)
        for t in response.topics
        for p in t.partitions
    }


def _topic_id(value) -> str | None:
    """A topic id as Kafka prints it (and partition.metadata holds it): URL-safe base64 of the
    16 bytes, no padding; None when unknown (the zero id)."""
    import base64

    if value is None or not value.int:
        return None
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode()


def _connect(bootstrap_servers: str, timeout_ms: int):
    from kafka.net.compat import KafkaNetClient

    client = KafkaNetClient(
        bootstrap_servers=bootstrap_servers,
        client_id="offsets-lake",
        receive_message_max_bytes=RECEIVE_MESSAGE_MAX_BYTES,
    )
    client._manager.bootstrap(timeout_ms)  # the compat client exposes no public bootstrap
    return client
