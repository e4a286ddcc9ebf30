"""The BLAS threads of a run's processes, chosen in the environment they start with.

numpy's OpenBLAS starts a helper thread per core when numpy is imported, and each spins for a
while before it sleeps: 50-65 ms of CPU in every process that imports numpy (0.06 s of wall,
0.11-0.13 s of CPU here, against 0.06 s of both with one thread). No step of a run calls BLAS.
A run starts its processes together (the driver, the pool's fork server; Spark's JVM and its
Python workers), on the path of every run that replays, and their spinners took the cores they
wait for: make bench's 1% incremental run started its replay tasks 45 ms later with them
(median of 5 alternating runs)."""

from __future__ import annotations

import os

THREADS_VARIABLE = "OPENBLAS_NUM_THREADS"


def use_one_blas_thread() -> None:
    """One BLAS thread in this process (if numpy is not imported yet) and those it starts from
    now on, unless the operator chose a number."""
    os.environ.setdefault(THREADS_VARIABLE, "1")
