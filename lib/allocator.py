"""The memory pool Arrow allocates from in a run's processes, chosen in the environment they
start with (ARROW_DEFAULT_MEMORY_POOL, read by each process at its first allocation).

pyarrow's default, mimalloc, backs its memory with transparent huge pages here, and a run's tasks
run in processes forked for each run: each 2 MiB page such a process first touches, the kernel
zeroes whole (clear_page_erms under do_huge_pmd_anonymous_page, from mimalloc's
mi_page_free_list_extend: a quarter of the tasks' CPU in a profile of make bench's 1% incremental
run). Measured on make bench's log, each run its own process: the 1% incremental run's replay
tasks spent 0.36-0.69 s of system time each on mimalloc, 0.05-0.09 s on jemalloc or the system
allocator (whose tasks hold no huge page); the full run's tasks 6.0-8.4 s on mimalloc, 2.8-2.9 s
on jemalloc, whose user time stayed within mimalloc's (32.8-33.1 s against 31.1-35.9 s) where the
system allocator's grew (35.7-37.0 s)."""

from __future__ import annotations

import os

POOL_VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"
POOL = "jemalloc"


def use_run_allocator() -> None:
    """jemalloc as Arrow's pool in the processes this one starts from now on (the local pool's
    fork server and its tasks, Spark's JVM and its Python workers), unless the operator chose a
    pool, or this pyarrow was built without jemalloc. This process keeps the pool it has: pyarrow
    picks it when imported."""
    if POOL_VARIABLE in os.environ:
        return
    if built_with_jemalloc():
        os.environ[POOL_VARIABLE] = POOL


def built_with_jemalloc() -> bool:
    """Whether this pyarrow has jemalloc, as the build configuration it installs says
    (include/arrow/util/config.h), read without importing pyarrow: a run's fork server starts
    after this, and pyarrow's import (70-130 ms here) held it up, on an incremental run's
    critical path. Asked of pyarrow itself where that file is not installed."""
    import importlib.util

    spec = importlib.util.find_spec("pyarrow")
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        try:
            with open(os.path.join(folder, "include", "arrow", "util", "config.h")) as f:
                return any(line.split() == ["#define", "ARROW_JEMALLOC"] for line in f)
        except OSError:
            continue
    import pyarrow as pa

    return POOL in pa.supported_memory_backends()
