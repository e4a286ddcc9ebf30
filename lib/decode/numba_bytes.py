"""Byte helpers for numba kernels: big-endian and varint readers, strict UTF-8 strings, base64,
and a memcpy.

A memcpy: Slice assignment (`out[a:a + n] = buf[b:b + n]`) costs about
30 ns per call in numba, most of a row's cost when the rows are short strings (keys, group ids,
topics); the LLVM memcpy this emits costs a few. An intrinsic, so the kernels that use it stay
in numba's on-disk cache (a ctypes memcpy would not)."""

from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from lib.numba_cache import use_stable_zip_cache

use_stable_zip_cache(__file__)  # before the first @njit(cache=True): see lib.numba_cache

# njit options of a helper a kernel calls per row or item: numba's reference counting off
# (`_nrt`, which numba's stubs do not name). With it on, every array argument is counted in and
# out of every call, several times the cost of a short copy or string read; such a helper must
# then allocate nothing. Not inline="always" either: numba inlines such a helper into its
# caller's IR, where each array argument becomes a variable counted in and out (two atomic
# operations) at every call: the varint and string readers below did that per record, about
# half of _records' time (perf; 0.36 -> 0.19 s per 2M records). As separate functions without
# counting, LLVM still inlines them.
NO_REFCOUNT: dict[str, Any] = {"_nrt": False}


@intrinsic
def copy_bytes(typingctx, dst, dst_at, src, src_at, n):
    """dst[dst_at:dst_at + n] = src[src_at:src_at + n] for 1-d uint8 arrays; no bounds checks
    (the caller's are the only ones, as for every index in these kernels)."""
    for a in (dst, src):
        if not (isinstance(a, types.Array) and a.ndim == 1 and a.dtype == types.uint8 and a.layout == "C"):
            return None  # a typing error: only contiguous byte arrays have one base pointer
    sig = types.void(dst, types.intp, src, types.intp, types.intp)

    def codegen(context, builder, signature, args):
        d, d_at, s, s_at, count = args
        d_array = context.make_array(signature.args[0])(context, builder, d)
        s_array = context.make_array(signature.args[2])(context, builder, s)
        cgutils.raw_memcpy(builder, builder.gep(d_array.data, [d_at]), builder.gep(s_array.data, [s_at]), count, 1)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def load_u64(typingctx, src, at):
    """The 8 bytes src[at:at + 8] as one uint64 in the machine's byte order, from any alignment
    (no bounds check). For hashing and comparing byte strings a word at a time."""
    if not (isinstance(src, types.Array) and src.ndim == 1 and src.dtype == types.uint8 and src.layout == "C"):
        return None
    sig = types.uint64(src, types.intp)

    def codegen(context, builder, signature, args):
        s, s_at = args
        s_array = context.make_array(signature.args[0])(context, builder, s)
        ptr = builder.bitcast(builder.gep(s_array.data, [s_at]), ir.IntType(64).as_pointer())
        return builder.load(ptr, align=1)

    return sig, codegen


@intrinsic
def load_be(typingctx, src, at, width):
    """The big-endian unsigned integer of src[at:at + width] (width 2, 4 or 8, a literal), one
    load and a byte swap."""
    if not (isinstance(src, types.Array) and src.ndim == 1 and src.dtype == types.uint8 and src.layout == "C"):
        return None
    if not isinstance(width, types.IntegerLiteral):
        return None
    w = width.literal_value * 8
    sig = types.uint64(src, types.intp, width)

    def codegen(context, builder, signature, args):
        s, s_at, _ = args
        s_array = context.make_array(signature.args[0])(context, builder, s)
        ptr = builder.bitcast(builder.gep(s_array.data, [s_at]), ir.IntType(w).as_pointer())
        v = builder.load(ptr, align=1)
        v = builder.bswap(v)
        return builder.zext(v, ir.IntType(64)) if w < 64 else v

    return sig, codegen


def _has_sse42() -> bool:
    """Whether this CPU has SSE 4.2's CRC32 instruction (as LLVM sees the host: numba compiles,
    and keys its cache, for the host CPU)."""
    try:
        from llvmlite import binding

        return bool(binding.get_host_cpu_features().get("sse4.2"))
    except Exception:  # not x86, or llvmlite cannot tell: the table-driven CRC
        return False


HARDWARE_CRC32C = _has_sse42()


@intrinsic
def crc32c_u64(typingctx, crc, word):
    """SSE 4.2's CRC32 (Castagnoli polynomial, reflected) of the running value `crc` and 8
    bytes `word` (as loaded by load_u64: little-endian order, as the instruction reads memory).
    Only where HARDWARE_CRC32C holds."""
    sig = types.uint64(types.uint64, types.uint64)

    def codegen(context, builder, signature, args):
        fnty = ir.FunctionType(ir.IntType(64), [ir.IntType(64), ir.IntType(64)])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.x86.sse42.crc32.64.64")
        return builder.call(fn, list(args))

    return sig, codegen


@intrinsic
def crc32c_u8(typingctx, crc, byte):
    """SSE 4.2's CRC32 of the running value `crc` (uint32) and one byte (uint8)."""
    sig = types.uint32(types.uint32, types.uint8)

    def codegen(context, builder, signature, args):
        fnty = ir.FunctionType(ir.IntType(32), [ir.IntType(32), ir.IntType(8)])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.x86.sse42.crc32.32.8")
        return builder.call(fn, list(args))

    return sig, codegen


