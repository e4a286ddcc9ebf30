"""The lag stage's inputs shipped as pickled chunks of buckets (lib.lake.shared_inputs): a task
gets exactly its buckets' inputs, from what its process loaded ahead or from its own chunks.
Buckets are worked out here from their definition, (crc32(topic) + 31 * partition) % 1024."""

from __future__ import annotations

import zlib

import pytest

from lib.lake import shared_inputs
from lib.lake.seams import EarlierRows, PartitionInput, SharedInputs
from lib.source.topic_log import ScanStart


def _bucket(topic: str, partition: int) -> int:
    return (zlib.crc32(topic.encode()) + 31 * partition) % 1024


def _inputs() -> list[PartitionInput]:
    return [
        PartitionInput(
            f"topic-{t}",
            p,
            None,
            ScanStart(100 + p, 0, 4096),
            p % 2 == 0,
            1_700_000_000_000 + t,
            True,
            EarlierRows(1_700_000_000_000, 100 + p, "id", 100 + p, 1_690_000_000_000, 0),
            source_signature=f"0:{p}:1",
            tail_file="tail-a.arrow",
        )
        for t in range(30)
        for p in range(12)
    ]


@pytest.fixture(autouse=True)
def _fresh_process_state():
    shared_inputs._loaded.clear()
    yield
    shared_inputs._loaded.clear()


@pytest.mark.parametrize("lo,hi", [(0, 1024), (0, 64), (0, 100), (100, 513), (513, 1024), (5, 6), (1000, 1024)])
def test_a_task_gets_exactly_its_buckets_inputs(lo, hi):
    inputs = _inputs()
    shared = shared_inputs.share(reversed(inputs), "run-a")
    assert len(shared.chunks) == 16
    sent = shared_inputs.for_buckets(shared, lo, hi)
    chunks = set(range(lo // 64, (hi + 63) // 64))
    assert [k for k, c in enumerate(sent.chunks) if c is not None] == sorted(chunks)
    got = shared_inputs.inputs_of(sent, lo, hi)
    expected = sorted(
        (tp for tp in inputs if lo <= _bucket(tp.topic, tp.partition) < hi),
        key=lambda tp: (_bucket(tp.topic, tp.partition), tp.topic, tp.partition),
    )
    assert list(got) == expected
    assert len({(tp.topic, tp.partition) for tp in got}) == len(got)


def test_a_process_that_loaded_them_ahead_needs_no_chunk_and_another_stage_replaces_them():
    inputs = _inputs()
    shared = shared_inputs.share(inputs, "run-a")
    assert shared_inputs.prefetch(shared) == len(inputs)
    nothing_sent = SharedInputs("run-a", (None,) * 16)
    assert len(shared_inputs.inputs_of(nothing_sent, 0, 1024)) == len(inputs)
    # the next stage's inputs (another token): what the process held is not taken for them
    later = shared_inputs.share(inputs[:10], "run-b")
    assert len(shared_inputs.inputs_of(later, 0, 1024)) == 10
    assert list(shared_inputs._loaded) == ["run-b"]
    with pytest.raises(AssertionError, match="chunk 0 of the lag stage's shared inputs was not sent"):
        shared_inputs.inputs_of(nothing_sent, 0, 64)
