"""numba's on-disk cache for kernels imported from a zip (spark-submit --py-files).

numba keys a zipped module's cache folder by the zip's own location, and Spark copies the zip
into a new folder for every application: each executor would compile every kernel again in
every application (about 10 s of CPU). StableZipCacheLocator keys the folder by the module's
path inside the zip instead; numba's index still checks each entry against a hash of the
module's source, so a changed zip recompiles, an unchanged one loads."""

from __future__ import annotations

import hashlib
import posixpath

from numba.core import config
from numba.core.caching import ZipCacheLocator

# numba's own locators (numba.core.caching.CacheImpl._locator_classes), ours in place of the zip one
LOCATORS = (
    "UserProvidedCacheLocator,InTreeCacheLocator,UserWideCacheLocator,IPythonCacheLocator,"
    "lib.numba_cache.StableZipCacheLocator"
)


class StableZipCacheLocator(ZipCacheLocator):
    @classmethod
    def get_suitable_cache_subpath(cls, py_file):
        _, internal = cls._split_zip_path(py_file)
        folder = posixpath.dirname(internal)
        digest = hashlib.sha1(folder.encode()).hexdigest()
        return "offsets_lake_zip_" + folder.replace("/", "_") + "_" + digest


def use_stable_zip_cache(module_file: str) -> None:
    """Called by a kernel module before its first @njit(cache=True): when it was imported
    from a zip and nobody chose locators (NUMBA_CACHE_LOCATOR_CLASSES), use ours."""
    # numba.core.config sets its attributes at run time (from NUMBA_* variables)
    if ".zip" in module_file and not getattr(config, "CACHE_LOCATOR_CLASSES", ""):
        setattr(config, "CACHE_LOCATOR_CLASSES", LOCATORS)  # noqa: B010
