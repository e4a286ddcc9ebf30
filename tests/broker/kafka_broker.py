"""A real single-node Kafka broker (KRaft, combined broker+controller) for integration tests.

The broker runs from the jars Maven fetched into `.jars/kafka4` or `.jars/kafka39`
(`make kafka-jars`): `java -cp "<jar_dir>/*" kafka.Kafka server.properties`, listening on
127.0.0.1 only, with its log4j output in a file under its work dir.

    broker = KafkaBroker(".jars/kafka4", tmp_dir, offsets_partitions=4)
    broker.start()              # formats the storage, starts the JVM, waits until usable
    broker.bootstrap            # "127.0.0.1:PORT"
    broker.log_dir              # the broker's log.dirs: __consumer_offsets-<P>/ folders etc.
    broker.stop()

`dump_log_segments(jar_dir, files)` runs Kafka's own DumpLogSegments with --offsets-decoder,
and `snapshot_offsets_log_dir(broker, dest)` copies the `__consumer_offsets` partitions of a
running broker into a log directory the replay job can read.
"""

from __future__ import annotations

import atexit
import base64
import glob
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
import zipfile
from typing import IO

from lib.ports import free_port

JAVA = os.environ.get("JAVA", shutil.which("java") or "java")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEAP = "512m"
START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 30.0
TOOL_TIMEOUT_S = 180.0
# How often the broker rewrites replication-offset-checkpoint (Kafka's default is 5000 ms).
HW_CHECKPOINT_INTERVAL_MS = 500

# Index files are preallocated sparse (10 MiB each): a plain copy would write them out in full,
# and the replay job reads only .log segments, so snapshots leave them out.
_INDEX_SUFFIXES = (".index", ".timeindex", ".txnindex")


# ---------------------------------------------------------------------------------------------
# Jars: version and main classes
# ---------------------------------------------------------------------------------------------


def kafka_version(jar_dir: str) -> str:
    """The Kafka version of the jars in jar_dir, from the name of kafka_2.13-<version>.jar."""
    for path in sorted(glob.glob(os.path.join(jar_dir, "kafka_*.jar"))):
        m = re.match(r"kafka_[0-9.]+-(\d+\.\d+\.\d+.*)\.jar$", os.path.basename(path))
        if m:
            return m.group(1)
    raise FileNotFoundError(f"no kafka_<scala>-<version>.jar in {jar_dir} (run `make kafka-jars`)")


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version)[:3])


def _find_class(jar_dir: str, candidates: list[str]) -> str:
    """The first of candidates (fully qualified class names) present in one of jar_dir's jars."""
    wanted = {c.replace(".", "/") + ".class": c for c in candidates}
    found: set[str] = set()
    for path in glob.glob(os.path.join(jar_dir, "kafka*.jar")):
        with zipfile.ZipFile(path) as jar:
            found.update(n for n in jar.namelist() if n in wanted)
    for entry, cls in wanted.items():
        if entry in found:
            return cls
    raise FileNotFoundError(f"none of {candidates} in the jars of {jar_dir}")


def dump_log_segments_class(jar_dir: str) -> str:
    # 4.3 moved it from core (Scala) to kafka-tools (Java).
    return _find_class(jar_dir, ["org.apache.kafka.tools.DumpLogSegments", "kafka.tools.DumpLogSegments"])


def storage_tool_class(jar_dir: str) -> str:
    return _find_class(jar_dir, ["kafka.tools.StorageTool", "org.apache.kafka.tools.StorageTool"])


def _uses_log4j2(jar_dir: str) -> bool:
    """Kafka 4.x logs through Log4j 2; 3.x through reload4j (the log4j 1.2 API)."""
    return bool(glob.glob(os.path.join(jar_dir, "log4j-core-*.jar")))


