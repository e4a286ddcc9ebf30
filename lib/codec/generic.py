"""Schema-driven reading and writing of versioned Kafka structs (schemas.dsl).

Output follows Kafka's generated JsonConverter: keys are the schema names with the first
letter lower-cased, int64 as ints, bytes as standard base64, uuids in Kafka's text form,
and tagged fields only when they differ from their default.
"""

from __future__ import annotations

import base64
from typing import Any

from lib.codec.errors import DecodeError
from lib.codec.primitives import Reader, Writer, uuid_bytes
from schemas.dsl import Field, Message


def read_message(r: Reader, message: Message, version: int) -> dict:
    return _read_struct(r, message.fields, version, message.flexible_in(version), message.name)


# (id of a fields tuple, version, flexible) -> what reading it needs, worked out once: the schema
# helpers (version ranges, names) cost more than the reading itself when run per record.
_PLANS: dict[tuple, tuple[list, dict]] = {}


def _plan(fields, version: int, flexible: bool) -> tuple[list, dict]:
    key = (id(fields), version, flexible)
    plan = _PLANS.get(key)
    if plan is None:
        plain, tagged = [], {}
        for f in fields:
            if not f.exists_in(version):
                continue
            if flexible and f.tagged_in(version):
                tagged[f.tag] = f
            else:
                plain.append((f.json_name, f))
        plan = _PLANS[key] = (plain, tagged)
        _PLANS[key + ("fields",)] = fields  # keeps the tuple (and so its id) alive
    return plan


def _read_struct(r: Reader, fields, version: int, flexible: bool, where: str) -> dict:
    out: dict = {}
    plain, tagged = _plan(fields, version, flexible)
    for name, f in plain:
        out[name] = _read_field(r, f, version, flexible, where)
    if flexible:
        count = r.uvarint()
        for _ in range(count):
            tag = r.uvarint()
            size = r.uvarint()
            start = r.pos
            if start + size > r.end:
                raise DecodeError(f"{where}: tagged field {tag} of {size} bytes runs past the end")
            f = tagged.get(tag)
            if f is not None:
                sub = Reader(r.buf, start, start + size)
                value = _read_field(sub, f, version, flexible, where, tagged=True)
                if value != f.default_value():
                    out[f.json_name] = value
            r.pos = start + size  # unknown tags are skipped
    return out


_FIELD_INFO: dict[tuple[int, int], tuple] = {}


def _info(f: Field, version: int) -> tuple:
    key = (id(f), version)
    info = _FIELD_INFO.get(key)
    if info is None:
        info = _FIELD_INFO[key] = (f.nullable_in(version), f.is_array, f.is_struct, f.element, f)
    return info


def _read_field(r: Reader, f: Field, version: int, flexible: bool, where: str, tagged: bool = False):
    nullable, is_array, is_struct, elem, _ = _info(f, version)
    if is_array:
        if flexible:
            n = r.uvarint() - 1
        else:
            n = r.int32()
        if n < 0:
            if not nullable:
                raise DecodeError(f"{where}: non-nullable field {f.name} was serialized as null")
            return None
        if n > r.remaining():
            raise DecodeError(f"{where}: array {f.name} claims {n} elements with {r.remaining()} bytes left")
        if is_struct:
            return [_read_struct(r, f.fields, version, flexible, where) for _ in range(n)]
        return [_read_primitive(r, elem, version, flexible, False, f, where) for _ in range(n)]
    if is_struct:
        if nullable:
            # untagged: int8 -1 null / 1 present; tagged: 0 null / 1 present
            marker = r.int8()
            if marker < 0 or (tagged and marker == 0):
                return None
        return _read_struct(r, f.fields, version, flexible, where)
    return _read_primitive(r, f.type, version, flexible, nullable, f, where)


