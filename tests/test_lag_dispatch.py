"""The lag stage's tasks carry their PartitionInputs pickled by parts, the preparation's pickles
sent as they are only where a bucket holds exactly the inputs they were made of."""

from __future__ import annotations

import pickle
from dataclasses import replace
from types import SimpleNamespace

from lib.lake.lag_input import BUCKETS, bucket_of
from lib.lake.seams import PartitionInput, PartitionInputs, pickle_inputs
from lib.spark.lag import _Plan, _tasks


def _input(topic: str, partition: int, in_table: bool = True) -> PartitionInput:
    return PartitionInput(topic, partition, None, None, False, 1_760_000_000_000, in_table, None)


def _same_bucket() -> tuple[tuple[str, int], tuple[str, int]]:
    """Two topic partitions of one bucket (the first two found)."""
    seen: dict[int, tuple[str, int]] = {}
    for p in range(BUCKETS + 1):
        key = ("orders", p)
        b = bucket_of(*key)
        if b in seen:
            return seen[b], key
        seen[b] = key
    raise AssertionError("no two partitions share a bucket")


def test_partition_inputs_unpickle_as_the_inputs_in_order():
    a, b, c = _input("t", 0), _input("t", 1), _input("u", 7, in_table=False)
    inputs = PartitionInputs.of([([a, b], pickle_inputs([a, b])), ([c], None), ([], None)])
    assert inputs == (a, b, c)
    back = pickle.loads(pickle.dumps(inputs, pickle.HIGHEST_PROTOCOL))
    assert type(back) is PartitionInputs and back == (a, b, c)
    # unpickled, it pickles again (whole) to the same inputs
    assert pickle.loads(pickle.dumps(back)) == (a, b, c)
    # a part's pickle is what goes: the bytes given, as they are
    other = PartitionInputs.of([([a], pickle_inputs([c]))])
    assert pickle.loads(pickle.dumps(other)) == (c,)


def test_a_prepared_bucket_goes_as_pickled_only_while_its_inputs_are_those(tmp_path):
    (first, second) = _same_bucket()
    shared = bucket_of(*first)
    lone = ("payments", 3)
    assert bucket_of(*lone) != shared
    a, c = _input(*first), _input(*lone)
    b = _input(*second)  # new in the stage: not in the preparation
    pickled = {shared: ([a], pickle_inputs([a])), bucket_of(*lone): ([c], pickle_inputs([c]))}
    inputs = sorted([a, b, c], key=lambda tp: (tp.topic, tp.partition))
    plan = _Plan({}, None, [], [], set(), {})
    spark = SimpleNamespace(sparkContext=SimpleNamespace(defaultParallelism=1))
    tasks = _tasks(spark, str(tmp_path), "run", 1, 1, inputs, plan, False, [], pickled)
    sent = [tp for task in tasks for tp in pickle.loads(pickle.dumps(task)).partitions]
    expected = sorted(inputs, key=lambda tp: bucket_of(tp.topic, tp.partition))
    assert sent == expected  # every input once, in bucket order, b included
    parts = [blob for task in tasks for blob in task.partitions._parts]
    assert any(blob is pickled[bucket_of(*lone)][1] for blob in parts)  # c's bucket: as prepared
    assert not any(blob is pickled[shared][1] for blob in parts)  # a's bucket gained b: pickled anew
    # an input made again (equal, not the prepared object) is pickled anew too
    again = [replace(c, running_at_ms=5) if tp is c else tp for tp in inputs]
    tasks = _tasks(spark, str(tmp_path), "run", 1, 1, again, plan, False, [], pickled)
    sent = [tp for task in tasks for tp in pickle.loads(pickle.dumps(task)).partitions]
    assert [tp.running_at_ms for tp in sent if (tp.topic, tp.partition) == lone] == [5]
