"""The code Spark ships to executors: lib/, schemas/ and jobs/ as one zip for --py-files
(Python and SQL sources only: no caches, no tests) with conf/spark.conf, at
build/offsets_lake.zip.

    python -m jobs.build_dist [--out build/offsets_lake.zip]
"""

from __future__ import annotations

import argparse
import os
import zipfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("lib", "schemas", "jobs")
CONF = ("conf/spark.conf",)  # the jobs' Spark defaults travel with the code


def build(out: str) -> str:
    os.makedirs(os.path.dirname(out), exist_ok=True)
    tmp = out + ".tmp"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for package in PACKAGES:
            for root, dirs, files in os.walk(os.path.join(REPO, package)):
                dirs[:] = sorted(d for d in dirs if d != "__pycache__")
                for name in sorted(files):
                    if name.endswith((".py", ".sql")):
                        path = os.path.join(root, name)
                        z.write(path, os.path.relpath(path, REPO))
        for name in CONF:
            z.write(os.path.join(REPO, name), name)
    os.replace(tmp, out)  # whole or not at all
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="build_dist")
    p.add_argument("--out", default=os.path.join(REPO, "build", "offsets_lake.zip"))
    args = p.parse_args(argv)
    print(build(args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
