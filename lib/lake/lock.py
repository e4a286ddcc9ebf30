"""One writer per warehouse at a time.

Delta's optimistic concurrency protects each table, but a replay writes several tables in
sequence and rolls back an interrupted run's commits on start: two replays interleaving
would undo each other's work. A lock file created with O_EXCL serialises them. A lock left
by a process that died on this host is taken over; a live holder makes the newcomer fail
with a message naming it (or wait, if asked to). The lock is a local-filesystem lock: on an
object store, serialise runs in the scheduler instead (the Airflow DAGs do, with one pool)."""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import time

LOCK_NAME = "_writer.lock"


class WarehouseBusyError(Exception):
    """Another live run holds the warehouse."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class WarehouseLock:
    def __init__(self, warehouse: str, owner: str, wait_seconds: float = 0.0):
        self.path = os.path.join(warehouse, LOCK_NAME)
        self.owner = owner
        self.wait_seconds = wait_seconds
        self.took_over: dict | None = None

    def holder(self) -> dict | None:
        try:
            with open(self.path) as f:
                return json.load(f)
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return {"pid": None, "host": None, "owner": "unreadable lock file", "since": None}

    def _try_create(self) -> bool:
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as f:
            json.dump(
                {
                    "pid": os.getpid(),
                    "host": socket.gethostname(),
                    "owner": self.owner,
                    "since": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                },
                f,
            )
        return True

    def acquire(self) -> WarehouseLock:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        deadline = time.monotonic() + self.wait_seconds
        while True:
            if self._try_create():
                return self
            held = self.holder()
            if held is None:
                continue  # released between our two looks
            stale = held.get("host") == socket.gethostname() and held.get("pid") and not _alive(held["pid"])
            if stale:
                self.took_over = held
                try:
                    os.unlink(self.path)
                except FileNotFoundError:
                    pass
                continue
            if time.monotonic() >= deadline:
                raise WarehouseBusyError(
                    f"warehouse {os.path.dirname(self.path)} is being written by {held.get('owner')} "
                    f"(pid {held.get('pid')} on {held.get('host')}, since {held.get('since')}); "
                    f"nothing was changed. Retry when it has finished (lock file {self.path})"
                )
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))

    def release(self) -> None:
        held = self.holder()
        if held and held.get("pid") == os.getpid() and held.get("owner") == self.owner:
            os.unlink(self.path)

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()
