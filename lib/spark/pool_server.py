"""The local pool's fork server's preparation (lib.spark.local_jobs), done by importing this
module: multiprocessing's fork server runs nothing before its first fork but the imports it is
given (set_forkserver_preload), so this module, unlike the rest of lib, acts when imported. Only
the fork server imports it; every pool process forked after starts with what it did:

- the tasks' modules imported and numba's CPU target set up (lib.spark.daemon.preload), once
  instead of in each pool process (its target 0.2 s of CPU a process);
- pandas kept out: pyarrow imports it on its first array conversion, only to tell whether an
  object is a pandas one (0.2-0.3 s of the server's CPU before its first fork, on the path of
  every run that replays); no task uses it. So is cffi, which numba imports only to type cffi
  functions (none here) and which built its C parser then (35 ms);
- the kernels every run's tasks call loaded from numba's cache (lib.spark.daemon.POOL_KERNELS:
  0.2 s here instead of in each pool process);
- what is loaded frozen out of the garbage collector (lib.spark.daemon.prepare says why)."""

from __future__ import annotations

import gc
import importlib.abc
import sys

WITHOUT = ("pandas", "pyarrow.pandas_compat")  # (PRELOAD's modules this server does not import)
KEPT_OUT = ("pandas", "cffi")  # packages not importable in the pool's processes


class KeptOut(importlib.abc.MetaPathFinder):
    """pandas and cffi not importable here: pyarrow then converts without pandas, and numba
    types without cffi, as where they are not installed."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname.partition(".")[0] in KEPT_OUT:
            raise ModuleNotFoundError(
                f"No module named {fullname!r} (not in the local pool's processes)", name=fullname
            )
        return None


def prepare_server() -> list[str]:
    """What the fork server does once before it forks: the names of what failed to load (each
    fails again, with its reason, in the task that needs it)."""
    from lib.spark.daemon import POOL_KERNELS, PRELOAD, load_cached_kernels, preload

    if not any(isinstance(f, KeptOut) for f in sys.meta_path):
        sys.meta_path.insert(0, KeptOut())
    failed = preload(tuple(m for m in PRELOAD if m not in WITHOUT))
    load_cached_kernels(only=POOL_KERNELS)
    gc.freeze()
    return failed


prepare_server()
