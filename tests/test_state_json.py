"""lib.replay.groups.state_json writes a fold state as json.dumps(state, default=_encode_bytes,
separators=(",", ":")) does, byte for byte: group_fold_state's rows are the same whichever
writer made them, and the parsers that read a state's text where they expect it (the audit's
key, is_simple_state) see what they always saw."""

from __future__ import annotations

import datetime as dt
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from lib.replay.groups import _decode_bytes, _encode_bytes, state_json


def json_text(state) -> str:
    return json.dumps(state, default=_encode_bytes, separators=(",", ":"))


def test_a_state_with_bytes_datetimes_and_nested_containers():
    state = {
        "kind": "classic",
        "audit": {"previous": {"members": [{"member_id": "m-1", "instance": None, "assignment": [["t", 0]]}]}},
        "group": {
            "protocol_type": "consumer",
            "generation": 7,
            "current_state_timestamp_us": dt.datetime(2026, 12, 6, 15, 0, tzinfo=dt.UTC),
            "members": [{"subscription_bytes": b"\x00\x01\xff", "owned": (("t", 1),), "rack": None, "ok": True}],
            "simple": False,
        },
    }
    text = state_json(state)
    assert text == (
        '{"kind":"classic","audit":{"previous":{"members":[{"member_id":"m-1","instance":null,'
        '"assignment":[["t",0]]}]}},"group":{"protocol_type":"consumer","generation":7,'
        '"current_state_timestamp_us":{"$us":1796569200000000},"members":[{"subscription_bytes":'
        '{"$b64":"AAH/"},"owned":[["t",1]],"rack":null,"ok":true}],"simple":false}}'
    )
    assert text == json_text(state)
    assert json.loads(text, object_hook=_decode_bytes)["group"]["members"][0]["subscription_bytes"] == b"\x00\x01\xff"


def test_what_orjson_would_write_otherwise_is_written_as_json_does():
    # not ASCII (json escapes it), a key that is not a string, an integer past 64 bits, and
    # the control characters json escapes as \\u00XX
    for state, expected in (
        ({"group_id": "gruppe-\u00e4\U0001f600"}, '{"group_id":"gruppe-\\u00e4\\ud83d\\ude00"}'),
        ({"epochs": {3: "a"}}, '{"epochs":{"3":"a"}}'),
        ({"n": 2**70}, '{"n":1180591620717411303424}'),
        ({"s": 'a\x00\x1f\x7f\b\f\t\n"\\/'}, '{"s":"a\\u0000\\u001f\\u007f\\b\\f\\t\\n\\"\\\\/"}'),
    ):
        assert state_json(state) == expected == json_text(state)


_leaves = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.text(max_size=12)
    | st.binary(max_size=8)
    | st.datetimes(timezones=st.just(dt.UTC))
)
_states = st.recursive(
    _leaves,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(_states)
def test_any_state_the_folds_make_is_written_as_json_writes_it(state):
    assert state_json(state) == json_text(state)


def test_a_records_value_json_is_read_as_json_reads_it():
    """_parse_value (orjson, json where orjson refuses) gives what json.loads gives: nested
    values, escapes and surrogate pairs, Kafka's integer extremes, and the texts orjson alone
    refuses (NaN, a lone surrogate)."""
    from lib.replay.groups import _parse_value

    texts = [
        '{"memberId":"m-1","topicPartitions":[{"topicId":"AAAAAAAAAAAAAAAAAAAAAA","partitions":[0,3]}],"x":null}',
        '{"s":"\\u00e9\\ud83d\\ude00\\n","f":1.5e300,"t":true,"e":[]}',
        '{"min":-9223372036854775808,"max":9223372036854775807,"u16":65535,"id":"m-12345678901234567890"}',
        '{"nan":NaN,"inf":-Infinity}',
        '{"lone":"\\ud83d"}',
    ]
    for text in texts:
        got, want = _parse_value(text), json.loads(text)
        assert repr(got) == repr(want)
    assert _parse_value(texts[2])["min"] == -(2**63)
    assert _parse_value(texts[4]) == {"lone": "\ud83d"}
