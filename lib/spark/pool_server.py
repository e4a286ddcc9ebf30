"""The local pool's fork server's preparation (lib.spark.local_jobs), done by importing this
module: multiprocessing's fork server runs nothing before its first fork but the imports it is
given (set_forkserver_preload), so this module, unlike the rest of lib, acts when imported. Only
the fork server imports it; every pool process forked after starts with what it did:

- the tasks' modules imported and numba's CPU target set up (lib.spark.daemon.preload), once
  instead of in each pool process (its target 0.2 s of CPU a process): without the registries
  that serve compiling only, which a compilation loads itself; kernels load from the cache with
  the target's runtime alone (_cache_loads_without_registries: 50-60 ms of the server's
  0.55-0.6 s, on the path of every run that replays, and as much in each worker of a full run);
- pandas kept out (lib.kept_out): pyarrow imports it on its first array conversion, only to
  tell whether an object is a pandas one (0.2-0.3 s of the server's CPU before its first fork,
  on the path of every run that replays); no task uses it. So is cffi, which numba imports
  only to type cffi functions (none here) and which built its C parser then (35 ms);
- the kernels every run's tasks call loaded from numba's cache (lib.spark.daemon.POOL_KERNELS:
  0.2 s here instead of in each pool process);
- the garbage collector off while it loads: its passes over the objects the imports make (full
  ones among them) were 60-100 ms of the 0.85 s of CPU a run's first task waits for; what is
  loaded is then frozen out of it (lib.spark.daemon.prepare says why) and it runs again;
- numba's events on llvmlite's lock off while it loads: numba has llvmlite call two Python
  functions around each of its calls into LLVM, to time compilations; loading the kernels from
  the cache makes some 7,000 such calls (35 ms of what is now 0.7 s). They are on again
  before the first fork."""

from __future__ import annotations

import contextlib
import gc
import sys

from lib.kept_out import KeptOut

# PRELOAD's modules this server does not import: pandas (kept out), and Arrow's group_by with
# the dataset layer it imports (no task of the pool calls them: 8-10 ms of its preparation)
WITHOUT = ("pandas", "pyarrow.pandas_compat", "pyarrow.dataset", "pyarrow.acero")
KEPT_OUT = ("pandas", "cffi")  # packages not importable in the pool's processes


def prepare_server() -> list[str]:
    """What the fork server does once before it forks: the names of what failed to load (each
    fails again, with its reason, in the task that needs it)."""
    from lib.spark.daemon import POOL_KERNELS, PRELOAD, load_cached_kernels, preload

    if not any(isinstance(f, KeptOut) for f in sys.meta_path):
        KeptOut(KEPT_OUT).install()  # (pyarrow then converts without pandas, numba types without cffi)
    gc.disable()
    try:
        _cache_loads_without_registries()
        with _llvm_lock_callbacks_off():
            failed = preload(tuple(m for m in PRELOAD if m not in WITHOUT), registries=False)
            load_cached_kernels(only=POOL_KERNELS)
    finally:
        gc.freeze()
        gc.enable()
    return failed


def _cache_loads_without_registries() -> None:
    """numba loads a kernel from its cache after refreshing its CPU target whole: its runtime
    (NRT), which the kernels call, and its registries (the lowering and typing of numba's
    built-ins, a hundred modules imported and installed), which serve compiling only. In this
    server and the processes it forks, the runtime only: the server's kernels and those a full
    run's tasks load later (make bench's full run loaded the registries in each of its
    processes: 60 ms of CPU and 30 MB each). A compilation refreshes the target whole itself
    (numba.core.compiler.CompilerBase). Uses numba's internals: anything unexpected leaves numba
    as it is."""
    try:
        from numba.core.caching import Cache
        from numba.core.runtime import rtsys
    except Exception:
        return
    if not (hasattr(Cache, "_load_overload") and hasattr(Cache, "_guard_against_spurious_io_errors")):
        return

    def load_overload(self, sig, target_context):
        rtsys.initialize(target_context)
        with self._guard_against_spurious_io_errors():
            return self._load_overload(sig, target_context)

    setattr(Cache, "load_overload", load_overload)  # noqa: B010 - (a method replaced: mypy allows it so)


@contextlib.contextmanager
def _llvm_lock_callbacks_off():
    """llvmlite's lock without the callbacks registered on it (numba's timing events, which
    numba.core.base registers when imported: imported here first) for the duration; any
    registered meanwhile are kept after them. Uses llvmlite's internals: anything unexpected
    changes nothing."""
    try:
        import numba.core.base  # noqa: F401 - (registers numba's callbacks, held back from here)
        from llvmlite.binding import ffi

        callbacks = ffi.lib._lock._cblist
        assert isinstance(callbacks, list)
    except Exception:
        yield
        return
    held = list(callbacks)
    callbacks.clear()
    try:
        yield
    finally:
        callbacks[:] = held + callbacks


prepare_server()
