"""One writer per warehouse at a time.

Delta's optimistic concurrency protects each table, but a replay writes several tables in
sequence and rolls back an interrupted run's commits on start: two replays interleaving
would undo each other's work. A lock file created exclusively serialises them: O_EXCL on
a local disk; on an object store, a conditional write (PUT with `If-None-Match: *`, which
fails with 412 when the key exists: S3 and S3-compatible stores that implement it). A store
that ignores the condition would let two runs in, so the lock checks it on every acquire (a
second conditional PUT of the lock it just wrote must fail) and refuses to run otherwise. A
lock left by a process that died on this host is taken over (on an object store with
`If-Match` on the lock's ETag, so two newcomers cannot both take it); a live holder makes
the newcomer fail with a message naming it (or wait, if asked to). A lock file that cannot be
read (empty: its writer died between creating it and writing it, or a power loss before the
write reached the disk) is taken over once it is UNREADABLE_GRACE_SECONDS old; a younger one
may be a writer between those two steps, so the newcomer looks again until then."""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import time
from typing import Any

from lib import storage

LOCK_NAME = "_writer.lock"
UNREADABLE = {"pid": None, "host": None, "owner": "unreadable lock file", "since": None}
# A live writer fills its lock file microseconds after creating it: an unreadable one this old
# was left by a writer that died (or lost power) in between.
UNREADABLE_GRACE_SECONDS = 5.0


class WarehouseBusyError(Exception):
    """Another live run holds the warehouse."""


class LockUnsupportedError(Exception):
    """The warehouse's store cannot make one writer exclusive."""


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
        self.warehouse = warehouse
        self.path = storage.join(warehouse, LOCK_NAME)
        self.owner = owner
        self.wait_seconds = wait_seconds
        self.took_over: dict | None = None
        self._store = _ObjectStoreLock(self.path) if storage.is_remote(warehouse) else None

    def _content(self) -> bytes:
        return json.dumps(
            {
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "owner": self.owner,
                "since": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            }
        ).encode()

    def holder(self) -> dict | None:
        if self._store is not None:
            return self._store.holder()[0]
        try:
            with open(self.path) as f:
                return json.load(f)
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return self._unreadable(os.stat(self.path).st_mtime)

    @staticmethod
    def _unreadable(modified: float) -> dict:
        return dict(UNREADABLE, modified=modified)

    def _try_create(self) -> bool:
        if self._store is not None:
            return self._store.create(self._content())
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as f:
            f.write(self._content())
        return True

    def _take_over(self, held: dict) -> bool:
        """Replace a dead holder's lock; False when someone else changed it first."""
        if self._store is not None:
            return self._store.replace(held, self._content())
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        return False  # created again by the next _try_create

    def acquire(self) -> WarehouseLock:
        storage.makedirs(self.warehouse)
        deadline = time.monotonic() + self.wait_seconds
        while True:
            if self._try_create():
                return self
            try:
                held = self.holder()
            except FileNotFoundError:
                held = None
            if held is None:
                continue  # released between our two looks
            unreadable = held.get("owner") == UNREADABLE["owner"]
            if unreadable and time.time() - held["modified"] < UNREADABLE_GRACE_SECONDS:
                time.sleep(0.1)  # perhaps a writer between creating and filling it: look again
                continue
            dead = held.get("host") == socket.gethostname() and held.get("pid") and not _alive(held["pid"])
            if unreadable or dead:
                if self._take_over(held):
                    self.took_over = held
                    return self
                if self._store is None:
                    self.took_over = held
                continue
            if time.monotonic() >= deadline:
                raise WarehouseBusyError(
                    f"warehouse {self.warehouse} is being written by {held.get('owner')} "
                    f"(pid {held.get('pid')} on {held.get('host')}, since {held.get('since')}); "
                    f"nothing was changed. Retry when it has finished (lock file {self.path})"
                )
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))

    def release(self) -> None:
        held = self.holder()
        if held and held.get("pid") == os.getpid() and held.get("owner") == self.owner:
            if self._store is not None:
                self._store.delete()
            else:
                os.unlink(self.path)

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()


class _ObjectStoreLock:
    """The lock as one object, written with S3's conditional PUTs (boto3)."""

    def __init__(self, uri: str):
        self.uri = uri
        self.bucket = storage.bucket_of(uri)
        self.key = uri.split("://", 1)[1].split("/", 1)[1]
        self.client: Any = storage.settings().boto3_client()
        self._etag: str | None = None

    @staticmethod
    def _code(e: Exception) -> str:
        return str(getattr(e, "response", {}).get("Error", {}).get("Code", ""))

    def holder(self) -> tuple[dict | None, str | None]:
        from botocore.exceptions import ClientError

        try:
            got = self.client.get_object(Bucket=self.bucket, Key=self.key)
        except ClientError as e:
            if self._code(e) in ("NoSuchKey", "404", "NotFound"):
                return None, None
            raise
        try:
            return json.loads(got["Body"].read()), got["ETag"]
        except ValueError:
            return WarehouseLock._unreadable(got["LastModified"].timestamp()), got["ETag"]

    def _put(self, body: bytes, **condition: str) -> str | None:
        """The new ETag, or None when the condition failed."""
        from botocore.exceptions import ClientError

        try:
            return self.client.put_object(Bucket=self.bucket, Key=self.key, Body=body, **condition)["ETag"]
        except ClientError as e:
            # 412 PreconditionFailed; 409 ConditionalRequestConflict while another write is in flight
            if self._code(e) in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409"):
                return None
            raise

    def create(self, body: bytes) -> bool:
        etag = self._put(body, IfNoneMatch="*")
        if etag is None:
            return False
        # the condition must have been enforced: the same conditional PUT again must fail
        if self._put(body, IfNoneMatch="*") is not None:
            self.delete()
            raise LockUnsupportedError(
                f"the object store behind {self.uri} ignores conditional writes (PUT with If-None-Match: *), "
                "so it cannot keep a second run out of the warehouse; nothing was changed. Use a store that "
                "enforces them (S3, or an S3-compatible store that implements conditional writes)"
            )
        self._etag = etag
        return True

    def replace(self, held: dict, body: bytes) -> bool:
        """Take over the lock `held` (read just before) only if it is still that object."""
        current, etag = self.holder()
        if current != held or etag is None:
            return False
        new = self._put(body, IfMatch=etag)
        if new is None:
            return False
        self._etag = new
        return True

    def delete(self) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=self.key)