def _write_log_config(jar_dir: str, dest_dir: str, log_file: str | None, level: str = "INFO") -> list[str]:
    """Write a logging config for the JVM and return the -D option that selects it.

    log_file=None sends WARN and above to stderr (for the command-line tools, whose stdout
    must stay clean)."""
    os.makedirs(dest_dir, exist_ok=True)
    if _uses_log4j2(jar_dir):
        path = os.path.join(dest_dir, "log4j2.properties" if log_file else "log4j2-tools.properties")
        if log_file:
            appender = ["appender.out.type = File", f"appender.out.fileName = {log_file}"]
        else:
            appender = ["appender.out.type = Console", "appender.out.target = SYSTEM_ERR"]
        lines = [
            "status = warn",
            "name = offsets-lake-tests",
            *appender,
            "appender.out.name = OUT",
            "appender.out.layout.type = PatternLayout",
            "appender.out.layout.pattern = [%d] %p %m (%c)%n",
            f"rootLogger.level = {level if log_file else 'WARN'}",
            "rootLogger.appenderRef.out.ref = OUT",
            # per-request logging is noise here
            "logger.request.name = kafka.request.logger",
            "logger.request.level = WARN",
        ]
        # Log4j 2's own shutdown hook would stop logging while Kafka is still shutting down.
        option = f"-Dlog4j2.configurationFile={path} -Dlog4j2.shutdownHookEnabled=false"
    else:
        path = os.path.join(dest_dir, "log4j.properties" if log_file else "log4j-tools.properties")
        if log_file:
            appender = ["log4j.appender.out=org.apache.log4j.FileAppender", f"log4j.appender.out.File={log_file}"]
        else:
            appender = ["log4j.appender.out=org.apache.log4j.ConsoleAppender", "log4j.appender.out.Target=System.err"]
        lines = [
            f"log4j.rootLogger={level if log_file else 'WARN'}, out",
            *appender,
            "log4j.appender.out.layout=org.apache.log4j.PatternLayout",
            "log4j.appender.out.layout.ConversionPattern=[%d] %p %m (%c)%n",
            "log4j.logger.kafka.request.logger=WARN",
        ]
        option = f"-Dlog4j.configuration=file:{path}"
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return option.split()


def _run_tool(
    jar_dir: str, main_class: str, args: list[str], work_dir: str | None = None, timeout: float = TOOL_TIMEOUT_S
) -> subprocess.CompletedProcess:
    """Run one of Kafka's command-line tools; raise with its output if it fails.

    Its logging (WARN and above) goes to stderr, so stdout is the tool's output alone."""
    with tempfile.TemporaryDirectory(prefix="kafka-tool-") as tmp:
        log_opts = _write_log_config(jar_dir, work_dir or tmp, None)
        # A short-lived JVM: C1 only and the serial GC start fastest on a busy 2-core machine.
        cmd = [
            JAVA,
            "-Xmx512m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Djava.awt.headless=true",
            *log_opts,
            "-cp",
            os.path.join(os.path.abspath(jar_dir), "*"),
            main_class,
            *args,
        ]
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(
            f"{main_class} exited with {proc.returncode}\n$ {' '.join(cmd)}\n"
            f"--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}"
        )
    return proc


def consumer_groups_tool(jar_dir: str, bootstrap: str, args: list[str]) -> str:
    """Kafka's own kafka-consumer-groups (ConsumerGroupCommand) with `args`; its stdout."""
    main = _find_class(
        jar_dir, ["org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", "kafka.admin.ConsumerGroupCommand"]
    )
    return _run_tool(jar_dir, main, ["--bootstrap-server", bootstrap, *args]).stdout


JAVA_ASSIGNORS = {
    "range": "org.apache.kafka.clients.consumer.RangeAssignor",
    "roundrobin": "org.apache.kafka.clients.consumer.RoundRobinAssignor",
    "sticky": "org.apache.kafka.clients.consumer.StickyAssignor",
    "cooperative-sticky": "org.apache.kafka.clients.consumer.CooperativeStickyAssignor",
}


