"""The layers of lib/ (lib/__init__.py) import only the layers below them, and the JVM-free
ones never load pyspark: checked statically over every import statement (function-level ones
too) and at run time in a fresh interpreter."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parent.parent

# layer -> what it may import from lib (schemas is the shared vocabulary of every layer)
# modules every layer may use; they import nothing of lib
BOTTOM = {"storage", "numba_cache", "ports", "allocator", "kept_out"}
ALLOWED = {
    "storage": set(),
    "numba_cache": set(),
    "allocator": set(),
    "kept_out": set(),
    "codec": BOTTOM,
    "assignors": BOTTOM,  # lib.assignors.fast: numba kernels (the rest is stdlib only)
    "decode": {"codec"} | BOTTOM,
    "replay": {"codec", "decode", "assignors"} | BOTTOM,
    "source": {"codec", "decode"} | BOTTOM,
    "lake": {"codec", "decode", "replay", "source", "assignors"} | BOTTOM,
    "coordinator": {"codec", "decode", "replay", "source", "lake", "assignors"} | BOTTOM,
    "restore": {"codec", "decode", "replay", "source", "lake"} | BOTTOM,
    "spark": {"codec", "decode", "replay", "source", "lake", "assignors"} | BOTTOM,
    "reporting": {"codec", "decode", "replay", "source", "lake", "spark", "cli", "assignors", "restore"} | BOTTOM,
    "testdata": {"codec", "decode", "replay", "source", "assignors", "lake"} | BOTTOM,
    "cli": set(),
}
PYSPARK_FREE = [
    "lib.storage",
    "lib.assignors",
    "lib.assignors.audit",
    "lib.numba_cache",
    "lib.allocator",
    "lib.kept_out",
    "lib.codec",
    "lib.decode",
    "lib.replay",
    "lib.replay.engine",
    "lib.replay.groups",
    "lib.replay.offsets",
    "lib.replay.expiry",
    "lib.source.logdir",
    "lib.source.live",
    "lib.source.topic_log",
    "lib.source.topic_scan",
    "lib.lake.lag_task",
    "lib.lake.lag_rows",
    "lib.lake.lag_input",
    "lib.lake.partition_task",
    "lib.lake.delta",
    "lib.lake.seams",
    "lib.lake.worker_errors",
    "lib.coordinator",
    "lib.restore.plan",
    "lib.restore.cluster",
]


def _layer_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "lib" and len(parts) > 1 else None


def _imports(path: pathlib.Path) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
    return out


def test_each_layer_imports_only_the_layers_below_it():
    wrong = []
    for path in sorted((REPO / "lib").rglob("*.py")):
        rel = path.relative_to(REPO)
        layer = rel.parts[1].removesuffix(".py") if len(rel.parts) > 1 else None
        if layer not in ALLOWED:
            continue
        spark_twin = path.name.endswith("_spark.py")  # Spark-expression twins of a rule
        for line, module in _imports(path):
            target = _layer_of(module)
            if module.split(".")[0] in ("jobs", "tests"):
                wrong.append(f"{rel}:{line} imports {module}")
            if target is not None and target != layer and target not in ALLOWED[layer]:
                wrong.append(f"{rel}:{line} ({layer}) imports {module} ({target})")
            if module.split(".")[0] == "pyspark" and layer not in ("spark", "reporting") and not spark_twin:
                wrong.append(f"{rel}:{line} ({layer}) imports pyspark")
    assert wrong == []


def test_production_code_never_imports_the_test_data_builders():
    wrong = [
        f"{p.relative_to(REPO)}:{line} imports {m}"
        for top in ("lib", "jobs")
        for p in sorted((REPO / top).rglob("*.py"))
        if "testdata" not in p.parts and p.name != "bench.py"
        for line, m in _imports(p)
        if m.startswith("lib.testdata")
    ]
    assert wrong == []


def test_the_jvm_free_layers_do_not_load_pyspark():
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in PYSPARK_FREE)
        + "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j')))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_retention_default_outside_python_agrees_with_its_home():
    """The Airflow DAGs (parsed without lib on their path) and the SQL audit's parameter
    default carry offsets.retention.minutes' default as text: it must be the one constant."""
    from lib.replay.expiry import DEFAULT_RETENTION_MINUTES

    common = (REPO / "airflow_dags" / "offsets_lake_common.py").read_text(encoding="utf-8")
    assert f'"retention_minutes": {DEFAULT_RETENTION_MINUTES},' in common
    sql = (REPO / "sql" / "audits" / "groups_expiring_within.sql").read_text(encoding="utf-8")
    assert f"-- param retention_minutes int = {DEFAULT_RETENTION_MINUTES}:" in sql


def test_the_replay_driver_does_not_load_numba():
    """The kernels run in the workers; loading numba in the driver cost it about 60 MB of
    memory (make bench: peak_rss_mb_driver_python)."""
    code = "import sys, jobs.replay_offsets, lib.spark.pipeline, lib.spark.lag\nprint('numba' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def _modules(top: str) -> dict[str, pathlib.Path]:
    out = {}
    for path in sorted((REPO / top).rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imported_names(path: pathlib.Path) -> list[tuple[int, str, str]]:
    """(line, module, name) of every `from module import name` (function-level ones too)."""
    return [
        (node.lineno, node.module, a.name)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
        for a in node.names
    ]


def test_no_module_imports_another_ones_private_names():
    """A name with a leading underscore is its module's own: another module that needs it gets
    a public name (the tests may reach into a module; the code may not)."""
    wrong = [
        f"{path.relative_to(REPO)}:{line} imports {module}.{name}"
        for top in ("lib", "jobs", "schemas", "airflow_dags", "samples")
        for mod, path in _modules(top).items()
        for line, module, name in _imported_names(path)
        if module.split(".")[0] in ("lib", "jobs", "schemas")
        and module != mod
        and name.startswith("_")
        and not name.startswith("__")
    ]
    assert wrong == []


def test_no_import_cycle_between_the_modules_of_a_layer():
    """Inside a layer of lib (and inside jobs), no two modules import each other, directly or
    around a longer cycle, counting function-level imports: a cycle means a rule or a helper
    sits in the wrong one."""
    modules = {**_modules("lib"), **_modules("jobs")}
    graph: dict[str, set[str]] = {m: set() for m in modules}

    def same_layer(mod: str, target: str) -> bool:
        return target in modules and target != mod and target.split(".")[:2] == mod.split(".")[:2]

    for mod, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                graph[mod] |= {a.name for a in node.names if same_layer(mod, a.name)}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # `from package import module` imports the module; any other name, the package
                subs = {f"{node.module}.{a.name}" for a in node.names}
                graph[mod] |= {t for t in subs if same_layer(mod, t)}
                if any(t not in modules for t in subs) and same_layer(mod, node.module):
                    graph[mod].add(node.module)
    cycles = []
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycles.append(" -> ".join(path[path.index(n) :] + [n]))
            elif n not in state:
                visit(n, path + [n])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert cycles == []
