"""Two versions side by side on make bench's log: `make bench-ab BASE=<rev>` (python -m
jobs.bench_ab --base REV). The working tree (uncommitted changes included) against a commit,
each run its own process, the two versions alternating round by round (which goes first
alternates too), so that the machine's drift between hours, larger than most changes' effect,
falls on both alike.

Each version first makes its own full run of the cut log (its warehouse is then copied for each
round); a round is, for each version, the 1% incremental run on that copy and the run with
nothing new after it (with --full, also a full run of the cut log). Printed: each version's
medians, the incremental run's margin over its no-op, (incremental - no-op) / full, and the
new version's against the base's. The base runs from a git worktree under build/bench-ab
(kept: bytecode and numba's cache are made once per commit), with this repository's
interpreter and packages."""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field

from jobs.bench import INCREMENT, REPO, code_env, cut_log_dir_at_share, ensure_busy_log, run_job

AB_DIR = os.path.join(REPO, "build", "bench-ab")


@dataclass
class Version:
    name: str
    tree: str
    after_full: str  # its full run's warehouse
    walls: dict[str, list[float]] = field(default_factory=lambda: {"incremental": [], "noop": [], "full": []})

    def median(self, what: str) -> float | None:
        return statistics.median(self.walls[what]) if self.walls[what] else None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="bench_ab", description=__doc__.split("\n\n")[0])
    p.add_argument("--base", required=True, help="the commit to compare the working tree with")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--full", action="store_true", help="a full run of the cut log in each round too")
    p.add_argument("--records", type=int, default=10_000_000)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--data", default=os.path.join(REPO, "bench-data"))
    args = p.parse_args(argv)

    sha = _git("rev-parse", "--verify", f"{args.base}^{{commit}}").strip()
    whole, stats = ensure_busy_log(args.data, args.records, args.seed)
    cut = os.path.join(args.data, "busy-cut")
    cut_log_dir_at_share(whole, cut, stats, 1 - INCREMENT / (1 + INCREMENT))
    now_ms = stats["end_ts"]
    versions = [
        Version(f"base {sha[:12]}", _worktree(sha), os.path.join(AB_DIR, "after-base")),
        Version("working tree", REPO, os.path.join(AB_DIR, "after-new")),
    ]
    wh = os.path.join(AB_DIR, "warehouse")
    try:
        _rounds(versions, args.rounds, args.full, whole, cut, wh, now_ms)
    finally:
        for path in (wh, *(v.after_full for v in versions)):  # (some 650 MB each)
            shutil.rmtree(path, ignore_errors=True)
    return 0


def _rounds(versions: list[Version], rounds: int, full: bool, whole: str, cut: str, wh: str, now_ms: int) -> None:
    for v in versions:
        _run(v.tree, cut, v.after_full, now_ms, fresh=True)
    for r in range(rounds):
        for v in versions if r % 2 == 0 else versions[::-1]:
            shutil.rmtree(wh, ignore_errors=True)
            shutil.copytree(v.after_full, wh)
            v.walls["incremental"].append(_run(v.tree, whole, wh, now_ms))
            v.walls["noop"].append(_run(v.tree, whole, wh, now_ms))
            if full:
                v.walls["full"].append(_run(v.tree, cut, wh, now_ms, fresh=True))
        print(f"round {r + 1}: " + "; ".join(f"{v.name} " + _round(v) for v in versions), flush=True)
    print()
    for v in versions:
        print(_summary(v))
    base, new = versions
    margins = [_margin(v) for v in versions]
    print(f"margin over the no-op, working tree / base: {margins[1] / margins[0]:.3f}")
    if full:
        print(f"full run, working tree / base: {new.median('full') / base.median('full'):.3f}")  # type: ignore[operator]


def _margin(v: Version) -> float:
    return v.median("incremental") - v.median("noop")  # type: ignore[operator]


def _round(v: Version) -> str:
    return " ".join(f"{what} {walls[-1]:.2f}" for what, walls in v.walls.items() if walls)


def _summary(v: Version) -> str:
    line = f"{v.name:20s} incremental {v.median('incremental'):.3f} s, no-op {v.median('noop'):.3f} s, margin {_margin(v):.3f} s"
    full = v.median("full")
    if full is not None:
        line += f", full {full:.2f} s, (incremental - no-op) / full {_margin(v) / full:.4f}"
    each = "; ".join(f"{what} {' '.join(f'{w:.2f}' for w in walls)}" for what, walls in v.walls.items() if walls)
    return f"{line}\n{'':20s} each: {each}"


def _run(tree: str, log_dir: str, warehouse: str, now_ms: int, fresh: bool = False) -> float:
    """The default command of the code in `tree` as its own process (as make bench runs it):
    its wall time."""
    return run_job(log_dir, warehouse, now_ms, fresh=fresh, code=tree).wall


def _worktree(sha: str) -> str:
    """A checkout of `sha` with its bytecode and numba's cache made (once)."""
    tree = os.path.join(AB_DIR, sha[:12])
    ready = os.path.join(tree, ".bench-ab-ready")
    if os.path.exists(ready):
        return tree
    if os.path.exists(tree):
        _git("worktree", "remove", "--force", tree)
    os.makedirs(AB_DIR, exist_ok=True)
    _git("worktree", "prune")
    _git("worktree", "add", "--detach", tree, sha)
    print(f"compiling {sha[:12]}'s bytecode and numba kernels in {tree}", flush=True)
    t0 = time.monotonic()
    for step in (["-m", "compileall", "-q", "lib", "jobs", "schemas"], ["-m", "lib.testdata.kernels", "--warm"]):
        subprocess.run([sys.executable, *step], cwd=tree, env=code_env(tree), check=True, stdout=subprocess.DEVNULL)
    open(ready, "w").close()
    print(f"compiled in {time.monotonic() - t0:.0f}s", flush=True)
    return tree


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, check=True, capture_output=True, text=True).stdout


if __name__ == "__main__":
    sys.exit(main())
