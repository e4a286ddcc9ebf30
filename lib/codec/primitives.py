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
        result = 0
        shift = 0
        buf, pos, end = self.buf, self.pos, self.end
        while True:
            if pos >= end:
                raise DecodeError(f"truncated varint at position {self.pos}")
            b = buf[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                break
            shift += 7
            if shift > 28:
                raise DecodeError(f"varint longer than 5 bytes at position {self.pos}")
        self.pos = pos
        return result

    def varint(self) -> int:
        """Zig-zag signed varint (int32)."""
        v = self.uvarint()
        return (v >> 1) ^ -(v & 1)

    def uvarlong(self) -> int:
        result = 0
        shift = 0
        buf, pos, end = self.buf, self.pos, self.end
        while True:
            if pos >= end:
                raise DecodeError(f"truncated varlong at position {self.pos}")
            b = buf[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                break
            shift += 7
            if shift > 63:
                raise DecodeError(f"varlong longer than 10 bytes at position {self.pos}")
        self.pos = pos
        return result

    def varlong(self) -> int:
        v = self.uvarlong()
        return (v >> 1) ^ -(v & 1)

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
