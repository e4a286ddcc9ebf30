"""The values of KIP-848 consumer groups, share groups and streams groups (the record types 3-8 and
10-23 of schemas.records) read by numba straight into value_json: the text lib.decode.rows makes of them with the
schema-driven reader (lib.codec.generic) and json.dumps, byte for byte.

Their schemas (schemas.records) are flexible: compact strings, bytes and arrays, and a tagged
section at the end of every struct. They are compiled once, here, into tables that one kernel
interprets: `STRUCTS` (per struct, its plain fields, then its tagged ones, rows of `FIELDS`),
`FIELDS` (kind, array, nullable, struct, tag, and where in `TEXT` its JSON name and, for a tagged
field, its default's JSON text are) and `ROOTS` (record type, value version -> the value's
struct). A nested struct or array of structs is a frame on the kernel's stack.

The generic reader's rules that shape the text: fields in schema order, then the tagged fields
in the order the bytes hold them, each only when it differs from its default (here: when its
text differs from the default's text, which is the same test for these JSON values); unknown
tags skipped; bytes after the value ignored. The keys (GroupId, then MemberId or
RegularExpression) are read by lib.decode.fast's record pass, as described by `KEY_STRINGS` and
`KEY_MEMBER`.

A value the generic reader would fail on (truncated, a null where none is allowed, invalid UTF-8,
an array longer than the bytes left, ...) comes out odd, and so does one it reads in a way this
kernel does not copy (a known tag twice): lib.decode.fast then hands the batch to the Python
decoder, so errors and odd cases keep one implementation."""

from __future__ import annotations

import json

import numpy as np
from numba import njit

from lib.decode.numba_bytes import (
    BASE64,
    BASE64_URL,
    NO_REFCOUNT,
    base64_into,
    copy_bytes,
    i16,
    i32,
    i64,
    u64,
    utf8_ok,
    uvarint,
)
from lib.numba_cache import use_stable_zip_cache
from schemas.dsl import Field, parse_range
from schemas.records import RECORD_TYPES, RecordType

use_stable_zip_cache(__file__)  # before the first @njit(cache=True): see lib.numba_cache

# field kinds (of the element, for an array)
INT8, INT16, UINT16, INT32, INT64, UUID, STRING, BYTES, STRUCT = range(9)
_KINDS = {
    "int8": INT8,
    "int16": INT16,
    "uint16": UINT16,
    "int32": INT32,
    "int64": INT64,
    "uuid": UUID,
    "string": STRING,
    "bytes": BYTES,
}
# rows of FIELDS (a column per field)
KIND, IS_ARRAY, NULLABLE, STRUCT_ID, TAG, NAME, NAME_LEN, DEFAULT, DEFAULT_LEN = range(9)
# rows of STRUCTS (a column per struct)
PLAIN_FIRST, PLAIN_COUNT, TAGGED_FIRST, TAGGED_COUNT = range(4)
# the kernel's stack frames: a struct being read, or an array of structs
STRUCT_FRAME, ARRAY_FRAME = 0, 1
# rows of the stack (a column per depth). A struct frame reads its plain fields (STEP counts them),
# then its tag count (LEFT: tags left), then its tags; SEEN has a bit per tagged field read, and
# while one's value is an open frame above it, TAG_FIELD, TAG_END, REWIND (where its text starts,
# comma included) and VALUE_AT (where its value's text starts). An array frame: ID its items'
# struct, LEFT the items left.
(FRAME_KIND, ID, END, STEP, LEFT, EMITTED, SEEN, TAG_FIELD, TAG_END, REWIND, VALUE_AT) = range(11)
_FRAME_ROWS = 11
OK, ODD = 0, 1


class _Unsupported(Exception):
    """A schema the kernel does not read (a bool or float64 field): its record type stays with
    Python (what the program compiled for it before this is left unused)."""


