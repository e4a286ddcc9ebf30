"""Our decoder against Kafka's own: tests/data/dumplog_golden.json holds hand-built records
and the exact key/payload text Kafka's generated JsonConverters and DumpLogSegments'
offsets decoder printed for them (see the file's "source")."""

from __future__ import annotations

import json
import os

import pytest

from lib.codec.dumplog import key_and_payload

with open(os.path.join(os.path.dirname(__file__), "data", "dumplog_golden.json"), encoding="utf-8") as f:
    VECTORS = json.load(f)["vectors"]


@pytest.mark.parametrize("v", VECTORS, ids=[f"{v['id']}-{v['title']}" for v in VECTORS])
def test_same_text_as_kafkas_dump_tool(v):
    key = bytes.fromhex(v["key"])
    value = None if v["value"] is None else bytes.fromhex(v["value"])
    key_text, payload = key_and_payload(key, value, v["offset"])
    line = f"key: {key_text}" + ("" if payload is None else f" payload: {payload}")
    assert line == v["expected"]
