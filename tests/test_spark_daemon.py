"""lib.spark.daemon: the local Python daemon imports the tasks' modules before it forks its
workers. Each case runs in a fresh interpreter (this one has imported everything already)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(code: str) -> dict:
    env = dict(os.environ, PYTHONPATH=REPO)
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_preload_imports_the_tasks_modules_and_sets_up_numba():
    got = _run(
        "import json, sys\n"
        "from lib.spark.daemon import PRELOAD, preload\n"
        "heavy = ('pandas', 'lib.replay.engine', 'lib.decode.fast', 'lib.lake.lag_task', 'numba.np.npyimpl')\n"
        "before = [m for m in heavy if m in sys.modules]\n"
        "failed = preload()\n"
        "print(json.dumps({'before': before, 'failed': failed,\n"
        "    'after': [m for m in heavy + PRELOAD if m in sys.modules], 'wanted': list(heavy + PRELOAD)}))"
    )
    assert got["before"] == []  # (importing the daemon module loads none of them)
    assert got["failed"] == []
    assert got["after"] == got["wanted"]


def test_a_module_that_cannot_be_imported_is_named_and_the_rest_load():
    got = _run(
        "import json, sys\n"
        "from lib.spark.daemon import preload\n"
        "failed = preload(('lib.no_such_module', 'lib.replay.engine'))\n"
        "print(json.dumps({'failed': failed, 'engine': 'lib.replay.engine' in sys.modules}))"
    )
    assert got == {"failed": ["lib.no_such_module"], "engine": True}


def test_prepare_freezes_what_it_loaded_out_of_the_collector():
    got = _run(
        "import gc, json, sys\n"
        "from lib.spark.daemon import prepare\n"
        "before = gc.get_freeze_count()\n"
        "failed = prepare()\n"
        "engine = sys.modules['lib.replay.engine']\n"
        "print(json.dumps({'before': before, 'failed': failed, 'frozen': gc.get_freeze_count(),\n"
        "    'tracked': sum(len(gc.get_objects(g)) for g in range(3)), 'engine': gc.is_tracked(vars(engine))}))"
    )
    assert got["before"] == 0 and got["failed"] == []
    assert got["frozen"] > 100_000  # the modules' objects: out of every collection
    assert got["tracked"] < 1_000  # what a collection in a worker walks, before its task
    assert got["engine"] is True  # (frozen, not untracked)


def _spawn_daemon(tmp_path, zygote_path: str) -> tuple[subprocess.Popen, str]:
    """The daemon as Spark's PythonWorkerFactory starts it (Unix domain sockets, workers reused):
    its stdin and stdout are the JVM's pipes, and it names its socket on stdout."""
    import struct

    env = dict(
        os.environ,
        PYTHONPATH=REPO,
        PYTHON_UNIX_DOMAIN_ENABLED="true",
        PYTHON_WORKER_FACTORY_SOCK_DIR=str(tmp_path),
        SPARK_REUSE_WORKER="1",
        OFFSETS_LAKE_DAEMON_ZYGOTE=zygote_path,
    )
    daemon = subprocess.Popen(
        [sys.executable, "-m", "lib.spark.daemon", "pyspark.worker"],
        env=env,
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert daemon.stdout is not None
    (length,) = struct.unpack("!i", daemon.stdout.read(4))  # (pyspark's write_with_length)
    return daemon, daemon.stdout.read(length).decode()


def _parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _worker_pid(socket_path: str) -> int:
    """Connect as the JVM does for a worker: the daemon forks one and sends its pid."""
    import socket
    import struct

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(socket_path)
        data = b""
        while len(data) < 4:
            chunk = s.recv(4 - len(data))
            assert chunk, "the daemon closed the connection"
            data += chunk
        return struct.unpack("!i", data)[0]


def test_the_daemon_the_jvm_starts_hands_over_to_a_prepared_zygote(tmp_path):
    from lib.spark.daemon import ZYGOTE_ENV, start_zygote

    zygote = start_zygote(REPO)
    try:
        assert os.environ[ZYGOTE_ENV] == zygote.path
        assert os.path.basename(zygote.folder).startswith(f"offsets-lake-daemon-{os.getpid()}-")
        daemon, socket_path = _spawn_daemon(tmp_path, zygote.path)
        worker = _worker_pid(socket_path)
        serving = _parent_of(worker)
        # the worker's daemon is the zygote's child, not the process the "JVM" started
        assert serving != daemon.pid and _parent_of(serving) == zygote.process.pid
        # and they run at the job's priority, not at the lower one the zygote prepared at
        mine = os.getpriority(os.PRIO_PROCESS, 0)
        assert os.getpriority(os.PRIO_PROCESS, serving) == mine
        assert os.getpriority(os.PRIO_PROCESS, worker) == mine
        assert daemon.stdin is not None
        daemon.stdin.close()  # the JVM's end: the daemon it was served by shuts down...
        # ...and the one it started exits with its code: pyspark's daemon exits 1 then (its
        # shutdown(0) on stdin's end runs into its loop's `finally: shutdown(1)`), as below
        assert daemon.wait(timeout=30) == 1
        assert not os.path.exists(socket_path)
    finally:
        zygote.stop()
    assert zygote.process.returncode == 0
    assert ZYGOTE_ENV not in os.environ and not os.path.exists(zygote.folder)


def test_without_a_zygote_the_daemon_serves_itself(tmp_path):
    daemon, socket_path = _spawn_daemon(tmp_path, str(tmp_path / "no-zygote.sock"))
    try:
        assert _parent_of(_worker_pid(socket_path)) == daemon.pid
    finally:
        assert daemon.stdin is not None
        daemon.stdin.close()
        assert daemon.wait(timeout=30) == 1


def test_the_zygote_loads_every_cached_kernel_of_the_preloaded_modules_before_it_freezes():
    """lib.spark.daemon.prepare(kernels=True): the kernels a replay task and a lag task run are
    loaded (from make setup's cache, none compiled) before the first fork."""
    got = _run(
        "import gc, json, sys\n"
        "from lib.spark.daemon import prepare\n"
        "from numba.core.dispatcher import Dispatcher\n"
        "failed = prepare(kernels=True)\n"
        "import lib.decode.fast as f, lib.replay.engine as e, lib.lake.lag_rows as l\n"
        "print(json.dumps({'failed': failed, 'frozen': gc.get_freeze_count() > 100_000,\n"
        "    'loaded': {k: len(d.overloads) for k, d in (('records', f._records), ('apply', e._apply), ('lag', l._lag))},\n"
        "    'compiled': sum(sum(d.stats.cache_misses.values()) for m in list(sys.modules.values()) if m is not None\n"
        "        and m.__name__.startswith('lib.') for d in vars(m).values() if isinstance(d, Dispatcher))}))"
    )
    assert got["failed"] == [] and got["frozen"] is True
    assert all(n >= 1 for n in got["loaded"].values()), got["loaded"]
    assert got["compiled"] == 0  # every one from the cache


def test_the_zygote_prepares_in_a_thread_of_lower_priority_and_serves_at_its_own():
    """prepare_behind_the_jvm: the preparation runs ZYGOTE_NICE levels below the process (on
    Linux a thread's own nice value), and the thread that forks the daemons stays where it was."""
    got = _run(
        "import json, os, threading\n"
        "from lib.spark import daemon\n"
        "seen = {}\n"
        "def prepare(kernels=False):\n"
        "    seen['nice'] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())\n"
        "    seen['kernels'] = kernels\n"
        "    return ['x']\n"
        "daemon.prepare = prepare\n"
        "before = os.getpriority(os.PRIO_PROCESS, 0)\n"
        "failed = daemon.prepare_behind_the_jvm()\n"
        "print(json.dumps({'before': before, 'during': seen['nice'], 'kernels': seen['kernels'],\n"
        "    'after': os.getpriority(os.PRIO_PROCESS, 0), 'failed': failed, 'step': daemon.ZYGOTE_NICE}))"
    )
    assert got["step"] == 10 and got["kernels"] is True and got["failed"] == ["x"]
    assert got["during"] == min(got["before"] + 10, 19)
    assert got["after"] == got["before"]


def test_an_error_while_preparing_is_raised_in_the_zygote():
    got = _run(
        "import json\n"
        "from lib.spark import daemon\n"
        "def prepare(kernels=False):\n"
        "    raise MemoryError('out')\n"
        "daemon.prepare = prepare\n"
        "try:\n"
        "    daemon.prepare_behind_the_jvm()\n"
        "    print(json.dumps({'raised': None}))\n"
        "except MemoryError as e:\n"
        "    print(json.dumps({'raised': str(e)}))"
    )
    assert got == {"raised": "out"}


def test_start_zygote_sweeps_the_folders_of_jobs_that_are_gone(tmp_path):
    """A job killed with its process group leaves its zygote's folder; the next job's start
    removes those of dead pids and leaves a live job's, another program's, and a pid-less one."""
    from lib.spark.daemon import FOLDER_PREFIX, sweep_orphan_folders

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    names = [
        f"{FOLDER_PREFIX}{gone.pid}-abc123",  # its job is gone
        f"{FOLDER_PREFIX}{os.getpid()}-def456",  # a live job's
        f"{FOLDER_PREFIX}hs0n1ogh",  # named before the pid was
        "something-else-1",
    ]
    for name in names:
        (tmp_path / name).mkdir()
        (tmp_path / name / "zygote.sock").write_bytes(b"")
    assert sweep_orphan_folders(str(tmp_path)) == [names[0]]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names[1:])
