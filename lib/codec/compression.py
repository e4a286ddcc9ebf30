"""The four codecs Kafka uses on disk (spec 1.5).

cramjam reads every form Kafka accepts and raises the errors. The common form of each codec (one
complete gzip member, LZ4 frame or zstd frame) goes first through the quickest binding, which
for the small batches of an offsets log is 3-15x faster per call (cramjam's zstd builds a new
context every call): those readers answer only when the input is exactly one complete frame,
and anything else takes cramjam's path, as before."""

from __future__ import annotations

import gzip
import struct
import threading
import zlib

import cramjam
import lz4.frame
import xxhash
import zstandard

from lib.codec.errors import DecodeError
from lib.codec.primitives import read_uvarint

CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
XERIAL_MAGIC = b"\x82SNAPPY\x00"
LZ4_FRAME_MAGIC = b"\x04\x22\x4d\x18"


_local = threading.local()  # a zstd context per thread (they are not thread safe)


def _one_frame(reader, data) -> bytes | None:
    """What a streaming reader makes of `data` when that is exactly one complete frame, else None."""
    try:
        out = reader.decompress(data)
    except Exception:
        return None
    return out if reader.eof and not reader.unused_data else None


def _zstd_reader():
    ctx = getattr(_local, "zstd", None)
    if ctx is None:
        ctx = _local.zstd = zstandard.ZstdDecompressor()
    return ctx.decompressobj()


def decompress(codec: int, data, magic: int) -> bytes:
    try:
        if codec == 1:
            out = _one_frame(zlib.decompressobj(31), data)
            return out if out is not None else gzip.decompress(bytes(data))
        if codec == 2:
            out = _one_xerial_block(data)
            return out if out is not None else _xerial_snappy(bytes(data))
        if codec == 3:
            if magic != 0:
                out = _one_lz4_frame(data)
                if out is not None:
                    return out
            frame = bytes(data)
            if len(frame) > 4 and frame.startswith(LZ4_FRAME_MAGIC) and not frame[4] & 0x20:
                # Kafka's Lz4BlockInputStream refuses linked blocks (FLG.validate)
                raise DecodeError("cannot decompress lz4 data: dependent block stream is unsupported")
            if magic == 0:
                frame = _fix_lz4_header_checksum(frame)
            out = _one_frame(lz4.frame.LZ4FrameDecompressor(), frame)
            return out if out is not None else bytes(cramjam.lz4.decompress(frame))
        if codec == 4:
            if magic < 2:
                raise DecodeError("zstd compression in a magic 0/1 message (only valid in magic 2)")
            out = _one_frame(_zstd_reader(), data)
            return out if out is not None else bytes(cramjam.zstd.decompress(bytes(data)))
    except DecodeError:
        raise
    except (OSError, EOFError, zlib.error, ValueError, cramjam.DecompressionError, struct.error) as e:
        raise DecodeError(f"cannot decompress {CODEC_NAMES.get(codec, codec)} data: {e}") from None
    raise DecodeError(f"unknown compression codec id {codec}")


def _one_xerial_block(data) -> bytes | None:
    """The common snappy form (xerial framing around one raw block: what a producer writes for
    a batch under 32 KiB) in one call, else None (the general reader then reads it, or raises)."""
    if len(data) < 21 or data[:8] != XERIAL_MAGIC or int.from_bytes(data[16:20], "big") != len(data) - 20:
        return None
    claimed = shift = 0
    for k in range(20, min(25, len(data))):
        claimed |= (data[k] & 0x7F) << shift
        if data[k] < 0x80:
            break
        shift += 7
    else:
        return None
    if claimed > 22 * (len(data) - 20):  # (see _snappy_block)
        return None
    try:
        return bytes(cramjam.snappy.decompress_raw(data[20:]))
    except cramjam.DecompressionError:
        return None


