"""Committed and pending offsets of one __consumer_offsets partition, replayed record by
record exactly as OffsetMetadataManager does in Kafka 4.x (spec 4.3-4.4). The reference for
the compiled one-pass replay (lib.replay.engine), and the coordinator's in-memory state."""

from __future__ import annotations

from schemas.records import OFFSET_COMMIT_TYPES

NO_PRODUCER = -1


class PartitionOffsets:
    def __init__(self, record_effects: bool = False):
        self.offsets: dict[tuple, dict] = {}  # (group, topic, partition) -> entry
        self.pending: dict[int, dict[tuple, dict]] = {}  # producer id -> key -> entry
        # with record_effects: the commits that took effect, in that order, each with the record
        # that made it effective (its log offset and timestamp)
        self.took_effect: list[tuple[dict, int, object]] | None = [] if record_effects else None

    def load_committed(self, entry: dict) -> None:
        self.offsets[(entry["group_id"], entry["topic"], entry["partition"])] = entry

    def load_pending(self, producer_id: int, entry: dict) -> None:
        self.pending.setdefault(producer_id, {})[(entry["group_id"], entry["topic"], entry["partition"])] = entry

    def apply(self, row: dict) -> None:
        """One offsets_log row (as lib.decode produces them), in log order."""
        if row["is_control"]:
            if row["control_type"] in ("COMMIT", "ABORT"):
                self.end_transaction(
                    row["producer_id"], row["control_type"] == "COMMIT", row["log_offset"], row["log_timestamp"]
                )
            return
        if row["record_type"] not in OFFSET_COMMIT_TYPES or row["decode_status"] != "ok":
            return
        key = (row["group_id"], row["topic"], row["partition"])
        if row["is_tombstone"]:
            # removes the committed offset and every producer's pending entry for the key
            self.offsets.pop(key, None)
            for producer in list(self.pending):
                self.pending[producer].pop(key, None)
                if not self.pending[producer]:
                    del self.pending[producer]
            return
        entry = {
            k: row[k]
            for k in (
                "group_id",
                "topic",
                "partition",
                "committed_offset",
                "leader_epoch",
                "metadata",
                "commit_timestamp",
                "expire_timestamp",
                "topic_id",
                "offsets_partition",
                "log_offset",
            )
        }
        if row["producer_id"] != NO_PRODUCER:
            self.pending.setdefault(row["producer_id"], {})[key] = entry
        else:
            self.offsets[key] = entry
            if self.took_effect is not None:
                self.took_effect.append((entry, row["log_offset"], row.get("log_timestamp")))

    def end_transaction(self, producer_id: int, commit: bool, marker_offset: int = -1, marker_time=None) -> None:
        entries = self.pending.pop(producer_id, {})
        if not commit:
            return
        for key, entry in entries.items():
            current = self.offsets.get(key)
            # a later non-transactional commit wins over the transaction's record
            if current is None or entry["log_offset"] > current["log_offset"]:
                self.offsets[key] = entry
                if self.took_effect is not None:
                    self.took_effect.append((entry, marker_offset, marker_time))

    def has_open_transaction(self, group_id: str) -> bool:
        return any(k[0] == group_id for entries in self.pending.values() for k in entries)
