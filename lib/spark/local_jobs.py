"""The replay's and the lag stage's Python tasks in a pool of local processes, for a run on a
local master: the same tasks (lib.lake.tasks), the same typed seams and the same commits,
without starting a JVM.

On a local master Spark runs those tasks in Python workers on this machine anyway; its JVM only
schedules them. Its start-up takes both cores for 2-3 s, more than a small run's work (make
bench's 1% incremental run: 5.2 s here against 9.0 s on Spark), and a full run pays it too (26-29
s against 31-32 s). The job runs its tasks here for a log dir on local disk on a local master
(jobs.replay_offsets --executor auto, the default) and on Spark for a cluster master, an object
store or a live cluster.

The pool's processes fork from a server that has imported the tasks' modules and loaded their
kernels once (lib.spark.pool_server), with string hashing seeded as pyspark
seeds its workers'. They are reused from job to job, as Spark reuses its Python workers. A task's
exception reaches the driver as it was raised (a WorkerError's text included, so
raising_worker_errors reads it as from Spark); a worker that dies fails the job
(BrokenProcessPool), before anything is committed."""

from __future__ import annotations

import multiprocessing
import os
import re
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def local_parallelism(master: str) -> int | None:
    """The task slots of a local master (local, local[N], local[*], local[N,F]); None for any
    other master."""
    if master == "local":
        return 1
    m = re.fullmatch(r"local\[(\*|\d+)(?:,\d+)?\]", master)
    if m is None:
        return None
    return (os.cpu_count() or 1) if m.group(1) == "*" else max(1, int(m.group(1)))


def _prepare_worker(driver: int) -> None:
    """In each pool process, once: what it allocated since its fork frozen out of the garbage
    collector (the fork server prepared the rest: lib.spark.pool_server), and a watch on the
    driver: a pool process holds its own queue's pipes, so it would wait on them for ever once
    the driver is gone (killed: the run's lock is taken over by the next run, its processes
    must not stay)."""
    import gc
    import select

    gc.freeze()
    try:
        watched = os.pidfd_open(driver)
    except ProcessLookupError:  # the driver already gone
        os._exit(1)
    except (AttributeError, OSError):  # (not Linux: no watch)
        return

    def watch() -> None:
        select.select([watched], [], [])  # readable once the driver has exited
        os._exit(1)

    threading.Thread(target=watch, name="driver-watch", daemon=True).start()


_tracker_started = False  # (it serves this process for its life: its start's fd juggling once)


def _start_resource_tracker() -> None:
    """multiprocessing's resource tracker (it unlinks the pool's named semaphores should this
    process die) started with its stderr on /dev/null: all it would say is, after a killed run,
    that it cleans up the semaphores the run left ("There appear to be 5 leaked semaphore
    objects"), the last line of the run's stderr instead of what killed it. The pool's
    processes keep this process's stderr."""
    global _tracker_started
    if _tracker_started:
        return
    from multiprocessing import resource_tracker

    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        resource_tracker.ensure_running()
        _tracker_started = True
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def start_fork_server() -> None:
    """The pool's fork server, a new interpreter, started now (its preparation,
    lib.spark.pool_server: the tasks' modules and kernels, about 0.7 s of CPU, under way beside
    the driver's work) with the hash seed
    pyspark gives its workers (this process's environment as it was after). A job starts it
    before it knows whether it has work (stop_fork_server if not); a pool started later uses
    it."""
    from multiprocessing import forkserver

    from lib.allocator import use_run_allocator

    use_run_allocator()  # (the memory pool of the server and its tasks: lib.allocator)
    multiprocessing.get_context("forkserver").set_forkserver_preload(["lib.spark.pool_server"])
    _start_resource_tracker()
    seed = os.environ.get("PYTHONHASHSEED")
    os.environ["PYTHONHASHSEED"] = seed if seed is not None else "0"
    try:
        forkserver.ensure_running()
    finally:
        if seed is None:
            del os.environ["PYTHONHASHSEED"]


def stop_fork_server() -> None:
    """The fork server killed at once, for a run that found nothing to do after all: asked to
    stop, it would first finish its imports, holding this process's stdout and stderr (a caller
    reading them waits). multiprocessing has no public call for either; its own stop, after
    the kill, reaps it and forgets it (a pool started later starts another)."""
    import signal
    from multiprocessing import forkserver

    server: Any = forkserver._forkserver  # (its private state: typeshed declares none of it)
    with server._lock:
        if server._forkserver_pid is not None:
            os.kill(server._forkserver_pid, signal.SIGKILL)
            server._stop_unlocked()


class LocalJob:
    """parallelize(items).map(fn): collect() runs fn on each item in the pool, in order."""

    def __init__(self, jobs: LocalJobs, items: list, fn: Callable[[Any], Any] | None = None):
        self._jobs, self._items, self._fn = jobs, items, fn

    def map(self, fn: Callable[[Any], Any]) -> LocalJob:
        return LocalJob(self._jobs, self._items, fn)

    def collect(self) -> list:
        assert self._fn is not None
        pool = self._jobs.pool()
        # one item a submission: the items are Spark's tasks, each as long as a partition's work
        futures = [pool.submit(self._fn, item) for item in self._items]
        try:
            return [f.result() for f in futures]
        except BaseException:
            for f in futures:
                f.cancel()
            raise


class LocalContext:
    """The part of a SparkContext the replay and the lag stage use."""

    def __init__(self, jobs: LocalJobs, parallelism: int):
        self._jobs = jobs
        self.defaultParallelism = parallelism

    def parallelize(self, items: Iterable, num_slices: int | None = None) -> LocalJob:
        return LocalJob(self._jobs, list(items))


class LocalJobs:
    """SparkJobs's surface (sparkContext, start, started, session, stop) over a local pool of
    `parallelism` processes. `session()` (the --check) starts a real Spark session then."""

    def __init__(self, parallelism: int, session: Callable[[], SparkSession] | None = None):
        self.parallelism = max(1, parallelism)
        self._context = LocalContext(self, self.parallelism)
        self._session = session
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()

    @property
    def sparkContext(self) -> LocalContext:
        return self._context

    def start(self) -> LocalContext:
        """The pool's fork server started (its imports under way), and the context."""
        self.pool()
        return self._context

    @property
    def started(self) -> bool:
        return self._pool is not None

    def pool(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                start_fork_server()  # (running already if the job started it)
                self._pool = ProcessPoolExecutor(
                    self.parallelism,
                    mp_context=multiprocessing.get_context("forkserver"),
                    initializer=_prepare_worker,
                    initargs=(os.getpid(),),
                )
            return self._pool

    def session(self) -> SparkSession:
        if self._session is None:
            raise RuntimeError("no Spark session for this run")
        return self._session()

    def stop(self, wait_for_jvm_s: float | None = None) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
