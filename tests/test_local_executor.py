"""The local pool (lib.spark.local_jobs): jobs.replay_offsets --executor local runs the same
tasks as Spark and commits the same tables; auto picks it for a small run on a local master;
a worker's typed error and a worker's death fail the run with nothing changed."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from jobs import replay_offsets
from lib.spark.local_jobs import LocalJobs, local_parallelism
from tests.helpers import NOW, REPO, phases, snapshot


def test_local_parallelism():
    assert local_parallelism("local") == 1
    assert local_parallelism("local[2]") == 2
    assert local_parallelism("local[3,4]") == 3
    assert local_parallelism("local[*]") == os.cpu_count()
    assert local_parallelism("spark://h:7077") is None
    assert local_parallelism("yarn") is None
    assert local_parallelism("local-cluster[2,1,1024]") is None


def _square(x: int) -> int:
    return x * x


def _fail(x: int) -> int:
    if x == 2:
        raise ValueError(f"task {x} failed")
    return x


def _die(x: int) -> int:
    if x == 1:
        os._exit(3)
    return x


def test_pool_runs_tasks_in_order_and_raises_theirs():
    jobs = LocalJobs(2)
    try:
        assert jobs.sparkContext.defaultParallelism == 2
        assert jobs.sparkContext.parallelize(range(7), 7).map(_square).collect() == [0, 1, 4, 9, 16, 25, 36]
        pids = jobs.sparkContext.parallelize(range(4), 4).map(_getpid).collect()
        assert os.getpid() not in pids and 1 <= len(set(pids)) <= 2
        with pytest.raises(ValueError, match="task 2 failed"):
            jobs.sparkContext.parallelize(range(4), 4).map(_fail).collect()
        from concurrent.futures.process import BrokenProcessPool

        with pytest.raises(BrokenProcessPool):
            jobs.sparkContext.parallelize(range(3), 3).map(_die).collect()
    finally:
        jobs.stop()
    assert not jobs.started


def _getpid(_: int) -> int:
    return os.getpid()


def _what_the_server_prepared(_: int) -> tuple[list[str], dict[str, int], str, bool, int]:
    """In a pool process, before any task's work: which of pandas and cffi are loaded, the
    overloads of each of POOL_KERNELS loaded (-1: no such kernel), Arrow's memory pool, whether
    the garbage collector runs, and the callbacks on llvmlite's lock."""
    import gc
    import importlib

    import pyarrow as pa
    from llvmlite.binding import ffi
    from numba.core.dispatcher import Dispatcher

    from lib.spark.daemon import POOL_KERNELS

    loaded = {}
    for name in sorted(POOL_KERNELS):
        module, _, attr = name.rpartition(".")
        kernel = getattr(sys.modules.get(module) or importlib.import_module(module), attr, None)
        loaded[name] = len(kernel.overloads) if isinstance(kernel, Dispatcher) else -1
    kept_out = [m for m in ("pandas", "cffi") if m in sys.modules]
    return kept_out, loaded, pa.default_memory_pool().backend_name, gc.isenabled(), len(ffi.lib._lock._cblist)


# modules numba's CPU target imports with its registries (numba.core.cpu), nothing before
NUMBA_REGISTRY_MODULES = ("numba.cpython.heapq", "numba.typed.typedset", "numba.experimental.function_type")


def _kernels_run_and_compile(_: int) -> tuple[list[int], list[int], list[str], int, list[str], bool]:
    """In a pool process: a kernel the server loaded, run (its status and entries on an empty
    segment), without compiling it again; one it did not load (the interner's rehash, which a
    full run's tasks call), loaded from the cache, without numba's registries; a new one compiled
    and run (a compilation loads them); and whether numba's target class is as numba left it."""
    import numpy as np
    from numba import njit
    from numba.core.cpu import CPUContext

    from lib.decode.fast import _CRC, _frame, _readonly
    from lib.replay.engine import _Interner, _rehash

    loaded = len(_frame.overloads)
    framed = _frame(_readonly(np.zeros(0, np.uint8)), 0, False, _CRC)  # (an empty segment)
    interner = _Interner(4)  # (grown by 20 keys: rehashed)
    keys = np.frombuffer(bytearray(b"".join(b"k%02d" % k for k in range(20))), np.uint8)
    ids = interner.intern_strings(np.arange(0, 61, 3, dtype=np.int64), keys)
    before_compiling = [m for m in NUMBA_REGISTRY_MODULES if m in sys.modules]
    total = njit(lambda a: a.sum() * 2)(np.arange(5, dtype=np.int64))
    return (
        [int(framed[0]), int(framed[1]), len(_frame.overloads) - loaded],
        [len(_rehash.overloads), *ids.tolist()],
        before_compiling,
        int(total),
        [m for m in NUMBA_REGISTRY_MODULES if m not in sys.modules],
        "refresh" in CPUContext.__dict__,
    )