def java_console_consumer(
    jar_dir: str, work_dir: str, bootstrap: str, group: str, include: str, assignor: str, client_id: str
) -> subprocess.Popen:
    """A real Java consumer (Kafka's own kafka-console-consumer, a classic-protocol group member
    using the Java client's `assignor`) subscribed to the topics matching `include`; it stays in
    the group until terminated (SIGTERM: it closes and leaves the group)."""
    log_opts = _write_log_config(jar_dir, work_dir, None, level="WARN")
    main = _find_class(jar_dir, ["org.apache.kafka.tools.consumer.ConsoleConsumer", "kafka.tools.ConsoleConsumer"])
    props = {
        "partition.assignment.strategy": JAVA_ASSIGNORS[assignor],
        "client.id": client_id,
        "group.protocol": "classic",
        "session.timeout.ms": "30000",
        "heartbeat.interval.ms": "1000",
    }
    cmd = [
        JAVA,
        "-Xmx128m",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        "-Djava.awt.headless=true",
        *log_opts,
        "-cp",
        os.path.join(os.path.abspath(jar_dir), "*"),
        main,
        "--bootstrap-server",
        bootstrap,
        "--include",
        include,
        "--group",
        group,
        *[a for k, v in props.items() for a in ("--consumer-property", f"{k}={v}")],
    ]
    with open(os.path.join(work_dir, f"{client_id}.log"), "wb") as log:  # its warnings, for a failing test
        return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log)


def dump_log_segments(jar_dir: str, files: list[str]) -> str:
    """Kafka's DumpLogSegments with --offsets-decoder over files; returns its stdout."""
    if not files:
        raise ValueError("dump_log_segments needs at least one file")
    args = ["--offsets-decoder", "--files", ",".join(os.path.abspath(f) for f in files)]
    return _run_tool(jar_dir, dump_log_segments_class(jar_dir), args).stdout


# ---------------------------------------------------------------------------------------------
# The broker
# ---------------------------------------------------------------------------------------------


