#!/usr/bin/env bash
# Builds the JVM side of offsets_lake (the read-only SQL extension) into one jar, compiled
# against the jars of the pyspark the venv runs, so the two cannot drift apart.
#   conf/jvm/build.sh [OUT_JAR] [PYTHON]
# OUT_JAR defaults to .jars/spark/offsets-lake-jvm.jar (the folder every session loads; make jvm-extension), PYTHON to the repository's .venv/bin/python.
# Rebuilds from scratch each time (a few seconds): no stale classes survive in the jar.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="${1:-$repo/.jars/spark/offsets-lake-jvm.jar}"
python="${2:-$repo/.venv/bin/python}"

command -v javac >/dev/null || { echo "build.sh: javac not found (a JDK 17+ is needed)" >&2; exit 1; }
command -v jar >/dev/null || { echo "build.sh: jar not found (a JDK 17+ is needed)" >&2; exit 1; }
[ -x "$python" ] || { echo "build.sh: no python at $python" >&2; exit 1; }
jars="$("$python" -c 'import pyspark,os;print(os.path.join(os.path.dirname(pyspark.__file__),"jars"))')"
ls "$jars"/spark-catalyst_*.jar >/dev/null 2>&1 || { echo "build.sh: no Spark jars in $jars" >&2; exit 1; }

mapfile -t sources < <(find "$here/src" -name '*.java' | sort)
[ "${#sources[@]}" -gt 0 ] || { echo "build.sh: no sources under $here/src" >&2; exit 1; }

classes="$(mktemp -d)"
trap 'rm -rf "$classes"' EXIT
# -Werror: a Spark upgrade that deprecates or changes what we call fails here (-path: some
# Spark jars name absent jars in their manifest Class-Path).
javac --release 17 -Xlint:all,-path,-serial,-processing -Werror -encoding UTF-8 \
    -cp "$jars/*" -d "$classes" "${sources[@]}"
mkdir -p "$(dirname "$out")"
# Written next to the target and moved over it: a running JVM never sees half a jar.
tmp="$out.tmp.$$"
jar --create --file "$tmp" -C "$classes" .
mv -f "$tmp" "$out"
echo "built $out"