def test_pool_processes_load_kernels_without_numbas_registries_and_compile():
    jobs = LocalJobs(2)
    try:
        results = jobs.sparkContext.parallelize(range(2), 2).map(_kernels_run_and_compile).collect()
    finally:
        jobs.stop()
    assert results == [([0, 0, 0], [1, *range(20)], [], 20, [], False)] * 2


def test_pool_processes_start_with_the_tasks_kernels_and_without_pandas():
    """The fork server (lib.spark.pool_server) loaded every kernel of POOL_KERNELS (a renamed
    kernel fails here) and kept pandas and cffi out, in whichever process serves the task; the
    tasks allocate from jemalloc (lib.allocator), which this pyarrow is built with. The server
    loaded with the garbage collector and numba's callback on llvmlite's lock off: both are on
    again in the pool's processes."""
    import pyarrow as pa

    assert "jemalloc" in pa.supported_memory_backends()
    jobs = LocalJobs(2)
    try:
        results = jobs.sparkContext.parallelize(range(2), 2).map(_what_the_server_prepared).collect()
    finally:
        jobs.stop()
    for kept_out, loaded, pool, collecting, llvm_callbacks in results:
        assert kept_out == []
        assert pool == "jemalloc"
        assert collecting and llvm_callbacks == 1
        assert {name: n for name, n in loaded.items() if n < 1} == {}
    assert "lib.spark.pool_server" not in sys.modules  # (the test process keeps its pandas)


def _write_phase(builders, phase, log_dir):
    phase()
    for b in builders:
        b.write(str(log_dir))


def test_same_tables_as_spark(spark, tmp_path):
    """A full run and two incremental runs of the growing log, each on the pool (as auto picks
    it for a run this small) and on Spark: every table the same, row for row (run ids and times
    aside, as snapshot leaves them)."""
    (b0, b1), steps = phases()
    log_dir = tmp_path / "logdir"
    pool, jvm = tmp_path / "pool", tmp_path / "spark"
    for step in steps:
        _write_phase((b0, b1), step, log_dir)
        for wh, how, where in ((pool, "auto", "a local pool of 2 processes"), (jvm, "spark", "Spark")):
            out, err = _job(log_dir, wh, how)
            assert out.startswith("replayed (") and f"; tasks on {where}; stages: " in out, err
        assert snapshot(spark, pool) == snapshot(spark, jvm)


