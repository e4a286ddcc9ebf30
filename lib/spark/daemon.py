"""Spark's Python daemon in local mode (spark.python.daemon.module, lib.spark.session), with
pyspark imported from the installed package instead of Spark's pyspark.zip.

Spark puts $SPARK_HOME/python/lib/pyspark.zip and py4j's zip first on its Python workers' path.
A zip holds sources only, so every run's daemon compiled pyspark's modules again before its
first task could start (1.2 s on this kind of machine, against 0.3 s from compiled modules).
With pip's pyspark, SPARK_HOME is the installed package and the zips are its own copy of the same
sources: they go to the end of the path, and pyspark and py4j come from the package, compiled
when it was installed. Any other layout (a Spark distribution) is left as Spark made it.

The daemon also imports the tasks' modules (PRELOAD) before it forks its first worker: each
worker then starts with them instead of importing them on its first task (half a second each,
the most of a small incremental run's replay task), and a run imports them once, not once per
worker."""

from __future__ import annotations

import contextlib
import gc
import os
import shutil
import subprocess
import sys
import tempfile
import traceback
from dataclasses import dataclass
from typing import Any


def prefer_installed_pyspark(path: list[str]) -> list[str]:
    """`path` with Spark's own zips last, when they sit inside an installed pyspark package
    (<site-packages>/pyspark/python/lib/*.zip) that is importable from a later entry."""
    real = {os.path.realpath(p) for p in path if p}
    zips = []
    for entry in path:
        folder = os.path.dirname(os.path.realpath(entry))
        package = os.path.dirname(os.path.dirname(folder))
        if (
            entry.endswith(".zip")
            and os.path.basename(package) == "pyspark"
            and folder == os.path.join(package, "python", "lib")
            and os.path.isfile(os.path.join(package, "__init__.py"))
            and os.path.dirname(package) in real
        ):
            zips.append(entry)
    return [p for p in path if p not in zips] + zips


# what the replay's and the lag stage's tasks import (lib.lake.tasks); pandas because pyarrow
# imports it on its first array when it is installed (the local pool's server keeps it out
# instead: lib.spark.pool_server), pyarrow.dataset and Arrow's group_by (pyarrow.acero), which
# the tasks no longer call (the local pool's server leaves them out); and what their first
# calls import: numpy.ma (pyarrow asks for it on its first conversion of a numpy array: 7 ms),
# zoneinfo (timestamps with a time zone)
PRELOAD = (
    "pandas",
    "pyarrow.pandas_compat",
    "pyarrow.dataset",
    "pyarrow.acero",
    "numpy.ma",
    "zoneinfo",
    "lib.lake.partition_task",
    "lib.replay.engine",
    "lib.replay.assignment",
    "lib.decode",
    "lib.decode.fast",
    "lib.assignors.fast_audit",
    "lib.lake.lag_input",
    "lib.lake.lag_task",
)


def preload(modules: tuple[str, ...] = PRELOAD, registries: bool = True) -> list[str]:
    """Import `modules` and set up numba's CPU target (its extensions and registries, which
    every process loads before its first kernel: 0.2 s of each replay task's first use; without
    `registries`, its code generator only: for a process whose kernels load from the cache
    without them, lib.spark.pool_server): the names of what failed. What fails here fails
    again in the task that needs it, which says why; the daemon serves on. The kernels
    themselves load in the workers, those each uses
    (all of them here took longer than the two workers loading theirs side by side; the local
    pool's server loads the few every run calls, POOL_KERNELS, in 0.2 s)."""
    import importlib

    from lib.numba_cache import load_object_code_lazily

    load_object_code_lazily()  # (before any kernel loads: lib.numba_cache says why)
    failed = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:
            failed.append(name)
    try:
        from numba.core import entrypoints
        from numba.core.registry import cpu_target

        entrypoints.init_all()
        context = cpu_target.target_context  # (made on first use: its code generator)
        if registries:
            context.refresh()
    except Exception:
        failed.append("numba")
    return failed


