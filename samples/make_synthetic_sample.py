"""Writes samples/logdir: a small hand-built __consumer_offsets log (50-partition layout) with
classic groups, a KIP-848 group, transactions, tombstones and compressed batches.

    .venv/bin/python samples/make_synthetic_sample.py
"""
from __future__ import annotations

import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from lib.logbuilder import PartitionLogBuilder, consumer_member, offset_commit_key, offset_commit_value  # noqa: E402
from lib.partitioning import partition_for  # noqa: E402

PARTITIONS = 50
DAY = 86_400_000
NOW = 1_763_000_000_000          # 2025-11-13T02:13:20Z, written to samples/NOW
HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> None:
    builders: dict[int, PartitionLogBuilder] = {}

    def on(group: str) -> PartitionLogBuilder:
        p = partition_for(group, PARTITIONS)
        return builders.setdefault(p, PartitionLogBuilder(p, leader_epoch=3))

    t = NOW - 2 * DAY
    g = "orders-service"
    members = [consumer_member(f"consumer-{i}", ["orders"], {"orders": [i * 2, i * 2 + 1]}, client_id=f"c{i}",
                               client_host=f"/10.1.0.{i}") for i in range(3)]
    on(g).group(g, t, generation=7, protocol="cooperative-sticky", state_ts=t, members=members)
    for step in range(20):
        on(g).batch([(offset_commit_key(g, "orders", p), offset_commit_value(1000 + step * 50 + p, t + step * 5000,
                                                                             leader_epoch=2), t + step * 5000)
                     for p in range(6)], compression=(step % 5))
    g = "billing"
    on(g).group(g, t, generation=3, members=[consumer_member("b-1", ["invoices"], {"invoices": [0]})])
    on(g).commit(g, "invoices", 0, 42, t, metadata="batch-17")
    on(g).commit(g, "invoices", 0, 57, t + 1000, producer_id=9001).marker(9001, True, t + 1100)
    on(g).commit(g, "invoices", 0, 60, t + 2000, producer_id=9002)          # open transaction
    g = "audit-replayer"                                                      # simple consumer, assign()
    on(g).commit(g, "audit", 0, 5, NOW - 9 * DAY).commit(g, "audit", 1, 6, NOW - 9 * DAY)
    g = "old-dashboard"                                                       # emptied long ago
    on(g).group(g, NOW - 10 * DAY, generation=12, state_ts=NOW - 10 * DAY, members=[])
    on(g).commit(g, "metrics", 0, 77, NOW - 11 * DAY)
    g = "deleted-group"
    on(g).commit(g, "x", 0, 1, t).offset_tombstone(g, "x", 0, t + 1).group_tombstone(g, t + 2)
    out = os.path.join(HERE, "logdir")
    shutil.rmtree(out, ignore_errors=True)
    for b in builders.values():
        b.write(out)
    with open(os.path.join(HERE, "NOW"), "w") as f:
        f.write(f"{NOW}\n")
    print(f"wrote {len(builders)} partitions to {out}")


if __name__ == "__main__":
    main()
