"""The lag stage's PartitionInputs shipped as pickled bytes (seams.SharedInputs), and loaded
ahead on the local pool.

An incremental run's lag stage reads most of its topic partitions as their last checkpoints
say (lib.spark.lag.prepare_lag_stage, made while the replay's tasks run). Shipped as objects in
the tasks, they were pickled after the turn from the replay to the lag stage, one task after
the other, and unpickled before each task could start: make bench's 1% incremental run (3,909
partitions, 1.7 MB a task) started its lag tasks 70 and 120 ms after handing them out, both
cores idle meanwhile. Now the driver pickles them while the replay's tasks run, in chunks of
buckets; the local pool's processes load every chunk (prefetch) once their replay task is done,
while the driver commits and plans the stage; a task then takes its buckets' inputs from what
its process loaded, or loads its own chunks (a process that loaded none, a Spark worker)."""

from __future__ import annotations

import pickle
from collections.abc import Iterable

from lib.lake.lag_input import BUCKETS, bucket_of
from lib.lake.seams import PartitionInput, SharedInputs

CHUNK_BUCKETS = 64  # buckets a chunk: a task that loads its own loads its buckets' chunks only
CHUNKS = -(-BUCKETS // CHUNK_BUCKETS)

# what this process loaded: token -> chunk index -> its (bucket, input) pairs (one stage's)
_loaded: dict[str, dict[int, tuple[tuple[int, PartitionInput], ...]]] = {}


def share(inputs: Iterable[PartitionInput], token: str) -> SharedInputs:
    """The inputs as pickled chunks of CHUNK_BUCKETS buckets, in (bucket, topic, partition) order."""
    by_chunk: list[list[tuple[int, PartitionInput]]] = [[] for _ in range(CHUNKS)]
    for tp in inputs:
        bucket = bucket_of(tp.topic, tp.partition)
        by_chunk[bucket // CHUNK_BUCKETS].append((bucket, tp))
    return SharedInputs(
        token,
        tuple(
            pickle.dumps(tuple(sorted(c, key=lambda e: (e[0], e[1].topic, e[1].partition))), pickle.HIGHEST_PROTOCOL)
            for c in by_chunk
        ),
    )


def _chunks_of(lo: int, hi: int) -> range:
    return range(lo // CHUNK_BUCKETS, -(-hi // CHUNK_BUCKETS))


def for_buckets(shared: SharedInputs, lo: int, hi: int) -> SharedInputs:
    """What a task of buckets lo..hi-1 is sent: the chunks holding them only."""
    wanted = _chunks_of(lo, hi)
    return SharedInputs(shared.token, tuple(c if k in wanted else None for k, c in enumerate(shared.chunks)))


def _chunk(shared: SharedInputs, k: int) -> tuple[tuple[int, PartitionInput], ...]:
    loaded = _loaded.get(shared.token)
    if loaded is None:  # (another stage's: this one's replaces it)
        _loaded.clear()
        loaded = _loaded[shared.token] = {}
    chunk = loaded.get(k)
    if chunk is None:
        data = shared.chunks[k]
        assert data is not None, f"chunk {k} of the lag stage's shared inputs was not sent"
        chunk = loaded[k] = pickle.loads(data)
    return chunk


def inputs_of(shared: SharedInputs, lo: int, hi: int) -> tuple[PartitionInput, ...]:
    """The inputs of buckets lo..hi-1: from what this process loaded, else loaded now."""
    return tuple(tp for k in _chunks_of(lo, hi) for bucket, tp in _chunk(shared, k) if lo <= bucket < hi)


def prefetch(shared: SharedInputs) -> int:
    """Every chunk loaded into this process (kept until another stage's arrive): the number
    of inputs."""
    return sum(len(_chunk(shared, k)) for k, data in enumerate(shared.chunks) if data is not None)
