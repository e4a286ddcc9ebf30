"""Bytes -> records for __consumer_offsets. Pure Python; never imports pyspark.

    segments      log segment files -> batches -> records (magic 0/1/2, compression, CRCs)
    coordinator   coordinator keys and values (every record type and version)
    dumplog       the JSON that Kafka's DumpLogSegments --offsets-decoder prints
    errors        DecodeError and friends: always say which file, partition and offset
"""
from lib.codec.errors import (CorruptBatchError, DecodeError, UnknownRecordTypeError,  # noqa: F401
                              UnknownRecordVersionError)
