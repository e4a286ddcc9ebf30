"""Errors raised inside a Spark Python worker, carried to the driver as text.

A worker's exception reaches the driver only as the text of a Spark exception; a marked JSON
payload keeps the error's kind and its location (file, partition, offset, position)."""

from __future__ import annotations

import json

ERROR_MARKER = "OFFSETS_LAKE_WORKER_ERROR:"


def worker_error(kind: str, message: str, **where) -> RuntimeError:
    """An exception whose text carries a machine-readable description through Spark."""
    payload = {"kind": kind, "message": message, **where}
    return RuntimeError(ERROR_MARKER + json.dumps(payload) + ERROR_MARKER)


def worker_error_from(exc: BaseException) -> dict | None:
    """The error a Python worker reported (see worker_error), found in a Spark exception's text."""
    text = str(exc)
    start = text.find(ERROR_MARKER)
    if start < 0:
        return None
    start += len(ERROR_MARKER)
    end = text.find(ERROR_MARKER, start)
    try:
        return json.loads(text[start:end])
    except ValueError:
        return None


class ReplayError(Exception):
    """A run that stopped on bad input; the message names file, partition and offset."""


def describe_worker_error(info: dict) -> str:
    """A worker's error (worker_error_from) as one line naming where it happened."""
    where = []
    if info.get("file") is not None:
        where.append(f"file {info['file']}")
    if info.get("partition") is not None:
        where.append(f"partition {info['partition']}")
    if info.get("offset") is not None:
        where.append(f"log offset {info['offset']}")
    if info.get("position") is not None:
        where.append(f"byte position {info['position']}")
    return f"{info.get('kind', 'DecodeError')}: {info['message']} ({', '.join(where)})"