def _job(log_dir, wh, executor: str, now: int = NOW, env_extra: dict | None = None) -> tuple[str, str]:
    """jobs.replay_offsets in its own process on local[2] with --executor `executor`."""
    env = dict(os.environ, PYTHONPATH=REPO, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    env.update(env_extra or {})
    cmd = [sys.executable, "-m", "jobs.replay_offsets", "--input", str(log_dir), "--warehouse", str(wh)]
    cmd += ["--now", str(now), "--conf", "spark.master=local[2]", "--executor", executor]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout, done.stderr


def test_executor_local_needs_a_local_master(tmp_path, capsys):
    (b0, b1), steps = phases()
    _write_phase((b0, b1), steps[0], tmp_path / "logdir")
    code = replay_offsets.main(
        ["--input", str(tmp_path / "logdir"), "--warehouse", str(tmp_path / "wh"), "--executor", "local"]
        + ["--master", "spark://127.0.0.1:1", "--now", str(NOW)]
    )
    assert code == 2
    assert "--executor local runs a log dir on local disk on a local master" in capsys.readouterr().err
    assert not (tmp_path / "wh").exists()


def test_worker_error_names_the_place_and_changes_nothing(tmp_path, capsys):
    """A CRC mismatch found in a pool process: the same typed error as from Spark."""
    from lib.testdata.logbuilder import T0, PartitionLogBuilder

    logs = tmp_path / "logs"
    b1 = PartitionLogBuilder(1).commit("g1", "t", 0, 3, T0).commit("g1", "t", 1, 4, T0)
    path = b1.write(str(logs)) + "/00000000000000000000.log"
    data = bytearray(open(path, "rb").read())
    second = len(data) // 2  # both batches have equal size
    data[second + 70] ^= 0xFF  # inside the CRC-covered region of offset 1's batch
    open(path, "wb").write(bytes(data))
    args = ["--input", str(logs), "--warehouse", str(tmp_path / "wh"), "--executor", "local", "--quiet"]
    assert replay_offsets.main([*args, "--now", str(T0 + 86_400_000)]) == 2
    err = capsys.readouterr().err
    assert "CRC-32C mismatch" in err and f"file {path}, partition 1, log offset 1, byte position {second}" in err
    assert "no table was changed" in err and "Traceback" not in err
    assert not (tmp_path / "wh" / "offsets_log").exists()


def test_killed_driver_leaves_no_pool_process(tmp_path):
    """SIGKILL at the lag stage's start: the pool's processes end with the driver (they would
    hold the run's pipes, and wait for ever), and the next run completes the stage."""
    (b0, b1), steps = phases()
    log_dir = tmp_path / "logdir"
    _write_phase((b0, b1), steps[0], log_dir)
    env = dict(os.environ, PYTHONPATH=REPO, PYSPARK_PYTHON=sys.executable, OFFSETS_LAKE_KILL_AT="lag_start")
    cmd = [sys.executable, "-m", "jobs.replay_offsets", "--input", str(log_dir), "--warehouse", str(tmp_path / "wh")]
    cmd += ["--now", str(NOW), "--conf", "spark.master=local[2]", "--executor", "local", "--quiet"]
    killed = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    # (its last line: nothing of the pool's after it, multiprocessing's resource tracker included)
    assert killed.returncode == -9 and killed.stderr.endswith("SIGKILL at crash point lag_start\n"), killed.stderr
    out, _ = _job(log_dir, tmp_path / "wh", "local")
    assert out.startswith("took over the lock of replay run ")
    assert "\nreplayed (incremental, 2 partitions unchanged) 0 records" in out


def _marked_fork_servers(mark: str) -> list[int]:
    """The pids of the fork servers whose environment holds OFFSETS_LAKE_TEST_MARK=`mark`
    (multiprocessing's resource tracker, which ends once the run's driver has, is not one)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"multiprocessing.forkserver" not in f.read():
                    continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                if f"OFFSETS_LAKE_TEST_MARK={mark}".encode() in f.read().split(b"\0"):
                    found.append(int(pid))
        except OSError:  # (gone, or not ours to read)
            continue
    return found


def test_a_run_with_nothing_to_do_stops_the_fork_server_it_started(tmp_path):
    """The job starts the pool's fork server before its peeks know whether it has work. A run
    with nothing new (the default command, auto: the pool) kills it when the peeks say so: when
    the run has returned, no process of it is left (asked to stop, the server would still be
    importing, holding the caller's pipes). (Its resource tracker ends after the driver, on
    its own: a moment later under load, so it is not counted.)"""
    (b0, b1), steps = phases()
    log_dir = tmp_path / "logdir"
    _write_phase((b0, b1), steps[0], log_dir)
    _job(log_dir, tmp_path / "wh", "auto")
    mark = f"{os.getpid()}-{tmp_path.name}"
    env = dict(os.environ, PYTHONPATH=REPO, PYSPARK_PYTHON=sys.executable, OFFSETS_LAKE_TEST_MARK=mark)
    cmd = [sys.executable, "-m", "jobs.replay_offsets", "--input", str(log_dir), "--warehouse", str(tmp_path / "wh")]
    cmd += ["--now", str(NOW), "--conf", "spark.master=local[2]"]
    # (into files, not pipes: the run has returned when its driver has, whatever it left running)
    with open(tmp_path / "out", "w+") as out, open(tmp_path / "err", "w+") as err:
        assert subprocess.run(cmd, cwd=REPO, env=env, stdout=out, stderr=err, timeout=120).returncode == 0
        left = _marked_fork_servers(mark)
        out.seek(0)
        text = out.read()
    assert text.startswith("replayed (incremental, 2 partitions unchanged) 0 records"), text
    assert "lag: not computed (the input holds no consumed topic partitions)" in text
    assert left == []


@pytest.mark.parametrize("input_kind", ["missing", "without_offsets_partitions"])
def test_a_run_that_ends_before_its_pool_stops_the_fork_server_started_ahead(tmp_path, input_kind):
    """The fork server starts before the log dir is listed (its preparation is what a pool
    run's first task waits for): a run that then finds no log dir, or one without offsets
    partitions, says so and leaves no fork server behind."""
    log_dir = tmp_path / "logdir"
    if input_kind == "without_offsets_partitions":
        (log_dir / "orders-0").mkdir(parents=True)
    mark = f"{os.getpid()}-{tmp_path.name}"
    env = dict(os.environ, PYTHONPATH=REPO, PYSPARK_PYTHON=sys.executable, OFFSETS_LAKE_TEST_MARK=mark)
    cmd = [sys.executable, "-m", "jobs.replay_offsets", "--input", str(log_dir), "--warehouse", str(tmp_path / "wh")]
    cmd += ["--now", str(NOW), "--conf", "spark.master=local[2]", "--quiet"]
    with open(tmp_path / "out", "w+") as out, open(tmp_path / "err", "w+") as err:
        code = subprocess.run(cmd, cwd=REPO, env=env, stdout=out, stderr=err, timeout=120).returncode
        left = _marked_fork_servers(mark)
        err.seek(0)
        text = err.read()
    assert left == []
    assert code == 2, text
    assert "replay_offsets: error: " in text and "Traceback" not in text
    assert not (tmp_path / "wh" / "offsets_log").exists()


def test_the_driver_runs_without_pandas_and_lets_it_in_for_the_checks(tmp_path):
    """pandas is kept out of the job's driver while the run goes (lib.kept_out: no step uses it;
    pyarrow imported it for nothing), and is importable again for --check's suites; the local
    pool's run imports no pyspark either."""
    (b0, b1), steps = phases()
    _write_phase((b0, b1), steps[0], tmp_path / "logdir")
    args = ["--input", str(tmp_path / "logdir"), "--now", str(NOW), "--conf", "spark.master=local[2]", "--quiet"]
    script = (
        "import sys\n"
        "from jobs import replay_offsets\n"
        f"args = {args!r}\n"
        f"first = replay_offsets.main([*args, '--warehouse', {str(tmp_path / 'wh')!r}])\n"
        "print('pandas after the run:', 'pandas' in sys.modules)\n"
        "print('pyspark after the run:', 'pyspark' in sys.modules)\n"
        f"checked = replay_offsets.main([*args, '--warehouse', {str(tmp_path / 'wh2')!r}, '--check'])\n"
        "print('pandas after the checks:', 'pandas' in sys.modules)\n"
        "print('exit codes:', first, checked)\n"
    )
    env = dict(os.environ, PYTHONPATH=REPO, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "pandas after the run: False" in lines
    assert "pyspark after the run: False" in lines  # (its import: 0.25 s of a no-op's CPU)
    assert "quality checks:" in lines
    assert "pandas after the checks: True" in lines
    # (the suites ran: this log's groups sit in partitions 0 and 1, where 50 partitions would
    # not put them, so the error-level offsets_partition_matches_group fails, and only it)
    errors = {line.split(":")[1].split("(")[0].strip() for line in lines if line.strip().startswith("error:")}
    assert errors == {"offsets_partition_matches_group"}, done.stdout
    assert lines[-1] == "exit codes: 0 1", done.stdout


def test_kept_out_packages_are_importable_again_once_released():
    """lib.kept_out in a process of its own (this one has pandas loaded): while installed, the
    package and its modules cannot be imported and pyarrow converts without it; released, they
    can, and pyarrow's pandas conversions work."""
    script = (
        "import sys\n"
        "from lib.kept_out import KeptOut\n"
        "import pyarrow as pa\n"
        "with KeptOut(('pandas',)):\n"
        "    try:\n"
        "        import pandas.core.frame\n"
        "    except ModuleNotFoundError as e:\n"
        "        print('kept out:', e.name)\n"
        "    print(pa.array([1, 2]).to_pylist(), 'pandas' in sys.modules)\n"
        "import pandas as pd\n"
        "print(pa.Table.from_pandas(pd.DataFrame({'a': [1]})).to_pandas()['a'].tolist())\n"
    )
    env = dict(os.environ, PYTHONPATH=REPO)
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["kept out: pandas", "[1, 2] False", "[1]"]
