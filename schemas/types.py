"""Table column types written once, in Spark SQL DDL, and converted to Arrow for the
Python stages (mapInArrow output, the JVM-free Delta reader)."""

from __future__ import annotations

import re

import pyarrow as pa

_SIMPLE = {
    "TINYINT": pa.int8(),
    "SMALLINT": pa.int16(),
    "INT": pa.int32(),
    "BIGINT": pa.int64(),
    "BOOLEAN": pa.bool_(),
    "STRING": pa.string(),
    "BINARY": pa.binary(),
    "DOUBLE": pa.float64(),
    "TIMESTAMP": pa.timestamp("us", tz="UTC"),
    "DATE": pa.date32(),
}
_TOKEN = re.compile(r"\s*(<|>|,|:|[A-Za-z_][A-Za-z0-9_]*)")


def _tokens(ddl: str) -> list[str]:
    pos, out = 0, []
    while pos < len(ddl):
        m = _TOKEN.match(ddl, pos)
        if not m:
            if ddl[pos:].strip() == "":
                break
            raise ValueError(f"cannot parse type at {ddl[pos:]!r}")
        out.append(m.group(1))
        pos = m.end()
    return out


def arrow_type(ddl: str) -> pa.DataType:
    tokens = _tokens(ddl)
    t, rest = _parse(tokens, 0)
    if rest != len(tokens):
        raise ValueError(f"trailing tokens in type {ddl!r}")
    return t


def _parse(tokens: list[str], i: int):
    name = tokens[i].upper()
    if name in _SIMPLE:
        return _SIMPLE[name], i + 1
    if name == "ARRAY":
        assert tokens[i + 1] == "<"
        inner, j = _parse(tokens, i + 2)
        assert tokens[j] == ">"
        return pa.list_(inner), j + 1
    if name == "STRUCT":
        assert tokens[i + 1] == "<"
        j = i + 2
        fields = []
        while tokens[j] != ">":
            fname = tokens[j]
            assert tokens[j + 1] == ":"
            ftype, j = _parse(tokens, j + 2)
            fields.append(pa.field(fname, ftype))
            if tokens[j] == ",":
                j += 1
        return pa.struct(fields), j + 1
    raise ValueError(f"unknown type {tokens[i]!r}")