def _one_lz4_frame(data) -> bytes | None:
    """One complete LZ4 frame of independent blocks, the whole of `data`, in one call (what
    _one_frame's streaming reader answers, at a third less per batch), else None."""
    if len(data) < 7 or data[:4] != LZ4_FRAME_MAGIC or not data[4] & 0x20:
        return None
    try:
        out, used = lz4.frame.decompress(data, return_bytes_read=True)
    except Exception:
        return None
    return out if used == len(data) else None


def _snappy_block(block: bytes) -> bytes:
    """One raw snappy block. It starts with its uncompressed length (uvarint), which the decoder
    allocates up front; no element expands more than 64 bytes out of 3 in, so a block claiming
    over 22 times its size is corrupt (a 6-byte block claiming 4 GiB killed a memory-limited
    worker instead of raising)."""
    try:
        claimed, _ = read_uvarint(block, 0, len(block), 5, "snappy block length")
    except DecodeError:
        claimed = 0  # cramjam rejects the block with its own words
    if claimed > 22 * len(block):
        raise DecodeError(f"snappy block of {len(block)} bytes claims {claimed} bytes uncompressed")
    return bytes(cramjam.snappy.decompress_raw(block))


def _xerial_snappy(data: bytes) -> bytes:
    """snappy-java's SnappyOutputStream framing: magic, two int32, then [int32 len][raw block]..."""
    if not data.startswith(XERIAL_MAGIC):
        return _snappy_block(data)
    pos = 16
    out = bytearray()
    while pos < len(data):
        if pos + 4 > len(data):
            raise DecodeError("truncated xerial snappy block length")
        (n,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if n < 0 or pos + n > len(data):
            raise DecodeError(f"xerial snappy block of {n} bytes runs past the end")
        out += _snappy_block(data[pos : pos + n])
        pos += n
    return bytes(out)


def _fix_lz4_header_checksum(frame: bytes) -> bytes:
    """Magic-0 writers computed the LZ4 frame descriptor checksum over the wrong bytes; Kafka
    ignores it for magic 0 (Lz4Compression.wrapForInput), so recompute it here."""
    if len(frame) < 7 or not frame.startswith(LZ4_FRAME_MAGIC):
        return frame
    flg = frame[4]
    hc_pos = 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
    if hc_pos >= len(frame):
        return frame
    hc = (xxhash.xxh32_intdigest(frame[4:hc_pos]) >> 8) & 0xFF
    return frame[:hc_pos] + bytes([hc]) + frame[hc_pos + 1 :]


def compress(codec: int, data: bytes) -> bytes:
    """For fixtures and generators: the byte streams Kafka's producers write."""
    if codec == 0:
        return data
    if codec == 1:
        return gzip.compress(data)
    if codec == 2:
        block = bytes(cramjam.snappy.compress_raw(data))
        return XERIAL_MAGIC + struct.pack(">ii", 1, 1) + struct.pack(">i", len(block)) + block
    if codec == 3:
        return lz4_frame(data)
    if codec == 4:
        return bytes(cramjam.zstd.compress(data))
    raise ValueError(f"unknown codec {codec}")


LZ4_BLOCK_SIZE = 64 * 1024


def lz4_frame(data: bytes) -> bytes:
    """An LZ4 frame as Kafka's Lz4BlockOutputStream writes it: independent 64 KiB blocks, no
    block or content checksums, an end mark. (A generic LZ4 frame links its blocks, which
    Kafka refuses to read.)"""
    flg, bd = 0x60, 0x40  # version 01, block independence; max block 64 KiB
    out = bytearray(LZ4_FRAME_MAGIC + bytes([flg, bd, (xxhash.xxh32_intdigest(bytes([flg, bd])) >> 8) & 0xFF]))
    for start in range(0, len(data), LZ4_BLOCK_SIZE):
        chunk = data[start : start + LZ4_BLOCK_SIZE]
        block = bytes(cramjam.lz4.compress_block(chunk, store_size=False))
        if len(block) >= len(chunk):
            out += struct.pack("<I", len(chunk) | 0x80000000) + chunk
        else:
            out += struct.pack("<I", len(block)) + block
    out += struct.pack("<I", 0)
    return bytes(out)