def _random_cluster_id() -> str:
    """A cluster id as `kafka-storage random-uuid` makes: 16 random bytes, base64url, no padding,
    and (like Kafka's Uuid.randomUuid) never starting with "-", which would read as an option."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
        if not cid.startswith("-"):
            return cid


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


class KafkaBroker:
    """One KRaft node acting as broker and controller, on loopback ports picked at start."""

    def __init__(
        self,
        jar_dir: str,
        work_dir: str,
        offsets_partitions: int = 50,
        extra_config: dict | None = None,
        heap: str = HEAP,
    ):
        self.jar_dir = os.path.abspath(jar_dir)
        self.work_dir = os.path.abspath(work_dir)
        self.offsets_partitions = int(offsets_partitions)
        self.extra_config = dict(extra_config or {})
        self.heap = heap
        self.version = kafka_version(self.jar_dir)
        self.log_dir = os.path.join(self.work_dir, "data")
        self.server_log = os.path.join(self.work_dir, "logs", "server.log")
        self.console_log = os.path.join(self.work_dir, "logs", "console.log")
        self.properties_file = os.path.join(self.work_dir, "server.properties")
        self.cluster_id = _random_cluster_id()
        self.port: int | None = None
        self.controller_port: int | None = None
        self.start_seconds: float | None = None
        self._proc: subprocess.Popen | None = None
        self._console: IO[bytes] | None = None

    # -- public ---------------------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        if self.port is None:
            raise RuntimeError("the broker has not been started")
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout: float = START_TIMEOUT_S) -> KafkaBroker:
        """Format the storage (first start only), start the JVM and wait until an admin client
        can list topics. Can be called again after stop(): same ports, same data."""
        if self.running:
            return self
        t0 = time.monotonic()
        os.makedirs(os.path.dirname(self.server_log), exist_ok=True)
        if self.port is None:  # a restart keeps its ports: the KRaft quorum records them
            self.port, self.controller_port = free_port(), free_port()
            while self.controller_port == self.port:
                self.controller_port = free_port()
        self._write_properties()
        if not os.path.exists(os.path.join(self.log_dir, "meta.properties")):
            self._format_storage()
        self._launch()
        try:
            self._wait_ready(t0 + timeout, timeout)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - t0
        return self

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            try:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)
        if self._console is not None:
            self._console.close()
            self._console = None
        atexit.unregister(self._kill_at_exit)

    def crash(self) -> None:
        """SIGKILL, as a crash: no clean shutdown, so no trimming of preallocated segments and a
        log recovery at the next start."""
        if self._proc is not None:
            self._proc.send_signal(signal.SIGKILL)
            self._proc.wait(timeout=30)
        self.stop()  # the process is gone: only the bookkeeping

    def log_tail(self, lines: int = 60) -> str:
        out = []
        for path in (self.server_log, self.console_log):
            if os.path.exists(path):
                with open(path, errors="replace") as f:
                    tail = f.readlines()[-lines:]
                out.append(f"--- {path} (last {len(tail)} lines)\n" + "".join(tail))
        return "\n".join(out) or "(no broker output)"

    def offsets_partition_dirs(self) -> list[str]:
        return sorted(
            glob.glob(os.path.join(self.log_dir, "__consumer_offsets-*")), key=lambda p: int(p.rsplit("-", 1)[1])
        )

    def admin(self, **configs):
        """A kafka-python KafkaAdminClient for this broker (close it when done)."""
        from kafka import KafkaAdminClient

        configs = {"client_id": "offsets-lake-tests", "request_timeout_ms": 30000, **configs}
        return KafkaAdminClient(bootstrap_servers=self.bootstrap, **configs)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def __repr__(self):
        state = f"running at {self.bootstrap}" if self.running else "stopped"
        return f"KafkaBroker({self.version}, {state}, {self.work_dir})"

    # -- steps ----------------------------------------------------------------------------------

    def _is_4x(self) -> bool:
        return _version_tuple(self.version) >= (4, 0)

    def _config(self) -> dict:
        cfg = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "log.dirs": self.log_dir,
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": str(self.offsets_partitions),
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "replica.high.watermark.checkpoint.interval.ms": str(HW_CHECKPOINT_INTERVAL_MS),
        }
        if self._is_4x():
            # Dynamic quorum (KIP-853), formatted with --standalone.
            cfg["controller.quorum.bootstrap.servers"] = f"127.0.0.1:{self.controller_port}"
            cfg["share.coordinator.state.topic.replication.factor"] = "1"
            cfg["share.coordinator.state.topic.min.isr"] = "1"
        else:
            # Static quorum, as 3.x brokers are usually run; StorageTool needs no quorum flag.
            cfg["controller.quorum.voters"] = f"1@127.0.0.1:{self.controller_port}"
        cfg.update({k: str(v) for k, v in self.extra_config.items()})
        return cfg

    def _write_properties(self) -> None:
        with open(self.properties_file, "w") as f:
            for k, v in self._config().items():
                f.write(f"{k}={v}\n")

    def _format_storage(self) -> None:
        args = ["format", "-t", self.cluster_id, "-c", self.properties_file]
        if "controller.quorum.bootstrap.servers" in self._config():
            args.append("--standalone")
        _run_tool(self.jar_dir, storage_tool_class(self.jar_dir), args, work_dir=self.work_dir)

    def _launch(self) -> None:
        log_opts = _write_log_config(self.jar_dir, self.work_dir, self.server_log)
        cmd = [
            JAVA,
            f"-Xms{self.heap}",
            f"-Xmx{self.heap}",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-Djava.awt.headless=true",
            f"-Dkafka.logs.dir={os.path.dirname(self.server_log)}",
            *log_opts,
            "-cp",
            os.path.join(self.jar_dir, "*"),
            "kafka.Kafka",
            self.properties_file,
        ]
        self._console = open(self.console_log, "ab")
        self._proc = subprocess.Popen(
            cmd,
            cwd=self.work_dir,
            stdin=subprocess.DEVNULL,
            stdout=self._console,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        atexit.register(self._kill_at_exit)

    def _wait_ready(self, deadline: float, timeout: float) -> None:
        from kafka.errors import KafkaConfigurationError

        last_error: BaseException | None = None
        while time.monotonic() < deadline:
            if self._proc is None or self._proc.poll() is not None:
                code = None if self._proc is None else self._proc.returncode
                raise RuntimeError(f"Kafka {self.version} exited with {code} while starting\n{self.log_tail()}")
            if self.port is not None and _port_open(self.port):
                try:
                    admin = self.admin(bootstrap_timeout_ms=5000, request_timeout_ms=5000)
                    try:
                        admin.list_topics()
                        return
                    finally:
                        admin.close()
                except (KafkaConfigurationError, TypeError):  # a bug here, not a slow broker
                    raise
                except Exception as e:  # not ready yet: no metadata, no controller, ...
                    last_error = e
            time.sleep(0.25)
        raise TimeoutError(
            f"Kafka {self.version} not ready at {self.bootstrap} after "
            f"{timeout:.0f}s (last error: {last_error!r})\n{self.log_tail()}"
        )

    def _kill_at_exit(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()


# ---------------------------------------------------------------------------------------------
# Snapshots of a live broker's offsets log
# ---------------------------------------------------------------------------------------------


def snapshot_offsets_log_dir(
    broker: KafkaBroker, dest: str, include_indexes: bool = False, topics: tuple[str, ...] = ()
) -> str:
    """Copy the running broker's `__consumer_offsets-<P>/` folders (and those of `topics`, the
    consumed topics' partitions) and its `replication-offset-checkpoint` into dest (a log dir
    the replay job can read); returns dest.

    The broker keeps running. Appends go to the page cache, so a plain file copy sees every
    byte the broker has acknowledged (an OffsetCommit is answered only after its records are
    appended); an append racing with the copy can leave a partial batch at the end of the
    active segment, which readers ignore as Kafka does. replication-offset-checkpoint (the
    high watermarks) is rewritten only every HW_CHECKPOINT_INTERVAL_MS, so this waits for one
    rewrite that starts after the call, to cover everything acknowledged before it.
    Index files are left out unless include_indexes (they are sparse 10 MiB preallocations)."""
    os.makedirs(dest, exist_ok=True)
    checkpoint = os.path.join(broker.log_dir, "replication-offset-checkpoint")
    _wait_for_rewrite(checkpoint, timeout=max(5.0, HW_CHECKPOINT_INTERVAL_MS / 1000 * 10))
    # Checkpoint first: the copied segments then hold at least everything below its watermarks.
    if os.path.exists(checkpoint):
        shutil.copyfile(checkpoint, os.path.join(dest, "replication-offset-checkpoint"))
    consumed = [
        os.path.join(broker.log_dir, name)
        for name in sorted(os.listdir(broker.log_dir))
        if any(re.fullmatch(re.escape(t) + r"-\d+", name) for t in topics)
    ]
    for src in broker.offsets_partition_dirs() + consumed:
        target = os.path.join(dest, os.path.basename(src))
        os.makedirs(target, exist_ok=True)
        for name in sorted(os.listdir(src)):
            path = os.path.join(src, name)
            if not os.path.isfile(path):
                continue
            if name.endswith(_INDEX_SUFFIXES) and not include_indexes:
                continue
            try:
                shutil.copyfile(path, os.path.join(target, name))
            except FileNotFoundError:  # removed by the cleaner/retention while copying
                pass
    return dest


def _wait_for_rewrite(path: str, timeout: float) -> None:
    """Wait until path is rewritten (new mtime or inode) after now; give up quietly at timeout."""

    def stamp():
        try:
            st = os.stat(path)
            return st.st_mtime_ns, st.st_ino
        except FileNotFoundError:
            return None

    before = stamp()
    started_ns = time.time_ns()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = stamp()
        # mtime comes from a coarse clock: a rewrite a few ms after the call may look older and
        # is then skipped for the next one, which only errs on the safe side.
        if now is not None and now != before and now[0] >= started_ns:
            return
        time.sleep(0.05)


def own_broker(
    tmp_path_factory,
    name: str,
    offsets_partitions: int,
    extra_config: dict | None = None,
    heap: str = HEAP,
    jars: str = "kafka4",
) -> KafkaBroker:
    """A module's own broker from `.jars/<jars>`, not started: no other test's clients write to
    it while the module compares two reads of its log. `extra_config`: broker settings added to
    (or replacing) the defaults; `heap`: its -Xms/-Xmx."""
    return KafkaBroker(
        os.path.join(REPO, ".jars", jars),
        str(tmp_path_factory.mktemp(name)),
        offsets_partitions=offsets_partitions,
        extra_config=extra_config,
        heap=heap,
    )


def own_kafka4(tmp_path_factory, name: str, offsets_partitions: int, **kw):
    """own_broker, started, as a generator for a module fixture (stopped after the module)."""
    broker = own_broker(tmp_path_factory, name, offsets_partitions, **kw).start()
    yield broker
    broker.stop()