class _Program:
    def __init__(self):
        self.structs: list[list[int]] = []
        self.fields: list[list[int]] = []
        self.text = bytearray()
        self.depth = 1

    def _text(self, s: str) -> tuple[int, int]:
        raw = s.encode("utf-8")
        at = len(self.text)
        self.text += raw
        return at, len(raw)

    def struct(self, fields: tuple[Field, ...], version: int, depth: int = 1) -> int:
        """The struct's id; its fields are consecutive columns of FIELDS, plain then tagged
        (those by tag). `depth`: the stack frames open while it is read (self.depth: the most)."""
        self.depth = max(self.depth, depth)
        present = [f for f in fields if f.exists_in(version)]
        plain = [self._field(f, version, depth, False) for f in present if not f.tagged_in(version)]
        tagged = [
            self._field(f, version, depth, True)
            for f in sorted((f for f in present if f.tagged_in(version)), key=lambda f: f.tag or 0)
        ]
        if len(tagged) > 63:
            raise _Unsupported("more tagged fields than the bits of a stack frame's SEEN")
        first = len(self.fields)
        self.fields += plain + tagged
        self.structs.append([first, len(plain), first + len(plain), len(tagged)])
        return len(self.structs) - 1

    def _field(self, f: Field, version: int, depth: int, tagged: bool) -> list[int]:
        if f.is_struct:
            kind = STRUCT
            # an array of structs is two frames: the array's and its item's
            sub = self.struct(f.fields, version, depth + 1 + int(f.is_array))
        elif f.element in _KINDS:
            kind, sub = _KINDS[f.element], -1
        else:
            raise _Unsupported(f.type)
        name = self._text(json.dumps(f.json_name) + ":")
        default = self._text(_json(f.default_value())) if tagged else (0, 0)
        tag = f.tag if tagged and f.tag is not None else -1
        return [kind, int(f.is_array), int(f.nullable_in(version)), sub, tag, *name, *default]


def _json(value) -> str:
    """As lib.decode.rows writes value_json."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _compile():
    """The tables for every record type whose key is non-null strings (GroupId first), for the
    flexible versions of its value (types 0-2 have their own paths in lib.decode.fast)."""
    program = _Program()
    top = max(RECORD_TYPES) + 1
    key_strings = np.zeros(top, np.int64)
    key_member = np.full(top, -1, np.int64)
    max_version = max(
        parse_range(spec[2].valid)[1] for t, spec in RECORD_TYPES.items() if t > RecordType.GROUP_METADATA
    )
    roots = np.full((top, max_version + 1), -1, np.int64)
    for record_type, (_, key, value, _) in sorted(RECORD_TYPES.items()):
        if record_type <= RecordType.GROUP_METADATA:
            continue
        names = [f.name for f in key.fields]
        if names[0] != "GroupId" or any(f.type != "string" or f.nullable_in(0) for f in key.fields):
            continue
        lo, hi = parse_range(value.valid)
        compiled = {}
        try:
            for version in range(lo, hi + 1):
                if value.flexible_in(version):
                    compiled[version] = program.struct(value.fields, version)
        except _Unsupported:
            continue
        for version, root in compiled.items():
            roots[record_type, version] = root
        if compiled:
            key_strings[record_type] = len(names)
            key_member[record_type] = names.index("MemberId") if "MemberId" in names else -1
    structs = np.array(program.structs, np.int64).T.copy()
    fields = np.array(program.fields, np.int64).T.copy()
    text = np.frombuffer(bytes(program.text), np.uint8)
    return key_strings, key_member, roots, structs, fields, text, program.depth


KEY_STRINGS, KEY_MEMBER, ROOTS, STRUCTS, FIELDS, TEXT, DEPTH = _compile()
HEX_DIGITS = np.frombuffer(b"0123456789abcdef", np.uint8)
ALPHABETS = np.stack([BASE64, BASE64_URL])  # bytes fields, uuids


# --- writing JSON ----------------------------------------------------------------------------


@njit(cache=True)
def _grown(out, need):
    """`out` with room for at least `need` bytes (doubled): the text is written straight into it."""
    bigger = np.empty(max(2 * len(out), need), np.uint8)
    copy_bytes(bigger, 0, out, 0, len(out))
    return bigger


@njit(cache=True, **NO_REFCOUNT)
def _int_into(out, w, v):
    """The decimal text of v (int64) at out[w:], room for 20 bytes the caller's. Returns the end."""
    if v < 0:
        out[w] = 45  # "-"
        w += 1
        u = np.uint64(-(v + 1)) + np.uint64(1)  # (Long.MIN_VALUE has no int64 negation)
    else:
        u = np.uint64(v)
    digits = 1
    t = u
    while t >= np.uint64(10):
        t //= np.uint64(10)
        digits += 1
    for k in range(digits - 1, -1, -1):
        out[w + k] = np.uint8(np.uint64(48) + u % np.uint64(10))
        u //= np.uint64(10)
    return w + digits


