"""The one exception family the codec raises: it always says where the bytes came from."""

from __future__ import annotations


class DecodeError(Exception):
    """Bytes that cannot be decoded. Carries the file, offsets partition and log offset when known."""

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
        position: int | None = None,
    ):
        super().__init__(message)
        self.message = message
        self.file = file
        self.partition = partition
        self.offset = offset
        self.position = position

    def locate(
        self,
        *,
        file: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
        position: int | None = None,
    ) -> DecodeError:
        """Fill in location fields that are still unknown; returns self for `raise e.locate(...)`."""
        if self.file is None:
            self.file = file
        if self.partition is None:
            self.partition = partition
        if self.offset is None:
            self.offset = offset
        if self.position is None:
            self.position = position
        return self

    def __str__(self) -> str:
        where = place(self.file, None, self.partition, self.offset, self.position)
        return f"{self.message} ({where})" if where else self.message


def place(file: str | None, topic: str | None, partition: int | None, offset: int | None, position: int | None) -> str:
    """Where in a log something happened, as every error message names it."""
    where = []
    if file is not None:
        where.append(f"file {file}")
    if topic is not None:
        where.append(f"topic {topic}")
    if partition is not None:
        where.append(f"partition {partition}")
    if offset is not None:
        where.append(f"log offset {offset}")
    if position is not None:
        where.append(f"byte position {position}")
    return ", ".join(where)


class CorruptBatchError(DecodeError):
    """A batch or message whose framing or checksum is wrong."""


class UnknownRecordTypeError(DecodeError):
    """A coordinator key type this decoder does not know. Kafka skips such records."""

    def __init__(self, record_type: int, **where):
        super().__init__(f"unknown coordinator record type {record_type}", **where)
        self.record_type = record_type


class UnknownRecordVersionError(DecodeError):
    """A value version outside its schema's range. Kafka fails the partition load on it."""

    def __init__(self, record_type: int, version: int, **where):
        super().__init__(f"unknown value version {version} for coordinator record type {record_type}", **where)
        self.record_type = record_type
        self.version = version

    @property
    def kafka_text(self) -> str:
        """The wording of Kafka's UnknownRecordVersionException."""
        return f"Found an unknown record version {self.version} for {self.record_type} type"
