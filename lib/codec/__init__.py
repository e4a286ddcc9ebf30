"""Bytes <-> records for __consumer_offsets. Standard library only (plus the compression and
CRC bindings); never pyarrow or pyspark.

    segments      log segment files -> batches -> records (magic 0/1/2, compression, CRCs)
    serde         coordinator keys and values: every record type and version (Kafka's
                  CoordinatorRecordSerde and the consumer-protocol bytes)
    generic       the schema-driven reader/writer behind serde
    primitives    varints, strings, buffers
    compression   gzip / snappy / lz4 / zstd
    writer        records -> batches -> segment bytes (test logs, the coordinator's tests)
    dumplog       the JSON that Kafka's DumpLogSegments --offsets-decoder prints
    errors        DecodeError and friends: always say which file, partition and offset
"""

from lib.codec.errors import CorruptBatchError, DecodeError, UnknownRecordTypeError, UnknownRecordVersionError

__all__ = ["CorruptBatchError", "DecodeError", "UnknownRecordTypeError", "UnknownRecordVersionError"]
