"""The direct GroupMetadata reader (lib.decode.group_metadata) against the schema-driven one: on
every value it accepts, the same struct; everything odd it hands back (None)."""

from __future__ import annotations

import os
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lib.codec.serde import decode_value
from lib.decode import decode_group_metadata
from lib.decode.group_metadata import group_metadata
from lib.testdata.logbuilder import consumer_member, group_metadata_value

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def generic(value: bytes) -> dict:
    _, data = decode_value(2, value)
    return decode_group_metadata(data)


def values():
    members = [
        consumer_member("m-1", ["t1", "t2"], {"t1": [0, 2], "t2": [1]}),
        consumer_member("m-2", ["t1"], {"t1": [1]}, instance_id="static-2"),
        consumer_member("m-3", ["t3"], {"t3": [5]}, protocol_version=0),
        consumer_member("m-4", ["grüße"], {}, protocol_version=1),
    ]
    for version in (0, 1, 2, 3):
        yield group_metadata_value(generation=7, members=members, state_ts=1_700_000_000_123, version=version)
        yield group_metadata_value(generation=0, members=[], state_ts=-1, version=version)
        yield group_metadata_value(generation=1, members=members, protocol_type="connect", version=version)


@pytest.mark.parametrize("value", list(values()))
def test_same_struct_as_the_schema_driven_reader(value):
    fast = group_metadata(value)
    assert fast is not None
    assert fast == generic(value)


@settings(max_examples=300, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutated_values_agree_or_fall_back(data):
    base = bytearray(data.draw(st.sampled_from(list(values()))))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(base) - 1))
        base[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(2, len(base)))
    value = bytes(base[:cut])
    fast = group_metadata(value)
    if fast is None:
        return  # the schema-driven reader decides, errors included
    assert fast == generic(value)


def test_odd_values_are_handed_back():
    v3 = next(v for v in values() if v[:2] == struct.pack(">h", 3))
    assert group_metadata(v3[:10]) is None  # truncated
    assert group_metadata(struct.pack(">h", 4) + v3[2:]) is None  # flexible v4: not this reader's
    assert group_metadata(v3[:2] + struct.pack(">h", -1) + v3[4:]) is None  # null protocol type
