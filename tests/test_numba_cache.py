"""lib.numba_cache's lazy loading of cached kernels: the symbols a kernel defines read from its
object code instead of from the LLVM bitcode cached beside it, which is parsed only when a new
compilation links the kernel in. Each case runs in a fresh interpreter (this one has loaded its
kernels already)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from lib.numba_cache import elf_defined_symbols

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(code: str, cwd: str = REPO, path: str = REPO) -> dict:
    env = dict(os.environ, PYTHONPATH=path)
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=cwd, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_every_cached_kernel_defines_in_its_object_code_the_symbols_of_its_bitcode():
    """For every kernel of lib in make setup's cache (each signature), the names read from the
    object code's symbol table are the names numba reads from the bitcode it parses: the
    functions and globals its module defines."""
    got = _run(
        """
        import json
        import llvmlite.binding as ll
        from numba.core.codegen import CPUCodeLibrary
        from lib.numba_cache import elf_defined_symbols
        from lib.spark import daemon

        numba_unserialize = CPUCodeLibrary._unserialize.__func__
        seen = []

        def recording(cls, codegen, state):
            name, kind, data = state
            if kind == "object":
                module = ll.parse_bitcode(data[1])
                defined = {g.name for gs in (module.functions, module.global_variables) for g in gs
                           if not g.is_declaration}
                seen.append((name, sorted(defined), sorted(elf_defined_symbols(data[0]) or ())))
            return numba_unserialize(cls, codegen, state)

        daemon.preload(registries=False)  # (installs the lazy loading: numba's own is recorded instead)
        CPUCodeLibrary._unserialize = classmethod(recording)
        loaded = daemon.load_cached_kernels()
        print(json.dumps({"loaded": loaded, "libraries": len(seen),
                          "differ": [n for n, a, b in seen if a != b], "empty": [n for n, a, _ in seen if not a]}))
        """
    )
    assert got["loaded"] >= 100 and got["libraries"] == got["loaded"]
    assert got["differ"] == [] and got["empty"] == []


def test_a_kernel_loaded_lazily_runs_and_links_into_one_compiled_after(tmp_path):
    """A kernel cached by one process and loaded by another with the lazy loading: it runs, its
    bitcode is left unparsed, and a kernel compiled after that calls it parses it to link it in
    and gives the right answer."""
    (tmp_path / "kernels.py").write_text(
        textwrap.dedent(
            """
            from numba import njit

            @njit(cache=True)
            def triple_plus_one(x):
                return x * 3 + 1
            """
        )
    )
    first = _run(
        """
        import json, kernels
        print(json.dumps({"value": kernels.triple_plus_one(2),
                          "misses": sum(kernels.triple_plus_one.stats.cache_misses.values())}))
        """,
        cwd=str(tmp_path),
        path=f"{tmp_path}{os.pathsep}{REPO}",
    )
    assert first == {"value": 7, "misses": 1}  # (compiled and cached)
    second = _run(
        """
        import json
        from numba import njit
        from lib.numba_cache import load_object_code_lazily
        load_object_code_lazily()
        import kernels
        value = kernels.triple_plus_one(2)
        library = next(iter(kernels.triple_plus_one.overloads.values())).library
        unparsed = library._shared_module is None and "_lazy_bitcode" in library.__dict__

        @njit
        def calls_it(x):
            return kernels.triple_plus_one(x) + 100

        print(json.dumps({"value": value, "hits": sum(kernels.triple_plus_one.stats.cache_hits.values()),
                          "unparsed": unparsed, "linked": calls_it(5),
                          "parsed": library._shared_module is not None}))
        """,
        cwd=str(tmp_path),
        path=f"{tmp_path}{os.pathsep}{REPO}",
    )
    assert second == {"value": 7, "hits": 1, "unparsed": True, "linked": 116, "parsed": True}


def test_symbols_of_anything_but_an_elf_object_are_none():
    """Not ELF (or not 64-bit little-endian, or cut short): None, and numba loads it its own way."""
    assert elf_defined_symbols(b"") is None
    assert elf_defined_symbols(b"\xcf\xfa\xed\xfe" + bytes(60)) is None  # (Mach-O)
    assert elf_defined_symbols(b"\x7fELF\x01\x01" + bytes(58)) is None  # (32-bit)
    header = bytearray(b"\x7fELF\x02\x01" + bytes(58))
    header[0x28:0x30] = (1 << 20).to_bytes(8, "little")  # (section headers past the end)
    header[0x3A:0x3E] = (64).to_bytes(2, "little") + (3).to_bytes(2, "little")
    assert elf_defined_symbols(bytes(header)) is None
