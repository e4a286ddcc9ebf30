"""Finding the __consumer_offsets partitions and their segments in a broker log directory
(spec 1.1). Pure metadata: names and sizes, never record bytes."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from lib import storage

TOPIC = "__consumer_offsets"
_PARTITION_DIR = re.compile(r"^__consumer_offsets-(\d+)$")
_SEGMENT = re.compile(r"^(\d{20})\.log$")


class LogDirError(Exception):
    """The input is not a usable log directory."""


LIVE_SCHEME = "kafka://"  # a live topic source's path: kafka://BOOTSTRAP


@dataclass(frozen=True)
class Segment:
    partition: int
    base_offset: int
    path: str
    size: int
    # modification time as listed (ns; 0 when unknown): part of a run's source signature
    mtime_ns: int = 0


@dataclass
class PartitionLog:
    partition: int
    path: str
    segments: list[Segment] = field(default_factory=list)
    high_watermark: int | None = None
    log_start_offset: int | None = None

    @property
    def bootstrap(self) -> str | None:
        """The bootstrap servers of a live topic (path kafka://BOOTSTRAP); None for files."""
        return self.path[len(LIVE_SCHEME) :] if self.path.startswith(LIVE_SCHEME) else None

    @property
    def signature(self) -> str | None:
        """What the input looks like without reading it (segments_signature); None for the
        live topic, whose end is asked for instead."""
        return None if self.bootstrap is not None else segments_signature(self.segments)


def segments_signature(segments: Sequence[Segment]) -> str:
    """A partition's segment files as seen without reading them: the last segment's base
    offset, size and modification time ("empty" without segments). Segments only grow at the
    end, and older ones are only deleted."""
    if not segments:
        return "empty"
    last = segments[-1]
    # as listed (an object store's listing has them; a hand-made Segment may not)
    size, mtime_ns = (last.size, last.mtime_ns) if last.mtime_ns else storage.stat(last.path)
    # size for appends, modification time for anything rewritten in place
    return f"{last.base_offset}:{size}:{mtime_ns}"


def segments_from(log: PartitionLog, start: int) -> list:
    """The segments holding offsets >= start: all but those that end before it."""
    segs = log.segments
    if log.bootstrap is not None:
        return segs
    keep = []
    for i, seg in enumerate(segs):
        nxt = segs[i + 1].base_offset if i + 1 < len(segs) else None
        if nxt is not None and nxt <= start:
            continue
        keep.append(seg)
    return keep


def read_offset_checkpoint(path: str, listed: dict | None = None) -> dict[tuple[str, int], int]:
    """replication-offset-checkpoint and friends: version, count, then 'topic partition offset'.
    `listed`: the folder's entries by name, when known (saves a request on an object store)."""
    out: dict[tuple[str, int], int] = {}
    if listed is not None and storage.basename(path) not in listed:
        return out
    try:
        lines = storage.read_text(path).splitlines()
    except (OSError, UnicodeDecodeError):
        return out
    if len(lines) < 2 or lines[0].strip() != "0":
        return out
    for line in lines[2:]:
        parts = line.split()
        if len(parts) == 3 and parts[1].isdigit():
            try:
                out[(parts[0], int(parts[1]))] = int(parts[2])
            except ValueError:
                continue
    return out


def find_partitions(log_dir: str, partitions: list[int] | None = None) -> list[PartitionLog]:
    """The __consumer_offsets-<P> folders of a log dir, each with its .log segments in offset
    order. Folders being deleted or moved (-delete, -future, -stray) and other files are ignored."""
    try:
        if not storage.exists(log_dir):
            raise LogDirError(f"input path does not exist: {log_dir}")
        if not storage.isdir(log_dir):
            raise LogDirError(f"input path is not a directory: {log_dir}")
        entries = storage.list_dir(log_dir)
    except OSError as e:  # an object store that refuses or cannot be reached
        raise LogDirError(f"cannot list {log_dir}: {e}") from None
    names = {e.name: e for e in entries}
    high_watermarks = read_offset_checkpoint(storage.join(log_dir, "replication-offset-checkpoint"), names)
    log_starts = read_offset_checkpoint(storage.join(log_dir, "log-start-offset-checkpoint"), names)
    found: list[PartitionLog] = []
    for entry in entries:
        m = _PARTITION_DIR.match(entry.name)
        if not m or not entry.is_dir:
            continue
        p = int(m.group(1))
        if partitions is not None and p not in partitions:
            continue
        log = PartitionLog(
            p, entry.path, high_watermark=high_watermarks.get((TOPIC, p)), log_start_offset=log_starts.get((TOPIC, p))
        )
        for seg in storage.list_dir(entry.path):
            sm = _SEGMENT.match(seg.name)
            if sm and not seg.is_dir:
                log.segments.append(Segment(p, int(sm.group(1)), seg.path, seg.size, seg.mtime_ns))
        log.segments.sort(key=lambda s: s.base_offset)
        found.append(log)
    found.sort(key=lambda pl: pl.partition)
    if not found:
        wanted = "" if partitions is None else f" among partitions {sorted(partitions)}"
        raise LogDirError(f"no {TOPIC} partitions{wanted} in {log_dir} (expected folders named {TOPIC}-<partition>)")
    if partitions is not None:
        missing = sorted(set(partitions) - {pl.partition for pl in found})
        if missing:
            raise LogDirError(f"{TOPIC} partitions {missing} not found in {log_dir}")
    if all(not pl.segments for pl in found):
        raise LogDirError(f"the {TOPIC} partitions in {log_dir} hold no .log segments")
    return found


def live_partitions(bootstrap: str, partitions: list[int] | None = None) -> list[PartitionLog]:
    """The partitions of a running cluster's __consumer_offsets topic as PartitionLogs whose
    single pseudo-segment (path kafka://BOOTSTRAP) is read with Fetch requests."""
    from lib.source.live import OffsetsTopicReader

    try:
        reader = OffsetsTopicReader(bootstrap)
    except Exception as e:
        raise LogDirError(f"cannot reach the cluster at {bootstrap}: {e}") from None
    try:
        available = reader.partitions()
    except RuntimeError as e:
        raise LogDirError(str(e)) from None
    finally:
        reader.close()
    wanted = available if partitions is None else partitions
    missing = sorted(set(wanted) - set(available))
    if missing:
        raise LogDirError(f"{TOPIC} partitions {missing} not found at {bootstrap}")
    source = f"{LIVE_SCHEME}{bootstrap}"
    return [PartitionLog(p, source, [Segment(p, 0, source, 0)]) for p in wanted]
