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
