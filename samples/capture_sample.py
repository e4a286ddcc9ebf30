"""Captures samples/logdir from a real broker: starts a Kafka 4.x KRaft broker (jars from
`make setup`) with the default 50 __consumer_offsets partitions on loopback, runs every
scenario of the broker tests with real clients (classic groups with rebalances, static
members, a standalone assign() consumer, a deleted group, an OffsetDelete, committed /
aborted / open transactions, a KIP-848 group, a non-ASCII group id), waits until the groups
are settled, copies the __consumer_offsets folders and the high-watermark checkpoint, and
writes the capture time to samples/NOW.

    PYTHONPATH=. .venv/bin/python samples/capture_sample.py
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

from tests.broker import scenarios as S  # noqa: E402
from tests.broker.kafka_broker import KafkaBroker, snapshot_offsets_log_dir  # noqa: E402


def main() -> None:
    work = tempfile.mkdtemp(prefix="capture-")
    broker = KafkaBroker(os.path.join(REPO, ".jars", "kafka4"), work, offsets_partitions=50)
    broker.start()
    clients: list = []
    try:
        groups, clients = S.run_scenarios(broker.bootstrap, "sample", kip848=True)
        now_ms = int(time.time() * 1000)
        out = os.path.join(HERE, "logdir")
        shutil.rmtree(out, ignore_errors=True)
        snapshot_offsets_log_dir(broker, out)
        with open(os.path.join(HERE, "NOW"), "w") as f:
            f.write(f"{now_ms}\n")
        print(f"Kafka {broker.version}: captured {len(groups)} groups into {out} at {now_ms}")
    finally:
        S.close_clients(clients)
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
