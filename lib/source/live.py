"""Reading __consumer_offsets from a running cluster as raw record batches.

A consumer never returns control records (transaction markers) nor producer ids, and the
replay needs both; so this sends Fetch requests itself (through kafka-python's network
client, read_uncommitted, as a consumer: up to the high watermark) and hands the returned
batches, byte for byte the segment format, to the same codec that reads segment files."""

from __future__ import annotations

from dataclasses import dataclass

TOPIC = "__consumer_offsets"
FETCH_VERSION = 11  # Kafka 2.3+; carries producer ids, aborted transactions, log start


@dataclass
class FetchedChunk:
    data: bytes
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int


class OffsetsTopicReader:
    def __init__(self, bootstrap_servers: str, timeout_ms: int = 30000):
        from kafka.net.compat import KafkaNetClient

        self.timeout_ms = timeout_ms
        self.client = KafkaNetClient(bootstrap_servers=bootstrap_servers, client_id="offsets-lake")
        self.client._manager.bootstrap(timeout_ms)  # the compat client exposes no public bootstrap

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

    def fetch(self, partition: int, offset: int, max_bytes: int = 8 << 20) -> FetchedChunk:
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
        """The high watermark: what a consumer (and OffsetFetch) can see."""
        return self.fetch(partition, 0, max_bytes=1).high_watermark


def _tp(partition: int):
    from kafka.structs import TopicPartition

    return TopicPartition(TOPIC, partition)
