"""A class-data-sharing archive of the driver JVM's classes (JDK 13+ dynamic AppCDS, JEP 350).

Every job starts a JVM that loads and verifies some ten thousand classes of Spark's, Scala's and
Delta's jars before the first line of work: on this repository's machines 3.7-4.1 s of a no-op
run's 4.4-5.5 s. With the classes mapped from an archive that a run wrote at its exit, the
same start took 2.2-2.5 s, and the first job 0.35 s instead of 0.6 s.

The archive is only valid for the JVM and the class path it was written with (the JVM checks
both, and each jar's size and time), so its file is named by their fingerprint: a changed JDK,
pyspark or jar set names another file, and a JVM without its archive starts as before. `make
setup` writes it (`python -m jobs.jvm_archive`); OFFSETS_LAKE_JVM_ARCHIVE=off turns it
off. Only a driver started here on the default class path uses it (not a job under
spark-submit, whose JVM is up before Python runs, nor one with the object store's jars)."""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import subprocess
import tempfile

ARCHIVE_DIR_ENV = "OFFSETS_LAKE_JVM_ARCHIVE_DIR"
SWITCH_ENV = "OFFSETS_LAKE_JVM_ARCHIVE"  # "off": start without the archive
DUMP_ENV = "OFFSETS_LAKE_JVM_ARCHIVE_DUMP"  # path: this process's driver writes its archive there at exit
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_DIR = os.path.join(REPO_ROOT, ".jars", "cds")
# the JVM's unified logging prints CDS's warnings (an archive it cannot use: a jar touched
# since) on stdout by default; the job's output is its own
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def java_executable() -> str | None:
    """The java that spark-submit starts (JAVA_HOME's, else the one on PATH), resolved."""
    home = os.environ.get("JAVA_HOME")
    found = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return os.path.realpath(found) if found and os.path.exists(found) else None


def _spark_jar_dir() -> str | None:
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        return None
    jars = os.path.join(list(spec.submodule_search_locations)[0], "jars")
    return jars if os.path.isdir(jars) else None


def fingerprint(jars: list[str], java: str | None = None) -> str | None:
    """What the archive depends on: the JVM (its binary and module image) and every jar of the
    driver's class path and of spark.jars, each by path, size and time. None when there is no
    JVM or no pyspark to take it from."""
    java = java or java_executable()
    spark_jars = _spark_jar_dir()
    if java is None or spark_jars is None:
        return None
    java_home = os.path.dirname(os.path.dirname(java))
    files = [java, os.path.join(java_home, "lib", "modules")]
    files += sorted(glob.glob(os.path.join(spark_jars, "*.jar"))) + list(jars)
    h = hashlib.sha256()
    for path in files:
        try:
            st = os.stat(path)
        except OSError:
            return None
        h.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def archive_path(jars: list[str], java: str | None = None) -> str | None:
    key = fingerprint(jars, java)
    if key is None:
        return None
    return os.path.join(os.environ.get(ARCHIVE_DIR_ENV, DEFAULT_DIR), f"driver-{key}.jsa")


def driver_options(jars: list[str]) -> str:
    """The driver JVM's options for the archive of this class path: write it at exit (under
    DUMP_ENV), map it (when it exists), or nothing."""
    if os.environ.get(SWITCH_ENV, "").lower() == "off":
        return ""
    dump = os.environ.get(DUMP_ENV)
    if dump:
        return f"-XX:ArchiveClassesAtExit={dump} {QUIET}"
    path = archive_path(jars)
    if path is None or not os.path.isfile(path):
        return ""
    return f"-XX:SharedArchiveFile={path} {QUIET}"


def write_archive(jars: list[str], workload: list[str], timeout_s: float = 600.0) -> tuple[str, bool]:
    """Write the archive of the driver class path with `jars`, unless it is there: `workload`
    (a command; "{folder}" in it is a scratch folder) runs in a child process whose driver JVM
    writes the archive as it exits. The file appears whole or not at all (written aside, then
    renamed), and archives of earlier JVMs or jar sets go. Returns (path, made)."""
    path = archive_path(jars)
    if path is None:
        raise RuntimeError("no java or no pyspark: cannot write the JVM's class archive")
    if os.path.isfile(path):
        return path, False
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="jvm-archive-", dir=os.path.dirname(path)) as tmp:
        part = os.path.join(tmp, "driver.jsa")
        env = dict(os.environ, **{DUMP_ENV: part})
        env.pop(SWITCH_ENV, None)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO_ROOT, env.get("PYTHONPATH", "")) if p)
        command = [a.replace("{folder}", tmp) for a in workload]
        subprocess.run(command, env=env, check=True, timeout=timeout_s, stdout=subprocess.DEVNULL)
        if not os.path.isfile(part):
            raise RuntimeError(f"the JVM wrote no class archive at {part}")
        os.replace(part, path)
    for old in glob.glob(os.path.join(os.path.dirname(path), "driver-*.jsa")):
        if old != path:  # of an earlier JDK or jar set: never valid again
            os.remove(old)
    return path, True
