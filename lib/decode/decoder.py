"""SegmentDecoder: segment bytes -> offsets_log Arrow batches, by the compiled path
(lib.decode.fast) when numba imports, else record by record (lib.decode.rows). Both give the
same rows and the same errors (tests/test_fastdecode.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from lib.decode.rows import PythonDecoder


def _fast_available() -> bool:
    try:
        import lib.decode.fast  # noqa: F401 - numba may be missing

        return True
    except ImportError:
        return False


class SegmentDecoder(PythonDecoder):
    """See PythonDecoder for the arguments and results. While iterating,
    `batch_group_metadata` is, for the batch just yielded, {row: the group_metadata value as a
    Python dict} when the decoder has them (the fast path), else None: the replay engine takes
    them instead of converting the Arrow column back.
    `fast`: use the numba kernels (default: when numba imports). After iterating,
    compiled_batches / python_batches / python_whole_file say which decoder read them."""

    def __init__(self, path: str, partition: int, *, fast: bool | None = None, **kwargs):
        super().__init__(path, partition, **kwargs)
        self.fast = _fast_available() if fast is None else fast
        # which decoder read the batches (the fast path sets them): compiled kernels, the Python
        # decoder for odd batches, or the Python decoder for the whole file (odd framing)
        self.compiled_batches = 0
        self.python_batches = 0
        self.python_whole_file = False

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        if self.fast:
            from lib.decode.fast import iter_fast

            return iter_fast(self)
        return PythonDecoder.__iter__(self)
