"""A small description language for Kafka's versioned message schemas.

It follows the conventions of Kafka's message JSON files: a field exists in a version range
("0+", "3+", "1", "1-2"), may be nullable in a range, may be a tagged field (tag number plus
tagged range), and arrays are written "[]type" where the element is a primitive or a struct.
A message is flexible (compact strings/arrays, tagged sections) from `flexible` on.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field as dc_field
from typing import Any

NONE = "none"
# Kafka's generator reads a schema default of JSON null as "no default": the effective default
# of such a tagged field is the empty struct or array, so an explicit null differs from it and
# is written (and printed), while an absent tag reads as empty.
EMPTY = "<empty>"


def parse_range(spec: str) -> tuple[int, int]:
    """'0+' -> (0, big), '3' -> (3, 3), '1-2' -> (1, 2), 'none'/'' -> empty range."""
    if not spec or spec == NONE:
        return (1, 0)
    if spec.endswith("+"):
        return (int(spec[:-1]), 1 << 15)
    if "-" in spec:
        lo, hi = spec.split("-")
        return (int(lo), int(hi))
    return (int(spec), int(spec))


def in_range(spec_range: tuple[int, int], version: int) -> bool:
    return spec_range[0] <= version <= spec_range[1]


PRIMITIVES = {"bool", "int8", "int16", "uint16", "int32", "int64", "float64", "string", "bytes", "uuid"}


@dataclass(frozen=True)
class Field:
    name: str  # schema name as Kafka writes it, e.g. "GroupId"
    type: str  # primitive, "[]primitive", "[]Struct" or "Struct"
    versions: str = "0+"
    nullable: str = NONE
    tag: int | None = None
    tagged: str = NONE
    default: Any = None
    fields: tuple[Field, ...] = ()  # for struct types and arrays of structs

    @property
    def json_name(self) -> str:
        """Kafka's JsonConverter key: the schema name with its first letter lower-cased."""
        return self.name[:1].lower() + self.name[1:]

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element(self) -> str:
        return self.type[2:] if self.is_array else self.type

    @property
    def is_struct(self) -> bool:
        return self.element not in PRIMITIVES

    def exists_in(self, version: int) -> bool:
        return in_range(parse_range(self.versions), version)

    def nullable_in(self, version: int) -> bool:
        return in_range(parse_range(self.nullable), version)

    def tagged_in(self, version: int) -> bool:
        return self.tag is not None and in_range(parse_range(self.tagged), version)

    def default_value(self):
        """The value a field has when absent (JsonConverter omits tagged fields equal to it)."""
        if self.default == EMPTY:
            if self.is_array:
                return []
            return {f.json_name: f.default_value() for f in self.fields if f.tag is None}
        if self.default is not None:
            return self.default
        if self.is_array:
            return [] if not self.nullable_in(0) or self.tag is None else None
        return {
            "bool": False,
            "int8": 0,
            "int16": 0,
            "uint16": 0,
            "int32": 0,
            "int64": 0,
            "float64": 0.0,
            "string": "",
            "bytes": "",
            "uuid": "AAAAAAAAAAAAAAAAAAAAAA",
        }.get(self.type)


def F(
    name: str,
    type_: str,
    versions: str = "0+",
    *,
    nullable: str = NONE,
    tag: int | None = None,
    tagged: str | None = None,
    default: Any = None,
    fields: tuple = (),
) -> Field:
    if tag is not None and tagged is None:
        tagged = versions
    return Field(name, type_, versions, nullable, tag, tagged or NONE, default, tuple(fields))


@dataclass(frozen=True)
class Message:
    name: str
    valid: str  # valid versions, e.g. "0-4"
    flexible: str = NONE  # flexible versions, e.g. "4+"
    fields: tuple[Field, ...] = dc_field(default_factory=tuple)

    def valid_in(self, version: int) -> bool:
        return in_range(parse_range(self.valid), version)

    def flexible_in(self, version: int) -> bool:
        return in_range(parse_range(self.flexible), version)


def M(name: str, valid: str, flexible: str, *fields: Field) -> Message:
    return Message(name, valid, flexible, tuple(fields))
