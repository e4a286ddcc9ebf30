"""numba's on-disk cache: for kernels imported from a zip (spark-submit --py-files), and how a
process loads a kernel from it (load_object_code_lazily, below).

numba keys a zipped module's cache folder by the zip's own location, and Spark copies the zip
into a new folder for every application: each executor would compile every kernel again in
every application (about 10 s of CPU). StableZipCacheLocator keys the folder by the module's
path inside the zip instead; numba's index still checks each entry against a hash of the
module's source, so a changed zip recompiles, an unchanged one loads."""

from __future__ import annotations

import hashlib
import posixpath
import struct

from numba.core import config
from numba.core.caching import ZipCacheLocator

# numba's own locators (numba.core.caching.CacheImpl._locator_classes), ours in place of the zip one
LOCATORS = (
    "UserProvidedCacheLocator,InTreeCacheLocator,UserWideCacheLocator,IPythonCacheLocator,"
    "lib.numba_cache.StableZipCacheLocator"
)


class StableZipCacheLocator(ZipCacheLocator):
    @classmethod
    def get_suitable_cache_subpath(cls, py_file):
        _, internal = cls._split_zip_path(py_file)
        folder = posixpath.dirname(internal)
        digest = hashlib.sha1(folder.encode()).hexdigest()
        return "offsets_lake_zip_" + folder.replace("/", "_") + "_" + digest


def use_stable_zip_cache(module_file: str) -> None:
    """Called by a kernel module before its first @njit(cache=True): when it was imported
    from a zip and nobody chose locators (NUMBA_CACHE_LOCATOR_CLASSES), use ours."""
    # numba.core.config sets its attributes at run time (from NUMBA_* variables)
    if ".zip" in module_file and not getattr(config, "CACHE_LOCATOR_CLASSES", ""):
        setattr(config, "CACHE_LOCATOR_CLASSES", LOCATORS)  # noqa: B010


# --- loading a cached kernel -------------------------------------------------------------------------


def elf_defined_symbols(obj: bytes) -> set[str] | None:
    """The names of the symbols an ELF64 little-endian object defines (functions and data,
    global or local, not sections or files), from its symbol table; None when `obj` is not
    such an object, or not one this reads whole."""
    try:
        if obj[:6] != b"\x7fELF\x02\x01":
            return None
        (shoff,) = struct.unpack_from("<Q", obj, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", obj, 0x3A)
        names: set[str] = set()
        for i in range(shnum):
            section = shoff + i * shentsize
            if struct.unpack_from("<I", obj, section + 4)[0] != 2:  # SHT_SYMTAB
                continue
            offset, size = struct.unpack_from("<QQ", obj, section + 0x18)
            (link,) = struct.unpack_from("<I", obj, section + 0x28)
            (entsize,) = struct.unpack_from("<Q", obj, section + 0x38)
            strings_at, strings_size = struct.unpack_from("<QQ", obj, shoff + link * shentsize + 0x18)
            strings = obj[strings_at : strings_at + strings_size]
            for k in range(size // entsize):
                name, info, _, index = struct.unpack_from("<IBBH", obj, offset + k * entsize)
                # (index 0: undefined, a symbol the object uses; types 3 and 4: a section, a file)
                if index == 0 or name == 0 or info & 0xF in (3, 4):
                    continue
                names.add(strings[name : strings.index(b"\0", name)].decode())
        return names
    except (struct.error, ValueError, UnicodeDecodeError):
        return None


def load_object_code_lazily() -> None:
    """numba caches a kernel as its object code and, beside it, its LLVM bitcode: the module
    that kernels compiled later link in when they call it. Loading a kernel parses that bitcode
    (llvmlite's parse_bitcode) only to list the symbols the kernel defines, 4-5 ms a kernel:
    113 of the local pool's fork server's 0.6 s of CPU before a run's first task, 0.38 s for the
    151 kernels of Spark's daemon. Here the symbols come from the object code's own symbol table
    (the same names for every cached kernel of lib, checked in tests/test_numba_cache.py; 6 ms for
    all 151) and the bitcode is parsed if a compilation links the kernel in. Uses numba's
    internals: anything unexpected leaves numba as it is; an object that is not ELF loads as
    numba loads it."""
    try:
        import llvmlite.binding as ll
        from numba.core.codegen import CPUCodeLibrary, JitEngine
    except Exception:
        return
    unserialize = CPUCodeLibrary.__dict__.get("_unserialize")
    linking = CPUCodeLibrary.__dict__.get("_get_module_for_linking")
    if (
        not isinstance(unserialize, classmethod)
        or getattr(unserialize.__func__, "_lazy", False)
        or linking is None
        or not hasattr(JitEngine, "_load_defined_symbols")
    ):
        return
    numba_unserialize = unserialize.__func__

    def _unserialize(cls, codegen, state):
        name, kind, data = state
        symbols = elf_defined_symbols(data[0]) if kind == "object" else None
        if symbols is None:
            return numba_unserialize(cls, codegen, state)
        object_code, bitcode = data
        library = codegen.create_library(name)
        assert isinstance(library, cls)
        library.enable_object_caching()
        library._set_compiled_object(object_code)
        library._lazy_bitcode = bitcode
        library._finalize_final_module()
        codegen._engine._defined_symbols |= symbols
        return library

    def _get_module_for_linking(self):
        bitcode = self.__dict__.pop("_lazy_bitcode", None)
        if bitcode is not None and self._shared_module is None:
            self._shared_module = ll.parse_bitcode(bitcode)
        return linking(self)

    _unserialize._lazy = True  # type: ignore[attr-defined]
    setattr(CPUCodeLibrary, "_unserialize", classmethod(_unserialize))  # noqa: B010 - (numba's, replaced)
    setattr(CPUCodeLibrary, "_get_module_for_linking", _get_module_for_linking)  # noqa: B010