def prepare(kernels: bool = False) -> list[str]:
    """What the daemon does before it serves: `preload`, then freeze what is loaded out of the
    garbage collector. pyspark's daemon runs a full gc.collect() in a reused worker after every
    task: over the preloaded modules' objects that took 60-100 ms of CPU a task (200 empty
    tasks: 16.9 s of CPU, 4.6 s frozen). Frozen before the first fork, they are left out of
    every collection in the workers, and the collector writes none of their pages: they stay
    shared between the workers. `kernels`: also load_cached_kernels (before the freeze)."""
    failed = preload()
    if kernels:
        load_cached_kernels()
    gc.freeze()
    return failed


# the kernels every run's pool tasks call (make bench's incremental run: a replay task's decode,
# replay and audit, a lag task's scan and lag), loaded by the local pool's fork server
# (lib.spark.pool_server) once instead of by each of its processes on first use
POOL_KERNELS = frozenset(
    {
        "lib.assignors.fast._assign_batch",
        "lib.assignors.fast_audit._first_pass",
        "lib.assignors.fast_audit._second_pass",
        "lib.decode.arrow_kernel.gather",
        "lib.decode.arrow_kernel.row_bytes",
        "lib.decode.arrow_kernel.row_layout",
        "lib.decode.arrow_kernel.value_buffers",
        "lib.decode.fast._frame",
        "lib.decode.fast._records",
        "lib.decode.fast.group_values",
        "lib.decode.group_kernel.group_values",
        "lib.decode.json_kernel.value_json",
        "lib.lake.lag_rows._lag",
        "lib.lake.lag_rows._next_segment",
        "lib.lake.lag_rows._summarise",
        "lib.replay.engine._apply",
        "lib.replay.engine._build_keys",
        "lib.replay.engine._intern_all",
        "lib.replay.engine._intern_keys",
        "lib.source.topic_scan._hop",
    }
)


def load_cached_kernels(prefix: str = "lib.", only: frozenset[str] | None = None) -> int:
    """Load every compiled kernel of the loaded modules under `prefix` from numba's on-disk
    cache (make setup writes it): each signature its cache index holds for the kernel's current
    source, none compiled. A worker forked after this runs its tasks' kernels at once instead of
    loading them on first use (some 0.35 s of a replay task's CPU, 0.1 s of a lag task's). For
    the zygote, which has the JVM's start-up to spend; the daemon the JVM starts does not (on
    its critical path, the workers loading only theirs, side by side, were sooner). Uses
    numba's cache internals: anything unexpected loads nothing more. `only`: the kernels of
    these names (module.name) only. Returns the count."""
    try:
        from numba.core.dispatcher import Dispatcher
    except ImportError:
        return 0
    loaded = 0
    for name, module in list(sys.modules.items()):
        if not name.startswith(prefix) or module is None:
            continue
        for attr, kernel in list(vars(module).items()):
            if not isinstance(kernel, Dispatcher) or getattr(kernel, "_cache", None) is None:
                continue
            if only is not None and f"{name}.{attr}" not in only:
                continue
            try:
                cache: Any = getattr(kernel, "_cache")  # noqa: B009 - (numba's, untyped)
                index = cache._cache_file._load_index()
                codegen = getattr(kernel.targetctx, "codegen")()  # noqa: B009
                for key in index:
                    # (an entry of an older source would be compiled, not loaded: skipped)
                    if cache._index_key(key[0], codegen) == key and key[0] not in kernel.overloads:
                        kernel.compile(key[0])
                        loaded += 1
            except Exception:
                continue
    return loaded


def quiet_when_the_jvm_is_gone(worker):
    """pyspark's daemon `worker` (one connection's tasks), exiting without a traceback when the
    JVM has closed the worker's socket: over Unix domain sockets (conf/spark.conf) a write to a
    closed peer fails at once, where TCP took it, so a run killed on purpose (a crash point) or
    a JVM stopping ended with a BrokenPipeError per idle worker on stderr, after the run's own
    last words. Nobody is left to read the output; the exit code is the one the traceback's
    path gives."""

    def run(sock, authenticated):
        try:
            return worker(sock, authenticated)
        except (BrokenPipeError, ConnectionResetError):
            os._exit(1)

    return run