def _skip_blas_probe() -> None:
    """numba probes for scipy's BLAS when it first loads a kernel (numba.np.arraymath imports
    scipy.linalg: 0.2 s in every new Spark worker). These kernels use no BLAS, so the probe is
    answered "none" while that module loads; numba's linear algebra itself still finds BLAS
    (ensure_blas is put back)."""
    import sys

    if "numba.np.arraymath" in sys.modules:
        return
    import numba.np.linalg as linalg

    real = linalg.ensure_blas

    def no_blas():
        raise ImportError("not probed")

    linalg.ensure_blas = no_blas
    try:
        import numba.np.arraymath  # noqa: F401
    finally:
        linalg.ensure_blas = real


_skip_blas_probe()


# --- big-endian readers (no bounds checks: the callers' are the only ones) -------------------


@njit(cache=True, **NO_REFCOUNT)
def u64(buf, p, n):
    v = np.uint64(0)
    for k in range(n):
        v = (v << np.uint64(8)) | np.uint64(buf[p + k])
    return v


@njit(cache=True, **NO_REFCOUNT)
def i64(buf, p):
    return np.int64(load_be(buf, p, 8))


@njit(cache=True, **NO_REFCOUNT)
def i32(buf, p):
    v = np.int64(load_be(buf, p, 4))
    return v - 4294967296 if v >= 2147483648 else v


@njit(cache=True, **NO_REFCOUNT)
def i16(buf, p):
    v = np.int64(load_be(buf, p, 2))
    return v - 65536 if v >= 32768 else v


@njit(cache=True, **NO_REFCOUNT)
def uvarint(buf, pos, end, maxshift):
    """(value, new position, ok) of the unsigned varint at pos: as lib.codec's loops, failing where
    they raise (past `end`, or longer than `maxshift` allows: 28 for an int32, 56 for an int64)."""
    v = np.int64(0)
    shift = 0
    while True:
        if pos >= end:
            return np.int64(0), pos, False
        b = np.int64(buf[pos])
        pos += 1
        v |= (b & 0x7F) << shift
        if b < 0x80:
            return v, pos, True
        shift += 7
        if shift > maxshift:
            return np.int64(0), pos, False


_HIGH_BITS = np.uint64(0x8080808080808080)


@njit(cache=True, **NO_REFCOUNT)
def utf8_ok(buf, p, n):
    """Strict UTF-8 as Python's decoder checks it (no overlongs, surrogates or > U+10FFFF)."""
    i = p
    end = p + n
    while i < end:
        while i + 8 <= end and load_u64(buf, i) & _HIGH_BITS == 0:
            i += 8  # eight ASCII bytes at once (ids, hosts and topics mostly are)
        if i >= end:
            break
        c = buf[i]
        if c < 0x80:
            i += 1
            continue
        if c < 0xC2:
            return False
        if c < 0xE0:
            need = 1
            lo = 0x80
            hi = 0xBF
        elif c < 0xF0:
            need = 2
            lo = 0xA0 if c == 0xE0 else 0x80
            hi = 0x9F if c == 0xED else 0xBF
        elif c < 0xF5:
            need = 3
            lo = 0x90 if c == 0xF0 else 0x80
            hi = 0x8F if c == 0xF4 else 0xBF
        else:
            return False
        if i + need >= end:
            return False
        s = buf[i + 1]
        if s < lo or s > hi:
            return False
        for k in range(2, need + 1):
            s = buf[i + k]
            if s < 0x80 or s > 0xBF:
                return False
        i += need + 1
    return True


@njit(cache=True, **NO_REFCOUNT)
def string16(buf, p, end, nullable):
    """(start, length, next position, ok) of an int16-length UTF-8 string ending by `end`. A
    negative length is a null (as Kafka reads it): length -1, ok only when `nullable`."""
    if p + 2 > end:
        return 0, -1, p, False
    n = i16(buf, p)
    p += 2
    if n < 0:
        return 0, -1, p, nullable
    if p + n > end or not utf8_ok(buf, p, n):
        return 0, -1, p, False
    return p, n, p + n, True


# base64 alphabets, for base64_into (kernels take them as arguments)
BASE64 = np.frombuffer(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", dtype=np.uint8)
BASE64_URL = np.frombuffer(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", dtype=np.uint8)


@njit(cache=True, **NO_REFCOUNT)
def base64_into(out, w, src, p, n, alphabet, pad):
    """The base64 text of src[p:p + n] at out[w:] (room for it is the caller's): with "=" padding
    when `pad` (Python's b64encode), without (Kafka's Uuid.toString). Returns the end."""
    for _ in range(n // 3):
        v = (np.int64(src[p]) << 16) | (np.int64(src[p + 1]) << 8) | np.int64(src[p + 2])
        out[w] = alphabet[v >> 18]
        out[w + 1] = alphabet[(v >> 12) & 63]
        out[w + 2] = alphabet[(v >> 6) & 63]
        out[w + 3] = alphabet[v & 63]
        p += 3
        w += 4
    rest = n % 3
    if rest:
        v = np.int64(src[p]) << 16
        if rest == 2:
            v |= np.int64(src[p + 1]) << 8
        out[w] = alphabet[v >> 18]
        out[w + 1] = alphabet[(v >> 12) & 63]
        w += 2
        if rest == 2:
            out[w] = alphabet[(v >> 6) & 63]
            w += 1
        if pad:
            for _ in range(3 - rest):
                out[w] = 61  # "="
                w += 1
    return w
