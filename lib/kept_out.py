"""Packages a process keeps from being imported (standard library only).

pyarrow imports pandas on its first conversion of Python objects, and when pyarrow.dataset is
imported, only to tell whether an object is a pandas one: 0.2-0.3 s of CPU in a process that
never uses pandas. Where pandas cannot be imported, pyarrow converts without it, and asks again
(importing it then) only where a caller wants pandas itself (to_pandas), so a process can keep it
out for a while and let it in after."""

from __future__ import annotations

import importlib.abc
import sys


class KeptOut(importlib.abc.MetaPathFinder):
    """While installed (first on sys.meta_path: `install`, or as a context manager), `packages`
    and their modules are not importable here, as where they are not installed; those imported
    before stay."""

    def __init__(self, packages: tuple[str, ...]):
        self.packages = frozenset(packages)

    def find_spec(self, fullname, path=None, target=None):
        if fullname.partition(".")[0] in self.packages:
            raise ModuleNotFoundError(f"No module named {fullname!r} (kept out of this process)", name=fullname)
        return None

    def install(self) -> KeptOut:
        if self not in sys.meta_path:
            sys.meta_path.insert(0, self)
        return self

    def release(self) -> None:
        """The packages importable again."""
        if self in sys.meta_path:
            sys.meta_path.remove(self)

    def __enter__(self) -> KeptOut:
        return self.install()

    def __exit__(self, *exc) -> None:
        self.release()