# --- a daemon prepared before the JVM asks for it -----------------------------------------------
#
# The JVM starts the daemon when its first Python task comes (half a second after the JVM is up),
# and the daemon then prepares (a second or more of imports) before a worker can start: on the
# critical path of a small incremental run. A job that will replay something starts a zygote
# first (start_zygote): the daemon's module, prepared while the JVM itself starts, waiting on a
# Unix socket whose path the JVM, and so the daemon it starts, inherit (ZYGOTE_ENV). That daemon
# hands its standard streams, environment and folder over the socket (hand_over), and the zygote
# forks one prepared, who serves the JVM as pyspark's daemon would; the one the JVM started
# waits for it, passes the JVM's SIGTERM on, and exits with its code. Without a zygote (none
# started, or gone) the daemon prepares and serves itself, as before.

ZYGOTE_ENV = "OFFSETS_LAKE_DAEMON_ZYGOTE"
# how much lower than its job's the priority of the zygote's preparation is (Linux nice levels)
ZYGOTE_NICE = 10
# a zygote's socket folder in the temp folder: this prefix, then the pid of the job that made it
FOLDER_PREFIX = "offsets-lake-daemon-"
_LENGTH = 4  # bytes of a message's length, and of a pid or exit code


@dataclass
class Zygote:
    """A prepared daemon's parent, waiting on `path` (start_zygote); `stop` when the job ends."""

    process: subprocess.Popen
    path: str
    folder: str

    def stop(self, timeout_s: float = 1.0) -> None:
        """Close its stdin, on which it ends at once once prepared; one still preparing (a job
        that ended early) is killed. The daemons it forked serve their JVMs on."""
        if os.environ.get(ZYGOTE_ENV) == self.path:
            del os.environ[ZYGOTE_ENV]
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


def start_zygote(repo_root: str) -> Zygote:
    """Start a zygote (above) and name its socket in this process's environment, for the JVM
    this process starts next. Its environment is the one Spark gives a local daemon where it
    matters before a fork: the repository on the path, and string hashing seeded as pyspark
    seeds its workers' (PYTHONHASHSEED, default 0)."""
    import socket

    sweep_orphan_folders(tempfile.gettempdir())
    folder = tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-")
    path = os.path.join(folder, "zygote.sock")
    env = dict(os.environ, PYTHONHASHSEED=os.environ.get("PYTHONHASHSEED", "0"))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (repo_root, env.get("PYTHONPATH", "")) if p)
    # listening before the zygote runs: a daemon that connects early waits for it, never misses it
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(path)
        listener.listen(8)
        fd = listener.fileno()
        process = subprocess.Popen(
            [sys.executable, "-m", "lib.spark.daemon", "--zygote", str(fd), path],
            stdin=subprocess.PIPE,
            env=env,
            cwd=repo_root,
            pass_fds=[fd],
        )
    os.environ[ZYGOTE_ENV] = path
    return Zygote(process, path, folder)


def sweep_orphan_folders(root: str) -> list[str]:
    """Remove the zygote folders under `root` whose job is gone: one killed with its whole
    process group never ran Zygote.stop, and its folder (the socket file in it) stayed. A folder
    whose pid lives (another job's), or is another user's, is left alone. Returns those removed."""
    removed = []
    for name in os.listdir(root):
        pid = name[len(FOLDER_PREFIX) :].split("-", 1)[0] if name.startswith(FOLDER_PREFIX) else ""
        if not pid.isdigit():
            continue  # (not a zygote's, or named before the pid was)
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
            removed.append(name)
        except (PermissionError, OverflowError):
            pass  # alive, another user's; or not a pid
    return removed


