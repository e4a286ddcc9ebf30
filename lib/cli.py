"""What the job CLIs share: exit codes, error reporting, --conf, time and partition arguments."""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import sys
from collections.abc import Callable
from typing import NoReturn

EXIT_BAD_INPUT = 2  # bad arguments or bad input: nothing was changed
EXIT_BUSY = 75  # EX_TEMPFAIL: another run holds the warehouse; retrying later is right


def exit_now(code: int | None) -> NoReturn:
    """Ends a job's process with `code` once its output is flushed, without Python's teardown.
    Arrow's thread pools can still hold a live worker when the interpreter's static destructors
    run just after a Parquet or Delta read, and a joinable std::thread destroyed then aborts the
    process: "terminate called without an active exception", exit -6, after a replay had
    printed its summary and committed every table (CI, and the first run of a fresh clone;
    apache/arrow#39862). By then nothing of the job's is left to tear down: its tables are
    committed and the warehouse lock released; the Spark JVM exits on its own when this
    process's end closes its stdin."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can be said
            pass
    logging.shutdown()
    os._exit(int(code or 0))


def failer(job: str, *, nothing_changed: bool = False) -> Callable[..., int]:
    """The job's `fail(message, code=EXIT_BAD_INPUT)`: prints "JOB: error: ..." (and, for jobs
    that write tables, that no table was changed) and returns the exit code."""

    def fail(message: str, code: int = EXIT_BAD_INPUT) -> int:
        print(f"{job}: error: {message}", file=sys.stderr)
        if nothing_changed:
            print(f"{job}: no table was changed", file=sys.stderr)
        return code

    return fail


def add_conf_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark setting")
    parser.add_argument(
        "--master", help="Spark master, e.g. spark://HOST:7077 (same as --conf spark.master=...; client mode)"
    )


def add_fetch_max_bytes_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--fetch-max-bytes",
        type=int,
        metavar="BYTES",
        help="with --bootstrap-servers: the size limit of each Fetch (default 8 MiB); a record batch larger "
        "than it still comes whole (KIP-74)",
    )


def fetch_max_bytes_error(args: argparse.Namespace) -> str | None:
    """What is wrong with --fetch-max-bytes as given, if anything."""
    if args.fetch_max_bytes is not None and (args.fetch_max_bytes < 1 or not args.bootstrap_servers):
        return "--fetch-max-bytes takes a positive size, with --bootstrap-servers"
    return None


def spark_overrides(pairs: list[str], master: str | None = None) -> dict[str, str]:
    """--conf KEY=VALUE arguments (and --master) as Spark settings; ValueError names a
    malformed one."""
    out = {"spark.master": master} if master else {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--conf wants KEY=VALUE, got {pair!r}")
        out[key.strip()] = value
    return out


def parse_time_ms(text: str | None) -> int:
    """Epoch milliseconds, or an ISO-8601 time (UTC unless it names a zone); default now."""
    if text is None or text == "":
        return int(dt.datetime.now(dt.UTC).timestamp() * 1000)
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"not epoch milliseconds or an ISO-8601 time: {text!r}") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return int(t.timestamp() * 1000)


def parse_partitions(text: str | None) -> list[int] | None:
    if not text:
        return None
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if "-" in part:
            lo, hi = part.split("-", 1)
            out.extend(range(int(lo), int(hi) + 1))
        elif part:
            out.append(int(part))
    return sorted(set(out))


def format_ms(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat().replace("+00:00", "Z")


def format_duration_ms(ms: int) -> str:
    """A span for people: '4d 2h 13m', '2h 5m', '3m 20s', '12.3s'."""
    if ms < 60_000:
        return f"{ms / 1000:.1f}s"
    minutes, seconds = divmod(ms // 1000, 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}d {hours}h {minutes}m"
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m {seconds}s"