def _read_primitive(r: Reader, type_: str, version: int, flexible: bool, nullable: bool, f: Field, where: str):
    if type_ == "int32":
        return r.int32()
    if type_ == "int64":
        return r.int64()
    if type_ == "string":
        n = (r.uvarint() - 1) if flexible else r.int16()
        if n < 0:
            if not nullable:
                raise DecodeError(f"{where}: non-nullable field {f.name} was serialized as null")
            return None
        raw = r.raw(n, f"string {f.name}")
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DecodeError(f"{where}: field {f.name} is not valid UTF-8: {e}") from None
    if type_ == "int16":
        return r.int16()
    if type_ == "int8":
        return r.int8()
    if type_ == "bool":
        return r.int8() != 0
    if type_ == "uint16":
        return r.uint16()
    if type_ == "uuid":
        return r.uuid()
    if type_ == "bytes":
        n = (r.uvarint() - 1) if flexible else r.int32()
        if n < 0:
            if not nullable:
                raise DecodeError(f"{where}: non-nullable field {f.name} was serialized as null")
            return None
        return base64.b64encode(r.raw(n, f"bytes {f.name}")).decode("ascii")
    if type_ == "float64":
        return r.float64()
    raise DecodeError(f"{where}: unsupported type {type_}")


# --- writing (fixtures, generators, round trips) ---------------------------------------------


def write_message(w: Writer, message: Message, version: int, data: dict) -> None:
    _write_struct(w, message.fields, version, message.flexible_in(version), data)


def encode_message(message: Message, version: int, data: dict) -> bytes:
    w = Writer()
    write_message(w, message, version, data)
    return w.getvalue()


# A struct's tagged fields given as raw bytes, [(tag, payload)], under this key of its dict: written
# among its known tagged fields, by tag, as Kafka writes back the tags a message did not know
# (its generated `_unknownTaggedFields`). For fixtures: unknown tags, or a known tag with any payload.
RAW_TAGGED_FIELDS = "_unknownTaggedFields"


def _write_struct(w: Writer, fields, version: int, flexible: bool, data: dict) -> None:
    tagged: list[tuple[int, Field | None, Any]] = []
    for f in fields:
        if not f.exists_in(version):
            continue
        value = data.get(f.json_name, f.default_value())
        if flexible and f.tagged_in(version):
            if value != f.default_value():
                tagged.append((f.tag, f, value))
            continue
        _write_field(w, f, version, flexible, value)
    if flexible:
        tagged += [(tag, None, payload) for tag, payload in data.get(RAW_TAGGED_FIELDS, ())]
        w.uvarint(len(tagged))
        for tag, f, value in sorted(tagged, key=lambda t: t[0]):
            sub = Writer()
            if f is None:
                sub.raw(value)
            else:
                _write_field(sub, f, version, flexible, value, tagged=True)
            w.uvarint(tag)
            w.uvarint(len(sub.out))
            w.raw(sub.out)


def _write_field(w: Writer, f: Field, version: int, flexible: bool, value, tagged: bool = False) -> None:
    if f.is_array:
        if value is None:
            w.uvarint(0) if flexible else w.int32(-1)
            return
        w.uvarint(len(value) + 1) if flexible else w.int32(len(value))
        for item in value:
            if f.is_struct:
                _write_struct(w, f.fields, version, flexible, item)
            else:
                _write_primitive(w, f.element, flexible, item)
        return
    if f.is_struct:
        if f.nullable_in(version):
            if value is None:
                w.int8(0 if tagged else -1)
                return
            w.int8(1)
        _write_struct(w, f.fields, version, flexible, value)
        return
    _write_primitive(w, f.type, flexible, value)


def _write_primitive(w: Writer, type_: str, flexible: bool, value) -> None:
    if type_ in ("string", "bytes"):
        if value is None:
            if flexible:
                w.uvarint(0)
            elif type_ == "string":
                w.int16(-1)
            else:
                w.int32(-1)
            return
        if type_ == "string":
            raw = value.encode("utf-8")
        elif isinstance(value, (bytes, bytearray)):
            raw = bytes(value)
        else:
            raw = base64.b64decode(value)
        if flexible:
            w.uvarint(len(raw) + 1)
        elif type_ == "string":
            w.int16(len(raw))
        else:
            w.int32(len(raw))
        w.raw(raw)
        return
    if type_ == "uuid":
        w.raw(uuid_bytes(value))
        return
    getattr(w, {"bool": "int8"}.get(type_, type_))(int(value) if type_ == "bool" else value)
