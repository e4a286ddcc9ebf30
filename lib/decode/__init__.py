"""Records -> Arrow rows in the offsets_log schema (pyarrow; numba for the fast path; never
pyspark). May import lib.codec and schemas.

decoder         SegmentDecoder: the one interface, picks the path
rows            the reference path, record by record in Python
fast            the same rows from numba kernels over the segment's bytes
group_kernel    GroupMetadata values parsed by numba, for fast's group_metadata column
json_kernel     KIP-848, share and streams group values written by numba as fast's value_json
arrow_kernel    the Arrow buffers of fast's chunks, written by numba
group_metadata  GroupMetadata values straight from bytes to the group_metadata struct
values          value rules both paths share (timestamps, member fields)
numba_bytes     byte-copy and load intrinsics for the kernels
"""

from lib.decode.decoder import SegmentDecoder
from lib.decode.rows import SCHEMA, decode_group_metadata

__all__ = ["SCHEMA", "SegmentDecoder", "decode_group_metadata"]
