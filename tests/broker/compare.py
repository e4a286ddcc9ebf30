"""The same facts from two sides: what the broker reports through its admin API, and what
the replay wrote to the Delta tables. Differences are reported per group and field."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient

# The tables a replay of the live topic and one of the same broker's segment files must hold
# alike (table -> key to sort by), but for the columns that say where the input was read from
# (files: the segment's name, the last segment's signature and byte position).
LIVE_VS_FILES = {
    "offsets_log": ("offsets_partition", "log_offset"),
    "group_offsets": ("group_id", "topic", "partition"),
    "pending_transactional_offsets": ("producer_id", "group_id", "topic", "partition"),
    "consumer_groups": ("group_id",),
    "expired_groups": ("group_id",),
    "replay_checkpoints": ("offsets_partition",),
}
SOURCE_COLUMNS = {
    "offsets_log": {"segment_file"},
    "replay_checkpoints": {"run_id", "finished_at", "high_watermark", "source_signature", "next_byte_position"},
}


def comparable_rows(spark, warehouse, name: str) -> list[dict]:
    """A LIVE_VS_FILES table's rows without its SOURCE_COLUMNS, in key order."""
    from tests.helpers import rows

    out = [
        {k: v for k, v in r.items() if k not in SOURCE_COLUMNS.get(name, ())} for r in rows(spark, str(warehouse), name)
    ]
    return sorted(out, key=lambda r: tuple(str(r[k]) for k in LIVE_VS_FILES[name]))


def list_groups(bootstrap: str) -> dict[str, dict]:
    """ListGroups (kafka-python): group id -> {group_state, group_type, protocol_type} as the
    broker names them ("Stable", "Reconciling", ...)."""
    from kafka.admin import KafkaAdminClient

    kp = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return {g["group_id"]: g for g in kp.list_groups()}
    finally:
        kp.close()


def committed_offsets(bootstrap: str, group: str) -> dict:
    """OffsetFetch (kafka-python: metadata exactly as stored, e.g. with librdkafka's NUL)."""
    from kafka.admin import KafkaAdminClient

    kp = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        got = kp.list_group_offsets({group: None})[group]
    finally:
        kp.close()
    return {
        (tp.topic, tp.partition): (
            om.offset,
            om.metadata or "",
            None if om.leader_epoch in (None, -1) else om.leader_epoch,
        )
        for tp, om in got.items()
        if om.offset >= 0
    }


def broker_view(bootstrap: str, groups: list[str]) -> dict:
    a = AdminClient({"bootstrap.servers": bootstrap})
    listed = list_groups(bootstrap)
    view: dict[str, dict | None] = {}
    for g in groups:
        if g not in listed:
            view[g] = None
            continue
        desc = a.describe_consumer_groups([g])[g].result(30)
        view[g] = {
            "type": listed[g].get("group_type", "classic").lower(),
            "state": listed[g]["group_state"],
            "simple": desc.is_simple_consumer_group,
            "assignor": desc.partition_assignor or None,
            "members": sorted(
                (
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.host,
                    tuple(sorted((tp.topic, tp.partition) for tp in m.assignment.topic_partitions)),
                )
                for m in desc.members
            ),
            "offsets": committed_offsets(bootstrap, g),
        }
    return view


def replay_view(tables: dict, groups: list[str]) -> dict:
    view = {}
    for g in groups:
        rows = [r for r in tables["consumer_groups"] if r["group_id"] == g]
        offsets = {
            (r["topic"], r["partition"]): (r["committed_offset"], r["metadata"] or "", r["leader_epoch"])
            for r in tables["group_offsets"]
            if r["group_id"] == g
        }
        if not rows:
            view[g] = None if not offsets else {"offsets": offsets, "missing_group": True}
            continue
        r = rows[0]
        members = sorted(
            (
                m["member_id"],
                m["group_instance_id"],
                m["client_id"],
                m["client_host"],
                tuple(sorted((a["topic"], p) for a in (m["assignment"] or []) for p in a["partitions"])),
            )
            for m in r["members"]
        )
        view[g] = {
            "type": r["group_type"],
            "state": r["state"],
            "simple": r["group_type"] == "classic" and r["protocol_type"] is None,
            "assignor": r["protocol"],
            "members": members,
            "offsets": offsets,
        }
    return view


def differences(
    broker: dict, replay: dict, fields=("type", "state", "simple", "assignor", "members", "offsets")
) -> list[str]:
    out = []
    for g in sorted(broker):
        b, r = broker[g], replay.get(g)
        if b is None or r is None:
            if b != r:
                out.append(f"group {g!r}: broker reports {b!r}, replay has {r!r}")
            continue
        for f in fields:
            if b.get(f) != r.get(f):
                out.append(f"group {g!r} field {f}: broker {b.get(f)!r} != replay {r.get(f)!r}")
    return out
