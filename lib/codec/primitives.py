"""Big-endian readers and writers for Kafka's protocol primitives (spec 1.6, 2.2)."""

from __future__ import annotations

import base64
import struct

from lib.codec.errors import DecodeError

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")


def read_uvarint(buf, pos: int, end: int, max_bytes: int, what: str, at: int | None = None) -> tuple[int, int]:
    """(value, position after it) of the unsigned varint of at most `max_bytes` bytes at `pos`
    (5: int32, 10: int64); the one varint reader of the Python decode path (lib.decode.numba_bytes
    has the compiled twin). DecodeError names `what` (and position `at`) when it runs past
    `end` or is too long."""
    value = 0
    shift = 0
    limit = 7 * (max_bytes - 1)
    while True:
        if pos >= end:
            raise DecodeError(f"truncated {what}" + (f" at position {at}" if at is not None else ""))
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
        if shift > limit:
            raise DecodeError(
                f"{what} longer than {max_bytes} bytes" + (f" at position {at}" if at is not None else "")
            )


def zigzag(v: int) -> int:
    """The signed value of a zig-zag encoded varint or varlong."""
    return (v >> 1) ^ -(v & 1)


class Reader:
    """A cursor over a bytes-like object. Every read checks bounds and raises DecodeError."""

    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf, pos: int = 0, end: int | None = None):
        self.buf = buf
        self.pos = pos
        self.end = len(buf) if end is None else end

    def remaining(self) -> int:
        return self.end - self.pos

    def _need(self, n: int, what: str) -> int:
        p = self.pos
        if n < 0 or p + n > self.end:
            raise DecodeError(f"truncated {what}: need {n} bytes at position {p}, {self.end - p} left")
        self.pos = p + n
        return p

    def int8(self) -> int:
        return _I8.unpack_from(self.buf, self._need(1, "int8"))[0]

    def int16(self) -> int:
        return _I16.unpack_from(self.buf, self._need(2, "int16"))[0]

    def uint16(self) -> int:
        return _U16.unpack_from(self.buf, self._need(2, "uint16"))[0]

    def int32(self) -> int:
        return _I32.unpack_from(self.buf, self._need(4, "int32"))[0]

    def int64(self) -> int:
        return _I64.unpack_from(self.buf, self._need(8, "int64"))[0]

    def float64(self) -> float:
        return _F64.unpack_from(self.buf, self._need(8, "float64"))[0]

    def raw(self, n: int, what: str = "bytes") -> bytes:
        p = self._need(n, what)
        return bytes(self.buf[p : p + n])

    def uvarint(self) -> int:
        """Unsigned varint (no zig-zag), at most 5 bytes."""
        value, self.pos = read_uvarint(self.buf, self.pos, self.end, 5, "varint", self.pos)
        return value

    def varint(self) -> int:
        """Zig-zag signed varint (int32)."""
        return zigzag(self.uvarint())

    def uvarlong(self) -> int:
        value, self.pos = read_uvarint(self.buf, self.pos, self.end, 10, "varlong", self.pos)
        return value

    def varlong(self) -> int:
        return zigzag(self.uvarlong())

    def uuid(self) -> str:
        return uuid_text(self.raw(16, "uuid"))


def uuid_text(raw16: bytes) -> str:
    """Kafka's Uuid.toString(): URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(raw16).rstrip(b"=").decode("ascii")


def uuid_bytes(text: str) -> bytes:
    padded = text + "=" * (-len(text) % 4)
    raw = base64.urlsafe_b64decode(padded)
    if len(raw) != 16:
        raise ValueError(f"not a Kafka uuid: {text!r}")
    return raw


ZERO_UUID = uuid_text(bytes(16))


class Writer:
    """Appends Kafka primitives to a bytearray."""

    __slots__ = ("out",)

    def __init__(self):
        self.out = bytearray()

    def int8(self, v: int):
        self.out += _I8.pack(v)

    def int16(self, v: int):
        self.out += _I16.pack(v)

    def uint16(self, v: int):
        self.out += _U16.pack(v)

    def int32(self, v: int):
        self.out += _I32.pack(v)

    def int64(self, v: int):
        self.out += _I64.pack(v)

    def float64(self, v: float):
        self.out += _F64.pack(v)

    def raw(self, b: bytes):
        self.out += b

    def uvarint(self, v: int):
        self.out += encode_uvarint(v)

    def varint(self, v: int):
        self.out += encode_uvarint(((v << 1) ^ (v >> 31)) & 0xFFFFFFFF)

    def varlong(self, v: int):
        self.out += encode_uvarint(((v << 1) ^ (v >> 63)) & 0xFFFFFFFFFFFFFFFF)

    def getvalue(self) -> bytes:
        return bytes(self.out)


def encode_uvarint(v: int) -> bytes:
    out = bytearray()
    while v > 0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def encode_varint(v: int) -> bytes:
    return encode_uvarint(((v << 1) ^ (v >> 31)) & 0xFFFFFFFF)


def encode_varlong(v: int) -> bytes:
    return encode_uvarint(((v << 1) ^ (v >> 63)) & 0xFFFFFFFFFFFFFFFF)
