"""Spark's Python daemon in local mode (spark.python.daemon.module, lib.spark.session), with
pyspark imported from the installed package instead of Spark's pyspark.zip.

Spark puts $SPARK_HOME/python/lib/pyspark.zip and py4j's zip first on its Python workers' path.
A zip holds sources only, so every run's daemon compiled pyspark's modules again before its
first task could start (1.2 s on this kind of machine, against 0.3 s from compiled modules).
With pip's pyspark, SPARK_HOME is the installed package and the zips are its own copy of the same
sources: they go to the end of the path, and pyspark and py4j come from the package, compiled
when it was installed. Any other layout (a Spark distribution) is left as Spark made it."""

from __future__ import annotations

import os
import sys


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


if __name__ == "__main__":
    sys.path[:] = prefer_installed_pyspark(sys.path)
    import pyspark.daemon

    pyspark.daemon.manager()