@njit(cache=True)
def _string_into(out, w, buf, p, n, hexdigits):
    """buf[p:p + n] (valid UTF-8) as a JSON string at out[w:], escaped as json.dumps escapes
    with ensure_ascii=False: quote, backslash and control characters only. Room for 6n + 2
    bytes is the caller's. Returns the end."""
    out[w] = 34
    w += 1
    for i in range(p, p + n):
        c = buf[i]
        if c >= 0x20 and c != 34 and c != 92:
            out[w] = c
            w += 1
            continue
        out[w] = 92  # "\"
        if c == 34 or c == 92:
            out[w + 1] = c
        elif c == 8:
            out[w + 1] = 98  # b
        elif c == 9:
            out[w + 1] = 116  # t
        elif c == 10:
            out[w + 1] = 110  # n
        elif c == 12:
            out[w + 1] = 102  # f
        elif c == 13:
            out[w + 1] = 114  # r
        else:
            out[w + 1] = 117  # u00XX, lower-case hex
            out[w + 2] = 48
            out[w + 3] = 48
            out[w + 4] = hexdigits[c >> 4]
            out[w + 5] = hexdigits[c & 15]
            w += 4
        w += 2
    out[w] = 34
    return w + 1


@njit(cache=True, **NO_REFCOUNT)
def _null_into(out, w):
    out[w] = 110
    out[w + 1] = 117
    out[w + 2] = 108
    out[w + 3] = 108
    return w + 4


