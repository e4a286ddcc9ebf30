"""Errors raised inside a Spark Python worker, carried to the driver with their kind and place.

A worker's exception reaches the driver only as the text of a Spark exception: a WorkerError
travels there as marked JSON and is read back (WorkerError.found_in) into the same dataclass,
which the driver's ReplayError keeps."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Iterator
from dataclasses import dataclass

from lib.codec.errors import place

ERROR_MARKER = "OFFSETS_LAKE_WORKER_ERROR:"


@dataclass(frozen=True)
class WorkerError:
    """What stopped a worker (kind: the exception class, e.g. DecodeError) and where: the
    segment file, the offsets partition, the log offset of the batch and its byte position."""

    kind: str
    message: str
    file: str | None = None
    partition: int | None = None
    offset: int | None = None
    position: int | None = None
    topic: str | None = None  # a consumed topic's partition (the lag stage); None: the offsets topic

    def exception(self) -> RuntimeError:
        """The exception a worker raises: its text carries this error through Spark."""
        return RuntimeError(ERROR_MARKER + json.dumps(dataclasses.asdict(self)) + ERROR_MARKER)

    @classmethod
    def found_in(cls, exc: BaseException) -> WorkerError | None:
        """The error a worker raised (exception()), read from a Spark exception's text."""
        text = str(exc)
        start = text.find(ERROR_MARKER)
        if start < 0:
            return None
        start += len(ERROR_MARKER)
        end = text.find(ERROR_MARKER, start)
        try:
            payload = json.loads(text[start:end])
            return cls(**payload)
        except (ValueError, TypeError):
            return None

    def describe(self) -> str:
        """One line naming what happened and where."""
        return (
            f"{self.kind}: {self.message} ({place(self.file, self.topic, self.partition, self.offset, self.position)})"
        )


class ReplayError(Exception):
    """A run that stopped on bad input; the message names file, partition and offset, and
    `error` holds them (None for an error the driver found itself)."""

    def __init__(self, message: str, error: WorkerError | None = None):
        super().__init__(message)
        self.error = error


@contextlib.contextmanager
def raising_worker_errors() -> Iterator[None]:
    """Around a Spark job: a worker's WorkerError comes out as a ReplayError that keeps it;
    any other failure as it was."""
    try:
        yield
    except ReplayError:
        raise
    except Exception as e:
        error = WorkerError.found_in(e)
        if error is None:
            raise
        raise ReplayError(error.describe(), error) from None
