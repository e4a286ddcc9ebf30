"""A log dir as it was at an earlier instant: every partition (offsets and consumed topics)
cut before its first record batch stamped at or after that instant, later segments left out.
What a broker's log dir held then, for tests and the benchmark's incremental runs."""

from __future__ import annotations

import os
import re
import shutil
import struct

_SEGMENT = re.compile(r"^\d{20}\.log$")
_INDEX_SUFFIXES = (".index", ".timeindex", ".txnindex", ".snapshot")
_I64 = struct.Struct(">q")


def _entry_timestamp(data: bytes, pos: int) -> int | None:
    """The entry's max timestamp (magic 2), its own timestamp (magic 1), None for magic 0."""
    magic = data[pos + 16]
    if magic >= 2:
        return _I64.unpack_from(data, pos + 35)[0]
    if magic == 1:
        return _I64.unpack_from(data, pos + 18)[0]
    return None


def cut_segment_bytes(data: bytes, before_ms: int) -> tuple[int, bool]:
    """(bytes to keep, whether the cut fell inside): whole entries stamped before `before_ms`,
    up to the first one stamped at or after it; a partial entry at the end is left out."""
    pos = 0
    while pos + 17 <= len(data):
        size = struct.unpack_from(">i", data, pos + 8)[0]
        end = pos + 12 + size
        if size < 14 or end > len(data):
            break
        ts = _entry_timestamp(data, pos)
        if ts is not None and ts >= before_ms:
            return pos, True
        pos = end
    return pos, False


def cut_log_dir_at(src: str, dest: str, before_ms: int) -> None:
    """Copy the log dir `src` to `dest` (replaced) as of `before_ms`: see the module's doc.
    Partition folders keep their other files (partition.metadata, checkpoints); index files
    are left out (nothing here reads them). A segment copied whole keeps its modification time:
    a broker's log dir does not touch a segment nothing is appended to, so a run on the cut
    and the next on `src` see that partition's segments as they are (its signature unchanged)."""
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(dest)
    for name in sorted(os.listdir(src)):
        path = os.path.join(src, name)
        if not os.path.isdir(path):
            shutil.copy(path, os.path.join(dest, name))
            continue
        out = os.path.join(dest, name)
        os.makedirs(out)
        segments = sorted(f for f in os.listdir(path) if _SEGMENT.match(f))
        for f in os.listdir(path):
            if not _SEGMENT.match(f) and not f.endswith(_INDEX_SUFFIXES):
                shutil.copy(os.path.join(path, f), os.path.join(out, f))
        for i, f in enumerate(segments):
            with open(os.path.join(path, f), "rb") as fh:
                data = fh.read()
            keep, cut = cut_segment_bytes(data, before_ms)
            if keep or i == 0:
                with open(os.path.join(out, f), "wb") as fh:
                    fh.write(data[:keep])
                if keep == len(data):  # a segment nothing was appended to since: as it was listed then
                    shutil.copystat(os.path.join(path, f), os.path.join(out, f))
            if cut:
                break