@njit(cache=True)
def _primitive(buf, p, end, kind, nullable, out, w, alphabets, hexdigits):
    """One primitive value at p (bytes up to `end`) as JSON at out[w:]. Returns (status, p, w, out)."""
    if kind == STRING or kind == BYTES:
        n, p, ok = uvarint(buf, p, end, 28)
        if not ok:
            return ODD, p, w, out
        n -= 1
        if n < 0:
            if not nullable:
                return ODD, p, w, out
            if w + 4 > len(out):
                out = _grown(out, w + 4)
            return OK, p, _null_into(out, w), out
        if n > end - p:
            return ODD, p, w, out
        if kind == STRING:
            if not utf8_ok(buf, p, n):
                return ODD, p, w, out
            if w + 6 * n + 2 > len(out):
                out = _grown(out, w + 6 * n + 2)
            return OK, p + n, _string_into(out, w, buf, p, n, hexdigits), out
        if w + 4 * (n // 3) + 6 > len(out):
            out = _grown(out, w + 4 * (n // 3) + 6)
        out[w] = 34
        w = base64_into(out, w + 1, buf, p, n, alphabets[0], True)  # bytes: standard base64
        out[w] = 34
        return OK, p + n, w + 1, out
    if w + 24 > len(out):
        out = _grown(out, w + 24)
    if kind == UUID:
        if p + 16 > end:
            return ODD, p, w, out
        out[w] = 34
        w = base64_into(out, w + 1, buf, p, 16, alphabets[1], False)  # Kafka's Uuid.toString
        out[w] = 34
        return OK, p + 16, w + 1, out
    size = 1 if kind == INT8 else 2 if kind == INT16 or kind == UINT16 else 4 if kind == INT32 else 8
    if p + size > end:
        return ODD, p, w, out
    if kind == INT8:
        v = np.int64(buf[p])
        if v >= 128:
            v -= 256
    elif kind == INT16:
        v = i16(buf, p)
    elif kind == UINT16:
        v = np.int64(u64(buf, p, 2))
    elif kind == INT32:
        v = i32(buf, p)
    else:
        v = i64(buf, p)
    return OK, p + size, _int_into(out, w, v), out


@njit(cache=True, **NO_REFCOUNT)
def _open(stack, d, kind, ident, end, left):
    """Frame d of the stack, a struct's or an array's (of `left` items), reading up to `end`."""
    stack[FRAME_KIND, d] = kind
    stack[ID, d] = ident
    stack[END, d] = end
    stack[LEFT, d] = left
    stack[STEP, d] = 0
    stack[EMITTED, d] = 0
    stack[SEEN, d] = 0
    stack[TAG_FIELD, d] = -1


@njit(cache=True)
def _field_value(buf, p, end, f, tagged, fields, stack, d, out, w, alphabets, hexdigits):
    """Field f's value at p (bytes up to `end`) as JSON at out[w:]: a primitive, or an array of
    them, whole; a struct or an array of structs opened as frame d + 1 of the stack (the caller's
    loop reads its items). Returns (status, p, w, out, whether a frame was opened)."""
    kind = fields[KIND, f]
    nullable = fields[NULLABLE, f] != 0
    if w + 4 > len(out):
        out = _grown(out, w + 4)
    if fields[IS_ARRAY, f]:
        n, p, ok = uvarint(buf, p, end, 28)
        if not ok:
            return ODD, p, w, out, False
        n -= 1
        if n < 0:
            if not nullable:
                return ODD, p, w, out, False
            return OK, p, _null_into(out, w), out, False
        if n > end - p:  # the generic reader's check, before any item
            return ODD, p, w, out, False
        out[w] = 91  # "["
        w += 1
        if kind == STRUCT:
            if d + 2 >= stack.shape[1]:
                return ODD, p, w, out, False
            _open(stack, d + 1, ARRAY_FRAME, fields[STRUCT_ID, f], end, n)
            return OK, p, w, out, True
        for i in range(n):
            if i:
                if w + 1 > len(out):
                    out = _grown(out, w + 1)
                out[w] = 44  # ","
                w += 1
            status, p, w, out = _primitive(buf, p, end, kind, False, out, w, alphabets, hexdigits)
            if status != OK:
                return status, p, w, out, False
        if w + 1 > len(out):
            out = _grown(out, w + 1)
        out[w] = 93  # "]"
        return OK, p, w + 1, out, False
    if kind == STRUCT:
        if nullable:
            # an int8 marker: -1 null, else present; a tagged struct's 0 is null too (lib.codec.generic)
            if p + 1 > end:
                return ODD, p, w, out, False
            marker = np.int64(buf[p])
            p += 1
            if marker >= 128 or (tagged and marker == 0):
                return OK, p, _null_into(out, w), out, False
        if d + 1 >= stack.shape[1]:
            return ODD, p, w, out, False
        _open(stack, d + 1, STRUCT_FRAME, fields[STRUCT_ID, f], end, 0)
        out[w] = 123  # "{"
        return OK, p, w + 1, out, True
    status, p, w, out = _primitive(buf, p, end, kind, nullable, out, w, alphabets, hexdigits)
    return status, p, w, out, False


@njit(cache=True, **NO_REFCOUNT)
def _tag_done(stack, d, w, out, fields, text):
    """The value of struct frame d's tagged field is written: dropped when it is the field's
    default (so is its name), counted otherwise. Returns (position after the field, w)."""
    f = stack[TAG_FIELD, d]
    stack[TAG_FIELD, d] = -1
    at = stack[VALUE_AT, d]
    n = fields[DEFAULT_LEN, f]
    same = w - at == n
    if same:
        start = fields[DEFAULT, f]
        for k in range(n):
            if out[at + k] != text[start + k]:
                same = False
                break
    if same:
        w = stack[REWIND, d]
    else:
        stack[EMITTED, d] += 1
    return stack[TAG_END, d], w


@njit(cache=True)
def _value_json(buf, p, end, root, structs, fields, text, out, w, stack, alphabets, hexdigits):  # noqa: C901 - numba kernel: a schema-driven walk of one value
    """One value, of struct `root`, as JSON at out[w:] (p: after its version; `end`: the end of
    its bytes). Returns (status, w, out)."""
    d = 0
    _open(stack, 0, STRUCT_FRAME, root, end, 0)
    if w + 1 > len(out):
        out = _grown(out, w + 1)
    out[w] = 123  # "{"
    w += 1
    while d >= 0:
        if stack[FRAME_KIND, d] == ARRAY_FRAME:
            if w + 1 > len(out):
                out = _grown(out, w + 1)
            if stack[LEFT, d] > 0:  # the next item
                if stack[EMITTED, d]:
                    out[w] = 44  # ","
                    w += 1
                stack[EMITTED, d] = 1
                stack[LEFT, d] -= 1
                if w + 1 > len(out):
                    out = _grown(out, w + 1)
                out[w] = 123  # "{"
                w += 1
                _open(stack, d + 1, STRUCT_FRAME, stack[ID, d], stack[END, d], 0)
                d += 1
                continue
            out[w] = 93  # "]"
            w += 1
        else:
            s = stack[ID, d]
            step = stack[STEP, d]
            plain = structs[PLAIN_COUNT, s]
            if step < plain:
                f = structs[PLAIN_FIRST, s] + step
                stack[STEP, d] = step + 1
                n = fields[NAME_LEN, f]
                if w + n + 1 > len(out):
                    out = _grown(out, w + n + 1)
                if step:
                    out[w] = 44  # ","
                    w += 1
                copy_bytes(out, w, text, fields[NAME, f], n)
                w += n
                status, p, w, out, opened = _field_value(
                    buf, p, stack[END, d], f, False, fields, stack, d, out, w, alphabets, hexdigits
                )
                if status != OK:
                    return status, w, out
                if opened:
                    d += 1
                continue
            if step == plain:
                count, p, ok = uvarint(buf, p, stack[END, d], 28)
                if not ok:
                    return ODD, w, out
                stack[STEP, d] = step + 1
                stack[LEFT, d] = count
                stack[EMITTED, d] = plain
                continue
            if stack[LEFT, d] > 0:
                stack[LEFT, d] -= 1
                tag, p, ok = uvarint(buf, p, stack[END, d], 28)
                if not ok:
                    return ODD, w, out
                size, p, ok = uvarint(buf, p, stack[END, d], 28)
                if not ok or size > stack[END, d] - p:
                    return ODD, w, out
                first = structs[TAGGED_FIRST, s]
                f = -1
                for t in range(first, first + structs[TAGGED_COUNT, s]):
                    if fields[TAG, t] == tag:
                        f = t
                        break
                if f < 0:  # an unknown tag: skipped
                    p += size
                    continue
                bit = np.int64(1) << (f - first)
                if stack[SEEN, d] & bit:  # the same tag again: the generic reader's dict keeps its first place
                    return ODD, w, out
                stack[SEEN, d] |= bit
                n = fields[NAME_LEN, f]
                if w + n + 1 > len(out):
                    out = _grown(out, w + n + 1)
                stack[REWIND, d] = w
                if stack[EMITTED, d]:
                    out[w] = 44  # ","
                    w += 1
                copy_bytes(out, w, text, fields[NAME, f], n)
                w += n
                stack[VALUE_AT, d] = w
                stack[TAG_END, d] = p + size
                stack[TAG_FIELD, d] = f
                # the value is read within its size (bytes it leaves are skipped)
                status, p, w, out, opened = _field_value(
                    buf, p, p + size, f, True, fields, stack, d, out, w, alphabets, hexdigits
                )
                if status != OK:
                    return status, w, out
                if opened:
                    d += 1
                else:
                    p, w = _tag_done(stack, d, w, out, fields, text)
                continue
            if w + 1 > len(out):
                out = _grown(out, w + 1)
            out[w] = 125  # "}"
            w += 1
        # frame d is closed: when it was the value of a tagged field of the frame below, that field is done
        d -= 1
        if d >= 0 and stack[FRAME_KIND, d] == STRUCT_FRAME and stack[TAG_FIELD, d] >= 0:
            p, w = _tag_done(stack, d, w, out, fields, text)
    return OK, w, out


@njit(cache=True, nogil=True)
def value_json(seg, extra, val_off, val_len, roots, structs, fields, text, depth, alphabets, hexdigits):
    """The values at (val_off, val_len) (offsets past the segment are in `extra`; each starts with
    its version), value i read as struct roots[i]. Returns (odd: a flag per value, ends, text):
    value i's JSON is text[ends[i]:ends[i + 1]], empty when odd."""
    seglen = len(seg)
    n = len(val_off)
    odd = np.zeros(n, np.bool_)
    ends = np.zeros(n + 1, np.int64)
    out = np.empty(2 * np.sum(val_len) + 64, np.uint8)
    stack = np.empty((_FRAME_ROWS, depth), np.int64)
    w = 0
    for i in range(n):
        o = val_off[i]
        buf = seg if o < seglen else extra
        p = o if o < seglen else o - seglen
        status, end, out = _value_json(
            buf, p + 2, p + val_len[i], roots[i], structs, fields, text, out, w, stack, alphabets, hexdigits
        )
        if status == OK:
            w = end
        else:
            odd[i] = True
        ends[i + 1] = w
    return odd, ends, out[:w]
