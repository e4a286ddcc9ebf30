"""The consumed topics' own partitions in a broker log dir: beside __consumer_offsets-<P>, a
folder <topic>-<partition> per partition the broker hosts, in the same segment format. This
module lists them (no record bytes, no numba: the driver imports it); lib.source.topic_scan
reads their batch headers."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

from lib import storage
from lib.source.logdir import Segment, read_offset_checkpoint, segments_signature

# <topic>-<partition>; a topic name is [a-zA-Z0-9._-]{1,249}
_PARTITION_DIR = re.compile(r"^([a-zA-Z0-9._-]+)-(\d+)$")
_SEGMENT = re.compile(r"^(\d{20})\.log$")
# internal topics whose folders are never a consumed topic's
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__cluster_metadata"})


def _unsized(name: str) -> bool:
    """A log dir's own entries (partition folders, checkpoint files): no sizes needed."""
    return False


@dataclass
class TopicPartitionLog:
    topic: str
    partition: int
    path: str
    segments: list[Segment] = field(default_factory=list)
    topic_id: str | None = None  # from partition.metadata (Kafka 2.8+)
    high_watermark: int | None = None
    log_start_offset: int | None = None

    @property
    def signature(self) -> str:
        """What the partition's files look like without reading them (segments_signature)."""
        return segments_signature(self.segments)


def read_topic_id(folder: str, listed: set[str] | None = None) -> str | None:
    """The topic id of partition.metadata ('version: 0' / 'topic_id: <base64url>')."""
    if listed is not None and "partition.metadata" not in listed:
        return None
    try:
        text = storage.read_text(storage.join(folder, "partition.metadata"))
    except (OSError, UnicodeDecodeError):
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "topic_id" and value.strip():
            return value.strip()
    return None


def find_topic_partitions(log_dir: str, wanted: set[tuple[str, int]] | None = None) -> list[TopicPartitionLog]:
    """The consumed topics' partition folders of a log dir (not the internal topics, nor folders
    being deleted or moved: their names carry a '.<uuid>-delete' / '-future' / '-stray' suffix
    that the pattern refuses), each with its .log segments in offset order; only those in
    `wanted` when given. A log dir without any gives []."""
    try:
        entries = storage.list_dir(log_dir, sized=_unsized)
    except OSError:
        return []
    names = {e.name: e for e in entries}
    high_watermarks = read_offset_checkpoint(storage.join(log_dir, "replication-offset-checkpoint"), names)
    log_starts = read_offset_checkpoint(storage.join(log_dir, "log-start-offset-checkpoint"), names)
    found = []
    for entry in entries:
        m = _PARTITION_DIR.match(entry.name)
        if not m or not entry.is_dir or m.group(1) in INTERNAL_TOPICS:
            continue
        topic, partition = m.group(1), int(m.group(2))
        if wanted is not None and (topic, partition) not in wanted:
            continue
        listing = storage.list_dir(entry.path, sized=_SEGMENT.match)
        log = TopicPartitionLog(
            topic,
            partition,
            entry.path,
            segments=_segments(partition, listing),
            topic_id=read_topic_id(entry.path, {e.name for e in listing}),
            high_watermark=high_watermarks.get((topic, partition)),
            log_start_offset=log_starts.get((topic, partition)),
        )
        found.append(log)
    found.sort(key=lambda t: (t.topic, t.partition))
    return found


def _segments(partition: int, listing) -> list[Segment]:
    """The .log segments of a partition folder's listing, in offset order."""
    segments = []
    for seg in listing:
        sm = _SEGMENT.match(seg.name)
        if sm and not seg.is_dir:
            segments.append(Segment(partition, int(sm.group(1)), seg.path, seg.size, seg.mtime_ns))
    segments.sort(key=lambda s: s.base_offset)
    return segments


def listed_again(log: TopicPartitionLog) -> TopicPartitionLog:
    """The partition with its folder's segments as they are now (none if the folder is gone:
    the topic was deleted); the rest as listed before."""
    try:
        listing = storage.list_dir(log.path, sized=_SEGMENT.match)
    except FileNotFoundError:
        listing = []
    return dataclasses.replace(log, segments=_segments(log.partition, listing))


@dataclass(frozen=True)
class ScanStart:
    """Where a partition's last scan stopped (its checkpoint)."""

    next_offset: int
    segment_base_offset: int | None = None
    next_byte_position: int | None = None


def scan_plan(log: TopicPartitionLog, start: ScanStart | None = None) -> list[tuple[Segment, int]]:
    """The segments a scan of the partition from its checkpoint reads, each with the byte
    position it starts at: from the checkpoint's position when its segment is still there;
    else from the first segment that may hold the next offset, stepping over segments that end
    below it (deleted by retention, or rolled and rewritten). Sizes are the listed ones."""
    segments = log.segments
    next_offset = 0 if start is None else start.next_offset
    plan = []
    for i, seg in enumerate(segments):
        following = segments[i + 1].base_offset if i + 1 < len(segments) else None
        if following is not None and following <= next_offset:
            continue
        position = 0
        if (
            start is not None
            and start.segment_base_offset == seg.base_offset
            and start.next_byte_position is not None
            and start.next_byte_position <= (seg.size or storage.getsize(seg.path))
        ):
            position = start.next_byte_position
        plan.append((seg, position))
    return plan
