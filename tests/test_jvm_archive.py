"""The driver JVM's class archive (lib/spark/jvm_archive.py): which options a driver gets, that a
changed jar names another archive, and that a job's JVM really loads Spark's classes from the
archive `make setup` wrote (the JVM's own class-loading log says where each class came from)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from lib.spark import jvm_archive as A
from lib.spark.session import spark_jars

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def archive_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(A.ARCHIVE_DIR_ENV, str(tmp_path))
    monkeypatch.delenv(A.SWITCH_ENV, raising=False)
    monkeypatch.delenv(A.DUMP_ENV, raising=False)
    return tmp_path


def test_a_driver_maps_the_archive_of_its_class_path_only_when_it_is_there(archive_dir, monkeypatch):
    jars = spark_jars()
    assert A.driver_options(jars) == ""  # none written in this folder: the JVM starts as before
    path = A.archive_path(jars)
    assert path is not None and os.path.dirname(path) == str(archive_dir)
    with open(path, "wb") as f:
        f.write(b"x")
    assert A.driver_options(jars) == f"-XX:SharedArchiveFile={path} -Xlog:cds=off -Xlog:cds+dynamic=off"
    monkeypatch.setenv(A.SWITCH_ENV, "off")
    assert A.driver_options(jars) == ""
    monkeypatch.delenv(A.SWITCH_ENV)
    monkeypatch.setenv(A.DUMP_ENV, "/somewhere/driver.jsa")
    assert (
        A.driver_options(jars) == "-XX:ArchiveClassesAtExit=/somewhere/driver.jsa -Xlog:cds=off -Xlog:cds+dynamic=off"
    )


def test_a_touched_or_missing_jar_names_another_archive(tmp_path):
    jar = tmp_path / "extra.jar"
    jar.write_bytes(b"PK\x05\x06" + bytes(18))
    before = A.fingerprint([str(jar)])
    assert before is not None and len(before) == 16
    assert A.fingerprint([str(jar)]) == before
    os.utime(jar, ns=(1_000_000_000, 1_000_000_000))
    touched = A.fingerprint([str(jar)])
    assert touched not in (None, before)
    jar.write_bytes(b"PK\x05\x06" + bytes(19))
    os.utime(jar, ns=(1_000_000_000, 1_000_000_000))
    assert A.fingerprint([str(jar)]) not in (None, before, touched)
    assert A.fingerprint([str(tmp_path / "gone.jar")]) is None
    assert A.fingerprint([str(jar)], java=str(tmp_path / "no-java")) is None


CHILD = textwrap.dedent(
    """
    import sys
    from lib.spark.session import REPLAY_DEFAULTS, REPLAY_JVM_FLAGS, build_context
    jobs = build_context("archive-test", {"spark.driver.extraJavaOptions": REPLAY_JVM_FLAGS + " -Xlog:class+load=info:file=" + sys.argv[1]}, REPLAY_DEFAULTS)
    assert jobs.sparkContext.parallelize(range(4), 2).map(lambda x: x * 2).sum() == 12
    jobs.stop(wait_for_jvm_s=120)  # (its class-loading log complete)
    """
)


def _class_sources(tmp_path, switch: str) -> dict[str, str]:
    log = tmp_path / f"load-{switch}.log"
    env = dict(os.environ, PYTHONPATH=REPO, **{A.SWITCH_ENV: switch})
    env.pop(A.ARCHIVE_DIR_ENV, None)
    env.pop(A.DUMP_ENV, None)
    subprocess.run([sys.executable, "-c", CHILD, str(log)], env=env, cwd=REPO, check=True, timeout=300)
    sources = {}
    for line in log.read_text().splitlines():
        # [0.412s][info][class,load] org.apache.spark.SparkContext source: shared objects file (top)
        _, _, rest = line.partition("[class,load] ")
        name, _, source = rest.partition(" source: ")
        sources[name] = source
    return sources


def test_the_jobs_driver_loads_sparks_classes_from_the_archive_make_setup_wrote(tmp_path):
    path = A.archive_path(spark_jars())
    assert path is not None and os.path.isfile(path), f"no JVM class archive at {path}: run `make setup`"
    on = _class_sources(tmp_path, "on")
    assert on["org.apache.spark.SparkContext"] == "shared objects file (top)"
    assert on["org.apache.spark.api.python.PythonRDD"] == "shared objects file (top)"
    off = _class_sources(tmp_path, "off")
    assert (
        off["org.apache.spark.SparkContext"].startswith("file:")
        and "spark-core" in off["org.apache.spark.SparkContext"]
    )
