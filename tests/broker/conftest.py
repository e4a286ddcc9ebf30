"""Real Kafka brokers for integration tests, one per version, started on first use and
stopped at the end of the session. Tests that use them are marked `pytest.mark.broker`.

The jars come from `make kafka-jars` (part of `make setup`): `.jars/kafka4`, `.jars/kafka39`."""

from __future__ import annotations

import os

import pytest

from .kafka_broker import KafkaBroker

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
JARS = os.path.join(REPO, ".jars")
# Few __consumer_offsets partitions keep start-up and snapshots small.
OFFSETS_PARTITIONS = 4


def _broker(name: str, tmp_path_factory) -> KafkaBroker:
    jar_dir = os.path.join(JARS, name)
    if not os.path.exists(os.path.join(jar_dir, ".stamp")):
        pytest.fail(f"{jar_dir} is missing or incomplete: run `make kafka-jars`", pytrace=False)
    broker = KafkaBroker(jar_dir, str(tmp_path_factory.mktemp(name)), offsets_partitions=OFFSETS_PARTITIONS)
    broker.start()
    print(f"\n[{name}] Kafka {broker.version} started in {broker.start_seconds:.1f}s at {broker.bootstrap}")
    return broker


@pytest.fixture(scope="session")
def kafka4(tmp_path_factory):
    """A running Kafka 4.x broker (KafkaBroker)."""
    broker = _broker("kafka4", tmp_path_factory)
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def kafka39(tmp_path_factory):
    """A running Kafka 3.9 broker (KafkaBroker)."""
    broker = _broker("kafka39", tmp_path_factory)
    yield broker
    broker.stop()
