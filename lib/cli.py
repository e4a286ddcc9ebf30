"""Argument helpers shared by the jobs."""

from __future__ import annotations

import datetime as dt


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