def _read_exactly(sock, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def serve_zygote(fd: int, path: str) -> None:
    """The zygote, on the listening socket `fd` (bound to `path` by start_zygote: a daemon that
    comes early waits for the preparation instead of doing its own): prepare, then fork a
    prepared daemon for each that hands over, and tell it the daemon's pid and, once reaped,
    its exit code. Ends when its job's process closes its stdin."""
    import json
    import select
    import socket
    import struct

    listener = socket.socket(fileno=fd)
    sys.path[:] = prefer_installed_pyspark(sys.path)
    import pyspark.daemon

    prepare_behind_the_jvm()
    pyspark.daemon.worker = quiet_when_the_jvm_is_gone(pyspark.daemon.worker)
    served: dict[int, socket.socket] = {}
    while True:
        ready = select.select([0, listener.fileno()], [], [], 0.2)[0]
        for pid, conn in list(served.items()):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                with contextlib.suppress(OSError):
                    conn.sendall(struct.pack("!i", os.waitstatus_to_exitcode(status)))
                conn.close()
                del served[pid]
        if 0 in ready and not os.read(0, 4096):
            break
        if listener.fileno() not in ready:
            continue
        conn, _ = listener.accept()
        try:
            head, fds, _, _ = socket.recv_fds(conn, _LENGTH, 3)
            if len(fds) != 3 or len(head) != _LENGTH:
                raise EOFError
            given = json.loads(_read_exactly(conn, struct.unpack("!I", head)[0]))
        except (OSError, EOFError, ValueError):
            conn.close()
            continue
        pid = os.fork()
        if pid == 0:  # the daemon: the JVM's streams, environment and folder, then pyspark's loop
            listener.close()
            conn.close()
            for other in served.values():
                other.close()
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
                os.close(fd)
            os.environ.clear()
            os.environ.update(given["env"])
            os.chdir(given["cwd"])
            sys.argv = given["argv"]
            code = 1
            try:
                pyspark.daemon.manager()
            except SystemExit as e:  # (its shutdown's)
                code = e.code if isinstance(e.code, int) else int(e.code is not None)
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(code)
        for fd in fds:
            os.close(fd)
        try:
            conn.sendall(struct.pack("!i", pid))
        except OSError:  # (the daemon that handed over is gone; the one forked serves on)
            conn.close()
            continue
        served[pid] = conn
    listener.close()
    with contextlib.suppress(OSError):  # (also when its job was killed and never stopped it)
        os.unlink(path)
        os.rmdir(os.path.dirname(path))


def prepare_behind_the_jvm(nice: int = ZYGOTE_NICE) -> list[str]:
    """prepare(kernels=True) in a thread whose priority is `nice` levels below this one's: the
    zygote prepares while its job's JVM starts, and on two cores the two took turns (the
    JVM's context was up 0.5-1 s later in a run with a zygote than in one without). Behind the
    JVM, the preparation takes the CPU the JVM's start leaves. In its own thread, because Linux
    gives each thread its own nice value: the daemons forked from the main thread, and their
    workers, keep the job's priority (lowering a priority can be undone by a privileged process
    only). Elsewhere than Linux it prepares at the job's priority."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    def run() -> list[str]:
        if sys.platform.startswith("linux"):
            with contextlib.suppress(OSError):
                tid = threading.get_native_id()
                os.setpriority(os.PRIO_PROCESS, tid, min(os.getpriority(os.PRIO_PROCESS, tid) + nice, 19))
        return prepare(kernels=True)

    # (result() raises here, in the thread that serves, what the preparation raised)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="zygote-prepare") as pool:
        return pool.submit(run).result()


def hand_over(path: str) -> int | None:
    """In the daemon the JVM started: hand over to the zygote at `path` and wait for the daemon
    it forks; that daemon's exit code, or None if no zygote took over (serve here)."""
    import json
    import signal
    import socket
    import struct
    import time

    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
        given = json.dumps({"env": dict(os.environ), "cwd": os.getcwd(), "argv": sys.argv}).encode()
        socket.send_fds(sock, [struct.pack("!I", len(given))], [0, 1, 2])
        sock.sendall(given)
        pid = struct.unpack("!i", _read_exactly(sock, _LENGTH))[0]
    except (OSError, EOFError):
        return None  # no daemon was forked: this one serves

    # the JVM stops its daemon with SIGTERM: the one serving it is told
    def forward(*_) -> None:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)

    signal.signal(signal.SIGTERM, forward)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    try:
        return int(struct.unpack("!i", _read_exactly(sock, _LENGTH))[0])
    except (OSError, EOFError):  # the zygote is gone: wait for the daemon itself
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return 0
            time.sleep(0.2)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--zygote"]:
        serve_zygote(int(sys.argv[2]), sys.argv[3])
        # without the interpreter's teardown of what it prepared (0.2 s of its job's end)
        os._exit(0)
    if os.environ.get(ZYGOTE_ENV):
        code = hand_over(os.environ[ZYGOTE_ENV])
        if code is not None:
            os._exit(code)
    sys.path[:] = prefer_installed_pyspark(sys.path)
    import pyspark.daemon

    prepare()
    pyspark.daemon.worker = quiet_when_the_jvm_is_gone(pyspark.daemon.worker)
    pyspark.daemon.manager()
